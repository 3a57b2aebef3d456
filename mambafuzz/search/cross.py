"""A GPU finding checked on the CPU: the race recorder's witness, a deterministic shrink, the GPU's word.

A race on a GPU shows in some repetitions only; Triton's interpreter runs the
same kernel with every load and store recorded, so the same case there gives a
hazard with the lanes that collide, the same every time.  ``cpu_witness`` runs
the case in a child process (the child is interpreted: Triton fixes that when
the kernel module is imported) in race mode, and when the recorder sees the
failure, shrinks the case there with the same reduction the fuzz loop uses,
now deterministic.  The fuzz loop then runs the CPU-shrunk case on the GPU
again (``flaky.measure``): a smaller case is adopted only if the GPU fails on
it too, and the finding carries both rates.

The child answers with one line, ``MARKER`` + JSON, on stdout (a user's kernel
may print too).  It is ``unavailable`` (never a verdict against the kernel)
when the interpreter cannot run it (inline PTX, ``blame.KNOWN_LIMITS``),
when the target cannot be imported in a fresh process, or when the child dies
or outlives its time.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from mambafuzz.contracts import case_from_json
from mambafuzz.control.clock import Deadline
from mambafuzz.control.exits import exit_code
from mambafuzz.errors import CaseError, Inconclusive, InternalError, Rejected, UsageError
from mambafuzz.judge.engine import run_case
from mambafuzz.judge.materialize import Mismatch
from mambafuzz.findings.witness import NOT_WITNESSED, UNAVAILABLE, WITNESSED, Witness  # noqa: F401 - cross.Witness, as before
from mambafuzz.search.reduce import reduce_case, same_value_only

MARKER = "MAMBAFUZZ-CROSS "


def _request(target, case, shrink_seconds: float, compiled=None, options: dict | None = None) -> dict[str, Any]:
    from mambafuzz.control.targets import user_info  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    info = user_info(target.name) or {}
    return {"target": target.name, "contract": case.contract, "overlap": getattr(target, "overlap", "full"),
            "target_path": info.get("target_path"), "case": case.to_json(), "shrink_seconds": shrink_seconds,
            **({"compiled": compiled.to_json()} if compiled is not None else {}),
            "options": {k: v for k, v in (options or {}).items() if isinstance(v, (str, int, bool))}}


def cpu_witness(target, case, *, timeout: float = 120.0, shrink_seconds: float = 30.0,
                compiled=None, options: dict | None = None) -> Witness:
    """Run `case` on `target` under the CPU race recorder in a child; never raises.

    `compiled`: the GPU verdict's ``Mismatch`` on this case; the child says where the interpreted
    values differ from it (``Witness.divergence``).  `options`: the run's contract options, which the
    child's shrinking keeps to (``Contract.admits``)."""
    start = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MAMBAFUZZ_DEVICE")}
    env["TRITON_INTERPRET"] = "1"
    env["MAMBAFUZZ_DEVICE"] = "cpu"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the child needs no GPU, and must not touch the parent's context
    try:
        request = json.dumps(_request(target, case, min(shrink_seconds, max(1.0, timeout - 10)), compiled,
                                      options))
        proc = subprocess.run([sys.executable, "-m", "mambafuzz.search.cross"], input=request, capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Witness(UNAVAILABLE, why=f"the CPU child did not answer within {timeout:g} s",
                       seconds=time.monotonic() - start)
    except Exception as exc:  # noqa: BLE001 - a witness that cannot be had is not a verdict
        return Witness(UNAVAILABLE, why=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - start)
    answer = [ln[len(MARKER):] for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if not answer:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return Witness(UNAVAILABLE, why=f"the CPU child exited {proc.returncode} without an answer: {tail}",
                       seconds=time.monotonic() - start)
    try:
        witness = Witness.from_json(json.loads(answer[-1]))
    except ValueError as exc:
        return Witness(UNAVAILABLE, why=f"the CPU child's answer is unreadable: {exc}",
                       seconds=time.monotonic() - start)
    witness.seconds = time.monotonic() - start
    return witness


def _same_failure(first, verdict) -> bool:
    """Shrinking on the CPU keeps the kind of evidence: a hazard stays a hazard (one that can change
    bytes stays one: ``reduce.same_value_only``), wrong bytes stay wrong."""
    if not verdict.failed:
        return False
    if first.hazards:
        return bool(verdict.hazards) and (same_value_only(first) or not same_value_only(verdict))
    return verdict.kind == first.kind


def _child_answer(request: dict[str, Any]) -> Witness:
    """In the child: judge the case in race mode on the CPU and shrink it while the hazard stays."""
    from mambafuzz.control import device  # deferred: it notes TRITON_INTERPRET as the process had it when first imported
    from mambafuzz.control.targets import resolve_one  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    try:
        device.select("cpu")
        target = resolve_one(request["target"], contract=request["contract"], overlap=request["overlap"],
                             target_path=request.get("target_path"))
        case = case_from_json(request["case"])
        compiled = Mismatch.from_json(request["compiled"]) if request.get("compiled") else None
        first = run_case(target.fn, case, "cpu", mode="race", compiled=compiled)
    except (UsageError, CaseError) as exc:
        return Witness(UNAVAILABLE, why=f"cannot run it on the CPU: {exc}")
    except (Inconclusive, InternalError, Rejected) as exc:  # Rejected: the target declines it on the CPU
        return Witness(UNAVAILABLE, why=str(exc).splitlines()[0])
    divergence = first.divergence or ""
    if not first.failed:
        return Witness(NOT_WITNESSED, summary=first.summary(), verdict=first.to_json(), divergence=divergence)
    shrink = Deadline(float(request.get("shrink_seconds", 30.0))).started()  # the parent's clock.witness share
    best = {"verdict": first}

    def still_fails(smaller) -> bool:
        try:
            verdict = run_case(target.fn, smaller, "cpu", mode="race")
        except (CaseError, Inconclusive, InternalError, Rejected):
            return False
        if _same_failure(first, verdict):
            best["verdict"] = verdict
            return True
        return False

    shrunk, _ = reduce_case(case, still_fails, lambda: not shrink.over(), options=request.get("options"))
    return Witness(WITNESSED, summary=first.summary(), verdict=first.to_json(), cpu_case=shrunk.to_json(),
                   cpu_summary=shrunk.describe(), cpu_size=list(shrunk.size), divergence=divergence)


def main() -> int:
    try:
        request = json.loads(sys.stdin.read())
        witness = _child_answer(request)
    except Exception as exc:  # noqa: BLE001 - the parent reads any failure as 'unavailable'
        witness = Witness(UNAVAILABLE, why=f"internal error in the CPU child: {type(exc).__name__}: {exc}")
    sys.stdout.write(MARKER + json.dumps(witness.to_json()) + "\n")
    sys.stdout.flush()
    return exit_code(["done"])


if __name__ == "__main__":
    sys.exit(main())

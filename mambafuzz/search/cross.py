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
from dataclasses import dataclass
from typing import Any

from mambafuzz.report.outcome import WORKER_DONE

from mambafuzz.contracts import case_from_json
from mambafuzz.errors import CaseError, Inconclusive, InternalError, Rejected, UsageError
from mambafuzz.judge.engine import run_case
from mambafuzz.judge.materialize import Mismatch
from mambafuzz.search.reduce import reduce_case, same_value_only

MARKER = "MAMBAFUZZ-CROSS "
WITNESSED, NOT_WITNESSED, UNAVAILABLE = "witnessed", "not-witnessed", "unavailable"


@dataclass
class Witness:
    """What the CPU said about a GPU finding, and what the GPU said about the CPU's smaller case."""

    status: str                          # one of WITNESSED, NOT_WITNESSED, UNAVAILABLE
    why: str = ""                        # unavailable: the one-line reason
    summary: str = ""                    # the CPU verdict's summary (the hazard, or the differing bytes)
    verdict: dict | None = None          # the CPU verdict on the GPU's case (JSON)
    cpu_case: dict | None = None         # the CPU-shrunk case (JSON), when witnessed
    cpu_summary: str = ""
    cpu_size: list | None = None         # Case.size of the CPU-shrunk case
    gpu_rate: list | None = None         # [k, n] of the CPU-shrunk case back on the GPU
    adopted: bool = False                # the CPU-shrunk case failed on the GPU and became the finding
    divergence: str = ""                 # interpreted values that differ from the GPU's on its case (one line)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "Witness":
        if not isinstance(body, dict) or body.get("status") not in (WITNESSED, NOT_WITNESSED, UNAVAILABLE):
            raise ValueError(f"not a CPU witness: {body!r:.80}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in body.items() if k in known})

    def line(self) -> str:
        """One line for tables and reports."""
        if self.status == UNAVAILABLE:
            return f"CPU witness unavailable: {self.why}"
        if self.status == NOT_WITNESSED:
            return "CPU race check: clean on this case (the GPU failure is not reproduced by the interpreter)"
        text = f"CPU race check: {self.summary}"
        if self.gpu_rate is not None:
            k, n = self.gpu_rate
            text += f"; CPU-shrunk case ({self.cpu_summary}) on the GPU: {k}/{n} failed"
            text += " (adopted)" if self.adopted else ""
        return text


def _request(target, case, shrink_seconds: float, compiled=None) -> dict[str, Any]:
    from mambafuzz.cli.targets import user_info

    info = user_info(target.name) or {}
    return {"target": target.name, "contract": case.contract, "overlap": getattr(target, "overlap", "full"),
            "target_path": info.get("target_path"), "case": case.to_json(), "shrink_seconds": shrink_seconds,
            **({"compiled": compiled.to_json()} if compiled is not None else {})}


def cpu_witness(target, case, *, timeout: float = 120.0, shrink_seconds: float = 30.0,
                compiled=None) -> Witness:
    """Run `case` on `target` under the CPU race recorder in a child; never raises.

    `compiled`: the GPU verdict's ``Mismatch`` on this case; the child says where the interpreted
    values differ from it (``Witness.divergence``)."""
    start = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MAMBAFUZZ_DEVICE")}
    env["TRITON_INTERPRET"] = "1"
    env["MAMBAFUZZ_DEVICE"] = "cpu"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the child needs no GPU, and must not touch the parent's context
    try:
        request = json.dumps(_request(target, case, min(shrink_seconds, max(1.0, timeout - 10)), compiled))
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
    from mambafuzz.run import device
    from mambafuzz.cli.targets import resolve_one

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
    end = time.monotonic() + float(request.get("shrink_seconds", 30.0))
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

    shrunk, _ = reduce_case(case, still_fails, lambda: time.monotonic() <= end)
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
    return WORKER_DONE


if __name__ == "__main__":
    sys.exit(main())

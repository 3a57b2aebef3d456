"""What a 32-bit slot offset does on a GPU: the prefill I32 zoo rows run once on each far case a seeded draw gives.

For every drawn exact case whose far slot (one a correct prefill reads or stores) starts past 2^31 elements,
the row's kernel and the correct Triton kernel each run once (``engine.run_case``); the line says how the row
was judged, whether the far slot was read, stored or both, and where the wrapped address lies: inside one of
torch's allocator segments on the card (mapped: no fault, the bytes of some other tensor) or outside all of
them (a fault).  Why: the H100's amplified zoo once missed DP-I32 over 10 far cases.

    python bench/far_slot_probe.py --device cuda --cases 12 --out far_slot_probe.jsonl
A case judged anything but a pass on the GPU ends the process (a fault leaves no CUDA context): exit 3 and
"next N" on the last line, to go on with ``--start N`` in a new one; exit 0 after the last case.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ROWS = {"ssm_prefill": "zoo.SP-I32", "delta_prefill": "zoo.DP-I32"}


def far_cases(contract: str, n: int, draws: int) -> list:
    """Up to `n` seeded gpu-amp draws whose touched far slot starts past 2^31 elements."""
    from hypothesis import HealthCheck, Phase, given, settings

    from mambafuzz import contracts

    spec, out = contracts.get(contract), []

    @settings(max_examples=draws, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract, "gpu-amp"))
    def collect(case):
        if len(out) < n and spec.features(case).get("past_2g_elements") == "yes":
            out.append(case)

    collect()
    return out


def roles(spec, case) -> tuple[int, list[str]]:
    """The far slot and what a correct prefill does with it."""
    _, live = spec.row_features(case, lambda n: "")
    reads = [row[init] for b, row, _, (init, _, _), _, _ in live if case.has_init[b]]
    stores = [row[c] for _, row, *_, st in live for c in st if row[c] != case.pad]
    top = max(reads + stores)
    return top, [r for r, hit in (("read", top in reads), ("store", top in stores)) if hit]


def segment_of(address: int, segments) -> str:
    for s in segments:
        if s["address"] <= address < s["address"] + s["total_size"]:
            return f"segment of {s['total_size'] >> 20} MiB at +{(address - s['address']) >> 20} MiB"
    return "unmapped by torch"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--cases", type=int, default=12)
    p.add_argument("--draws", type=int, default=400)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--start", type=int, default=0, help="the first case to run (after a fault ended a process)")
    p.add_argument("--out", type=Path, default=None, help="JSON lines, appended")
    a = p.parse_args()
    from mambafuzz.control import device as run_device

    run_device.select(a.device)
    import torch

    from mambafuzz import contracts
    from mambafuzz.errors import MambafuzzError
    from mambafuzz.judge.engine import run_case
    from mambafuzz.judge.materialize import materialize
    from mambafuzz.kernels import registry

    todo = [(contract, row, case) for contract, row in ROWS.items()
            for case in far_cases(contract, a.cases, a.draws)]
    for i, (contract, row, case) in enumerate(todo):
        if i < a.start:
            continue
        spec = contracts.get(contract)
        top, what = roles(spec, case)
        e = top * (case.slot_stride // case.elem)
        wrapped = (e + (1 << 31)) % (1 << 32) - (1 << 31)
        line = {"i": i, "contract": contract, "row": row, "case": case.describe(), "far_slot": top,
                "roles": what, "dtype": case.dtype}
        if a.device == "cuda":
            m = materialize(case, a.device)
            base = m.arena.data_ptr() + case.offset
            del m
            line["wrapped_at"] = segment_of(base + wrapped * case.elem, torch.cuda.memory_snapshot())
        for name in (row, f"triton.{contract}"):
            t0 = time.perf_counter()
            try:
                v = run_case(registry.get(name).fn, case, a.device, reps=a.reps)
                line[name] = v.kind or "pass"
            except MambafuzzError as exc:
                line[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            line[name + " s"] = round(time.perf_counter() - t0, 2)
            if line[name] != "pass" and a.device == "cuda":  # a fault leaves no context: go on in a new process
                break
        print(json.dumps(line), flush=True)
        if a.out:
            with a.out.open("a") as f:
                f.write(json.dumps(line) + "\n")
        if any(str(line.get(k)) != "pass" for k in (row, f"triton.{contract}")) and a.device == "cuda":
            if i + 1 < len(todo):
                print(f"next {i + 1}", flush=True)
                return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

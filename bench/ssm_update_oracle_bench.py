"""Judging one `ssm_update` case against running the reference on it, for engine-sized batches of 256 rows.

Per shape: a case built directly (fp32 pool of its own, separate dst, spec decode with every row's
tokens stored), then in one process: the judge's share (``materialize``: fill, the numpy oracle,
the tensors; ``compare``) and the reference's run on the same case, ``triton.ssm_update`` compiled
with ``--device cuda``, else the torch path on the CPU (the interpreter would take minutes).  Issue
28 asks that judging a 256-row spec-decode batch not be what bounds a GPU fuzz session.

    python bench/ssm_update_oracle_bench.py [--device cuda] [--out bench/results/ssm_update_oracle.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = [  # (rows, heads, dim, dstate, tokens per row, spec)
    (256, 4, 64, 128, 4, True), (256, 8, 64, 64, 1, False), (256, 2, 64, 128, 2, True),
]


def make_case(rows, heads, dim, dstate, tokens, spec):
    from mambafuzz.cases.ssm_update import SsmUpdateCase

    cols = max(tokens, 1)
    src = tuple(tuple(1 + b * cols + c for c in range(cols)) for b in range(rows))
    dst = tuple(tuple(1 + rows * cols + b * cols + c for c in range(cols)) for b in range(rows))
    slots = 1 + 2 * rows * cols
    return SsmUpdateCase(
        arena_size=64, dtype="float32", io_dtype="bfloat16", offset=0, slots=slots, heads=heads, groups=1,
        dim=dim, dstate=dstate, slot_stride=heads * dim * dstate * 4, lens=(tokens,) * rows, src=src, dst=dst,
        idx_row_stride=cols,
        nacc=tuple(1 + b % cols for b in range(rows)) if spec else None, varlen=tokens != 1, softplus=True)


def measure(case, device, fn, repeat=3):
    import torch
    from mambafuzz.judge.materialize import materialize

    best_judge, best_run = float("inf"), float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        m = materialize(case, device)
        judged = time.perf_counter() - t0
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        m.run(fn)
        if device == "cuda":
            torch.cuda.synchronize()
        ran = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert m.compare() is None, m.compare().summary()
        judged += time.perf_counter() - t0
        best_judge, best_run = min(best_judge, judged), min(best_run, ran)
    return best_judge, best_run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    from mambafuzz.control import device as run_device

    run_device.select(args.device)
    from mambafuzz.kernels import registry

    target = registry.get("triton.ssm_update" if args.device == "cuda" else "torch.ssm_update")
    results = []
    print(f"ssm_update: judging one case vs running {target.name} ({args.device}, {os.cpu_count()} cores, "
          f"python {platform.python_version()})")
    print("| rows | H | D | N | tokens | spec | judge ms | reference ms | judge / reference |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for shape in SHAPES:
        judge, ran = measure(make_case(*shape), args.device, target.fn)
        rows, heads, dim, dstate, tokens, spec = shape
        results.append({"rows": rows, "heads": heads, "dim": dim, "dstate": dstate, "tokens": tokens,
                        "spec": spec, "judge_s": judge, "reference_s": ran, "reference": target.name})
        print(f"| {rows} | {heads} | {dim} | {dstate} | {tokens} | {'yes' if spec else 'no'} | {judge * 1e3:.0f} | "
              f"{ran * 1e3:.1f} | {judge / ran:.2f} |", flush=True)
    out = args.out or ROOT / "bench" / "results" / f"ssm_update_oracle_{args.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": args.device, "results": results}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

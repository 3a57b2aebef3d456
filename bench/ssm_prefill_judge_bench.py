"""Judging a 16-request, 2048-token ssm_prefill batch on a GPU: the oracle on the device against on the host.

Per shape, a case built directly (prefix caching, rows starting mid-chunk, a block boundary every
``Bs`` tokens, a pool of its own), then in one process, the two arms alternating: ``materialize`` (the
values, the float64 oracle, the tensors) plus one ``compare`` (the judge's share of an example), one
launch of the reference kernel, and the whole example as the engine runs it (``run_case`` at `--reps`
repetitions).  Arms: the oracle on the case's device (the contract's default) and the baseline, the
same code with the oracle's inputs on the host (numpy).  Best of `--repeat`; every run is judged
correct.

    python bench/ssm_prefill_judge_bench.py --device cuda --out bench/results/ssm_prefill_judge_h200.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _contract_bench import OracleTimer, commit as head, host_arm, measure, on_device  # noqa: E402

SHAPES = [  # rows, tokens a row (about: rows start mid-chunk), heads, headdim, dstate, state, io, block size
    (16, 128, 8, 64, 128, "float32", "bfloat16", 64),     # 16 requests, about 2048 tokens
    (16, 128, 24, 64, 128, "float32", "bfloat16", 128),   # Mamba2-2.7B-sized heads
    (4, 512, 8, 64, 128, "bfloat16", "bfloat16", 256),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch, sync, name = on_device(args.device)

    from mambafuzz.kernels import registry
    from ssm_prefill_tolerance import make_case

    from mambafuzz.contracts import ssm_prefill

    switch = host_arm(ssm_prefill)
    timer = OracleTimer(ssm_prefill, "expect_ssm_prefill", sync)
    kind = "triton" if args.device == "cuda" else "torch"
    commit = head()
    print(f"ssm_prefill judge: oracle on the device vs on the host ({name}, torch {torch.__version__}, "
          f"python {platform.python_version()}, commit {commit}, {args.reps} reps)")
    print("| shape | tokens | arm | judge ms | oracle ms | kernel ms | example ms |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    results = []
    fn = registry.get(f"{kind}.ssm_prefill").fn
    for k, shape in enumerate(SHAPES):
        case = make_case(*shape)
        measure(case, fn, args.device, 1, 1, sync)  # compiles
        row = {"shape": list(shape), "tokens": sum(case.lens)}
        for host in ((False, True) if k % 2 == 0 else (True, False)):
            switch(host)
            best = measure(case, fn, args.device, args.reps, args.repeat, sync, oracle=timer)
            arm = "host" if host else "device"
            row[arm] = best
            print(f"| {shape} | {sum(case.lens)} | {arm} | {best['judge_s'] * 1e3:.1f} | {best['oracle_s'] * 1e3:.1f} "
                  f"| {best['kernel_s'] * 1e3:.2f} "
                  f"| {best['example_s'] * 1e3:.1f} |", flush=True)
        switch(False)
        results.append(row)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": name, "commit": commit, "reps": args.reps, "results": results},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

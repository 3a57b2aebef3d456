"""Judging a 16-sequence, 2048-token delta_prefill batch on a GPU: the oracle's share of an example.

Per shape, a case built directly (16 sequences of 128 tokens, K = V = 128, a block boundary every 64
tokens with prefix caching, or none), in one process: ``materialize`` (the values, the float64 oracle
scan with its bound, the tensors; on a GPU the oracle runs there, torch float64), one ``compare``, one
launch of the reference kernel (the chunked Triton kernel; ``--device cpu``: the torch path), and the
whole example as a fuzz run judges it (``run_case`` at `--reps` repetitions).  Best of `--repeat`;
every run must be judged correct.

    python bench/delta_prefill_judge_bench.py --device cuda --out bench/results/delta_prefill_judge_h200.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _contract_bench import OracleTimer, commit as head, measure, on_device  # noqa: E402

SHAPES = [  # (sequences, tokens each, H, HV, K = V, kda, prefix caching)
    (16, 128, 4, 8, 128, False, True), (16, 128, 4, 8, 128, True, True), (16, 128, 4, 8, 128, False, False),
]


def case_for(seqs, tokens, heads, value_heads, dim, kda, apc):
    from mambafuzz.cases.delta_prefill import DeltaPrefillCase

    bs = 64
    cols = tokens // bs + 2 if apc else 1
    idx = tuple(tuple(n * cols + c for c in range(cols)) for n in range(seqs))
    columns = dict(apc=True, block_size=bs, init=(1,) * seqs, first=(2,) * seqs, last=(1 + tokens // bs,) * seqs,
                   computed=(2 * bs,) * seqs) if apc else {}
    return DeltaPrefillCase(
        arena_size=64, dtype="float32", act_dtype="bfloat16", layout="vk", slots=seqs * cols, heads=heads,
        group=value_heads // heads, key_dim=dim, value_dim=dim, lens=(tokens,) * seqs, idx=idx,
        has_init=(True,) * seqs, idx_2d=cols > 1, idx_stride=cols, kda=kda, l2norm=True, **columns)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch, sync, name = on_device(args.device)

    from mambafuzz.contracts import delta_prefill
    from mambafuzz.kernels import registry

    timer = OracleTimer(delta_prefill, "expect_delta_prefill", sync)
    fn = registry.get("triton.delta_prefill" if args.device == "cuda" else "torch.delta_prefill").fn
    commit = head()
    print(f"delta_prefill judge ({name}, torch {torch.__version__}, python {platform.python_version()}, "
          f"commit {commit}, {args.reps} reps)")
    print("| shape | materialize ms | of which the oracle | compare ms | kernel ms | example ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    results = []
    for shape in SHAPES:
        case = case_for(*shape)
        measure(case, fn, args.device, 1, 1, sync)  # compiles
        got = measure(case, fn, args.device, args.reps, args.repeat, sync, split=True, oracle=timer)
        results.append({"shape": list(shape), **got})
        print(f"| {shape} | {got['materialize_s'] * 1e3:.1f} | {got['oracle_s'] * 1e3:.1f} | {got['compare_s'] * 1e3:.1f} | "
              f"{got['kernel_s'] * 1e3:.2f} | {got['example_s'] * 1e3:.0f} |", flush=True)
    doc = {"what": __doc__.splitlines()[0], "device": name, "torch": torch.__version__, "commit": commit,
           "reps": args.reps, "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "results": results}
    out = args.out or ROOT / "bench" / "results" / f"delta_prefill_judge_{args.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

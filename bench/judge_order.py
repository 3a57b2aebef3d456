"""A large batch's judge, side by side: the changed chunks' order, the walk's grid, an idle GPU before the batch.

The engine's chunks judge (``gpu_reps.chunk_plan``) reads the changed chunks
from the highest down, and a launch loop walks the others (in full
repetitions) on a program per chunk (``ChunkCheck.walk``).  This script runs
``gpu_reps.run_reps(graph=False)`` on ``gpu_bench``'s two large
region-to-region cases with the judge built each way (the engine's, the
changed chunks in address order, the walk on ``STRIDE_PROGRAMS`` programs),
alternately in one process, and gives each one's useful traffic (2 x copied
bytes a repetition) as a share of a device-to-device ``copy_``, as
``gpu_bench`` does.  ``--idle-ms`` leaves the GPU idle that long before each
timed call, as the engine's host work (drawing, materialising, the oracle)
leaves it between examples; 0 times back-to-back calls.

    TRITON_INTERPRET=0 python bench/judge_order.py [--reps 50] [--idle-ms 0 200] [--out FILE]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, reference_copy, require_compiled_gpu, warm_median_us  # noqa: E402


def variants(m, gpu_reps, ChunkCheck, np):
    """label -> a ``gpu_reps._Buffers`` judging `m`: the engine's, and the two it is measured against."""
    engine = gpu_reps._Buffers.of(m, "chunks")
    plan, chk = engine.plan, engine.check
    hot, cold = plan.order[:plan.n_check], plan.order[plan.n_check:]

    def built(order, strided_walk=False):
        b = gpu_reps._Buffers.__new__(gpu_reps._Buffers)
        b.plan, b.judge, b._work = plan, "chunks", None
        b.check = ChunkCheck(m.arena, chk.expected, chk.snapshot, order, plan.n_check, plan.n_restore,
                             full_every=gpu_reps.FULL_EVERY)
        if strided_walk:  # a full repetition's walk on STRIDE_PROGRAMS programs, as a graph's
            b.check._wide_grid = b.check._walk_grid
        return b

    return {
        "engine: changed chunks from the highest down, a full walk on a program per chunk": engine,
        "changed chunks in address order": built(np.concatenate([hot[::-1], cold])),
        "the walk on STRIDE_PROGRAMS programs": built(plan.order, strided_walk=True),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50, help="repetitions a call (default 50, gpu_bench's)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    ap.add_argument("--idle-ms", type=float, nargs="+", default=[0.0, 200.0],
                    help="GPU idle before each timed call, ms (default 0 200)")
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    args = ap.parse_args(argv)
    torch = require_compiled_gpu("judge_order", force_compiled=True)
    import numpy as np

    from gpu_bench import disjoint_rows
    from mambafuzz.judge import gpu_reps
    from mambafuzz.kernels import registry
    from mambafuzz.judge.check import ChunkCheck
    from mambafuzz.judge.materialize import materialize

    _, ref_bw = reference_copy(1024, warm_median_us)
    out = Report("judge_order")
    out.header("a large batch's judge, side by side", argv)
    out(f"- run_reps(graph=False), N = {args.reps}, {args.rounds} alternating rounds, median (min-max); "
        f"reference copy_ of 1 GiB: {ref_bw / 1e9:.0f} GB/s (read + write)")
    out()
    fn = registry.get("triton.batch_memcpy").fn
    for rows, size in ((64, 4 << 20), (256, 1 << 20)):
        case = disjoint_rows(rows, size)
        m = materialize(case, "cuda")
        copied = sum(c[2] for c in case.copies)
        key = ("chunks", None, gpu_reps.FULL_EVERY)
        judges = variants(m, gpu_reps, ChunkCheck, np)
        cache = m.__dict__["_gpu_reps_buffers"]
        out.table(f"{rows} rows x {size >> 20} MiB, region to region: useful % of copy_",
                  ["judge"] + [f"idle {ms:g} ms before" for ms in args.idle_ms], "l" + "r" * len(args.idle_ms))
        rates = {(label, ms): [] for label in judges for ms in args.idle_ms}
        for b in judges.values():  # compile, warm up
            cache[key] = b
            gpu_reps.run_reps(m, fn, args.reps, graph=False)
        for _ in range(args.rounds):
            for ms in args.idle_ms:
                for label, b in judges.items():
                    cache[key] = b
                    m.restore()
                    torch.cuda.synchronize()
                    time.sleep(ms / 1e3)
                    t0 = time.perf_counter()
                    r = gpu_reps.run_reps(m, fn, args.reps, graph=False)
                    torch.cuda.synchronize()
                    rates[label, ms].append(2 * copied * args.reps / (time.perf_counter() - t0) / ref_bw)
                    if r.failures:
                        raise SystemExit(f"judge_order: {label}: a correct copy failed {r.failures} repetitions")
        for label in judges:
            cells = [rates[label, ms] for ms in args.idle_ms]
            out(f"| {label} | " + " | ".join(f"{statistics.median(v):.1%} ({min(v):.1%}-{max(v):.1%})"
                                              for v in cells) + " |")
        out()
        cache[key] = judges[next(iter(judges))]
        del m, judges, cache
        torch.cuda.empty_cache()
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

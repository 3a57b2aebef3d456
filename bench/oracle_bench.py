"""Throughput of the numpy oracle against a plain numpy copy of the same arena.

Every expectation the oracle builds is a full arena (a new array), so the
natural yardstick is ``snapshot.copy()`` of that arena, timed in the same
run: each repetition times the oracle call and the plain copy back to back
(alternating which goes first), and the table reports medians.

    python bench/oracle_bench.py              # 256 MiB arenas
    python bench/oracle_bench.py --quick      # 8 MiB arenas, for CI / a smoke run
    python bench/oracle_bench.py --markdown   # a table for bench/RESULTS.md

Cases:
  (a) one large memmove with left overlap (expect_memmove)
  (b) expect_batch, many rows, well-posed (each row a left-overlapping shift
      inside its own slot; rows in shuffled order), check=True
  (c) the same batch with check=False (the conflict check's cost is (b) vs (c))
  (d) the same arena cut into 16x more, smaller rows (per-copy overhead)
The target is ratio >= 0.5 (the oracle at least half as fast as a plain copy).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mambafuzz import oracle  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


def _time(fn) -> float:
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    del out
    return dt


def measure(fn, baseline, reps: int) -> tuple[float, float]:
    """Median seconds of ``fn`` and of ``baseline``, alternated within each repetition."""
    fn(), baseline()  # warm-up: first-touch effects, caches
    ts, tb = [], []
    for r in range(reps):
        if r % 2:
            tb.append(_time(baseline))
            ts.append(_time(fn))
        else:
            ts.append(_time(fn))
            tb.append(_time(baseline))
    return statistics.median(ts), statistics.median(tb)


def batch_rows(rows: int, row_bytes: int, shift: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row i moves ``row_bytes - shift`` bytes left by ``shift`` inside slot perm[i] (well-posed)."""
    slots = rng.permutation(rows).astype(np.int64) * row_bytes
    return slots + shift, slots, np.full(rows, row_bytes - shift, dtype=np.int64)


def run(arena_bytes: int, rows: int, reps: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    snap = np.frombuffer(rng.bytes(arena_bytes), dtype=np.uint8).copy()
    snap.flags.writeable = False
    baseline = snap.copy
    results = []

    def add(case, fn):
        t_or, t_np = measure(fn, baseline, reps)
        results.append({"case": case, "oracle_s": t_or, "numpy_s": t_np,
                        "oracle_gbs": arena_bytes / t_or / 1e9, "numpy_gbs": arena_bytes / t_np / 1e9,
                        "ratio": t_np / t_or})

    shift = 4096 + 8
    add(f"(a) memmove left overlap, {(arena_bytes - shift) / MiB:.0f} MiB by {shift} B",
        lambda: oracle.expect_memmove(snap, 0, shift, arena_bytes - shift))

    row_bytes = arena_bytes // rows
    src, dst, sizes = batch_rows(rows, row_bytes, 16, rng)
    # sanity: the result is what the contract says (first and last row in address order)
    out = oracle.expect_batch(snap, src, dst, sizes)
    for i in (int(np.argmin(dst)), int(np.argmax(dst))):
        assert np.array_equal(out[dst[i]:dst[i] + sizes[i]], snap[src[i]:src[i] + sizes[i]])
    del out
    label = f"{rows} rows x {row_bytes // KiB} KiB"
    add(f"(b) expect_batch {label}, check=True", lambda: oracle.expect_batch(snap, src, dst, sizes))
    add(f"(c) expect_batch {label}, check=False",
        lambda: oracle.expect_batch(snap, src, dst, sizes, check=False))

    many = rows * 16
    src, dst, sizes = batch_rows(many, arena_bytes // many, 16, rng)
    add(f"(d) expect_batch {many} rows x {arena_bytes // many // KiB} KiB, check=True",
        lambda: oracle.expect_batch(snap, src, dst, sizes))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 MiB arenas, 256 rows (a smoke run)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per case (default 9, quick 5)")
    ap.add_argument("--arena-mib", type=int, default=None, help="arena size in MiB (default 256, quick 8)")
    ap.add_argument("--rows", type=int, default=None, help="rows of the batch cases (default 4096, quick 256)")
    args = ap.parse_args(argv)
    arena_mib = args.arena_mib or (8 if args.quick else 256)
    rows = args.rows or (256 if args.quick else 4096)
    reps = args.reps or (5 if args.quick else 9)
    arena_bytes = arena_mib * MiB
    if arena_bytes % (rows * 16):
        ap.error("the arena must split evenly into rows (and 16x as many rows)")
    results = run(arena_bytes, rows, reps)

    env = (f"numpy {np.__version__}, Python {platform.python_version()}, {platform.machine()}, "
           f"{os.cpu_count()} CPUs; arena {arena_mib} MiB; median of {reps} alternated repetitions")
    check = next(r for r in results if r["case"].startswith("(b)"))["oracle_s"]
    nocheck = next(r for r in results if r["case"].startswith("(c)"))["oracle_s"]
    overhead = f"conflict check (b vs c): {100 * (check / nocheck - 1):+.1f}% time"
    if args.markdown:
        print(f"Oracle throughput vs a plain numpy copy of the arena ({env}).\n")
        print("| case | oracle GB/s | numpy GB/s | ratio |")
        print("| --- | ---: | ---: | ---: |")
        for r in results:
            print(f"| {r['case']} | {r['oracle_gbs']:.2f} | {r['numpy_gbs']:.2f} | {r['ratio']:.2f} |")
        print(f"\n{overhead}. Target: ratio >= 0.5.")
    else:
        print(env)
        w = max(len(r["case"]) for r in results)
        print(f"{'case':<{w}}  {'oracle GB/s':>11}  {'numpy GB/s':>10}  {'ratio':>5}")
        for r in results:
            print(f"{r['case']:<{w}}  {r['oracle_gbs']:>11.2f}  {r['numpy_gbs']:>10.2f}  {r['ratio']:>5.2f}")
        print(overhead + "; target ratio >= 0.5")
    return 0 if min(r["ratio"] for r in results) >= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Cost of the race recorder against the plain Triton interpreter.

Runs ``kernels.batch_memcpy`` (the real target; its loops are ``while``
loops, so every supported Triton's interpreter runs it) interpreted on a CPU uint8
arena, on batches of ROWS copies of SIZE bytes each, once plain and once under
``RaceRecorder`` (regions registered as the engine does), alternating the two
for REPS repetitions, and prints the median of each and their ratio.

    python bench/race_bench.py [--rows 64] [--size 4096] [--reps 7]
"""
import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from mambafuzz.kernels.batch_memcpy import batch_memcpy  # noqa: E402
from mambafuzz.racecheck import RaceRecorder  # noqa: E402


def make_case(rows, size, shift, variant=None, disjoint=False):
    """ROWS copies of SIZE bytes; copy i lives in its own slot of the arena.

    disjoint: source in the first half of the arena, destination in the second;
    otherwise dst = src + shift inside the same slot (shift < 0: left overlap).
    """
    slot = size + 2 * 64
    arena = torch.randint(0, 256, (2 * rows * slot,), dtype=torch.uint8)
    base = arena.data_ptr()
    src = torch.tensor([base + i * slot + 64 for i in range(rows)], dtype=torch.int64)
    if disjoint:
        dst = src + rows * slot
    else:
        dst = src + shift
    sizes = torch.full((rows,), size, dtype=torch.int64)
    return dict(arena=arena, src=src, dst=dst, sizes=sizes, variant=variant)


def run_plain(c):
    batch_memcpy(c["src"], c["dst"], c["sizes"], arena=c["arena"], variant=c["variant"])


def run_recorded(c):
    with RaceRecorder() as rec:
        for name in ("arena", "src", "dst", "sizes"):
            rec.add_region(name, c[name])
        batch_memcpy(c["src"], c["dst"], c["sizes"], arena=c["arena"], variant=c["variant"])
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    R, S = args.rows, args.size
    cases = {
        "disjoint (u64 body)": make_case(R, S, 0, disjoint=True),
        "left overlap -16, guarded": make_case(R, S, -16),
        "right overlap +16, guarded": make_case(R, S, +16),
        "left overlap -16, BM-NOGUARD": make_case(R, S, -16, variant="BM-NOGUARD"),
        "left overlap -3 (byte body), guarded": make_case(R, S, -3),
    }
    print(f"triton {triton.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
          f"python {platform.python_version()}")
    print(f"batch_memcpy, {R} rows x {S} bytes, interpreter, median of {args.reps} alternating runs")
    print(f"{'case':40s} {'plain s':>9s} {'recorded s':>11s} {'ratio':>6s}  hazards")
    tot_p = tot_r = 0.0
    for name, c in cases.items():
        snap = c["arena"].clone()
        run_plain(c)        # warm-up (AST rewrite of the kernel)
        c["arena"].copy_(snap)
        run_recorded(c)
        tp, tr = [], []
        rec = None
        for _ in range(args.reps):
            c["arena"].copy_(snap)
            t0 = time.perf_counter()
            run_plain(c)
            tp.append(time.perf_counter() - t0)
            c["arena"].copy_(snap)
            t0 = time.perf_counter()
            rec = run_recorded(c)
            tr.append(time.perf_counter() - t0)
        mp, mr = statistics.median(tp), statistics.median(tr)
        tot_p += mp
        tot_r += mr
        kinds = sorted({h.kind for h in rec.hazards})
        print(f"{name:40s} {mp:9.4f} {mr:11.4f} {mr / mp:6.2f}  {len(rec.hazards)} {kinds} "
              f"({rec.stats['accesses']} lane accesses)")
    print(f"{'all cases':40s} {tot_p:9.4f} {tot_r:11.4f} {tot_r / tot_p:6.2f}")


if __name__ == "__main__":
    main()

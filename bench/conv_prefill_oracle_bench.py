"""The conv prefill oracle against a plain loop, in one process, and the CPU zoo time of its rows.

For each shape: ``oracle.expect_conv_prefill`` (numpy over channels, tokens and taps at once, per row)
against the same prefill written as plain loops over rows, channels, tokens and taps (numpy scalars),
block-boundary windows included, on the same inputs (prefix caching on, the columns derived from the
tokens computed before); the two must agree.  Then ``mambafuzz zoo --device cpu`` on the contract's
rows, timed.

    python bench/conv_prefill_oracle_bench.py --out bench/results/conv_prefill_oracle.md
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _contract_bench import commit as head, zoo_run  # noqa: E402

from mambafuzz.oracle.conv_prefill import derived_columns, expect_conv_prefill  # noqa: E402

SHAPES = [  # (rows, dim, tokens per row, width, block size)
    (4, 64, 16, 4, 8), (16, 1024, 64, 4, 16), (32, 1024, 256, 4, 64), (8, 4096, 512, 4, 128),
]


def loop_conv_prefill(pool, x_rows, weight, bias, idx, has_init, init, first, last, computed, block_size):
    """The prefill as plain loops (the baseline): one output element, one tap, one stored column at a time."""
    new = pool.copy()
    outs = []
    width = weight.shape[1]
    for b, x in enumerate(x_rows):
        src = idx[b][init[b]]
        dim, length = x.shape
        out = np.zeros((dim, length))
        c = computed[b]
        for d in range(dim):
            prev = list(pool[src, d, :width - 1]) if has_init[b] else [0.0] * (width - 1)
            full = prev + list(x[d])
            for t in range(length):
                acc = bias[d]
                for j in range(width):
                    acc += weight[d, j] * full[t + j]
                out[d, t] = acc
            k, o = 0, block_size - c % block_size
            while o < length:
                for j in range(width - 1):
                    new[idx[b][first[b] + k], d, j] = full[o + j]
                k, o = k + 1, o + block_size
            for j in range(width - 1):
                new[idx[b][last[b]], d, j] = full[length + j]
        outs.append(out)
    return new, outs


def measure(rows, dim, tokens, width, block_size, repeat=3):
    rng = np.random.default_rng(0)
    computed = [int(v) for v in rng.integers(0, 4 * block_size, rows)]
    cols = [derived_columns(c, tokens, block_size) for c in computed]
    table_cols = max(max(c[:3]) for c in cols) + 1
    idx = [[b * table_cols + k for k in range(table_cols)] for b in range(rows)]
    pool = rng.standard_normal((rows * table_cols, dim, width - 1))
    x_rows = [rng.standard_normal((dim, tokens)) for _ in range(rows)]
    weight, bias = rng.standard_normal((dim, width)), rng.standard_normal(dim)
    init, first, last, has_init = (list(v) for v in zip(*cols))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = expect_conv_prefill(pool, x_rows, weight, bias, idx, has_init, init=init, first=first, last=last,
                                  computed=computed, block_size=block_size)
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    new, outs = loop_conv_prefill(pool, x_rows, weight, bias, idx, has_init, init, first, last, computed,
                                  block_size)
    loop = time.perf_counter() - t0
    assert np.array_equal(new, got.pool) and all(np.allclose(o, g) for o, g in zip(outs, got.out))
    stores = sum(len(s) for s in got.stored)
    return best, loop, stores


def zoo_seconds(pattern: str) -> tuple[float, dict]:
    seconds, targets = zoo_run(pattern, "/tmp/conv-prefill-bench-crashes")
    return seconds, {t["target"]: (t["caught"], t["finding"]["kind"] if t["finding"] else None,
                                   t["finding"]["examples_to_first"] if t["finding"] else None,
                                   round(t["finding"]["seconds_to_first"], 2) if t["finding"] else None,
                                   round(t["seconds"], 1)) for t in targets}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-zoo", action="store_true", help="the oracle only")
    args = p.parse_args()
    commit = head()
    lines = [f"# conv_prefill oracle ({platform.python_version()}, numpy {np.__version__}, "
             f"{os.cpu_count()} cores, commit {commit})", "",
             "| rows | dim | tokens | W | block size | windows stored | oracle ms | plain loop ms | speed-up |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rows, dim, tokens, width, block_size in SHAPES:
        fast, loop, stores = measure(rows, dim, tokens, width, block_size)
        lines.append(f"| {rows} | {dim} | {tokens} | {width} | {block_size} | {stores} | {fast * 1e3:.1f} | "
                     f"{loop * 1e3:.0f} | {loop / fast:.0f}x |")
        print(lines[-1], flush=True)
    if not args.no_zoo:
        seconds, rows = zoo_seconds("zoo.CP-*")
        lines += ["", f"`mambafuzz zoo --device cpu --seed 1 --target 'zoo.CP-*' --database none`: "
                      f"{seconds:.0f} s for the command", "",
                  "| row | caught | as | examples to the finding | seconds to it | row's seconds (shrink included) |",
                  "| --- | --- | --- | ---: | ---: | ---: |"]
        lines += [f"| {name} | {c} | {kind} | {n} | {s} | {total} |" for name, (c, kind, n, s, total) in rows.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

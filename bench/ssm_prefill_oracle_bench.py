"""The ssm_prefill oracle against a plain loop, in one process.

For each shape: ``oracle.expect_ssm_prefill`` (numpy, vectorised over rows, heads, P and N, one step a
token, the error bound carried along) against the same prefill written as plain Python loops over rows,
tokens and heads (numpy over one head's [P, N] tile, no bound), block-boundary states included, on the
same inputs (prefix caching on, the columns derived from the tokens computed before); the two must agree.
One BLAS thread (``OPENBLAS_NUM_THREADS=1`` unless set): on a shared 2-core box OpenBLAS's threads fight,
and the oracle's per-store matrix products (the bound, summed in closed form) took 14x longer with them.

    python bench/ssm_prefill_oracle_bench.py --out bench/results/ssm_prefill_oracle.md
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see below; before numpy loads its BLAS
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mambafuzz.oracle.ssm_prefill import boundary_offsets, derived_columns, expect_ssm_prefill  # noqa: E402

SHAPES = [  # rows, tokens a row, heads, headdim, dstate, block size
    (4, 32, 2, 16, 16, 16), (16, 128, 8, 64, 128, 64), (16, 128, 24, 64, 128, 64), (4, 512, 8, 64, 128, 128),
]


def loop_prefill(pool, x, dt, A, B, lens, idx, has, bias, cols, computed, bs):
    new = pool.copy()
    heads = pool.shape[1]
    ratio = heads // B.shape[2]
    for b, length in enumerate(lens):
        init, first, last = cols[b]
        st = pool[idx[b][init]].copy() if has[b] else np.zeros(pool.shape[1:])
        ends = {o: idx[b][first + k] for k, o in enumerate(boundary_offsets(computed[b], length, bs))}
        for t in range(length):
            for h in range(heads):
                d = np.logaddexp(0.0, dt[b, t, h] + bias[h])
                st[h] = st[h] * np.exp(A[h] * d) + d * np.outer(x[b, t, h], B[b, t, h // ratio])
            if t + 1 in ends:
                new[ends[t + 1]] = st
        new[idx[b][last]] = st
    return new


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    lines = [f"ssm_prefill oracle vs a plain loop (cpu, numpy {np.__version__}, python {platform.python_version()})",
             "", "| rows x tokens, H, P, N, Bs | oracle s | loop s | speed-up |", "| --- | ---: | ---: | ---: |"]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(0)
    for rows, tokens, heads, hdim, dstate, bs in SHAPES:
        computed = [bs * (1 + b % 3) + (0, bs // 2, bs - 1, 1)[b % 4] for b in range(rows)]
        cols = [derived_columns(c, tokens, bs) for c in computed]
        width = max(max(c[:3]) for c in cols) + 1
        idx = [[b * width + k for k in range(width)] for b in range(rows)]
        pool = rng.uniform(-2, 2, (rows * width, heads, hdim, dstate))
        x = rng.standard_normal((rows, tokens, heads, hdim))
        dt = rng.uniform(-4.5, -2, (rows, tokens, heads))
        B = rng.standard_normal((rows, tokens, 1, dstate))
        A, bias = -rng.uniform(0.1, 1, heads), rng.uniform(0, 0.5, heads)
        has = [c[3] for c in cols]
        kw = dict(init=[c[0] for c in cols], first=[c[1] for c in cols], last=[c[2] for c in cols],
                  computed=computed, block_size=bs)
        best_o = best_l = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            got = expect_ssm_prefill(pool, x, dt, A, B, [tokens] * rows, idx, has, dt_bias=bias, softplus=True, **kw)
            best_o = min(best_o, time.perf_counter() - t0)
            t0 = time.perf_counter()
            want = loop_prefill(pool, x, dt, A, B, [tokens] * rows, idx, has, bias, [c[:3] for c in cols], computed, bs)
            best_l = min(best_l, time.perf_counter() - t0)
            assert np.allclose(got.pool, want, rtol=1e-10, atol=1e-12)
        line = (f"| {rows}x{tokens}, {heads}, {hdim}, {dstate}, {bs} | {best_o:.3f} | {best_l:.3f} | "
                f"{best_l / best_o:.1f}x |")
        print(line, flush=True)
        lines.append(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

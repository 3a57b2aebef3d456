"""The delta_prefill oracle against a plain Python loop, on the same inputs (the two must agree).

``oracle.expect_delta_prefill`` (one pass per token position, vectorised over sequences, heads and state
elements, batched matrix products; the magnitude recurrence and the bound carried along) against two
baselines, on the same inputs, prefix caching on (a block boundary every 16 tokens): the prefill as plain
loops over sequences, heads and tokens (numpy per token and head, no bound: "token loop"), and, at the
shapes where it ends in seconds, as plain Python over every scalar ("scalar loop", float math one
element at a time).  The oracle also carries the magnitude recurrence and the bound, which neither
baseline does (about twice the float work).  Best of `--repeat`.

    python bench/delta_prefill_oracle_bench.py --out bench/results/delta_prefill_oracle.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mambafuzz.oracle.conv_prefill import boundary_offsets  # noqa: E402
from mambafuzz.oracle.delta_prefill import expect_delta_prefill  # noqa: E402

SHAPES = [  # (sequences, tokens each, H, HV, K = V)
    (2, 64, 1, 2, 16), (4, 64, 2, 4, 32), (4, 256, 2, 4, 64), (16, 128, 4, 8, 128), (8, 1024, 2, 4, 128),
]
BS = 16


def loop_prefill(pool, q, k, v, g, beta, cu, idx, first, last, computed, scale):
    """The prefill as plain loops: sequence, head, token."""
    new = pool.copy()
    out = np.zeros(v.shape)
    hv_count, heads = pool.shape[1], q.shape[1]
    for n in range(len(cu) - 1):
        lo, hi = cu[n], cu[n + 1]
        offsets = boundary_offsets(computed[n], hi - lo, BS)
        for hv in range(hv_count):
            h = hv // (hv_count // heads)
            s = pool[idx[n][0], hv].copy()
            for t in range(hi - lo):
                tok = lo + t
                s = s * np.exp(g[tok, hv])
                u = beta[tok, hv] * (v[tok, hv] - s @ k[tok, h])
                s = s + np.outer(u, k[tok, h])
                out[tok, hv] = s @ (q[tok, h] * scale)
                if t + 1 in offsets:
                    new[idx[n][first[n] + offsets.index(t + 1)], hv] = s
            new[idx[n][last[n]], hv] = s
    return new, out


def scalar_prefill(pool, q, k, v, g, beta, cu, idx, first, last, computed, scale):
    """The prefill as plain Python, one scalar at a time (state held as nested lists)."""
    new = pool.copy()
    out = np.zeros(v.shape)
    hv_count, heads, vdim, kdim = pool.shape[1], q.shape[1], pool.shape[2], pool.shape[3]
    for n in range(len(cu) - 1):
        offsets = boundary_offsets(computed[n], cu[n + 1] - cu[n], BS)
        for hv in range(hv_count):
            h = hv // (hv_count // heads)
            s = pool[idx[n][0], hv].tolist()
            for t in range(cu[n + 1] - cu[n]):
                tok = cu[n] + t
                d, b = float(np.exp(g[tok, hv])), float(beta[tok, hv])
                kt, qt, vt = k[tok, h].tolist(), (q[tok, h] * scale).tolist(), v[tok, hv].tolist()
                for i in range(vdim):
                    row = s[i]
                    sk = 0.0
                    for j in range(kdim):
                        row[j] *= d
                        sk += row[j] * kt[j]
                    u = b * (vt[i] - sk)
                    o = 0.0
                    for j in range(kdim):
                        row[j] += u * kt[j]
                        o += row[j] * qt[j]
                    out[tok, hv, i] = o
                if t + 1 in offsets:
                    new[idx[n][first[n] + offsets.index(t + 1)], hv] = s
            new[idx[n][last[n]], hv] = s
    return new, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    rows = []
    print("| sequences x tokens | H / HV | K = V | oracle s | token loop s | scalar loop s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for seqs, tokens, heads, value_heads, dim in SHAPES:
        rng = np.random.default_rng(0)
        cols = tokens // BS + 1
        pool = rng.standard_normal((seqs * cols, value_heads, dim, dim))
        total = seqs * tokens
        q = rng.standard_normal((total, heads, dim))
        k = rng.standard_normal((total, heads, dim)) / np.sqrt(dim)
        v = rng.standard_normal((total, value_heads, dim))
        g = -rng.uniform(0.02, 1.0, (total, value_heads))
        beta = rng.uniform(0.05, 1.0, (total, value_heads))
        cu = np.arange(seqs + 1) * tokens
        idx = [[n * cols + c for c in range(cols)] for n in range(seqs)]
        first, last, computed = [0] * seqs, [(tokens - 1) // BS] * seqs, [0] * seqs
        best = {"oracle": float("inf"), "loop": float("inf"), "scalar": None}
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            got = expect_delta_prefill(pool, q, k, v, g, beta, cu, idx, [True] * seqs, scale=dim ** -0.5,
                                       init=[0] * seqs, first=first, last=last, computed=computed, block_size=BS)
            best["oracle"] = min(best["oracle"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            want_pool, want_out = loop_prefill(pool, q, k, v, g, beta, cu, idx, first, last, computed, dim ** -0.5)
            best["loop"] = min(best["loop"], time.perf_counter() - t0)
        if seqs * tokens * value_heads * dim * dim <= 1 << 21:
            t0 = time.perf_counter()
            scalar_pool, _ = scalar_prefill(pool, q, k, v, g, beta, cu, idx, first, last, computed, dim ** -0.5)
            best["scalar"] = time.perf_counter() - t0
            assert np.allclose(scalar_pool, want_pool, rtol=1e-10, atol=1e-10)
        assert np.allclose(got.pool, want_pool, rtol=1e-10, atol=1e-10)
        assert np.allclose(got.out, want_out, rtol=1e-10, atol=1e-10)
        rows.append({"shape": [seqs, tokens, heads, value_heads, dim], **best})
        scalar = "-" if best["scalar"] is None else f"{best['scalar']:.2f}"
        print(f"| {seqs} x {tokens} | {heads} / {value_heads} | {dim} | {best['oracle']:.3f} | {best['loop']:.3f} | "
              f"{scalar} |", flush=True)
    if a.out:
        a.out.write_text(json.dumps({"python": platform.python_version(), "numpy": np.__version__,
                                     "results": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

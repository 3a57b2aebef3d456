"""The delta_update oracle on an engine-sized spec-decode batch, against the reference kernel on the same case.

For each shape (256 rows at Qwen3-Next-like heads, K = V = 128): ``oracle.expect_delta_update`` (numpy
float64, vectorised over rows, heads and elements, one pass per token position) timed per case, and in
the same run the project's Triton kernel on ``--device cuda`` (compiled, synchronised, after a warm-up)
or, on a CPU, the torch path (the interpreter would take minutes on 256 x HV programs); their pool
results must agree within the oracle's bound.  The ratio says whether judging one case on the host
keeps up with producing it.

    python bench/delta_update_oracle_bench.py [--device cuda] [--out bench/results/delta_update_oracle.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mambafuzz.oracle.delta_update import expect_delta_update  # noqa: E402

SHAPES = [  # (rows, tokens per row (spec: C = tokens), H, HV, K, V, spec, kda)
    (256, 4, 2, 4, 128, 128, True, False),
    (256, 4, 2, 4, 128, 128, True, True),
    (256, 1, 4, 8, 128, 128, False, False),
]


def make(rows, tokens, heads, value_heads, kdim, vdim, spec, kda, seed=0):
    """A batch: each row reads its own slot and stores its own; float32 values in the contraction regime."""
    rng = np.random.default_rng(seed)
    cols = tokens if spec else 1
    slots = rows * cols + 1
    total = rows * tokens
    pool = rng.standard_normal((slots, value_heads, vdim, kdim)).astype(np.float32)
    q = rng.standard_normal((total, heads, kdim)).astype(np.float32)
    k = (rng.standard_normal((total, heads, kdim)) / np.sqrt(kdim)).astype(np.float32)
    v = rng.standard_normal((total, value_heads, vdim)).astype(np.float32)
    g = (-rng.uniform(0.02, 1.0, (total, value_heads, kdim) if kda else (total, value_heads))).astype(np.float32)
    beta = rng.uniform(0.05, 1.0, (total, value_heads)).astype(np.float32)
    idx = (1 + np.arange(rows * cols).reshape(rows, cols)).astype(np.int32)
    nacc = (1 + np.arange(rows) % tokens).astype(np.int32) if spec else None
    cu = (np.arange(rows + 1) * tokens).astype(np.int32)
    return pool, q, k, v, g, beta, cu, idx, nacc


def oracle_seconds(pool, q, k, v, g, beta, cu, idx, nacc, repeat=3):
    best, got = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = expect_delta_update(pool.astype(np.float64), q.astype(np.float64), k.astype(np.float64),
                                  v.astype(np.float64), g.astype(np.float64), beta.astype(np.float64), cu, idx,
                                  scale=q.shape[-1] ** -0.5, nacc=nacc)
        best = min(best, time.perf_counter() - t0)
    return best, got


def kernel_seconds(device, pool, q, k, v, g, beta, cu, idx, nacc, repeat=3):
    """The reference (Triton on cuda, the torch path on cpu) on the same case; seconds and its pool."""
    import torch

    from mambafuzz.control import device as device_mod
    device_mod.select(device)
    from mambafuzz.kernels import delta_update as du

    fn = du.delta_update if device == "cuda" else du.torch_fn
    t = {name: torch.from_numpy(a).to(device) for name, a in
         (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("cu", cu), ("idx", idx))}
    acc = None if nacc is None else torch.from_numpy(nacc).to(device)
    state = torch.from_numpy(pool).to(device)
    out = torch.empty(v.shape, dtype=torch.float32, device=device)
    best = float("inf")
    for _ in range(repeat + 1):  # the first compiles (cuda)
        work = state.clone()
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(t["q"], t["k"], t["v"], t["g"], t["beta"], work, t["cu"], t["idx"], acc, None, None, out,
           scale=q.shape[-1] ** -0.5, state_layout="vk", pad_slot_id=-1, cache_steps=0,
           max_query_len=int(np.diff(cu).max()))
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best, work.cpu().numpy()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "delta_update_oracle.json")
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    reference = "triton (compiled)" if args.device == "cuda" else "torch path"
    print(f"delta_update oracle vs {reference} ({platform.python_version()}, numpy {np.__version__}, "
          f"{os.cpu_count()} cores, commit {commit})")
    print("| rows | tokens | H | HV | K | V | spec | kda | oracle ms | reference ms | oracle / reference |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |")
    results = []
    for shape in SHAPES:
        case = make(*shape)
        fast, got = oracle_seconds(*case)
        ref, pool = kernel_seconds(args.device, *case)
        bad = np.abs(pool - got.pool) > got.pool_bound
        assert not bad.any(), f"reference and oracle differ at {int(bad.sum())} elements"
        rows, tokens, heads, value_heads, kdim, vdim, spec, kda = shape
        results.append({"rows": rows, "tokens": tokens, "H": heads, "HV": value_heads, "K": kdim, "V": vdim,
                        "spec": spec, "kda": kda, "oracle_s": fast, "reference_s": ref})
        print(f"| {rows} | {tokens} | {heads} | {value_heads} | {kdim} | {vdim} | {'yes' if spec else 'no'} | "
              f"{'yes' if kda else 'no'} | {fast * 1e3:.0f} | {ref * 1e3:.1f} | {fast / ref:.1f}x |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": args.device, "reference": reference, "commit": commit,
                                    "python": platform.python_version(), "numpy": np.__version__,
                                    "cores": os.cpu_count(), "results": results}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

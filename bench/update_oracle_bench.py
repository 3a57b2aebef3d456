"""The update contracts' oracles against a plain loop, in one process, and the CPU zoo time of their rows.

For each shape: ``oracle.expect_conv_update`` (numpy over rows, channels and
taps at once) against the same step written as plain loops over rows, tokens,
channels and taps (numpy scalars), and ``oracle.expect_state_scatter`` (one
fancy-indexed copy over every valid row and layer) against a loop of slice
copies per row and layer, on the same inputs; each pair must agree.  Then ``mambafuzz zoo --device cpu`` on the contract's rows, timed.

    python bench/update_oracle_bench.py --out bench/results/update_oracle.md
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

from mambafuzz.oracle import SlotBuffer  # noqa: E402
from mambafuzz.oracle.conv_update import expect_conv_update  # noqa: E402
from mambafuzz.oracle.state_scatter import StepStates, expect_state_scatter  # noqa: E402

SHAPES = [  # (rows, dim, tokens, width, spec)
    (8, 64, 1, 4, False), (64, 1024, 1, 4, False), (256, 1024, 4, 4, True), (256, 4096, 1, 4, False),
]


def loop_conv_update(pool, x_rows, weight, bias, idx, nacc):
    """The step as plain loops (the baseline): one output element, one tap at a time."""
    new = pool.copy()
    outs = []
    width = weight.shape[1]
    for b, x in enumerate(x_rows):
        src = idx[b][0]
        off = max(nacc[b] - 1, 0) if nacc is not None else 0
        dim, length = x.shape
        out = np.zeros((dim, length))
        for d in range(dim):
            full = list(pool[src, d, off:off + width - 1]) + list(x[d])
            for t in range(length):
                acc = bias[d]
                for j in range(width):
                    acc += weight[d, j] * full[t + j]
                out[d, t] = acc
            keep = full[-(width - 1):] if nacc is None else full[1:]
            new[src, d, :len(keep)] = keep
        outs.append(out)
    return new, outs


def measure(rows, dim, tokens, width, spec, repeat=3):
    rng = np.random.default_rng(0)
    state_len = width - 2 + tokens if spec else width - 1
    pool = rng.standard_normal((rows + 1, dim, state_len))
    x_rows = [rng.standard_normal((dim, tokens)) for _ in range(rows)]
    weight, bias = rng.standard_normal((dim, width)), rng.standard_normal(dim)
    idx = [[b + 1] for b in range(rows)]
    nacc = [1 + b % tokens for b in range(rows)] if spec else None
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = expect_conv_update(pool, x_rows, weight, bias, idx, nacc=nacc)
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    new, outs = loop_conv_update(pool, x_rows, weight, bias, idx, nacc)
    loop = time.perf_counter() - t0
    assert np.allclose(new, got.pool) and all(np.allclose(o, g) for o, g in zip(outs, got.out))
    return best, loop


SCATTER_SHAPES = [  # (layers, slots, rows, steps, slot bytes)
    (4, 64, 8, 4, 4096), (32, 512, 256, 5, 8192), (64, 1024, 256, 5, 32768),
]


def loop_state_scatter(snapshot, layers, slot_bytes, pool_off, slot_stride, layer_stride, st_off, row_stride,
                       step_stride, st_layer, dst, step, slots, steps):
    """The commit as a plain loop over rows and layers, one slice copy each (the baseline)."""
    out = snapshot.copy()
    for r, (d, s) in enumerate(zip(dst, step)):
        if 0 <= s < steps and 0 <= d < slots:
            for layer in range(layers):
                src = st_off + layer * st_layer + r * row_stride + s * step_stride
                to = pool_off + layer * layer_stride + d * slot_stride
                out[to:to + slot_bytes] = snapshot[src:src + slot_bytes]
    return out


def measure_scatter(layers, slots, rows, steps, slot_bytes):
    pool = SlotBuffer(0, layers, slots, slot_bytes, slot_bytes, slots * slot_bytes, 4)
    states = StepStates(pool.nbytes, layers, rows, steps, slot_bytes, 4)
    snapshot = np.random.default_rng(0).integers(0, 256, pool.nbytes + states.nbytes, dtype=np.uint8)
    dst = np.random.default_rng(1).permutation(slots)[:rows]
    step = np.random.default_rng(2).integers(-1, steps, rows)
    t0 = time.perf_counter()
    got = expect_state_scatter(snapshot, pool, states, dst, step)
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    want = loop_state_scatter(snapshot, layers, slot_bytes, 0, slot_bytes, slots * slot_bytes, pool.nbytes,
                              steps * slot_bytes, slot_bytes, rows * steps * slot_bytes, dst, step, slots, steps)
    loop = time.perf_counter() - t0
    assert np.array_equal(got, want)
    return fast, loop


def zoo_seconds(pattern: str) -> tuple[float, dict]:
    seconds, targets = zoo_run(pattern, "/tmp/update-oracle-bench-crashes")
    return seconds, {t["target"]: (t["caught"], t["examples"], round(t["seconds"], 1)) for t in targets}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-zoo", action="store_true", help="the oracles only")
    args = p.parse_args()
    commit = head()
    lines = [f"# update contracts' oracles ({platform.python_version()}, numpy {np.__version__}, "
             f"{os.cpu_count()} cores, commit {commit})", "",
             "| contract | rows | dim | tokens | W | spec | oracle ms | plain loop ms | speed-up |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for rows, dim, tokens, width, spec in SHAPES:
        fast, loop = measure(rows, dim, tokens, width, spec)
        lines.append(f"| conv_update | {rows} | {dim} | {tokens} | {width} | {'yes' if spec else 'no'} | "
                     f"{fast * 1e3:.1f} | {loop * 1e3:.0f} | {loop / fast:.0f}x |")
        print(lines[-1], flush=True)
    for layers, slots, rows, steps, slot_bytes in SCATTER_SHAPES:
        fast, loop = measure_scatter(layers, slots, rows, steps, slot_bytes)
        lines.append(f"| state_scatter | {rows} | layers {layers}, slots {slots} | steps {steps} | "
                     f"{slot_bytes} B | | {fast * 1e3:.1f} | {loop * 1e3:.1f} | {loop / fast:.1f}x |")
        print(lines[-1], flush=True)
    if args.no_zoo:
        rows = {}
        seconds = 0.0
    else:
        seconds, rows = zoo_seconds("zoo.CU-*")
    lines += ["", f"`mambafuzz zoo --device cpu --seed 1 --target 'zoo.CU-*'`: {seconds:.0f} s in all", "",
              "| row | caught | examples | seconds |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {name} | {c} | {n} | {s} |" for name, (c, n, s) in rows.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

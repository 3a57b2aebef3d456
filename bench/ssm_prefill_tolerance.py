"""How tight the ssm_prefill bound is on correct chunked kernels, and how far outside it the numeric bugs land.

For each shape (rows, tokens a row, heads, headdim, dstate, state dtype, io dtype, block size), one
``ssm_prefill`` case with prefix caching (columns derived from tokens computed before, rows starting
mid-chunk (lengths a little short of the nominal tokens a row), a block boundary every ``Bs`` tokens), materialised as the fuzzer does; then each target runs
on it and every stored element's error is divided by its bound.  Printed per target: the largest ratio
(a correct kernel must stay below 1; the distance from 1 is the slack) and the median bound relative to
the state's size; for the bug rows, the largest ratio (above 1: caught).  Targets: the reference Triton
kernel (chunks of 16 tokens interpreted on a CPU, 64 compiled on a GPU, where float32 inputs go through
TF32 dots), the torch path (token by token, fp32), and the zoo rows whose bug is numeric (SP-BF16CKPT,
SP-CUMSUM-START).

    python bench/ssm_prefill_tolerance.py                      # CPU, interpreted: small-to-medium shapes
    python bench/ssm_prefill_tolerance.py --device cuda --out bench/results/ssm_prefill_tolerance_h200.md
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CPU_SHAPES = [  # rows, tokens a row, heads, headdim, dstate, state dtype, io dtype, block size
    (4, 64, 2, 16, 16, "float32", "float32", 16),
    (4, 256, 2, 16, 16, "float32", "bfloat16", 32),
    (16, 128, 2, 32, 16, "float32", "float16", 48),
    (8, 256, 1, 16, 32, "bfloat16", "bfloat16", 64),
]
GPU_SHAPES = [
    (16, 128, 8, 64, 128, "float32", "bfloat16", 64),
    (16, 128, 8, 64, 128, "float32", "float32", 64),
    (4, 2048, 8, 64, 128, "float32", "bfloat16", 256),
    (16, 512, 24, 64, 128, "float32", "float16", 128),
    (16, 128, 8, 64, 128, "bfloat16", "bfloat16", 64),
]


def make_case(rows, tokens, heads, headdim, dstate, dtype, io, bs, seed=0):
    from mambafuzz.cases.ssm_prefill import SsmPrefillCase
    from mambafuzz.oracle.ssm_prefill import derived_columns

    computed, cols, lens = [], [], []
    for b in range(rows):  # tokens computed before: mid-block, on a boundary, one short of one
        c = bs * (1 + b % 3) + (0, bs // 2, bs - 1, 1)[b % 4]
        length = tokens - (5 * b) % 16  # rows start mid-chunk
        computed.append(c)
        lens.append(length)
        cols.append(derived_columns(c, length, bs))
    width = max(max(c[:3]) for c in cols) + 1
    idx = tuple(tuple(b * width + k for k in range(width)) for b in range(rows))
    slots = rows * width
    elem = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    return SsmPrefillCase(
        arena_size=64, dtype=dtype, io_dtype=io, offset=0, slots=slots, heads=heads, groups=1, headdim=headdim,
        dstate=dstate, slot_stride=heads * headdim * dstate * elem, lens=tuple(lens), idx=idx,
        has_init=tuple(c[3] for c in cols), idx_2d=True, idx_stride=width, apc=True, block_size=bs,
        init=tuple(c[0] for c in cols), first=tuple(c[1] for c in cols), last=tuple(c[2] for c in cols),
        computed=tuple(computed), has_dt_bias=True, softplus=True, exact=False, seed=seed)


def ratios(target, case, device):
    import torch

    from mambafuzz.judge.materialize import materialize

    m = materialize(case, device)
    t0 = time.perf_counter()
    if device == "cpu":  # the interpreter with mambafuzz's mends (bf16 as numbers, not bit patterns)
        from mambafuzz.interp import adapters
        with adapters():
            target(*m.args.values(), **m.kwargs)
    else:
        target(*m.args.values(), **m.kwargs)
    if device == "cuda":
        torch.cuda.synchronize()
    took = time.perf_counter() - t0
    out = m.outputs[0]
    assert out.name == "ssm_state"
    got = m.args["ssm_state"].double()
    want = torch.as_tensor(out.expected).to(got.device).double()
    tol = torch.as_tensor(out.atol).to(got.device).double()
    where = tol > 0
    err = (got - want).abs()[where]
    bound = tol[where]
    rel_bound = (bound / want[where].abs().clamp_min(1e-3)).median().item()
    return (err / bound).max().item(), rel_bound, int(where.sum()), took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out")
    args = ap.parse_args()
    from mambafuzz.control import device as dev
    dev.select(args.device)
    import torch
    import triton

    from mambafuzz.kernels import registry

    names = ["triton.ssm_prefill", "torch.ssm_prefill", "zoo.SP-BF16CKPT", "zoo.SP-CUMSUM-START"]
    lines = [f"# ssm_prefill: errors over the bound ({args.device}"
             + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else "")
             + f", torch {torch.__version__}, triton {triton.__version__})", "",
             "| shape (rows x tokens, H, P, N, state, io, Bs) | target | stored elements | max err / bound | "
             "median bound / abs(state) | s |", "| --- | --- | --- | --- | --- | --- |"]
    for shape in (CPU_SHAPES if args.device == "cpu" else GPU_SHAPES):
        case = make_case(*shape)
        for name in names:
            worst, rel, n, took = ratios(registry.get(name), case, args.device)
            row = (f"| {shape[0]}x{shape[1]}, {shape[2]}, {shape[3]}, {shape[4]}, {shape[5]}, {shape[6]}, "
                   f"{shape[7]} | {name} | {n} | {worst:.3g} | {rel:.2g} | {took:.2f} |")
            print(row, flush=True)
            lines.append(row)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""The delta_prefill bound against the project's chunked kernel at large sizes: too tight flags the correct
kernel, too loose hides a bfloat16 checkpoint.

For each shape, one ``DeltaPrefillCase`` (prefix caching on, a block boundary every 64 tokens, so the
boundary states along the whole scan are compared, plus the final state and every output) is prepared by
the contract (the oracle's float64 scan and its per-element bound) and run through:

- the correct Triton kernel (16-token chunks, WY form): the largest ``|kernel - oracle| / bound`` over
  stored states and outputs must stay below 1 (the margin says how tight the bound is);
- ``fla-style``: the chunked stand-in of ``examples/test_example_delta_prefill.py`` (FLA's float math: 64-token
  chunks, a triangular solve, ``v - w S`` held in the keys' dtype), without prefix caching (its only mode):
  the same ratio;
- zoo row DP-BF16CKPT (boundary states rounded through bfloat16): the share of boundary-state elements
  outside the bound, and the largest ratio (float32 states and activations: it must be caught).

On the CPU the Triton kernel is interpreted: 2048 tokens take many minutes there, so ``--targets`` picks
(the CPU run of bench/results/delta_prefill_bound_cpu.json: fla-style at every shape, the Triton kernel
and the zoo row at ``small``); ``--device cuda`` compiles it.

    python bench/delta_prefill_bound.py --device cpu --targets fla-style \
        --out bench/results/delta_prefill_bound_cpu.json
    python bench/delta_prefill_bound.py --device cpu --shapes small --targets triton.delta_prefill,zoo.DP-BF16CKPT
    python bench/delta_prefill_bound.py --device cuda --out bench/results/delta_prefill_bound_h200.json
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

SHAPES = [  # (label, sequences, tokens each, heads, K = V, kda, act dtype, l2norm)
    ("gdn-2048", 1, 2048, 1, 128, False, "float32", True),
    ("kda-2048", 1, 2048, 1, 128, True, "float32", False),
    ("gdn-bf16-acts", 2, 1024, 1, 128, False, "bfloat16", True),
    ("gdn-4x512-K64", 4, 512, 2, 64, False, "float32", False),
    ("small", 1, 256, 1, 32, False, "float32", True),
    ("small-kda", 1, 256, 1, 32, True, "float32", False),
]
TARGETS = ("triton.delta_prefill", "fla-style", "zoo.DP-BF16CKPT")


def case_for(seqs, tokens, heads, dim, kda, act, l2norm, apc=True):
    from mambafuzz.cases.delta_prefill import DeltaPrefillCase

    if not apc:  # one column a sequence, K-major (the FLA-style stand-in's only mode)
        return DeltaPrefillCase(
            arena_size=64, dtype="float32", act_dtype=act, layout="kv", slots=seqs, heads=heads, group=1,
            key_dim=dim, value_dim=dim, lens=(tokens,) * seqs, idx=tuple((n,) for n in range(seqs)),
            has_init=(True,) * seqs, kda=kda, l2norm=l2norm, seed=1)
    bs = 64
    cols = tokens // bs + 2
    idx = tuple(tuple(n * cols + c for c in range(cols)) for n in range(seqs))
    computed = tuple(bs * 2 for _ in range(seqs))  # starts on a boundary: reads column 1, stores 2..
    return DeltaPrefillCase(
        arena_size=64, dtype="float32", act_dtype=act, layout="vk", slots=seqs * cols, heads=heads, group=1,
        key_dim=dim, value_dim=dim, lens=(tokens,) * seqs, idx=idx, has_init=(True,) * seqs, idx_2d=True,
        idx_stride=cols, apc=True, block_size=bs, init=(1,) * seqs, first=(2,) * seqs,
        last=(2 + (tokens - 1) // bs,) * seqs, computed=computed, kda=kda, l2norm=l2norm, seed=1)


def ratios(contract, case, fn, device):
    """Per output argument: (max |got - want| / bound where compared, share of compared elements over it)."""
    import numpy as np
    import torch

    prepared = contract.prepare(case, contract.image(case), np.zeros(64, np.uint8), None, device)
    args = dict(prepared.args)
    fn(*args.values(), **prepared.kwargs)
    if device != "cpu":
        torch.cuda.synchronize()
    out = {}
    for o in prepared.outputs:
        if not o.tolerant:
            continue
        got = args[o.name].double().cpu()
        want = torch.as_tensor(o.expected).double().cpu()
        bound = torch.as_tensor(o.atol).double().cpu()
        care = (bound > 0) if o.care is None else (torch.as_tensor(o.care).cpu() & (bound > 0))
        r = ((got - want).abs() / bound.clamp_min(1e-30))[care]
        out[o.name] = {"max_ratio": float(r.max()), "over": float((r > 1).double().mean()),
                       "elements": int(care.sum())}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--out")
    p.add_argument("--shapes", default=",".join(s[0] for s in SHAPES[:4]))
    p.add_argument("--targets", default=",".join(TARGETS))
    a = p.parse_args()
    from mambafuzz.control import device as dev

    dev.select(a.device)
    from mambafuzz import contracts
    from mambafuzz.kernels import registry

    contract = contracts.get("delta_prefill")
    results = []
    for label, *shape in SHAPES:
        if label not in a.shapes.split(","):
            continue
        row = {"shape": label}
        for name in a.targets.split(","):
            if name == "fla-style":
                if shape[4]:  # a per-K gate: the stand-in is GDN only
                    continue
                sys.path.insert(0, str(ROOT / "examples"))
                from test_example_delta_prefill import delta_prefill as fn
                case = case_for(*shape, apc=False)
            else:
                fn, case = registry.get(name).fn, case_for(*shape)
            t0 = time.perf_counter()
            row[name] = ratios(contract, case, fn, a.device)
            row[name]["seconds"] = round(time.perf_counter() - t0, 1)
            row[name]["case"] = case.describe()
        print(json.dumps(row), flush=True)
        results.append(row)
    doc = {"device": a.device, "python": platform.python_version(), "results": results}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()

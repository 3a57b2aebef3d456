"""How big drawn cases get: small on the CPU interpreter, large on a GPU.

``amplify`` (the ``gpu-amp`` profile) also draws a race amplification per
case (``strategies.perturb.perturbs``): which warps of the project's kernels
sleep, where and how long, and at what warp count.  Hypothesis searches it with
the geometry and shrinks it towards no perturbation at all.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    max_rows: int            # rows in a batch copy
    max_copy_bytes: int      # bytes in one row
    copy_block: int          # the kernels' chunk size: sizes and shifts cluster around it
    max_requests: int
    max_cols: int
    max_dim: int             # conv dim (rows of a DS block)
    max_inner: int           # temporal inner extent per axis
    max_tiles: int
    amplify: bool = False    # draw a perturbation (race amplification) per case
    max_state_len: int = 8   # conv window; long DS rows span several warps, which DS-row races need on a GPU


CPU = Profile("cpu", max_rows=6, max_copy_bytes=2200, copy_block=1024, max_requests=3, max_cols=6,
              max_dim=9, max_inner=6, max_tiles=16)
GPU = Profile("gpu", max_rows=256, max_copy_bytes=40_000, copy_block=1024, max_requests=16, max_cols=8,
              max_dim=300, max_inner=64, max_tiles=16, max_state_len=1024)
GPU_AMP = dataclasses.replace(GPU, name="gpu-amp", amplify=True)
PROFILES = {p.name: p for p in (CPU, GPU, GPU_AMP)}

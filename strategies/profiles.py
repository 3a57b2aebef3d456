"""How big drawn cases get: small on the CPU interpreter, large on a GPU."""
from __future__ import annotations

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


CPU = Profile("cpu", max_rows=6, max_copy_bytes=2200, copy_block=1024, max_requests=3, max_cols=6,
              max_dim=9, max_inner=6, max_tiles=16)
GPU = Profile("gpu", max_rows=256, max_copy_bytes=40_000, copy_block=1024, max_requests=16, max_cols=8,
              max_dim=300, max_inner=64, max_tiles=16)
PROFILES = {p.name: p for p in (CPU, GPU)}

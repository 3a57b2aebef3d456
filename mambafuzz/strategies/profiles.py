"""How big drawn cases get: small on the CPU interpreter, large on a GPU.

``amplify`` (the ``gpu-amp`` profile) also draws a race amplification per
case (``strategies.perturb.perturbs``): which warps of the project's kernels
sleep, where and how long, and at what warp count.  Hypothesis searches it with
the geometry and shrinks it towards no perturbation at all.

Engine kernels work in tiles of 512 B to a few KiB, so their tile-edge bugs
(tiles walked in the wrong order, a tile boundary off by one) only show on
spans of several tiles.  The CPU profile keeps its cases small for the
interpreter but, one state or batch row in ``wide_one_in``, draws a *wide*
one: an SD conv state or temporal state of 1 KiB .. ``wide_bytes``, DS rows of
1 KiB .. ``wide_row_bytes`` each (the project's DS kernel walks rows token by
token, about a millisecond per token in the interpreter: hence the lower cap),
or a batch row of up to ``wide_bytes``.  ``wide_one_in = 0`` draws none (the GPU
profiles draw large cases anyway).

Pools past 2 GiB (where 32-bit address arithmetic wraps, zoo ADDR-I32): one
state-copy or postprocess case in ``huge_one_in`` (CPU 3, GPU 2) stretches its
first state's blocks so that a block a request actually copies
(``huge_used``) starts past a drawn offset: 2 GiB (a 32-bit product goes
negative: out of bounds, a fault on a GPU) or past 4 GiB (it wraps to a
lower address in the arena: wrong bytes), or, half the time, starts below
2 GiB with its data crossing it (the element offset), within the sparse arena
limit (``strategies.pools``).  Slot buffers draw their own (``strategies.slots``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import strategies as st

from mambafuzz.errors import UsageError


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
    wide_one_in: int = 0     # one state / batch row in this many is wide (spans several 1-4 KiB tiles); 0: never
    wide_bytes: int = 0      # largest wide SD conv or temporal state, and largest wide batch row
    wide_row_bytes: int = 0  # largest wide DS row
    huge_one_in: int = 3     # one block-table case in this many has a pool past 2 GiB
    huge_used: bool = True   # stretch a block a request copies past 2 GiB (else only the highest block id)


def draw_wide(draw, profile: Profile) -> bool:
    """Inside a composite strategy: True one time in ``profile.wide_one_in`` (never when 0).

    Drawn as an integer whose top value means wide, so shrinking leads away from it.
    """
    n = profile.wide_one_in
    return bool(n) and draw(st.integers(0, n - 1)) == n - 1


CPU = Profile("cpu", max_rows=6, max_copy_bytes=2200, copy_block=1024, max_requests=3, max_cols=6,
              max_dim=9, max_inner=6, max_tiles=16, wide_one_in=10, wide_bytes=12 * 1024 + 40,
              wide_row_bytes=4 * 1024 + 40)
GPU = Profile("gpu", max_rows=256, max_copy_bytes=40_000, copy_block=1024, max_requests=16, max_cols=8,
              max_dim=300, max_inner=64, max_tiles=16, max_state_len=1024, huge_one_in=2)
GPU_AMP = dataclasses.replace(GPU, name="gpu-amp", amplify=True)
PROFILES = {p.name: p for p in (CPU, GPU, GPU_AMP)}


def resolve(profile: "Profile | str") -> Profile:
    """A Profile, or the one of that name; UsageError in one line for an unknown name."""
    if not isinstance(profile, str):
        return profile
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
    return PROFILES[profile]

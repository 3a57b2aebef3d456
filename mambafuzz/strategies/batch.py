"""Batches of byte copies, drawn the way overlap bugs hide.

Each row picks an overlap kind (none / left / right / exact), a size near the
places kernels branch (0, 1, 7, 8, 9, around the copy block; now and then,
on profiles that ask for it, one over several 1-4 KiB tiles), a shift that is
small or near the copy block, and an alignment offset below 8; rows are then
laid out in one arena so that the batch is well-posed (unless asked not to be).
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from mambafuzz.cases.batch_memcpy import BatchCopyCase

from .perturb import maybe_perturb
from .profiles import Profile, draw_wide

OVERLAPS_FULL = ("none", "left", "right", "exact")
OVERLAPS_LEFT = ("none", "left", "exact")
ROW_GAP = 64


@dataclass(frozen=True)
class Row:
    kind: str
    size: int
    shift: int
    dst_align: int
    src_align: int


def _sizes(profile: Profile):
    b = profile.copy_block
    near_block = [b - 1, b, b + 1, 2 * b - 8, 2 * b + 9]
    small = [1, 0, 7, 8, 9, 15, 16, 17, 63, 64, 65]
    picks = sorted({s for s in small + near_block if s <= profile.max_copy_bytes}, key=small_first(small))
    return st.one_of(st.sampled_from(picks), st.integers(0, profile.max_copy_bytes))


def _wide_sizes(profile: Profile):
    """Rows over several 1-4 KiB tiles: near 2 and 3 of them, or anything up to ``wide_bytes``."""
    lo, hi = profile.max_copy_bytes + 1, profile.wide_bytes
    near = sorted({k * t + d for t in (1024, 2048, 4096) for k in (2, 3) for d in (-1, 0, 1, 9)
                   if lo <= k * t + d <= hi})
    return st.one_of(st.sampled_from(near), st.integers(lo, hi)) if near else st.integers(lo, hi)


def small_first(small):
    order = {s: i for i, s in enumerate(small)}
    return lambda s: (order.get(s, len(order)), s)


def _shifts(profile: Profile, size: int):
    b = profile.copy_block
    return st.one_of(st.integers(1, 16), st.integers(max(1, b - 16), b + 16),
                     st.integers(1, max(1, size + 8)))


@st.composite
def copy_rows(draw, profile: Profile, overlaps=OVERLAPS_FULL) -> Row:
    kind = draw(st.sampled_from(overlaps))
    wide = profile.wide_bytes > profile.max_copy_bytes and draw_wide(draw, profile)
    size = draw(_wide_sizes(profile) if wide else _sizes(profile))
    shift = draw(_shifts(profile, size)) if kind in ("left", "right") else 0
    dst_align = draw(st.integers(0, 7))
    src_align = draw(st.integers(0, 7)) if kind == "none" else dst_align
    return Row(kind, size, shift, dst_align, src_align)


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def layout_rows(rows: list[Row]) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """Place rows in one arena, each in its own region, so rows never touch each other."""
    cursor = ROW_GAP
    copies = []
    for row in rows:
        start = _align_up(cursor, 8)
        if row.kind == "left":
            dst = start + row.dst_align
            src = dst + row.shift
        elif row.kind == "right":
            src = start + row.dst_align
            dst = src + row.shift
        elif row.kind == "exact":
            src = dst = start + row.dst_align
        else:
            src = start + row.src_align
            dst = _align_up(src + row.size, 8) + 8 + row.dst_align
        copies.append((src, dst, row.size))
        cursor = max(src, dst) + row.size + ROW_GAP
    return _align_up(cursor, 64), tuple(copies)


@st.composite
def batch_copy_cases(draw, profile: Profile, overlap: str = "full", ill_posed: bool = False) -> BatchCopyCase:
    """Well-posed batches by default; `ill_posed` adds a row that writes into another row's bytes."""
    overlaps = OVERLAPS_FULL if overlap == "full" else OVERLAPS_LEFT
    rows = draw(st.lists(copy_rows(profile, overlaps), min_size=1, max_size=profile.max_rows))
    arena_size, copies = layout_rows(rows)
    if ill_posed:
        victim = draw(st.integers(0, len(copies) - 1))
        v_src, v_dst, v_size = copies[victim]
        size = draw(st.integers(1, max(1, v_size or 1)))
        target = draw(st.sampled_from([v_src, v_dst]))
        copies = copies + ((arena_size, target, size),)
        arena_size = _align_up(arena_size + size, 64) + ROW_GAP
        if v_size == 0:  # a zero-size victim touches nothing: make it real
            copies = copies[:victim] + ((v_src, v_dst, 1),) + copies[victim + 1:]
    seed = draw(st.integers(0, 2**32 - 1))
    return BatchCopyCase(arena_size=arena_size, copies=copies, seed=seed,
                         perturb=maybe_perturb(draw, profile))

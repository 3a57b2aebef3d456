"""Conv prefill batches (`conv_prefill`), drawn where the engines' prefix-caching bugs hide.

Most rows take their columns as vLLM derives them from the tokens computed
before (``c``), the chunk's length and the block size; the rest take arbitrary
ones (the initial block also the final one or a boundary's, has_initial_state
drawn on its own), keeping ``last - first`` the boundaries crossed.  Drawn on
purpose: chunks shorter than ``W - 1`` (right after a block boundary, so the
initial and final blocks differ), a boundary fewer than ``W - 1`` tokens into
the chunk, chunks crossing several boundaries, rows without an initial state
over the stale values of their initial block, pad rows (read entry the pad),
pad destinations, empty rows, 1-D tables (strided: a column of a wider one) and
2-D ones with padded rows, both pool layouts, and one case in ``huge_one_in``
with a slot past 2^31 elements (16-bit states) or 2 GiB (32-bit) on an entry
the prefill reads or stores, reached by a slot number, not a huge stride.
Live rows never share a slot.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.conv_prefill import DTYPES, LAYOUTS, ConvPrefillCase

from .perturb import maybe_perturb
from .prefill import block_table, place_far_slot, row_columns, table_columns
from .profiles import Profile
from .updates import arena_pool, far_slot


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "dim": 12, "wide_dim": 64, "len": 12, "blocks": 3, "block_units": (8, 16), "spare": 2,
                "slots": 8, "huge_one_in": 3}
    return {"rows": 32, "dim": 256, "wide_dim": 1024, "len": 160, "blocks": 6, "block_units": (64, 64), "spare": 3,
            "slots": 160, "huge_one_in": 6}


def _row_geometry(draw, lim: dict, width: int, bs: int | None):
    """(computed, length) of one row: lengths short of the window, around and across block boundaries."""
    short = max(1, width - 2)
    if bs is None:
        kind = draw(st.sampled_from(("short", "any", "any", "empty")))
        return 0, {"short": draw(st.integers(1, short)), "any": draw(st.integers(1, lim["len"])), "empty": 0}[kind]
    near = bs - draw(st.integers(1, max(1, min(width - 1, bs))))           # c % bs: a boundary near the start
    rest = draw(st.sampled_from((0, 0, bs - 1, near, draw(st.integers(0, bs - 1)))))
    c = bs * draw(st.integers(0, lim["blocks"])) + rest
    first_boundary = bs - c % bs
    kind = draw(st.sampled_from(("short", "short", "cross", "cross", "many", "any", "empty")))
    if kind == "short":
        length = draw(st.integers(1, short))
    elif kind == "cross":
        length = first_boundary + draw(st.integers(1, max(1, width)))
    elif kind == "many":
        length = first_boundary + bs * draw(st.integers(1, 2)) + draw(st.integers(1, max(1, width)))
    elif kind == "any":
        length = draw(st.integers(1, lim["len"]))
    else:
        length = 0
    return c, min(length, first_boundary + 3 * bs + width)  # at most 4 boundaries: a table of a few columns


@st.composite
def conv_prefill_cases(draw, profile: Profile, pad: int = -1, max_width: int = 6, conv_layout: str = "both",
                       block_multiple: int = 1, cache_mode: str = "both"):
    lim = _limits(profile)
    dtype = draw(st.sampled_from(tuple(DTYPES)))
    elem = DTYPES[dtype]
    layout = draw(st.sampled_from(LAYOUTS if conv_layout == "both" else (conv_layout,)))
    width = draw(st.integers(2, max_width))
    dim = draw(st.integers(1, lim["dim"]) | st.integers(lim["dim"], lim["wide_dim"]))
    rows = draw(st.integers(1, lim["rows"]))
    apc = cache_mode == "all" or (cache_mode == "both" and draw(st.integers(0, 3)) > 0)
    bs = None
    if apc:
        largest = lim["block_units"][0 if block_multiple == 1 else 1]  # the CPU's: 1..8, or 8 and 16
        bs = block_multiple * draw(st.integers(1, max(1, largest // block_multiple)))

    # per row: tokens, computed, columns (init, first, last), has_initial_state
    geometry = [_row_geometry(draw, lim, width, bs) for _ in range(rows)]
    lens = tuple(length for _, length in geometry)
    columns, has_init = row_columns(draw, geometry, bs)
    cols, idx_2d = table_columns(draw, columns, apc, lim["spare"])
    # slots: each live row's entries are fresh ones
    slot_count, idx = block_table(draw, columns, cols, pad, lim["slots"])

    state_len = width - 1 + draw(st.sampled_from([0, 0, 0, 1, 3]))
    slot_bytes = dim * state_len * elem
    slot_stride, offset = arena_pool(draw, slot_bytes, elem)
    top_slot = far_slot(draw, lim["huge_one_in"], elem, offset, slot_stride)
    if top_slot is not None and place_far_slot(draw, idx, columns, geometry, has_init, pad, bs, top_slot):
        slot_count = top_slot + 1
    idx_stride = cols + draw(st.sampled_from([0, 0, 1, 3]))
    arena = offset + slot_count * slot_stride + 64
    inits, firsts, lasts = zip(*columns)
    return ConvPrefillCase(
        arena_size=arena, dtype=dtype, layout=layout, offset=offset, slots=slot_count, dim=dim,
        state_len=state_len, slot_stride=slot_stride, width=width, lens=lens, idx=tuple(map(tuple, idx)),
        has_init=tuple(has_init), bias=draw(st.booleans()), silu=draw(st.booleans()), idx_2d=idx_2d,
        idx_stride=idx_stride, apc=apc, block_size=bs or 0, init=inits if apc else None,
        first=firsts if apc else None, last=lasts if apc else None,
        computed=tuple(c for c, _ in geometry) if apc else None, pad=pad,
        seed=draw(st.integers(0, 3)), perturb=maybe_perturb(draw, profile))

"""SSM prefill batches (`ssm_prefill`), drawn where the engines' chunked-scan and prefix-caching bugs hide.

Rows of every length from 0 up past a few chunks, packed one after another, so that rows start mid-chunk
(an engine's chunks are cut at fixed token positions of the batch, or at each row's start) and end in a
partial chunk; block boundaries on, next to and between chunk edges (block sizes that are multiples of 8
and their neighbours, tokens computed before that end a block or fall just short of one); chunks that cross
no, one or several boundaries; rows without an initial state over the stale values of their initial block;
the final state stored to the slot read (no prefix caching, or a chunk within its initial block) or to
another; pad rows, pad destinations and empty rows; 1-D tables (strided) and 2-D ones with padded rows;
16-bit states and inputs.  Most rows take their columns as vLLM derives them, the rest arbitrary ones
(keeping ``last - first`` the boundaries crossed).  ``exact`` cases (values any fp32 order keeps exact) keep
the pool in the arena, with slot padding, an offset and, one in ``huge_one_in``, a slot the prefill reads
or stores past 2^31 elements (mostly a 16-bit state: ``far_dtype``) or 2 GiB, reached by a slot number.
Live rows never share a slot.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.ssm_prefill import DTYPES, SsmPrefillCase

from .perturb import maybe_perturb
from .prefill import block_table, far_dtype, place_far_slot, row_columns, table_columns
from .profiles import Profile
from .updates import arena_pool, far_slot_number

EXACT_TOKENS = 96  # an exact row's |state| stays under 4 + L / 2 in quarters: 8 significant bits
SSM_ROW_KINDS = ("live", "live", "live", "pad", "pad", "pad_dst", "spare_pad")  # pad rows twice as often


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "heads": 3, "headdim": (1, 20), "dstate": (1, 16), "len": 40, "blocks": 3,
                "block_units": (16, 16), "spare": 2, "slots": 10, "huge_one_in": 3}
    return {"rows": 16, "heads": 8, "headdim": (8, 64), "dstate": (8, 128), "len": 300, "blocks": 6,
            "block_units": (64, 64), "spare": 3, "slots": 160, "huge_one_in": 4}


def _row_geometry(draw, lim: dict, bs: int | None):
    """(computed, length) of one row: short and long chunks, around and across block boundaries."""
    if bs is None:
        kind = draw(st.sampled_from(("short", "any", "any", "long", "empty")))
        return 0, {"short": draw(st.integers(1, 3)), "any": draw(st.integers(1, lim["len"])),
                   "long": draw(st.integers(lim["len"] // 2, lim["len"])), "empty": 0}[kind]
    rest = draw(st.sampled_from((0, 0, bs - 1, 1 % bs, draw(st.integers(0, bs - 1)))))  # c % bs
    c = bs * draw(st.integers(0, lim["blocks"])) + rest
    first_boundary = bs - c % bs
    kind = draw(st.sampled_from(("short", "cross", "cross", "edge", "many", "any", "empty")))
    if kind == "short":
        length = draw(st.integers(1, first_boundary))  # within the initial block (on its end at most)
    elif kind == "cross":
        length = first_boundary + draw(st.integers(1, max(1, bs)))
    elif kind == "edge":  # ends one token past, on, or one token short of a boundary
        length = first_boundary + bs * draw(st.integers(0, 1)) + draw(st.sampled_from((-1, 0, 1)))
    elif kind == "many":
        length = first_boundary + bs * draw(st.integers(1, 3)) + draw(st.integers(1, max(1, bs)))
    elif kind == "any":
        length = draw(st.integers(1, lim["len"]))
    else:
        length = 0
    return c, max(0, min(length, first_boundary + 3 * bs + bs // 2, 4 * lim["len"]))


@st.composite
def ssm_prefill_cases(draw, profile: Profile, pad: int = -1, block_multiple: int = 1, cache_mode: str = "both",
                      dt_bias: bool | None = None):
    """`block_multiple`: block sizes a multiple of it; `cache_mode` none, all or both; `dt_bias` None drawn,
    True always, False never."""
    lim = _limits(profile)
    dtype = draw(st.sampled_from(tuple(DTYPES)))
    io_dtype = draw(st.sampled_from(tuple(DTYPES)))
    heads = draw(st.integers(1, lim["heads"]))
    groups = draw(st.sampled_from([g for g in range(1, heads + 1) if heads % g == 0]))
    headdim = draw(st.integers(*lim["headdim"]))
    dstate = draw(st.integers(*lim["dstate"]))
    rows = draw(st.integers(1, lim["rows"]))
    exact = draw(st.integers(0, 2)) == 0
    apc = cache_mode == "all" or (cache_mode == "both" and draw(st.integers(0, 3)) > 0)
    bs = None
    if apc:
        units = lim["block_units"][0] // block_multiple
        bs = block_multiple * draw(st.sampled_from(sorted({1, max(1, units // 2), units, 2 * units}))
                                   | st.integers(1, max(1, units)))
        if block_multiple == 1 and draw(st.integers(0, 2)) == 0:  # next to a chunk edge of 16
            bs = draw(st.sampled_from((15, 16, 17)))

    geometry = [_row_geometry(draw, lim, bs) for _ in range(rows)]
    if exact:
        geometry = [(c, min(length, EXACT_TOKENS)) for c, length in geometry]
    lens = tuple(length for _, length in geometry)
    columns, has_init = row_columns(draw, geometry, bs)
    cols, idx_2d = table_columns(draw, columns, apc, lim["spare"])
    slot_count, idx = block_table(draw, columns, cols, pad, lim["slots"], kinds=SSM_ROW_KINDS,
                                  whole_pad=lambda draw: draw(st.integers(0, 2)) == 0)

    far, dtype = far_dtype(draw, lim["huge_one_in"], dtype, DTYPES) if exact else (False, dtype)
    elem = DTYPES[dtype]
    slot_bytes = heads * headdim * dstate * elem
    slot_stride, offset = slot_bytes, 0
    if exact:
        slot_stride, offset = arena_pool(draw, slot_bytes, elem)
        top_slot = far_slot_number(draw, elem, offset, slot_stride, round_up=True) if far else None
        if top_slot is not None and place_far_slot(draw, idx, columns, geometry, has_init, pad, bs, top_slot):
            slot_count = top_slot + 1
    idx_stride = cols + draw(st.sampled_from([0, 0, 1, 3]))
    arena = offset + slot_count * slot_stride + 64 if exact else 64
    inits, firsts, lasts = zip(*columns)
    has_bias = draw(st.booleans()) if dt_bias is None else dt_bias
    return SsmPrefillCase(
        arena_size=arena, dtype=dtype, io_dtype=io_dtype, offset=offset, slots=slot_count, heads=heads,
        groups=groups, headdim=headdim, dstate=dstate, slot_stride=slot_stride, lens=lens,
        idx=tuple(map(tuple, idx)), has_init=tuple(has_init), idx_2d=idx_2d, idx_stride=idx_stride, apc=apc,
        block_size=bs or 0, init=inits if apc else None, first=firsts if apc else None,
        last=lasts if apc else None, computed=tuple(c for c, _ in geometry) if apc else None,
        has_dt_bias=has_bias, softplus=not exact and draw(st.booleans()), exact=exact, pad=pad,
        seed=draw(st.integers(0, 3)), perturb=maybe_perturb(draw, profile))

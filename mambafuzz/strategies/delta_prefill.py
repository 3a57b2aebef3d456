"""Gated-delta-rule prefill batches (`delta_prefill`), drawn where the engines' chunked-prefill bugs hide.

Chunked kernels split a sequence into chunks (16 to 64 tokens) and a prefix-caching one also at block
boundaries, so the lengths are drawn around chunk edges: exactly one or two chunks, a partial tail chunk
(one token past an edge, one short of it), short sequences and empty ones; with prefix caching the first
block boundary falls at, one before or one after a chunk edge (16, 32, 64 tokens in) as often as
anywhere, sequences end exactly on a boundary, and block sizes are drawn around the chunk sizes.  Most
rows take their columns as vLLM derives them from the tokens computed before (the initial slot then the
final one within a block), the rest arbitrary ones (has_initial_state drawn on its own, the initial
slot also a destination or not).  Rows without an initial state read nothing from a slot of stale
values; pad rows, pad destinations and unallocated (pad) table entries; no final state asked for one
case in six; both pool layouts, GDN's per-head and KDA's per-K gate, beta per head or per V, grouped
value heads, 16-bit states and activations.  Live rows never share a slot.  The CPU profile is small
(K, V 4..16, up to 34 tokens a row, 4 rows): every program is interpreted.  One case in four is ``exact``
(values any fp32 order keeps exact: no decay, beta 0 or 1, one-hot keys, no l2norm; the case type's
docstring): its pool lives in the arena, with slot padding, an offset and, one in ``huge_one_in``, a slot
the prefill reads or stores past 2^31 elements (mostly a 16-bit state: ``far_dtype``) or 2 GiB, reached by
a slot number (the pool sparse in the arena: judging it costs its held slots, not its size).
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.delta_prefill import DTYPES, LAYOUTS, DeltaPrefillCase

from .narrow import presence
from .perturb import maybe_perturb
from .prefill import block_table, far_dtype, place_far_slot, row_columns, table_columns
from .profiles import Profile
from .updates import arena_pool, far_slot_number

EDGES = (16, 32, 64)  # chunk edges engines use (FLA: 64; the project's kernel: 16)


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "len": 34, "any": 20, "dims": (4, 5, 8, 12, 16), "heads": 2, "group": 2, "slots": 10,
                "blocks": 3, "block_max": 34, "spare": 2, "huge_one_in": 3}
    return {"rows": 16, "len": 300, "any": 300, "dims": (16, 32, 64, 100, 128), "heads": 4, "group": 2, "slots": 160,
            "blocks": 8, "block_max": 160, "spare": 3, "huge_one_in": 4}


def _near_edge(draw, high: int) -> int:
    """A token count at, one before or one after a chunk edge (at most `high`, at least 1)."""
    edge = draw(st.sampled_from([e for e in EDGES if e <= high] or [high]))
    return max(1, min(high, edge + draw(st.sampled_from((-1, 0, 0, 1)))))


def _row_geometry(draw, lim: dict, bs: int | None):
    """(computed, length) of one row."""
    top = lim["len"]
    kind = draw(st.sampled_from(("short", "edge", "edge", "any", "empty") if bs is None else
                                ("short", "cross", "cross", "exact", "many", "any", "empty")))
    if kind == "empty":
        return 0 if bs is None else bs * draw(st.integers(0, lim["blocks"])), 0
    if bs is None:
        length = {"short": draw(st.integers(1, 8)), "edge": _near_edge(draw, top),
                  "any": draw(st.integers(1, lim["any"]))}[kind]
        return 0, length
    first_boundary = _near_edge(draw, bs) if draw(st.booleans()) else draw(st.integers(1, bs))
    c = bs * draw(st.integers(0, lim["blocks"])) + (bs - first_boundary) % bs
    if kind == "short":
        length = draw(st.integers(1, first_boundary))
    elif kind == "cross":
        length = first_boundary + draw(st.integers(1, max(1, min(bs - 1, 17))))
    elif kind == "exact":
        length = first_boundary + bs * draw(st.integers(0, 1))
    elif kind == "many":
        length = first_boundary + bs * draw(st.integers(1, 2)) + draw(st.integers(0, 3))
    else:
        length = draw(st.integers(1, lim["any"]))
    return c, max(1, min(length, top, first_boundary + 3 * bs))  # at most 4 boundaries


@st.composite
def delta_prefill_cases(draw, profile: Profile, pad: int = -1, layouts: tuple = LAYOUTS, kda: bool | None = None,
                        block_multiple: int = 1, cache_mode: str = "both"):
    """`layouts`: the pool layouts the kernel takes; `kda` (a per-K gate): None drawn, True always, False
    never; `block_multiple`: block sizes a multiple of it; `cache_mode`: none, all or both."""
    lim = _limits(profile)
    key_dim = draw(st.sampled_from(lim["dims"]))
    value_dim = key_dim if draw(st.integers(0, 3)) == 0 else draw(st.sampled_from(lim["dims"]))
    rows = draw(st.integers(1, lim["rows"]))
    apc = cache_mode == "all" or (cache_mode == "both" and draw(st.integers(0, 2)) > 0)
    bs = None
    if apc:
        units = lim["block_max"] // block_multiple
        near = [e // block_multiple + d for e in EDGES for d in (-1, 0, 1)]
        near = [u for u in near if 1 <= u <= units and (u * block_multiple) % block_multiple == 0]
        bs = block_multiple * draw(st.sampled_from(near or [1]) | st.integers(1, max(1, units)))
    geometry = [_row_geometry(draw, lim, bs) for _ in range(rows)]
    lens = tuple(length for _, length in geometry)
    columns, has_init = row_columns(draw, geometry, bs, max_first=2)
    cols, idx_2d = table_columns(draw, columns, apc, lim["spare"])
    slot_count, idx = block_table(draw, columns, cols, pad, lim["slots"])
    inits, firsts, lasts = zip(*columns)
    dtype, act_dtype = draw(st.sampled_from(tuple(DTYPES))), draw(st.sampled_from(tuple(DTYPES)))
    layout, heads, group = (draw(st.sampled_from(tuple(layouts))), draw(st.integers(1, lim["heads"])),
                            draw(st.integers(1, lim["group"])))
    exact = draw(st.integers(0, 3)) == 0
    final = draw(st.integers(0, 5)) > 0
    arena, offset, slot_pad = 64, 0, 0
    if exact:  # the pool in the arena; one case in huge_one_in, a slot a live row reads or stores far out
        far, dtype = far_dtype(draw, lim["huge_one_in"], dtype, DTYPES)
        elem = DTYPES[dtype]
        slot_bytes = heads * group * key_dim * value_dim * elem
        slot_stride, offset = arena_pool(draw, slot_bytes, elem)
        slot_pad = (slot_stride - slot_bytes) // elem
        top_slot = far_slot_number(draw, elem, offset, slot_stride, round_up=True) if far else None
        if top_slot is not None and place_far_slot(draw, idx, columns, geometry, has_init, pad, bs, top_slot, final):
            slot_count = top_slot + 1
        arena = offset + slot_count * slot_stride + 64
    return DeltaPrefillCase(
        arena_size=arena, dtype=dtype, act_dtype=act_dtype,
        layout=layout, slots=slot_count, heads=heads,
        group=group, key_dim=key_dim, value_dim=value_dim, lens=lens,
        idx=tuple(map(tuple, idx)), has_init=tuple(has_init), idx_2d=idx_2d,
        idx_stride=cols + draw(st.sampled_from([0, 0, 1, 3])),
        apc=apc, block_size=bs or 0, init=inits if apc else None, first=firsts if apc else None,
        last=lasts if apc else None, computed=tuple(c for c, _ in geometry) if apc else None, pad=pad,
        kda=presence(draw, kda), beta_per_v=draw(st.booleans()), l2norm=not exact and draw(st.booleans()),
        final=final, exact=exact, offset=offset, slot_pad=slot_pad, seed=draw(st.integers(0, 3)), perturb=maybe_perturb(draw, profile))

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
or stores past 2^31 elements (16-bit states) or 2 GiB, reached by a slot number.  Live rows never share a
slot.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.ssm_prefill import DTYPES, SsmPrefillCase

from .perturb import maybe_perturb
from .profiles import Profile

HUGE = 1 << 31
MAX_SPARSE = 7 << 30
EXACT_TOKENS = 96  # an exact row's |state| stays under 4 + L / 2 in quarters: 8 significant bits


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "heads": 3, "headdim": (1, 20), "dstate": (1, 16), "len": 40, "blocks": 3,
                "block_units": (16, 16), "spare": 2, "slots": 10, "huge_one_in": 3}
    return {"rows": 16, "heads": 8, "headdim": (8, 64), "dstate": (8, 128), "len": 300, "blocks": 6,
            "block_units": (64, 64), "spare": 3, "slots": 160, "huge_one_in": 4}


def _crossed(c: int, length: int, bs: int) -> int:
    return len(range(bs - c % bs, length, bs))


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
    columns, has_init = [], []
    for c, length in geometry:
        if not apc:
            columns.append((0, 0, 0))
            has_init.append(draw(st.integers(0, 3)) > 0)
        elif draw(st.integers(0, 3)) > 0:  # as the engine derives them
            columns.append((max(-(-c // bs) - 1, 0), c // bs, max(-(-(c + length) // bs) - 1, 0)))
            has_init.append(c > 0)
        else:  # arbitrary columns, as many boundary columns as boundaries crossed
            n = _crossed(c, length, bs) if length else 0
            first = draw(st.integers(0, 3))
            last = first + n
            init = draw(st.sampled_from((last, first, draw(st.integers(0, last + 2)))))
            columns.append((init, first, last))
            has_init.append(draw(st.booleans()))
    cols = max(max(col) for col in columns) + 1
    cols += draw(st.integers(0, lim["spare"])) if apc or draw(st.booleans()) else 0
    idx_2d = cols > 1 or draw(st.booleans())

    first_slot = 0 if pad == -1 else 1  # pad 0 keeps slot 0 the null block
    slot_count = max(draw(st.integers(1, lim["slots"])), first_slot + rows * cols + 1)
    fresh = iter(draw(st.permutations(range(first_slot, slot_count))))
    idx = []
    for b in range(rows):
        init, first, last = columns[b]
        row = [next(fresh) for _ in range(cols)]
        stores = [first + k for k in range(last - first)] + [last]
        kind = draw(st.sampled_from(("live", "live", "live", "pad", "pad", "pad_dst", "spare_pad")))
        if kind == "pad":
            row[init] = pad
            if draw(st.integers(0, 2)) == 0:  # a padding row of the batch: every entry the pad
                row = [pad] * cols
        elif kind == "pad_dst":
            spare = [c for c in stores if c != init]
            if spare:
                row[draw(st.sampled_from(spare))] = pad
        elif kind == "spare_pad":  # unused entries hold the pad (blocks not allocated)
            row = [v if c <= max(init, last) else pad for c, v in enumerate(row)]
        idx.append(row)

    elem = DTYPES[dtype]
    slot_bytes = heads * headdim * dstate * elem
    slot_stride, offset = slot_bytes, 0
    if exact:
        slot_stride = slot_bytes + elem * draw(st.sampled_from([0, 0, 1, 8]))
        offset = elem * draw(st.integers(0, 16))
        huge_n = lim["huge_one_in"]
        if huge_n and draw(st.integers(0, huge_n - 1)) == 0:
            # past 2^31 elements where the arena allows (a kernel's 32-bit slot * stride is in elements),
            # else past 2 GiB of bytes (a byte offset in 32 bits)
            reach = HUGE * elem if HUGE * elem + slot_stride * 4 < MAX_SPARSE else HUGE
            if (reach - offset) // slot_stride + 4 >= HUGE - 1:  # slot numbers are int32 too
                reach = HUGE
            top_slot = -(-(reach - offset) // slot_stride) + draw(st.integers(0, 2))
            top_slot = min(top_slot, (MAX_SPARSE - offset) // slot_stride - 1)
            live = []  # the entries a correct prefill reads or stores
            for b in range(rows):
                init, first, last = columns[b]
                if idx[b][init] == pad or lens[b] == 0:
                    continue
                if has_init[b]:
                    live.append((b, init))
                n = _crossed(geometry[b][0], lens[b], bs) if apc else 0
                live += [(b, c) for c in [first + k for k in range(n)] + [last] if idx[b][c] != pad]
            if live:
                b, c = draw(st.sampled_from(sorted(set(live))))
                keep = idx[b][c]
                idx[b] = [top_slot if v == keep else v for v in idx[b]]
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

"""State pools, block tables with aliasing, state-copy and align-mode cases.

Bugs hide where a column's source and destination are the same physical block
(the copy overlaps itself), where strides are padded, where DS rows are
strided, and where element sizes change the access width; so those are what
these strategies lean towards.  Cross-request sharing is read-only (prefix
caching): a block written by one request is never touched by another, so every
drawn case is well-posed.

``state_copy_cases`` also takes the contract's engine options: ``layout``
(``sd`` / ``ds``: conv states of that layout only, temporal states as ever),
``tiles`` (a fixed tile count instead of a drawn one) and ``skip_equal_cols``
(one request in two copies a column onto itself, the case a skipping kernel
must leave untouched).  With the defaults the draws are exactly as before.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.cases.postprocess import PostprocessCase
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.oracle import PoolLayout, decide

from .perturb import maybe_perturb
from .profiles import Profile, draw_wide

KINDS = ("conv_sd", "conv_ds", "temporal")
LAYOUT_KINDS = {"both": KINDS, "sd": ("conv_sd", "temporal"), "ds": ("conv_ds", "temporal")}
ELEM_SIZES = (2, 1, 4, 8)
ALIASING = ("distinct", "same", "shared")


TILE = 1024  # the smallest engine tile a wide state must cross


def _wide_shape(draw, profile: Profile, kind: str, elem: int) -> tuple[dict, int]:
    """A state over more than one 1 KiB tile: (kind fields, data bytes without padding).

    SD: ``state_len * dim * elem`` in (1 KiB, wide_bytes], with at least 4
    tokens so that a same-block shift by a small bias still overlaps.  DS: each
    row (1 KiB, wide_row_bytes], half the time at most about 2 KiB, with 8-byte
    elements (the fewest tokens: the project's DS kernel walks a row token by
    token, about a millisecond each in the interpreter), one to three rows.
    Temporal: one axis of (1 KiB, wide_bytes] bytes.
    """
    if kind == "temporal":
        n = draw(st.integers(TILE // elem + 1, profile.wide_bytes // elem))
        return {"inner": (n,)}, n * elem
    if kind == "conv_ds":
        elem = 8
        lo, hi = TILE // elem + 1, profile.wide_row_bytes // elem
        state_len = draw(st.one_of(st.integers(lo, min(hi, 2 * lo)), st.integers(lo, hi)))
        dim = draw(st.integers(1, 3))
        row_stride = (state_len + draw(st.sampled_from([0, 1, 3]))) * elem
        return {"state_len": state_len, "dim": dim, "row_stride": row_stride, "elem_size": elem}, dim * row_stride
    state_len = draw(st.integers(4, 32))
    token_lo = TILE // (state_len * elem) + 1
    dim = draw(st.integers(token_lo, max(token_lo, profile.wide_bytes // (state_len * elem))))
    return {"state_len": state_len, "dim": dim}, state_len * dim * elem


@st.composite
def pool_shapes(draw, profile: Profile, group: int, kinds: tuple = KINDS) -> dict:
    """One state's geometry, without its arena offset or block count; its kind one of `kinds`."""
    kind = draw(st.sampled_from(kinds))
    elem = draw(st.sampled_from(ELEM_SIZES))
    pad_elems = draw(st.sampled_from([0, 1, 3, 8]))
    shape = {"kind": kind, "elem_size": elem, "group": group}
    if draw_wide(draw, profile):
        fields, data = _wide_shape(draw, profile, kind, elem)
        shape.update(fields)
        shape["block_stride"] = data + pad_elems * shape["elem_size"]
        return shape
    if kind == "temporal":
        inner = tuple(draw(st.lists(st.integers(1, profile.max_inner), min_size=1, max_size=3)))
        shape["inner"] = inner
        data = elem
        for extent in inner:
            data *= extent
    else:
        if profile.max_state_len > 8:
            state_len = draw(st.one_of(st.integers(1, 8), st.integers(9, profile.max_state_len)))
        else:
            state_len = draw(st.integers(1, 8))  # the CPU profile: short windows (wide ones come above)
        dim = draw(st.integers(1, profile.max_dim if state_len <= 8 else 32))
        shape.update(state_len=state_len, dim=dim)
        if kind == "conv_ds":
            row_stride = (state_len + draw(st.sampled_from([0, 1, 3]))) * elem
            shape["row_stride"] = row_stride
            data = dim * row_stride
        else:
            data = state_len * dim * elem
    shape["block_stride"] = data + pad_elems * elem
    return shape


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


HUGE_OFFSET = 1 << 31  # a block at or past 2 GiB: where 32-bit address arithmetic wraps
HUGE_WRAP = (1 << 32) + (1 << 20)  # past 4 GiB: a 32-bit block offset wraps to a lower address in the arena


def _straddle_stride(shape: dict, top: int) -> int | None:
    """A block stride that starts block `top` below 2 GiB with an element of its data past it (the
    element offset crosses, the block offset does not); None when the data is too short for that."""
    elem = shape["elem_size"]
    data = PoolLayout(offset=0, num_blocks=1, **shape).data_bytes
    stride = (HUGE_OFFSET - 1) // top // elem * elem  # block `top` starts at most top x elem bytes short
    start = top * stride
    if stride < shape["block_stride"] or start >= HUGE_OFFSET or start + data - elem < HUGE_OFFSET:
        return None
    return stride


def _used_stride(draw, shape: dict, ids: list[int], used: set[int], room: int) -> int | None:
    """A block stride that puts the highest block a request copies past a drawn offset (past 4 GiB
    or just past 2 GiB: the block offset crosses), or half the time starts a block a request copies
    below 2 GiB with its data crossing (the element offset: ``_straddle_stride``, the lowest such
    block that fits), with all ``max(ids) + 2`` blocks inside `room` bytes; None if none fits."""
    top = max(used, default=0)
    if top <= 0:
        return None
    straddle = not draw(st.booleans())  # (False first: Hypothesis draws it as often, shrinks towards True)
    strides = [_straddle_stride(shape, b) for b in sorted(used) if b > 0] if straddle else []
    for target in (draw(st.sampled_from([HUGE_WRAP, HUGE_OFFSET])), HUGE_OFFSET):
        strides.append(max(_align_up(-(-target // top), 64), shape["block_stride"]))
    for stride in strides:
        if stride is not None and (max(ids) + 2) * stride <= room:
            return stride
    return None


def place_pools(draw, shapes: list[dict], tables: list[list[list[int]]], huge: bool = False,
                used: list[set[int]] | None = None) -> tuple[int, tuple[PoolLayout, ...]]:
    """Give each state an arena offset (with a sub-8-byte slip) and enough blocks for its table.

    `huge` stretches the first state's block stride so that its highest block
    starts past 2 GiB (the engine materialises such pools sparsely); with
    `used` (per group, the block ids requests copy from or to) it stretches
    the first state whose requests copy a block above 0 so that the highest
    used block starts past 2 GiB or past 4 GiB, or a used block's data crosses
    2 GiB, instead, when that fits (``_used_stride``).
    """
    cursor = 64
    pools = []
    first = 0 if used is None else next((i for i, s in enumerate(shapes) if max(used[s["group"]], default=0) > 0), 0)
    for i, shape in enumerate(shapes):
        ids = [b for row in tables[shape["group"]] for b in row]
        if huge and i == first and max(ids) > 0:
            stride = None
            if used is not None:  # the other states' pools and the gaps must fit too
                rest = sum((max(b for row in tables[o["group"]] for b in row) + 2) * o["block_stride"] + 136
                           for k, o in enumerate(shapes) if k != i)
                room = MAX_SPARSE_ARENA - rest - 256
                stride = _used_stride(draw, shape, ids, used[shape["group"]], room)
            if stride is None:
                stride = max(_align_up(-(-HUGE_OFFSET // max(ids)), 64), shape["block_stride"])
            shape = {**shape, "block_stride": stride}
        num_blocks = max(ids) + 1 + draw(st.integers(0, 1))
        slip = draw(st.integers(0, 7 // shape["elem_size"])) * shape["elem_size"]
        offset = _align_up(cursor, 8) + slip
        pools.append(PoolLayout(offset=offset, num_blocks=num_blocks, **shape))
        cursor = offset + num_blocks * shape["block_stride"] + 64
    return _align_up(cursor, 64), tuple(pools)


@st.composite
def block_tables(draw, groups: int, requests: int, cols: int, copies) -> list[list[list[int]]]:
    """Per-group tables [R][C]; `copies[r]` is (src_col, read_cols, dst_col) or None.

    Each request owns C physical blocks (shuffled), then: `same` aliases the
    destination column onto a column it reads (same physical block), `shared`
    points a column of one request at a read-only block of another.
    """
    tables = []
    for _ in range(groups):
        perm = draw(st.permutations(range(requests * cols)))
        table = [[perm[r * cols + c] for c in range(cols)] for r in range(requests)]
        written = set()
        for r, copy in enumerate(copies):
            if copy is None:
                continue
            read_cols, dst_col = copy
            alias = draw(st.sampled_from(ALIASING))
            if alias == "same":
                table[r][dst_col] = table[r][draw(st.sampled_from(read_cols))]
            written.add(table[r][dst_col])
        if requests > 1 and draw(st.booleans()):
            r, other = draw(st.permutations(range(requests)))[:2]
            c = draw(st.integers(0, cols - 1))
            c_other = draw(st.integers(0, cols - 1))
            donor = table[other][c_other]
            dst_r = copies[r][1] if copies[r] else None
            if c != dst_r and donor not in written and table[r][c] not in written:
                table[r][c] = donor
        tables.append(table)
    return tables


@st.composite
def _pool_layouts(draw, profile: Profile, kinds: tuple = KINDS):
    groups = draw(st.integers(1, 3))
    states = draw(st.integers(1, 4))
    shapes = [draw(pool_shapes(profile, group=draw(st.integers(0, groups - 1)), kinds=kinds))
              for _ in range(states)]
    used = sorted({s["group"] for s in shapes})  # drop groups no state uses, renumber densely
    for s in shapes:
        s["group"] = used.index(s["group"])
    return len(used), shapes


@st.composite
def state_copy_cases(draw, profile: Profile, layout: str = "both", tiles: int | None = None,
                     skip_equal_cols: bool = False) -> StateCopyCase:
    """`layout` sd / ds / both; `tiles` a fixed tile count (None: drawn); `skip_equal_cols` the variant
    whose kernel skips src_col == dst_col (such requests drawn half the time)."""
    groups, shapes = draw(_pool_layouts(profile, LAYOUT_KINDS[layout]))
    has_temporal = any(s["kind"] == "temporal" for s in shapes)
    requests = draw(st.integers(1, profile.max_requests))
    cols = draw(st.integers(2, profile.max_cols))
    src_cols, dst_cols, biases, copies = [], [], [], []
    for _ in range(requests):
        hi = cols - 1 if has_temporal else 9
        bias = draw(st.one_of(st.integers(0, min(3, hi)), st.integers(0, hi)))  # small shifts are the racy ones
        src = draw(st.integers(0, (cols - 1 - bias) if has_temporal else cols - 1))
        if skip_equal_cols and draw(st.booleans()):
            dst = src  # the request a skipping kernel must leave alone
        else:
            dst = draw(st.integers(0, cols - 1))
        read_cols = [src] + ([src + bias] if has_temporal and bias else [])
        src_cols.append(src), dst_cols.append(dst), biases.append(bias)
        copies.append((read_cols, dst))
    tables = draw(block_tables(groups, requests, cols, copies))
    huge = draw(st.integers(0, profile.huge_one_in - 1)) == profile.huge_one_in - 1  # a pool past 2 GiB
    moves = [r for r in range(requests)  # a block copied onto itself with no shift moves nothing
             if biases[r] or any(t[r][src_cols[r]] != t[r][dst_cols[r]] for t in tables)]
    used = [{t[r][c] for r in moves for c in (*copies[r][0], copies[r][1])}
            for t in tables] if profile.huge_used else None
    arena_size, pools = place_pools(draw, shapes, tables, huge=huge, used=used)
    n_tiles = draw(num_tiles(profile)) if tiles is None else tiles
    return StateCopyCase(arena_size=arena_size, pools=pools, block_tables=_freeze(tables), num_tiles=n_tiles,
                         seed=draw(st.integers(0, 2**32 - 1)), src_cols=tuple(src_cols), dst_cols=tuple(dst_cols),
                         biases=tuple(biases), perturb=maybe_perturb(draw, profile),
                         skip_equal_cols=skip_equal_cols, tiles_fixed=tiles is not None)


def num_tiles(profile: Profile) -> st.SearchStrategy:
    """1 and the maximum, 2 and one below it (more than one tile, fewer than all), or any."""
    top = profile.max_tiles
    picks = sorted({1, top, min(2, top), max(1, top - 1)}, key=lambda n: (n != 1, n != top, n))
    return st.one_of(st.sampled_from(picks), st.integers(1, top))


def _freeze(tables):
    return tuple(tuple(tuple(row) for row in table) for table in tables)


@st.composite
def align_requests(draw, block_size: int) -> tuple[int, int, int, int, int]:
    """(num_computed, num_scheduled, num_draft, num_accepted, state_idx) near a block boundary."""
    boundary = draw(st.integers(1, 4)) * block_size
    running = max(1, boundary - draw(st.integers(-2, block_size + 1)))
    num_draft = draw(st.integers(0, 4))
    to_boundary = boundary - running + 1  # accepted count that lands exactly on the boundary
    accepted = draw(st.sampled_from([to_boundary, to_boundary + 1, to_boundary - 1, 1, num_draft + 1]))
    accepted = max(1, accepted)
    num_draft = max(num_draft, accepted - 1)
    num_scheduled = num_draft + 1
    num_computed = running - num_scheduled + num_draft
    aligned = (running + accepted - 1) // block_size * block_size
    dst_col = aligned // block_size - 1
    state_idx = max(0, dst_col - draw(st.sampled_from([0, 1, 2, -1])))
    return num_computed, num_scheduled, num_draft, accepted, state_idx


@st.composite
def postprocess_cases(draw, profile: Profile) -> PostprocessCase:
    groups, shapes = draw(_pool_layouts(profile))
    block_size = draw(st.sampled_from([4, 1, 2, 3, 8, 16]))
    requests = draw(st.integers(1, profile.max_requests))
    reqs = [draw(align_requests(block_size)) for _ in range(requests)]
    comp, sched, draft, acc, idx = (list(v) for v in zip(*reqs))
    d = decide(comp, sched, draft, acc, idx, block_size)
    has_temporal = any(s["kind"] == "temporal" for s in shapes)
    need = [int(d.dst_col[r]) + 1 for r in range(requests)]
    need += [int(d.src_col[r] + (d.bias[r] if has_temporal else 0)) + 1 for r in range(requests) if d.do_copy[r]]
    cols = max(2, max(need), max(idx) + 1)
    copies = []
    for r in range(requests):
        if not d.do_copy[r]:
            copies.append(None)
            continue
        read = [int(d.src_col[r])] + ([int(d.src_col[r] + d.bias[r])] if has_temporal and d.bias[r] else [])
        copies.append((read, int(d.dst_col[r])))
    tables = draw(block_tables(groups, requests, cols, copies))
    huge = draw(st.integers(0, profile.huge_one_in - 1)) == profile.huge_one_in - 1  # a pool past 2 GiB
    used = [{t[r][c] for r, copy in enumerate(copies) if copy for c in (*copy[0], copy[1])} for t in tables] \
        if profile.huge_used else None
    arena_size, pools = place_pools(draw, shapes, tables, huge=huge, used=used)
    tiles = draw(num_tiles(profile))
    return PostprocessCase(arena_size=arena_size, pools=pools, block_tables=_freeze(tables), num_tiles=tiles,
                           seed=draw(st.integers(0, 2**32 - 1)), block_size=block_size,
                           num_computed=tuple(comp), num_scheduled=tuple(sched), num_draft=tuple(draft),
                           num_accepted=tuple(acc), state_idx=tuple(idx), perturb=maybe_perturb(draw, profile))

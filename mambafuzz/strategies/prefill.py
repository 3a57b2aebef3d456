"""What the prefill strategies (conv, SSM, delta rule) share: each row's columns (as vLLM derives them from
the tokens computed before, or arbitrary ones keeping ``last - first`` the boundaries crossed), the block
table (fresh slots a row, pad rows, pad destinations, unallocated entries) and the far slot placed on an
entry a correct prefill reads or stores, and that pool's dtype.  The draws are made in the order each
strategy made them before they were shared; ``far_dtype`` added draws to the exact SSM and delta-rule
cases, so a seed may now draw a different exact case there."""
from __future__ import annotations

from hypothesis import strategies as st

# a row's kind in the table: live (3 in 6), its read entry the pad, a destination the pad, unused entries the pad
ROW_KINDS = ("live", "live", "live", "pad", "pad_dst", "spare_pad")


def crossed(c: int, length: int, bs: int) -> int:
    """The block boundaries a chunk of `length` tokens crosses after `c` computed tokens, blocks of `bs`."""
    return len(range(bs - c % bs, length, bs))


def row_columns(draw, geometry, bs: int | None, max_first: int = 3):
    """Per row of `geometry` ((computed, length) each): (init, first, last) and has_initial_state; then the
    table's columns (spare ones, always with prefix caching) and whether it is 2-D.  `bs` None: no prefix
    caching (column 0, has_initial_state 3 times in 4)."""
    columns, has_init = [], []
    for c, length in geometry:
        if bs is None:
            columns.append((0, 0, 0))
            has_init.append(draw(st.integers(0, 3)) > 0)
        elif draw(st.integers(0, 3)) > 0:  # as the engine derives them
            columns.append((max(-(-c // bs) - 1, 0), c // bs, max(-(-(c + length) // bs) - 1, 0)))
            has_init.append(c > 0)
        else:  # arbitrary columns, as many boundary columns as boundaries crossed
            n = crossed(c, length, bs) if length else 0
            first = draw(st.integers(0, max_first))
            last = first + n
            init = draw(st.sampled_from((last, first, draw(st.integers(0, last + 2)))))
            columns.append((init, first, last))
            has_init.append(draw(st.booleans()))
    return columns, has_init


def table_columns(draw, columns, apc: bool, spare: int) -> tuple[int, bool]:
    """The table's column count (the rows' highest, plus up to `spare` unused ones) and whether it is 2-D."""
    cols = max(max(col) for col in columns) + 1
    cols += draw(st.integers(0, spare)) if apc or draw(st.booleans()) else 0
    return cols, cols > 1 or draw(st.booleans())


def block_table(draw, columns, cols: int, pad: int, most_slots: int, kinds=ROW_KINDS, whole_pad=None):
    """(slot count, rows of the table): each row's entries fresh slots (pad 0 keeps slot 0 the null block),
    then made a pad row (`whole_pad(draw)`: every entry the pad; default half the time), given a pad
    destination, or its unused entries the pad, by its kind drawn from `kinds`."""
    first_slot = 0 if pad == -1 else 1
    slot_count = max(draw(st.integers(1, most_slots)), first_slot + len(columns) * cols + 1)
    fresh = iter(draw(st.permutations(range(first_slot, slot_count))))
    idx = []
    for init, first, last in columns:
        row = [next(fresh) for _ in range(cols)]
        stores = [first + k for k in range(last - first)] + [last]
        kind = draw(st.sampled_from(kinds))
        if kind == "pad":
            row[init] = pad
            if whole_pad(draw) if whole_pad else draw(st.booleans()):  # a padding row of the batch
                row = [pad] * cols
        elif kind == "pad_dst":
            spare = [c for c in stores if c != init]
            if spare:
                row[draw(st.sampled_from(spare))] = pad
        elif kind == "spare_pad":  # unused entries hold the pad (blocks not allocated)
            row = [v if c <= max(init, last) else pad for c, v in enumerate(row)]
        idx.append(row)
    return slot_count, idx


def far_dtype(draw, one_in: int, dtype: str, sizes: dict[str, int]) -> tuple[bool, str]:
    """Whether an exact case gets a far slot (one in `one_in`; 0: never; ``updates.far_slot_number`` draws
    it), and its state dtype (`sizes`: bytes an element).  A far case with 4-byte elements becomes a 2-byte
    one two times in three: the sparse arena (8 GiB) reaches 2^31 elements, where a kernel's 32-bit
    ``slot * stride`` wraps, only in 2-byte elements, and a 4-byte pool reaches only 2 GiB of bytes.  The
    2-byte ones come first: what Hypothesis draws most often and shrinks to."""
    far = bool(one_in) and draw(st.integers(0, one_in - 1)) == 0
    if far and sizes[dtype] > 2:
        dtype = draw(st.sampled_from([d for d, size in sizes.items() if size == 2] + [dtype]))
    return far, dtype


def place_far_slot(draw, idx, columns, geometry, has_init, pad: int, bs: int | None, top_slot: int,
                    final: bool = True) -> bool:
    """Renumber one slot a correct prefill reads or stores (a live row's initial entry when it has an initial
    state, its boundary destinations, its final one when the case stores a final state: `final`) to
    `top_slot`, in place; False where no row has one.  A far slot nothing touches checks no offset."""
    live = []
    for b, ((init, first, last), (c, length)) in enumerate(zip(columns, geometry)):
        if idx[b][init] == pad or length == 0:
            continue
        if has_init[b]:
            live.append((b, init))
        n = crossed(c, length, bs) if bs is not None else 0
        live += [(b, col) for col in [first + k for k in range(n)] + ([last] if final else []) if idx[b][col] != pad]
    if not live:
        return False
    b, col = draw(st.sampled_from(sorted(set(live))))
    keep = idx[b][col]
    idx[b] = [top_slot if v == keep else v for v in idx[b]]
    return True

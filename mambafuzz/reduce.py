"""Case-level reduction after Hypothesis has shrunk the choice sequence.

Hypothesis shrinks the draws; some cuts it cannot take, because deleting or
lowering a draw re-lays out everything after it: removing one whole row,
request or state; moving rows and pools down towards byte 0 and cutting the
arena to what they use (the strategies leave 64-byte gaps); trying 2, half or
n - 1 tiles rather than only 1.  These candidates do that.  Each is a valid
case when the input was (checked here with the oracle's cheap geometry
checks) and strictly smaller by ``Case.size``, so the fuzz loop keeps it.

``reduce_case`` is greedy: it takes the first candidate the caller's
``still_fails`` accepts and starts again from it.  The caller decides what
"still fails" means (the fuzz loop asks for wrong bytes again when the
original failure had them).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Iterator

import numpy as np

from mambafuzz import oracle

from .cases import BatchCopyCase, Case, PostprocessCase, StateCopyCase
from .materialize import GUARD

_REQUEST_FIELDS = {
    StateCopyCase: ("src_cols", "dst_cols", "biases"),
    PostprocessCase: ("num_computed", "num_scheduled", "num_draft", "num_accepted", "state_idx"),
}


def _without(items: tuple, i: int) -> tuple:
    return items[:i] + items[i + 1:]


def _down_to(value: int, residue: int, modulus: int) -> int:
    """The smallest x >= value with x % modulus == residue % modulus."""
    return value + (residue - value) % modulus


# --------------------------------------------------------------------------
# batch copies
# --------------------------------------------------------------------------
def _rows_end(copies) -> int:
    return max((max(s, d) + n for s, d, n in copies), default=0)


def _batch_ok(case: BatchCopyCase) -> bool:
    """Well-posed and inside the arena (what materialize would accept)."""
    if case.arena_size < 1 or any(min(row) < 0 for row in case.copies):
        return False
    rows = np.asarray(case.copies, dtype=np.int64).reshape(-1, 3)
    try:
        oracle.check_batch(rows[:, 0], rows[:, 1], rows[:, 2], case.arena_size)
    except oracle.OracleError:
        return False
    return True


def _compacted(case: BatchCopyCase, copies) -> BatchCopyCase:
    """`copies` in an arena cut to where they end."""
    return dataclasses.replace(case, copies=tuple(copies), arena_size=max(1, _rows_end(copies)))


def _packed_rows(copies, keep_alignment: bool):
    """Rows in offset order, each placed right after the one before (its own geometry kept).

    With `keep_alignment` each row moves by a multiple of 8, so every address
    keeps its alignment.
    """
    out = list(copies)
    cursor = 0
    for i in sorted(range(len(copies)), key=lambda i: min(copies[i][:2])):
        s, d, n = copies[i]
        low = min(s, d)
        new_low = _down_to(cursor, low, 8) if keep_alignment else cursor
        new_low = min(new_low, low)
        out[i] = (s - low + new_low, d - low + new_low, n)
        cursor = max(s, d) - low + new_low + n
    return tuple(out)


def _replace_row(copies, i, row):
    return copies[:i] + (row,) + copies[i + 1:]


def _batch_candidates(case: BatchCopyCase) -> Iterator[BatchCopyCase]:
    copies = case.copies
    if len(copies) > 1:
        for i in range(len(copies)):
            yield dataclasses.replace(case, copies=_without(copies, i))
    # rows packed from byte 0 up and the arena cut to their end; exact first, then keeping alignment
    for keep in (False, True):
        yield _compacted(case, _packed_rows(copies, keep))
    if _rows_end(copies) < case.arena_size:
        yield _compacted(case, copies)
    for i, (src, dst, n) in enumerate(copies):
        if n > 1:  # fewer bytes in a row, same overlap geometry
            for smaller in sorted({1, n // 2, min(n - 1, 16), n - 1}):
                yield dataclasses.replace(case, copies=_replace_row(copies, i, (src, dst, smaller)))
        if abs(src - dst) > 1:  # a smaller shift, inside the row's own footprint: src towards dst, or dst
            step = 1 if src > dst else -1  # towards src (which one moves can matter for alignment)
            for gap in sorted({1, abs(src - dst) // 2, abs(src - dst) - 1}):
                yield dataclasses.replace(case, copies=_replace_row(copies, i, (dst + step * gap, dst, n)))
                yield dataclasses.replace(case, copies=_replace_row(copies, i, (src, src - step * gap, n)))
        low = min(src, dst)
        for new_low in sorted({0, low % 8, (low // 2) - (low // 2 - low) % 8}):
            if 0 <= new_low < low:  # this row alone, down towards byte 0
                delta = low - new_low
                yield dataclasses.replace(case, copies=_replace_row(copies, i, (src - delta, dst - delta, n)))


# --------------------------------------------------------------------------
# pools (state copy, postprocess)
# --------------------------------------------------------------------------
def _pools_end(pools) -> int:
    """Where the pools' bytes end: the last block's data plus the padding the engine checks."""
    return max((p.offset + (p.num_blocks - 1) * p.block_stride + min(p.block_stride, p.data_bytes + GUARD)
                for p in pools), default=1)


def _pools_ok(case) -> bool:
    if case.arena_size < 1:
        return False
    try:
        for p in case.pools:
            p.validate(case.arena_size)
    except oracle.OracleError:
        return False
    tables = case.block_tables
    for p in case.pools:
        if not 0 <= p.group < len(tables):
            return False
        ids = [b for row in tables[p.group] for b in row]
        if ids and not 0 <= min(ids) <= max(ids) < p.num_blocks:
            return False
    return True


def _pool_compacted(case, **changes):
    """`case` with `changes`, in an arena cut to where its pools end."""
    out = dataclasses.replace(case, **changes)
    return dataclasses.replace(out, arena_size=max(1, _pools_end(out.pools)))


def _packed_pools(pools, keep_alignment: bool):
    """Pools in offset order from byte 0, each right after the blocks of the one before."""
    out = list(pools)
    cursor = 0
    for s in sorted(range(len(pools)), key=lambda s: pools[s].offset):
        p = pools[s]
        modulus = 8 if keep_alignment else p.elem_size
        offset = min(p.offset, _down_to(cursor, p.offset, modulus))
        out[s] = dataclasses.replace(p, offset=offset)
        cursor = offset + p.num_blocks * p.block_stride
    return tuple(out)


def _group_ids(case, group: int) -> list[int]:
    return sorted({b for row in case.block_tables[group] for b in row})


def _dense_tables(case):
    """Block ids renumbered 0.. per group (order kept); each pool's block count cut to match."""
    tables, counts = [], []
    for g, table in enumerate(case.block_tables):
        ids = _group_ids(case, g)
        index = {b: k for k, b in enumerate(ids)}
        tables.append(tuple(tuple(index[b] for b in row) for row in table))
        counts.append(max(1, len(ids)))
    pools = tuple(dataclasses.replace(p, num_blocks=counts[p.group]) for p in case.pools)
    return tuple(tables), pools


def _without_group(case, g: int):
    """Block table `g` (which no state uses) dropped; later groups renumbered."""
    pools = tuple(dataclasses.replace(p, group=p.group - (p.group > g)) for p in case.pools)
    return dataclasses.replace(case, block_tables=_without(case.block_tables, g), pools=pools)


def _droppable_columns(case: StateCopyCase) -> list[int]:
    """Columns no request reads or writes and, with a temporal state, none strictly between a
    request's src_col and src_col + bias (dropping one would move what src_col + bias names)."""
    cols = len(case.block_tables[0][0])
    keep = set(case.src_cols) | set(case.dst_cols)
    if any(p.kind == "temporal" for p in case.pools):
        for s, b in zip(case.src_cols, case.biases):
            keep |= set(range(s, s + b + 1))
    return [c for c in reversed(range(cols)) if c not in keep]


def _without_column(case: StateCopyCase, c: int) -> StateCopyCase:
    """Column `c` (which no request reads or writes) dropped from every table; later columns renumbered."""
    tables = tuple(tuple(row[:c] + row[c + 1:] for row in table) for table in case.block_tables)
    return dataclasses.replace(case, block_tables=tables, src_cols=tuple(s - (s > c) for s in case.src_cols),
                               dst_cols=tuple(d - (d > c) for d in case.dst_cols))


def _tile_counts(n: int) -> list[int]:
    return sorted({1, 2, n // 2, n - 1} & set(range(1, n)))


def _pool_candidates(case) -> Iterator:
    requests = case.num_requests
    if requests > 1:
        for r in range(requests):
            changes = {f: _without(getattr(case, f), r) for f in _REQUEST_FIELDS[type(case)]}
            changes["block_tables"] = tuple(_without(table, r) for table in case.block_tables)
            yield dataclasses.replace(case, **changes)
    if len(case.pools) > 1:
        for s in range(len(case.pools)):
            yield dataclasses.replace(case, pools=_without(case.pools, s))
    used_groups = {p.group for p in case.pools}
    for g in reversed(range(len(case.block_tables))):
        if g not in used_groups and len(case.block_tables) > 1:
            yield _without_group(case, g)
    if isinstance(case, StateCopyCase) and case.block_tables and case.block_tables[0]:
        for c in _droppable_columns(case):
            yield _without_column(case, c)
    for n in _tile_counts(case.num_tiles):
        yield dataclasses.replace(case, num_tiles=n)
    # fewer blocks: ids renumbered densely, or only the unused blocks at the top dropped
    tables, pools = _dense_tables(case)
    yield _pool_compacted(case, block_tables=tables, pools=pools)
    trimmed = tuple(dataclasses.replace(p, num_blocks=max(1, max(_group_ids(case, p.group), default=0) + 1))
                    if p.group < len(case.block_tables) else p for p in case.pools)
    yield _pool_compacted(case, pools=trimmed)
    # pools packed from byte 0 up and the arena cut to their end; exact first, then keeping alignment
    for keep in (False, True):
        yield _pool_compacted(case, pools=_packed_pools(case.pools, keep))
    if _pools_end(case.pools) < case.arena_size:
        yield _pool_compacted(case)


# --------------------------------------------------------------------------
def _valid(case: Case) -> bool:
    return _batch_ok(case) if isinstance(case, BatchCopyCase) else _pools_ok(case)


def candidates(case: Case) -> Iterator[Case]:
    """Valid, strictly smaller cases (by ``Case.size``), biggest cuts first (the race amplification
    first of all)."""
    if getattr(case, "perturb", None) is not None:
        yield dataclasses.replace(case, perturb=None)
    raw = _batch_candidates(case) if isinstance(case, BatchCopyCase) else _pool_candidates(case)
    if case.seed != 0:  # the canonical fill last: the same geometry found twice is one crash file
        raw = itertools.chain(raw, [case.with_seed(0)])
    seen = {case}
    for smaller in raw:
        if smaller in seen or not _valid(smaller):
            continue  # a cut that changed nothing (already compact), or one that broke the geometry
        seen.add(smaller)
        yield smaller


def reduce_case(case: Case, still_fails: Callable[[Case], bool], budget_ok: Callable[[], bool]) -> tuple[Case, int]:
    """Greedy: take any smaller candidate that still fails, until none does."""
    tried = 0
    progress = True
    while progress and budget_ok():
        progress = False
        for smaller in candidates(case):
            if not budget_ok():
                break
            tried += 1
            if still_fails(smaller):
                case, progress = smaller, True
                break
    return case, tried

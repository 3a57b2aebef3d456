"""State copies between blocks of paged pools (docs/contracts.md#state_copy).

conv: tokens ``b .. L-1`` of the source block become tokens ``0 .. L-1-b``
of the destination block (either layout; nothing if ``b >= L``); the
destination's tokens ``L-b ..`` and all padding are unchanged.
temporal: block ``row[src_col + b]`` is copied whole (data bytes only) onto
``row[dst_col]``.  Everything is read from the unmodified snapshot, so a
block copied onto itself has memmove semantics.
"""
from __future__ import annotations

import numpy as np

from . import _checks
from ._intervals import find_interval_conflict
from .errors import IllPosedBatch, OracleError
from .pools import PoolLayout

__all__ = ["apply_state_copy", "expect_state_copies"]


def _label(request, state, pool) -> str:
    parts = []
    if request is not None:
        parts.append(f"request {request}")
    if state is not None:
        parts.append(f"state {state}")
    parts.append(f"{pool.kind} pool")
    return ", ".join(parts)


def _resolve(pool: PoolLayout, row: np.ndarray, src_col: int, dst_col: int, bias: int,
             request=None, state=None) -> tuple[int, int]:
    """(source block, destination block) of one state copy, validated."""
    where = _label(request, state, pool)
    if bias < 0:
        raise OracleError(f"bias < 0: bias={bias} for {where}")
    ncols = row.size
    for name, col in (("src_col", src_col), ("dst_col", dst_col)):
        if not 0 <= col < ncols:
            raise OracleError(f"{name} {col} out of range [0, {ncols}) of the block-table columns for {where}")
    col = src_col
    if pool.kind == "temporal":
        col = src_col + bias
        if col >= ncols:
            raise OracleError(
                f"temporal src_col+bias = {src_col}+{bias} = {col} is past the block-table columns "
                f"({ncols}) for {where}"
            )
    blocks = []
    for name, c in (("source", col), ("destination", dst_col)):
        block = int(row[c])
        if not 0 <= block < pool.num_blocks:
            raise OracleError(
                f"{name} block id {block} (block-table column {c}) out of range "
                f"[0, {pool.num_blocks}) for {where}"
            )
        blocks.append(block)
    return blocks[0], blocks[1]


def _copy_extents(pool: PoolLayout, src_block: int, dst_block: int, bias: int):
    """Byte intervals one copy reads and writes: (read_starts, read_ends, write_starts, write_ends)."""
    so, do = pool.block_offset(src_block), pool.block_offset(dst_block)
    e, L = pool.elem_size, pool.state_len
    if pool.kind == "temporal":
        n = pool.data_bytes
        return (np.array([so]), np.array([so + n]), np.array([do]), np.array([do + n]))
    if bias >= L:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    if pool.kind == "conv_sd":
        tok = pool.token_bytes
        return (np.array([so + bias * tok]), np.array([so + L * tok]),
                np.array([do]), np.array([do + (L - bias) * tok]))
    rows = np.arange(pool.dim, dtype=np.int64) * pool.row_stride_eff
    return (so + rows + bias * e, so + rows + L * e, do + rows, do + rows + (L - bias) * e)


def _apply(out, snapshot, pool: PoolLayout, src_block: int, dst_block: int, bias: int) -> None:
    if pool.kind == "temporal":
        so, do, n = pool.block_offset(src_block), pool.block_offset(dst_block), pool.data_bytes
        out[do:do + n] = snapshot[so:so + n]
        return
    L = pool.state_len
    if bias >= L:
        return
    src = pool.token_view(snapshot, src_block)
    dst = pool.token_view(out, dst_block)
    if pool.kind == "conv_sd":  # tokens are rows
        dst[:L - bias] = src[bias:]
    else:  # tokens are elements along each row
        e = pool.elem_size
        dst[:, :(L - bias) * e] = src[:, bias * e:]


def apply_state_copy(out, snapshot, pool, block_row, src_col, dst_col, bias) -> None:
    """Apply one state copy of one request: read ``snapshot``, write ``out``.

    ``block_row`` is the request's 1-D block-table row for ``pool.group``.
    ``out`` must be a separate array the size of the snapshot.
    """
    snapshot = _checks.arena("snapshot", snapshot)
    out = _checks.out_arena(out, snapshot)
    if not isinstance(pool, PoolLayout):
        raise OracleError(f"pool must be a PoolLayout, got {type(pool).__name__}")
    pool.validate(snapshot.size)
    row = _checks.int_array("block_row", block_row)
    src_col = _checks.int_scalar("src_col", src_col)
    dst_col = _checks.int_scalar("dst_col", dst_col)
    bias = _checks.int_scalar("bias", bias)
    sb, db = _resolve(pool, row, src_col, dst_col, bias)
    _apply(out, snapshot, pool, sb, db, bias)


def checked_pools(pools, arena_size: int, num_groups: int) -> list[PoolLayout]:
    try:
        pools = list(pools)
    except TypeError:
        raise OracleError(f"pools must be a sequence of PoolLayout, got {type(pools).__name__}") from None
    for s, pool in enumerate(pools):
        if not isinstance(pool, PoolLayout):
            raise OracleError(f"pools[{s}] must be a PoolLayout, got {type(pool).__name__}")
        pool.validate(arena_size)
        if pool.group >= num_groups:
            raise OracleError(
                f"pools[{s}] uses group {pool.group} but block_tables has {num_groups} group(s)"
            )
    return pools


def checked_block_tables(block_tables, num_requests: int) -> np.ndarray:
    bt = _checks.int_array("block_tables", block_tables, ndim=3)
    if num_requests > bt.shape[1]:
        raise OracleError(
            f"{num_requests} requests but block_tables has only {bt.shape[1]} rows (shape {bt.shape})"
        )
    return bt


def run_state_copies(snapshot, pools, bt, requests, src_cols, dst_cols, biases) -> np.ndarray:
    """Validate, check well-posedness, and apply the copies of ``requests``
    (indices into the per-request arrays and block-table rows). Private to the package."""
    nstates = len(pools)
    plans = []
    starts, ends, owners, writes = [], [], [], []
    for r in requests:
        for s, pool in enumerate(pools):
            row = bt[pool.group, r]
            sb, db = _resolve(pool, row, int(src_cols[r]), int(dst_cols[r]), int(biases[r]), r, s)
            b = int(biases[r])
            plans.append((pool, sb, db, b))
            rs, re, ws, we = _copy_extents(pool, sb, db, b)
            owner = r * nstates + s
            for st, en, is_w in ((rs, re, False), (ws, we, True)):
                starts.append(st)
                ends.append(en)
                owners.append(np.full(st.size, owner, np.int64))
                writes.append(np.full(st.size, is_w))
    if starts:
        found = find_interval_conflict(
            np.concatenate(starts), np.concatenate(ends), np.concatenate(owners), np.concatenate(writes)
        )
        if found is not None:
            a, b, offset, access = found
            raise IllPosedBatch(divmod(a, nstates), divmod(b, nstates), offset, access)
    out = snapshot.copy()
    for pool, sb, db, b in plans:
        _apply(out, snapshot, pool, sb, db, b)
    return out


def expect_state_copies(snapshot, pools, block_tables, src_cols, dst_cols, biases) -> np.ndarray:
    """The arena after copying every state of every request (docs/contracts.md#state_copy).

    ``block_tables``: int ``[G, R, C]``; request ``i`` (``i < len(src_cols) <= R``)
    uses row ``i`` of ``block_tables[pool.group]``.  A byte written by one
    (request, state) copy and read or written by another raises
    :class:`IllPosedBatch` with ``(request, state)`` ids; a copy overlapping
    only itself (same block as source and destination) is legal.
    """
    snapshot = _checks.arena("snapshot", snapshot)
    src_cols, dst_cols, biases = _checks.int_arrays(src_cols=src_cols, dst_cols=dst_cols, biases=biases)
    n = src_cols.size
    bt = checked_block_tables(block_tables, n)
    pools = checked_pools(pools, snapshot.size, bt.shape[0])
    return run_state_copies(snapshot, pools, bt, range(n), src_cols, dst_cols, biases)

"""memmove and batch copies on a flat byte arena (docs/contracts.md#memmove and #batch_memcpy).

Expectations are read from an unmodified snapshot of the arena; the snapshot
is never written.  Pointers are byte offsets into the snapshot.
"""
from __future__ import annotations

import numpy as np

from . import _checks
from ._intervals import find_interval_conflict
from .errors import IllPosedBatch, OracleError

__all__ = ["expect_memmove", "find_batch_conflict", "check_batch", "expect_batch"]

_INT64_MAX = np.iinfo(np.int64).max


def _check_range(what: str, start: int, n: int, arena_size: int) -> None:
    if start < 0 or start > arena_size - n:
        raise OracleError(
            f"{what} range [{start}, {start + n}) is outside the arena [0, {arena_size})"
        )


def expect_memmove(snapshot, dst, src, n) -> np.ndarray:
    """The arena after ``memmove(dst, src, n)``: ``out[dst:dst+n] == snapshot[src:src+n]``.

    Every other byte equals the snapshot.  Overlap in either direction is
    legal.  The result is built in one pass (each output byte written once).
    """
    snapshot = _checks.arena("snapshot", snapshot)
    dst = _checks.int_scalar("dst", dst)
    src = _checks.int_scalar("src", src)
    n = _checks.int_scalar("n", n)
    if n < 0:
        raise OracleError(f"negative size n={n}")
    size = snapshot.size
    _check_range("src", src, n, size)
    _check_range("dst", dst, n, size)
    out = np.empty_like(snapshot)
    out[:dst] = snapshot[:dst]
    out[dst:dst + n] = snapshot[src:src + n]
    out[dst + n:] = snapshot[dst + n:]
    return out


def _batch_arrays(src, dst, sizes):
    src, dst, sizes = _checks.int_arrays(src=src, dst=dst, sizes=sizes)
    if (sizes < 0).any():
        i = _checks.first_bad(sizes < 0)
        raise OracleError(f"negative size {int(sizes[i])} for copy {i}")
    for name, ptr in (("src", src), ("dst", dst)):
        wrap = ptr > _INT64_MAX - sizes
        if wrap.any():
            i = _checks.first_bad(wrap)
            raise OracleError(f"{name} range of copy {i} overflows int64: {int(ptr[i])} + {int(sizes[i])}")
    return src, dst, sizes


def _check_batch_ranges(src, dst, sizes, arena_size: int) -> None:
    for name, ptr in (("src", src), ("dst", dst)):
        bad = (ptr < 0) | (ptr > arena_size - sizes)
        if bad.any():
            i = _checks.first_bad(bad)
            raise OracleError(
                f"{name} range of copy {i} [{int(ptr[i])}, {int(ptr[i] + sizes[i])}) "
                f"is outside the arena [0, {arena_size})"
            )


def find_batch_conflict(src, dst, sizes):
    """``(i, j, offset)``: copy ``i`` writes byte ``offset``, copy ``j != i`` reads or writes it.

    ``offset`` is the lowest such byte; ``None`` when the batch is well-posed.
    Zero-size copies touch nothing; two reads of one byte are fine; a copy
    overlapping itself is fine.  O(n log n) in the number of copies.
    """
    found = _find_batch_conflict(*_batch_arrays(src, dst, sizes))
    return None if found is None else found[:3]


def _find_batch_conflict(src, dst, sizes):
    n = sizes.size
    idx = np.arange(n, dtype=np.int64)
    return find_interval_conflict(
        np.concatenate([dst, src]),
        np.concatenate([dst + sizes, src + sizes]),
        np.concatenate([idx, idx]),
        np.concatenate([np.ones(n, bool), np.zeros(n, bool)]),
    )


def _raise_if_conflict(src, dst, sizes) -> None:
    found = _find_batch_conflict(src, dst, sizes)
    if found is not None:
        i, j, offset, access = found
        raise IllPosedBatch(i, j, offset, access)


def check_batch(src, dst, sizes, arena_size) -> None:
    """Validate a batch: equal lengths, sizes >= 0, every range inside
    ``[0, arena_size)``; raise :class:`IllPosedBatch` for a conflicting pair."""
    arena_size = _checks.int_scalar("arena_size", arena_size)
    if arena_size < 0:
        raise OracleError(f"negative arena_size {arena_size}")
    src, dst, sizes = _batch_arrays(src, dst, sizes)
    _check_batch_ranges(src, dst, sizes, arena_size)
    _raise_if_conflict(src, dst, sizes)


def expect_batch(snapshot, src, dst, sizes, *, check=True) -> np.ndarray:
    """The arena after the batch (docs/contracts.md#batch_memcpy): ``out[dst[i]:dst[i]+sizes[i]] ==
    snapshot[src[i]:src[i]+sizes[i]]`` for every copy, every other byte unchanged.

    With ``check`` the batch must be well-posed (else :class:`IllPosedBatch`).
    With ``check=False`` an ill-posed batch is still given a result: every copy
    reads the snapshot and, where destinations overlap, the copy with the
    higher index wins.  Ranges are always validated.
    """
    snapshot = _checks.arena("snapshot", snapshot)
    src, dst, sizes = _batch_arrays(src, dst, sizes)
    _check_batch_ranges(src, dst, sizes, snapshot.size)
    if check:
        _raise_if_conflict(src, dst, sizes)
    return _build_batch(snapshot, src, dst, sizes)


def _build_batch(snapshot, src, dst, sizes) -> np.ndarray:
    nz = np.flatnonzero(sizes > 0)
    order = nz[np.argsort(dst[nz], kind="stable")]
    d, s, n = dst[order], src[order], sizes[order]
    if d.size > 1 and (d[1:] < (d + n)[:-1]).any():
        # Overlapping destinations (only reachable with check=False): apply in
        # index order, every copy reading the snapshot.
        out = snapshot.copy()
        for di, si, ni in zip(dst[nz].tolist(), src[nz].tolist(), sizes[nz].tolist()):
            out[di:di + ni] = snapshot[si:si + ni]
        return out
    # Destinations are disjoint: walk them in address order and write every
    # output byte exactly once (untouched spans from the snapshot, copied
    # spans from their sources).  memoryview slicing keeps the per-copy
    # overhead small; the bytes themselves move as memcpy.
    out = np.empty_like(snapshot)
    mo, ms = memoryview(out), memoryview(snapshot)
    pos = 0
    for di, si, ni in zip(d.tolist(), s.tolist(), n.tolist()):
        if di > pos:
            mo[pos:di] = ms[pos:di]
        mo[di:di + ni] = ms[si:si + ni]
        pos = di + ni
    mo[pos:] = ms[pos:]
    return out

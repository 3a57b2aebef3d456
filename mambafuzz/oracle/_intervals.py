"""Overlap detection between byte intervals owned by copies (private).

A copy owns write intervals (bytes it stores) and read intervals (bytes it
loads).  Two different copies conflict on a byte when one of them writes it
and the other reads or writes it; a copy may overlap itself (memmove).

The search is a sweep over the sorted interval end points with running
counts, O(n log n) in the number of intervals and independent of
the number of bytes they cover.
"""
from __future__ import annotations

import numpy as np


def find_interval_conflict(starts, ends, owners, is_write):
    """The lowest byte that two different owners touch while one writes it.

    ``starts``/``ends`` (int64, half-open ``[start, end)``), ``owners`` (int64
    owner codes) and ``is_write`` (bool) are parallel 1-D arrays.  Empty
    intervals are ignored.  Precondition: the write intervals of one owner are
    pairwise disjoint, and so are its read intervals (true for every copy the
    oracle builds: one range, or the disjoint rows of a DS conv state).

    Returns ``None`` or ``(writer, other, offset, access)`` where ``writer``
    writes byte ``offset``, ``other != writer`` reads (``access == "reads"``)
    or writes (``"writes"``) it, and no lower byte has a conflict.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    owners = np.asarray(owners, dtype=np.int64)
    is_write = np.asarray(is_write, dtype=bool)
    keep = ends > starts
    if not keep.all():
        starts, ends, owners, is_write = starts[keep], ends[keep], owners[keep], is_write[keep]
    if not is_write.any():
        return None

    # Sweep: every interval contributes +1 at its start and -1 at its end
    # (and +-owner to the owner sums).  After the last event at a coordinate,
    # the running totals describe the segment from that coordinate to the next.
    n = starts.size
    coords = np.concatenate([starts, ends])
    order = np.argsort(coords)  # ties in any order: only group ends are read
    coords = coords[order]
    sign = np.concatenate([np.ones(n, np.int64), np.full(n, -1, np.int64)])[order]
    w = np.concatenate([is_write, is_write])[order]
    signed_owner = sign * np.concatenate([owners, owners])[order]
    zero = np.int64(0)
    wcount = np.cumsum(np.where(w, sign, zero))
    rcount = np.cumsum(np.where(w, zero, sign))
    # With one writer and one reader on a segment the sums are their owner codes.
    wsum = np.cumsum(np.where(w, signed_owner, zero))
    rsum = np.cumsum(np.where(w, zero, signed_owner))
    last = np.ones(coords.size, dtype=bool)
    last[:-1] = coords[1:] != coords[:-1]
    bad = last & ((wcount >= 2) | ((wcount == 1) & ((rcount >= 2) | ((rcount == 1) & (wsum != rsum)))))
    hits = np.flatnonzero(bad)
    if hits.size == 0:
        return None
    offset = int(coords[hits[0]])

    covering = (starts <= offset) & (ends > offset)
    writers = np.unique(owners[covering & is_write])
    readers = np.unique(owners[covering & ~is_write])
    first = int(writers[0])
    other_readers = readers[readers != first]
    if other_readers.size:
        return first, int(other_readers[0]), offset, "reads"
    other_writers = writers[writers != first]
    return first, int(other_writers[0]), offset, "writes"

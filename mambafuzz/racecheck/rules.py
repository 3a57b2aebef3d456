"""The hazard rules (docs/contracts.md#races) over one launch's accesses, as flat numpy arrays.

Pure numpy: no Triton, no recorder state, so the rules can be unit-tested on
hand-made arrays.  The input is a :class:`FlatLaunch` (one row per access
event, one entry per masked-on lane); the output is positions into it, the
witnesses, which the recorder turns into :class:`~.witness.Access` records.

The work is done by sorting and ``reduceat``, never a Python loop per byte:

- misaligned: an element whose address is not a multiple of its size;
- intra-program: a (byte, segment) group touched by >= 2 lanes, one a store
  (a segment is one barrier epoch of one program);
- cross-program: a byte touched by >= 2 programs, one a store.

Atomics take part only in the misaligned rule.  Before the byte-level work, a
sweep over each event's [lowest, highest] address range drops events that
cannot share a byte with a store, which on a correct kernel is nearly all.

A store that leaves a byte as it was (the value already there when it ran,
``FlatLaunch.changed``) cannot corrupt a reader of that byte: a conflict
whose only stores to its byte are such is *same-value*, and each (store line,
other line) pair gets a witness that changes bytes when it has one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["FlatLaunch", "Conflicts", "Findings", "find_hazards", "misaligned_elements",
           "suspect_events", "expand_to_bytes", "first_conflicts"]

# an intra-program "who" is (lane-shape id << LANE_BITS) | lane: lanes of one block op stay < 2**40
LANE_BITS = 40


@dataclass(frozen=True)
class FlatLaunch:
    """One launch's accesses: per event (one block load/store/atomic), per element (an active lane).

    Every event has at least one element, and an event's elements are
    contiguous, in lane order, starting at ``first_elem``.
    """
    # per event
    is_store: np.ndarray        # bool: a plain (non-atomic) store
    is_atomic: np.ndarray       # bool
    program: np.ndarray         # int64: which program of the launch issued it
    segment: np.ndarray         # int64: a new one per program and per barrier
    shape_id: np.ndarray        # int64: interned lane shape (0 = a scalar)
    elem_size: np.ndarray       # int64: bytes per element
    line_id: np.ndarray         # int64: interned source line
    first_elem: np.ndarray      # int64: position of the event's first element
    # per element
    addr: np.ndarray            # int64: start address of the lane's element
    lane: np.ndarray            # int64: flat lane index within the lane shape
    event: np.ndarray           # int64: the event it belongs to
    # int64 per element: a store's bitmask of the element's bytes it changed (bit k: byte k), 0 for a
    # load; None: not known, every store changes every byte
    changed: Optional[np.ndarray] = None


@dataclass(frozen=True)
class Conflicts:
    """Witness pairs of one rule, lowest byte first: element positions and the byte they share."""
    store: np.ndarray           # element position of the (first) store to the byte
    other: np.ndarray           # element position of the other lane's / program's access
    byte: np.ndarray            # the shared byte address
    # bool per witness: no store to its byte changed it (None: none is); such witnesses come after
    # every witness of a line pair that changes bytes
    same_value: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.store.shape[0])

    def same(self) -> np.ndarray:
        """``same_value`` as a bool array, False where not known."""
        if self.same_value is None:
            return np.zeros(len(self), dtype=bool)
        return self.same_value


_NO_POSITIONS = np.zeros(0, dtype=np.int64)
NO_CONFLICTS = Conflicts(_NO_POSITIONS, _NO_POSITIONS, _NO_POSITIONS)


@dataclass(frozen=True)
class Findings:
    misaligned: np.ndarray      # element positions, one per source line, in address order
    intra_program: Conflicts    # one per (store line, other line) pair
    cross_program: Conflicts    # one per (store line, other line) pair


def find_hazards(flat: FlatLaunch) -> Findings:
    """All three rules over one launch."""
    elem_size_of = flat.elem_size[flat.event]
    misaligned = misaligned_elements(flat.addr, elem_size_of, flat.line_id[flat.event])
    if not bool(flat.is_store.any()):
        return Findings(misaligned, NO_CONFLICTS, NO_CONFLICTS)
    keep = suspect_events(flat, elem_size_of)
    if keep is None:
        return Findings(misaligned, NO_CONFLICTS, NO_CONFLICTS)
    selected = np.flatnonzero(keep[flat.event])
    # aligned elements of one size share a byte iff they share an address
    byte_addrs, byte_elems = expand_to_bytes(flat.addr[selected], selected, elem_size_of[selected],
                                             elementwise_ok=misaligned.shape[0] == 0)
    byte_events = flat.event[byte_elems]
    byte_segments = flat.segment[byte_events]
    lowest = int(byte_addrs.min())
    span = int(byte_addrs.max()) - lowest + 1
    n_segments = int(byte_segments.max()) + 1
    if span * n_segments < (1 << 62):
        sort_keys = (byte_addrs - lowest) * n_segments + byte_segments
        order = np.argsort(sort_keys, kind="stable")
        sorted_keys = sort_keys[order]
        byte_offsets = sorted_keys // n_segments
        new_byte_segment = sorted_keys[1:] != sorted_keys[:-1]
    else:  # too wide for one int64 key
        order = np.lexsort((byte_segments, byte_addrs))
        byte_offsets = byte_addrs[order] - lowest
        sorted_segments = byte_segments[order]
        new_byte_segment = ((byte_offsets[1:] != byte_offsets[:-1])
                            | (sorted_segments[1:] != sorted_segments[:-1]))
    # the stable sort keeps program order within a group
    byte_elems = byte_elems[order]
    byte_events = byte_events[order]
    byte_is_store = flat.is_store[byte_events]
    byte_line = flat.line_id[byte_events]
    sorted_bytes = byte_offsets + lowest

    if flat.changed is None:
        byte_changes = byte_is_store
    else:  # a byte's store changes it; an element standing for its bytes, when any of them
        bits = flat.changed[byte_elems]
        if byte_addrs.shape[0] == selected.shape[0]:
            byte_changes = bits != 0
        else:
            byte_changes = ((bits >> (sorted_bytes - flat.addr[byte_elems])) & 1) != 0
        byte_changes &= byte_is_store

    def witnesses(new_group, who):
        store, other, same = _changing_first(new_group, byte_is_store, byte_changes, who, byte_line)
        return Conflicts(byte_elems[store], byte_elems[other], sorted_bytes[store], same)

    lane_key = (flat.shape_id[byte_events] << LANE_BITS) | flat.lane[byte_elems]
    new_byte = byte_offsets[1:] != byte_offsets[:-1]
    return Findings(misaligned, witnesses(new_byte_segment, lane_key),
                    witnesses(new_byte, flat.program[byte_events]))


def _changing_first(new_group, is_store, changes, who, line):
    """``first_conflicts``, and for every (store line, other line) pair whose witness's byte no store
    changes, one whose byte a store changes when there is one: (store positions, other positions,
    same-value), in group order.  `changes`: the stores that change their byte."""
    every = first_conflicts(new_group, is_store, who, line)
    if every[0].shape[0] == 0 or bool((changes == is_store).all()):
        return every[0], every[1], np.zeros(every[0].shape[0], dtype=bool)
    starts_group = np.concatenate(([True], new_group))
    group = np.cumsum(starts_group) - 1
    group_changes = np.maximum.reduceat(changes, np.flatnonzero(starts_group))
    same = ~group_changes[group[every[0]]]
    changing = first_conflicts(new_group, changes, who, line)
    width = int(line.max()) + 1
    pair = line[changing[0]] * width + line[changing[1]]
    kept = ~same | ~np.isin(line[every[0]] * width + line[every[1]], pair)  # same-value: only without a better
    better = ~np.isin(pair, line[every[0][~same]] * width + line[every[1][~same]])
    store = np.concatenate((every[0][kept], changing[0][better]))
    other = np.concatenate((every[1][kept], changing[1][better]))
    same = np.concatenate((same[kept], np.zeros(int(better.sum()), dtype=bool)))
    order = np.argsort(store, kind="stable")
    return store[order], other[order], same[order]


def misaligned_elements(addr: np.ndarray, elem_size_of: np.ndarray, line_of: np.ndarray) -> np.ndarray:
    """Per source line, its lowest misaligned element (first in order on a tie); in address order.

    Element sizes are powers of two, so ``addr & (size - 1)`` is the remainder.
    """
    bad = np.flatnonzero((addr & (elem_size_of - 1)) != 0)
    if bad.shape[0] == 0:
        return _NO_POSITIONS
    by_addr = bad[np.argsort(addr[bad], kind="stable")]
    _, first_of_line = np.unique(line_of[by_addr], return_index=True)
    return by_addr[np.sort(first_of_line)]


def suspect_events(flat: FlatLaunch, elem_size_of: np.ndarray):
    """Events that may share a byte with a store (bool per event), or None if none can.

    Plain events are swept in order of their lowest address into clusters of
    overlapping [lowest, highest + size) ranges; a cluster is suspect when it
    holds a store and either two events or one event whose lanes may overlap
    each other (addresses not increasing by at least the element size).
    """
    n_events = flat.first_elem.shape[0]
    addr = flat.addr
    lowest = np.minimum.reduceat(addr, flat.first_elem)
    end = np.maximum.reduceat(addr, flat.first_elem) + flat.elem_size
    self_overlapping = np.zeros(n_events, dtype=bool)
    if addr.shape[0] > 1:
        same_event = flat.event[1:] == flat.event[:-1]
        overlaps_previous = same_event & (addr[1:] < addr[:-1] + elem_size_of[:-1])
        self_overlapping[flat.event[1:][overlaps_previous]] = True
    plain = np.flatnonzero(~flat.is_atomic)
    by_lowest = plain[np.argsort(lowest[plain], kind="stable")]
    reach = np.maximum.accumulate(end[by_lowest])
    starts_cluster = np.ones(by_lowest.shape[0], dtype=bool)
    starts_cluster[1:] = lowest[by_lowest][1:] >= reach[:-1]
    cluster = np.cumsum(starts_cluster) - 1
    n_clusters = int(cluster[-1]) + 1 if cluster.shape[0] else 0
    cluster_size = np.bincount(cluster, minlength=n_clusters)
    cluster_has_store = np.bincount(cluster, weights=flat.is_store[by_lowest], minlength=n_clusters) > 0
    cluster_has_irregular = np.bincount(cluster, weights=self_overlapping[by_lowest],
                                        minlength=n_clusters) > 0
    suspect = cluster_has_store & ((cluster_size >= 2) | cluster_has_irregular)
    if not bool(suspect.any()):
        return None
    keep = np.zeros(n_events, dtype=bool)
    keep[by_lowest[suspect[cluster]]] = True
    return keep


def expand_to_bytes(addr: np.ndarray, elems: np.ndarray, sizes: np.ndarray, elementwise_ok: bool):
    """(byte_addrs, byte_elems): every byte the elements cover, and which element covers it.

    With ``elementwise_ok`` (nothing misaligned) and one element size, an
    element stands for its bytes: two such elements share a byte iff they
    share an address, so no expansion is needed.
    """
    one_size = bool((sizes == sizes[0]).all())
    if one_size and elementwise_ok:
        return addr, elems
    if one_size:
        size = int(sizes[0])
        return (addr[:, None] + np.arange(size, dtype=np.int64)).reshape(-1), np.repeat(elems, size)
    total = int(sizes.sum())
    first_byte = np.zeros(sizes.shape[0], dtype=np.int64)
    np.cumsum(sizes[:-1], out=first_byte[1:])
    byte_addrs = np.repeat(addr, sizes) + (np.arange(total, dtype=np.int64) - np.repeat(first_byte, sizes))
    return byte_addrs, np.repeat(elems, sizes)


def first_conflicts(new_group: np.ndarray, is_store: np.ndarray, who: np.ndarray, line: np.ndarray):
    """Witnesses of groups (runs of a sorted order) holding a store and >= 2 distinct ``who``.

    ``new_group[i]`` says entry i+1 starts a group.  For each such group: its
    first store, and its first entry by a ``who`` other than that store's.
    One witness per (store line, other line) pair, the lowest group's, in
    group order.  Returns (store positions, other positions).
    """
    n = is_store.shape[0]
    starts_group = np.concatenate(([True], new_group))
    group_start = np.flatnonzero(starts_group)
    if group_start.shape[0] == n:  # every group is a single entry
        return _NO_POSITIONS, _NO_POSITIONS
    has_store = np.maximum.reduceat(is_store, group_start)
    who_min = np.minimum.reduceat(who, group_start)
    who_max = np.maximum.reduceat(who, group_start)
    racy = has_store & (who_min != who_max)
    if not bool(racy.any()):
        return _NO_POSITIONS, _NO_POSITIONS
    group = np.cumsum(starts_group) - 1
    in_racy = racy[group]
    positions = np.flatnonzero(in_racy & is_store)
    groups, store_pos = _first_per_group(group[positions], positions)
    store_who = np.zeros(group_start.shape[0], dtype=who.dtype)
    store_who[groups] = who[store_pos]
    positions = np.flatnonzero(in_racy & (who != store_who[group]))
    groups_other, other_pos = _first_per_group(group[positions], positions)
    assert np.array_equal(groups, groups_other)  # a racy group has a who other than its store's
    line_pair = line[store_pos] * (int(line.max()) + 1) + line[other_pos]
    _, first_of_pair = np.unique(line_pair, return_index=True)
    keep = np.sort(first_of_pair)
    return store_pos[keep], other_pos[keep]


def _first_per_group(group_of: np.ndarray, positions: np.ndarray):
    """(groups, first position in each) for ascending positions labelled with their groups."""
    groups, first = np.unique(group_of, return_index=True)
    return groups, positions[first]

"""Index-based slot pools: slot copy and slot fork (docs/contracts.md#slot_copy and #slot_fork).

A :class:`SlotBuffer` is one state buffer ``[layers, slots, *trailing]`` in
the arena: the data of (layer l, slot s) is ``slot_bytes`` contiguous bytes at
``offset + l * layer_stride + s * slot_stride``.  Strides may be padded, and
the buffer may be layer-major (slots inside a layer) or slot-major (layers
inside a slot); every byte of it that is not a slot's data is padding.

``slot_copy(src_idx[P], dst_idx[P])``: for every buffer and layer, slot
``dst_idx[i]`` receives slot ``src_idx[i]`` as it was in the snapshot.
``slot_fork(src_idx[P], dst_idx[P, N])``: slot ``src_idx[i]`` goes to each of
``dst_idx[i, :]``.  Chains (a destination that is another pair's source),
swaps, cycles and self-copies are all defined by the snapshot.  Two pairs that
write one slot from different sources make the batch ill-posed
(:class:`SlotConflict`); the same slot written twice from one source is fine.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _checks
from .errors import IllPosedBatch, OracleError

__all__ = ["SlotBuffer", "SlotConflict", "chained_pairs", "check_slots", "expect_slot_copy", "expect_slot_fork",
           "find_slot_conflict", "slot_pairs"]

ELEM_SIZES = (1, 2, 4, 8)
_FIELDS = ("offset", "layers", "slots", "slot_bytes", "slot_stride", "layer_stride", "elem_size")


@dataclass(frozen=True)
class SlotBuffer:
    """Geometry of one state buffer; construction does not validate, :meth:`validate` does."""

    offset: int        # arena byte of (layer 0, slot 0)
    layers: int
    slots: int
    slot_bytes: int    # data bytes of one slot in one layer (prod(trailing) * elem_size)
    slot_stride: int   # bytes between slot s and s + 1 of one layer
    layer_stride: int  # bytes between layer l and l + 1 of one slot
    elem_size: int = 1

    def __post_init__(self):
        for name in _FIELDS:  # numpy integers become Python ints (no int32 wrap in offsets)
            v = getattr(self, name)
            if isinstance(v, np.integer):
                object.__setattr__(self, name, int(v))

    # ------------------------------------------------------------------ checks
    @property
    def layer_major(self) -> bool:
        """Slots of one layer lie inside that layer's stride (the usual ``[L, S, ...]`` tensor)."""
        return (self.slots == 1 or self.slot_stride >= self.slot_bytes) and \
            (self.layers == 1 or self.layer_stride >= (self.slots - 1) * self.slot_stride + self.slot_bytes)

    @property
    def slot_major(self) -> bool:
        """Layers of one slot lie inside that slot's stride (an ``[S, L, ...]`` tensor seen as ``[L, S, ...]``)."""
        return (self.layers == 1 or self.layer_stride >= self.slot_bytes) and \
            (self.slots == 1 or self.slot_stride >= (self.layers - 1) * self.layer_stride + self.slot_bytes)

    def validate(self, arena_size: int | None = None) -> None:
        """Raise :class:`OracleError` naming the first problem: counts, alignment, overlapping slots, arena."""
        v = {name: _checks.int_scalar(name, getattr(self, name)) for name in _FIELDS}
        elem = v["elem_size"]
        if elem not in ELEM_SIZES:
            raise OracleError(f"elem_size must be one of {ELEM_SIZES}, got {elem}")
        if v["offset"] < 0:
            raise OracleError(f"negative offset {v['offset']}")
        for name in ("layers", "slots", "slot_bytes", "slot_stride", "layer_stride"):
            if v[name] < 1:
                raise OracleError(f"{name} must be >= 1, got {v[name]}")
        for name in ("offset", "slot_bytes", "slot_stride", "layer_stride"):
            if v[name] % elem:
                raise OracleError(f"{name} {v[name]} is not a multiple of elem_size {elem}")
        if not (self.layer_major or self.slot_major):
            raise OracleError(
                f"slots overlap: {v['layers']} layer(s) x {v['slots']} slot(s) of {v['slot_bytes']} bytes fit "
                f"neither layer-major nor slot-major with slot_stride {v['slot_stride']} and layer_stride "
                f"{v['layer_stride']}")
        if arena_size is not None:
            arena_size = _checks.int_scalar("arena_size", arena_size)
            if v["offset"] + self.nbytes > arena_size:
                raise OracleError(f"buffer at offset {v['offset']} of {self.nbytes} bytes ends past the arena "
                                  f"size {arena_size}")

    # -------------------------------------------------------------- properties
    @property
    def data_end(self) -> int:
        """One past the last data byte, relative to ``offset``."""
        return (self.layers - 1) * self.layer_stride + (self.slots - 1) * self.slot_stride + self.slot_bytes

    @property
    def nbytes(self) -> int:
        """The buffer's footprint: what an ``[L, S]`` (or ``[S, L]``) tensor with these strides spans."""
        return max(self.layers * self.layer_stride, self.slots * self.slot_stride, self.data_end)

    def slot_offset(self, layer: int, slot: int) -> int:
        """Arena byte of (layer, slot)'s first data byte."""
        return self.offset + layer * self.layer_stride + slot * self.slot_stride

    def view(self, arena: np.ndarray, writeable: bool = False) -> np.ndarray:
        """``[layers, slots, slot_bytes]`` view of the buffer's data in ``arena`` (validate first)."""
        return as_strided(arena[self.offset:], shape=(self.layers, self.slots, self.slot_bytes),
                          strides=(self.layer_stride, self.slot_stride, 1), writeable=writeable)

    def locate(self, offset: int) -> tuple[int, int, int, bool] | None:
        """(layer, slot, byte, is data) of arena byte ``offset`` inside the footprint; None outside it.

        A padding byte is named by the slot whose stride holds it (the last
        layer or slot for padding past every slot).
        """
        rel = offset - self.offset
        if not 0 <= rel < self.nbytes:
            return None
        if self.layer_major:
            layer = min(rel // self.layer_stride, self.layers - 1)
            rest = rel - layer * self.layer_stride
            slot = min(rest // self.slot_stride, self.slots - 1)
            byte = rest - slot * self.slot_stride
        else:
            slot = min(rel // self.slot_stride, self.slots - 1)
            rest = rel - slot * self.slot_stride
            layer = min(rest // self.layer_stride, self.layers - 1)
            byte = rest - layer * self.layer_stride
        return int(layer), int(slot), int(byte), bool(byte < self.slot_bytes)


class SlotConflict(IllPosedBatch):
    """Two pairs write one slot from different sources (a finding about the caller).

    ``first`` and ``second`` name the pairs (an int ``i`` for a copy, ``(i, n)``
    for child n of a fork), ``slot`` the slot, ``sources`` their two source slots.
    ``offset`` is the slot's first byte in the first buffer (-1 when no buffer is known).
    """

    def __init__(self, first, second, slot: int, sources: tuple[int, int], offset: int = -1):
        self.first, self.second = first, second
        self.slot = int(slot)
        self.sources = (int(sources[0]), int(sources[1]))
        self.offset = int(offset)
        self.access = "writes"
        OracleError.__init__(self, f"ill-posed batch: pair {_pair(first)} writes slot {self.slot} from slot "
                                   f"{self.sources[0]} and pair {_pair(second)} writes it from slot "
                                   f"{self.sources[1]}")

    def __reduce__(self):
        return (type(self), (self.first, self.second, self.slot, self.sources, self.offset))


def _pair(ident) -> str:
    if isinstance(ident, tuple):
        return f"{ident[0]} (child {ident[1]})"
    return str(ident)


# ---------------------------------------------------------------- index arrays
def slot_pairs(src_idx, dst_idx) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(src [P], dst [P, N], forked)``: int64 arrays; a 1-D ``dst_idx`` is a copy (N = 1)."""
    src = _checks.int_array("src_idx", src_idx)
    try:
        raw = np.asarray(dst_idx)
    except Exception as exc:  # ragged lists and the like
        raise OracleError(f"dst_idx must be an integer array: {exc}") from None
    forked = raw.ndim == 2
    dst = _checks.int_array("dst_idx", raw, ndim=2 if forked else 1)
    if dst.shape[0] != src.size:
        raise OracleError(f"mismatched pair counts: src_idx has {src.size}, dst_idx has {dst.shape[0]}")
    return src, (dst if forked else dst.reshape(-1, 1)), forked


def _ident(k: int, n_children: int, forked: bool):
    i, n = divmod(int(k), n_children)
    return (i, n) if forked else i


def find_slot_conflict(src_idx, dst_idx):
    """``(first, second, slot, (src_a, src_b))`` for the lowest slot two pairs write from different
    sources; None when every written slot has one source.  O(m log m) in the destinations."""
    src, dst, forked = slot_pairs(src_idx, dst_idx)
    n_children = dst.shape[1]
    flat_dst = dst.reshape(-1)
    if flat_dst.size < 2:
        return None
    flat_src = np.repeat(src, n_children)
    order = np.lexsort((np.arange(flat_dst.size), flat_src, flat_dst))  # by slot, then source, then pair
    d, s = flat_dst[order], flat_src[order]
    bad = (d[1:] == d[:-1]) & (s[1:] != s[:-1])
    if not bad.any():
        return None
    k = _checks.first_bad(bad)
    a, b = sorted((int(order[k]), int(order[k + 1])))
    return (_ident(a, n_children, forked), _ident(b, n_children, forked), int(d[k]),
            (int(flat_src[a]), int(flat_src[b])))


def chained_pairs(src_idx, dst_idx) -> np.ndarray:
    """bool ``[P]``: pair i reads a slot that another pair writes with other bytes (not a self-copy).

    These are the pairs a kernel whose programs each load and store their own
    pair races on (chains, swaps, cycles); ``--chains forbidden`` never draws them.
    """
    src, dst, _ = slot_pairs(src_idx, dst_idx)
    n_children = dst.shape[1]
    flat_src = np.repeat(src, n_children)
    writer = np.repeat(np.arange(src.size), n_children)
    moved = dst.reshape(-1) != flat_src  # self-copies write nothing new
    out = np.zeros(src.size, dtype=bool)
    if not moved.any():
        return out
    w_slot, w_pair = dst.reshape(-1)[moved], writer[moved]
    order = np.argsort(w_slot, kind="stable")
    w_slot, w_pair = w_slot[order], w_pair[order]
    lo = np.searchsorted(w_slot, src, side="left")
    hi = np.searchsorted(w_slot, src, side="right")
    for i in np.flatnonzero(hi > lo):  # slots written by several pairs are rare: a short loop
        out[i] = bool((w_pair[lo[i]:hi[i]] != i).any())
    return out


def check_slots(buffers, src_idx, dst_idx, arena_size: int | None = None) -> None:
    """Validate buffers (inside the arena, not overlapping each other), indices in range, well-posed.

    Raises :class:`OracleError`; :class:`SlotConflict` for an ill-posed batch.
    """
    buffers = _buffer_list(buffers)
    for b, buf in enumerate(buffers):
        try:
            buf.validate(arena_size)
        except OracleError as exc:
            raise OracleError(f"buffer {b}: {exc}") from None
    spans = sorted((buf.offset, buf.offset + buf.nbytes, b) for b, buf in enumerate(buffers))
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:]):
        if start_b < end_a:
            raise OracleError(f"buffers {min(a, b)} and {max(a, b)} overlap (buffer {b} starts at byte {start_b}, "
                              f"inside buffer {a}, which ends at {end_a})")
    src, dst, _ = slot_pairs(src_idx, dst_idx)
    for name, idx in (("src_idx", src), ("dst_idx", dst.reshape(-1))):
        for b, buf in enumerate(buffers):
            bad = (idx < 0) | (idx >= buf.slots)
            if bad.any():
                k = _checks.first_bad(bad)
                raise OracleError(f"{name} value {int(idx[k])} is outside the {buf.slots} slot(s) of buffer {b}")
    found = find_slot_conflict(src_idx, dst_idx)
    if found is not None:
        offset = buffers[0].slot_offset(0, found[2]) if buffers else -1
        raise SlotConflict(*found, offset=offset)


def _buffer_list(buffers) -> list[SlotBuffer]:
    buffers = list(buffers)
    for b, buf in enumerate(buffers):
        if not isinstance(buf, SlotBuffer):
            raise OracleError(f"buffer {b} must be a SlotBuffer, got {type(buf).__name__}")
    return buffers


# ---------------------------------------------------------------- expectations
def _expect(snapshot, buffers, src_idx, dst_idx, check: bool) -> np.ndarray:
    snapshot = _checks.arena("snapshot", snapshot)
    buffers = _buffer_list(buffers)
    if check:
        check_slots(buffers, src_idx, dst_idx, snapshot.size)
    src, dst, _ = slot_pairs(src_idx, dst_idx)
    out = snapshot.copy()
    for buf in buffers:
        gathered = buf.view(snapshot)[:, src]               # [L, P, bytes]: every source as it was
        buf.view(out, writeable=True)[:, dst] = gathered[:, :, None, :]  # to each of its N destinations
    return out


def expect_slot_copy(snapshot, buffers, src_idx, dst_idx, check: bool = True) -> np.ndarray:
    """The arena after ``slot_copy``: every layer of slot ``dst_idx[i]`` holds the snapshot's slot
    ``src_idx[i]``; every other byte (padding too) is the snapshot's.  ``dst_idx`` is ``[P]``."""
    if np.ndim(dst_idx) != 1:
        raise OracleError(f"slot_copy: dst_idx must be 1-D [P], got shape {np.shape(dst_idx)}")
    return _expect(snapshot, buffers, src_idx, dst_idx, check)


def expect_slot_fork(snapshot, buffers, src_idx, dst_idx, check: bool = True) -> np.ndarray:
    """The arena after ``slot_fork``: slot ``src_idx[i]`` (snapshot) in each of ``dst_idx[i, :]``."""
    if np.ndim(dst_idx) != 2:
        raise OracleError(f"slot_fork: dst_idx must be 2-D [P, N], got shape {np.shape(dst_idx)}")
    return _expect(snapshot, buffers, src_idx, dst_idx, check)

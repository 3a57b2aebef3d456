"""The race recorder's event store and bounds fence (no Triton here: plain numpy in, numpy out).

The hooks hand over each access as numpy arrays; the store keeps one
:class:`Event` per block op of the open launch (active lanes only), interns
lane shapes and source lines to small ints, and, when the launch ends, lays
the events out as a :class:`~.rules.FlatLaunch` for the rules.

The :class:`Regions` fence is checked on every access *before* the
interpreter dereferences it: Triton's interpreter reads raw int64 addresses,
so a wild pointer would otherwise crash the process.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from .rules import FlatLaunch
from .witness import Access, Hazard, OutOfBoundsAccess, explain_out_of_bounds

OP_LOAD, OP_STORE, OP_ATOMIC = 0, 1, 2
OP_NAMES = ("load", "store", "atomic")


class Event(NamedTuple):
    """One block op's masked-on lanes."""
    op: int                     # OP_LOAD | OP_STORE | OP_ATOMIC
    program: int                # index into EventStore.programs
    epoch: int                  # barriers seen so far in the program
    segment: int                # new per program and per barrier: same segment = no ordering
    shape_id: int               # index into EventStore.shapes
    elem_size: int              # bytes per element
    line_id: int                # index into EventStore.lines
    addrs: np.ndarray           # uint64 start address of each active lane's element
    lanes: Optional[np.ndarray]  # int64 flat lane index of each; None = every lane, in order
    # a store's per-lane bitmask of the element's bytes it changes (bit k: byte k differed before the
    # store); None: not known (a load, an atomic, or no values to compare), taken as changing every byte
    changed: Optional[np.ndarray] = None


# --------------------------------------------------------------------------
# the bounds fence
# --------------------------------------------------------------------------
class Regions:
    """Named memory regions that accesses may touch; with none registered, nothing is fenced.

    Regions from :meth:`add` (the case's tensors, a user's ``add_region``) last
    as long as the recorder.  Storages from :meth:`add_storage` (kernel
    arguments, tensors the target allocates) carry a weak reference: one freed
    is dropped by :meth:`prune` at the next launch, and an access to it is then
    out of bounds (:attr:`freed` names it in the witness).
    """

    def __init__(self) -> None:
        self.named: list = []   # (name, start, nbytes) of the live regions, in registration order
        self.freed: list = []   # (name, start, nbytes) of storages dropped by prune
        self._refs: list = []   # per entry of `named`: its storage's weak reference, or None
        self._known: dict = {}  # (start, nbytes) -> index into `named`
        self._dirty = False     # `named` changed since the union was built
        # the regions' union as sorted disjoint [start, end) intervals
        self._union_starts = np.zeros(0, dtype=np.int64)
        self._union_ends = np.zeros(0, dtype=np.int64)

    def add(self, name: str, tensor_or_start: Any, nbytes: Optional[int] = None) -> None:
        """A tensor (its elements, unless nbytes says otherwise) or a raw start address and nbytes."""
        if hasattr(tensor_or_start, "data_ptr"):
            tensor = tensor_or_start
            start = int(tensor.data_ptr())
            if nbytes is None:
                nbytes = int(tensor.numel()) * int(tensor.element_size())
        else:
            start = int(tensor_or_start)
            if nbytes is None:
                raise ValueError("add_region needs nbytes for a raw start address")
        self._append(str(name), start, int(nbytes), None)

    def knows(self, start: int, nbytes: int) -> bool:
        """Whether a live entry has exactly this start and size."""
        i = self._known.get((start, nbytes))
        return i is not None and (self._refs[i] is None or not self._refs[i].expired())

    def add_storage(self, name: str, start: int, nbytes: int, ref=None) -> bool:
        """A storage the target reaches (a kernel argument, a tensor it allocated) is legal memory too.

        `ref`: a weak reference with ``expired()`` (``StorageWeakRef``), or None.
        Ignored (False) when already known, empty, or when no region was asked
        for (no fence).
        """
        if not self.named or nbytes <= 0 or self.knows(start, nbytes):
            return False
        self._append(name, start, nbytes, ref)
        return True

    def prune(self) -> None:
        """Drop the storages freed since the last call (one expiry check each)."""
        dead = [i for i, ref in enumerate(self._refs) if ref is not None and ref.expired()]
        if not dead:
            return
        gone = set(dead)
        self.freed.extend(self.named[i] for i in dead)
        del self.freed[:-64]    # the latest are enough to name a stale pointer's target
        keep = [i for i in range(len(self.named)) if i not in gone]
        self.named = [self.named[i] for i in keep]
        self._refs = [self._refs[i] for i in keep]
        self._known = {(s, n): i for i, (_, s, n) in enumerate(self.named)}
        self._rebuild_union()

    def _append(self, name: str, start: int, nbytes: int, ref) -> None:
        self._known[(start, nbytes)] = len(self.named)
        self.named.append((name, start, nbytes))
        self._refs.append(ref)
        self._dirty = True      # rebuilt when the fence is next asked: a target may allocate thousands

    def _rebuild_union(self) -> None:
        self._dirty = False
        intervals = sorted((s, s + n) for _, s, n in self.named if n > 0)
        merged: list = []
        for s, e in intervals:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self._union_starts = np.array([m[0] for m in merged], dtype=np.int64)
        self._union_ends = np.array([m[1] for m in merged], dtype=np.int64)

    @property
    def fenced(self) -> bool:
        if self._dirty:
            self._rebuild_union()
        return self._union_starts.shape[0] > 0

    def first_outside(self, addrs: np.ndarray, elem_size: int) -> int:
        """Index of the first element not wholly inside one interval of the union, or -1."""
        if self._dirty:
            self._rebuild_union()
        starts, ends = self._union_starts, self._union_ends
        lowest = int(addrs.min())
        end = int(addrs.max()) + elem_size
        i = int(np.searchsorted(starts, lowest, side="right")) - 1
        if i >= 0 and end <= ends[i] and lowest >= 0:  # the common case: one interval holds all
            return -1
        interval = np.searchsorted(starts, addrs, side="right") - 1
        inside = (interval >= 0) & (addrs >= 0)
        inside &= (addrs + elem_size) <= ends[np.maximum(interval, 0)]
        outside = np.flatnonzero(~inside)
        return int(outside[0]) if outside.shape[0] else -1

    def locate(self, addr: int):
        """(region name, offset) of the smallest registered region holding addr, or (None, None)."""
        best = None
        for name, s, n in self.named:
            if s <= addr < s + n and (best is None or n < best[2]):
                best = (name, s, n)
        if best is None:
            return None, None
        return best[0], addr - best[1]

    def address_text(self, addr: int) -> str:
        """'region+offset', or hex when no region holds it."""
        name, offset = self.locate(addr)
        return f"{name}+{offset}" if name is not None else hex(addr)

    def outside_text(self, addr: int, elem_size: int) -> str:
        """Where an access the fence refused lies: in a freed storage, or beside the nearest live region."""
        end = addr + elem_size
        for name, s, n in reversed(self.freed):
            if s <= addr < s + n and not self.knows(s, n):
                return f"inside {name} [{hex(s)}, +{n}), freed before this launch"
        best = None
        for name, s, n in self.named:
            if n <= 0:
                continue
            if s <= addr < s + n:       # starts inside, runs past the end
                return f"offset {addr - s} of {name} [{hex(s)}, +{n}), running {end - s - n} byte(s) past its end"
            gap = addr - (s + n) if addr >= s + n else s - end
            if best is None or gap < best[0]:
                best = (gap, addr >= s + n, name, s, n)
        if 0 <= addr < 4096:
            return "a null pointer's page"
        if best is None or best[0] >= 1 << 40:
            return "far from every region"
        gap, after, name, s, n = best
        if after:
            return (f"right after the end of {name} [{hex(s)}, +{n})" if gap == 0 else
                    f"{gap} byte(s) after the end of {name} [{hex(s)}, +{n})")
        # counted from the access's first byte, as after a region: a 4-byte store at s - 4 is 4 bytes before
        into = f", running {end - s} byte(s) into it" if end > s else ""
        return f"{s - addr} byte(s) before {name} [{hex(s)}, +{n}){into}"


# --------------------------------------------------------------------------
# what a store changes
# --------------------------------------------------------------------------
class _Bytes:
    """``n`` bytes of this process's memory from address ``start``, as numpy sees an array."""

    def __init__(self, start: int, n: int) -> None:
        self.__array_interface__ = {"data": (start, True), "shape": (n,), "typestr": "|u1", "version": 3}


def changed_bytes(addrs: np.ndarray, lanes, shape, value, elem_size: int) -> Optional[np.ndarray]:
    """Per stored lane, a bitmask of the bytes of its element that `value` changes (bit k: byte k);
    None when the values are not one element of `elem_size` bytes each.

    Reads the bytes there now, before the store: call it after the fence let
    every address through (only those bytes are read).
    """
    value = np.asarray(value)
    if value.dtype.itemsize != elem_size or value.dtype.hasobject:
        return None
    try:
        value = np.broadcast_to(value, shape).reshape(-1)
    except ValueError:
        return None
    if lanes is not None:
        value = value[lanes]
    new = np.ascontiguousarray(value).view(np.uint8).reshape(-1, elem_size)
    at = addrs.view(np.int64)
    lowest = int(at.min())
    memory = np.asarray(_Bytes(lowest, int(at.max()) - lowest + elem_size))
    old = memory[(at - lowest)[:, None] + np.arange(elem_size, dtype=np.int64)]
    differs = old != new
    if elem_size == 1:
        return differs[:, 0].astype(np.int64)
    return differs.astype(np.int64) @ (np.int64(1) << np.arange(elem_size, dtype=np.int64))


# --------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------
class EventStore:
    """The open launch's events, the interned shapes and lines, and counts over all launches."""

    def __init__(self, regions: Regions) -> None:
        self.regions = regions
        self.stats = {"launches": 0, "programs": 0, "events": 0, "accesses": 0, "bytes": 0}
        self.shapes: list = [()]
        self._shape_ids: dict = {(): 0}
        self._lane_shape: list = [0]    # shape id -> the id whose lanes its lanes are (rules.FlatLaunch)
        self.lines: list = []
        self._line_ids: dict = {}
        self._lane_ranges: dict = {}    # n -> arange(n), for events with every lane on
        self.new_launch()

    def new_launch(self) -> None:
        self.events: list = []
        self.programs: list = []        # (x, y, z) per program seen in this launch
        self.program = -1               # the running program's index; -1 before the first
        self.epoch = 0
        self.segment = 0

    def start_program(self, x, y, z) -> None:
        self.programs.append((int(x), int(y), int(z)))
        self.program = len(self.programs) - 1
        self.epoch = 0
        self.segment += 1
        self.stats["programs"] += 1

    def barrier(self) -> None:
        self.epoch += 1
        self.segment += 1

    def record(self, op: int, ptr_data: np.ndarray, mask, elem_size: int, line: str, value=None,
               shape: Optional[tuple] = None) -> None:
        """Keep the masked-on lanes of one access; raise OutOfBoundsAccess if one leaves the fence.

        ptr_data: the uint64 addresses, any shape; mask: None (every lane), or
        a bool array of that shape (or broadcastable to it); value: a store's
        values (broadcastable to ptr_data), compared with the bytes there now; shape: the access's
        shape in the kernel when it is not ptr_data's (a scalar: ()), what a witness names.
        """
        shape = ptr_data.shape if shape is None else tuple(shape)
        flat = ptr_data.reshape(-1)
        n = flat.shape[0]
        if mask is None:
            addrs = flat.copy()
            lanes = None
        else:
            on = mask
            if not isinstance(on, np.ndarray) or on.dtype != np.bool_:
                on = np.asarray(on, dtype=bool)
            if on.shape != ptr_data.shape:
                on = np.broadcast_to(on, ptr_data.shape)
            on = on.reshape(-1)
            if on.all():
                addrs = flat.copy()
                lanes = None
            else:
                lanes = np.flatnonzero(on)
                if lanes.shape[0] == 0:
                    return
                addrs = flat[lanes]
        if n == 0:
            return
        line_id = self._line_ids.get(line)
        if line_id is None:
            line_id = self._line_ids[line] = len(self.lines)
            self.lines.append(line)
        shape_id = self._shape_ids.get(shape)
        if shape_id is None:
            shape_id = self._shape_ids[shape] = len(self.shapes)
            self.shapes.append(shape)
            # scalars and shape (1,) are the one lane of a scalar: the same lanes for the rules
            self._lane_shape.append(0 if len(shape) == 0 or shape == (1,) else shape_id)
        if self.program < 0:            # an access outside any program: treat as one
            self.programs.append((0, 0, 0))
            self.program = 0
            self.segment += 1
        if self.regions.fenced:
            outside = self.regions.first_outside(addrs.view(np.int64), elem_size)
            if outside >= 0:
                self._refuse(op, addrs, lanes, outside, elem_size, shape_id, line_id)
        count = addrs.shape[0]
        stats = self.stats
        stats["events"] += 1
        stats["accesses"] += count
        stats["bytes"] += count * elem_size
        changed = None
        if op == OP_STORE and value is not None and self.regions.fenced:
            changed = changed_bytes(addrs, lanes, ptr_data.shape, value, elem_size)
        self.events.append(Event(op, self.program, self.epoch, self.segment, shape_id, elem_size,
                                 line_id, addrs, lanes, changed))

    def _refuse(self, op, addrs, lanes, index, elem_size, shape_id, line_id) -> None:
        lane = index if lanes is None else int(lanes[index])
        access = Access(OP_NAMES[op], self.programs[self.program], lane, self.shapes[shape_id],
                        self.epoch, self.lines[line_id], elem_size, int(addrs[index]))
        regions = self.regions
        hazard = Hazard("out-of-bounds", access.address, None, None, access, None,
                        explain_out_of_bounds(access, regions.outside_text(access.address, elem_size),
                                              len(regions.named)))
        raise OutOfBoundsAccess(hazard)

    def _lane_range(self, n: int) -> np.ndarray:
        lanes = self._lane_ranges.get(n)
        if lanes is None:
            lanes = self._lane_ranges[n] = np.arange(n, dtype=np.int64)
        return lanes

    def flatten(self) -> Optional[FlatLaunch]:
        """The open launch's events as flat arrays (None when it has none)."""
        events = self.events
        n = len(events)
        if n == 0:
            return None

        def column(name: str) -> np.ndarray:
            field = Event._fields.index(name)
            return np.fromiter((e[field] for e in events), dtype=np.int64, count=n)

        op = column("op")
        counts = np.fromiter((e.addrs.shape[0] for e in events), dtype=np.int64, count=n)
        first_elem = np.zeros(n, dtype=np.int64)
        np.cumsum(counts[:-1], out=first_elem[1:])
        return FlatLaunch(
            is_store=op == OP_STORE, is_atomic=op == OP_ATOMIC, program=column("program"),
            segment=column("segment"), shape_id=np.asarray(self._lane_shape, dtype=np.int64)[column("shape_id")],
            elem_size=column("elem_size"),
            line_id=column("line_id"), first_elem=first_elem,
            addr=np.concatenate([e.addrs for e in events]).view(np.int64),
            lane=np.concatenate([e.lanes if e.lanes is not None else self._lane_range(e.addrs.shape[0])
                                 for e in events]),
            event=np.repeat(np.arange(n, dtype=np.int64), counts),
            changed=np.concatenate([e.changed if e.changed is not None
                                    else np.full(e.addrs.shape[0], 0 if e.op == OP_LOAD else -1, dtype=np.int64)
                                    for e in events]))

    def access(self, flat: FlatLaunch, elem: int) -> Access:
        """The witness record of element `elem` of the open launch."""
        event = self.events[int(flat.event[elem])]
        return Access(OP_NAMES[event.op], self.programs[event.program], int(flat.lane[elem]),
                      self.shapes[event.shape_id], int(event.epoch), self.lines[event.line_id],
                      int(event.elem_size), int(flat.addr[elem]))

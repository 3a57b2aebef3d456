"""Language-level race checker: record every load/store of Triton's interpreter (docs/contracts.md#races).

Under ``TRITON_INTERPRET=1`` a kernel runs program after program, and every
block load or store runs whole, so the interpreter always produces the right
bytes: the only way to see a race there is to record *what* each lane of each
program touched and check the access pattern against the rules of the
language (docs/contracts.md#races).

Rules, per launch, masked-on lanes only:

1. intra-program: in one program and one barrier epoch (``tl.debug_barrier()``
   starts a new epoch), a byte stored by one lane and loaded or stored by a
   different lane.  Same shape + same flat element index = same lane (program
   order, never a hazard); different shapes are different lanes; scalars are
   the single lane of shape ``()``.
2. cross-program: a byte stored (non-atomic) by one program and loaded or
   stored (non-atomic) by another program of the same launch.
3. misaligned: an access whose address is not a multiple of its element size.
4. out-of-bounds: a lane whose bytes are not inside any live region;
   :class:`OutOfBoundsAccess` is raised from the hook *before* the interpreter
   touches memory (so a wild pointer cannot segfault the process).  The
   regions: those registered (:meth:`RaceRecorder.add_region`), every kernel
   argument's storage, and every CPU storage a torch op returns while the
   recorder records (``allocations``); a storage freed before a launch is gone.

Atomics take part only in rules 3 and 4.

The parts, by job: ``hooks`` patches the interpreter and calls the recorder
(the sink) with numpy arrays; ``events`` stores each launch's accesses and
fences bounds; ``rules`` (numpy only) finds the witnesses when a launch ends
(next ``set_grid_dim`` or :meth:`RaceRecorder.finish`); ``witness`` holds the
records and their explanations.  :class:`RaceRecorder` ties them together.
"""
from __future__ import annotations

from typing import Any, Optional

from . import rules
from .allocations import AllocationTracker, StorageWeakRef
from .events import EventStore, Regions
from .hooks import InterpreterHooks
from .witness import (SAME_VALUE_NOTE, Access, Hazard, OutOfBoundsAccess, explain_cross_program,
                      explain_intra_program, explain_misaligned)

__all__ = ["Access", "Hazard", "OutOfBoundsAccess", "RaceRecorder", "recording"]

_recording: Optional["RaceRecorder"] = None     # the recorder inside its `with` block, if any


def recording() -> Optional["RaceRecorder"]:
    """The recorder recording now in this process, or None."""
    return _recording


class RaceRecorder:
    """Record every interpreted load/store and report hazards (docs/contracts.md#races).

    Use as a context manager around interpreted kernel launches::

        with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}) as rec:
            kernel[grid](...)
        rec.hazards, rec.stats

    An :class:`OutOfBoundsAccess` raised inside a launch reaches the caller
    wrapped in Triton's ``InterpreterError``; leaving the ``with`` block
    re-raises the ``OutOfBoundsAccess`` itself (it is also in ``.hazards``
    and ``.out_of_bounds``).  Use CPU tensors: the interpreter copies device
    tensors to the host, so their addresses would not be the recorded ones.

    One recorder records at a time in a process: entering one while another
    is active raises ``RuntimeError`` (the interpreter has one builder).
    """

    def __init__(self, regions: Optional[dict] = None, max_hazards: int = 16):
        self.max_hazards = int(max_hazards)
        self.regions = Regions()
        for name, (start, nbytes) in (regions or {}).items():
            self.add_region(name, start, nbytes)
        self._store = EventStore(self.regions)
        self._hooks = InterpreterHooks(self)
        self._tracker: Optional[AllocationTracker] = None
        self._found: dict = {}              # (kind, line a, line b) -> Hazard: one per line pair
        self._hazards: Optional[list] = None
        self.out_of_bounds: Optional[OutOfBoundsAccess] = None

    def add_region(self, name: str, tensor_or_start: Any, nbytes: Optional[int] = None) -> None:
        """Memory accesses may touch: a tensor, or a raw start address and nbytes."""
        self.regions.add(name, tensor_or_start, nbytes)

    # ---- context manager -------------------------------------------------
    def __enter__(self) -> "RaceRecorder":
        global _recording
        if self._hooks.installed:
            raise RuntimeError("RaceRecorder is already active")
        self._hooks.install()
        self._tracker = AllocationTracker(self.regions)
        self._tracker.__enter__()
        _recording = self
        self._hazards = None
        return self

    def __exit__(self, exc_type, exc_val, tb) -> bool:
        global _recording
        tracker, self._tracker = self._tracker, None
        try:
            if tracker is not None:
                tracker.__exit__(None, None, None)
        finally:
            _recording = None
            self._hooks.remove()
        self.finish()
        oob = self.out_of_bounds
        if (exc_val is not None and oob is not None and exc_val is not oob
                and _chain_contains(exc_val, oob)):
            # the interpreter wraps kernel exceptions in InterpreterError; hand
            # the caller the OutOfBoundsAccess itself
            raise oob.with_traceback(oob.__traceback__) from None
        return False

    # ---- results ---------------------------------------------------------
    def finish(self) -> "RaceRecorder":
        """Analyse the launch still open (if any) and freeze the hazard list."""
        self._close_launch()
        self._hazards = self._ranked()
        return self

    @property
    def hazards(self) -> list:
        """Hazards found so far (complete after exit or :meth:`finish`)."""
        if self._hazards is None:
            self._hazards = self._ranked()
        return list(self._hazards)

    def _ranked(self) -> list:
        """Hazards that can change bytes first (a same-value one cannot), then lowest address first, at
        most max_hazards."""
        return sorted(self._found.values(), key=lambda h: (h.same_value, h.address, h.kind))[: self.max_hazards]

    @property
    def stats(self) -> dict:
        return dict(self._store.stats)

    # ---- the sink the hooks call -----------------------------------------
    def on_launch_args(self, pairs) -> None:
        """Tensors a launcher passes to a kernel (a clone it made, say) are legal memory too.

        First the storages freed since the last launch are dropped: a launch
        sees only memory alive when it starts.
        """
        regions = self.regions
        regions.prune()
        for name, value in pairs:
            if hasattr(value, "untyped_storage"):
                storage = value.untyped_storage()
                start, nbytes = int(storage.data_ptr()), int(storage.nbytes())
                if regions.named and nbytes > 0 and not regions.knows(start, nbytes):
                    regions.add_storage(str(name), start, nbytes, StorageWeakRef(storage))

    def on_launch(self) -> None:
        self._close_launch()
        self._store.stats["launches"] += 1

    def on_program(self, x, y, z) -> None:
        self._store.start_program(x, y, z)

    def on_barrier(self) -> None:
        self._store.barrier()

    def on_access(self, op: int, ptr_data, mask, elem_size: int, line: str, value=None, shape=None) -> None:
        try:
            self._store.record(op, ptr_data, mask, elem_size, line, value, shape=shape)
        except OutOfBoundsAccess as exc:
            self._add_hazard(("out-of-bounds", exc.hazard.first.line, None), exc.hazard)
            self.out_of_bounds = exc
            raise

    # ---- analysis --------------------------------------------------------
    def _add_hazard(self, key, hazard: Hazard) -> None:
        if key not in self._found:
            self._found[key] = hazard
            self._hazards = None

    def _close_launch(self) -> None:
        """Check the open launch against the rules and start a new one."""
        store = self._store
        try:
            flat = store.flatten()
            if flat is not None:
                self._report(flat, rules.find_hazards(flat))
        finally:
            store.new_launch()

    def _report(self, flat: rules.FlatLaunch, findings: rules.Findings) -> None:
        """Turn the rules' witness positions into Hazards, one per kind and line pair."""
        store, regions = self._store, self.regions
        for elem in findings.misaligned:
            access = store.access(flat, int(elem))
            region, offset = regions.locate(access.address)
            self._add_hazard(("misaligned", access.line, None),
                             Hazard("misaligned", access.address, region, offset, access, None,
                                    explain_misaligned(access, regions.address_text(access.address))))
        for kind, conflicts, explain in (
                ("intra-program", findings.intra_program, explain_intra_program),
                ("cross-program", findings.cross_program, explain_cross_program)):
            for store_elem, other_elem, byte, same in zip(conflicts.store.tolist(), conflicts.other.tolist(),
                                                          conflicts.byte.tolist(), conflicts.same().tolist()):
                first = store.access(flat, store_elem)
                second = store.access(flat, other_elem)
                key = (kind, first.line, second.line)
                if key in self._found and (same or not self._found[key].same_value):
                    continue  # a same-value witness gives way to one that changes bytes, in a later launch too
                self._found.pop(key, None)
                region, offset = regions.locate(byte)
                text = explain(first, second, regions.address_text(byte)) + (SAME_VALUE_NOTE if same else "")
                self._add_hazard(key, Hazard(kind, byte, region, offset, first, second, text, same))


def _chain_contains(exc: BaseException, target: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if exc is target:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False

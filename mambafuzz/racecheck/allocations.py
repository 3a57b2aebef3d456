"""Memory the target allocates while the race recorder records: each new storage a region of its own.

A torch dispatch mode, active inside the recorder's ``with`` block, sees every
tensor a torch op returns (``torch.empty`` in an adapter, a launcher's
scratch, a pointer table from ``torch.tensor``).  A CPU storage the fence does
not know yet becomes a region named for the allocation, e.g. ``alloc#2
uint8[4096] at adapter.py:31``, with a weak reference: freed, it is dropped at
the next launch (``Regions.prune``), so a stale pointer is out of bounds.
Memory no torch op returns (``torch.from_numpy``, another library's buffer)
is not seen: hand it over with ``mambafuzz.adapters.add_region``.
"""
from __future__ import annotations

import os
import sys

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from .witness import display_path

__all__ = ["AllocationTracker"]

_SKIP = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
         os.path.dirname(os.path.abspath(__file__)) + os.sep,
         os.path.dirname(os.path.abspath(__import__("contextlib").__file__)) + os.sep + "contextlib.py")
_shown: dict = {}       # code object -> its file as witnesses show it, or None (torch, here, contextlib)


def allocation_site() -> str:
    """'file.py:31' of the innermost frame outside torch and the race recorder."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        try:
            shown = _shown[code]
        except KeyError:
            path = os.path.abspath(code.co_filename)
            shown = _shown[code] = None if path.startswith(_SKIP) else display_path(code.co_filename)
        if shown is not None:
            return f"{shown}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def forward(func, args, kwargs):
    """The op as its caller made it, and nothing else: an exception from here is the op's, raised on the
    caller's behalf (``judge.blame`` reads through this frame and the dispatch frame that calls it)."""
    return func(*args, **(kwargs or {}))


class AllocationTracker(TorchDispatchMode):
    """Register the storage of every CPU tensor a torch op returns with `regions` (a ``Regions``)."""

    def __init__(self, regions) -> None:
        super().__init__()
        self.regions = regions
        self.count = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch's default wraps __torch_dispatch__ in torch._dynamo.disable, whose first call imports
        # torch._dynamo: 3-15 s on a loaded 2-core machine, in every process that records
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = forward(func, args, kwargs)
        if self.regions.named:      # a fence was asked for (no union rebuilt here)
            if isinstance(out, torch.Tensor):
                self._note(out)
            elif isinstance(out, (tuple, list)):
                for t in out:
                    if isinstance(t, torch.Tensor):
                        self._note(t)
        return out

    def _note(self, t: torch.Tensor) -> None:
        if t.device.type != "cpu" or t.layout != torch.strided:
            return
        storage = t.untyped_storage()
        start, nbytes = int(storage.data_ptr()), int(storage.nbytes())
        if nbytes <= 0 or self.regions.knows(start, nbytes):
            return
        self.count += 1
        shape = ",".join(str(d) for d in t.shape)
        name = f"alloc#{self.count} {str(t.dtype).replace('torch.', '')}[{shape}] at {allocation_site()}"
        self.regions.add_storage(name, start, nbytes, StorageWeakRef(storage))

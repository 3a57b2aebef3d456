"""An indexed slot copy as index-based engines write it (SGLang-style pools in torch).

The engine holds one ``[layers, slots, ...]`` tensor per state buffer and
copies slots with advanced indexing, ``buf[:, dst] = buf[:, src]``: the
sources are gathered before anything is written, so chains, swaps and cycles
(a destination that is another pair's source) come out right.
``adapters.slot_buffers`` turns the contract's meta table into those tensors,
viewing the arena; nothing is copied in or out.
"""

import mambafuzz
from mambafuzz import adapters


class EngineSlotPool:
    """The engine's pool of state buffers."""

    def __init__(self, buffers):
        self.buffers = buffers

    def copy_slots(self, src, dst):
        for buf in self.buffers:
            buf[:, dst] = buf[:, src]  # gather, then scatter: snapshot semantics

    def copy_slots_one_by_one(self, src, dst):
        """WRONG (tests/integration/test_plugin.py): pair by pair, so a chain reads a slot already written."""
        for buf in self.buffers:
            for s, d in zip(src.tolist(), dst.tolist()):
                buf[:, d] = buf[:, s]


def slot_copy(meta, src_idx, dst_idx, *, arena):
    """The adapter: the contract's meta table and arena as the engine's pool."""
    EngineSlotPool(adapters.slot_buffers(meta, arena)).copy_slots(src_idx.long(), dst_idx.long())


def slot_copy_one_by_one(meta, src_idx, dst_idx, *, arena):
    EngineSlotPool(adapters.slot_buffers(meta, arena)).copy_slots_one_by_one(src_idx.long(), dst_idx.long())


def test_slot_copy_has_snapshot_semantics():
    mambafuzz.check(slot_copy, "slot_copy", max_examples=40)

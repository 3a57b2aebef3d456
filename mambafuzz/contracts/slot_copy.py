"""Contract `slot_copy` (docs/contracts.md#slot_copy): for every buffer and layer, slot dst_idx[i] gets slot
src_idx[i] as it was.

Index-based pools (LightLLM, SGLang, TensorRT-LLM): buffers ``[L, S, *trailing]``
and a batch of (source slot, destination slot) pairs.  Snapshot semantics: a
destination may be another pair's source (a chain), pairs may swap or form a
cycle, a pair may copy a slot onto itself.  Two pairs writing one slot from
different sources make the batch ill-posed.  Shared machinery in ``slots.py``.
"""
from __future__ import annotations



from .base import Argument
from .slots import META_ARGUMENT, SRC_ARGUMENT, SlotContract
from mambafuzz.cases.slot_copy import SlotCopyCase


class SlotCopy(SlotContract):
    name = "slot_copy"
    case_type = SlotCopyCase
    summary = "slot dst_idx[i] of every layer gets slot src_idx[i] as it was before the call (chains, swaps allowed)"
    arguments = (META_ARGUMENT, SRC_ARGUMENT,
                 Argument("dst_idx", "int32 or int64 (as src_idx)", "[P]", "destination slot of pair i"))
    forked = False

    def _dst_field(self, children) -> tuple:
        return tuple(row[0] for row in children)


CONTRACT = SlotCopy()

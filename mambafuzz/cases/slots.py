"""What the slot cases share (docs/contracts.md#slot-buffers): buffers [L, S, *trailing], source slots, the index
dtype."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import CaseBase, as_tuples, check_int, check_int_list, check_objects, show
from mambafuzz.errors import CaseError, UsageError
from mambafuzz.oracle import SlotBuffer

INDEX_DTYPES = ("int32", "int64")
CHAIN_CHOICES = ("allowed", "forbidden")  # the slot strategies' `chains` option


def check_chains(contract: str, chains) -> str:
    """`chains` if it is one of CHAIN_CHOICES; UsageError in one line otherwise."""
    if chains not in CHAIN_CHOICES:
        raise UsageError(f"{contract} option chains must be one of {', '.join(CHAIN_CHOICES)}, got {chains!r}")
    return chains

_BUFFER_FIELDS = tuple(f.name for f in dataclasses.fields(SlotBuffer))


def _check_buffers(value) -> None:
    """Types only; the oracle (SlotBuffer.validate, check_slots) judges the geometry."""
    check_objects("buffers", "buffer", value, _BUFFER_FIELDS, _BUFFER_FIELDS,
                  lambda where, key, member: check_int(where, member))


def _check_dtype(value) -> None:
    if value not in INDEX_DTYPES:
        raise CaseError(f"case field 'index_dtype' must be one of {', '.join(INDEX_DTYPES)}, got {show(value)}")


@dataclass(frozen=True)
class SlotCase(CaseBase):
    """Buffers, source slots and the index dtype; subclasses add ``dst_idx`` ([P] or [P][N])."""

    FIELD_CHECKS: ClassVar[dict] = {
        "arena_size": lambda v: check_int("arena_size", v, 1),
        "buffers": _check_buffers,
        "src_idx": lambda v: check_int_list("src_idx", v),
        "index_dtype": _check_dtype,
    }
    arena_size: int
    buffers: tuple[SlotBuffer, ...]
    src_idx: tuple[int, ...]
    index_dtype: str = "int32"
    seed: int = 0

    @classmethod
    def _from_json_fields(cls, body, kwargs):
        kwargs["buffers"] = tuple(SlotBuffer(**as_tuples(b)) for b in body["buffers"])
        return kwargs

    # dst_idx as [P][N] whatever the contract (a copy has N = 1)
    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        raise NotImplementedError

    @property
    def size(self) -> tuple:
        """A shrink measure, compared as the tuple (pairs, destinations, buffers, data bytes, slots, layout,
        int64 indices, data seed not 0).

        Data = layers x slot bytes per buffer; layout = arena size + offsets +
        strides + slot numbers + 1 for a perturbation: fewer layers, a smaller
        slot, fewer slots, unpadded strides, packed buffers, lower slot numbers
        and no perturbation are each strictly smaller.
        """
        children = self.children
        data = sum(b.layers * b.slot_bytes for b in self.buffers)
        slots = sum(b.slots for b in self.buffers)
        layout = (self.arena_size + sum(b.offset + b.slot_stride + b.layer_stride for b in self.buffers)
                  + sum(self.src_idx) + sum(sum(row) for row in children)
                  + (getattr(self, "perturb", None) is not None))
        return (len(self.src_idx), sum(len(row) for row in children), len(self.buffers), data, slots, layout,
                self.index_dtype != "int32", self.seed != 0)

    def _buffers_note(self) -> str:
        parts = []
        for b in self.buffers:
            order = "" if b.layer_major else ", slot-major"
            pad = "" if (b.slot_stride, b.layer_stride) == (b.slot_bytes, b.slots * b.slot_bytes) else \
                f", strides {b.slot_stride}/{b.layer_stride}"
            parts.append(f"{b.layers}x{b.slots}x{b.slot_bytes} B/e{b.elem_size}{pad}{order}")
        return f"{len(self.buffers)} buffer(s) [{'; '.join(parts)}]"

    def describe(self) -> str:
        pairs = [f"{s}->{','.join(map(str, row))}" for s, row in zip(self.src_idx, self.children)]
        more = f", +{len(pairs) - 6} more" if len(pairs) > 6 else ""
        return (f"{self._buffers_note()}; {len(pairs)} pair(s) ({self.index_dtype}): {', '.join(pairs[:6])}{more}"
                f"{self._perturb_note()}")

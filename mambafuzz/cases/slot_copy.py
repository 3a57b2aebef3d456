"""The `slot_copy` case (docs/contracts.md#slot_copy): pair i copies slot src_idx[i] onto dst_idx[i]."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import check_int_list
from mambafuzz.cases.slots import SlotCase

@dataclass(frozen=True)
class SlotCopyCase(SlotCase):
    """Pair i copies slot src_idx[i] onto slot dst_idx[i] in every layer of every buffer."""

    contract: ClassVar[str] = "slot_copy"
    FIELD_CHECKS: ClassVar[dict] = {"dst_idx": lambda v: check_int_list("dst_idx", v)}
    dst_idx: tuple[int, ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        return tuple((d,) for d in self.dst_idx)

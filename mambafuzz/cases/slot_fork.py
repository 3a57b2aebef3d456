"""The `slot_fork` case (docs/contracts.md#slot_fork): pair i copies slot src_idx[i] onto every slot of dst_idx[i]."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import check_nested
from mambafuzz.cases.slots import SlotCase
from mambafuzz.errors import CaseError

def _check_children(value) -> None:
    check_nested("dst_idx", value, 2)
    if len({len(row) for row in value}) > 1:
        raise CaseError("case field 'dst_idx' must be rectangular [P][N] (every pair the same number of children)")


@dataclass(frozen=True)
class SlotForkCase(SlotCase):
    """Pair i copies slot src_idx[i] onto every slot of dst_idx[i] in every layer of every buffer."""

    contract: ClassVar[str] = "slot_fork"
    FIELD_CHECKS: ClassVar[dict] = {"dst_idx": _check_children}
    dst_idx: tuple[tuple[int, ...], ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        return self.dst_idx

"""Contract `slot_fork` (SPEC 2.6): slot src_idx[i], as it was, goes to each of dst_idx[i, :] in every layer.

The fork of a request's state into N children (parallel sampling, beam
search).  A child may be another pair's parent (a chain), or its own parent (a
self-copy); two pairs writing one slot from different sources make the batch
ill-posed.  Shared machinery in ``slots.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import check_nested
from mambafuzz.errors import CaseError

from .base import Argument
from .slots import META_ARGUMENT, SRC_ARGUMENT, SlotCase, SlotContract


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


class SlotFork(SlotContract):
    name = "slot_fork"
    case_type = SlotForkCase
    summary = "slot src_idx[i] as it was goes to every dst_idx[i, :] in every layer (a child may be a parent)"
    arguments = (META_ARGUMENT, SRC_ARGUMENT,
                 Argument("dst_idx", "int32 or int64 (as src_idx)", "[P, N]", "the N destination slots of pair i"))
    forked = True

    def _dst_field(self, children) -> tuple:
        return tuple(tuple(row) for row in children)


CONTRACT = SlotFork()

"""The `batch_memcpy` case (docs/contracts.md#batch_memcpy): rows of (src, dst, size) byte offsets into one arena."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import CaseBase, check_int, show
from mambafuzz.errors import CaseError

def _check_copies(value) -> None:
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field 'copies' must be a list of [src, dst, size] rows, got {show(value)}")
    for i, row in enumerate(value):
        if not isinstance(row, (list, tuple)) or len(row) != 3:
            raise CaseError(f"case field 'copies[{i}]' must be [src, dst, size], got {show(row)}")
        for j, v in enumerate(row):
            check_int(f"copies[{i}][{j}]", v, 0)


@dataclass(frozen=True)
class BatchCopyCase(CaseBase):
    """Rows of (src, dst, size) byte offsets into the arena."""

    contract: ClassVar[str] = "batch_memcpy"
    FIELD_CHECKS: ClassVar[dict] = {"arena_size": lambda v: check_int("arena_size", v, 1), "copies": _check_copies}
    arena_size: int
    copies: tuple[tuple[int, int, int], ...]
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def size(self) -> tuple:
        """A shrink measure, compared as the tuple (rows, bytes moved, layout, data seed not 0).

        Layout = 2 x each row's |src - dst| + its lower offset, plus the arena
        size, plus 1 for a perturbation: a smaller shift, a row moved towards
        byte 0, a smaller arena and no perturbation are each strictly smaller;
        the fill seed 0 is the canonical tie-break.
        """
        moved = sum(n for _, _, n in self.copies)
        layout = sum(2 * abs(s - d) + min(s, d) for s, d, _ in self.copies)
        layout += self.arena_size + (self.perturb is not None)
        return (len(self.copies), moved, layout, self.seed != 0)

    def describe(self) -> str:
        rows = ", ".join(f"{s}->{d} ({n} B)" for s, d, n in self.copies[:4])
        more = f", +{len(self.copies) - 4} more" if len(self.copies) > 4 else ""
        return f"{len(self.copies)} row(s): {rows}{more}{self._perturb_note()}"

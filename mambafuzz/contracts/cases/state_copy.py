"""The `state_copy` case (docs/contracts.md#state_copy): request i copies every state (src_col, dst_col, bias)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.contracts.cases import check_int_list, show
from mambafuzz.contracts.cases.pools import PoolCase
from mambafuzz.errors import CaseError

@dataclass(frozen=True)
class StateCopyCase(PoolCase):
    """Request i copies every state (src_col, dst_col, bias)."""

    contract: ClassVar[str] = "state_copy"
    FIELD_CHECKS: ClassVar[dict] = {**{name: (lambda v, name=name: check_int_list(name, v))
                                       for name in ("src_cols", "dst_cols", "biases")},
                                    "skip_equal_cols": lambda v: _check_bool("skip_equal_cols", v),
                                    "tiles_fixed": lambda v: _check_bool("tiles_fixed", v)}
    src_cols: tuple[int, ...] = ()
    dst_cols: tuple[int, ...] = ()
    biases: tuple[int, ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None
    skip_equal_cols: bool = False   # the kernel skips requests with src_col == dst_col
    tiles_fixed: bool = False       # num_tiles is the engine's constant: reduction keeps it

    def to_json(self) -> dict:
        body = super().to_json()
        for flag in ("skip_equal_cols", "tiles_fixed"):
            if not body.get(flag):
                body.pop(flag, None)  # absent when off: older cases hash as before
        return body

    @property
    def size(self) -> tuple:
        """A shrink measure, compared as the tuple (requests, states, data bytes + biases, tiles, layout,
        data seed not 0): packed pools, a cut arena, fewer blocks, table columns or groups, fewer tiles
        are each strictly smaller."""
        data = sum(p.data_bytes for p in self.pools) + sum(self.biases)
        return (len(self.src_cols), len(self.pools), data, self.num_tiles, self._layout_size(), self.seed != 0)

    def describe(self) -> str:
        reqs = ", ".join(f"r{i}: col {s}->{d} bias {b}" for i, (s, d, b) in
                         enumerate(zip(self.src_cols, self.dst_cols, self.biases)))
        fixed = " (fixed)" if self.tiles_fixed else ""
        skip = "; requests with src_col == dst_col skipped" if self.skip_equal_cols else ""
        return f"{self._pool_summary()}, tiles {self.num_tiles}{fixed}; {reqs}{skip}{self._perturb_note()}"


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise CaseError(f"case field {name!r} must be true or false, got {show(value)}")

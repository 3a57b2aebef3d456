"""The `state_copy` case (docs/contracts.md#state_copy): request i copies every state (src_col, dst_col, bias)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import INT32, check_int_list, show
from mambafuzz.cases.pools import PoolCase
from mambafuzz.errors import CaseError, UsageError

# The options a state_copy strategy takes (the contract's CLI options and strategies.state_copies).
LAYOUTS = ("both", "sd", "ds")
_YES, _NO = ("yes", "on", "true", "1"), ("no", "off", "false", "0")


class TileChoices(tuple):
    """``--tiles`` accepts 'drawn' or any positive count; argparse shows the choices as {drawn,N}."""

    def __contains__(self, value) -> bool:
        return value == "drawn" or (isinstance(value, (str, int)) and str(value).isdigit() and int(value) >= 1)


def parse_options(layout="both", tiles="drawn", skip_equal_cols=False) -> tuple[str, int | None, bool]:
    """(layout, fixed tile count or None for drawn, skip) from API or CLI values; UsageError in one line."""
    if layout not in LAYOUTS:
        raise UsageError(f"state_copy option layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    fixed = None
    if tiles not in (None, "drawn"):
        if isinstance(tiles, bool) or tiles not in TileChoices():
            raise UsageError(f"state_copy option tiles must be 'drawn' or a positive tile count, got {tiles!r}")
        fixed = int(tiles)
    if isinstance(skip_equal_cols, str):
        word = skip_equal_cols.lower()
        if word not in _YES + _NO:
            raise UsageError(f"state_copy option skip_equal_cols must be yes or no, got {skip_equal_cols!r}")
        skip_equal_cols = word in _YES
    elif not isinstance(skip_equal_cols, bool):
        raise UsageError(f"state_copy option skip_equal_cols must be True or False, got {skip_equal_cols!r}")
    return layout, fixed, skip_equal_cols


@dataclass(frozen=True)
class StateCopyCase(PoolCase):
    """Request i copies every state (src_col, dst_col, bias)."""

    contract: ClassVar[str] = "state_copy"
    FIELD_CHECKS: ClassVar[dict] = {**{name: (lambda v, name=name: check_int_list(name, v, -INT32,
                                                                                  high=INT32 - 1))
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

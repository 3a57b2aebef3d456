"""What the prefill contracts' cases share (docs/contracts.md#conv_prefill, #ssm_prefill, #delta_prefill): an
update case's pool and block table, plus per row ``has_init`` (start from the state in its initial block,
else from zeros) and, with prefix caching (``apc``), its columns ``init``, ``first``, ``last`` and the tokens
it has ``computed`` before, blocks ``block_size`` tokens long; without, a row reads and stores column 0.

``PrefillCase`` holds those fields' checks, ``PER_ROW`` (the fields a row drop cuts), the table and column
part of ``size`` and the rows of ``describe``.  A case type still declares every field itself, in its own
JSON order (``UpdateCase``'s rule).
"""
from __future__ import annotations

from typing import ClassVar

from mambafuzz.cases import TOKENS, boolean, check_int, optional_int_list, show
from mambafuzz.cases.updates import UpdateCase
from mambafuzz.errors import CaseError


def bool_list(name: str):
    """A field check: a list of true / false."""
    def check(value) -> None:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, bool) for v in value):
            raise CaseError(f"case field {name!r} must be a list of true / false, got {show(value)}")
    return check


class PrefillCase(UpdateCase):
    """The fields prefill cases share, checked the same way; the shared parts of ``size`` and ``describe``."""

    FIELD_CHECKS: ClassVar[dict] = {
        "has_init": bool_list("has_init"),
        "apc": boolean("apc"),
        "block_size": lambda v: check_int("block_size", v, 0, TOKENS),
        "init": optional_int_list("init", 0),
        "first": optional_int_list("first", 0),
        "last": optional_int_list("last", 0),
        "computed": optional_int_list("computed", 0),
    }
    # the per-row fields, cut together when a row is dropped
    PER_ROW: ClassVar[tuple[str, ...]] = ("lens", "idx", "has_init", "init", "first", "last", "computed")

    def _pool_slack(self) -> int:
        """Bytes of the pool's offset and slot padding (0 for a pool of its own with no such fields)."""
        return self.offset + self.slot_stride - self.slot_bytes

    def _size(self, state: int, extras: int) -> tuple:
        """``size`` from the case's state elements and its own extras: fewer rows, fewer tokens, a smaller
        state, fewer columns, no extras, a tighter table and pool, low slots."""
        extras += self.idx_2d + self.apc + (self.perturb is not None) + (self.dtype != "float32") + sum(self.has_init)
        layout = (self._pool_slack() + self.idx_stride - self.cols + sum(abs(v) for row in self.idx for v in row)
                  + self.slots + self.arena_size + sum(self.computed or ()) + self.block_size)
        return (len(self.lens), sum(self.lens), state, self.cols, extras, layout, self.seed != 0)

    def _rows_note(self) -> str:
        """The first six rows (tokens, initial state, columns, table row) and how many more."""
        rows = []
        for b, row in enumerate(self.idx[:6]):
            cells = list(row) if len(row) > 1 else row[0]
            cols = (f" init {self.init[b]} first {self.first[b]} last {self.last[b]} c {self.computed[b]}"
                    if self.apc else "")
            rows.append(f"[{self.lens[b]} tok, {'state' if self.has_init[b] else 'zeros'}{cols}: {cells}]")
        more = f", +{len(self.idx) - 6} more" if len(self.idx) > 6 else ""
        return f"rows {', '.join(rows)}{more}"

    def _apc_note(self) -> str:
        return f"; block size {self.block_size}" if self.apc else "; no prefix caching"

"""The `conv_prefill` case (docs/contracts.md#conv_prefill): one causal-conv1d prefill batch over a conv-state
pool, with prefix caching.

The pool is ``[slots, dim, state_len]`` elements of ``dtype`` at byte
``offset``, slots ``slot_stride`` bytes apart; ``layout`` says which axis is
contiguous inside a slot (``dim``: token rows of ``dim`` channels, vLLM's;
``token``: each channel's columns together).  Row b has ``lens[b]`` tokens,
packed ``[T, dim]`` with ``query_start_loc``; its block-table row is
``idx[b]`` (``M`` columns; ``idx_2d`` False passes ``[B]``), rows of the table
``idx_stride`` elements apart; ``has_init[b]`` says whether it starts from the
window in its initial block or from zeros.  With prefix caching (``apc``),
``init``, ``first``, ``last`` and ``computed`` are its columns and the tokens
it has computed before, blocks ``block_size`` tokens long; without, row b
reads and stores column 0.  x, weight and bias values come from the seed; the
pool's from the arena.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.errors import CaseError

from . import FLOAT_DTYPES, UPDATE_PADS, boolean, check_int, check_int_list, one_of, optional_int_list, show
from .updates import UpdateCase

DTYPES = FLOAT_DTYPES
LAYOUTS = ("dim", "token")
PADS = UPDATE_PADS


def bool_list(name: str):
    """A field check: a list of true / false."""
    def check(value) -> None:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, bool) for v in value):
            raise CaseError(f"case field {name!r} must be a list of true / false, got {show(value)}")
    return check


@dataclass(frozen=True)
class ConvPrefillCase(UpdateCase):
    contract: ClassVar[str] = "conv_prefill"
    FIELD_CHECKS: ClassVar[dict] = {
        "layout": one_of("layout", LAYOUTS),
        "dim": lambda v: check_int("dim", v, 1),
        "state_len": lambda v: check_int("state_len", v, 1),
        "width": lambda v: check_int("width", v, 2),
        "lens": lambda v: check_int_list("lens", v, 0),
        "has_init": bool_list("has_init"),
        "bias": boolean("bias"),
        "silu": boolean("silu"),
        "idx_stride": lambda v: check_int("idx_stride", v, 1),
        "apc": boolean("apc"),
        "block_size": lambda v: check_int("block_size", v, 0),
        "init": optional_int_list("init", 0),
        "first": optional_int_list("first", 0),
        "last": optional_int_list("last", 0),
        "computed": optional_int_list("computed", 0),
    }
    arena_size: int
    dtype: str
    layout: str
    offset: int
    slots: int
    dim: int
    state_len: int
    slot_stride: int
    width: int
    lens: tuple[int, ...]
    idx: tuple[tuple[int, ...], ...]
    has_init: tuple[bool, ...]
    bias: bool = True
    silu: bool = True
    idx_2d: bool = False
    idx_stride: int = 1
    apc: bool = False
    block_size: int = 0
    init: tuple[int, ...] | None = None
    first: tuple[int, ...] | None = None
    last: tuple[int, ...] | None = None
    computed: tuple[int, ...] | None = None
    pad: int = -1
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    PER_ROW: ClassVar[tuple[str, ...]] = ("lens", "idx", "has_init", "init", "first", "last", "computed")

    @property
    def slot_bytes(self) -> int:
        return self.dim * self.state_len * self.elem

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows, fewer tokens, a narrower state, fewer columns, no extras, low slots."""
        extras = (self.bias + self.silu + self.idx_2d + self.apc + (self.perturb is not None)
                  + (self.dtype != "float32") + (self.layout != "dim") + sum(self.has_init))
        layout = (self.offset + self.slot_stride - self.slot_bytes + self.idx_stride - self.cols
                  + sum(abs(v) for row in self.idx for v in row) + self.slots + self.arena_size
                  + sum(self.computed or ()) + self.block_size)
        return (len(self.lens), sum(self.lens), self.dim * self.state_len * self.width, self.cols, extras,
                layout, self.seed != 0)

    def describe(self) -> str:
        rows = []
        for b, row in enumerate(self.idx[:6]):
            cells = list(row) if len(row) > 1 else row[0]
            cols = (f" init {self.init[b]} first {self.first[b]} last {self.last[b]} c {self.computed[b]}"
                    if self.apc else "")
            rows.append(f"[{self.lens[b]} tok, {'state' if self.has_init[b] else 'zeros'}{cols}: {cells}]")
        more = f", +{len(self.idx) - 6} more" if len(self.idx) > 6 else ""
        apc = f"; block size {self.block_size}" if self.apc else "; no prefix caching"
        return (f"pool {self.slots}x{self.dim}x{self.state_len} {self.dtype} ({self.layout}-contiguous, stride "
                f"{self.slot_stride} B) at +{self.offset}; W {self.width}{apc}; rows {', '.join(rows)}{more}; "
                f"pad {self.pad}{self._perturb_note()}")

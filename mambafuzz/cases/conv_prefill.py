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

from . import FLOAT_DTYPES, UPDATE_PADS, boolean, check_int, check_int_list, one_of
from .prefill import PrefillCase

DTYPES = FLOAT_DTYPES
LAYOUTS = ("dim", "token")
PADS = UPDATE_PADS


@dataclass(frozen=True)
class ConvPrefillCase(PrefillCase):
    contract: ClassVar[str] = "conv_prefill"
    FIELD_CHECKS: ClassVar[dict] = {
        "layout": one_of("layout", LAYOUTS),
        "dim": lambda v: check_int("dim", v, 1),
        "state_len": lambda v: check_int("state_len", v, 1),
        "width": lambda v: check_int("width", v, 2),
        "lens": lambda v: check_int_list("lens", v, 0),  # no upper bound here, unlike the other prefills
        "bias": boolean("bias"),
        "silu": boolean("silu"),
        "idx_stride": lambda v: check_int("idx_stride", v, 1),
        "block_size": lambda v: check_int("block_size", v, 0),
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

    @property
    def slot_bytes(self) -> int:
        return self.dim * self.state_len * self.elem

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows, fewer tokens, a narrower state, fewer columns, no extras, low slots."""
        return self._size(self.dim * self.state_len * self.width,
                          self.bias + self.silu + (self.layout != "dim"))

    def describe(self) -> str:
        return (f"pool {self.slots}x{self.dim}x{self.state_len} {self.dtype} ({self.layout}-contiguous, stride "
                f"{self.slot_stride} B) at +{self.offset}; W {self.width}{self._apc_note()}; {self._rows_note()}; "
                f"pad {self.pad}{self._perturb_note()}")

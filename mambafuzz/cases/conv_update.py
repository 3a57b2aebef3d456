"""The `conv_update` case (docs/contracts.md#conv_update): one causal-conv1d decode or spec-decode step over a state
pool.

The pool is ``[slots, dim, state_len]`` elements of ``dtype`` at byte
``offset``, slots ``slot_stride`` bytes apart; ``layout`` says which axis is
contiguous inside a slot: ``dim`` (vLLM's default SD: token rows of ``dim``
channels) or ``token`` (DS: each channel's ``state_len`` tokens together).
Row b has ``lens[b]`` tokens (``varlen``: packed ``[T, dim]`` with
``query_start_loc``; else every row has the same count, ``[B, dim, L]``),
reads and writes slots through ``idx[b]`` (``C`` columns; ``idx_2d`` False
passes ``[B]``), rows of the index array ``idx_stride`` elements apart.  Spec
decode: ``nacc``; prefix caching: ``init`` / ``last`` columns.  x, weight
and bias values come from the seed; the pool's from the arena.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import (FLOAT_DTYPES, INT32, UPDATE_PADS, boolean, check_int, one_of,
                                       optional_int_list)
from mambafuzz.cases.updates import UpdateCase

DTYPES = FLOAT_DTYPES
LAYOUTS = ("dim", "token")
PADS = UPDATE_PADS


@dataclass(frozen=True)
class ConvUpdateCase(UpdateCase):
    contract: ClassVar[str] = "conv_update"
    FIELD_CHECKS: ClassVar[dict] = {
        "layout": one_of("layout", LAYOUTS),
        "dim": lambda v: check_int("dim", v, 1),
        "state_len": lambda v: check_int("state_len", v, 1),
        "width": lambda v: check_int("width", v, 2),
        "bias": boolean("bias"),
        "silu": boolean("silu"),
        "varlen": boolean("varlen"),
        "init": optional_int_list("init", 0, INT32 - 1),
        "last": optional_int_list("last", 0, INT32 - 1),
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
    bias: bool = True
    silu: bool = True
    varlen: bool = False
    idx_2d: bool = False
    idx_stride: int = 1
    nacc: tuple[int, ...] | None = None
    init: tuple[int, ...] | None = None
    last: tuple[int, ...] | None = None
    pad: int = -1
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def slot_bytes(self) -> int:
        return self.dim * self.state_len * self.elem

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows, fewer tokens, a narrower state, low slot numbers, no extras."""
        extras = (self.bias + self.silu + self.varlen + self.idx_2d + (self.nacc is not None)
                  + (self.init is not None) + (self.perturb is not None) + (self.dtype != "float32")
                  + (self.layout != "dim"))
        layout = (self.offset + self.slot_stride - self.slot_bytes + self.idx_stride - self.cols
                  + sum(abs(v) for row in self.idx for v in row) + self.slots + self.arena_size)
        return (len(self.lens), sum(self.lens), self.dim * self.state_len * self.width, self.cols, extras,
                layout, self.seed != 0)

    def describe(self) -> str:
        spec = f", nacc {list(self.nacc)}" if self.nacc is not None else ""
        apc = f", init {list(self.init)} last {list(self.last)}" if self.init is not None else ""
        rows = ", ".join(f"{list(r) if len(r) > 1 else r[0]}" for r in self.idx[:6])
        more = f", +{len(self.idx) - 6} more" if len(self.idx) > 6 else ""
        return (f"pool {self.slots}x{self.dim}x{self.state_len} {self.dtype} ({self.layout}-contiguous, stride "
                f"{self.slot_stride} B) at +{self.offset}; W {self.width}, lens {list(self.lens)}"
                f"{' varlen' if self.varlen else ''}; idx {rows}{more}{spec}{apc}; pad {self.pad}"
                f"{self._perturb_note()}")

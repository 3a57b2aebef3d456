"""The `ssm_update` case (docs/contracts.md#ssm_update): one Mamba2 selective-state-update step over a state pool.

The pool is ``[slots, heads, dim, dstate]`` elements of ``dtype`` (contiguous
inside a slot), slots ``slot_stride`` bytes apart from byte ``offset``.  Row b
has ``lens[b]`` tokens (``varlen``: packed ``[T, H, D]`` with ``cu_seqlens``;
else one token each, ``[B, H, D]``); x, dt, z, B, C and the outputs are
``io_dtype``, A, D and dt_bias float32.  ``src[b]`` / ``dst[b]`` are the index
rows (``C`` columns; ``dst`` None: dst is src), elements ``idx_col_stride``
apart and rows ``idx_row_stride`` apart.  Spec decode: ``nacc``.

``exact`` draws values for which every kernel's fp32 arithmetic is exact
(A = 0, no softplus, small dyadic x, dt, B and pool values): the pool then
lives in the arena and is compared byte for byte (slot padding and pools past
2 GiB included); otherwise the pool is its own tensor, compared within a
tolerance where a row stores and exactly elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import (FLOAT_DTYPES, TOKENS, UPDATE_PADS, boolean, check_int, index_table,
                                       one_of)
from mambafuzz.cases.updates import UpdateCase

DTYPES = FLOAT_DTYPES
PADS = UPDATE_PADS


@dataclass(frozen=True)
class SsmUpdateCase(UpdateCase):
    contract: ClassVar[str] = "ssm_update"
    INDEX_FIELDS: ClassVar[tuple[str, ...]] = ("src", "dst")
    FIELD_CHECKS: ClassVar[dict] = {
        "io_dtype": one_of("io_dtype", tuple(DTYPES)),
        "heads": lambda v: check_int("heads", v, 1),
        "groups": lambda v: check_int("groups", v, 1),
        "dim": lambda v: check_int("dim", v, 1),
        "dstate": lambda v: check_int("dstate", v, 1),
        "src": index_table("src", optional=False),
        "dst": index_table("dst", optional=True),
        "idx_col_stride": lambda v: check_int("idx_col_stride", v, 1, TOKENS),
        "idx_row_stride": lambda v: check_int("idx_row_stride", v, 1, TOKENS),
        "varlen": boolean("varlen"),
        "has_z": boolean("has_z"),
        "has_d": boolean("has_d"),
        "has_dt_bias": boolean("has_dt_bias"),
        "softplus": boolean("softplus"),
        "a_per_head": boolean("a_per_head"),
        "exact": boolean("exact"),
    }
    arena_size: int
    dtype: str
    io_dtype: str
    offset: int
    slots: int
    heads: int
    groups: int
    dim: int
    dstate: int
    slot_stride: int
    lens: tuple[int, ...]
    src: tuple[tuple[int, ...], ...]
    dst: tuple[tuple[int, ...], ...] | None = None
    idx_col_stride: int = 1
    idx_row_stride: int = 1
    nacc: tuple[int, ...] | None = None
    varlen: bool = False
    has_z: bool = True
    has_d: bool = True
    has_dt_bias: bool = True
    softplus: bool = True
    a_per_head: bool = False
    exact: bool = False
    pad: int = -1
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def slot_bytes(self) -> int:
        return self.heads * self.dim * self.dstate * self.elem

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows and tokens, a smaller state, fewer extras, low slot numbers."""
        extras = (self.has_z + self.has_d + self.has_dt_bias + self.softplus + self.a_per_head + self.varlen
                  + (self.dst is not None) + (self.nacc is not None) + (self.perturb is not None)
                  + (self.dtype != "float32") + (self.io_dtype != "float32") + (not self.exact))
        tables = (self.src,) + ((self.dst,) if self.dst is not None else ())
        layout = (self.offset + self.slot_stride - self.slot_bytes + self.idx_col_stride + self.idx_row_stride
                  + sum(abs(v) for t in tables for row in t for v in row) + self.slots + self.arena_size)
        return (len(self.lens), sum(self.lens), self.heads * self.dim * self.dstate, self.cols, extras,
                layout, self.seed != 0)

    def describe(self) -> str:
        def rows(table):
            shown = ", ".join(str(list(r)) for r in table[:6])
            return shown + (f", +{len(table) - 6} more" if len(table) > 6 else "")
        spec = f", nacc {list(self.nacc)}" if self.nacc is not None else ""
        dst = f"; dst {rows(self.dst)}" if self.dst is not None else ""
        extras = [n for n, on in (("z", self.has_z), ("D", self.has_d), ("dt_bias", self.has_dt_bias),
                                  ("softplus", self.softplus), ("A per head", self.a_per_head),
                                  ("exact", self.exact)) if on]
        return (f"pool {self.slots}x{self.heads}x{self.dim}x{self.dstate} {self.dtype} (stride {self.slot_stride} B)"
                f" at +{self.offset}; groups {self.groups}, io {self.io_dtype}, lens {list(self.lens)}"
                f"{' varlen' if self.varlen else ''}; src {rows(self.src)}{dst} (col stride {self.idx_col_stride}, "
                f"row stride {self.idx_row_stride}){spec}; {', '.join(extras) or 'no extras'}; pad {self.pad}"
                f"{self._perturb_note()}")

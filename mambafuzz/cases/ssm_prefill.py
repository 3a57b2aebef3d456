"""The `ssm_prefill` case (docs/contracts.md#ssm_prefill): one Mamba2 chunked-scan prefill batch over an SSM
state pool, with prefix caching.

The pool is ``[slots, heads, headdim, dstate]`` elements of ``dtype`` (contiguous inside a slot), slots
``slot_stride`` bytes apart from byte ``offset``.  Row b has ``lens[b]`` tokens, packed ``[T, H, P]`` with
``cu_seqlens``; x, dt and B are ``io_dtype``, A and dt_bias float32.  Its block-table row is ``idx[b]``
(``M`` columns; ``idx_2d`` False passes ``[B]``), rows of the table ``idx_stride`` elements apart;
``has_init[b]`` says whether it starts from the state in its initial block or from zeros.  With prefix
caching (``apc``), ``init``, ``first``, ``last`` and ``computed`` are its columns and the tokens it has
computed before, blocks ``block_size`` tokens long; without, row b reads and stores column 0.

``exact`` draws values for which any order of fp32 math is exact (A = 0, no softplus, small dyadic x, dt,
B and pool values): the pool then lives in the arena and is compared byte for byte (slot padding, pools
past 2 GiB); otherwise the pool is its own tensor, compared within the contract's bound where a row
stores and exactly elsewhere.  Values come from the seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import (FLOAT_DTYPES, TOKENS, UPDATE_PADS, CaseBase, boolean, check_int, check_int_list, index_table, one_of,
               optional_int_list, show)
from mambafuzz.errors import CaseError

DTYPES = FLOAT_DTYPES
PADS = UPDATE_PADS


def bool_list(name: str):
    """A field check: a list of true / false."""
    def check(value) -> None:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, bool) for v in value):
            raise CaseError(f"case field {name!r} must be a list of true / false, got {show(value)}")
    return check


@dataclass(frozen=True)
class SsmPrefillCase(CaseBase):
    contract: ClassVar[str] = "ssm_prefill"
    FIELD_CHECKS: ClassVar[dict] = {
        "arena_size": lambda v: check_int("arena_size", v, 1),
        "dtype": one_of("dtype", tuple(DTYPES)),
        "io_dtype": one_of("io_dtype", tuple(DTYPES)),
        "offset": lambda v: check_int("offset", v, 0),
        "slots": lambda v: check_int("slots", v, 1),
        "heads": lambda v: check_int("heads", v, 1),
        "groups": lambda v: check_int("groups", v, 1),
        "headdim": lambda v: check_int("headdim", v, 1),
        "dstate": lambda v: check_int("dstate", v, 1),
        "slot_stride": lambda v: check_int("slot_stride", v, 1),
        "lens": lambda v: check_int_list("lens", v, 0, high=TOKENS),
        "idx": index_table("idx", "B"),
        "has_init": bool_list("has_init"),
        "idx_2d": boolean("idx_2d"),
        "idx_stride": lambda v: check_int("idx_stride", v, 1, TOKENS),
        "apc": boolean("apc"),
        "block_size": lambda v: check_int("block_size", v, 0, TOKENS),
        "init": optional_int_list("init", 0),
        "first": optional_int_list("first", 0),
        "last": optional_int_list("last", 0),
        "computed": optional_int_list("computed", 0),
        "has_dt_bias": boolean("has_dt_bias"),
        "softplus": boolean("softplus"),
        "exact": boolean("exact"),
        "pad": one_of("pad", PADS),
    }
    arena_size: int
    dtype: str
    io_dtype: str
    offset: int
    slots: int
    heads: int
    groups: int
    headdim: int
    dstate: int
    slot_stride: int
    lens: tuple[int, ...]
    idx: tuple[tuple[int, ...], ...]
    has_init: tuple[bool, ...]
    idx_2d: bool = False
    idx_stride: int = 1
    apc: bool = False
    block_size: int = 0
    init: tuple[int, ...] | None = None
    first: tuple[int, ...] | None = None
    last: tuple[int, ...] | None = None
    computed: tuple[int, ...] | None = None
    has_dt_bias: bool = True
    softplus: bool = True
    exact: bool = False
    pad: int = -1
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    PER_ROW: ClassVar[tuple[str, ...]] = ("lens", "idx", "has_init", "init", "first", "last", "computed")

    @property
    def elem(self) -> int:
        return DTYPES[self.dtype]

    @property
    def slot_bytes(self) -> int:
        return self.heads * self.headdim * self.dstate * self.elem

    @property
    def cols(self) -> int:
        return len(self.idx[0]) if self.idx else 1

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows, fewer tokens, a smaller state, fewer columns, no extras, low slots."""
        extras = (self.has_dt_bias + self.softplus + self.idx_2d + self.apc + (self.perturb is not None)
                  + (self.dtype != "float32") + (self.io_dtype != "float32") + (not self.exact) + sum(self.has_init))
        layout = (self.offset + self.slot_stride - self.slot_bytes + self.idx_stride - self.cols
                  + sum(abs(v) for row in self.idx for v in row) + self.slots + self.arena_size
                  + sum(self.computed or ()) + self.block_size)
        return (len(self.lens), sum(self.lens), self.heads * self.headdim * self.dstate, self.cols, extras,
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
        extras = [n for n, on in (("dt_bias", self.has_dt_bias), ("softplus", self.softplus),
                                  ("exact", self.exact)) if on]
        return (f"pool {self.slots}x{self.heads}x{self.headdim}x{self.dstate} {self.dtype} (stride "
                f"{self.slot_stride} B) at +{self.offset}; groups {self.groups}, io {self.io_dtype}{apc}; rows "
                f"{', '.join(rows)}{more}; {', '.join(extras) or 'no extras'}; pad {self.pad}"
                f"{self._perturb_note()}")

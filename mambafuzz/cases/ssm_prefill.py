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

from . import FLOAT_DTYPES, UPDATE_PADS, boolean, check_int, one_of
from .prefill import PrefillCase

DTYPES = FLOAT_DTYPES
PADS = UPDATE_PADS


@dataclass(frozen=True)
class SsmPrefillCase(PrefillCase):
    contract: ClassVar[str] = "ssm_prefill"
    FIELD_CHECKS: ClassVar[dict] = {
        "io_dtype": one_of("io_dtype", tuple(DTYPES)),
        "heads": lambda v: check_int("heads", v, 1),
        "groups": lambda v: check_int("groups", v, 1),
        "headdim": lambda v: check_int("headdim", v, 1),
        "dstate": lambda v: check_int("dstate", v, 1),
        "has_dt_bias": boolean("has_dt_bias"),
        "softplus": boolean("softplus"),
        "exact": boolean("exact"),
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

    @property
    def slot_bytes(self) -> int:
        return self.heads * self.headdim * self.dstate * self.elem

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows, fewer tokens, a smaller state, fewer columns, no extras, low slots."""
        return self._size(self.heads * self.headdim * self.dstate,
                          self.has_dt_bias + self.softplus + (self.io_dtype != "float32") + (not self.exact))

    def describe(self) -> str:
        extras = [n for n, on in (("dt_bias", self.has_dt_bias), ("softplus", self.softplus),
                                  ("exact", self.exact)) if on]
        return (f"pool {self.slots}x{self.heads}x{self.headdim}x{self.dstate} {self.dtype} (stride "
                f"{self.slot_stride} B) at +{self.offset}; groups {self.groups}, io {self.io_dtype}"
                f"{self._apc_note()}; {self._rows_note()}; {', '.join(extras) or 'no extras'}; pad {self.pad}"
                f"{self._perturb_note()}")

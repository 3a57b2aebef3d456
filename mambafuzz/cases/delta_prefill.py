"""The `delta_prefill` case (docs/contracts.md#delta_prefill): one gated-delta-rule (GDN, or KDA with a per-K
decay) prefill batch over a state pool, with prefix caching.

The pool is a tensor ``[slots, HV, V, K]`` (``layout`` ``vk``) or ``[slots, HV, K, V]`` (``kv``) of
``dtype`` (float math, compared within a bound: not arena bytes; ``arena_size`` is a token arena the
target ignores).  Sequence n has ``lens[n]`` packed tokens (``cu_seqlens``), ``heads`` query/key heads
of ``key_dim`` and ``heads * group`` value heads of ``value_dim``; q, k, v, g, beta and the output are
``act_dtype``.  Its block-table row is ``idx[n]`` (``M`` columns; ``idx_2d`` False passes ``[N]``), rows
``idx_stride`` elements apart; ``has_init[n]`` says whether it starts from the state in its initial
slot or from zeros.  With prefix caching (``apc``), ``init``, ``first``, ``last`` and ``computed`` are
its columns and the tokens computed before, blocks ``block_size`` tokens long; without, sequence n
reads and stores column 0.  ``final`` False: no final state is asked for (``output_final_state``).
``kda``: the decay is per K; ``beta_per_v``: beta ``[T, HV, V]``; ``l2norm``: q and k l2-normalised in
the kernel.  Values come from the seed.

``exact`` draws values for which any order of fp32 math is exact (no decay: g = 0; beta 0 or 1; each key
one-hot or zero; v and the pool multiples of 1/4 in [-4, 4]; no l2norm): every stored state is then a pool
or v value, so the pool lives in the arena at byte ``offset``, slots ``slot_pad`` elements of padding apart
(``slot_stride``), and is compared byte for byte there (slot padding, pools past 2 GiB, sparse past 256 MiB);
``out`` stays a tensor compared within the bound.  Otherwise the pool is a tensor of its own (no offset, no
padding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import FLOAT_DTYPES, INT32, UPDATE_PADS, boolean, check_int, index_table, one_of, optional_int_list
from .prefill import PrefillCase

DTYPES = FLOAT_DTYPES
LAYOUTS = ("vk", "kv")
PADS = UPDATE_PADS


@dataclass(frozen=True)
class DeltaPrefillCase(PrefillCase):
    contract: ClassVar[str] = "delta_prefill"
    FIELD_CHECKS: ClassVar[dict] = {
        "act_dtype": one_of("act_dtype", tuple(DTYPES)),
        "layout": one_of("layout", LAYOUTS),
        "heads": lambda v: check_int("heads", v, 1),
        "group": lambda v: check_int("group", v, 1),
        "key_dim": lambda v: check_int("key_dim", v, 1),
        "value_dim": lambda v: check_int("value_dim", v, 1),
        "idx": index_table("idx", "N"),
        "init": optional_int_list("init", 0, INT32 - 1),
        "first": optional_int_list("first", 0, INT32 - 1),
        "last": optional_int_list("last", 0, INT32 - 1),
        "computed": optional_int_list("computed", 0, INT32 - 1),
        "kda": boolean("kda"),
        "beta_per_v": boolean("beta_per_v"),
        "l2norm": boolean("l2norm"),
        "final": boolean("final"),
        "exact": boolean("exact"),
        "slot_pad": lambda v: check_int("slot_pad", v, 0),
    }
    arena_size: int
    dtype: str
    act_dtype: str
    layout: str
    slots: int
    heads: int
    group: int
    key_dim: int
    value_dim: int
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
    pad: int = -1
    kda: bool = False
    beta_per_v: bool = False
    l2norm: bool = False
    final: bool = True
    exact: bool = False
    offset: int = 0
    slot_pad: int = 0
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def value_heads(self) -> int:
        return self.heads * self.group

    @property
    def head_elems(self) -> int:
        return self.key_dim * self.value_dim

    @property
    def slot_bytes(self) -> int:
        return self.value_heads * self.head_elems * self.elem

    @property
    def slot_stride(self) -> int:
        """Bytes from one slot to the next (in the arena: the slot and its padding)."""
        return self.slot_bytes + self.slot_pad * self.elem

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer sequences and tokens, smaller heads, fewer columns, no extras, low slots."""
        return self._size(self.value_heads * self.head_elems,
                          self.kda + self.beta_per_v + self.l2norm + (not self.final)
                          + (self.act_dtype != "float32") + (self.layout != "vk") + self.exact)

    def describe(self) -> str:
        kinds = "".join(f" {name}" for name, on in (("kda", self.kda), ("beta[V]", self.beta_per_v),
                                                   ("l2norm", self.l2norm)) if on)
        final = "" if self.final else "; no final state asked for"
        if self.exact:
            final += f"; exact (in the arena at +{self.offset}, stride {self.slot_stride} B)"
        return (f"pool {self.slots}x{self.value_heads}x{self.value_dim}x{self.key_dim} (HV x V x K) {self.dtype} "
                f"{self.layout}; H {self.heads}, acts {self.act_dtype}{kinds}{self._apc_note()}{final}; "
                f"{self._rows_note()}; pad {self.pad}{self._perturb_note()}")

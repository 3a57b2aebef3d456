"""The `delta_update` case (docs/contracts.md#delta_update): one gated-delta-rule (GDN, or KDA with a per-K decay)
decode or spec-decode step over a state pool.

The pool is a tensor ``[slots, HV, V, K]`` (``layout`` ``vk``, V-major) or ``[slots, HV, K, V]`` (``kv``)
of ``dtype``, not arena bytes: its values are float math, compared within a tolerance (``Output``),
which the arena's exact byte compare cannot do; ``arena_size`` is a token arena the target ignores.
Sequence n has ``lens[n]`` packed tokens (``cu_seqlens``), ``heads`` query/key heads of ``key_dim`` and
``heads * group`` value heads of ``value_dim``; q, k, v, g, beta and the output are ``act_dtype``.  It
reads and stores slots through ``idx[n]`` (``C`` columns; ``idx_2d`` False passes ``[N]``), rows of
the index array ``idx_stride`` elements apart; spec decode: ``nacc``.  ``kda``: the decay is per K;
``beta_per_v``: beta ``[T, HV, V]``; ``l2norm``: q and k l2-normalised in the kernel.  The per-step
buffer (SGLang's ``intermediate_states_buffer``, another tensor): ``inter_rows`` rows of ``cache_steps``
steps (0 rows: none), sequence n caching into row ``inter_idx[n]`` (negative: none).  Values
come from the seed; the pool's from the arena.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import (FLOAT_DTYPES, INT32, UPDATE_PADS, boolean, check_int, index_table, one_of,
                                       optional_int_list)
from mambafuzz.cases.updates import UpdateCase

DTYPES = FLOAT_DTYPES
LAYOUTS = ("vk", "kv")
PADS = UPDATE_PADS


@dataclass(frozen=True)
class DeltaUpdateCase(UpdateCase):
    contract: ClassVar[str] = "delta_update"
    FIELD_CHECKS: ClassVar[dict] = {
        "act_dtype": one_of("act_dtype", tuple(DTYPES)),
        "layout": one_of("layout", LAYOUTS),
        "heads": lambda v: check_int("heads", v, 1),
        "group": lambda v: check_int("group", v, 1),
        "key_dim": lambda v: check_int("key_dim", v, 1),
        "value_dim": lambda v: check_int("value_dim", v, 1),
        "idx": index_table("idx", "N"),
        "kda": boolean("kda"),
        "beta_per_v": boolean("beta_per_v"),
        "l2norm": boolean("l2norm"),
        "inter_rows": lambda v: check_int("inter_rows", v, 0),
        "cache_steps": lambda v: check_int("cache_steps", v, 0),
        "inter_idx": optional_int_list("inter_idx", -INT32, INT32 - 1),
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
    idx_2d: bool = False
    idx_stride: int = 1
    nacc: tuple[int, ...] | None = None
    pad: int = -1
    kda: bool = False
    beta_per_v: bool = False
    l2norm: bool = False
    inter_rows: int = 0
    cache_steps: int = 0
    inter_idx: tuple[int, ...] | None = None
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
    def size(self) -> tuple:
        """Shrinks towards fewer sequences and tokens, smaller heads, low slot numbers, no extras."""
        extras = (self.idx_2d + (self.nacc is not None) + self.kda + self.beta_per_v + self.l2norm
                  + (self.inter_rows > 0) + (self.perturb is not None) + (self.dtype != "float32")
                  + (self.act_dtype != "float32") + (self.layout != "vk"))
        layout = (self.idx_stride - self.cols
                  + sum(abs(v) for row in self.idx for v in row) + self.slots + self.inter_rows
                  + self.cache_steps + self.arena_size)
        return (len(self.lens), sum(self.lens), self.value_heads * self.head_elems, self.cols, extras, layout,
                self.seed != 0)

    def describe(self) -> str:
        spec = f", nacc {list(self.nacc)}" if self.nacc is not None else ""
        rows = ", ".join(f"{list(r) if len(r) > 1 else r[0]}" for r in self.idx[:6])
        more = f", +{len(self.idx) - 6} more" if len(self.idx) > 6 else ""
        buf = (f"; per-step buffer {self.inter_rows}x{self.cache_steps} rows {list(self.inter_idx or ())}"
               if self.inter_rows else "")
        kinds = "".join(f" {name}" for name, on in (("kda", self.kda), ("beta[V]", self.beta_per_v),
                                                   ("l2norm", self.l2norm)) if on)
        return (f"pool {self.slots}x{self.value_heads}x{self.value_dim}x{self.key_dim} (HV x V x K) {self.dtype} "
                f"{self.layout}; H {self.heads}, acts "
                f"{self.act_dtype}{kinds}; lens {list(self.lens)}; idx {rows}{more}{spec}{buf}; pad {self.pad}"
                f"{self._perturb_note()}")

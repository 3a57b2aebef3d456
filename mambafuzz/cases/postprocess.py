"""The `postprocess` case (docs/contracts.md#postprocess): per request the align-mode inputs, and the pools."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import check_int, check_int_list
from mambafuzz.cases.pools import PoolCase

REQUEST_FIELDS = ("num_computed", "num_scheduled", "num_draft", "num_accepted", "state_idx")


@dataclass(frozen=True)
class PostprocessCase(PoolCase):
    """The align-mode decision (docs/contracts.md#postprocess) plus the copies, per request."""

    contract: ClassVar[str] = "postprocess"
    FIELD_CHECKS: ClassVar[dict] = {"block_size": lambda v: check_int("block_size", v, 1),
                                    **{name: (lambda v, name=name: check_int_list(name, v))
                                       for name in REQUEST_FIELDS}}
    block_size: int = 1
    num_computed: tuple[int, ...] = ()
    num_scheduled: tuple[int, ...] = ()
    num_draft: tuple[int, ...] = ()
    num_accepted: tuple[int, ...] = ()
    state_idx: tuple[int, ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def size(self) -> tuple:
        """Like StateCopyCase.size: (requests, states, data bytes, tiles, layout, data seed not 0)."""
        data = sum(p.data_bytes for p in self.pools)
        return (len(self.num_computed), len(self.pools), data, self.num_tiles, self._layout_size(), self.seed != 0)

    def describe(self) -> str:
        reqs = ", ".join(
            f"r{i}: comp {c} sched {s} draft {d} acc {a} idx {x}" for i, (c, s, d, a, x) in enumerate(
                zip(self.num_computed, self.num_scheduled, self.num_draft, self.num_accepted, self.state_idx)))
        return (f"{self._pool_summary()}, block_size {self.block_size}, tiles {self.num_tiles}; {reqs}"
                f"{self._perturb_note()}")

"""Contract `postprocess` (SPEC 2.5): the align-mode decision after a spec-decode step, then the copies.

Per request the target decides from (num_computed, num_scheduled, num_draft,
num_accepted, state_idx) whether and where to copy every state, copies them,
and sets ``num_accepted`` to 1 where source and destination column are equal.
``num_accepted`` is updated in place: the oracle expects both the bytes and it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases import check_int, check_int_list

from .base import Argument, Image, Prepared
from .pools import META_ARGUMENTS, TILES, PoolCase, PoolContract, int32

REQUEST_FIELDS = ("num_computed", "num_scheduled", "num_draft", "num_accepted", "state_idx")


@dataclass(frozen=True)
class PostprocessCase(PoolCase):
    """SPEC 2.5's decision plus the copies, per request."""

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


class Postprocess(PoolContract):
    name = "postprocess"
    case_type = PostprocessCase
    summary = "align-mode decision per request, then every state copied; num_accepted updated in place"
    arguments = META_ARGUMENTS + tuple(
        Argument(n, "int32", "[R]", meaning) for n, meaning in (
            ("num_computed", "tokens computed before the step"), ("num_scheduled", "tokens scheduled this step"),
            ("num_draft", "draft tokens of the step"),
            ("num_accepted", "accepted tokens (>= 1); set to 1 in place where src_col == dst_col"),
            ("state_idx", "the running block column")))
    options = (Argument("block_size", "int", "", "tokens per block"), TILES)
    request_fields = REQUEST_FIELDS

    def strategy(self, profile, **_):
        from mambafuzz.strategies.pools import postprocess_cases
        return postprocess_cases(profile)

    def prepare(self, case: PostprocessCase, image: Image, snapshot: np.ndarray, base: int, device: str) -> Prepared:
        _, pools, tables = image.plan
        expected, expected_accepted = oracle.expect_postprocess(
            snapshot, pools, tables, case.num_computed, case.num_scheduled, case.num_draft, case.num_accepted,
            case.state_idx, case.block_size)
        args, kwargs = self.common_args(case, image, base, device)
        args.update({n: int32(getattr(case, n), device) for n in REQUEST_FIELDS})
        kwargs["block_size"] = case.block_size
        return Prepared(args, kwargs, expected, out_name="num_accepted", out_expected=expected_accepted)


CONTRACT = Postprocess()

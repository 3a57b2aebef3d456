"""Contract `postprocess` (SPEC 2.5): the align-mode decision after a spec-decode step, then the copies.

Per request the target decides from (num_computed, num_scheduled, num_draft,
num_accepted, state_idx) whether and where to copy every state, copies them,
and sets ``num_accepted`` to 1 where source and destination column are equal.
``num_accepted`` is updated in place: the oracle expects both the bytes and it.
"""
from __future__ import annotations


import numpy as np

from mambafuzz import oracle

from .base import Argument, Image, Output, Prepared
from .pools import META_ARGUMENTS, TILES, PoolContract, int32
from mambafuzz.contracts.cases.postprocess import REQUEST_FIELDS, PostprocessCase

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
        accepted = Output("num_accepted", np.asarray(expected_accepted, dtype=np.int32), what="request {i}")
        return Prepared(args, kwargs, expected, outputs=(accepted,))


CONTRACT = Postprocess()

"""Contract `postprocess` (docs/contracts.md#postprocess): the align-mode decision after a spec-decode step, then the
copies.

Per request the target decides from (num_computed, num_scheduled, num_draft,
num_accepted, state_idx) whether and where to copy every state, copies them,
and sets ``num_accepted`` to 1 where source and destination column are equal.
``num_accepted`` is updated in place: the oracle expects both the bytes and it.
"""
from __future__ import annotations


import numpy as np

from mambafuzz import oracle

from .base import Argument, Image, Output, Prepared
from .features import joined
from .pools import META_ARGUMENTS, TILES, PoolContract, int32
from mambafuzz.cases.postprocess import REQUEST_FIELDS, PostprocessCase

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
        from mambafuzz.strategies.pools import postprocess_cases  # deferred: Hypothesis loads with the first strategy, not with the CLI's parser
        return postprocess_cases(profile)

    def prepare(self, case: PostprocessCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        base = arena.data_ptr()
        _, pools, tables = image.plan
        expected, expected_accepted = oracle.expect_postprocess(
            snapshot, pools, tables, case.num_computed, case.num_scheduled, case.num_draft, case.num_accepted,
            case.state_idx, case.block_size)
        args, kwargs = self.common_args(case, image, base, device)
        args.update({n: int32(getattr(case, n), device) for n in REQUEST_FIELDS})
        kwargs["block_size"] = case.block_size
        accepted = Output("num_accepted", np.asarray(expected_accepted, dtype=np.int32), what="request {i}")
        return Prepared(args, kwargs, expected, outputs=(accepted,))

    # -- coverage: the shared pool features, for the requests that copy, and each request's decision
    buckets = {**PoolContract.buckets, "decision": ("no-copy", "copy", "self-skip")}

    def _decide(self, case: PostprocessCase):
        return oracle.decide(case.num_computed, case.num_scheduled, case.num_draft, case.num_accepted,
                             case.state_idx, case.block_size)

    def copying_requests(self, case: PostprocessCase) -> list[tuple[int, int, int, int]]:
        d = self._decide(case)
        return [(r, int(d.src_col[r]), int(d.dst_col[r]), int(d.bias[r])) for r in range(len(d)) if d.do_copy[r]]

    def features(self, case: PostprocessCase) -> dict[str, str]:
        out = super().features(case)
        d = self._decide(case)
        out["decision"] = joined(["self-skip" if d.self_copy_skip[r] else "copy" if d.do_copy[r] else "no-copy"
                                  for r in range(len(d))], self.buckets["decision"])
        return out

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        out = super().expected_features(options)
        out["decision"] = self.buckets["decision"]
        out["tiles"] = ("1", "2-3", "4-15", ">=16")
        return out


CONTRACT = Postprocess()

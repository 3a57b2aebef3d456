"""Contract `slot_fork` (docs/contracts.md#slot_fork): slot src_idx[i], as it was, goes to each of dst_idx[i, :] in
every layer.

The fork of a request's state into N children (parallel sampling, beam
search).  A child may be another pair's parent (a chain), or its own parent (a
self-copy); two pairs writing one slot from different sources make the batch
ill-posed.  Shared machinery in ``slots.py``.
"""
from __future__ import annotations



from .base import Argument
from .features import COUNT_EDGES, COUNTS, bucket
from .slots import META_ARGUMENT, SRC_ARGUMENT, SlotContract
from mambafuzz.cases.slot_fork import SlotForkCase


class SlotFork(SlotContract):
    name = "slot_fork"
    case_type = SlotForkCase
    summary = "slot src_idx[i] as it was goes to every dst_idx[i, :] in every layer (a child may be a parent)"
    arguments = (META_ARGUMENT, SRC_ARGUMENT,
                 Argument("dst_idx", "int32 or int64 (as src_idx)", "[P, N]", "the N destination slots of pair i"))
    forked = True

    def _dst_field(self, children) -> tuple:
        return tuple(tuple(row) for row in children)

    # -- coverage: the shared slot features and how many children a pair has (at most)
    buckets = {**SlotContract.buckets, "fanout": COUNTS}

    def features(self, case: SlotForkCase) -> dict[str, str]:
        out = super().features(case)
        out["fanout"] = bucket(max((len(row) for row in case.children), default=0), COUNT_EDGES)
        return out

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        return {**super().expected_features(options), "fanout": ("1", "2-3", "4-15")}


CONTRACT = SlotFork()

"""Case-level reduction after Hypothesis has shrunk the choice sequence.

Hypothesis shrinks the draws; removing one whole row, request or state from a
case is a step it cannot always take (deleting a draw re-lays out what follows).
These candidates are always valid cases when the input was: a row or request
removed keeps every other offset; a state removed keeps its pool's bytes as
plain, untouched memory.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from .cases import BatchCopyCase, Case, PostprocessCase, StateCopyCase

_REQUEST_FIELDS = {
    StateCopyCase: ("src_cols", "dst_cols", "biases"),
    PostprocessCase: ("num_computed", "num_scheduled", "num_draft", "num_accepted", "state_idx"),
}


def _without(items: tuple, i: int) -> tuple:
    return items[:i] + items[i + 1:]


def candidates(case: Case) -> Iterator[Case]:
    """Strictly smaller cases, biggest cuts first (the race amplification first of all)."""
    if getattr(case, "perturb", None) is not None:
        yield dataclasses.replace(case, perturb=None)
    if isinstance(case, BatchCopyCase):
        for i in range(len(case.copies)):
            if len(case.copies) > 1:
                yield dataclasses.replace(case, copies=_without(case.copies, i))
        for i, (src, dst, n) in enumerate(case.copies):
            if abs(src - dst) > 1:  # a smaller shift, inside the row's own footprint
                for src2 in (dst + (src - dst) // 2, src - (1 if src > dst else -1)):
                    yield dataclasses.replace(case, copies=case.copies[:i] + ((src2, dst, n),) + case.copies[i + 1:])
            if n > 1:  # fewer bytes in a row, same overlap geometry
                for smaller in sorted({n // 2, n - 1, min(n - 1, 16)}, reverse=False):
                    if 0 < smaller < n:
                        yield dataclasses.replace(case, copies=case.copies[:i] + ((src, dst, smaller),)
                                                  + case.copies[i + 1:])
        return
    requests = case.num_requests
    if requests > 1:
        for r in range(requests):
            changes = {f: _without(getattr(case, f), r) for f in _REQUEST_FIELDS[type(case)]}
            changes["block_tables"] = tuple(_without(table, r) for table in case.block_tables)
            yield dataclasses.replace(case, **changes)
    if len(case.pools) > 1:
        for s in range(len(case.pools)):
            yield dataclasses.replace(case, pools=_without(case.pools, s))
    if case.num_tiles > 1:
        yield dataclasses.replace(case, num_tiles=1)


def reduce_case(case: Case, still_fails: Callable[[Case], bool], budget_ok: Callable[[], bool]) -> tuple[Case, int]:
    """Greedy: take any smaller candidate that still fails, until none does."""
    tried = 0
    progress = True
    while progress and budget_ok():
        progress = False
        for smaller in candidates(case):
            if not budget_ok():
                break
            tried += 1
            if still_fails(smaller):
                case, progress = smaller, True
                break
    return case, tried

"""Case-level reduction after Hypothesis has shrunk the choice sequence.

Hypothesis shrinks the draws; some cuts it cannot take, because deleting or
lowering a draw re-lays out everything after it: removing one whole row,
request or state; moving rows and pools down towards byte 0 and cutting the
arena to what they use (the strategies leave 64-byte gaps); trying 2, half or
n - 1 tiles rather than only 1.  These candidates do that.  Each is a valid
case when the input was (checked here with the oracle's cheap geometry
checks) and strictly smaller by ``Case.size``, so the fuzz loop keeps it.

The cuts themselves are each contract's (``Contract.candidates`` and
``valid``); this module adds the ones every case has (no perturbation, the
canonical fill seed) and the greedy loop.

``reduce_case`` is greedy: it takes the first candidate the caller's
``still_fails`` accepts and starts again from it.  The caller decides what
"still fails" means (the fuzz loop asks for wrong bytes again when the
original failure had them, and for a hazard that can change bytes once one
was seen: ``same_value_only``).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Iterator

from mambafuzz import contracts
from mambafuzz.cases import Case


def candidates(case: Case, options: dict | None = None) -> Iterator[Case]:
    """Valid, strictly smaller cases (by ``Case.size``), biggest cuts first (the race amplification
    first of all), each one the contract's strategy could draw under `options` (``Contract.admits``:
    a kernel narrowed to what it takes is never handed a case outside it)."""
    contract = contracts.of(case)
    if getattr(case, "perturb", None) is not None:
        yield dataclasses.replace(case, perturb=None)
    raw = contract.candidates(case)
    if case.seed != 0:  # the canonical fill last: the same geometry found twice is one crash file
        raw = itertools.chain(raw, [case.with_seed(0)])
    seen = {case}
    for smaller in raw:
        if smaller in seen or not contract.valid(smaller) or not contract.admits(smaller, options or {}):
            continue  # a cut that changed nothing (already compact), broke the geometry, or left the narrowing
        seen.add(smaller)
        yield smaller


def same_value_only(verdict) -> bool:
    """Whether `verdict` failed by hazards alone, each of whose stores wrote the bytes already there
    (``same_value``): nothing a reader could see change.  Such a failure is weaker evidence than any
    other, so shrinking never trades another failure for it."""
    if not verdict.hazards or verdict.failures or verdict.fault or verdict.exception \
            or getattr(verdict, "compile", None) is not None:
        return False
    return all(h.to_json().get("same_value") for h in verdict.hazards)


def reduce_case(case: Case, still_fails: Callable[[Case], bool], budget_ok: Callable[[], bool],
                options: dict | None = None) -> tuple[Case, int]:
    """Greedy: take any smaller candidate that still fails, until none does (within `options`)."""
    tried = 0
    progress = True
    while progress and budget_ok():
        progress = False
        for smaller in candidates(case, options):
            if not budget_ok():
                break
            tried += 1
            if still_fails(smaller):
                case, progress = smaller, True
                break
    return case, tried

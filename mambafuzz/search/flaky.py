"""A flaky failure judged by k/N: how many repetitions a smaller case gets before it is dropped.

A race on a GPU fails some repetitions of a case, not all: the first failure
showed k0 of N0, a rate p0.  Judged by one batch of N, a smaller candidate is
dropped whenever its batch happens to pass, and shrinking stops early at a big
case (measured on the H200: a 32 MB arena kept for 4 differing bytes).  Here a
candidate runs batches of N until one fails or it has had ``budget(p0)``
repetitions: enough that a candidate still failing at ``THRESHOLD * p0`` shows
at least one failure with 95% probability (n = ln 20 / (THRESHOLD p0)).  A
candidate that passes them all fails, at 95% confidence, less often than
that, so the reduction keeps the rate above the threshold; ``rate_upper_bound``
gives the bound a report prints.

Pure: the caller passes ``run_batch`` (one batch of repetitions -> Verdict),
so this is tested with fakes.
"""
from __future__ import annotations

import math
from typing import Callable

from mambafuzz.judge.engine import Verdict

THRESHOLD = 0.1          # a kept candidate fails at least this fraction of the first failure's rate (at 95%)
CONFIDENCE = 0.95
MAX_BATCHES = 32         # never more than this many batches for one candidate, however rare the failure
CONFIRM_REPS = 200       # repetitions (at least) that measure a shrunk case's rate for the report


def budget(p0: float, batch: int, *, threshold: float = THRESHOLD, confidence: float = CONFIDENCE,
           max_batches: int = MAX_BATCHES) -> int:
    """Repetitions a candidate gets at most: ln(1/(1-c)) / (threshold p0), in whole batches."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if not 0.0 < p0 <= 1.0:
        return batch
    need = math.log(1.0 / (1.0 - confidence)) / (threshold * p0)
    batches = min(max_batches, max(1, math.ceil(need / batch)))
    return batches * batch


def merge(total: Verdict | None, part: Verdict) -> Verdict:
    """Two batches of one case as one verdict: counts added, the first evidence kept."""
    if total is None:
        return part
    total.reps += part.reps
    total.failures += part.failures
    total.mismatch = total.mismatch or part.mismatch
    total.hazards = total.hazards or part.hazards
    total.exception = total.exception or part.exception
    if part.fault and not total.fault:
        total.fault, total.fault_kind = part.fault, part.fault_kind
    return total


def _batches(run_batch: Callable[[], Verdict], done: Callable[[Verdict], bool],
             stop: Callable[[], bool]) -> Verdict:
    """Batches merged into one verdict until `done(total)`, a fault, or `stop()` (a time limit)."""
    total: Verdict | None = None
    while True:
        total = merge(total, run_batch())
        if done(total) or total.fault or stop():
            return total


def judge(run_batch: Callable[[], Verdict], p0: float, batch: int, *,
          stop: Callable[[], bool] = lambda: False) -> Verdict:
    """Batches until one fails, `budget(p0)` repetitions have passed, or `stop()` says so."""
    limit = budget(p0, batch)
    return _batches(run_batch, lambda total: total.failed or total.reps >= limit, stop)


def measure(run_batch: Callable[[], Verdict], batch: int, reps: int = CONFIRM_REPS, *,
            stop: Callable[[], bool] = lambda: False) -> Verdict:
    """At least `reps` repetitions (whole batches), all counted: a rate for the report, not a yes/no."""
    return _batches(run_batch, lambda total: total.reps >= max(reps, batch), stop)

"""The fuzz loop: Hypothesis draws cases, the engine judges them, failures shrink.

Each Hypothesis example runs all N repetitions of one case, so shrinking sees one
verdict per example.  Generation runs in short chunks (one Hypothesis run each,
new seed each) so that a time budget, a live view and Ctrl-C all act between
chunks.  Shrinking is bounded by its own budget; when a failure stops
reproducing while shrinking (a race that showed 2/100 once), the smallest
failing case seen is kept with its rate instead of aborting.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable

import strategies

from . import crashes
from .cases import Case
from .engine import Verdict, run_case
from .errors import CaseError, UsageError
from .reduce import reduce_case

CHUNK = 20


class _CaseFailed(Exception):
    """Raised inside a Hypothesis example so that Hypothesis shrinks the case."""


@dataclass
class TargetReport:
    target: str
    contract: str
    examples: int = 0
    reps: int = 0
    failed_reps: int = 0
    seconds: float = 0.0
    finding: crashes.Finding | None = None
    written: bool = False
    interrupted: bool = False
    context_lost: bool = False  # a CUDA fault broke the context: nothing more can run in this process
    error: str | None = None
    rejected: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if self.finding:
            return "finding"
        return "interrupted" if self.interrupted else "clean"


@dataclass
class FuzzOptions:
    device: str = "cpu"
    mode: str = "race"
    reps: int = 1
    max_examples: int = 100
    time_budget: float | None = None
    shrink_budget: float = 60.0
    seed: int | None = None
    database: ExampleDatabase | str | None = ".mambafuzz/examples"
    crashes_dir: Path | None = Path("crashes")
    profile: strategies.Profile = strategies.CPU


def _seed_hypothesis(seed: int) -> None:
    """Seed Hypothesis's draws without `@seed`, which would switch the example database off."""
    import hypothesis.core

    local = getattr(hypothesis.core, "threadlocal", None)
    if local is not None and hasattr(local, "_hypothesis_global_random"):
        local._hypothesis_global_random = random.Random(seed)


def check_redis(url: str) -> None:
    """Fail early, in one line, when a Redis example database does not answer."""
    try:
        import redis
    except ImportError:
        raise UsageError("a redis:// database needs the 'redis' package (pip install 'mambafuzz[redis]')") from None
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the same answer for the user
        raise UsageError(f"Redis database {url} does not answer: {exc}") from None


def _database(db) -> ExampleDatabase | None:
    if db is None or isinstance(db, ExampleDatabase):
        return db
    if str(db).startswith("redis://"):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(redis.Redis.from_url(str(db)))
    return DirectoryBasedExampleDatabase(str(db))


def _keep(state: dict, case: Case, verdict: Verdict) -> None:
    """Keep the smallest failing case seen (ties go to the newer, simpler draw)."""
    best = state["best"]
    if best is None or case.size <= best[0].size:
        state["best"] = (case, verdict)


def _reduce(target, opts: FuzzOptions, state: dict) -> None:
    """Case-level reduction of the shrunk failure, inside the same shrink budget."""
    def still_fails(case: Case) -> bool:
        try:
            verdict = run_case(target.fn, case, opts.device, reps=opts.reps, mode=opts.mode)
        except CaseError:
            return False
        if verdict.failed:
            _keep(state, case, verdict)
        return verdict.failed

    case, tried = reduce_case(state["best"][0], still_fails,
                              lambda: time.monotonic() - state["first_at"] <= opts.shrink_budget)
    state["shrinks"] += tried


def fuzz_target(target, opts: FuzzOptions, progress: Callable[[TargetReport], None] | None = None,
                before_case: Callable[[Case], None] | None = None) -> TargetReport:
    """Fuzz one target until a finding, the example count, or the time budget."""
    report = TargetReport(target.name, target.contract)
    strategy = strategies.for_contract(target.contract, profile=opts.profile, overlap=target.overlap)
    start = time.monotonic()
    deadline = start + opts.time_budget if opts.time_budget else None
    state: dict = {"best": None, "first_at": None, "first_examples": 0, "shrinks": 0}

    def body(case: Case) -> None:
        now = time.monotonic()
        if report.context_lost:
            return  # every later launch would fault too: keep the case that broke the context
        if state["best"] is not None:
            if now - state["first_at"] > opts.shrink_budget:
                return  # out of shrink budget: report the smallest failure so far
            state["shrinks"] += 1
        elif deadline is not None and now > deadline:
            assume(False)  # out of time: let Hypothesis run out of examples quietly
        if before_case is not None:
            before_case(case)
        try:
            verdict = run_case(target.fn, case, opts.device, reps=opts.reps, mode=opts.mode)
        except CaseError as exc:  # the strategy drew something the oracle rejects: our bug, say so
            report.rejected.append(f"{case.describe()}: {exc}")
            assume(False)
        report.examples += 1
        report.reps += verdict.reps
        report.failed_reps += verdict.failures
        report.seconds = time.monotonic() - start
        if progress:
            progress(report)
        if verdict.failed:
            if opts.device == "cuda" and verdict.kind == "fault":
                report.context_lost = True
            first = state["best"] is None
            if first:
                state["first_at"] = time.monotonic()
                state["first_examples"] = report.examples
            _keep(state, case, verdict)
            if first and not report.context_lost:  # big case-level cuts first; Hypothesis then shrinks the draws
                _reduce(target, opts, state)
            raise _CaseFailed(verdict.summary())

    chunk_index = 0
    try:
        while report.examples < opts.max_examples and state["best"] is None:
            if deadline is not None and time.monotonic() > deadline:
                break
            n = min(CHUNK, opts.max_examples - report.examples)
            test = given(strategy)(body)
            test.hypothesis.inner_test._hypothesis_internal_add_digest = (
                f"{target.name}|{opts.device}|{opts.mode}".encode())
            test = settings(database=_database(opts.database), max_examples=n, deadline=None, derandomize=False,
                            suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                            report_multiple_bugs=False, print_blob=False,
                            phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))(test)
            if opts.seed is not None:
                _seed_hypothesis(opts.seed * 1_000_003 + chunk_index)
            chunk_index += 1
            before = report.examples
            try:
                test()
            except (_CaseFailed, Flaky):
                pass
            except Unsatisfiable:
                pass
            if report.examples == before and state["best"] is None:
                break  # the strategy is exhausted (or every draw was rejected)
    except KeyboardInterrupt:
        report.interrupted = True
    if state["best"] is not None and not (report.interrupted or report.context_lost):
        try:  # again, on what Hypothesis shrank to
            _reduce(target, opts, state)
        except KeyboardInterrupt:
            report.interrupted = True
    report.seconds = time.monotonic() - start
    if state["best"] is not None:
        case, verdict = state["best"]
        report.finding = crashes.Finding(
            target=target.name, contract=target.contract, device=opts.device, mode=opts.mode, case=case,
            verdict=verdict, examples_to_first=state["first_examples"],
            seconds_to_first=state["first_at"] - start, shrink_examples=state["shrinks"])
        if opts.crashes_dir is not None:
            _, report.written = crashes.save(report.finding, opts.crashes_dir)
    return report

"""The fuzz loop: Hypothesis draws cases, the engine judges them, failures shrink.

Each Hypothesis example runs all N repetitions of one case, so shrinking sees one
verdict per example.  Generation runs in short chunks (one Hypothesis run each,
new seed each) so that a time budget, a live view and a stop signal all act
between examples.

A failure is on disk the moment it is seen (``_Best``), unshrunk; every smaller
failing case then replaces the file (the new one is written before the old one
goes), so a signal or a kill at any point leaves the best case so far.  When a
failure stops reproducing while shrinking (a race that showed 2/100 once), the
smallest failing case seen is kept with its rate.  The file is rewritten as
the count of shrink examples moves on and at the end, when it also says
whether the case is minimal (the last case-level reduction reached a fixpoint)
or why it may not be (interrupted, a budget ran out).

A case the target rejects (``mambafuzz.reject``) is counted by its reason and
is not a valid example (Hypothesis draws another); while shrinking it is not a
failure.  Too few valid examples stay inconclusive.

Every report says why its target stopped (``STOPS``) and what that means
(``TargetReport.status``); ``exits.exit_code`` turns statuses into the
process's exit code.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, Verbosity, assume, example, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable

from mambafuzz import strategies

from mambafuzz import findings
from mambafuzz.search import features
from mambafuzz.search import flaky
from mambafuzz.control import interrupt
from mambafuzz.control.clock import Deadline
from mambafuzz import contracts
from mambafuzz.contracts import case_from_json
from mambafuzz.cases import Case
from mambafuzz.judge.engine import Verdict, run_case
from mambafuzz.errors import CaseError, Inconclusive, InternalError, Rejected, UsageError
from mambafuzz.search import cross
from mambafuzz.search.reduce import reduce_case, same_value_only

CHUNK = 20
SECOND_TURN_CHUNKS = 1_000_003  # a second turn's first chunk index: its --seed draws are new ones
REWRITE_EVERY = 2.0  # seconds between rewrites of a crash file while its case shrinks (its counts)

# Why a target's run ended.
STOPS = ("max-examples", "time", "exhausted", "finding", "interrupted", "inconclusive", "internal-error",
         "not-run", "fleet")  # fleet: a campaign ended the turn (another worker finished the target)


class _CaseFailed(Exception):
    """Raised inside a Hypothesis example so that Hypothesis shrinks the case."""


class _ShrinkOver(BaseException):
    """Leave Hypothesis's shrinker at once: the shrink budget is spent and the smallest failure so far
    stands.  (Passing every later candidate instead let the shrinker try thousands of them, each
    drawn from the strategy: one zoo row shrank 35 s past its share.)"""


class _Stop(BaseException):
    """Leave the Hypothesis run at once (not a failure of the example): why, and a one-line detail."""

    def __init__(self, stop: str, detail: str | None = None):
        super().__init__(stop)
        self.stop, self.detail = stop, detail


@dataclass
class TargetReport:
    target: str
    contract: str
    examples: int = 0
    reps: int = 0
    failed_reps: int = 0
    seconds: float = 0.0
    finding: findings.Finding | None = None
    written: bool = False
    stop: str = "not-run"          # one of STOPS
    detail: str | None = None      # one line: why inconclusive, internal error or not run
    interrupted: bool = False
    context_lost: bool = False     # a CUDA fault broke the context: nothing more can run in this process
    rejected: list[str] = field(default_factory=list)
    min_examples: int = 1          # fewer valid examples than this is not a clean run
    finished: bool = False         # the target's run has ended (the live view prints it once)
    uninstrumented: dict[str, str] = field(default_factory=dict)  # user kernels run without warp delays: why
    options: dict[str, str] = field(default_factory=dict)  # its contract's options away from their defaults
    tally: features.Tally = field(default_factory=features.Tally)  # coverage, race map, examples over time

    @property
    def status(self) -> str:
        """finding | clean | inconclusive | interrupted (what the exit code is made from)."""
        if self.finding:
            return "finding"
        if self.interrupted:
            return "interrupted"
        if self.stop in ("inconclusive", "internal-error", "not-run") or self.examples < self.min_examples:
            return "inconclusive"
        return "clean"

    @property
    def why(self) -> str:
        """One line for the report: the detail, or why a run with few examples is not clean."""
        if self.detail:
            return self.detail
        if self.status == "inconclusive":
            first = f"; first rejection: {self.rejected[0]}" if self.rejected else ""
            declined = self.tally.rejected
            notes = [f"{len(self.rejected)} drawn case(s) rejected{first}"] if self.rejected or not declined else []
            if declined:  # mambafuzz.reject: the target's own words, the most frequent reason
                reason, n = self.tally.reasons()[0]
                more = f", {declined - n} for other reasons" if declined > n else ""
                notes.append(f"the target rejected {declined}: {reason} ({n}){more}")
            return f"only {self.examples} valid example(s), {self.min_examples} needed ({'; '.join(notes)})"
        return ""

    def to_json(self) -> dict:
        """One target's result, as in every JSON report and the session's messages and resume state.

        status, why and the first-failure fields are derived (for readers); from_json ignores them.
        """
        return {"target": self.target, "contract": self.contract, "status": self.status, "stop": self.stop,
                "why": self.why or None, "detail": self.detail, "examples": self.examples, "reps": self.reps,
                "failed_reps": self.failed_reps, "seconds": round(self.seconds, 3),
                "min_examples": self.min_examples, "interrupted": self.interrupted, "written": self.written,
                "rejected": list(self.rejected), "uninstrumented": dict(self.uninstrumented),
                "options": dict(self.options), **self.first_failure(),
                "finding": self.finding.to_json() if self.finding is not None else None, **self.tally.to_json()}

    def first_failure(self) -> dict:
        """When the first failure came (its example number, seconds since the target started, every turn
        counted) and the seconds spent after it, shrinking; nulls without a finding.  The table's split
        cells (``report.tables``) are these numbers."""
        f = self.finding
        if f is None:
            return {"first_failure_example": None, "first_failure_s": None, "shrink_s": None}
        first, seconds = round(f.seconds_to_first, 3), round(self.seconds, 3)  # as to_json has them: the
        # same shrink_s again from a report read back (a difference of unrounded numbers can round apart)
        return {"first_failure_example": f.examples_to_first, "first_failure_s": first,
                "shrink_s": round(max(seconds - first, 0.0), 3)}

    @classmethod
    def from_json(cls, body: dict) -> "TargetReport":
        """The inverse of to_json (KeyError, ValueError or CaseError on a bad body)."""
        finding = body.get("finding")
        return cls(body["target"], body.get("contract", "?"), examples=body.get("examples", 0),
                   reps=body.get("reps", 0), failed_reps=body.get("failed_reps", 0),
                   seconds=body.get("seconds", 0.0), stop=body.get("stop", "not-run"), detail=body.get("detail"),
                   interrupted=body.get("interrupted", False), written=body.get("written", False),
                   rejected=list(body.get("rejected", [])), min_examples=body.get("min_examples", 1),
                   uninstrumented=dict(body.get("uninstrumented") or {}),
                   options={str(k): str(v) for k, v in (body.get("options") or {}).items()},
                   finding=findings.Finding.from_json(finding) if finding else None,
                   tally=features.Tally.from_json(body))


@dataclass
class FuzzOptions:
    device: str = "cpu"
    mode: str = "race"
    reps: int = 1
    max_examples: int = 100
    min_examples: int = 1
    deadline: Deadline = Deadline()      # this target's time, shrinking included (started when it starts)
    shrink_budget: float = 60.0
    seed: int | None = None
    database: ExampleDatabase | str | None = ".mambafuzz/examples"
    crashes_dir: Path | None = Path("crashes")
    profile: strategies.Profile = strategies.CPU
    errors_dir: Path = Path(".mambafuzz/errors")
    contract_options: dict = field(default_factory=dict)  # the contracts' CliOptions by name (layout=, tiles=)
    observe: str | None = None           # a folder for Hypothesis observability records (--observe)
    witness: bool = True                 # a GPU finding is run again under the CPU race recorder (cross.py)
    witness_seconds: float = 60.0        # the CPU child's time, its shrink included
    corpus_key: str = ""                 # more of what keys the target's corpus (a campaign: versions, source)
    turn_over: Callable[[], str | None] | None = None  # asked between examples: a reason to end the turn now
    seeds: tuple = ()                    # cases tried first, before any drawn (a campaign's finds on other boxes)

    @property
    def flaky(self) -> bool:
        """Repetitions judged on the GPU: a failure is a rate, and shrinking judges by k/N (flaky.py)."""
        return self.device == "cuda" and self.reps > 1 and self.mode == "compare"


def _seed_hypothesis(seed: int) -> None:
    """Seed Hypothesis's draws without `@seed`, which would switch the example database off."""
    import hypothesis.core  # deferred: Hypothesis loads with the first strategy, not with the parser

    local = getattr(hypothesis.core, "threadlocal", None)
    if local is not None and hasattr(local, "_hypothesis_global_random"):
        local._hypothesis_global_random = random.Random(seed)


def check_redis(url: str) -> None:
    """Fail early, in one line, when a Redis example database does not answer."""
    try:
        import redis  # deferred: redis is optional (a Redis database or --fleet only)
    except ImportError:
        raise UsageError("a redis:// database needs the 'redis' package (pip install 'mambafuzz[redis]')") from None
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the same answer for the user
        raise UsageError(f"Redis database {url} does not answer: {exc}") from None


def check_database(value) -> None:
    """Fail early, in one line, when a --database folder could not keep examples.

    Hypothesis swallows write errors in its directory database, so a bad path
    would otherwise be accepted and nothing would persist.  'none' and
    redis:// (see check_redis) are not paths.
    """

    if value is None or str(value).lower() == "none" or str(value).startswith("redis://"):
        return
    path = Path(value)
    if Path(os.path.realpath(path)).parts[:2] in (("/", "proc"), ("/", "sys")):
        raise UsageError(f"--database {value}: a folder under /proc or /sys cannot keep examples")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--database {value} is a file, not a folder (give a folder, 'none', or redis://HOST:PORT)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".mambafuzz-write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--database {value} is not a writable folder: {exc.strerror or exc}") from None


def _database(db) -> ExampleDatabase | None:
    if db is None or isinstance(db, ExampleDatabase):
        return db
    if str(db).startswith("redis://"):
        from mambafuzz.search import redisdb  # deferred: the fuzz loop imports Hypothesis, numpy and the engine: only for a run

        return redisdb.database(str(db))
    return DirectoryBasedExampleDatabase(str(db))


def write_error(opts: FuzzOptions, target_name: str, exc: InternalError, case: Case | None = None) -> str:
    """Put an internal error's traceback in a file, with the case it happened on (for a bug report: the
    JSON line loads with ``contracts.case_from_json``); return the one line that points at it."""

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(opts.errors_dir) / f"{stamp}-{re.sub(r'[^A-Za-z0-9._-]', '_', target_name)}.txt"
    text = f"{exc}\n\n{exc.traceback}"
    if case is not None:
        text += (f"\ntarget: {target_name}\ndevice: {opts.device}, mode: {opts.mode}\n"
                 f"case ({case.describe()}):\n{json.dumps(case.to_json(), sort_keys=True)}\n")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError:
        return f"{exc} (traceback could not be written under {opts.errors_dir})"
    return f"{exc} (traceback: {path})"


class _Best:
    """The smallest failing case so far, on disk from the moment it is seen."""

    def __init__(self, target, opts: FuzzOptions, report: TargetReport, start: float,
                 on_finding: Callable[[findings.Finding], None] | None):
        self.target, self.opts, self.report, self.start = target, opts, report, start
        self.on_finding = on_finding
        self.case: Case | None = None
        self.verdict: Verdict | None = None
        self.first_at = 0.0
        self.first_examples = 0
        self.shrinks = 0
        self.path: Path | None = None       # where the best case is on disk
        self.own_path: Path | None = None   # a file this run wrote (a known crash's file is never removed)
        self.found_rate: tuple[int, int] | None = None  # k/N of the first failing case
        self.witness = None                 # cross.Witness: the CPU's word on a GPU finding
        self.not_minimal: str | None = findings.SHRINKING  # why the case may not be minimal (None: it is)
        self.written_at = 0.0               # when this run's own file was last written (monotonic)

    @property
    def p0(self) -> float:
        """The first failure's rate: what a shrinking candidate is judged against (flaky.budget)."""
        if not self.found_rate or not self.found_rate[1]:
            return 1.0
        return self.found_rate[0] / self.found_rate[1]

    def counts(self, verdict: Verdict) -> bool:
        """Whether `verdict` is the same failure: wrong bytes stay required once seen, and so does a
        failure that can change bytes (``reduce.same_value_only``), so that shrinking never trades a
        visible corruption for a same-value store no hardware shows."""
        if not verdict.failed:
            return False
        if self.verdict is not None and self.verdict.compile is not None:  # a compile error stays one
            return verdict.compile is not None
        if self.verdict is not None and self.verdict.kind == "oob":  # an access outside memory stays one
            return verdict.kind == "oob"
        if self.verdict is not None and self.verdict.mismatch is not None:
            return verdict.mismatch is not None
        if self.verdict is not None and not same_value_only(self.verdict):
            return not same_value_only(verdict)
        return True

    def keep(self, case: Case, verdict: Verdict) -> None:
        """Keep (and save) `case` when it is the first failure or smaller than the best so far, or the
        first failure that can change bytes after same-value hazards only (``reduce.same_value_only``)."""
        upgrade = self.verdict is not None and same_value_only(self.verdict) and not same_value_only(verdict)
        if self.case is not None and case.size > self.case.size and not upgrade:
            return
        first = self.case is None
        if first:
            self.first_at = time.monotonic()
            self.first_examples = self.report.examples
            self.found_rate = (verdict.failures, verdict.reps) if self.opts.flaky else None
        self.case, self.verdict = case, verdict
        finding = self.finding()
        self.report.finding = finding
        if self.opts.crashes_dir is None:
            return
        old = self.own_path
        path, written = findings.save(finding, self.opts.crashes_dir)
        self.path = path
        if old is not None and old != path:
            old.unlink(missing_ok=True)  # the smaller case is on disk now
        if written:
            self.own_path = path
            self.written_at = time.monotonic()
        elif old != path:
            self.own_path = None  # the best case is a crash known from before this run
        self.report.written = self.own_path is not None
        if self.on_finding is not None:
            self.on_finding(finding)

    def rewrite(self, every: float = 0.0) -> None:
        """Bring this run's own file up to date (shrink count, minimality), at most once per `every` s.
        A file that cannot be written again keeps what it said when it was written."""
        if self.own_path is None or self.case is None or time.monotonic() - self.written_at < every:
            return
        finding = self.finding()
        self.report.finding = finding
        try:
            findings.save(finding, self.opts.crashes_dir, replace=True)
        except UsageError:
            return
        self.written_at = time.monotonic()

    def finding(self) -> findings.Finding:
        return findings.Finding(
            target=self.target.name, contract=self.target.contract, device=self.opts.device, mode=self.opts.mode,
            case=self.case, verdict=self.verdict, examples_to_first=self.first_examples,
            seconds_to_first=self.first_at - self.start, shrink_examples=self.shrinks, path=self.path,
            found_rate=list(self.found_rate) if self.found_rate else None,
            witness=self.witness.to_json() if self.witness is not None else None, not_minimal=self.not_minimal)


def second_turns(reports: list[TargetReport], deadline: Deadline):
    """The second turns once every target had its first: (index into `reports`, its share of what is
    left), for each target whose share of --time ran out with nothing found (a target caught early
    leaves the rest of its share), while the run has time left.  The caller fuzzes each with ``resume=``
    (and stops on a broken context or an interrupted turn)."""
    if deadline.end is None:
        return
    again = [i for i, r in enumerate(reports)
             if r.stop == "time" and r.finding is None and not r.interrupted and not r.context_lost]
    for j, i in enumerate(again):
        if deadline.over() or interrupt.requested():
            return
        yield i, deadline.share(len(again) - j)


def _note_fault(opts: FuzzOptions, report: TargetReport, verdict: Verdict | None) -> None:
    """A CUDA fault is sticky: after one (or an error while running on cuda) nothing more runs here."""
    if opts.device == "cuda" and (verdict is None or verdict.kind == "fault"):
        report.context_lost = True


def _run(target, opts: FuzzOptions, case: Case, best: _Best | None = None,
         until: Deadline = Deadline()) -> Verdict:
    """One example's verdict; while shrinking a GPU failure (`best` given), batches judged by k/N.
    Nothing is launched past `until` but the first repetition of a batch."""
    one = _batch(target, opts, case, until)
    if best is None or best.case is None or not opts.flaky:
        return one()
    return flaky.judge(one, best.p0, opts.reps, stop=until.over)


def _batch(target, opts: FuzzOptions, case: Case, until: Deadline = Deadline()) -> Callable[[], Verdict]:
    """One batch of `case`: ``opts.reps`` repetitions (fewer when `until` comes first), one verdict."""
    return lambda: run_case(target.fn, case, opts.device, reps=opts.reps, mode=opts.mode, deadline=until)


def _note_instrumented(report: TargetReport, verdict: Verdict) -> None:
    """Keep, once per kernel, why a user kernel ran without the warp delays its case asked for."""
    for kernel in (verdict.instrumented or {}).get("kernels", []):
        if kernel.get("reason"):
            report.uninstrumented.setdefault(kernel.get("name", "?"), kernel["reason"])


def _judge(target, opts: FuzzOptions, case: Case, report: TargetReport, best: _Best | None = None,
           until: Deadline = Deadline()) -> Verdict | None:
    """run_case while shrinking, with None for a case that could not be checked (that is 'passes')."""
    try:
        verdict = _run(target, opts, case, best, until)
        report.tally.add_rates(case, verdict)
    except (CaseError, Rejected):  # a candidate the target declines is simply not a failure
        return None
    except (Inconclusive, InternalError):
        _note_fault(opts, report, None)
        return None
    _note_fault(opts, report, verdict)
    return verdict


def target_options(target, opts: FuzzOptions) -> dict:
    """The contract options `target` is fuzzed under: the run's, its overlap, its own (a zoo row's)."""
    return {**opts.contract_options, "overlap": target.overlap, **getattr(target, "options", {})}


def _reduce(target, opts: FuzzOptions, best: _Best, shrink: Deadline) -> bool:
    """Case-level reduction of the best failure, inside the shrink budget; whether it ran to its end
    (no smaller candidate fails) rather than being cut short."""
    report = best.report
    cut = [False]

    def still_fails(case: Case) -> bool:
        interrupt.check()
        best.shrinks += 1
        best.rewrite(every=REWRITE_EVERY)
        verdict = _judge(target, opts, case, report, best, shrink)
        if verdict is None or report.context_lost or not best.counts(verdict):
            return False
        best.keep(case, verdict)
        return True

    def budget_ok() -> bool:
        ok = not shrink.over() and not report.context_lost
        cut[0] = cut[0] or not ok
        return ok

    reduce_case(best.case, still_fails, budget_ok, options=target_options(target, opts))
    # a GPU candidate judged by k/N gets fewer batches near the end: past it, "passes" is not sure
    return not cut[0] and not (opts.flaky and shrink.over())


def _not_minimal(opts: FuzzOptions, best: _Best, report: TargetReport, deadline: Deadline) -> str:
    """Why shrinking stopped before its end (the final reduction did not run to a fixpoint)."""
    if report.interrupted:
        return "shrinking was interrupted"
    if report.context_lost:
        return "a CUDA fault stopped shrinking"
    if deadline.ends_by(best.first_at + opts.shrink_budget):
        return "the run's time ran out"
    return f"the shrink time ({opts.shrink_budget:g} s) ran out"


def _cross_check(target, opts: FuzzOptions, best: _Best, deadline: Deadline) -> None:
    """A GPU finding: the CPU's witness and deterministic shrink, then the GPU's rate on what is kept.

    The CPU-shrunk case (with the GPU case's perturbation put back: the CPU
    drops it, the GPU needs it) replaces the finding only when the GPU fails
    on it too and it is smaller; either way the kept case's rate is measured
    again over ``flaky.CONFIRM_REPS`` repetitions, so the finding reports the
    rate it was found at (``found_rate``) and the rate of what it hands over.
    """
    report = best.report
    share = deadline.witness(opts.witness_seconds) if opts.witness else None
    if share is not None:
        timeout, shrink_seconds = share
        witness = cross.cpu_witness(target, best.case, timeout=timeout, shrink_seconds=shrink_seconds,
                                    compiled=best.verdict.mismatch if best.verdict is not None else None,
                                    options=target_options(target, opts))
        best.witness = witness
        if witness.status == cross.WITNESSED and witness.cpu_case is not None:
            smaller = case_from_json(witness.cpu_case)
            if getattr(best.case, "perturb", None) is not None:
                smaller = smaller.with_perturb(best.case.perturb)
            verdict = _judge(target, opts, smaller, report, best, deadline) if smaller.size < best.case.size else None
            if verdict is not None:
                if best.counts(verdict):
                    verdict = _measured(target, opts, smaller, verdict, deadline)
                    witness.adopted = True
                witness.gpu_rate = [verdict.failures, verdict.reps]
                if witness.adopted:
                    best.keep(smaller, verdict)
                    return
    try:
        verdict = _measured(target, opts, best.case, best.verdict, deadline)
    except Exception:  # noqa: BLE001 - the finding stands as it is; the measure was only for the report
        return
    if best.counts(verdict):
        best.keep(best.case, verdict)  # the same case, its rate measured: the file is rewritten


def _measured(target, opts: FuzzOptions, case: Case, verdict: Verdict, until: Deadline) -> Verdict:
    """`verdict` topped up to flaky.CONFIRM_REPS repetitions of `case` (the rate a report prints)."""
    if verdict.reps >= flaky.CONFIRM_REPS:
        return verdict
    more = flaky.measure(_batch(target, opts, case, until), opts.reps, flaky.CONFIRM_REPS - verdict.reps,
                         stop=until.over)
    return flaky.merge(copy.copy(verdict), more)


def fuzz_target(target, opts: FuzzOptions, progress: Callable[[TargetReport], None] | None = None,
                before_case: Callable[[Case], None] | None = None,
                on_finding: Callable[[findings.Finding], None] | None = None,
                resume: TargetReport | None = None,
                after_case: Callable[[], None] | None = None) -> TargetReport:
    """Fuzz one target until a finding, the example count, the time budget or a stop signal.

    `resume`: this target's report from an earlier turn of the same run (``second_turns``): its counts,
    coverage and seconds go on, and the draws differ from that turn's.  `before_case` hears of each case
    before it runs, `after_case` once it has been judged (or declined): a session's parent tells a death
    inside a case (that case's crash) from one between cases."""
    return _FuzzLoop(target, opts, progress, before_case, on_finding, resume, after_case).run()


class _FuzzLoop:
    """One target's fuzzing, in the order it happens: ``run`` draws chunks of examples (``chunk``),
    each example is checked (``check_example``: may it run, its verdict, what it counts), a failure is
    shrunk (``shrink``) and, on a GPU, witnessed on the CPU; ``finish`` says how it ended."""

    def __init__(self, target, opts: FuzzOptions, progress, before_case, on_finding, resume, after_case=None):
        self.target, self.opts = target, opts
        self.progress, self.before_case, self.after_case = progress, before_case, after_case
        if resume is None:
            self.report = TargetReport(target.name, target.contract,
                                       min_examples=min(opts.min_examples, opts.max_examples))
        else:
            self.report = dataclasses.replace(resume, stop="not-run", detail=None, finished=False)
        self.start = time.monotonic() - self.report.seconds  # seconds (and a finding's time to it) count every turn
        self.deadline = opts.deadline.started()  # this target's share of --time, shrinking included
        self.options = target_options(target, opts)
        self.best = _Best(target, opts, self.report, self.start, on_finding)
        self.chunk_index = 0 if resume is None else SECOND_TURN_CHUNKS  # --seed: other draws than the first turn's
        self.seeds = opts.seeds

    def run(self) -> TargetReport:
        report, best, opts = self.report, self.best, self.opts
        if self.deadline.ends_by(self.start):
            report.detail = "not run: its share of --time had ended when it was to start"
            report.finished = True
            return report
        report.options = contracts.get(self.target.contract).narrowed(self.options)
        self.strategy = contracts.strategy(self.target.contract, profile=opts.profile, **self.options)
        report.tally.expect(self.target.contract, profile=opts.profile, device=opts.device, options=self.options)
        report.stop = "max-examples"
        try:
            while report.examples < opts.max_examples and best.case is None:
                if self.deadline.over():
                    report.stop = "time"
                    break
                before = report.examples
                self.chunk()
                if report.examples == before and best.case is None:
                    report.stop = "exhausted"  # the strategy is exhausted (or every draw was rejected)
                    break
            self.shrink()
        except _Stop as stop:
            report.stop, report.detail = stop.stop, stop.detail
        except (interrupt.StopRequested, KeyboardInterrupt):
            report.interrupted = True
            report.stop = "interrupted"
        return self.finish()

    def shrinking(self) -> Deadline:
        """The shrink's share of the deadline, from the first failure."""
        return self.deadline.shrink(self.best.first_at, self.opts.shrink_budget)

    def chunk(self) -> None:
        """One Hypothesis run of up to ``CHUNK`` examples (the seeds first), each through ``check_example``."""
        opts, target = self.opts, self.target
        n = min(CHUNK, opts.max_examples - self.report.examples)

        def one(case: Case) -> None:  # Hypothesis's test: a function of its own (it sets attributes on it)
            self.check_example(case)

        test = given(self.strategy)(one)
        for case in self.seeds:  # tried before the first chunk draws anything
            test = example(case)(test)
        self.seeds = ()
        test.hypothesis.inner_test._hypothesis_internal_add_digest = (
            f"{target.name}|{opts.device}|{opts.mode}" + (f"|{opts.corpus_key}" if opts.corpus_key else "")
        ).encode()
        test = settings(database=_database(opts.database), max_examples=n, deadline=None, derandomize=False,
                        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                        report_multiple_bugs=False, print_blob=False,
                        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))(test)
        if opts.seed is not None:
            _seed_hypothesis(opts.seed * 1_000_003 + self.chunk_index)
        self.chunk_index += 1
        try:
            features.run_observed(test, opts.observe, target.name)
        except (_CaseFailed, Flaky, Unsatisfiable, _ShrinkOver):
            pass

    def check_example(self, case: Case) -> None:
        """One example (Hypothesis's test body): may it run, its verdict, what it counts, a failure kept."""
        interrupt.check()
        report, best = self.report, self.best
        if report.context_lost:
            return  # every later launch would fault too: keep the case that broke the context
        shrinking = best.case is not None
        self.may_run(shrinking)
        if self.before_case is not None:
            self.before_case(case)
        try:
            verdict = self.verdict(case, shrinking)
        finally:
            if self.after_case is not None:
                self.after_case()
        if verdict is None:
            return
        self.count(case, verdict)
        if not (best.counts(verdict) if shrinking else verdict.failed):
            return
        best.keep(case, verdict)
        if not shrinking and not report.context_lost:  # big case-level cuts first; Hypothesis then shrinks
            _reduce(self.target, self.opts, best, self.shrinking())
        raise _CaseFailed(verdict.summary())

    def may_run(self, shrinking: bool) -> None:
        """Raise when this example must not run: the shrink's time, the target's time or its turn is over."""
        if shrinking:
            if self.shrinking().over():
                raise _ShrinkOver()
            self.best.shrinks += 1
            self.best.rewrite(every=REWRITE_EVERY)
        elif self.deadline.over():
            raise _Stop("time")
        elif self.opts.turn_over is not None and (why := self.opts.turn_over()):
            raise _Stop("fleet", why)

    def verdict(self, case: Case, shrinking: bool) -> Verdict | None:
        """The case's verdict; None for a smaller case that could not be checked (it does not reproduce)."""
        opts, report = self.opts, self.report
        try:
            return _run(self.target, opts, case, self.best if shrinking else None,
                        self.shrinking() if shrinking else self.deadline)
        except CaseError as exc:  # the contract's checks refuse what the strategy drew: counted, said in `why`
            report.rejected.append(f"{case.describe()}: {exc}")
            assume(False)
        except Rejected as exc:  # the target declines it (mambafuzz.reject): not valid, not a failure
            features.observe_rejection(report.tally, exc.reason)
            assume(False)
        except Inconclusive as exc:
            if shrinking:
                _note_fault(opts, report, None)
                return None
            raise _Stop("inconclusive", str(exc)) from None
        except InternalError as exc:
            _note_fault(opts, report, None)  # on cuda the context may be what broke: start afresh
            if shrinking:
                return None
            raise _Stop("internal-error", write_error(opts, self.target.name, exc, case)) from None

    def count(self, case: Case, verdict: Verdict) -> None:
        """A checked example in the report: counts, coverage, the progress callback."""
        report = self.report
        _note_fault(self.opts, report, verdict)
        _note_instrumented(report, verdict)
        report.examples += 1
        features.observe(report.tally, case, verdict, time.monotonic() - self.start)
        report.reps += verdict.reps
        report.failed_reps += verdict.failures
        report.seconds = time.monotonic() - self.start
        if self.progress:
            self.progress(report)

    def shrink(self) -> None:
        """After the chunks: reduce what Hypothesis shrank to, then (GPU) the CPU witness and the rate."""
        best, report, opts = self.best, self.report, self.opts
        if best.case is not None and not report.context_lost:  # again, on what Hypothesis shrank to
            if _reduce(self.target, opts, best, self.shrinking()):
                best.not_minimal = None
        if best.case is not None and opts.flaky and not report.context_lost and best.verdict.compile is None:
            _cross_check(self.target, opts, best, self.deadline)  # a compile error is not a rate: nothing to measure

    def finish(self) -> TargetReport:
        """The finding as its file says it (final counts, minimal or why not), the time, finished."""
        report, best = self.report, self.best
        if best.case is not None:
            if best.not_minimal is not None:
                best.not_minimal = _not_minimal(self.opts, best, report, self.deadline)
            best.rewrite()
            report.finding = best.finding()  # final counts (shrink examples, minimal): the file says the same
            if report.stop not in ("interrupted",):
                report.stop = "finding"
        report.seconds = time.monotonic() - self.start
        report.finished = True
        return report

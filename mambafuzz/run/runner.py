"""Run chosen targets under one time budget: in this process or in worker processes.

The CLI and the session both come here.  ``--time`` is the whole run's budget,
shrinking included, one ``Deadline`` on the monotonic clock: each target gets an
equal share of what is left when it starts (in this process, or in each
worker; ``Deadline.share_end``), so leftover time flows to the targets after it
and no target's shrinking eats the shares of those after it (a cumulative slice
did: a 150 s zoo caught a row early, shrank it for 60 s and left four rows no
time at all).  The clock starts when fuzzing can: start-up (imports, a
worker's spawn) is not taken from ``--time``.  A target whose turn comes after
the end is reported as not run, never dropped.  A stop signal ends the current
example, then every target not reached is reported as interrupted.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

from mambafuzz.run import interrupt
from mambafuzz.run import precompile
from mambafuzz.search.fuzz import FuzzOptions, TargetReport, fuzz_target

Update = Callable[[list[TargetReport]], None]


@dataclass(frozen=True)
class Deadline:
    """``--time`` as one end on ``time.monotonic()``, from the CLI to the GPU batch.

    ``started`` fixes the end when fuzzing can start: in this process when the
    runner starts, in a session when a worker is ready (each first worker at
    its own readiness; one started after a crash gets the end the session
    heard first).  The monotonic clock is the system's (time since boot), the
    same in every process, so workers receive the end itself.
    """

    seconds: float | None = None   # --time; None: no limit
    end: float | None = None       # on time.monotonic(); None until started

    def started(self) -> "Deadline":
        """This deadline with its end fixed (from now, unless it was fixed already)."""
        if self.seconds is None or self.end is not None:
            return self
        return dataclasses.replace(self, end=time.monotonic() + self.seconds)

    def over(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def share_end(self, targets_left: int) -> float | None:
        """The end of the next target's share: an equal part of what is left, over the `targets_left`
        targets still to run (it included).  None without a limit."""
        if self.end is None:
            return None
        now = time.monotonic()
        return now + max(0.0, self.end - now) / max(1, targets_left)

    def not_run(self, ran: int) -> str:
        """Why a target whose turn came after the end is not run: `ran` targets before it ran."""
        if ran:
            return f"not run: --time ({self.seconds:g} s) ran out while the {ran} target(s) before it ran"
        return f"not run: --time ({self.seconds:g} s) ran out before its turn"


def _not_reached(target, opts: FuzzOptions, why: str, interrupted: bool) -> TargetReport:
    report = TargetReport(target.name, target.contract, min_examples=min(opts.min_examples, opts.max_examples),
                          detail=why, interrupted=interrupted, stop="interrupted" if interrupted else "not-run",
                          finished=True)
    return report


def run_in_process(targets: list, opts: FuzzOptions, *, total_time: float | None = None,
                   on_update: Update | None = None, precompile_processes: int = 0) -> list[TargetReport]:
    """Fuzz each target in turn in this process; stops early on a stop signal or a lost CUDA context.

    `precompile_processes` helpers build the targets' kernels ahead of their turn (``precompile``).
    """
    with precompile.ahead(targets, opts, precompile_processes):
        return _in_process(targets, opts, total_time, on_update)


def _in_process(targets: list, opts: FuzzOptions, total_time: float | None,
                on_update: Update | None) -> list[TargetReport]:
    on_update = on_update or (lambda reports: None)
    reports: list[TargetReport] = []
    deadline = Deadline(total_time or None).started()
    stopped_why: str | None = None
    for i, target in enumerate(targets):
        if stopped_why is None and interrupt.requested():
            stopped_why = "not run: interrupted"
        if stopped_why is not None:
            reports.append(_not_reached(target, opts, stopped_why, interrupted=interrupt.requested()))
            continue
        if deadline.over():
            ran = sum(r.stop != "not-run" for r in reports)
            reports.append(_not_reached(target, opts, deadline.not_run(ran), interrupted=False))
            continue
        target_opts = dataclasses.replace(opts, deadline=deadline.share_end(len(targets) - i))
        last = [0.0]

        def progress(report, _done=list(reports)):
            now = time.monotonic()
            if now - last[0] > 0.25:
                last[0] = now
                on_update(_done + [report])

        report = fuzz_target(target, target_opts, progress)
        reports.append(report)
        on_update(list(reports))
        if report.context_lost:
            stopped_why = "not run: the CUDA context was broken by a fault (use --isolate)"
    return reports


def run_isolated(targets: list, opts: FuzzOptions, *, total_time: float | None, workers: int = 1,
                 gpus: list[int] | None = None, hang_timeout: float = 120.0, fresh: bool = False,
                 on_update: Update | None = None, on_resume: Callable[[list[str]], None] | None = None,
                 precompile_processes: int = 0) -> list[TargetReport]:
    """Targets in worker processes (one per GPU with `gpus`), resumable; the workers receive the
    run's ``Deadline`` and take each target's share of it when the target starts;
    `precompile_processes` helpers build kernels ahead (``precompile``)."""
    from mambafuzz.run.session import Session, SessionOptions, plain_options

    entries = [{"spec": t.name, "name": t.name, "contract": t.contract, "overlap": t.overlap,
                **({"path": t.path} if getattr(t, "path", None) else {})}
               for t in targets]
    sopts = SessionOptions(device=opts.device, options={**plain_options(opts), "time_budget": None},
                           workers=workers, gpus=gpus, hang_timeout=hang_timeout, fresh=fresh,
                           deadline=Deadline(total_time or None))
    session = Session(entries, sopts, on_update=lambda reps: (on_update or (lambda r: None))(list(reps.values())))
    if session.resumed() and on_resume is not None:
        on_resume(session.resumed())
    ahead = [t for t in targets if t.name not in session.done]
    with precompile.ahead(ahead, opts, precompile_processes, gpus):
        return session.run()

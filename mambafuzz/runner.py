"""Run chosen targets under one time budget: in this process or in worker processes.

The CLI and the session both come here.  ``--time`` is the whole run's budget,
shrinking included: each target gets an equal share of what is left when it
starts (in this process, or in each worker), so leftover time flows to the
targets after it and no target's shrinking eats the shares of those after it
(a cumulative slice did: a 150 s zoo caught a row early, shrank it for 60 s
and left four rows no time at all).  A target whose share is gone before it starts
is reported as not run, never dropped.  A stop signal ends the current
example, then every target not reached is reported as interrupted.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

from . import interrupt, precompile
from .fuzz import FuzzOptions, TargetReport, fuzz_target

Update = Callable[[list[TargetReport]], None]


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
    end = time.time() + total_time if total_time else None
    stopped_why: str | None = None
    for i, target in enumerate(targets):
        if stopped_why is None and interrupt.requested():
            stopped_why = "not run: interrupted"
        if stopped_why is not None:
            reports.append(_not_reached(target, opts, stopped_why, interrupted=interrupt.requested()))
            continue
        share = None
        if end is not None:
            share = (end - time.time()) / (len(targets) - i)
            if share <= 0:
                reports.append(_not_reached(target, opts, "not run: --time was used up by the targets "
                                            "before it", interrupted=False))
                continue
        target_opts = dataclasses.replace(opts, time_budget=share, deadline=None)
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
    """Targets in worker processes (one per GPU with `gpus`), resumable; each target's share is
    decided in its worker when it starts (``session.share_end``); `precompile_processes` helpers
    build kernels ahead (``precompile``)."""
    from .session import Session, SessionOptions, plain_options

    end = time.time() + total_time if total_time else None
    entries = [{"spec": t.name, "name": t.name, "contract": t.contract, "overlap": t.overlap, "end": end,
                **({"path": t.path} if getattr(t, "path", None) else {})}
               for t in targets]
    sopts = SessionOptions(device=opts.device, options={**plain_options(opts), "time_budget": None},
                           workers=workers, gpus=gpus, hang_timeout=hang_timeout, fresh=fresh)
    session = Session(entries, sopts, on_update=lambda reps: (on_update or (lambda r: None))(list(reps.values())))
    if session.resumed() and on_resume is not None:
        on_resume(session.resumed())
    ahead = [t for t in targets if t.name not in session.done]
    with precompile.ahead(ahead, opts, precompile_processes, gpus):
        return session.run()

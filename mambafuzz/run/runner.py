"""Run chosen targets under one time budget: in this process or in worker processes.

The CLI and the session both come here.  ``--time`` is the whole run's budget,
shrinking included, one ``clock.Deadline`` made by the caller: each target gets an
equal share of what is left when it starts (in this process, or in each
worker; ``Deadline.share``), so leftover time flows to the targets after it
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
from typing import Callable

from mambafuzz.control import interrupt
from mambafuzz.control.clock import Deadline
from mambafuzz.control import gpu
from mambafuzz.control import mps as mps_daemon
from mambafuzz.run import precompile
from mambafuzz.run.session import Session, SessionOptions, plain_options
from mambafuzz.search.fuzz import FuzzOptions, TargetReport, fuzz_target, second_turns

Update = Callable[[list[TargetReport]], None]


def _not_reached(target, opts: FuzzOptions, why: str, interrupted: bool) -> TargetReport:
    report = TargetReport(target.name, target.contract, min_examples=min(opts.min_examples, opts.max_examples),
                          detail=why, interrupted=interrupted, stop="interrupted" if interrupted else "not-run",
                          finished=True)
    return report


def run_in_process(targets: list, opts: FuzzOptions, *, deadline: Deadline = Deadline(),
                   on_update: Update | None = None, precompile_processes: int = 0, turns=None) -> list[TargetReport]:
    """Fuzz each target in turn in this process, within `deadline` (``--time``, started here); stops
    early on a stop signal or a lost CUDA context.

    `precompile_processes` helpers build the targets' kernels ahead of their turn (``precompile``).
    `turns` (a campaign's, ``fleet.worker.Fleet``) chooses the targets and their turns instead: the
    reports are then those of the targets this process had a turn of.
    """
    with precompile.ahead(targets, opts, precompile_processes):
        if turns is not None:
            return _campaign_turns(turns, targets, opts, deadline, on_update)
        return _in_process(targets, opts, deadline, on_update)


def _campaign_turns(turns, targets: list, opts: FuzzOptions, deadline: Deadline,
                    on_update: Update | None) -> list[TargetReport]:
    """The targets `turns` leases, fuzzed here a turn at a time (a turn resumes this process's report)."""
    on_update = on_update or (lambda reports: None)
    by_name = {t.name: t for t in targets}
    reports: dict[str, TargetReport] = {}

    def turn(target, target_opts, resume, hooks):
        others = [r for name, r in reports.items() if name != target.name]
        progress = _progress(on_update, others, [])

        def both(report):
            hooks.progress(report)
            progress(report)
        report = fuzz_target(target, target_opts, both, on_finding=hooks.found, resume=resume)
        reports[target.name] = report
        on_update(list(reports.values()))
        hooks.ended(report)
        return report

    turns.loop(turn, opts, deadline.started(), lambda entry: by_name[entry["name"]])
    return [reports[t.name] for t in targets if t.name in reports]


def _in_process(targets: list, opts: FuzzOptions, deadline: Deadline,
                on_update: Update | None) -> list[TargetReport]:
    on_update = on_update or (lambda reports: None)
    reports: list[TargetReport] = []
    deadline = deadline.started()
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
        target_opts = dataclasses.replace(opts, deadline=deadline.share(len(targets) - i))
        report = fuzz_target(target, target_opts, _progress(on_update, list(reports), []))
        reports.append(report)
        on_update(list(reports))
        if report.context_lost:
            stopped_why = "not run: the CUDA context was broken by a fault (use --isolate)"
    for i, share in second_turns(reports, deadline) if stopped_why is None else ():
        target_opts = dataclasses.replace(opts, deadline=share)  # what the targets caught early left
        reports[i] = fuzz_target(targets[i], target_opts, _progress(on_update, reports[:i], reports[i + 1:]),
                                 resume=reports[i])
        on_update(list(reports))
        if reports[i].context_lost:
            break
    return reports


def _progress(on_update: Update, before: list[TargetReport], after: list[TargetReport]):
    """A target's progress callback: the view updated at most every 0.25 s, the other targets around it."""
    last = [0.0]

    def progress(report: TargetReport) -> None:
        now = time.monotonic()
        if now - last[0] > 0.25:
            last[0] = now
            on_update(before + [report] + after)
    return progress


def run_isolated(targets: list, opts: FuzzOptions, *, deadline: Deadline = Deadline(), workers: int = 1,
                 gpus: list[int] | None = None, hang_timeout: float = 120.0, fresh: bool = False,
                 on_update: Update | None = None, on_resume: Callable[[str], None] | None = None,
                 precompile_processes: int = 0, workers_per_gpu: int = 1, mps: bool = True,
                 turns=None, costs: dict[str, float] | None = None,
                 needs: dict[str, int] | None = None) -> list[TargetReport]:
    """Targets in worker processes (one per GPU with `gpus`, `workers_per_gpu` on cuda), resumable; the
    workers receive the run's `deadline`, start it when ready and take each target's share of it when
    the target starts; `precompile_processes` helpers build kernels ahead (``precompile``); several
    workers on a GPU run under a private MPS daemon unless `mps` is False (``control.mps``).  With a
    campaign's `turns` each worker leases its targets from the hub (no local resume state: the hub is it).
    `costs` (target name -> seconds, the zoo's) deals the targets out to the workers instead (``run.deal``);
    `needs` (target name -> bytes one case of its bug takes) deals each to a worker whose share of its GPU's
    memory holds it (budgets from ``nvidia-smi``'s total: ``control.gpu``, ``control.mps.budgets``)."""
    entries = [{"spec": t.name, "name": t.name, "contract": t.contract, "overlap": t.overlap,
                **({"path": t.path} if getattr(t, "path", None) else {}),
                **({"cost": costs.get(t.name, 1.0)} if costs is not None else {}),
                **({"memory": needs[t.name]} if needs and needs.get(t.name) else {})}
               for t in targets]
    per_gpu = workers_per_gpu if opts.device == "cuda" else 1
    budgets = None
    if opts.device == "cuda" and per_gpu > 1:  # each worker's case budget, slot by slot as the session numbers them
        info = gpu.query(gpus[0] if gpus else 0)
        budgets = mps_daemon.budgets(per_gpu, info.total_bytes if info else None) * len(gpus or [None])
    sopts = SessionOptions(device=opts.device, options=plain_options(opts),
                           workers=workers, gpus=gpus, hang_timeout=hang_timeout, fresh=fresh,
                           deadline=deadline, workers_per_gpu=per_gpu, deal=costs is not None, budgets=budgets,
                           **({"state_dir": None} if turns is not None else {}))
    session = Session(entries, sopts, on_update=lambda reps: (on_update or (lambda r: None))(list(reps.values())),
                      turns=turns)
    if session.resume_line() and on_resume is not None:
        on_resume(session.resume_line())
    ahead = [t for t in targets if t.name not in session.done]
    with mps_daemon.daemon(mps and sopts.workers_per_gpu > 1) as (env, why):
        session.mps = why is None
        with mps_daemon.environ(env), precompile.ahead(ahead, opts, precompile_processes, gpus):  # children inherit it
            return session.run()

"""Long sessions that survive: targets run in worker processes.

A kernel that faults (an illegal address, a misaligned u64 load) leaves the CUDA
context broken for every later call; a kernel that hangs stops everything; a
process can die outright.  So the session runs targets in worker processes and
watches them.  Each worker announces every case before it runs it, and each
repetition it judges ("alive"); when a worker dies, or sends nothing for
`hang_timeout` seconds, the case in flight is the finding (a Verdict of kind
`crash` or `hang`), saved like any other, and a fresh worker
takes the remaining targets.  With several GPUs one worker runs per GPU (all
sharing the example database and crashes/); their counts are added up per
target.  The session's progress is saved after every target, so an interrupted
run (Ctrl-C, SIGTERM, time budget) resumes where it stopped.  Workers send, and
the resume state holds, ``TargetReport.to_json`` and ``Finding.to_json``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from mambafuzz import findings, strategies
from mambafuzz.contracts import case_from_json
from mambafuzz.control import clock, interrupt
from mambafuzz.control.clock import Deadline
from mambafuzz.control.exits import WORKER_CONTEXT_LOST, WORKER_DONE, WORKER_NO_DEVICE, exit_code
from mambafuzz.control.mps import bound_memory, memory_share, set_budget
from mambafuzz.errors import CaseError, InternalError, UsageError
from mambafuzz.findings import Finding, atomic_write_json
from mambafuzz.judge.engine import Verdict
from mambafuzz.search.features import Tally
from mambafuzz.search.fuzz import FuzzOptions, TargetReport, fuzz_target, second_turns, write_error
from mambafuzz.run import inject
from mambafuzz.run.deal import cost, deal, help_list, homeless, need, redeal


FALSE_STARTS = 5  # a worker slot that dies this often in a row before it is ready stops being restarted
BACKOFF = 1.0     # seconds before the first restart after a false start, doubled each time (an MPS server
#                   that lost a client to a fault takes no new one until every old one has exited)
BACKOFF_MAX = 10.0
DEATHS = 5        # a worker slot whose worker dies this often between cases (killed from outside) is given up
HELP_AFTER = 10.0  # dealt targets: a worker done with its own helps others only with this many seconds left


@dataclass
class WorkerSpec:
    """Everything a worker needs, as plain data (it crosses a process boundary)."""

    index: int
    device: str
    gpu: int | None
    targets: list[dict]          # {"spec", "contract", "overlap"}
    options: dict                # FuzzOptions fields, plain
    seed_offset: int = 0
    deadline: Deadline = Deadline()  # --time; started by the worker when it is ready, unless already
    memory_share: float | None = None  # of its GPU's memory, when several workers share the GPU
    # (entry, report JSON) of targets this worker slot fuzzed in an earlier process (before a restart):
    # candidates for a second turn (search.fuzz.second_turns) with the targets this process fuzzes
    earlier: list = field(default_factory=list)
    # a campaign's turns (``fleet.worker.Fleet``, handed in by the CLI): the worker leases its targets from
    # the hub, one turn at a time, instead of running ``targets`` in order
    turns: Any = None
    attempt: int = 0                   # this slot's process number (0: its first; a restart counts up)
    memory_budget: int | None = None   # bytes one case may allocate (judge.materialize declines a bigger one)


# --------------------------------------------------------------------- worker
def _worker_main(spec: WorkerSpec, conn) -> None:
    """Runs in the child: fuzz each target, narrating every case to the parent."""
    try:  # the parent's stdout may be a --json document: a kernel's or Triton's prints go to stderr
        sys.stdout.flush()
        os.dup2(2, 1)
    except OSError:
        pass
    if spec.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(spec.gpu)
    from mambafuzz.control import device as device_mod  # deferred: it notes TRITON_INTERPRET as the process had it when first imported

    try:
        if inject.no_device(spec.index, spec.attempt):
            raise UsageError("injected: the device is not ready (run.inject)")
        device_mod.select(spec.device)
    except UsageError as exc:  # the parent counts it a false start and tries again, or gives the slot up
        print(f"mambafuzz: worker {spec.index} could not open its device: {exc}", file=sys.stderr, flush=True)
        conn.close()
        os._exit(exit_code(["no device"]))
    if spec.memory_share is not None:
        bound_memory(spec.memory_share, spec.memory_budget)
    elif spec.memory_budget is not None:
        set_budget(spec.memory_budget)
    interrupt.install()  # SIGTERM from the parent (or Ctrl-C) ends the current example, then reports

    opts_fields = dict(spec.options)
    opts_fields["profile"] = strategies.PROFILES[opts_fields["profile"]]
    if opts_fields.get("seed") is not None:
        opts_fields["seed"] += spec.seed_offset
    from mambafuzz.kernels import registry  # noqa: F401  # deferred: the kernels load at start-up, after control.device.select

    deadline = spec.deadline.started()  # ready: the worker's start-up is not taken from --time
    conn.send(("hello", (os.getpid(), deadline.end)))
    if spec.turns is not None:  # a campaign: targets leased from the hub, a turn at a time, until none is open
        spec.turns.loop(lambda target, opts, resume, hooks: _worker_turn(conn, target, opts, resume, hooks),
                        FuzzOptions(**opts_fields), deadline, _resolved)
        conn.send(("bye", None))
        conn.close()
        return
    ran, fuzzed = 0, []  # targets this worker slot has fuzzed: how many here, and (target, report) of each
    for entry, body in spec.earlier:
        try:
            fuzzed.append((_resolved(entry), TargetReport.from_json(body)))
        except (UsageError, KeyError, TypeError, ValueError, CaseError):
            pass  # it had its turn; without its report it gets no second one
    queue = list(spec.targets)
    stopped = False
    while not stopped:
        _take_more(conn, queue)  # rows the parent dealt again (a worker that could not start gave them back)
        while queue:
            entry = queue.pop(0)
            try:
                target = _resolved(entry)
            except UsageError as exc:
                conn.send(("report", TargetReport(entry["spec"], entry.get("contract") or "?", stop="not-run",
                                                  detail=str(exc)).to_json()))
                continue
            if deadline.over():
                conn.send(("report", TargetReport(target.name, target.contract, stop="not-run", finished=True,
                                                  detail=deadline.not_run(ran)).to_json()))
                continue
            ran += 1
            report = _worker_turn(conn, target, FuzzOptions(**opts_fields, deadline=deadline.share(len(queue) + 1)),
                                  spec=spec)
            if report.interrupted:
                stopped = True
                break
            fuzzed.append((target, report))
            _take_more(conn, queue)
        if stopped:
            break
        # what the targets caught early left, to those whose share ran out (search.fuzz.second_turns)
        for k, share in second_turns([r for _, r in fuzzed], deadline):
            target, before = fuzzed[k]
            if _worker_turn(conn, target, FuzzOptions(**opts_fields, deadline=share), resume=before,
                            spec=spec).interrupted:
                stopped = True
                break
            if _take_more(conn, queue):
                break  # rows handed over: their first turns come before more second turns
        stopped = stopped or not _take_more(conn, queue) and not queue
    conn.send(("bye", None))
    conn.close()


def _take_more(conn, queue: list[dict]) -> bool:
    """Add the rows the parent sent since (``("more", entries)``) to `queue`, slowest first; whether any came."""
    came = False
    try:
        while conn.poll():
            kind, body = conn.recv()
            if kind == "more":
                queue.extend(body)
                came = came or bool(body)
    except (EOFError, OSError):  # the parent is gone: the worker finishes what it has
        return came
    queue.sort(key=lambda e: -cost(e))  # stable: ties keep the order they were dealt in
    return came


def _resolved(entry: dict):
    """The target a session entry names (UsageError when it cannot be loaded)."""
    from mambafuzz.control.targets import resolve  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    return resolve([entry["spec"]], contract=entry.get("contract"), overlap=entry.get("overlap", "full"))[0]


_JUDGED = [0]  # cases this worker process has judged (run.inject counts them)


def _worker_turn(conn, target, opts: FuzzOptions, resume: TargetReport | None = None, hooks=None,
                 spec: WorkerSpec | None = None) -> TargetReport:
    """One turn of one target in a worker, narrated to the parent (an internal-error report after
    mambafuzz's own error); a broken CUDA context ends the worker.  `hooks` (a campaign's turn) hears of
    each finding, the progress and the report too, the report before a broken context ends the worker.
    Each case is announced before it runs and its end after ("idle"): a death between the two is the
    case's crash, a death outside them is not."""
    conn.send(("target", target.name))
    last = [0.0]  # when progress was last sent
    alive_sent = [0.0]

    def before_case(case):
        conn.send(("case", case.to_json()))

    def after_case():
        conn.send(("idle", None))
        _JUDGED[0] += 1
        if spec is not None:
            inject.after_case(spec.index, spec.attempt, _JUDGED[0])

    def progress(report):
        if hooks is not None:
            hooks.progress(report)
        now = time.monotonic()
        if now - last[0] > 0.5:
            last[0] = now
            conn.send(("progress", report.to_json()))

    def on_finding(finding):  # the parent knows of a failure as soon as it is on disk
        conn.send(("found", finding.to_json()))
        if hooks is not None:
            hooks.found(finding)

    def still_going():  # a repetition judged: a slow example is not a silent one (the parent's hang check)
        now = time.monotonic()
        if now - alive_sent[0] > 1.0:
            alive_sent[0] = now
            conn.send(("alive", None))

    clock.on_progress(still_going)
    try:
        report = fuzz_target(target, opts, progress, before_case=before_case, on_finding=on_finding, resume=resume,
                             after_case=after_case)
    except Exception as exc:  # mambafuzz's own failure: never a crash finding against the kernel

        detail = write_error(opts, target.name, InternalError(
            f"internal error in mambafuzz: {type(exc).__name__}: {exc}", traceback.format_exc()))
        report = TargetReport(target.name, target.contract, stop="internal-error", detail=detail)
    finally:
        clock.on_progress(None)
    conn.send(("report", report.to_json()))
    if hooks is not None:
        hooks.ended(report)
    if report.context_lost:
        conn.close()
        os._exit(exit_code(["context lost"]))  # a broken CUDA context: let the parent start a fresh worker
    return report


# --------------------------------------------------------------------- parent
@dataclass
class SessionOptions:
    device: str
    options: dict                      # FuzzOptions fields, plain (profile by name)
    workers: int = 1
    gpus: list[int] | None = None
    workers_per_gpu: int = 1           # on cuda: workers fuzzing each GPU at once (control.mps)
    hang_timeout: float = 120.0
    state_dir: Path | None = Path(".mambafuzz/sessions")
    fresh: bool = False
    deadline: Deadline = Deadline()    # --time: a worker starts it when ready; a restarted one gets its end
    deal: bool = False                 # targets dealt out to the workers by cost (run.deal), not all to each
    budgets: list | None = None        # per worker slot: bytes one case may allocate (None: unbounded)
    start_backoff: float = BACKOFF     # seconds before restarting a worker that died before it was ready


@dataclass
class _Live:
    spec: WorkerSpec
    process: Any
    conn: Any
    remaining: list[dict]
    current_target: str | None = None
    current_case: dict | None = None
    last_heard: float = field(default_factory=time.monotonic)
    ready: bool = False                # it said hello: it got past start-up
    finished: bool = False             # it said bye: it ran its targets
    in_case: bool = False              # a case is running: announced, not yet judged


def session_key(targets: list[dict], sopts: SessionOptions) -> str:
    """Same targets and options -> same key -> resume from the same state file."""
    body = {"targets": [dict(t) for t in targets], "device": sopts.device,
            "options": sopts.options}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Session:
    """Parent side: start workers, watch them, turn deaths and hangs into findings."""

    def __init__(self, targets: list[dict], sopts: SessionOptions, on_update: Callable[[dict], None] | None = None,
                 turns: Any = None):
        self.targets = targets
        self.sopts = sopts
        self.turns = turns  # a campaign's (fleet.worker.Fleet): workers lease targets; crash findings go to it too
        self.on_update = on_update or (lambda reports: None)
        self.reports: dict[str, TargetReport] = {}
        self.key = session_key(targets, sopts)
        self.state_path = Path(sopts.state_dir) / f"{self.key}.json" if sopts.state_dir else None
        self.done: set[str] = set()
        self.loaded = False  # a saved, interrupted session with these targets and options was read
        self.deadline = sopts.deadline
        self._partials: dict[str, dict] = {}
        self.restarts = 0
        self.mps = False  # whether the workers run under an MPS daemon (runner.run_isolated says)
        self._suspects: list[dict] = []   # faults from a GPU shared under MPS, replayed alone before they count
        self._false_starts: dict[int, int] = {}  # worker slot -> deaths before hello, in a row
        self._deaths: dict[int, int] = {}  # worker slot -> deaths between cases (killed from outside)
        self._spawns: dict[int, int] = {}  # worker slot -> processes started for it
        self._pending: list[tuple] = []    # (when, slot, gpu, rows): restarts waiting out a back-off
        self._orphans: list[dict] = []     # rows of a slot given up that no running worker had room for
        self._unrun: dict[str, str] = {}   # target -> why it may never run (said if it does not)
        self._given_up: set[int] = set()   # worker slots that start no more workers
        self._slot_gpus: dict[int, int | None] = {}  # worker slot -> its GPU
        self._ctx = None
        self._ran: dict[int, set[str]] = {}  # worker slot -> the targets it has had a turn of
        if self.state_path and self.state_path.exists() and not sopts.fresh:
            self._load_state()

    # -- resume state
    def _load_state(self) -> None:
        try:
            body = json.loads(self.state_path.read_text())
            reports = {name: TargetReport.from_json(r) for name, r in body.get("reports", {}).items()}
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, CaseError):
            return  # unreadable, or written by an older mambafuzz: start this session afresh
        self.done = set(body.get("done", []))
        self.loaded = True
        for rep in reports.values():
            rep.interrupted = False  # done, or about to run again
        self.reports.update(reports)

    def _save_state(self) -> None:
        if not self.state_path:
            return
        body = {"key": self.key, "done": sorted(self.done),
                "reports": {name: r.to_json() for name, r in self.reports.items()}}
        atomic_write_json(self.state_path, body)

    def resumed(self) -> list[str]:
        return sorted(self.done)

    def resume_line(self) -> str | None:
        """What resuming takes over, in one line (None when this session starts afresh): the session,
        the targets done and their examples (kept), the targets still to run (from their start)."""
        if not self.loaded:
            return None
        names = [t.get("name", t["spec"]) for t in self.targets]
        done = [n for n in names if n in self.done]
        todo = [n for n in names if n not in self.done]
        examples = sum(self.reports[n].examples for n in done if n in self.reports)
        kept = f" ({', '.join(done)}: {examples} example(s), kept)" if done else ""
        rest = f"; to run: {', '.join(todo)}" if todo else ""
        return (f"resuming session {self.key} ({self.state_path}): {len(done)} of {len(names)} target(s) "
                f"done{kept}{rest}; --fresh starts over")

    # -- running
    def _room(self, index: int) -> int | None:
        """Worker slot `index`'s case budget in bytes (None: unbounded)."""
        budgets = self.sopts.budgets
        return budgets[index] if budgets is not None and index < len(budgets) else None

    def _start(self, index: int, gpu: int | None, remaining: list[dict], ctx) -> _Live:
        k = self.sopts.workers_per_gpu
        attempt = self._spawns[index] = self._spawns.get(index, -1) + 1
        spec = WorkerSpec(index=index, device=self.sopts.device, gpu=gpu, targets=remaining,
                          options=self.sopts.options, seed_offset=7919 * index + 104729 * self.restarts,
                          deadline=self.deadline,
                          memory_share=memory_share(index % k, k) if k > 1 and self.sopts.device == "cuda" else None,
                          earlier=self._earlier(index, remaining) if self.turns is None else [], turns=self.turns,
                          attempt=attempt, memory_budget=self._room(index))
        # both ways: the parent hands a running worker the rows of one that could not start ("more")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        # a campaign's worker confirms a CUDA fault itself, in a child of its own (daemonic processes may
        # have none); the session still ends every worker (_stop, or a kill where one outlives its pipe)
        process = ctx.Process(target=_worker_main, args=(spec, child_conn), daemon=self.turns is None)
        process.start()
        child_conn.close()
        return _Live(spec, process, parent_conn, list(remaining))

    def _earlier(self, index: int, remaining: list[dict]) -> list:
        """What worker slot `index` reported, in processes before this one, of the targets it is not
        given again: (entry, its last report), for a second turn (a restart after a fault is a new process)."""
        names = {t.get("name", t["spec"]) for t in remaining}
        out = []
        for t in self.targets:
            name = t.get("name", t["spec"])
            body = self._partials.get(name, {}).get(index)
            rep = self.reports.get(name)
            if name not in names and body is not None and (rep is None or rep.finding is None):
                out.append((t, {k: v for k, v in body.items() if k != "_worker"}))
        return out

    def _merge(self, body: dict) -> None:
        """Add one worker's TargetReport JSON (tagged with "_worker") to the target's report."""
        name = body["target"]
        rep = self.reports.get(name)
        if rep is None:
            rep = self.reports[name] = TargetReport(name, body.get("contract", "?"))
        # counts from several workers add up; each worker's messages are cumulative for that worker
        partial = self._partials.setdefault(name, {})
        partial[body.get("_worker")] = body
        rep.examples = sum(b.get("examples", 0) for b in partial.values())
        rep.reps = sum(b.get("reps", 0) for b in partial.values())
        rep.failed_reps = sum(b.get("failed_reps", 0) for b in partial.values())
        rep.seconds = max(b.get("seconds", 0.0) for b in partial.values())
        rep.rejected = [m for b in partial.values() for m in b.get("rejected", [])]
        rep.min_examples = max(b.get("min_examples", 1) for b in partial.values())
        rep.tally = Tally.merged([Tally.from_json(b) for b in partial.values()])  # coverage, race map
        rep.options = dict(body.get("options") or rep.options)  # the contract options: every worker's same
        for key in ("stop", "detail"):
            if body.get(key):
                setattr(rep, key, body[key])
        if body.get("interrupted"):
            rep.interrupted = True
        if body.get("finding"):
            found = Finding.from_json(body["finding"])
            if rep.finding is None or found.case.size <= rep.finding.case.size:
                rep.finding, rep.written = found, body.get("written", False) or rep.written

    def _fault_finding(self, live: _Live, why: str, kind: str) -> None:
        """The worker died or hung mid-case (`kind` crash or hang): that case is the finding."""
        name = live.current_target
        case = case_from_json(live.current_case)
        verdict = Verdict(reps=1, failures=1, mode=self.sopts.options["mode"], fault=why, fault_kind=kind)
        finding = Finding(target=name, contract=case.contract, device=self.sopts.device,
                          mode=self.sopts.options["mode"], case=case, verdict=verdict)
        crashes_dir = self.sopts.options.get("crashes_dir")
        written, path = False, None
        if crashes_dir is not None:
            path, written = findings.save(finding, Path(crashes_dir))
        self._merge({"target": name, "contract": case.contract, "_worker": f"dead-{live.spec.index}"})
        rep = self.reports[name]
        if rep.finding is None:
            rep.finding, rep.written = finding, written
        suspect = self._shared() and written and kind == "crash"
        if suspect:
            self._suspects.append({"target": name, "path": str(path), "gpu": live.spec.gpu,
                                   "worker": live.spec.index})
        if self.turns is not None and path is not None:  # a campaign hears of it (done, unless a suspect)
            self.turns.session_found(finding, suspect)

    def run(self) -> list:
        ctx = mp.get_context("spawn")
        todo = [t for t in self.targets if t["spec"] not in self.done]
        slots = self.sopts.gpus if self.sopts.gpus else [None] * max(1, self.sopts.workers)
        if self.sopts.workers_per_gpu > 1:
            slots = [gpu for gpu in (self.sopts.gpus or [None]) for _ in range(self.sopts.workers_per_gpu)]
        if self.sopts.deal:
            rooms = [self._room(i) for i in range(len(slots))]
            for t in homeless(todo, rooms):  # no worker's share of its GPU holds the row's cases: said, not run
                self._unrun[t.get("name", t["spec"])] = (
                    f"not run: its cases need {need(t) / (1 << 30):.1f} GiB of GPU memory and no worker's budget "
                    f"holds them (the largest is {max(r for r in rooms if r is not None) / (1 << 30):.1f} GiB): "
                    "fewer --workers-per-gpu")
            hands = deal(todo, len(slots), rooms)
        else:
            hands = [todo] * len(slots)
        self._slot_gpus, self._ctx = dict(enumerate(slots)), ctx
        live: list[_Live] = [self._start(i, gpu, hands[i], ctx) for i, gpu in enumerate(slots) if hands[i]]
        interrupted = False
        try:
            while live or self._pending:
                if interrupt.requested():
                    raise KeyboardInterrupt
                self._start_due(live, ctx)
                if not live:
                    time.sleep(0.05)
                    continue
                ready = wait([w.conn for w in live] + [w.process.sentinel for w in live], timeout=0.25)
                now = time.monotonic()
                for w in list(live):
                    if w not in live:  # stopped with its GPU while this pass ran (_drain)
                        continue
                    died = w.process.sentinel in ready and not w.conn.poll()
                    try:
                        while w.conn.poll():
                            self._handle(w, w.conn.recv())
                            w.last_heard = now
                    except (EOFError, OSError):
                        died = True
                    # silent in a case: a hang (that case the finding); silent outside one (the CPU witness,
                    # shrinking's bookkeeping) only long past --time: stuck, stopped without a finding
                    silent = now - w.last_heard > self.sopts.hang_timeout
                    hung = silent and (w.in_case or (w.ready and not w.finished and self.deadline.end is not None
                                                     and now > self.deadline.end + self.sopts.hang_timeout))
                    if not (died or hung) and w.process.is_alive():
                        continue
                    if died and not hung and not w.finished:
                        w.process.join(2.0)  # its pipe closed mid-run: it is exiting; its exit code says why
                    if w.process.is_alive():
                        w.process.kill()
                    w.process.join(5)
                    live.remove(w)
                    mid_case = w.in_case and w.current_case is not None
                    if mid_case and w.current_target is not None:
                        if hung:
                            self._fault_finding(w, f"no progress for {self.sopts.hang_timeout:g} s (no repetition finished)", "hang")
                        else:
                            code = w.process.exitcode
                            if code != WORKER_CONTEXT_LOST:  # a CUDA fault: the worker reported it already
                                self._fault_finding(w, f"worker died (exit code {code})", "crash")
                        self._finish_target(w, w.current_target)
                    gone = [w]
                    faulted = w.process.exitcode == WORKER_CONTEXT_LOST or (mid_case and not hung)
                    if self._shared() and faulted:
                        gone += self._drain(w.spec.gpu, live)  # the fault reached the GPU's every client
                        self._confirm(w.spec.gpu, gone)
                        for other in live:  # the parent was busy replaying: their silence is not a hang
                            other.last_heard = time.monotonic()
                    for dead in gone:
                        self._restart(dead, hung and dead is w, live, ctx, between=not mid_case and dead is w)
                    self.on_update(self.reports)
        except KeyboardInterrupt:
            interrupted = True
            self._stop_workers(live)
        finally:  # an error here leaves no worker behind (a campaign's are not daemonic)
            for w in live:
                if w.process.is_alive():
                    w.process.kill()
        for t in self.targets:  # a target no worker reached is reported, never dropped, and why
            name = t.get("name", t["spec"])
            rep = self.reports.get(name)
            why = ("not run: interrupted" if interrupted else self._unrun.get(name)
                   or (self.deadline.not_run(0) if self.deadline.over() else "not run: no worker reached it"))
            if rep is None:
                self.reports[name] = TargetReport(name, t.get("contract") or "?", stop="not-run", finished=True,
                                                  detail=why)
            elif rep.stop == "not-run" and not rep.detail and name not in self.done and rep.finding is None:
                rep.detail, rep.finished = why, True  # started, never finished: its worker died, no other ended it
        for rep in self.reports.values():
            rep.interrupted = rep.interrupted or (interrupted and rep.target not in self.done)
        if self.state_path:
            if interrupted or any(t["spec"] not in self.done for t in self.targets):
                self._save_state()
            elif self.state_path.exists():
                self.state_path.unlink()  # finished: the next run starts fresh
        return [self.reports[n] for n in self._order() if n in self.reports]

    def _shared(self) -> bool:
        """Whether a GPU's workers are MPS clients of one server (a fault in one reaches them all)."""
        return self.mps and self.sopts.device == "cuda" and self.sopts.workers_per_gpu > 1

    def _drain(self, gpu: int | None, live: list[_Live]) -> list[_Live]:
        """Stop the other workers of `gpu` (their contexts are broken too; the MPS server takes no new
        client until all are gone); their cases in flight are no findings.  The stopped workers."""
        others = [x for x in live if x.spec.gpu == gpu]
        before = {name: rep.interrupted for name, rep in self.reports.items()}
        self._stop_workers(others, grace=10.0)
        for x in others:
            live.remove(x)
            x.current_case = None
        for name, rep in self.reports.items():  # stopped by us, not by the user: not interrupted
            rep.interrupted = before.get(name, False)
        return others

    def _confirm(self, gpu: int | None, gone: list[_Live]) -> None:
        """Replay the faults reported from `gpu` alone, each target's in the order they arrived, until one
        recurs (or the replay cannot tell): that file is the target's finding, and the others of the
        target (the same fault reaching the GPU's other workers) are removed unreplayed.  A fault that
        does not recur is dropped; a target left with none is fuzzed again by the worker that reported it."""
        from mambafuzz.run.confirm import confirm_alone  # deferred: the runner imports the fuzz loop (Hypothesis, numpy): only for a run

        mine = [x for x in self._suspects if x["gpu"] == gpu]
        self._suspects = [x for x in self._suspects if x["gpu"] != gpu]
        stands: set[str] = set()
        for suspect in mine:
            name, path = suspect["target"], suspect["path"]
            rep = self.reports.get(name)
            if name not in stands:
                confirmed, line = confirm_alone(path, gpu, self.sopts.hang_timeout, self.sopts.device)
                if confirmed is not False:  # it recurred, or the replay could not tell: the fault stands
                    stands.add(name)
                    self._stand(name, path)
                    continue
                if rep is not None and rep.finding is not None and str(rep.finding.path) == path:
                    rep.finding, rep.written = None, False
                    rep.stop, rep.finished = "not-run", False
                    rep.detail = (f"a fault on the shared GPU did not recur alone ({line}): not a finding, "
                                  "fuzzed again")
            elif rep is not None and rep.finding is not None and str(rep.finding.path) == path:
                continue  # the target's finding already (a case two workers drew): kept
            with contextlib.suppress(OSError):
                Path(path).unlink()  # mambafuzz's own file: a case that passes alone, or one not replayed
        for suspect in mine:  # a target none of whose faults recurred is fuzzed again
            name = suspect["target"]
            if name in stands:
                continue
            self.done.discard(name)
            entry = next((t for t in self.targets if t.get("name", t["spec"]) == name), None)
            owner = next((x for x in gone if x.spec.index == suspect["worker"]), None)
            if entry is not None and owner is not None and entry not in owner.remaining:
                owner.remaining.insert(0, entry)
        self._save_state()

    def _stand(self, name: str, path: str) -> None:
        """Make the fault file at `path`, which recurred alone, `name`'s finding (another worker's case
        may have been reported for it)."""
        rep = self.reports.get(name)
        if rep is None or (rep.finding is not None and str(rep.finding.path) == path):
            return
        try:
            finding = Finding.from_json(findings.load(Path(path)).body, path=Path(path))
        except (findings.CrashFileError, KeyError, TypeError, ValueError, CaseError):
            return  # the reported one stays; the file is kept for replay
        rep.finding, rep.written = finding, True
        rep.stop, rep.finished = "finding", True
        rep.detail = ""
        self.done.add(name)
        if self.turns is not None:
            self.turns.session_found(finding, False)

    def _restart(self, w: _Live, hung: bool, live: list[_Live], ctx, between: bool = False) -> None:
        """A fresh worker for `w`'s remaining targets.  A worker that died before it was ready (a GPU it could
        not open) is started again after a back-off that doubles, within --time, at most FALSE_STARTS times in
        a row; one that died between cases (killed from outside: `between`) at once, at most DEATHS times.
        A slot given up hands its rows to the workers still running (``_give_up``)."""
        if interrupt.requested():
            return  # a stop signal ended the workers: nothing starts again
        if self.turns is not None:  # a campaign's worker leases from every target; one that said bye is done
            remaining = [] if w.finished else self.targets
        else:
            remaining = [t for t in w.remaining if t["spec"] not in self.done]
        if not remaining and self._helps(w):  # its own rows done: it helps with those not caught yet
            remaining = help_list(self.targets, self._ran.setdefault(w.spec.index, set()),
                                  {n for n, r in self.reports.items() if r.finding is not None},
                                  self._room(w.spec.index))
            if remaining:
                self.restarts += 1
                live.append(self._start(w.spec.index, w.spec.gpu, remaining, ctx))
                self._redeal(live)
            return
        if not remaining:
            return
        if self.turns is not None and not (hung or w.process.exitcode != WORKER_DONE):
            return
        index, code = w.spec.index, w.process.exitcode
        if not w.ready:
            count = self._false_starts[index] = self._false_starts.get(index, 0) + 1
            delay = min(BACKOFF_MAX, self.sopts.start_backoff * 2 ** (count - 1))
            late = self.deadline.end is not None and time.monotonic() + delay >= self.deadline.end
            if count >= FALSE_STARTS or late:
                what = "could not open its device" if code == WORKER_NO_DEVICE else "died"
                self._give_up(index, remaining, f"the worker for GPU {w.spec.gpu} (slot {index}) {what} {count} "
                              f"time(s) before it was ready (last exit code {code}; its stderr says why)", live)
                return
            self._pending.append((time.monotonic() + delay, index, w.spec.gpu, remaining))
            return
        if between and code not in (WORKER_DONE, WORKER_CONTEXT_LOST):
            count = self._deaths[index] = self._deaths.get(index, 0) + 1
            for name in {w.current_target} - {None}:
                self._unrun[name] = (f"not finished: its worker died between cases (exit code {code}) and no "
                                     "worker finished it")
            if count >= DEATHS:
                self._give_up(index, remaining, f"the worker for GPU {w.spec.gpu} (slot {index}) died {count} "
                              f"times between cases (last exit code {code})", live)
                return
        if self.deadline.over():
            return
        self.restarts += 1
        live.append(self._start(index, w.spec.gpu, remaining, ctx))

    def _start_due(self, live: list[_Live], ctx) -> None:
        """Start the restarts whose back-off is over (dropped past --time), then deal them any orphaned rows."""
        now, due = time.monotonic(), []
        for item in list(self._pending):
            if item[0] <= now or self.deadline.over():
                self._pending.remove(item)
                due.append(item)
        for _, index, gpu, rows in due:
            rows = [t for t in rows if t["spec"] not in self.done]
            if self.deadline.over():
                for t in rows:
                    self._unrun.setdefault(t.get("name", t["spec"]), "not run: --time ran out while its worker "
                                           f"for GPU {gpu} (slot {index}) waited to start again")
                continue
            if rows:
                self.restarts += 1
                live.append(self._start(index, gpu, rows, ctx))
        if due:
            self._redeal(live)

    def _give_up(self, index: int, rows: list[dict], why: str, live: list[_Live]) -> None:
        """Slot `index` starts no more workers: its rows go to the workers still running (``_redeal``); a row
        none takes says `why` at the end."""
        self._given_up.add(index)
        held = [t for x in live for t in x.remaining] + [t for item in self._pending for t in item[3]]
        rows = [t for t in rows if t not in held]  # every worker runs every target (not dealt): others have it
        for t in rows:
            self._unrun[t.get("name", t["spec"])] = f"not run: {why}, and no other worker could take it"
        self._orphans += [t for t in rows if t not in self._orphans]
        self._redeal(live)

    def _redeal(self, live: list[_Live]) -> None:
        """Hand the orphaned rows to running workers with room for them, least loaded first (``deal.redeal``);
        the rows are theirs from now on (restarted with them if they die).  Rows none can take stay orphans."""
        rows = [t for t in self._orphans if t["spec"] not in self.done]
        if not rows:
            return
        takers = [x for x in live if not x.finished and x.process.is_alive()]
        if not takers:
            self._idle_take(live)
            return
        loads = [sum(cost(t) for t in x.remaining) for x in takers]
        hands = redeal(rows, loads, [self._room(x.spec.index) for x in takers])
        for x, hand in zip(takers, hands):
            if not hand:
                continue
            try:
                x.conn.send(("more", hand))
            except (OSError, ValueError):
                continue  # it is dying: its death hands them on
            x.remaining += hand
            for t in hand:
                self._orphans.remove(t)
                self._unrun.pop(t.get("name", t["spec"]), None)

    def _idle_take(self, live: list[_Live]) -> None:
        """No worker running to take the orphaned rows: start one on a slot that is idle (its worker ran its
        rows and ended; not waiting to restart, not given up) with those it has room for."""
        busy = {x.spec.index for x in live} | {item[1] for item in self._pending} | self._given_up
        for index, gpu in self._slot_gpus.items():
            rows = [t for t in self._orphans if t["spec"] not in self.done and t in self._orphans]
            if index in busy or self.deadline.over() or self._ctx is None or not rows:
                continue
            mine = redeal(rows, [0.0], [self._room(index)])[0]
            if mine:
                for t in mine:
                    self._orphans.remove(t)
                    self._unrun.pop(t.get("name", t["spec"]), None)
                self.restarts += 1
                live.append(self._start(index, gpu, mine, self._ctx))

    def _helps(self, w: _Live) -> bool:
        """Whether worker `w`, done with its dealt targets, is started again to help (``run.deal``)."""
        return (self.sopts.deal and w.finished and self.deadline.end is not None  # it said bye: its rows ran
                and self.deadline.end - time.monotonic() > HELP_AFTER)

    def _order(self) -> list[str]:
        names = [t.get("name", t["spec"]) for t in self.targets]
        return names + [n for n in self.reports if n not in names]

    def _stop_workers(self, live: list[_Live], grace: float = 30.0) -> None:
        """SIGTERM each worker (it ends its current example and reports), read what they send, then kill."""
        for w in live:
            if w.process.is_alive():
                w.process.terminate()
        until = time.monotonic() + grace
        pending = list(live)
        while pending and time.monotonic() < until:
            wait([w.conn for w in pending] + [w.process.sentinel for w in pending], timeout=0.25)
            for w in list(pending):
                try:
                    while w.conn.poll():
                        self._handle(w, w.conn.recv())
                except (EOFError, OSError):
                    pending.remove(w)
                    continue
                if not w.process.is_alive() and not w.conn.poll():
                    pending.remove(w)
        for w in live:
            if w.process.is_alive():
                w.process.kill()
            w.process.join(5)

    def _finish_target(self, w: _Live, name: str) -> None:
        self.done.add(name)
        w.remaining = [t for t in w.remaining if t["spec"] != name and t.get("name") != name]
        w.current_target = w.current_case = None
        self._save_state()

    def _handle(self, w: _Live, message) -> None:
        kind, body = message
        if kind == "hello":
            w.ready = True
            self._false_starts.pop(w.spec.index, None)
            _, end = body
            if self.deadline.end is None and end is not None:  # --time runs from the first worker ready
                self.deadline = dataclasses.replace(self.deadline, end=end)
        elif kind == "bye":
            w.finished = True
        elif kind == "target":
            w.current_target, w.current_case = body, None
            self._ran.setdefault(w.spec.index, set()).add(body)
        elif kind == "case":
            w.current_case, w.in_case = body, True
        elif kind == "idle":
            w.in_case = False
        elif kind == "alive":  # a repetition judged mid-case: heard (last_heard), nothing more
            pass
        elif kind == "found":
            rep = self.reports.get(body["target"])
            if rep is None:
                rep = self.reports[body["target"]] = TargetReport(body["target"], body["contract"])
            rep.finding = Finding.from_json(body)
            rep.written = True
            if self._shared() and rep.finding.verdict.kind in ("fault", "crash") and body.get("path"):
                self._suspects.append({"target": body["target"], "path": body["path"], "gpu": w.spec.gpu,
                                       "worker": w.spec.index})
            self.on_update(self.reports)
        elif kind in ("progress", "report"):
            body = {**body, "_worker": w.spec.index}
            self._merge(body)
            if kind == "report":
                self.reports[body["target"]].finished = True
                if body.get("interrupted"):  # stopped part-way: the next run resumes it
                    w.current_target = w.current_case = None
                else:
                    self._finish_target(w, body["target"])
            self.on_update(self.reports)


def plain_options(opts) -> dict:
    """FuzzOptions -> plain dict for a worker (profile by name, paths as strings); no deadline (the
    worker's comes in ``WorkerSpec.deadline``) and no turn_over or seeds (a campaign's worker makes its own)."""
    body = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts) if f.name not in ("deadline", "turn_over", "seeds")}
    body["profile"] = opts.profile.name
    body["crashes_dir"] = str(opts.crashes_dir) if opts.crashes_dir is not None else None
    if body["database"] is not None and not isinstance(body["database"], str):
        raise UsageError("a worker session needs the example database as a path or URL")
    return body

"""One worker of a campaign: lease an open target, fuzz it for a share of the time, give it back; again.

``Fleet`` is plain data (it crosses into spawned session workers); ``run/``
calls ``Fleet.loop`` in each worker process with a ``turn`` function of its
own (a session worker's narrates to its parent), and ``Fleet.session_found``
in a session's parent for a crash or hang finding it made itself.  So run/
imports nothing from here.

A turn: take a lease (``leases``); fuzz the target for the worker's time
left over its likely number of turns (``leases.turns_left``), its examples
capped by what the campaign still owes it, its corpus keyed by the versions
and its source digest, the cases other boxes found for it tried first
(``buckets.cases_of``: a box that died shrinking one left the corpus nothing),
its seed moved by the box and the turn; every finding
into the outbox the moment it is on disk (``outbox``), the keeper sending it;
at the end its final record, its counts, and done or open again (``Leases.finish``).
Between turns the pending buckets of this worker's kind are replayed
(``confirm``).  A stop signal ends the turn as it ends a run: the target goes
back open at once, what waits is sent if the hub answers within a few seconds,
and nothing found is anywhere but on disk first.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mambafuzz.errors import CaseError, UsageError
from mambafuzz.fleet import box, buckets, confirm, hub, leases
from mambafuzz.fleet.buckets import Pushed
from mambafuzz.fleet.hub import HubDown, Keys
from mambafuzz.fleet.outbox import Outbox
from mambafuzz.control import interrupt

POLL = 0.5          # seconds between asks while every open target has its workers, or the hub is down
FINAL_FLUSH = 5.0   # seconds a leaving worker gives the hub to take what waits
SEED_STRIDE = 1_000_003


@dataclass
class Fleet:
    """A campaign as this box joins it (made by ``command.setup``; picklable)."""

    url: str
    campaign: str
    box: str
    targets: list[dict]                 # the campaign's entries in order (name, spec, contract, overlap, path)
    spec: dict                          # the campaign's targets and options (its record on the hub: ``hub.join``)
    corpus_keys: dict[str, str]         # target -> versions and source digest (``box.corpus_key``)
    crashes_dir: str
    device: str = "cpu"
    ttl: float = 60.0                   # a lease's time to live; renewed every third of it
    per_target: int = 0                 # workers a target at most (0: as many as want it when none is free)
    confirm_timeout: float = 120.0
    confirm: bool = True                # replay pending buckets of this kind between turns

    @property
    def keys(self) -> Keys:
        return Keys(self.campaign)

    # ------------------------------------------------------------ a worker process
    def loop(self, turn: Callable, opts, deadline, resolve: Callable[[dict], object]) -> None:
        """Turns until no target is open, the deadline or a stop signal (see the module's docstring)."""
        state = _Worker(self, opts, deadline, resolve, turn)
        try:
            state.run()
        finally:
            state.close()

    # ------------------------------------------------------------ a session's parent
    def session_found(self, finding, suspect: bool) -> None:
        """A crash or hang finding the session made (its worker died or hung mid-case): pushed, and its
        target done unless it is a fault on a shared GPU still to be replayed alone (``run.confirm``)."""
        me = box.worker_id(self.box)
        where = self._where(me)
        outbox = Outbox(self.crashes_dir, self.campaign)
        record = _record(finding)
        if record is None:
            return
        item = Pushed(f"{me}:session:{finding.target}:{finding.case.content_hash()}", int(time.time() * 1000),
                      record, where, self.corpus_keys.get(finding.target, ""), time.time())
        outbox.put(item)
        client = hub.connect(self.url)
        try:
            outbox.flush(lambda campaign, it: buckets.push(client, Keys(campaign), it))
            if not suspect:
                leases.Leases(client, self.keys, me, self.targets, self.ttl).finish(
                    finding.target, self.box, "finding", finding.verdict.summary()[:200])
        except HubDown:
            pass  # the outbox keeps it; the box's last flush or `collect --from` sends it

    def _where(self, worker: str) -> dict:
        where = {**box.info(self.box, self.device), "worker": worker}
        where["kind"] = box.kind(self.device, where.get("gpu"))
        return where


def _record(finding) -> dict | None:
    """The crash file's body as written (what `replay` reads), or made again when it cannot be read."""
    from mambafuzz import findings  # deferred: crash files import the engine (numpy, the contracts)

    if finding.path is None:
        return None
    try:
        return json.loads(Path(finding.path).read_text())
    except (OSError, ValueError):
        return findings.to_record(finding, Path(finding.path))


@dataclass
class _Turn:
    """The hooks of one turn (what ``run/`` calls): findings into the outbox, counts to the keeper."""

    worker: "_Worker"
    target: str
    lineage: str
    before_examples: int = 0
    before_seconds: float = 0.0
    seq: int = 0
    found_at: float | None = None
    report: object = None

    def found(self, finding) -> None:
        record = _record(finding)
        if record is None:
            return
        self.seq += 1
        self.found_at = self.found_at or time.time()
        w = self.worker
        item = Pushed(self.lineage, self.seq, record, w.where, w.fleet.corpus_keys.get(self.target, ""),
                      self.found_at)
        w.outbox.put(item)
        w.pushed[self.lineage] = item
        w.keeper.wake()

    def progress(self, report) -> None:
        self.worker.keeper.progress(report.examples - self.before_examples, report.seconds - self.before_seconds)

    def ended(self, report) -> None:
        """The turn's report: its last record and counts out, the target done or open again."""
        self.report = report
        self.progress(report)
        if report.finding is not None and report.finding.path is not None:
            self.found(report.finding)  # the file as rewritten at the end (shrink counts, minimal)
        self.worker.finish(self.target, report)


class _Worker:
    """The state of one worker process in a campaign."""

    def __init__(self, fleet: Fleet, opts, deadline, resolve, turn):
        self.fleet, self.deadline, self.resolve, self.turn_fn = fleet, deadline, resolve, turn
        self.me = box.worker_id(fleet.box)
        self.where = fleet._where(self.me)
        base_seed = opts.seed + zlib.crc32(fleet.box.encode()) if opts.seed is not None else None
        self.opts = dataclasses.replace(opts, seed=base_seed)
        self.client = hub.connect(fleet.url)
        self.leases = leases.Leases(self.client, fleet.keys, self.me, fleet.targets, fleet.ttl, fleet.per_target)
        self.outbox = Outbox(opts.crashes_dir or fleet.crashes_dir, fleet.campaign)
        self.keeper = leases.Keeper(self.leases, fleet.box, every=max(0.2, fleet.ttl / 3), flush=self.flush,
                                    max_examples=opts.max_examples)
        self.reports: dict[str, object] = {}
        self.pushed: dict[str, Pushed] = {}  # lineage -> the newest version this process put out
        self.epoch: str | None = None        # the campaign record's epoch: a new one means the hub lost its data
        self.skip: set[str] = set()      # targets this worker cannot load (another box may)
        self.later: list[Callable[[], None]] = []  # hub writes that failed: tried again each round
        self.turns = 0

    # -- the hub
    def flush(self) -> None:
        """What failed earlier, then the outbox (the keeper's thread calls this each round).  A hub that
        lost the campaign (restarted without its data) gets its record again and this process's findings."""
        epoch = hub.call(self.client.hget, self.fleet.keys.meta, "epoch")
        if epoch is None:
            epoch = hub.join(self.client, self.fleet.keys, self.fleet.spec)["epoch"]
        if self.epoch is not None and epoch != self.epoch:
            print(f"mambafuzz: the hub lost campaign {self.fleet.campaign}'s data; sending {len(self.pushed)} "
                  f"finding(s) again (run it with --appendonly yes to keep it across restarts)",
                  file=sys.stderr, flush=True)
            for item in self.pushed.values():
                if not self.outbox.path(item.lineage).exists():
                    self.outbox.put(item)
        self.epoch = epoch
        while self.later:
            self.later[0]()
            self.later.pop(0)
        self.outbox.flush(lambda campaign, item: buckets.push(self.client, Keys(campaign), item))

    def now_or_later(self, write: Callable[[], None]) -> None:
        try:
            with self.keeper.lock:
                write()
        except HubDown:
            self.later.append(write)

    def finish(self, target: str, report) -> None:
        counts = self.keeper.counts
        self.keeper.hold(None)
        why = report.detail or (report.finding.verdict.summary()[:200] if report.finding else "")
        self.now_or_later(lambda: self.leases.send_counts(target, self.fleet.box, counts))
        self.now_or_later(lambda: self.leases.finish(target, self.fleet.box, self._stop_of(target, report), why or ""))
        try:
            with self.keeper.lock:
                self.flush()
        except HubDown:
            pass

    def _stop_of(self, target: str, report) -> str:
        """How the campaign sees the turn's end: a turn cut short when the boxes together ran the target's
        examples (``Keeper.max_examples``) ends it for good, as ``max-examples``."""
        if report.stop not in leases.DONE_STOPS and not report.interrupted and (
                self.leases.examples(target) >= self.opts.max_examples):
            return "max-examples"
        return report.stop

    # -- the loop
    def run(self) -> None:
        self.now_or_later(lambda: hub.call(self.client.hset, self.fleet.keys.workers, self.me,
                                           json.dumps(self.where)))
        self.keeper.start()
        while not interrupt.requested() and not self.deadline.over():
            self.confirm()
            try:
                lease = self.leases.take(self.skip)
            except HubDown:
                self.wait()
                continue
            if lease is None:
                break  # every target is done
            if isinstance(lease, int):
                self.wait()  # each open target has its workers: wait for one to free or finish
                continue
            report = self.one_turn(lease)
            if report is None:
                continue
            if report.interrupted or getattr(report, "context_lost", False):
                break
        self.confirm()

    def wait(self) -> None:
        until = time.monotonic() + POLL
        while time.monotonic() < until and not interrupt.requested() and not self.deadline.over():
            time.sleep(0.05)

    def one_turn(self, lease: leases.Lease):
        name = lease.target
        try:
            target = self.resolve(lease.entry)
        except UsageError as exc:
            print(f"mambafuzz: {self.me} cannot run {name}: {exc}; left to other boxes", file=sys.stderr, flush=True)
            self.skip.add(name)
            self.now_or_later(lambda: self.leases.release(name))
            return None
        before = self.reports.get(name)
        if before is not None and before.finding is not None:  # found here already: its done mark was lost
            self.skip.add(name)
            self.now_or_later(lambda: self.leases.finish(name, self.fleet.box, "finding"))
            return None
        try:
            owed = self.opts.max_examples - self.leases.examples(name)
        except HubDown:
            owed = self.opts.max_examples
        if owed <= 0:  # the boxes ran its examples between this lease and the last count
            self.now_or_later(lambda: self.leases.finish(name, self.fleet.box, "max-examples"))
            return None
        self.turns += 1
        seed = self.opts.seed + SEED_STRIDE * self.turns if self.opts.seed is not None else None
        done_before = before.examples if before is not None else 0
        topts = dataclasses.replace(self.opts, deadline=self.deadline.share(leases.turns_left(lease)),
                                    max_examples=done_before + owed, seed=seed, seeds=self.seeds(name),
                                    corpus_key=self.fleet.corpus_keys.get(name, ""), turn_over=self.keeper.turn_over)
        hooks = _Turn(self, name, f"{self.me}:{self.turns}", done_before,
                      before.seconds if before is not None else 0.0)
        self.keeper.hold(name)
        report = self.turn_fn(target, topts, before, hooks)
        if hooks.report is None:  # a turn function that did not call ended (it raised): give the target back
            self.keeper.hold(None)
            self.now_or_later(lambda: self.leases.release(name))
        self.reports[name] = report
        return report

    def seeds(self, name: str) -> tuple:
        """The cases other workers found for `name` (the best of each of its buckets), tried first."""
        from mambafuzz.contracts import case_from_json  # deferred: the contracts import numpy and the oracles: --help and the parser do without

        try:
            cases = buckets.cases_of(self.client, self.fleet.keys, name, self.fleet.corpus_keys.get(name, ""))
        except HubDown:
            return ()
        out = []
        for body in cases:
            try:
                out.append(case_from_json(body))
            except CaseError:
                continue
        return tuple(out)

    def confirm(self) -> None:
        if not self.fleet.confirm or interrupt.requested():
            return
        try:
            for key, state, line in confirm.confirm_pending(
                    self.client, self.fleet.keys, kind=self.where["kind"], device=self.fleet.device,
                    corpus_key=self.fleet.corpus_keys.get, worker=self.me, timeout=self.fleet.confirm_timeout):
                print(f"mambafuzz: bucket {key}: {state} ({line})", file=sys.stderr, flush=True)
        except HubDown:
            pass

    def close(self) -> None:
        """Leave: the keeper stopped, leases given back, what waits sent (for a few seconds at most)."""
        self.keeper.stop()
        until = time.monotonic() + FINAL_FLUSH
        while time.monotonic() < until:
            try:
                self.flush()
                self.leases.leave()
                return
            except HubDown:
                time.sleep(0.5)
        waiting = self.outbox.waiting(everyone=False)
        if waiting:
            print(f"mambafuzz: {waiting} finding(s) not on the hub yet: kept in {self.outbox.folder}",
                  file=sys.stderr, flush=True)

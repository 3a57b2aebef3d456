"""Target leases: a worker takes a target for a while, renews it as it fuzzes, gives it back.

A lease is a member of the zset ``lease:<target>`` (the worker's id, scored by
its expiry on the hub's clock).  ``take`` runs on the hub in one script: it
drops expired holders of every target not done, and gives the worker the
open target with the fewest holders, then the fewest seconds fuzzed so far,
then the first in the campaign's order; ``per_target`` caps the holders (0:
no cap, so a worker never idles while a target is open; 1: one worker a
target).  A worker renews its lease every third of its time to live; a worker
that dies loses it when it expires, and the target is open to the next one
that asks, which resumes from the shared corpus.  A target is done (``done``)
when a turn ends with a finding, its examples, an exhausted strategy or an
inconclusive verdict; a turn whose time share ran out, or that was stopped,
gives the target back open.

``Keeper`` is the worker's thread on the hub: heartbeat, renewal, the counts
of the turn in progress, and the outbox (``outbox.Outbox.flush``).
"""
from __future__ import annotations

import json
import math
import sys
import threading
import time
from dataclasses import dataclass, field

from mambafuzz.fleet import hub
from mambafuzz.fleet.hub import HubDown, Keys

# KEYS: done, fuzzed, alive.  ARGV: worker, ttl ms, per_target cap, lease key prefix, target names...
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local worker, ttl, cap, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
redis.call('ZADD', KEYS[3], now + ttl, worker)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local best, best_holders, best_seconds, open = nil, 0, 0, 0
for i = 5, #ARGV do
  local name = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], name) == 0 then
    open = open + 1
    local lk = prefix .. name
    redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
    redis.call('ZREM', lk, worker)
    local holders = redis.call('ZCARD', lk)
    local seconds = tonumber(redis.call('HGET', KEYS[2], name) or '0')
    if (cap == 0 or holders < cap) and (best == nil or holders < best_holders
        or (holders == best_holders and seconds < best_seconds)) then
      best, best_holders, best_seconds = name, holders, seconds
    end
  end
end
if best then redis.call('ZADD', prefix .. best, now + ttl, worker) end
return {best or '', open, redis.call('ZCARD', KEYS[3])}
"""

# KEYS: lease, done, alive.  ARGV: worker, ttl ms, cap, target.  'ok', 'done', 'retaken' or 'lost'.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local worker, ttl, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], now + ttl, worker)
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 1 then
  redis.call('ZREM', KEYS[1], worker)
  return 'done'
end
local held = tonumber(redis.call('ZSCORE', KEYS[1], worker) or '0')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if held > now then
  redis.call('ZADD', KEYS[1], now + ttl, worker)
  return 'ok'
end
if cap == 0 or redis.call('ZCARD', KEYS[1]) < cap then
  redis.call('ZADD', KEYS[1], now + ttl, worker)
  return 'retaken'
end
return 'lost'
"""

DONE_STOPS = ("finding", "max-examples", "exhausted", "inconclusive", "internal-error")


@dataclass
class Lease:
    target: str           # its name
    entry: dict           # the campaign's entry for it (spec, contract, overlap, path)
    open: int             # targets not done when it was taken (this one included)
    workers: int          # workers alive then


@dataclass
class Counts:
    """A turn's counts on their way to the hub: what this process reported and what the hub has."""

    examples: int = 0
    seconds: float = 0.0
    sent_examples: int = 0
    sent_seconds: float = 0.0


class Leases:
    """One worker's view of the campaign's leases (every call may raise HubDown)."""

    def __init__(self, client, keys: Keys, worker: str, targets: list[dict], ttl: float, per_target: int = 0):
        self.client, self.keys, self.worker = client, keys, worker
        self.targets = targets
        self.by_name = {t["name"]: t for t in targets}
        self.ttl_ms = max(100, int(ttl * 1000))
        self.per_target = per_target
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)

    def take(self, exclude=frozenset()) -> Lease | None | int:
        """A lease on the open target that needs a worker most (of those not in `exclude`); None when every
        such target is done; the number of open targets (an int) when each has its cap of workers already
        (wait and ask again)."""
        names = [t["name"] for t in self.targets if t["name"] not in exclude]
        name, open_, workers = hub.call(self._take, keys=[self.keys.done, self.keys.fuzzed, self.keys.alive],
                                        args=[self.worker, self.ttl_ms, self.per_target, self.keys.lease("")] + names)
        if not int(open_):
            return None
        if not name:
            return int(open_)
        return Lease(name, self.by_name[name], int(open_), max(1, int(workers)))

    def renew(self, target: str | None) -> str:
        """Heartbeat, and the lease on `target` renewed: 'ok', 'retaken' (it had lapsed and was free),
        'done' (another worker finished the target) or 'lost' (it lapsed and others hold it)."""
        if target is None:
            now = hub.now_ms(self.client)
            hub.call(self.client.zadd, self.keys.alive, {self.worker: now + self.ttl_ms})
            return "ok"
        return hub.call(self._renew, keys=[self.keys.lease(target), self.keys.done, self.keys.alive],
                        args=[self.worker, self.ttl_ms, self.per_target, target])

    def send_counts(self, target: str, box: str, counts: Counts) -> None:
        """Add the examples and seconds this process fuzzed `target` since it last sent them."""
        examples, seconds = counts.examples - counts.sent_examples, counts.seconds - counts.sent_seconds
        if examples <= 0 and seconds <= 0.01:
            return
        pipe = self.client.pipeline()
        pipe.hincrby(self.keys.examples(target), box, examples)
        pipe.hincrbyfloat(self.keys.seconds(target), box, round(seconds, 3))
        pipe.hincrbyfloat(self.keys.fuzzed, target, round(seconds, 3))
        hub.call(pipe.execute)
        counts.sent_examples, counts.sent_seconds = counts.examples, counts.seconds

    def examples(self, target: str) -> int:
        """Examples every box has run on `target` (as sent so far)."""
        return sum(int(v) for v in hub.call(self.client.hvals, self.keys.examples(target)))

    def finish(self, target: str, box: str, stop: str, why: str = "") -> bool:
        """The turn on `target` ended with `stop`: done (for good, unless another worker said so first) or
        open again; the lease given back either way.  Whether the target is now done."""
        pipe = self.client.pipeline()
        if stop in DONE_STOPS:
            pipe.hsetnx(self.keys.done, target, json.dumps({"stop": stop, "why": why, "box": box,
                                                             "worker": self.worker, "at": time.time()}))
        pipe.zrem(self.keys.lease(target), self.worker)
        hub.call(pipe.execute)
        return stop in DONE_STOPS

    def release(self, target: str) -> None:
        hub.call(self.client.zrem, self.keys.lease(target), self.worker)

    def leave(self) -> None:
        """This worker is gone: no heartbeat, no lease."""
        pipe = self.client.pipeline()
        pipe.zrem(self.keys.alive, self.worker)
        for t in self.targets:
            pipe.zrem(self.keys.lease(t["name"]), self.worker)
        hub.call(pipe.execute)


def turns_left(lease: Lease) -> int:
    """How many targets this worker is likely to fuzz, this one included: the open ones over the workers
    alive (what a ``Deadline.share`` of the worker's time divides by)."""
    return max(1, math.ceil(lease.open / max(1, lease.workers)))


@dataclass
class Keeper:
    """The worker's thread on the hub: every `every` seconds a heartbeat, the lease of the target being
    fuzzed renewed, its counts sent, and the outbox flushed (`flush`, when given).  The first failure to
    reach the hub and its return are each said once, on stderr.  `over` is why the current turn should
    end (another worker finished its target; its lease went to others), for the fuzz loop to read."""

    leases: Leases
    box: str
    every: float
    flush: object = None                 # a callable: push what waits in the outbox
    max_examples: int | None = None      # a target the boxes ran this many examples of is over for everyone
    target: str | None = None
    counts: Counts = field(default_factory=Counts)
    over: str | None = None
    down: str | None = None              # why the hub did not answer last time (None: it did)
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "Keeper":
        self._thread = threading.Thread(target=self._run, name="mambafuzz-fleet-keeper", daemon=True)
        self._thread.start()
        return self

    def hold(self, target: str | None) -> None:
        """The target this worker fuzzes now (None between turns); its counts start at zero."""
        with self.lock:
            self.target, self.counts, self.over = target, Counts(), None

    def progress(self, examples: int, seconds: float) -> None:
        self.counts.examples, self.counts.seconds = examples, seconds

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=hub.TIMEOUT * 3)

    def turn_over(self) -> str | None:
        return self.over

    def beat(self) -> None:
        """One round on the hub (also called from the worker's own thread between turns)."""
        with self.lock:
            target, counts = self.target, self.counts
            try:
                state = self.leases.renew(target)
                if target is not None:
                    self.leases.send_counts(target, self.box, counts)
                    if state == "done":
                        self.over = "another worker finished this target"
                    elif state == "lost":
                        self.over = "its lease lapsed and other workers hold the target"
                    elif self.max_examples is not None and self.leases.examples(target) >= self.max_examples:
                        self.over = "the boxes ran its examples"
                if self.flush is not None:
                    self.flush()
            except HubDown as exc:
                self._said(str(exc))
                return
        self._said(None)

    def _said(self, down: str | None) -> None:
        if down is not None and self.down is None:
            print(f"mambafuzz: the hub does not answer ({down}); fuzzing on, findings wait in the outbox",
                  file=sys.stderr, flush=True)
        elif down is None and self.down is not None:
            print("mambafuzz: the hub answers again; sending what waited", file=sys.stderr, flush=True)
        self.down = down

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.every)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive one bad round; say it once
                self._said(f"{type(exc).__name__}: {exc}")

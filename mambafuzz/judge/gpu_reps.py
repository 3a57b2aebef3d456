"""Many repetitions of one case on the device, judged on the device, one sync per batch.

A repetition is the target's launches on the current stream, then the judge's
(one for ``judge.check.CheckRestore``, two for ``ChunkCheck``): count the
bytes that differ from the oracle into ``counter[rep]`` and leave the arena
fit for the next repetition.  Before the first repetition the arena is brought
back to the snapshot, moving only what can differ from it (``_start``).  The
host reads ``counter`` once, at the end.

Where it can, the launches go through a CUDA graph: K repetitions are captured
once (the check's slot is ``k + slot_base[0]``, and the graph ends by adding K
to ``slot_base``) and the graph is replayed ``reps // K`` times; the few
repetitions left over run as plain launches.  A target that cannot be captured
(the torch path synchronises with ``.tolist()``; a user adapter may do
anything) makes the capture raise; the batch then runs as a plain launch loop,
still judged on the device with one sync, and ``fallback_reason`` says why.

Two judges (``choose_judge``): ``full`` (``CheckRestore`` over the whole
arena, every repetition) for small and sparse arenas, where a repetition costs
its launches, not its bytes; ``chunks`` (``judge.check.ChunkCheck``) for dense
arenas of ``CHUNK_MIN_BYTES`` or more, where reading the arena, expectation and
snapshot and writing the arena every repetition would cost twice the target's
own traffic.  ``chunk_plan`` says which chunks a repetition judges (those a
correct target changes) and restores (those, unless the case is idempotent):
ARCHITECTURE.md "Repetitions and amplification on a GPU" argues the design.
On the chunks path the arena is left as the last repetition left it (the
destinations may hold the expectation); ``run_reps`` and ``failing_mismatch``
restore before they run.

The decisions (whether to try a graph, how to cut ``reps`` into replays and a
tail, what to do when the capture fails) are the pure functions
``use_graph``, ``plan_batches`` and ``drive``; the CUDA specifics are behind
the ``capture`` callable, so all of it is testable on the CPU with fakes (and
``run_reps`` itself runs on CPU tensors through Triton's interpreter).
"""
from __future__ import annotations

import operator
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from mambafuzz import contracts
from mambafuzz.control.clock import Deadline, progressed
from mambafuzz.judge.materialize import Materialized, Mismatch

DEFAULT_K = 16          # repetitions per captured graph (at most)
MIN_GRAPH_REPS = 32     # graph=None: fewer repetitions than this are not worth a capture
RERUN_ATTEMPTS = 16     # plain reruns tried to reproduce a failing repetition's bytes
GRAPH_ENV = "MAMBAFUZZ_CUDA_GRAPH"  # "0": never capture, "1": always try, unset: auto
HOST_REPS_ENV = "MAMBAFUZZ_HOST_REPS"  # "1": the engine keeps the old host loop on cuda (A/B of race rates)
JUDGE_ENV = "MAMBAFUZZ_REPS_JUDGE"    # "full" | "chunks": force a judge (A/B); unset: by arena size
JUDGES = ("full", "chunks")
CHUNK_MIN_BYTES = 16 << 20  # dense arenas at least this big are judged by chunks
FULL_EVERY = 32             # the chunks judge reads every chunk once in this many repetitions (and at the end)
LOOP_MIN_BYTES = 256 << 20  # graph=None: arenas this big run as a plain launch loop (see use_graph)


@dataclass
class RepResult:
    failures: int                   # repetitions with a nonzero mismatch count
    reps: int
    per_rep_mismatch: np.ndarray    # int64 [reps]: differing bytes (arena + accepted counts) per repetition
    first_failing_rep: int | None
    used_graph: bool
    fallback_reason: str | None     # why no graph was used (None: graph=False, or a graph was used)
    judge: str = "full"             # which judge ran: "full" (CheckRestore) or "chunks" (ChunkCheck)


@dataclass(frozen=True)
class BatchPlan:
    """``replays`` replays of a K-repetition graph, then ``tail`` plain repetitions."""

    k: int
    replays: int
    tail: int

    @property
    def reps(self) -> int:
        return self.k * self.replays + self.tail

    def tail_slots(self) -> range:
        return range(self.k * self.replays, self.reps)


def plan_batches(reps: int, k: int = DEFAULT_K) -> BatchPlan:
    """Cut `reps` into equal graphs of at most `k` repetitions and a tail shorter than the graph count.

    K = reps // ceil(reps / k): 100 reps with k 16 -> 7 replays of 14 and a tail of 2.
    """
    reps, k = operator.index(reps), operator.index(k)
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    graphs = -(-reps // k)
    kk = reps // graphs
    return BatchPlan(kk, graphs, reps - graphs * kk)


def use_graph(reps: int, graph: bool | None, capturable: bool, arena_bytes: int = 0) -> tuple[bool, str | None]:
    """Whether to try a capture, and if not, why (None when the caller asked for no graph).

    Auto (`graph` None) also skips arenas of LOOP_MIN_BYTES or more: a
    repetition's bytes then take longer than its launches (which the host
    queues ahead of the device), while a capture's two warm-up repetitions
    cost two repetitions' bytes and more.
    """
    if graph is False:
        return False, None
    if not capturable:
        return False, "no CUDA graph on this device"
    if graph is None and reps < MIN_GRAPH_REPS:
        return False, f"{reps} repetitions: fewer than {MIN_GRAPH_REPS} are not worth a capture"
    if graph is None and arena_bytes >= LOOP_MIN_BYTES:
        return False, (f"a {arena_bytes >> 20} MiB arena: its repetitions are bound by bytes, not launches, "
                       f"and a capture's warm-up costs two of them")
    return True, None


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@dataclass
class Drive:
    used_graph: bool
    fallback_reason: str | None
    graph: Any = None  # keep the captured graph alive until the batch has been synchronised
    done: int = 0      # slots launched, from 0 (all of the plan's unless a TimeBox stopped it)


QUIET_SECONDS = 10.0  # the longest a batch launched ahead may keep the host waiting on it unpaced


class TimeBox:
    """Whether a batch may launch more repetitions: none past the `deadline`'s end.

    A batch is launched ahead of the device, so the host's clock says nothing
    about how far the device has got.  After the first unit (a graph replay or
    a repetition) one ``sync()`` measures it; a batch whose remaining units fit
    before `end` (if any) and within ``QUIET_SECONDS`` is then left alone, and
    only one that would not is paced: a sync before every further unit, each
    heard as progress (``clock.progressed``), and none launched past `end`.  (A zoo kernel copying a 2.35 GB slot stride under
    warp delays ran one example for two minutes past a 150 s run's end.)
    """

    def __init__(self, deadline: Deadline, sync: Callable[[], None], clock: Callable[[], float] = time.monotonic):
        self.end, self.sync, self.clock = deadline.end, sync, clock  # `clock`: the deadline's (tests pace a fake one)
        self.start = None
        self.paced: bool | None = None

    def allows(self, done: int, total: int) -> bool:
        """May unit `done` (0-based) of `total` be launched?  Each unit the device finished is progress
        (``clock.progressed``: a session's hang check hears of it), so a batch whose rest would keep the
        host waiting longer than ``QUIET_SECONDS`` is paced too: a slow example is not a silent one."""
        if done == 0:
            self.start = self.clock()
            return True
        if self.paced is None:
            self.sync()
            progressed()
            now = self.clock()
            rest = (now - self.start) / done * (total - done)
            self.paced = rest > QUIET_SECONDS or (self.end is not None and now + rest > self.end)
        if not self.paced:
            return True
        self.sync()
        progressed()
        return self.end is None or self.clock() <= self.end


def drive(plan: BatchPlan, try_graph: bool, capture: Callable[[], Any], launch_rep: Callable[[int], None],
          reset: Callable[[], None], reason: str | None = None, box: TimeBox | None = None) -> Drive:
    """Run the slots of `plan` in order, each at most once: by graph replays + tail launches, or by
    plain launches; all of them unless `box` stops the batch (``Drive.done`` says how many ran).

    `capture()` returns an object with ``replay()`` that runs the plan's K
    repetitions into the next K slots; any exception from it means "no
    graph": `reset()` restores the inputs and every slot runs through
    `launch_rep(slot)`.
    """
    allows = box.allows if box is not None else (lambda done, total: True)
    graph = None
    if try_graph:
        try:
            graph = capture()
        except Exception as exc:  # noqa: BLE001 - any capture failure means "use the loop"
            reason = f"capture failed: {describe(exc)}"
            reset()
    if graph is None:
        for slot in range(plan.reps):
            if not allows(slot, plan.reps):
                return Drive(False, reason, done=slot)
            launch_rep(slot)
        return Drive(False, reason, done=plan.reps)
    units = plan.replays + plan.tail
    for i in range(plan.replays):
        if not allows(i, units):
            return Drive(True, None, graph, done=i * plan.k)
        graph.replay()
    for j, slot in enumerate(plan.tail_slots()):
        if not allows(plan.replays + j, units):
            return Drive(True, None, graph, done=slot)
        launch_rep(slot)
    return Drive(True, None, graph, done=plan.reps)


class CaptureError(RuntimeError):
    pass


def cuda_capture(body: Callable[[], None], warmup: Callable[[], None]):
    """Capture `body` in a CUDA graph on a side stream after warming up on it.

    The warm-up runs twice outside capture: once to compile and lazily
    initialise everything, once with torch's sync debug mode set to "error" so a
    target that synchronises with the host is refused before a capture is
    attempted (a sync inside a capture invalidates it).  torch.cuda.graph() is
    not used: its __enter__ synchronises and empties the allocator cache, and
    its __exit__ leaves the side stream current when capture_end raises.
    """
    prev = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(prev)
    try:
        with torch.cuda.stream(side):
            warmup()
            mode = torch.cuda.get_sync_debug_mode()
            with warnings.catch_warnings():  # torch's "prototype feature" note, once in every worker's log
                warnings.filterwarnings("ignore", message="Synchronization debug mode")
                torch.cuda.set_sync_debug_mode("error")
            try:
                warmup()
            except RuntimeError as exc:
                if "synchroniz" in str(exc):
                    raise CaptureError(f"the target synchronises with the host ({describe(exc)})") from exc
                raise
            finally:
                torch.cuda.set_sync_debug_mode(mode)
            g = torch.cuda.CUDAGraph()
            g.capture_begin(capture_error_mode="thread_local")
            failed = None
            try:
                body()
            except BaseException as exc:  # noqa: BLE001 - capture_end must run whatever happened
                failed = exc
            try:
                with warnings.catch_warnings():  # a case with nothing to launch (no rows) captures nothing
                    warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
                    g.capture_end()
            except Exception as exc:
                if failed is None:
                    raise
                raise CaptureError(f"{describe(failed)}; then capture_end: {describe(exc)}") from failed
            if failed is not None:
                raise failed
    finally:
        prev.wait_stream(side)
    return g


@dataclass(frozen=True)
class ChunkPlan:
    """Which chunks the chunks judge reads every repetition, and which of them it restores."""

    order: np.ndarray   # int64: every chunk id once, the changed chunks first
    n_check: int        # chunks a correct repetition changes: judged every repetition
    n_restore: int      # n_check, or 0 when the case is idempotent
    idempotent: bool


def chunk_plan(m: Materialized, chunk_bytes: int) -> ChunkPlan:
    """The chunks judge's plan for a dense case (see ARCHITECTURE.md).

    Changed chunks: those holding a byte where the expectation differs from
    the snapshot, listed from the highest down.  Idempotent: the contract's
    oracle, run on the expectation, gives the expectation back, i.e. no byte a
    correct target reads is one it changed; then nothing needs restoring after
    a passing repetition.
    """
    if m.positions is not None:
        raise ValueError("chunk_plan: sparse cases are judged in full")
    n = int(m.snapshot.size)
    n_chunks = -(-n // chunk_bytes)
    changed = np.zeros(n_chunks * chunk_bytes, dtype=bool)
    np.not_equal(m.expected, m.snapshot, out=changed[:n])
    hot = changed.reshape(n_chunks, chunk_bytes).any(axis=1)
    idempotent = not hot.any() or _idempotent(m)
    # changed chunks from the highest down: a copy's programs mostly run in address order, so the end
    # of what it wrote is the likeliest to be in L2 still when the judge's first programs read it
    # (0.2-1.3 points of copy_ on a large repetition, bench/judge_order.py)
    order = np.concatenate([np.flatnonzero(hot)[::-1], np.flatnonzero(~hot)]).astype(np.int64)
    n_check = int(hot.sum())
    return ChunkPlan(order, n_check, 0 if idempotent else n_check, idempotent)


def _idempotent(m: Materialized) -> bool:
    """Whether a second correct run on the expectation would change nothing (one oracle run)."""
    contract = contracts.of(m.case)
    expected = np.ascontiguousarray(m.expected)
    arena = torch.from_numpy(expected.copy())  # the oracle reads the snapshot; the arena only gives views
    again = contract.prepare(m.case, contract.image(m.case), expected, arena, "cpu").expected
    return bool(np.array_equal(again, expected))


def choose_judge(m: Materialized, judge: str | None = None) -> str:
    """``judge`` if given, else ``MAMBAFUZZ_REPS_JUDGE`` (other values ignored, like
    ``MAMBAFUZZ_CUDA_GRAPH``'s), else by size; sparse cases always "full"."""
    if judge is not None and judge not in JUDGES:
        raise ValueError(f"unknown repetition judge {judge!r}; known: {', '.join(JUDGES)}")
    if judge is None and os.environ.get(JUDGE_ENV, "").strip() in JUDGES:
        judge = os.environ[JUDGE_ENV].strip()
    if m.positions is not None:
        return "full"
    if judge is None:
        return "chunks" if m.arena.numel() >= CHUNK_MIN_BYTES else "full"
    return judge


class _Buffers:
    """The device copies a check needs, made once per Materialized and judge."""

    def __init__(self, m: Materialized, judge: str = "full", words: int | None = None,
                 full_every: int = FULL_EVERY):
        dev = m.arena.device
        aux = {}
        if m.outputs:  # the one exact in-place output (device_judgeable) rides along as the aux buffer
            out = m.outputs[0]
            live = m.args[out.name]
            want = out.expected if isinstance(out.expected, torch.Tensor) else \
                torch.from_numpy(np.ascontiguousarray(out.expected))
            want = want.to(dev).to(live.dtype)
            if want.numel() != live.numel():
                raise ValueError(f"the expected {out.name} and the argument differ in length")
            aux = dict(aux=live, aux_snapshot=m.output_snapshots[out.name], aux_expected=want)
        from mambafuzz.judge.check import CHUNK_WORDS, CheckRestore, ChunkCheck  # deferred: torch: the GPU batch only where repetitions are judged on the device

        self.plan = None
        if m.device_positions is None:
            expected = torch.from_numpy(np.ascontiguousarray(m.expected)).to(dev)
            aligned = all(t.data_ptr() % 8 == 0 for t in (m.arena, expected, m.arena_snapshot))
            if judge == "chunks" and aligned:
                words = words or CHUNK_WORDS
                self.plan = chunk_plan(m, 8 * words)
                self.check = ChunkCheck(m.arena, expected, m.arena_snapshot, self.plan.order,
                                        self.plan.n_check, self.plan.n_restore, full_every=full_every,
                                        words=words, **aux)
            else:
                self.check = CheckRestore(m.arena, expected, m.arena_snapshot, m.arena.numel(), **aux)
        else:
            live = m.positions >= 0
            expected = torch.from_numpy(np.ascontiguousarray(m.expected[live])).to(dev)
            self.check = CheckRestore(m.arena, expected, m.arena_snapshot, expected.numel(),
                                      positions=m.device_positions, **aux)
        self.judge = "chunks" if self.plan is not None else "full"
        self._work = None

    def workspace(self, reps: int) -> tuple[torch.Tensor, ...]:
        """Zeroed int64 views for a batch of `reps`: zero base, slot base, scratch (one word each)
        and the counter, at 16-byte offsets in one buffer kept between batches."""
        need = 6 + reps
        if self._work is None or self._work.numel() < need:
            self._work = torch.empty(max(need, 2 * reps), dtype=torch.int64, device=self.check.arena.device)
        w = self._work[:need]
        w.zero_()
        return w[0:1], w[2:3], w[4:5], w[6:need]

    def __call__(self, counter, slot, slot_base, last_slot: int) -> None:
        """Judge one repetition whose absolute slot the host cannot tell (a graph's): the chunks
        judge's walk launch decides on the device whether it is full."""
        if self.plan is None:
            self.check(counter, slot, slot_base)
        else:
            self.check(counter, slot, slot_base, last_slot)

    def plain(self, counter, slot: int, zero_base, last_slot: int) -> None:
        """Judge a plain launch's repetition, absolute `slot`: the chunks judge walks the other
        chunks only when it is full (``ChunkCheck.is_full``), on a program per chunk; no walk
        launch that would exit at once."""
        if self.plan is None:
            return self(counter, slot, zero_base, last_slot)
        self.check(counter, slot, zero_base, last_slot, walk=False)
        if self.check.is_full(slot, last_slot):
            self.check.walk(counter, slot, zero_base)

    @staticmethod
    def of(m: Materialized, judge: str = "full", words: int | None = None,
           full_every: int = FULL_EVERY) -> "_Buffers":
        cache = m.__dict__.setdefault("_gpu_reps_buffers", {})
        key = (judge, words, full_every)
        if key not in cache:
            cache[key] = _Buffers(m, judge, words, full_every)
        return cache[key]


def device_reps_enabled() -> bool:
    return os.environ.get(HOST_REPS_ENV, "").strip() != "1"


def graph_from_env() -> bool | None:
    v = os.environ.get(GRAPH_ENV, "").strip()
    return {"0": False, "1": True}.get(v)


def _runner(m: Materialized, fn, amplifiable: bool | None) -> Callable[[], None]:
    if amplifiable is None:
        return lambda: m.run(fn)
    return lambda: m.run(fn, amplifiable)


def _sync_of(dev: torch.device) -> Callable[[], None]:
    """Waiting for `dev`'s queued work: ``torch.cuda.synchronize`` on a GPU, nothing on the CPU."""
    return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def _start(m: Materialized, bufs: "_Buffers") -> None:
    """Bring the arena to the snapshot before a batch, moving only what can differ: nothing after
    ``materialize`` or a restore, the changed chunks after a chunk-judged batch (half of a
    region-to-region arena), else all of it."""
    if m.arena_holds == "nothing":
        return
    if m.arena_holds == "changes" and bufs.plan is not None:
        bufs.check.restore_changed()
        m.arena_holds = "nothing"
        return
    m.restore()


def run_reps(m: Materialized, fn, reps: int, *, graph: bool | None = None, k: int = DEFAULT_K,
             capture: Callable | None = None, amplifiable: bool | None = None, judge: str | None = None,
             chunk_words: int | None = None, full_every: int = FULL_EVERY, deadline: Deadline = Deadline(),
             clock: Callable[[], float] = time.monotonic) -> RepResult:
    """Run `fn` on `m` `reps` times, each judged (and restored as needed) on the device; one host sync.

    `graph`: True tries a CUDA graph, False never does, None tries one when
    `reps` >= MIN_GRAPH_REPS.  `capture(body, warmup)` replaces `cuda_capture`
    (tests pass fakes; with one given, CPU tensors may take the graph path).
    `judge` "full" / "chunks" / None (``choose_judge``); `chunk_words` and
    `full_every` shape the chunks judge (tests use small chunks).  `deadline`
    (its end on `clock`): launch no repetition past it (``TimeBox``), the first
    excepted; ``RepResult.reps`` counts those that ran, and a chunk-judged
    batch cut short still ends with every chunk judged.
    """
    plan = plan_batches(reps, k)
    bufs = _Buffers.of(m, choose_judge(m, judge), chunk_words, full_every)
    run = _runner(m, fn, amplifiable)
    dev = m.arena.device
    sync = _sync_of(dev)
    last = reps - 1
    _start(m, bufs)
    # Every check passes a slot base (one compiled variant; warm-up, capture and loop all use it).
    # zero_base: plain launches (absolute slots); slot_base: the graph's, advanced by K per replay;
    # scratch: the warm-up's count, never read.  One zeroed workspace holds them (a launch, not four:
    # the batch's head is GPU time lost), each 16-byte aligned as fresh allocations are, so Triton
    # sees the same pointer alignment everywhere and nothing compiles during the capture.
    zero_base, slot_base, scratch, counter = bufs.workspace(reps)

    def launch_rep(slot: int) -> None:
        run()
        bufs.plain(counter, slot, zero_base, last)

    def body() -> None:
        for i in range(plan.k):
            run()
            bufs(counter, i, slot_base, last)
        slot_base.add_(plan.k)

    def warmup() -> None:  # the same launches as body(), outside the capture (a full judgement)
        run()
        bufs(scratch, 0, zero_base, 0)

    dense_bytes = m.arena.numel() if m.positions is None else 0
    try_graph, reason = use_graph(reps, graph, dev.type == "cuda" or capture is not None, dense_bytes)
    cap = capture or cuda_capture
    d = drive(plan, try_graph, lambda: cap(body, warmup), launch_rep, m.restore, reason,
              TimeBox(deadline, sync, clock))
    if d.done < reps and bufs.plan is not None:  # its last repetition walked only the changed chunks
        bufs.check.walk(counter, d.done - 1, zero_base)
    per_rep = counter[:d.done].cpu().numpy()  # the one host synchronisation of the batch
    # the chunks judge leaves the arena differing from the snapshot only where a correct repetition
    # changes it (its last repetition is full); the full judge restores all of it every repetition
    m.arena_holds = "changes" if bufs.plan is not None else "nothing"
    used, why, done = d.used_graph, d.fallback_reason, d.done
    del d  # the graph (and its memory pool) may go now that the batch has finished
    bad = np.flatnonzero(per_rep)
    return RepResult(failures=int(bad.size), reps=done, per_rep_mismatch=per_rep,
                     first_failing_rep=int(bad[0]) if bad.size else None,
                     used_graph=used, fallback_reason=why, judge=bufs.judge)


def failing_mismatch(m: Materialized, fn, result: RepResult, *, attempts: int = RERUN_ATTEMPTS,
                     sync: Callable[[], None] | None = None, amplifiable: bool | None = None,
                     deadline: Deadline = Deadline(), clock: Callable[[], float] = time.monotonic) -> Mismatch | None:
    """The first differing bytes of a failing repetition, for the report.

    The arena holds no trace of it (every check restored it), so the
    repetition is rerun the plain way (restore, launch, synchronise,
    ``m.compare()``) until it fails again, at most `attempts` times, and none
    after the first once `clock` is past the `deadline`'s end.  A racy failure may not come
    back: the Mismatch then carries the device's byte count and a note instead
    of first bytes.
    """
    if result.first_failing_rep is None:
        return None
    if sync is None:
        sync = _sync_of(m.arena.device)
    run = _runner(m, fn, amplifiable)
    tried = 0
    while tried < attempts and (tried == 0 or deadline.end is None or clock() <= deadline.end):
        tried += 1
        m.restore()
        run()
        sync()
        mm = m.compare()
        if mm is not None:
            return mm
    m.restore()
    rep = result.first_failing_rep
    total = int(m.snapshot.size)
    return Mismatch(int(result.per_rep_mismatch[rep]), total, [],
                    note=f"repetition {rep} differed in {int(result.per_rep_mismatch[rep])} bytes on the device "
                         f"(arena and accepted counts); {tried} plain reruns did not fail again, "
                         f"so no first bytes")

"""Device-side repetitions: judge.check.check_restore and mambafuzz.judge.gpu_reps.

On the CPU: the batching / graph-fallback decisions with fakes, check_restore
through Triton's interpreter on hand-made buffers (exact byte counts, arena
restored), and run_reps end to end in loop mode and with a fake "graph" (an
object whose replay() runs the recorded body eagerly).  With
``MAMBAFUZZ_DEVICE=cuda pytest -m gpu tests/unit/test_gpu_reps.py`` the same
check_restore tests run compiled, plus run_reps with real CUDA graphs.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT,):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from common import eager_capture  # noqa: E402
from mambafuzz import kernels  # noqa: E402
from mambafuzz.kernels import registry  # noqa: E402
from mambafuzz.judge import check as check_module  # noqa: E402
from mambafuzz.judge.check import CheckRestore, ChunkCheck, check_restore, check_restore_sparse  # noqa: E402
from mambafuzz.control.clock import Deadline  # noqa: E402
from mambafuzz.judge import engine  # noqa: E402
from mambafuzz.judge import gpu_reps
from mambafuzz.contracts import pools as pool_contracts  # noqa: E402
from mambafuzz.cases.batch_memcpy import BatchCopyCase  # noqa: E402
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.judge.gpu_reps import (BatchPlan, drive, failing_mismatch, plan_batches, run_reps,  # noqa: E402
                                use_graph)
from mambafuzz.judge.materialize import materialize  # noqa: E402
from mambafuzz.oracle import PoolLayout  # noqa: E402

if kernels.INTERPRETED:
    DEVICES = [pytest.param("cpu", id="cpu")]
else:
    DEVICES = [pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def _racy():
    """The hand-built GPU geometries (mambafuzz.racy_cases)."""
    import racy_cases
    return racy_cases


# --------------------------------------------------------------------------
# pure decisions
# --------------------------------------------------------------------------
@pytest.mark.parametrize("reps,k,want", [
    (1, 16, BatchPlan(1, 1, 0)),
    (16, 16, BatchPlan(16, 1, 0)),
    (17, 16, BatchPlan(8, 2, 1)),
    (100, 16, BatchPlan(14, 7, 2)),
    (100, 25, BatchPlan(25, 4, 0)),
    (101, 25, BatchPlan(20, 5, 1)),
    (5, 1, BatchPlan(1, 5, 0)),
])
def test_plan_batches_examples(reps, k, want):
    assert plan_batches(reps, k) == want


@given(st.integers(1, 100_000), st.integers(1, 512))
def test_plan_batches_covers_every_rep_once(reps, k):
    p = plan_batches(reps, k)
    assert p.reps == reps
    assert 1 <= p.k <= min(k, reps)
    assert 0 <= p.tail < p.replays  # the tail is shorter than the number of graphs
    assert list(p.tail_slots()) == list(range(p.k * p.replays, reps))


@pytest.mark.parametrize("bad", [(0, 16), (-3, 16), (10, 0)])
def test_plan_batches_rejects_nonsense(bad):
    with pytest.raises(ValueError):
        plan_batches(*bad)


def test_use_graph_decisions():
    assert use_graph(1000, False, True) == (False, None)
    try_, why = use_graph(1000, True, False)
    assert not try_ and "device" in why
    try_, why = use_graph(1000, None, False)
    assert not try_ and "device" in why
    try_, why = use_graph(gpu_reps.MIN_GRAPH_REPS - 1, None, True)
    assert not try_ and "worth" in why
    assert use_graph(gpu_reps.MIN_GRAPH_REPS, None, True) == (True, None)
    assert use_graph(2, True, True) == (True, None)  # asked for: tried even when small
    big = gpu_reps.LOOP_MIN_BYTES
    try_, why = use_graph(1000, None, True, big)
    assert not try_ and "bound by bytes" in why
    assert use_graph(1000, None, True, big - 1) == (True, None)
    assert use_graph(1000, True, True, big) == (True, None)  # asked for: tried even when huge


def restored(m):
    """The live arena (at the live positions when sparse) equals the snapshot."""
    if m.positions is None:
        return np.array_equal(m.arena.cpu().numpy(), m.snapshot)
    live = m.positions >= 0
    return np.array_equal(m.arena[m.device_positions].cpu().numpy(), m.snapshot[live])


def test_environment_switches(monkeypatch):
    monkeypatch.delenv(gpu_reps.GRAPH_ENV, raising=False)
    monkeypatch.delenv(gpu_reps.HOST_REPS_ENV, raising=False)
    assert gpu_reps.graph_from_env() is None and gpu_reps.device_reps_enabled()
    monkeypatch.setenv(gpu_reps.GRAPH_ENV, "0")
    assert gpu_reps.graph_from_env() is False
    monkeypatch.setenv(gpu_reps.GRAPH_ENV, "1")
    assert gpu_reps.graph_from_env() is True
    monkeypatch.setenv(gpu_reps.HOST_REPS_ENV, "1")
    assert not gpu_reps.device_reps_enabled()


class FakeGraph:
    """Replays the plan's K slots, advancing its own slot base like the real graph does."""

    def __init__(self, plan, filled):
        self.plan, self.filled, self.base, self.replays = plan, filled, 0, 0

    def replay(self):
        for i in range(self.plan.k):
            self.filled.append(("graph", self.base + i))
        self.base += self.plan.k
        self.replays += 1


def _drive(plan, try_graph, capture_ok=True, reason=None, exc=RuntimeError("operation not permitted "
                                                                            "when stream is capturing")):
    filled, resets, graphs = [], [], []

    def capture():
        if not capture_ok:
            raise exc
        graphs.append(FakeGraph(plan, filled))
        return graphs[-1]

    d = drive(plan, try_graph, capture, lambda slot: filled.append(("loop", slot)), lambda: resets.append(1),
              reason)
    return d, filled, resets, graphs


@given(st.integers(1, 300), st.integers(1, 40))
def test_drive_graph_path_fills_every_slot_once(reps, k):
    plan = plan_batches(reps, k)
    d, filled, resets, graphs = _drive(plan, True)
    assert d.used_graph and d.fallback_reason is None and d.graph is graphs[0]
    assert sorted(s for _, s in filled) == list(range(reps))
    assert graphs[0].replays == plan.replays
    assert [s for how, s in filled if how == "loop"] == list(plan.tail_slots())
    assert not resets


class _Clock:
    """A fake monotonic clock: each unit of work (a replay or a launch) takes `per` seconds."""

    def __init__(self, per):
        self.t, self.per, self.syncs = 0.0, per, 0

    def __call__(self):
        return self.t

    def sync(self):
        self.syncs += 1


def _boxed(plan, try_graph, per, end):
    clock = _Clock(per)
    filled = []

    class Graph(FakeGraph):
        def replay(self):
            super().replay()
            clock.t += per

    def launch(slot):
        filled.append(("loop", slot))
        clock.t += per

    box = gpu_reps.TimeBox(Deadline.until(end), clock.sync, clock)
    d = drive(plan, try_graph, lambda: Graph(plan, filled), launch, lambda: None, None, box)
    return d, filled, clock


def test_time_box_leaves_a_batch_that_fits_alone_after_one_sync():
    plan = plan_batches(100, 16)              # 7 replays of 14, a tail of 2
    d, filled, clock = _boxed(plan, True, per=1.0, end=50.0)
    assert d.done == 100 and sorted(s for _, s in filled) == list(range(100))
    assert clock.syncs == 1
    d, filled, clock = _boxed(plan, False, per=0.1, end=50.0)
    assert d.done == 100 and clock.syncs == 1
    d, filled, clock = _boxed(plan, True, per=1.0, end=None)  # no deadline: still measured once (8 s left)
    assert d.done == 100 and clock.syncs == 1


def test_time_box_paces_a_slow_batch_so_that_each_unit_is_heard_as_progress():
    """Without a deadline too: a batch whose rest would keep the host waiting past QUIET_SECONDS is synced
    unit by unit, and each finished unit reaches ``clock.progressed`` (a session worker's "still going"),
    so a slow example is not taken for a hang."""
    from mambafuzz.control import clock as run_clock

    heard = []
    run_clock.on_progress(lambda: heard.append(1))
    try:
        d, filled, clock = _boxed(plan_batches(12, 16), False, per=2.0, end=None)  # 11 x 2 s > 10 s
    finally:
        run_clock.on_progress(None)
    assert d.done == 12 and clock.syncs == 12 and len(heard) == 12  # measured after the first, then each
    heard.clear()
    d, filled, clock = _boxed(plan_batches(12, 16), False, per=0.5, end=None)  # 5.5 s: left alone
    assert d.done == 12 and clock.syncs == 1 and heard == []


def test_time_box_stops_a_batch_that_would_overrun_at_its_end():
    plan = plan_batches(100, 16)
    d, filled, clock = _boxed(plan, True, per=1.0, end=3.5)  # replays end at 1, 2, 3, 4: the 4th starts at 3
    assert d.used_graph and d.done == 4 * 14 and sorted(s for _, s in filled) == list(range(56))
    d, filled, clock = _boxed(plan, False, per=1.0, end=2.5)
    assert not d.used_graph and d.done == 3 and [s for _, s in filled] == [0, 1, 2]
    d, filled, clock = _boxed(plan, True, per=1.0, end=-1.0)  # already past: the first unit still runs
    assert d.done == 14
    d, filled, clock = _boxed(plan_batches(21, 16), True, per=1.0, end=1.5)  # 2 replays of 10, a tail of 1
    assert d.done == 20 and ("loop", 20) not in filled  # the second replay starts at 1.0, the tail at 2.0


def test_drive_falls_back_to_the_loop_when_capture_fails():
    plan = plan_batches(100, 16)
    d, filled, resets, graphs = _drive(plan, True, capture_ok=False)
    assert not d.used_graph and d.graph is None
    assert "capture failed" in d.fallback_reason and "stream is capturing" in d.fallback_reason
    assert filled == [("loop", s) for s in range(100)]
    assert resets == [1]  # the inputs are restored once before the loop


def test_drive_without_graph_never_captures():
    plan = plan_batches(40, 16)
    d, filled, resets, graphs = _drive(plan, False, reason="why not")
    assert not graphs and not resets
    assert not d.used_graph and d.fallback_reason == "why not"
    assert filled == [("loop", s) for s in range(40)]


# --------------------------------------------------------------------------
# check_restore on hand-made buffers (interpreted on the CPU, compiled on cuda)
# --------------------------------------------------------------------------
def _buffers(seed, n, flips, device, offset=0):
    """expected, snapshot, and an arena equal to expected except at `flips` (each byte XOR nonzero)."""
    rng = np.random.default_rng(seed)
    exp = rng.integers(0, 256, n, dtype=np.uint8)
    snap = rng.integers(0, 256, n, dtype=np.uint8)
    act = exp.copy()
    flips = np.asarray(sorted(set(int(f) for f in flips)), dtype=np.int64)
    act[flips] ^= rng.integers(1, 256, flips.size, dtype=np.uint8)

    def dev(a):  # `offset` bytes in: a misaligned view when offset % 8 != 0
        t = torch.zeros(n + offset, dtype=torch.uint8, device=device)
        t[offset:] = torch.from_numpy(a).to(device)
        return t[offset:]

    return dev(act), dev(exp), dev(snap), snap, flips.size


LENGTHS = [1, 7, 8, 9, 15, 16, 31, 32, 33, 255, 256, 257, 1000, 4099]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", LENGTHS)
def test_check_restore_counts_exactly_and_restores(device, n):
    rng = np.random.default_rng(n)
    # flips everywhere: first and last byte, the byte tail, several bytes of one word, random others
    flips = {0, n - 1, max(0, n - 3)} | set(rng.integers(0, n, size=max(1, n // 7)).tolist())
    arena, exp, snap_t, snap, k = _buffers(n, n, flips, device)
    counter = torch.zeros(4, dtype=torch.int64, device=device)
    chk = CheckRestore(arena, exp, snap_t, words=4)  # 32-byte programs: many programs, full and partial
    assert chk.kind == "dense-u64"
    chk(counter, 2)
    assert counter.tolist() == [0, 0, k, 0]
    assert np.array_equal(arena.cpu().numpy(), snap)
    # the arena now holds the snapshot: a second check counts snapshot-vs-expected and adds it
    chk(counter, 2)
    assert counter[2].item() == k + int(np.count_nonzero(snap != exp.cpu().numpy()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sparse", [False, True])
def test_check_restore_takes_its_shape_from_its_size_and_counts_the_same(device, sparse):
    """A small judge takes the small shape (a graph node of many small programs, bench/small_reps.py),
    a larger one the large shape; each counts exactly and restores."""
    from mambafuzz.judge.check import BYTES, SMALL_BYTES, SMALL_PROGRAMS, SMALL_WORDS, WORDS
    small_max = SMALL_PROGRAMS * (SMALL_BYTES if sparse else 8 * SMALL_WORDS)
    for n, shape in ((4880, "small"), (small_max, "small"), (small_max + 1, "large")):
        act, exp, snap_t, snap, k = _buffers(n, n, {0, n // 2, n - 1}, device)
        if sparse:  # the judged bytes sit at every other byte of an arena twice as long
            arena = torch.zeros(2 * n, dtype=torch.uint8, device=device)
            arena[::2] = act
            positions = torch.arange(0, 2 * n, 2, dtype=torch.int64, device=device)
            chk = CheckRestore(arena, exp, snap_t, positions=positions)
            want = np.zeros(2 * n, dtype=np.uint8)
            want[::2] = snap
            per_program, small, large = chk._bytes, SMALL_BYTES, BYTES
        else:
            arena, want = act, snap
            chk = CheckRestore(arena, exp, snap_t)
            per_program, small, large = chk._words, SMALL_WORDS, WORDS
        assert per_program == (small if shape == "small" else large), (n, per_program)
        counter = torch.zeros(1, dtype=torch.int64, device=device)
        chk(counter, 0)
        assert counter.item() == k == 3
        assert np.array_equal(arena.cpu().numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,offset", [(1, 1), (9, 3), (4099, 1), (5000, 5)])
def test_check_restore_misaligned_buffers_take_the_byte_path(device, n, offset):
    rng = np.random.default_rng(n)
    flips = set(rng.integers(0, n, size=max(1, n // 5)).tolist()) | {n - 1}
    arena, exp, snap_t, snap, k = _buffers(7, n, flips, device, offset=offset)
    chk = CheckRestore(arena, exp, snap_t, nbytes_per_program=1024)
    assert chk.kind == "dense-bytes"
    counter = torch.zeros(1, dtype=torch.int64, device=device)
    chk(counter, 0)
    assert counter.item() == k
    assert np.array_equal(arena.cpu().numpy(), snap)


@pytest.mark.parametrize("device", DEVICES)
def test_check_restore_counts_every_byte_pattern_of_a_word(device):
    # word w differs from expected only in the bytes set in mask w (all 256 masks), with
    # values that stress the SWAR count: top bits (0x80), all ones, single low bits
    n = 256 * 8
    exp = np.zeros(n, dtype=np.uint8)
    act = exp.copy()
    vals = np.array([0x80, 0xFF, 0x01, 0x10, 0x7F, 0x08, 0x40, 0x81], dtype=np.uint8)
    for w in range(256):
        for b in range(8):
            if w >> b & 1:
                act[w * 8 + b] = vals[(w + b) % 8]
    want = int(np.count_nonzero(act != exp))
    for words in (2, 16, 1024):
        a = torch.from_numpy(act.copy()).to(device)
        e = torch.from_numpy(exp).to(device)
        counter = torch.zeros(1, dtype=torch.int64, device=device)
        CheckRestore(a, e, e, words=words)(counter)
        assert counter.item() == want == 256 * 4
        assert not a.any()


@pytest.mark.parametrize("device", DEVICES)
def test_check_restore_slot_base_and_function_form(device):
    arena, exp, snap_t, snap, k = _buffers(3, 100, [5, 50, 99], device)
    counter = torch.zeros(10, dtype=torch.int64, device=device)
    base = torch.tensor([5], dtype=torch.int64, device=device)
    check_restore(arena, exp, snap_t, counter, 100, slot=2, slot_base=base)
    assert counter.tolist() == [0] * 7 + [3, 0, 0]
    # n shorter than the buffers: bytes past n are neither counted nor restored
    arena, exp, snap_t, snap, k = _buffers(3, 100, [5, 90], device)
    before = arena.cpu().numpy().copy()
    counter.zero_()
    check_restore(arena, exp, snap_t, counter, 64)
    assert counter[0].item() == 1
    got = arena.cpu().numpy()
    assert np.array_equal(got[:64], snap[:64]) and np.array_equal(got[64:], before[64:])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [0, 1, 13, 64, 1000])
def test_check_restore_aux_counts_into_the_same_slot(device, n):
    arena, exp, snap_t, snap, k = _buffers(11, max(n, 1), [0] if n else [], device) if n else \
        (torch.zeros(0, dtype=torch.uint8, device=device),) * 3 + (np.zeros(0, np.uint8), 0)
    acc = torch.tensor([1, 2, 3, 300, 5], dtype=torch.int32, device=device)
    acc_exp = torch.tensor([1, 1, 3, 0x10000 + 300, 5], dtype=torch.int32, device=device)
    acc_snap = torch.tensor([9, 9, 9, 9, 9], dtype=torch.int32, device=device)
    for words in (4, 1024):
        a = acc.clone()
        ar = arena.clone()
        counter = torch.zeros(2, dtype=torch.int64, device=device)
        CheckRestore(ar, exp, snap_t, words=words, aux=a, aux_expected=acc_exp, aux_snapshot=acc_snap)(counter, 1)
        # request 1: 2 vs 1 (one byte); request 3: 300 vs 65836 (one byte, the third)
        assert counter.tolist() == [0, k + 2]
        assert a.tolist() == [9] * 5
        assert np.array_equal(ar.cpu().numpy(), snap)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 100, 5000])
def test_check_restore_sparse_gathers_and_scatters(device, n):
    rng = np.random.default_rng(n)
    size = 3 * n + 50
    pos = np.sort(rng.choice(size, size=n, replace=False)).astype(np.int64)
    exp = rng.integers(0, 256, n, dtype=np.uint8)
    snap = rng.integers(0, 256, n, dtype=np.uint8)
    full = rng.integers(0, 256, size, dtype=np.uint8)
    full[pos] = exp
    bad = rng.choice(n, size=max(1, n // 3), replace=False)
    full[pos[bad]] ^= 0x5A
    before = full.copy()
    arena = torch.from_numpy(full).to(device)
    counter = torch.zeros(3, dtype=torch.int64, device=device)
    acc = torch.tensor([4, 4], dtype=torch.int32, device=device)
    check_restore_sparse(arena, torch.from_numpy(pos).to(device), torch.from_numpy(exp).to(device),
                         torch.from_numpy(snap).to(device), counter, slot=1,
                         aux=acc, aux_expected=torch.tensor([4, 1], dtype=torch.int32, device=device),
                         aux_snapshot=torch.tensor([7, 7], dtype=torch.int32, device=device))
    assert counter.tolist() == [0, bad.size + 1, 0]
    got = arena.cpu().numpy()
    want = before.copy()
    want[pos] = snap
    assert np.array_equal(got, want)  # only the positions change
    assert acc.tolist() == [7, 7]


def test_check_restore_rejects_bad_buffers():
    a = torch.zeros(16, dtype=torch.uint8)
    with pytest.raises(ValueError):
        CheckRestore(a, torch.zeros(8, dtype=torch.uint8), torch.zeros(16, dtype=torch.uint8), 16)
    with pytest.raises(TypeError):
        CheckRestore(a.to(torch.int32), a, a)
    with pytest.raises(TypeError):
        CheckRestore(a, a, a)(torch.zeros(1, dtype=torch.int32))
    with pytest.raises(TypeError):
        CheckRestore(a, a, a, positions=torch.zeros(16, dtype=torch.int32))


# --------------------------------------------------------------------------
# run_reps end to end (interpreter: loop mode and a fake eager "graph")
# --------------------------------------------------------------------------
def _left(rows, size, shift, arena_pad=64):
    copies, base = [], 64
    for _ in range(rows):
        copies.append((base + shift, base, size))
        base += size + shift + arena_pad
    return BatchCopyCase(arena_size=base + 64, copies=tuple(copies), seed=5)


def test_run_reps_correct_kernel_passes_in_loop_and_graph_form():
    m = materialize(_left(2, 77, 8), "cpu")
    fn = registry.get("triton.batch_memcpy").fn
    r = run_reps(m, fn, 5, graph=False)
    assert (r.failures, r.reps, r.first_failing_rep, r.used_graph, r.fallback_reason) == (0, 5, None, False, None)
    assert r.per_rep_mismatch.dtype == np.int64 and r.per_rep_mismatch.tolist() == [0] * 5
    g = run_reps(m, fn, 7, graph=True, k=3, capture=eager_capture)
    assert g.used_graph and g.failures == 0 and g.reps == 7
    assert restored(m)  # the arena is left restored


def test_run_reps_wrong_kernel_fails_every_rep_with_the_compare_count():
    case = _left(2, 77, 8)  # aligned shift: the u64 path, whose 77 % 8 tail TAIL-DROP drops
    fn = registry.get("zoo.TAIL-DROP").fn
    m = materialize(case, "cpu")
    m.run(fn)
    want = m.compare().count
    assert want > 0
    loop = run_reps(m, fn, 4, graph=False)
    graph = run_reps(m, fn, 5, graph=True, k=2, capture=eager_capture)
    assert loop.per_rep_mismatch.tolist() == [want] * 4
    assert graph.per_rep_mismatch.tolist() == [want] * 5
    assert (loop.failures, loop.first_failing_rep, graph.failures) == (4, 0, 5)
    mm = failing_mismatch(m, fn, loop)
    assert mm is not None and mm.count == want and mm.first


def test_run_reps_capture_failure_restores_and_falls_back():
    m = materialize(_left(1, 40, 8), "cpu")
    fn = registry.get("triton.batch_memcpy").fn

    def bad_capture(body, warmup):
        warmup()
        m.arena.fill_(0)  # a half-run target: the loop must not start from this
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    r = run_reps(m, fn, 6, graph=True, capture=bad_capture)
    assert not r.used_graph and "stream is capturing" in r.fallback_reason
    assert r.failures == 0 and r.reps == 6


def test_run_reps_without_a_device_graph_says_why():
    m = materialize(_left(1, 40, 8), "cpu")
    r = run_reps(m, registry.get("triton.batch_memcpy").fn, 3, graph=True)
    assert not r.used_graph and "device" in r.fallback_reason and r.failures == 0


def test_run_reps_counts_accepted_counts_of_postprocess():
    case = _racy().self_copy_postprocess(2, 1, 1)
    m = materialize(case, "cpu")
    good = registry.get("triton.postprocess").fn
    assert run_reps(m, good, 3, graph=False).failures == 0

    def off_by_one(**kw):  # right bytes, wrong accepted counts
        good(**kw)
        kw["num_accepted"].add_(1)

    r = run_reps(m, off_by_one, 3, graph=True, k=2, capture=eager_capture)
    assert r.per_rep_mismatch.tolist() == [2, 2, 2]  # one byte of each of the 2 requests' int32
    assert m.args["num_accepted"].tolist() == list(case.num_accepted)  # restored
    mm = failing_mismatch(m, off_by_one, r)
    assert mm.count == 0 and len(mm.outputs) == 2


@pytest.mark.matrix
def test_run_reps_sparse_materialisation(monkeypatch):
    monkeypatch.setattr(pool_contracts, "DENSE_LIMIT", 1024)
    case = _racy().same_block_conv("conv_sd", 12, 4, 16, 2, 1)  # 12 blocks of 128 bytes + 512: sparse
    m = materialize(case, "cpu")
    assert m.positions is not None
    good = registry.get("triton.state_copy").fn
    r = run_reps(m, good, 3, graph=False)
    assert r.failures == 0
    assert gpu_reps._Buffers.of(m).check.kind == "sparse"

    def scribble(**kw):
        good(**kw)
        kw["arena"][300:310] ^= 0xFF  # bytes 44..53 of block 0: live positions

    m.run(scribble)
    want = m.compare().count
    m.restore()
    r = run_reps(m, scribble, 4, graph=True, k=2, capture=eager_capture)
    assert r.per_rep_mismatch.tolist() == [want] * 4 and want > 0
    assert restored(m)


# --------------------------------------------------------------------------
# the chunks judge (large dense arenas): ChunkCheck, chunk_plan, run_reps(judge="chunks")
# --------------------------------------------------------------------------
W = 4          # u64 words per chunk in these tests: 32-byte chunks, so small arenas have many
CB = 8 * W


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("stride", [None, 3, 1])  # programs walking the other chunks (None: STRIDE_PROGRAMS)
def test_chunk_check_counts_judges_and_restores_as_planned(device, stride):
    rng = np.random.default_rng(1)
    n = CB * 10 + 5                                   # 11 chunks, the last one 5 bytes (a byte tail)
    exp = rng.integers(0, 256, n, dtype=np.uint8)
    snap = exp.copy()                                 # a correct target changes chunks 3 and 10 only
    snap[3 * CB:4 * CB] = rng.integers(0, 256, CB, dtype=np.uint8)
    snap[10 * CB:] = rng.integers(0, 256, n - 10 * CB, dtype=np.uint8)
    c10 = np.s_[10 * CB:]

    def holding(snap_chunks):
        """exp, with the snapshot in the chunks given."""
        want = exp.copy()
        for c in snap_chunks:
            want[c * CB:(c + 1) * CB] = snap[c * CB:(c + 1) * CB]
        return want

    arena = torch.from_numpy(exp.copy()).to(device)
    order = [3, 10, 0, 1, 2, 4, 5, 6, 7, 8, 9]       # chunks 3 and 10 judged every repetition, 3 restored
    chk = ChunkCheck(arena, torch.from_numpy(exp).to(device), torch.from_numpy(snap).to(device), order, 2, 1,
                     full_every=4, words=W, stride_programs=stride)
    counter = torch.zeros(8, dtype=torch.int64, device=device)
    chk(counter, 0)                                   # all equal: nothing counted, chunk 3 restored only
    assert counter.tolist() == [0] * 8
    assert np.array_equal(arena.cpu().numpy(), holding([3]))
    bad = exp.copy()
    bad[3 * CB + 4] ^= 1                              # judged chunk
    bad[n - 2] ^= 0x80                                # the byte tail (chunk 10, judged)
    bad[5] ^= 7                                       # chunk 0: not judged this repetition ...
    arena.copy_(torch.from_numpy(bad).to(device))
    chk(counter, 1)                                   # ... though it fails: its changed chunks are restored
    want = snap.copy()
    want[5] ^= 7                                      # the stray byte waits for a full repetition
    assert counter[1].item() == 2 and np.array_equal(arena.cpu().numpy(), want)
    arena.copy_(torch.from_numpy(exp).to(device))
    arena[5] ^= 7                                     # a stray byte in an unjudged chunk
    chk(counter, 2)
    assert counter[2].item() == 0                     # not seen by a partial repetition, nor restored
    assert arena[5].item() == exp[5] ^ 7
    arena[3 * CB:4 * CB] = torch.from_numpy(exp[3 * CB:4 * CB]).to(device)
    chk(counter, 3)                                   # slot 3: (3 + 1) % 4 == 0, a full repetition
    got = arena.cpu().numpy()                         # the stray counted and restored; chunk 10 passed
    assert counter[3].item() == 1 and np.array_equal(got, holding([3])) and np.array_equal(got[c10], exp[c10])
    arena.copy_(torch.from_numpy(exp).to(device))
    arena[5] ^= 7
    base = torch.tensor([4], dtype=torch.int64, device=device)
    chk(counter, 1, base, last_slot=5)                # slot 1 + 4 = 5 = the last slot: full
    assert counter[5].item() == 1 and np.array_equal(arena.cpu().numpy(), holding([3]))
    arena.copy_(torch.from_numpy(exp).to(device))
    arena[5] ^= 7
    chk(counter, 7, walk=False)                       # a full slot, but the caller leaves the walk out
    assert counter[7].item() == 0 and arena[5].item() == exp[5] ^ 7
    arena[9 * CB + 1] ^= 2                            # a second stray byte, in the last walked chunk
    chk.walk(counter, 2, base)                        # the caller knows it is full: a program per chunk
    assert counter[6].item() == 2 and np.array_equal(arena.cpu().numpy(), holding([3]))


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_check_counts_and_restores_chunks_longer_than_one_step(device):
    """Chunks of the default size are counted and restored in several steps (check.SUB_WORDS)."""
    from mambafuzz.judge.check import CHUNK_WORDS, SUB_WORDS
    cb = 8 * CHUNK_WORDS
    assert CHUNK_WORDS >= 2 * SUB_WORDS
    rng = np.random.default_rng(2)
    n = 3 * cb + 5
    exp = rng.integers(0, 256, n, dtype=np.uint8)
    snap = exp.copy()
    snap[cb:2 * cb] = rng.integers(0, 256, cb, dtype=np.uint8)        # chunk 1 changes
    arena = torch.from_numpy(exp.copy()).to(device)
    chk = ChunkCheck(arena, torch.from_numpy(exp).to(device), torch.from_numpy(snap).to(device), [1, 0, 2, 3],
                     1, 1, full_every=1 << 20)
    counter = torch.zeros(2, dtype=torch.int64, device=device)
    chk(counter, 0)                                                    # passes; chunk 1 restored in steps
    assert counter[0].item() == 0 and np.array_equal(arena.cpu().numpy(), snap)
    bad = exp.copy()
    for off in (3, 8 * SUB_WORDS + 1, cb - 1):                          # first, second and last step
        bad[cb + off] ^= 0x10
    arena.copy_(torch.from_numpy(bad).to(device))
    chk(counter, 1)
    assert counter[1].item() == 3 and np.array_equal(arena.cpu().numpy(), snap)


def test_chunk_check_rejects_bad_plans():
    a = torch.zeros(64, dtype=torch.uint8)
    e = torch.zeros(64, dtype=torch.uint8)
    with pytest.raises(ValueError, match="each of the 2 chunks"):
        ChunkCheck(a, e, e, [0, 0], 1, 0, full_every=4, words=W)
    with pytest.raises(ValueError, match="n_restore"):
        ChunkCheck(a, e, e, [0, 1], 1, 2, full_every=4, words=W)
    with pytest.raises(ValueError, match="full_every"):
        ChunkCheck(a, e, e, [0, 1], 1, 1, full_every=0, words=W)
    with pytest.raises(ValueError, match="equally long"):
        ChunkCheck(a, e[:32], e, [0, 1], 1, 1, full_every=4, words=W)
    with pytest.raises(ValueError, match="aligned"):
        ChunkCheck(torch.zeros(65, dtype=torch.uint8)[1:], e, e, [0, 1], 1, 1, full_every=4, words=W)


def _changed_chunks(m):
    changed = np.flatnonzero(m.expected != m.snapshot) // CB
    return sorted(set(changed.tolist()))


def test_chunk_plan_of_disjoint_and_self_overlapping_copies():
    disjoint = materialize(BatchCopyCase(arena_size=1024, copies=((512, 64, 128), (700, 300, 40)), seed=2), "cpu")
    p = gpu_reps.chunk_plan(disjoint, CB)
    assert p.idempotent and p.n_restore == 0
    assert sorted(p.order[:p.n_check].tolist()) == _changed_chunks(disjoint) == list(range(2, 6)) + [9, 10]
    assert p.order[:p.n_check].tolist() == [10, 9, 5, 4, 3, 2]  # from the highest down: what L2 still holds
    assert sorted(p.order.tolist()) == list(range(32))
    shifted = materialize(BatchCopyCase(arena_size=1024, copies=((80, 64, 128),), seed=2), "cpu")
    p = gpu_reps.chunk_plan(shifted, CB)  # the row reads bytes it writes: restore what changed
    assert not p.idempotent and p.n_restore == p.n_check == len(_changed_chunks(shifted)) == 4
    nothing = materialize(BatchCopyCase(arena_size=256, copies=((64, 64, 100),), seed=2), "cpu")
    p = gpu_reps.chunk_plan(nothing, CB)
    assert (p.n_check, p.n_restore, p.idempotent) == (0, 0, True)
    # another contract: conv windows shifted inside their own block read what they write
    conv = materialize(_racy().same_block_conv("conv_sd", 3, 4, 16, 2, 1), "cpu")
    p = gpu_reps.chunk_plan(conv, CB)
    assert not p.idempotent and p.n_check == len(_changed_chunks(conv)) > 0
    temporal = materialize(StateCopyCase(
        arena_size=4096, pools=(PoolLayout("temporal", 64, 3, 1024, 4, inner=(200,)),),
        block_tables=(((2, 0),),), num_tiles=2, seed=1, src_cols=(0,), dst_cols=(1,), biases=(0,)), "cpu")
    assert gpu_reps.chunk_plan(temporal, CB).idempotent  # block 2 -> block 0: reads nothing it writes


def test_choose_judge(monkeypatch):
    monkeypatch.delenv(gpu_reps.JUDGE_ENV, raising=False)
    small = materialize(_left(1, 40, 8), "cpu")
    assert gpu_reps.choose_judge(small) == "full"
    assert gpu_reps.choose_judge(small, "chunks") == "chunks"
    monkeypatch.setattr(gpu_reps, "CHUNK_MIN_BYTES", small.arena.numel())
    assert gpu_reps.choose_judge(small) == "chunks"
    monkeypatch.setenv(gpu_reps.JUDGE_ENV, "full")
    assert gpu_reps.choose_judge(small) == "full"
    monkeypatch.setenv(gpu_reps.JUDGE_ENV, "bogus")  # ignored, like MAMBAFUZZ_CUDA_GRAPH's other values
    assert gpu_reps.choose_judge(small) == "chunks"
    with pytest.raises(ValueError, match="unknown repetition judge"):
        gpu_reps.choose_judge(small, "some")
    monkeypatch.setattr(pool_contracts, "DENSE_LIMIT", 1024)
    sparse = materialize(_racy().same_block_conv("conv_sd", 12, 4, 16, 2, 1), "cpu")
    assert gpu_reps.choose_judge(sparse, "chunks") == "full"  # sparse cases are judged in full


@triton.jit
def _rows_one_byte_past(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """A zoo-style bug: each row copied with one byte too many (rows must not overlap)."""
    row = tl.program_id(0)
    src = tl.load(src_ptrs + row)
    dst = tl.load(dst_ptrs + row)
    n = tl.load(sizes + row) + 1
    i = n * 0
    while i < n:
        offs = i + tl.arange(0, BLOCK).to(tl.int64)
        m = offs < n
        x = tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=m)
        tl.store((dst + offs).to(tl.pointer_type(tl.uint8)), x, mask=m)
        i += BLOCK


def one_byte_past(src_ptrs, dst_ptrs, sizes, *, arena=None):
    _rows_one_byte_past[(src_ptrs.numel(),)](src_ptrs, dst_ptrs, sizes, BLOCK=256)


def _stray_case(dst_end_in_chunk: bool):
    """One row 512.. -> 64..: its end mid-chunk (the stray byte shares a judged chunk) or on a chunk
    boundary (the stray byte lands in a chunk no correct repetition changes)."""
    n = 100 if dst_end_in_chunk else 128
    case = BatchCopyCase(arena_size=1024, copies=((512, 64, n),), seed=9)
    m = materialize(case, "cpu")
    assert m.snapshot[512 + n] != m.expected[64 + n]  # the stray byte differs from what belongs there
    return m


@pytest.mark.parametrize("graph", [False, True])
def test_chunks_judge_catches_a_stray_byte_in_a_judged_chunk_every_repetition(graph):
    m = _stray_case(True)
    r = run_reps(m, one_byte_past, 5, graph=graph, k=2, capture=eager_capture if graph else None,
                 judge="chunks", chunk_words=W, full_every=4)
    assert r.judge == "chunks" and r.per_rep_mismatch.tolist() == [1] * 5


@pytest.mark.parametrize("graph,stride", [(False, None), pytest.param(True, None, marks=pytest.mark.matrix),
                                          pytest.param(False, 5, marks=pytest.mark.matrix)])
def test_chunks_judge_catches_a_stray_byte_outside_every_destination_chunk(graph, stride, monkeypatch):
    if stride:
        monkeypatch.setattr(check_module, "STRIDE_PROGRAMS", stride)
    m = _stray_case(False)
    assert 192 // CB not in gpu_reps.chunk_plan(m, CB).order[:gpu_reps.chunk_plan(m, CB).n_check]
    r = run_reps(m, one_byte_past, 7, graph=graph, k=3, capture=eager_capture if graph else None,
                 judge="chunks", chunk_words=W, full_every=3)
    # nothing restores it, so the full repetitions (slots 2, 5 and the last) count it
    assert r.per_rep_mismatch.tolist() == [0, 0, 1, 0, 0, 1, 1]
    full = run_reps(m, one_byte_past, 7, graph=False, judge="full")
    assert full.judge == "full" and full.per_rep_mismatch.tolist() == [1] * 7
    good = registry.get("triton.batch_memcpy").fn
    assert run_reps(m, good, 7, judge="chunks", chunk_words=W, full_every=3).failures == 0


def test_a_launch_loop_launches_the_walk_in_full_repetitions_only(monkeypatch):
    """The walk exits at once in a repetition that is not full, so a plain launch (which knows its
    slot) leaves it out: a kernel boundary less per repetition.  The counts do not change."""
    m = _stray_case(False)
    in_call, walked = [], []
    call, walk = ChunkCheck.__call__, ChunkCheck.walk
    monkeypatch.setattr(ChunkCheck, "__call__", lambda self, *a, walk=True, **kw: (in_call.append(walk),
                                                                                  call(self, *a, walk=walk, **kw))[1])
    monkeypatch.setattr(ChunkCheck, "walk", lambda self, counter, slot, *a: (walked.append(slot),
                                                                           walk(self, counter, slot, *a))[1])
    r = run_reps(m, one_byte_past, 7, graph=False, judge="chunks", chunk_words=W, full_every=3)
    assert in_call == [False] * 7 and walked == [2, 5, 6]  # the full ones, each on its own launch
    assert r.per_rep_mismatch.tolist() == [0, 0, 1, 0, 0, 1, 1]


@pytest.mark.parametrize("graph", [False, True])
def test_a_batch_cut_short_still_judges_every_chunk_at_its_end(graph):
    """Past `end` only the first unit runs; its stray byte outside every changed chunk (judged only
    in full repetitions) is still counted, and restored: the next batch of a correct kernel passes."""
    m = _stray_case(False)
    r = run_reps(m, one_byte_past, 7, graph=graph, k=3, capture=eager_capture if graph else None,
                 judge="chunks", chunk_words=W, full_every=100, deadline=Deadline.until(-1.0))
    assert r.reps == (plan_batches(7, 3).k if graph else 1) and r.per_rep_mismatch.tolist()[-1] == 1
    assert r.per_rep_mismatch.tolist()[:-1] == [0] * (r.reps - 1)
    good = registry.get("triton.batch_memcpy").fn
    assert run_reps(m, good, 4, judge="chunks", chunk_words=W, full_every=100).failures == 0


def test_failing_mismatch_reruns_once_past_the_end():
    m = materialize(_left(2, 77, 8), "cpu")
    calls = []

    def fails_only_in_the_batch(**kw):
        calls.append(1)
        registry.get("triton.batch_memcpy").fn(**kw)
        if len(calls) == 1:
            kw["arena"][70] ^= 0x11

    res = run_reps(m, fails_only_in_the_batch, 1, judge="full")
    assert res.failures == 1
    mm = failing_mismatch(m, fails_only_in_the_batch, res, deadline=Deadline.until(-1.0))
    assert len(calls) == 2 and mm is not None and "1 plain reruns did not fail again" in mm.note


CHUNK_CASES = {
    "disjoint": ("triton.batch_memcpy",
                 lambda: BatchCopyCase(arena_size=1024, copies=((512, 64, 128), (700, 300, 40)), seed=2)),
    "self-overlap": ("triton.batch_memcpy", lambda: BatchCopyCase(
        arena_size=1100, copies=((80, 64, 300), (600, 611, 333), (1000, 1000, 50)), seed=3)),
    "conv-same-block": ("triton.state_copy", lambda: _racy().same_block_conv("conv_ds", 3, 4, 16, 2, 1)),
}


@pytest.mark.parametrize("label", [pytest.param(k, marks=() if k == "disjoint" else pytest.mark.matrix)
                                   for k in CHUNK_CASES])
def test_chunks_judge_passes_the_correct_kernel(label):
    name, make = CHUNK_CASES[label]
    m = materialize(make(), "cpu")
    fn = registry.get(name).fn
    for graph in (False, True):
        r = run_reps(m, fn, 6, graph=graph, k=2, capture=eager_capture if graph else None,
                     judge="chunks", chunk_words=W, full_every=4)
        assert r.judge == "chunks" and r.failures == 0, r.per_rep_mismatch


def test_chunks_judge_counts_a_deterministic_bug_like_the_full_judge():
    case = BatchCopyCase(arena_size=1024, copies=((512, 64, 77), (600, 200, 45)), seed=6)  # idempotent
    m = materialize(case, "cpu")
    fn = registry.get("zoo.TAIL-DROP").fn
    m.run(fn)
    want = m.compare().count
    assert want > 0
    full = run_reps(m, fn, 4, judge="full")
    loop = run_reps(m, fn, 4, judge="chunks", chunk_words=W)
    graph = run_reps(m, fn, 5, graph=True, k=2, capture=eager_capture, judge="chunks", chunk_words=W)
    # each failing repetition restores the destinations, so the next one starts from the snapshot again
    assert full.per_rep_mismatch.tolist() == loop.per_rep_mismatch.tolist() == [want] * 4
    assert graph.per_rep_mismatch.tolist() == [want] * 5


@pytest.mark.matrix
@pytest.mark.parametrize("stride", [None, 2])
def test_chunks_judge_per_repetition_counts_follow_a_failing_pattern(stride, monkeypatch):
    """A target that corrupts chosen repetitions: a destination byte (seen in that repetition) or a
    byte no correct repetition changes (seen when a full repetition comes)."""
    if stride:
        monkeypatch.setattr(check_module, "STRIDE_PROGRAMS", stride)
    case = BatchCopyCase(arena_size=1024, copies=((80, 64, 300), (512, 700, 100)), seed=8)
    m = materialize(case, "cpu")
    good = registry.get("triton.batch_memcpy").fn
    plan = gpu_reps.chunk_plan(m, CB)
    assert not plan.idempotent and 1000 // CB not in plan.order[:plan.n_check]
    calls = []
    in_dst = {1: 1, 2: 2, 6: 1}       # repetition -> destination bytes flipped
    stray = {4}                       # repetitions that flip byte 1000 (outside every changed chunk)

    def racy(**kw):
        good(**kw)
        rep = len(calls)
        calls.append(rep)
        for b in range(in_dst.get(rep, 0)):
            kw["arena"][70 + 3 * b] ^= 0x11
        if rep in stray:
            kw["arena"][1000] ^= 0x22

    r = run_reps(m, racy, 10, graph=False, judge="chunks", chunk_words=W, full_every=8)
    # rep 4's stray byte stays (nothing restores it) through rep 6, which fails in its destination
    # only, until the full repetition 7 judges every chunk
    assert r.per_rep_mismatch.tolist() == [0, 1, 2, 0, 0, 0, 1, 1, 0, 0]
    assert (r.failures, r.first_failing_rep) == (4, 1)
    calls.clear()
    stray.clear()
    stray.add(2)
    in_dst.pop(2)
    r = run_reps(m, racy, 10, graph=False, judge="chunks", chunk_words=W, full_every=4)
    # rep 2's stray byte: counted by the full repetition 3 (slot 3 + 1 = 4), then restored
    assert r.per_rep_mismatch.tolist() == [0, 1, 0, 1, 0, 0, 1, 0, 0, 0]


@pytest.mark.matrix
def test_chunks_judge_with_postprocess_accepted_counts():
    case = _racy().self_copy_postprocess(2, 1, 1)
    m = materialize(case, "cpu")
    good = registry.get("triton.postprocess").fn
    assert run_reps(m, good, 3, judge="chunks", chunk_words=W).failures == 0

    def off_by_one(**kw):  # right bytes, wrong accepted counts
        good(**kw)
        kw["num_accepted"].add_(1)

    r = run_reps(m, off_by_one, 3, graph=True, k=2, capture=eager_capture, judge="chunks", chunk_words=W)
    assert r.judge == "chunks" and r.per_rep_mismatch.tolist() == [2, 2, 2]
    assert m.args["num_accepted"].tolist() == list(case.num_accepted)  # restored


@pytest.mark.parametrize("device", DEVICES)
def test_restore_changed_stores_the_snapshot_over_the_changed_chunks_only(device):
    rng = np.random.default_rng(4)
    n = CB * 6 + 5                                   # 7 chunks, the last one 5 bytes
    arena = torch.from_numpy(rng.integers(0, 256, n, dtype=np.uint8)).to(device)
    snapshot = torch.from_numpy(rng.integers(0, 256, n, dtype=np.uint8)).to(device)
    before = arena.cpu().numpy().copy()
    order = [6, 2, 3, 0, 1, 4, 5]                    # changed: the byte tail's chunk, 2 and 3
    cc = ChunkCheck(arena, snapshot.clone(), snapshot, order, 3, 0, full_every=4, words=W)
    cc.restore_changed()
    got, snap = arena.cpu().numpy(), snapshot.cpu().numpy()
    for c in range(7):
        lo, hi = c * CB, min(n, (c + 1) * CB)
        want = snap if c in (6, 2, 3) else before
        assert np.array_equal(got[lo:hi], want[lo:hi]), c


def test_a_batch_starts_from_the_snapshot_moving_only_what_can_differ(monkeypatch):
    """Just made: nothing is restored.  After a chunk-judged batch: only the changed chunks (a
    target that writes nothing must then fail every repetition: had the expectation stayed, it
    would pass).  After a plain run of the target: all of it."""
    m = materialize(CHUNK_CASES["disjoint"][1](), "cpu")
    good = registry.get("triton.batch_memcpy").fn
    calls = []
    restore = m.restore
    monkeypatch.setattr(m, "restore", lambda: (calls.append("all"), restore())[1])
    monkeypatch.setattr(ChunkCheck, "restore_changed",
                        lambda self, _orig=ChunkCheck.restore_changed: (calls.append("changed"), _orig(self))[1])
    assert run_reps(m, good, 4, judge="chunks", chunk_words=W).failures == 0
    assert calls == [] and m.arena_holds == "changes"
    writes_nothing = lambda *a, **kw: None  # noqa: E731
    r = run_reps(m, writes_nothing, 3, judge="chunks", chunk_words=W)
    differing = int(np.count_nonzero(m.expected != m.snapshot))
    assert calls == ["changed"] and r.per_rep_mismatch.tolist() == [differing] * 3
    calls.clear()
    m.run(good)
    assert m.arena_holds == "anything"
    assert run_reps(m, good, 2, judge="chunks", chunk_words=W).failures == 0
    assert calls == ["all"]
    calls.clear()
    assert run_reps(m, good, 2, judge="full").failures == 0  # after a chunks batch, the full judge's plan-free start
    assert calls == ["all"] and m.arena_holds == "nothing"


# --------------------------------------------------------------------------
# the engine's device path (reps_verdict), driven on the CPU
# --------------------------------------------------------------------------
def test_reps_verdict_reports_failures_and_first_bytes():
    m = materialize(_left(2, 77, 8), "cpu")
    v = engine.reps_verdict(m, registry.get("zoo.TAIL-DROP").fn, 6)
    assert (v.reps, v.failures, v.mode, v.fault) == (6, 6, "compare", None)
    assert v.mismatch is not None and v.mismatch.first and "6/6 repetitions" in v.summary()
    m = materialize(_left(2, 77, 8), "cpu")
    v = engine.reps_verdict(m, registry.get("triton.batch_memcpy").fn, 6)
    assert not v.failed and v.reps == 6


def test_reps_verdict_when_the_failure_does_not_come_back():
    m = materialize(_left(1, 40, 8), "cpu")
    good = registry.get("triton.batch_memcpy").fn
    calls = []

    def flaky(**kw):  # corrupts only the first repetition, like a rare race
        good(**kw)
        calls.append(1)
        if len(calls) == 1:
            kw["arena"][70] ^= 1

    v = engine.reps_verdict(m, flaky, 5, graph=False)
    assert (v.reps, v.failures) == (5, 1)
    assert v.mismatch.count == 1 and not v.mismatch.first and "did not fail again" in v.mismatch.note
    assert "1/5 repetitions" in v.summary()
    assert v.to_json()["mismatch"]["note"]


def test_reps_verdict_turns_a_raising_target_into_a_fault():
    m = materialize(_left(1, 40, 8), "cpu")

    def boom(**kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    v = engine.reps_verdict(m, boom, 5)
    assert v.fault and "illegal memory access" in v.fault and v.failed


def test_run_case_on_the_cpu_does_not_use_the_device_path(monkeypatch):
    def no(*a, **k):
        raise AssertionError("run_reps on the CPU path")

    monkeypatch.setattr(gpu_reps, "run_reps", no)
    v = engine.run_case(registry.get("zoo.TAIL-DROP").fn, _left(1, 77, 8), "cpu", reps=3, mode="compare")
    assert (v.reps, v.failures) == (3, 3)


# --------------------------------------------------------------------------
# GPU: real CUDA graphs (MAMBAFUZZ_DEVICE=cuda pytest -m gpu tests/unit/test_gpu_reps.py)
# --------------------------------------------------------------------------
GPU_CASES = [
    ("triton.batch_memcpy", lambda r: r.batch_rows(128, 32 << 10, -16)),
    ("triton.batch_memcpy", lambda r: r.batch_rows(1024, 3077, -3)),
    ("triton.state_copy", lambda r: r.same_block_conv("conv_sd", 1024, 4, 128, 2, 1)),
    ("triton.state_copy", lambda r: r.same_block_conv("conv_ds", 512, 4, 512, 2, 1)),
    ("triton.postprocess", lambda r: r.self_copy_postprocess(256, 4, 16)),
    ("triton.state_copy", lambda r: r.huge_pool()),  # sparse materialisation, > 2 GiB addresses
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,make", GPU_CASES)
def test_gpu_correct_kernels_pass_with_graph_and_loop(name, make):
    m = materialize(make(_racy()), "cuda")
    fn = registry.get(name).fn
    g = run_reps(m, fn, 100, graph=True)
    assert g.used_graph, g.fallback_reason
    assert g.failures == 0, g.per_rep_mismatch
    lp = run_reps(m, fn, 100, graph=False)
    assert not lp.used_graph and lp.failures == 0, lp.per_rep_mismatch
    assert restored(m)


@pytest.mark.gpu
def test_gpu_torch_path_falls_back_to_the_loop():
    m = materialize(_racy().batch_rows(4, 4096, -16), "cuda")
    r = run_reps(m, registry.get("torch.batch_memcpy").fn, 50, graph=True)
    # the sync-debug probe should refuse it before any capture ("synchronises with the host")
    assert not r.used_graph and r.fallback_reason, r.fallback_reason
    print("torch path fallback:", r.fallback_reason)
    assert r.failures == 0
    assert restored(m)
    # the process is still fine for a capture afterwards
    g = run_reps(m, registry.get("triton.batch_memcpy").fn, 50, graph=True)
    assert g.used_graph and g.failures == 0


@pytest.mark.gpu
def test_gpu_bm_noguard_fails_most_reps_graph_and_loop_agree():
    m = materialize(_racy().batch_rows(128, 32 << 10, -16), "cuda")
    fn = registry.get("zoo.BM-NOGUARD").fn
    g = run_reps(m, fn, 100, graph=True)
    lp = run_reps(m, fn, 100, graph=False)
    assert g.used_graph
    assert g.failures >= 50 and lp.failures >= 50, (g.failures, lp.failures)
    v = engine.run_case(fn, _racy().batch_rows(128, 32 << 10, -16), "cuda", reps=100, mode="compare")
    assert v.failures >= 50 and v.mismatch is not None, v.summary()


@pytest.mark.gpu
def test_gpu_deterministic_bug_graph_and_loop_agree_exactly():
    case = _racy().batch_rows(64, 4096 + 5, -8)
    m = materialize(case, "cuda")
    fn = registry.get("zoo.TAIL-DROP").fn
    g = run_reps(m, fn, 64, graph=True)
    lp = run_reps(m, fn, 64, graph=False)
    assert g.used_graph
    m.restore()
    m.run(fn)
    torch.cuda.synchronize()
    want = m.compare().count
    assert g.per_rep_mismatch.tolist() == lp.per_rep_mismatch.tolist() == [want] * 64


@pytest.mark.gpu
@pytest.mark.parametrize("name,make", GPU_CASES[:5])
def test_gpu_chunks_judge_passes_correct_kernels(name, make):
    m = materialize(make(_racy()), "cuda")
    fn = registry.get(name).fn
    for graph in (True, False):
        r = run_reps(m, fn, 100, graph=graph, judge="chunks")
        assert r.judge == "chunks" and r.used_graph == graph and r.failures == 0, r.per_rep_mismatch


@pytest.mark.gpu
def test_gpu_chunks_judge_on_large_rows_agrees_with_the_full_judge():
    from mambafuzz.kernels.batch_memcpy import SPLIT_MIN
    rows = 16
    size = 4 * SPLIT_MIN + 5
    disjoint = BatchCopyCase(arena_size=2 * rows * (size + 64) + 128,
                             copies=tuple((64 + i * (size + 64), 64 + (rows + i) * (size + 64), size)
                                          for i in range(rows)), seed=3)
    for case in (disjoint, _racy().batch_rows(rows, size, -256)):
        m = materialize(case, "cuda")
        good = run_reps(m, registry.get("triton.batch_memcpy").fn, 64, graph=True, judge="chunks")
        assert good.used_graph and good.failures == 0
        bad = registry.get("zoo.TAIL-DROP").fn
        chunks = run_reps(m, bad, 40, graph=True, judge="chunks")
        full = run_reps(m, bad, 40, graph=True, judge="full")
        assert chunks.per_rep_mismatch.tolist() == full.per_rep_mismatch.tolist()
        assert chunks.failures == 40
    # one byte past each row, landing in a chunk the destinations share: every repetition
    stray = run_reps(materialize(disjoint, "cuda"), one_byte_past, 40, graph=True, judge="chunks")
    assert stray.failures == 40, stray.per_rep_mismatch

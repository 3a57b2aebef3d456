"""Warp delays for user kernels (``mambafuzz.instrument``, issue 17 item 1).

CPU (the interpreter): the source transform puts its delay sites where the
loads and stores are (loops, branches, a store that loads in its own
statement, helpers, ``from triton.language import load``); the variant
computes exactly what the kernel does (the delay compiles to nothing there);
``perturbed_launches`` routes ``kernel[grid](...)`` and autotuned launches to
the variant inside the context and never outside, and restores Triton's
launch path on an exception; a kernel that cannot be instrumented runs as
written and the record says why; ``Materialized.run`` wires it in.
Compiled, without a GPU: the variants compile for sm_90 and the PTX holds a
``nanosleep`` per site exactly when a delay is asked for.

Triton 3.5/3.6 interpreters cannot run ``for i in range(0, size, BLOCK)`` with
``size`` loaded (tests/style_kernels/batch.py): those checks need 3.7+; the
``while`` kernels here run everywhere.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.language import load as ld, store as st

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common import compile_for_sm90  # noqa: E402
from mambafuzz import kernels  # noqa: E402
from mambafuzz.cases.batch_memcpy import BatchCopyCase  # noqa: E402
from mambafuzz.instrument import launches, perturbed_launches, variant_of  # noqa: E402
from mambafuzz.instrument.transform import NotInstrumentable, transform  # noqa: E402
from mambafuzz.kernels.perturb import Perturb  # noqa: E402
from mambafuzz.judge.materialize import materialize  # noqa: E402

INTERP = kernels.INTERPRETED
interp_only = pytest.mark.skipif(not INTERP, reason="needs TRITON_INTERPRET=1")
_VERSION = tuple(int(x) for x in triton.__version__.split(".")[:2])
LOADED_RANGE = pytest.mark.skipif(_VERSION < (3, 7), reason="this interpreter cannot run a loaded range bound")
P = Perturb(2, 2000, 3, 11, 8)
BLOCK = 64


# ---------------------------------------------------------------- kernels (engine style, while loops)
@triton.jit
def _while_memmove_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """memmove per program; uint64 pointer arrays, Python and/or guards, a size loaded from memory."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid).to(tl.int64)
    dst = tl.load(dst_ptrs + pid).to(tl.int64)
    size = tl.load(sizes + pid)
    right = src < dst and dst < src + size
    lanes = tl.arange(0, BLOCK)
    nb = (size + BLOCK - 1) // BLOCK
    k = nb * 0
    while k < nb:
        c = tl.where(right, nb - 1 - k, k)
        offs = c * BLOCK + lanes
        m = offs < size
        if right or src > dst:
            v = tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=m)
            tl.debug_barrier()
            tl.store((dst + offs).to(tl.pointer_type(tl.uint8)), v, mask=m)
        else:
            tl.store((dst + offs).to(tl.pointer_type(tl.uint8)),
                     tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=m), mask=m)
        k += 1


@triton.jit
def _piece(src, dst, offs, m):
    v = tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=m)
    tl.store((dst + offs).to(tl.pointer_type(tl.uint8)), v, mask=m)


@triton.jit
def _helper_copy_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """Copies (no overlap) through a @triton.jit helper that does the load and the store."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    lanes = tl.arange(0, BLOCK)
    k = size * 0
    while k < size:
        _piece(src, dst, k + lanes, k + lanes < size)
        k += BLOCK


@triton.jit
def _direct_import_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """load/store imported by name (compiled only: the interpreter patches the module's, not these)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    st(y_ptr + offs, ld(x_ptr + offs, mask=m) + 1, mask=m)


@triton.jit
def _atomic_only_kernel(counter_ptr):
    tl.atomic_add(counter_ptr + tl.program_id(0), 5)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=2)], key=["n"])
@triton.jit
def _autotuned_add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x + 3, mask=m)


def _sourceless_kernel():
    """A jitted function whose source inspect cannot find (defined by exec)."""
    ns = {"tl": tl}
    exec(compile("def _sourceless(out_ptr):\n    tl.store(out_ptr + tl.program_id(0), 7)\n",
                 "<no file for this>", "exec"), ns)
    return triton.jit(ns["_sourceless"])


def while_memmove(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Contract adapter (batch_memcpy) of the while-loop kernel."""
    n = int(src_ptrs.shape[0])
    _while_memmove_kernel[(n,)](src_ptrs.view(torch.uint64), dst_ptrs.view(torch.uint64), sizes.to(torch.int32),
                                BLOCK=BLOCK)


# ---------------------------------------------------------------- helpers
# rows that never touch each other's bytes, each overlapping itself: right (dst > src), left, apart
ROWS = ((10, 30, 300), (1000, 930, 250), (2000, 3000, 130), (4000, 4000, 70))


def _arena():
    return torch.from_numpy(np.random.default_rng(5).integers(0, 256, 4200, dtype=np.uint8))


def _memmove_expected(arena: torch.Tensor, rows) -> np.ndarray:
    out = arena.numpy().copy()
    for s, d, n in rows:
        out[d:d + n] = out[s:s + n].copy()
    return out


def _pointers(arena, rows):
    base = arena.data_ptr()
    src = torch.tensor([base + s for s, _, _ in rows], dtype=torch.int64)
    dst = torch.tensor([base + d for _, d, _ in rows], dtype=torch.int64)
    return src, dst, torch.tensor([n for _, _, n in rows], dtype=torch.int64)


class _Spy:
    """Which Python function each interpreted launch executed (its code's file name)."""

    def __init__(self, monkeypatch):
        from triton.runtime import interpreter
        self.files: list[str] = []
        orig = interpreter.GridExecutor.__init__

        def init(ex, fn, *args, **kwargs):
            self.files.append(fn.__code__.co_filename)
            orig(ex, fn, *args, **kwargs)

        monkeypatch.setattr(interpreter.GridExecutor, "__init__", init)

    def take(self) -> list[str]:
        out, self.files = self.files, []
        return out


def _entry_points():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    return {(c, a): c.__dict__.get(a) for c in (JITFunction, InterpretedFunction) for a in ("run", "__getitem__")}


def _is_variant(path: str) -> bool:
    return path.startswith("<mambafuzz-instrumented")


# ---------------------------------------------------------------- the transform
def test_delay_sites_are_where_the_loads_and_stores_are():
    """3 scalar loads; in the loop's if-branch a load, then a store (after the barrier); in the
    else-branch a store that loads in its own statement, split so delay 2 sits between them."""
    v = variant_of(_while_memmove_kernel)
    assert (v.load_sites, v.store_sites, v.helpers) == (5, 2, ())
    lines = [s.strip() for s in v.source.splitlines()]
    d1 = "_mambafuzz_delay(1, _mambafuzz_DELAY_POS, _mambafuzz_DELAY_NS, _mambafuzz_SCHEDULE, _mambafuzz_seed)"
    d2 = d1.replace("delay(1,", "delay(2,")
    for name in ("src", "dst", "size", "v"):
        i = next(i for i, s in enumerate(lines) if s.startswith(f"{name} = tl.load("))
        assert lines[i - 1] == d1, (name, lines[i - 1])
    barrier = lines.index("tl.debug_barrier()")
    assert lines[barrier + 1] == d2 and lines[barrier + 2].startswith("tl.store(")
    split = lines.index("_mambafuzz_v0 = tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=m)")
    assert lines[split - 1] == d1 and lines[split + 1] == d2
    assert lines[split + 2] == "tl.store((dst + offs).to(tl.pointer_type(tl.uint8)), _mambafuzz_v0, mask=m)"
    assert lines[0].endswith("_mambafuzz_DELAY_POS: 'constexpr'=0, _mambafuzz_DELAY_NS: 'constexpr'=0, "
                             "_mambafuzz_SCHEDULE: 'constexpr'=0, _mambafuzz_seed=0):")
    assert variant_of(_while_memmove_kernel) is v  # built once


def test_helpers_and_names_imported_from_triton_language():
    v = variant_of(_helper_copy_kernel)
    assert (v.load_sites, v.store_sites, v.helpers) == (4, 1, ("_piece",))
    assert ("_mambafuzz_h0(src, dst, k + lanes, k + lanes < size, _mambafuzz_DELAY_POS=_mambafuzz_DELAY_POS, "
            "_mambafuzz_DELAY_NS=_mambafuzz_DELAY_NS, _mambafuzz_SCHEDULE=_mambafuzz_SCHEDULE, "
            "_mambafuzz_seed=_mambafuzz_seed)") in v.source
    d = variant_of(_direct_import_kernel)
    assert (d.load_sites, d.store_sites) == (1, 1)
    assert "_mambafuzz_v0 = ld(x_ptr + offs, mask=m) + 1" in d.source


def test_engine_style_kernels_get_sites_inside_their_loops():
    from tests.style_kernels import batch
    expect = {"_memmove_kernel": (4, 1), "_forward_right_kernel": (4, 1), "_tail_dropped_kernel": (4, 1),
              "_memmove_left_kernel": (4, 1), "_barrier_before_load_kernel": (4, 1), "_guard_short_kernel": (4, 1)}
    for name, sites in expect.items():
        v = variant_of(getattr(batch, name))
        assert (v.load_sites, v.store_sites) == sites, name
        loop = v.source[v.source.index("for i in range"):]
        assert loop.count("_mambafuzz_delay(1,") == 1 and loop.count("_mambafuzz_delay(2,") == 1, name


def test_what_cannot_be_instrumented_says_why():
    def never(_call):
        return None
    with pytest.raises(NotInstrumentable, match="does not parse"):
        transform("def k(x):\n    return (\n", never)
    with pytest.raises(NotInstrumentable, match="no tl.load or tl.store"):
        transform("def k(x):\n    y = x + 1\n", never)
    with pytest.raises(NotInstrumentable, match=r"\*args"):
        transform("def k(*x):\n    pass\n", never)
    with pytest.raises(NotInstrumentable, match="already uses"):
        transform("def k(x, _mambafuzz_seed):\n    pass\n", lambda c: "load")
    with pytest.raises(NotInstrumentable, match="no tl.load or tl.store"):
        variant_of(_atomic_only_kernel)


# ---------------------------------------------------------------- (a) the variant computes what the kernel does
@interp_only
@pytest.mark.parametrize("delay", [(1, 2000, 1, 0), (2, 8000, 3, 12345)])
def test_the_variant_equals_the_kernel_in_the_interpreter(delay):
    arena = _arena()
    snap = arena.clone()
    expected = _memmove_expected(snap, ROWS)
    src, dst, sizes = _pointers(arena, ROWS)
    while_memmove(src, dst, sizes)
    assert np.array_equal(arena.numpy(), expected)  # the kernel is right, and so not vacuous below
    arena.copy_(snap)
    v = variant_of(_while_memmove_kernel)
    pos, ns, sched, seed = delay
    v.jit[(len(ROWS),)](src.view(torch.uint64), dst.view(torch.uint64), sizes.to(torch.int32), BLOCK=BLOCK,
                        _mambafuzz_DELAY_POS=pos, _mambafuzz_DELAY_NS=ns, _mambafuzz_SCHEDULE=sched,
                        _mambafuzz_seed=seed, num_warps=8)
    assert np.array_equal(arena.numpy(), expected)
    arena.copy_(snap)
    rows = ((10, 700, 300), (2000, 3000, 130))  # the helper kernel copies non-overlapping rows
    src, dst, sizes = _pointers(arena, rows)
    with perturbed_launches(P) as rec:
        _helper_copy_kernel[(2,)](src, dst, sizes, BLOCK=BLOCK)
    assert np.array_equal(arena.numpy(), _memmove_expected(snap, rows))
    assert rec.kernels["_helper_copy_kernel"].delays and rec.kernels["_helper_copy_kernel"].launches == 1


@interp_only
@LOADED_RANGE
def test_engine_style_adapters_give_the_same_bytes_perturbed():
    """Every adapter of tests/style_kernels/batch.py, plain and through its variant: equal bytes;
    the two correct ones equal memmove (the interpreter hides the racy ones' races)."""
    from tests.style_kernels import batch
    rows = ((10, 30, 2100), (3000, 2900, 1100))
    for name in ("memmove", "memmove_left", "left_barrier_before_load", "left_guard_misses_short",
                 "forward_on_right_overlap", "tail_dropped"):
        adapter = getattr(batch, name)
        arena = torch.from_numpy(np.random.default_rng(1).integers(0, 256, 4200, dtype=np.uint8))
        snap = arena.clone()
        used = rows if name != "memmove_left" else ((40, 10, 2100), (3000, 2900, 1100))
        ptrs = _pointers(arena, used)
        adapter(*ptrs)
        plain = arena.clone()
        arena.copy_(snap)
        with perturbed_launches(Perturb(1, 500, 2, 0, 4)) as rec:
            adapter(*ptrs)
        assert torch.equal(plain, arena), name
        (note,) = rec.kernels.values()
        assert note.delays and (note.load_sites, note.store_sites, note.launches) == (4, 1, 1), name
        if name in ("memmove", "memmove_left"):
            assert np.array_equal(plain.numpy(), _memmove_expected(snap, used)), name
    assert not torch.equal(plain, snap)


# ---------------------------------------------------------------- (c) routing, only inside, restored
@interp_only
def test_launches_go_to_the_variant_inside_the_context_only(monkeypatch):
    spy = _Spy(monkeypatch)
    before = _entry_points()
    arena = _arena()
    snap = arena.clone()
    src, dst, sizes = _pointers(arena, ROWS)
    while_memmove(src, dst, sizes)
    (outside,) = spy.take()
    assert outside == __file__
    arena.copy_(snap)
    with perturbed_launches(P) as rec:
        while_memmove(src, dst, sizes)
        while_memmove(src, dst, sizes)  # the second moves again: still what the kernel does twice
        (inside, again) = spy.take()
    assert _is_variant(inside) and _is_variant(again)
    note = rec.kernels["_while_memmove_kernel"]
    assert (note.delays, note.launches, note.num_warps, note.reason) == (True, 2, 8, None)
    assert "warp delays at 5 load and 2 store sites, 8 warps" in rec.note()
    assert _entry_points() == before
    twice = _memmove_expected(torch.from_numpy(_memmove_expected(snap, ROWS)), ROWS)
    assert np.array_equal(arena.numpy(), twice)
    while_memmove(src, dst, sizes)
    assert spy.take() == [__file__] and note.launches == 2


@interp_only
def test_the_launch_path_is_restored_when_the_target_raises(monkeypatch):
    spy = _Spy(monkeypatch)
    before = _entry_points()
    arena = _arena()
    src, dst, sizes = _pointers(arena, ROWS)
    with pytest.raises(RuntimeError, match="target failed"):
        with perturbed_launches(P):
            while_memmove(src, dst, sizes)
            raise RuntimeError("target failed")
    assert _is_variant(spy.take()[0])
    assert _entry_points() == before
    with perturbed_launches(P):  # nested: the inner one wins, the outer one is back after it
        with perturbed_launches(Perturb(1, 500, 1, 0, 4)) as inner:
            while_memmove(src, dst, sizes)
        assert inner.kernels["_while_memmove_kernel"].num_warps == 4
    assert _entry_points() == before
    while_memmove(src, dst, sizes)
    assert [_is_variant(f) for f in spy.take()] == [True, False]


@interp_only
@pytest.mark.skipif(_VERSION < (3, 6), reason="3.5's interpreter gives every kernel its own run: the "
                    "Autotuner calls it directly, past any class-level patch")
def test_an_autotuned_kernel_is_intercepted(monkeypatch):
    spy = _Spy(monkeypatch)
    x = torch.arange(100, dtype=torch.int32)
    y = torch.zeros(100, dtype=torch.int32)
    with perturbed_launches(P) as rec:
        _autotuned_add_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
    assert torch.equal(y, x + 3)
    (ran,) = spy.take()
    assert _is_variant(ran)
    note = rec.kernels["_autotuned_add_kernel"]
    assert note.delays and (note.load_sites, note.store_sites, note.launches) == (1, 1, 1)


# ---------------------------------------------------------------- (d) not instrumentable: reported, still runs
@interp_only
def test_a_kernel_that_cannot_be_instrumented_runs_as_written_and_says_why(monkeypatch):
    spy = _Spy(monkeypatch)
    counter = torch.zeros(3, dtype=torch.int32)
    out = torch.zeros(2, dtype=torch.int32)
    sourceless = _sourceless_kernel()
    with perturbed_launches(P) as rec:
        _atomic_only_kernel[(3,)](counter)
        sourceless[(2,)](out)
    assert counter.tolist() == [5, 5, 5] and out.tolist() == [7, 7]
    assert not any(_is_variant(f) for f in spy.take())
    assert rec.uninstrumented == {
        "_atomic_only_kernel": "no tl.load or tl.store found in it (nor in a helper it calls)",
        "_sourceless": rec.kernels["_sourceless"].reason}
    assert rec.kernels["_sourceless"].reason.startswith("its source is not available")
    assert "_atomic_only_kernel: no warp delays (no tl.load or tl.store" in rec.note()
    assert rec.to_json()["kernels"][0]["launches"] == 1


def test_a_variant_that_does_not_compile_falls_back_to_the_kernel(monkeypatch):
    """Compiled launches ask the variant to compile first; a failure there is ours, not the
    kernel's: the kernel runs as written (at the perturbation's warp count) and stays that way."""
    monkeypatch.setattr(launches, "_BROKEN", {})
    v = variant_of(_while_memmove_kernel)
    calls = []

    def fake_launch(fn, args, grid, warmup, kwargs):
        calls.append((fn is v.jit, warmup, kwargs.get("num_warps"), "_mambafuzz_DELAY_NS" in kwargs))
        if fn is v.jit and warmup:
            raise RuntimeError("PassManager::run failed\nmore")
        return "launched"

    rec = launches.LaunchRecord(P)
    for _ in range(2):
        assert rec._launch(_while_memmove_kernel, fake_launch, (1, 2), (1,), {"BLOCK": 64}, True) == "launched"
    assert calls == [(True, True, 8, True), (False, True, 8, False), (False, False, 8, False),
                     (False, True, 8, False), (False, False, 8, False)]
    note = rec.kernels["_while_memmove_kernel"]
    assert not note.delays and note.launches == 2 and note.num_warps == 8
    assert note.reason == "its instrumented variant did not compile: RuntimeError: PassManager::run failed"


def test_warps_only_perturbation_changes_only_the_warp_count():
    calls = []

    def fake_launch(fn, args, grid, warmup, kwargs):
        calls.append((fn is _while_memmove_kernel, warmup, kwargs))

    rec = launches.LaunchRecord(Perturb(1, 0, 0, 0, 8))
    rec._launch(_while_memmove_kernel, fake_launch, (), (1,), {"BLOCK": 64, "num_warps": 2}, True)
    assert calls == [(True, True, {"BLOCK": 64, "num_warps": 8}), (True, False, {"BLOCK": 64, "num_warps": 8})]
    assert rec.note().endswith("_while_memmove_kernel: 8 warps")


# ---------------------------------------------------------------- Materialized.run wiring
@interp_only
def test_materialized_run_intercepts_only_compiled_non_amplifiable_targets():
    case = BatchCopyCase(arena_size=1024, copies=((16, 40, 300), (600, 560, 200)), seed=3).with_perturb(P)
    m = materialize(case, "cpu")
    m.run(while_memmove)
    assert m.instrumented is None and m.compare() is None  # interpreted: the delays would be nothing
    m.restore()
    m.device = "cuda"  # as a compiled run routes it (the interpreter still runs the launches here)
    m.run(while_memmove)
    assert m.compare() is None
    assert m.instrumented.kernels["_while_memmove_kernel"].delays
    assert m.instrumented.perturb == P
    m.restore()
    m.instrumented = None
    got = []
    before = _entry_points()

    def amplifiable(src_ptrs, dst_ptrs, sizes, *, perturb=None):  # the project's launchers take perturb=
        got.append(perturb)
        assert _entry_points() == before  # not intercepted: it perturbs its own kernels

    m.run(amplifiable, amplifiable=True)
    assert got == [P] and m.instrumented is None
    unperturbed = materialize(case.with_perturb(None), "cpu")
    unperturbed.device = "cuda"
    unperturbed.run(while_memmove)
    assert unperturbed.instrumented is None and unperturbed.compare() is None


# ---------------------------------------------------------------- (b) compiled for sm_90, no GPU needed
_COMPILE_CODE = r'''
sys.path[:0] = ["tests", "tests/unit"]
from mambafuzz.instrument import variant_of
from tests.style_kernels import batch
import test_instrument as T

def sleeps(kernel, sig, consts, delay, warps=8):
    v = variant_of(kernel)
    c = {**consts, "_mambafuzz_DELAY_POS": delay[0], "_mambafuzz_DELAY_NS": delay[1],
         "_mambafuzz_SCHEDULE": delay[2]}
    return v, comp(v.jit, {**sig, "_mambafuzz_seed": "i32"}, c, warps).asm["ptx"].count("nanosleep.u32")

BATCH = {"src_ptrs": "*u64", "dst_ptrs": "*u64", "sizes": "*i32"}
for name in ("_memmove_kernel", "_barrier_before_load_kernel", "_guard_short_kernel"):
    k = getattr(batch, name)
    assert sleeps(k, BATCH, {"BLOCK": 1024}, (0, 0, 0))[1] == 0, name
    for sched in (1, 2, 3):
        v, n1 = sleeps(k, BATCH, {"BLOCK": 1024}, (1, 2000, sched))
        v, n2 = sleeps(k, BATCH, {"BLOCK": 1024}, (2, 2000, sched), warps=4)
        assert (n1, n2) == (v.load_sites, v.store_sites), (name, sched, n1, n2)
for k in (T._while_memmove_kernel, T._helper_copy_kernel):
    v, n = sleeps(k, BATCH, {"BLOCK": 64}, (2, 500, 3))
    assert n > 0 and sleeps(k, BATCH, {"BLOCK": 64}, (2, 0, 0))[1] == 0, k
v, n = sleeps(T._direct_import_kernel, {"x_ptr": "*i32", "y_ptr": "*i32", "n": "i32"}, {"BLOCK": 128}, (1, 8000, 1))
assert n == 1, n
print("compiled")
'''


@pytest.mark.slow
@pytest.mark.matrix
def test_variants_compile_for_sm90_with_nanosleep_at_each_site():
    compile_for_sm90(_COMPILE_CODE)

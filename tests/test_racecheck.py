"""Tests for the language-level race checker (mambafuzz.racecheck, SPEC 4).

Every kernel here is tiny and runs in Triton's interpreter on a CPU uint8
arena; the expected witnesses (bytes, offsets, lanes, source lines) are worked
out by hand in the comments.
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import inspect  # noqa: E402
import json  # noqa: E402

import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":  # pragma: no cover
    pytest.skip("the race checker needs TRITON_INTERPRET=1", allow_module_level=True)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as _interp  # noqa: E402

from mambafuzz.racecheck import Access, Hazard, OutOfBoundsAccess, RaceRecorder  # noqa: E402


# --------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------
@triton.jit
def left_overlap_copy(src, dst, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + offs)
    tl.store(dst + offs, x)


@triton.jit
def left_overlap_copy_guarded(src, dst, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(src + offs)
    tl.debug_barrier()
    tl.store(dst + offs, v)


@triton.jit
def add_one_in_place(p, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(p + offs)
    tl.store(p + offs, y + 1)


@triton.jit
def block_copy(src, dst, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    blk = tl.load(src + offs)
    tl.store(dst + offs, blk)


@triton.jit
def count_programs(counter):
    tl.atomic_add(counter, 1)


@triton.jit
def load_u64_at(p, out, SHIFT: tl.constexpr):
    q = (p + SHIFT).to(tl.pointer_type(tl.uint64))
    tl.store(out, tl.load(q))


@triton.jit
def store_wild(p, ADDR: tl.constexpr):
    wild = tl.full((), ADDR, tl.int64).to(tl.pointer_type(tl.uint8))
    tl.store(wild, tl.load(p))


@triton.jit
def broadcast_store(p, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    tl.store(p + lanes * 0, lanes.to(tl.uint8))


@triton.jit
def scalar_then_block(p, BLOCK: tl.constexpr):
    first = tl.load(p)
    idx = tl.arange(0, BLOCK)
    tl.store(p + idx, idx.to(tl.uint8) + first)


@triton.jit
def bytes_vs_word(p, out, NBYTES: tl.constexpr, WORD_AT: tl.constexpr):
    b = tl.load(p + tl.arange(0, NBYTES))
    tl.store(out + tl.arange(0, NBYTES), b)
    w = (p + WORD_AT).to(tl.pointer_type(tl.uint32))
    tl.store(w, 7)


@triton.jit
def two_overlap_copies(p, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(p + 8 + offs)
    tl.store(p + 4 + offs, a)
    c = tl.load(p + 40 + offs)
    tl.store(p + 36 + offs, c)


@triton.jit
def masked_shift(p, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    z = tl.load(p + 4 + offs, mask=m, other=0)
    tl.store(p + offs, z, mask=m)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def line_of(kernel, text: str) -> str:
    """'tests/test_racecheck.py:N: text' for the unique line `text` of kernel."""
    lines, start = inspect.getsourcelines(kernel.fn)
    hits = [i for i, ln in enumerate(lines) if ln.strip() == text]
    assert len(hits) == 1, (text, hits)
    return f"tests/test_racecheck.py:{start + hits[0]}: {text}"


def make_arena(n=64):
    return torch.arange(n, dtype=torch.uint8)


def patched_names():
    ib = _interp.interpreter_builder
    return {k for k in vars(ib) if k.startswith(("create_", "set_grid"))}


# --------------------------------------------------------------------------
# rule 1: intra-program
# --------------------------------------------------------------------------
def test_left_overlap_in_one_program_is_intra_program_hazard():
    arena = make_arena()
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        # src = arena+8, dst = arena+4, 16 lanes of one byte: lane i loads
        # arena+8+i and stores arena+4+i.  Bytes 8..19 are both; the lowest,
        # arena+8, is stored by lane 4 and loaded by lane 0.
        left_overlap_copy[(1,)](arena[8:], arena[4:], BLOCK=16)
    hz = rec.hazards
    assert len(hz) == 1
    h = hz[0]
    assert h.kind == "intra-program"
    assert h.address == base + 8
    assert (h.region, h.offset) == ("arena", 8)
    assert h.first == Access("store", (0, 0, 0), 4, (16,), 0,
                             line_of(left_overlap_copy, "tl.store(dst + offs, x)"), 1, base + 8)
    assert h.second == Access("load", (0, 0, 0), 0, (16,), 0,
                              line_of(left_overlap_copy, "x = tl.load(src + offs)"), 1, base + 8)
    assert "lane 4 stores byte arena+8" in h.explanation
    assert "lane 0 loads it" in h.explanation
    assert "tl.debug_barrier()" in h.explanation
    assert rec.stats == {"launches": 1, "programs": 1, "events": 2, "accesses": 32, "bytes": 32}
    # the interpreter still computed the (sequential) copy
    assert arena[4:20].tolist() == list(range(8, 24))
    json.dumps(h.to_json())


def test_barrier_between_load_and_store_is_no_hazard():
    arena = make_arena()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        left_overlap_copy_guarded[(1,)](arena[8:], arena[4:], BLOCK=16)
    assert rec.hazards == []
    assert arena[4:20].tolist() == list(range(8, 24))


def test_same_lane_load_then_store_in_place_is_no_hazard():
    arena = make_arena()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        add_one_in_place[(4,)](arena, BLOCK=16)
    assert rec.hazards == []
    assert rec.stats["programs"] == 4
    assert arena.tolist() == [(i + 1) % 256 for i in range(64)]


def test_broadcast_store_from_many_lanes_is_intra_program_hazard():
    arena = make_arena()
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        # all 8 lanes store arena+5: lane 0 and lane 1 are the witnesses
        broadcast_store[(1,)](arena[5:], BLOCK=8)
    (h,) = rec.hazards
    assert h.kind == "intra-program" and h.address == base + 5 and h.offset == 5
    line = line_of(broadcast_store, "tl.store(p + lanes * 0, lanes.to(tl.uint8))")
    assert (h.first.op, h.first.lane, h.first.line) == ("store", 0, line)
    assert (h.second.op, h.second.lane, h.second.line) == ("store", 1, line)
    assert "stores it too" in h.explanation


def test_scalar_and_block_are_different_lanes():
    arena = make_arena()
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        # scalar load of arena+0 (lane 0 of shape ()), block store of
        # arena+0..3 (shape (4,)): lane 0 of (4,) stores what the scalar read
        scalar_then_block[(1,)](arena, BLOCK=4)
    (h,) = rec.hazards
    assert h.kind == "intra-program" and h.address == base
    assert (h.first.op, h.first.lane, h.first.lane_shape) == ("store", 0, (4,))
    assert (h.second.op, h.second.lane, h.second.lane_shape) == ("load", 0, ())
    assert h.second.line == line_of(scalar_then_block, "first = tl.load(p)")


def test_bytes_are_compared_across_element_sizes():
    arena = make_arena()
    out = torch.zeros(16, dtype=torch.uint8)
    base = arena.data_ptr()
    # u8 loads of arena+0..3, u32 store at arena+4: no shared byte
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        rec.add_region("out", out)
        bytes_vs_word[(1,)](arena, out, NBYTES=4, WORD_AT=4)
    assert rec.hazards == []
    # u8 loads of arena+0..7: bytes 4..7 are shared; lowest is arena+4,
    # stored by the scalar u32 store, loaded by u8 lane 4
    arena = make_arena()
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        rec.add_region("out", out)
        bytes_vs_word[(1,)](arena, out, NBYTES=8, WORD_AT=4)
    (h,) = rec.hazards
    assert h.kind == "intra-program" and h.address == base + 4 and h.offset == 4
    assert (h.first.op, h.first.elem_size, h.first.lane_shape, h.first.address) == ("store", 4, (), base + 4)
    assert (h.second.op, h.second.elem_size, h.second.lane, h.second.lane_shape) == ("load", 1, 4, (8,))


def test_masked_off_lanes_do_not_count():
    arena = make_arena()
    base = arena.data_ptr()
    # lanes 0..3 on: loads arena+4..7, stores arena+0..3: disjoint
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        masked_shift[(1,)](arena, 4, BLOCK=16)
    assert rec.hazards == []
    assert rec.stats["accesses"] == 8
    # lanes 0..5 on: byte arena+4 stored by lane 4, loaded by lane 0
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        masked_shift[(1,)](arena, 6, BLOCK=16)
    (h,) = rec.hazards
    assert h.address == base + 4 and (h.first.lane, h.second.lane) == (4, 0)


def test_one_hazard_per_line_pair_sorted_and_capped():
    arena = make_arena()
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        two_overlap_copies[(1,)](arena, BLOCK=16)
    hz = rec.hazards
    # copy 1: loads 8..23, stores 4..19 -> lowest shared byte 8
    # copy 2: loads 40..55, stores 36..51 -> lowest shared byte 40
    # cross pairs: copy 2 stores 36..51 while copy 1 loads 8..23: none;
    # copy 1 stores 4..19 while copy 2 loads 40..55: none
    assert [(h.kind, h.offset) for h in hz] == [("intra-program", 8), ("intra-program", 40)]
    assert hz[1].first.line == line_of(two_overlap_copies, "tl.store(p + 36 + offs, c)")
    with RaceRecorder(max_hazards=1) as rec:
        rec.add_region("arena", arena)
        two_overlap_copies[(1,)](arena, BLOCK=16)
    assert [h.offset for h in rec.hazards] == [8]
    assert hz[0].address == base + 8


# --------------------------------------------------------------------------
# rule 2: cross-program
# --------------------------------------------------------------------------
def test_program_reading_what_another_writes_is_cross_program_hazard():
    arena = make_arena()
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        # 4 programs of 8 bytes; src = arena+0, dst = arena+8: program p loads
        # 8p..8p+7 and stores 8p+8..8p+15, so program 0 stores arena+8 (lane 0)
        # which program 1 loads (lane 0): the lowest shared byte
        block_copy[(4,)](arena, arena[8:], BLOCK=8)
    (h,) = rec.hazards
    assert h.kind == "cross-program"
    assert h.address == base + 8 and (h.region, h.offset) == ("arena", 8)
    assert h.first == Access("store", (0, 0, 0), 0, (8,), 0,
                             line_of(block_copy, "tl.store(dst + offs, blk)"), 1, base + 8)
    assert h.second == Access("load", (1, 0, 0), 0, (8,), 0,
                              line_of(block_copy, "blk = tl.load(src + offs)"), 1, base + 8)
    assert "program (0,0,0) (lane 0) stores byte arena+8" in h.explanation
    assert "program (1,0,0) (lane 0) loads it" in h.explanation
    assert rec.stats["programs"] == 4


def test_disjoint_programs_are_no_hazard():
    arena = make_arena()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        block_copy[(4,)](arena, arena[32:], BLOCK=8)
    assert rec.hazards == []
    assert arena[32:].tolist() == list(range(32))


def test_atomics_from_every_program_are_no_hazard():
    counter = torch.zeros(1, dtype=torch.int32)
    with RaceRecorder() as rec:
        rec.add_region("counter", counter)
        count_programs[(8,)](counter)
    assert rec.hazards == []
    assert counter.item() == 8
    assert rec.stats["programs"] == 8 and rec.stats["accesses"] == 8


def test_launches_are_ordered():
    arena = make_arena()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        # launch 1 writes arena+8..15; launch 2 (two programs) reads it
        block_copy[(1,)](arena, arena[8:], BLOCK=8)
        block_copy[(2,)](arena[8:], arena[40:], BLOCK=8)
    assert rec.hazards == []
    assert rec.stats["launches"] == 2 and rec.stats["programs"] == 3


# --------------------------------------------------------------------------
# rule 3 / 4: misaligned, out of bounds
# --------------------------------------------------------------------------
def test_misaligned_u64_load():
    arena = make_arena()
    out = torch.zeros(1, dtype=torch.int64)
    base = arena.data_ptr()
    assert base % 8 == 0
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        rec.add_region("out", out)
        load_u64_at[(1,)](arena, out, SHIFT=3)
    (h,) = rec.hazards
    assert h.kind == "misaligned"
    assert h.address == base + 3 and (h.region, h.offset) == ("arena", 3)
    assert h.second is None
    assert h.first == Access("load", (0, 0, 0), 0, (), 0,
                             line_of(load_u64_at, "tl.store(out, tl.load(q))"), 8, base + 3)
    assert "not a multiple of the element size 8" in h.explanation
    # bytes 3..10 little-endian
    assert out.item() == int.from_bytes(bytes(range(3, 11)), "little")
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        rec.add_region("out", out)
        load_u64_at[(1,)](arena, out, SHIFT=8)
    assert rec.hazards == []


def test_wild_pointer_raises_before_touching_memory():
    arena = make_arena()
    with pytest.raises(OutOfBoundsAccess) as info:
        with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}) as rec:
            store_wild[(1,)](arena, ADDR=64)
    h = info.value.hazard
    assert isinstance(h, Hazard)
    assert h.kind == "out-of-bounds" and h.address == 64
    assert h.region is None and h.offset is None and h.second is None
    assert h.first.op == "store" and h.first.line == line_of(store_wild, "tl.store(wild, tl.load(p))")
    assert "0x40" in h.explanation
    assert rec.hazards == [h]
    assert patched_names() == set()
    json.dumps(h.to_json())


def test_no_regions_means_no_bounds_check():
    arena = make_arena()
    out = torch.zeros(1, dtype=torch.int64)
    with RaceRecorder() as rec:
        load_u64_at[(1,)](arena, out, SHIFT=8)
    assert rec.hazards == []
    assert rec.stats["launches"] == 1


def test_region_from_tensor_and_raw_start():
    arena = make_arena()
    rec = RaceRecorder({"raw": (arena.data_ptr() + 32, 32)})
    rec.add_region("arena", arena)
    rec.add_region("head", arena.data_ptr(), 16)
    # the smallest region holding an address names it
    assert rec._locate(arena.data_ptr() + 3) == ("head", 3)
    assert rec._locate(arena.data_ptr() + 20) == ("arena", 20)
    assert rec._locate(arena.data_ptr() + 40) == ("raw", 8)
    assert rec._locate(arena.data_ptr() + 64) == (None, None)
    with pytest.raises(ValueError):
        rec.add_region("bad", 1234)


# --------------------------------------------------------------------------
# patching hygiene
# --------------------------------------------------------------------------
def test_patches_restored_after_exit_and_after_exception():
    before = patched_names()
    assert before == set()
    arena = make_arena()
    with RaceRecorder() as rec:
        assert {"create_masked_load", "create_masked_store", "create_atomic_rmw",
                "create_atomic_cas", "create_barrier", "set_grid_dim", "set_grid_idx"} <= patched_names()
        block_copy[(1,)](arena, arena[32:], BLOCK=8)
    assert patched_names() == before
    with pytest.raises(RuntimeError, match="boom"):
        with RaceRecorder() as rec:
            block_copy[(1,)](arena, arena[32:], BLOCK=8)
            raise RuntimeError("boom")
    assert patched_names() == before
    assert rec.stats["launches"] == 1
    # an exception inside the kernel (not ours) propagates unchanged
    with pytest.raises(Exception):
        with RaceRecorder() as rec:
            block_copy[(1,)](arena, "not a tensor", BLOCK=8)
    assert patched_names() == before


def test_launch_outside_the_recorder_records_nothing():
    arena = make_arena()
    rec = RaceRecorder()
    block_copy[(4,)](arena, arena[8:], BLOCK=8)   # racy, but not recorded
    with rec:
        pass
    block_copy[(4,)](arena, arena[8:], BLOCK=8)
    assert rec.hazards == []
    assert rec.stats == {"launches": 0, "programs": 0, "events": 0, "accesses": 0, "bytes": 0}


# --------------------------------------------------------------------------
# differential test: random access patterns fed through the hooks, against a
# per-byte brute-force model of the rules
# --------------------------------------------------------------------------
import numpy as np  # noqa: E402
from triton._C.libtriton import ir as _ir  # noqa: E402

_TYPES = {1: (tl.uint8, np.uint8), 2: (tl.uint16, np.uint16), 4: (tl.uint32, np.uint32), 8: (tl.uint64, np.uint64)}


def _call(ib, hook, positional, **given):
    """Call ``ib.<hook>`` with `given` by parameter name, the rest None (``is_*`` flags False).

    Names and order come from the builder class's signature, so the same call
    works on 3.9 (``cache_policy``) and 3.5..3.8 (``cache_modifier``,
    ``eviction_policy``); `positional` passes everything by position instead.
    """
    names = list(inspect.signature(getattr(type(ib), hook)).parameters)[1:]
    assert set(given) <= set(names), (hook, names, given)
    values = {n: given.get(n, False if n.startswith("is_") else None) for n in names}
    if positional:
        return getattr(ib, hook)(*values.values())
    return getattr(ib, hook)(**values)


def _issue(ib, op, site, addrs, mask, size):
    """One access through the hooks; site 0 calls by keyword, site 1 by position."""
    tt, nt = _TYPES[size]
    ptr = _interp.TensorHandle(np.ascontiguousarray(addrs, dtype=np.uint64), tl.pointer_type(tt))
    m = _interp.TensorHandle(np.ascontiguousarray(mask, dtype=bool), tl.int1)
    val = _interp.TensorHandle(np.ones(addrs.shape, dtype=nt), tt)
    if op == "load":
        _call(ib, "create_masked_load", site == 1, ptrs=ptr, mask=m)
    elif op == "store":
        _call(ib, "create_masked_store", site == 1, ptrs=ptr, value=val, mask=m)
    else:
        _call(ib, "create_atomic_rmw", site == 1, rmwOp=_ir.ATOMIC_OP.ADD, ptr=ptr, val=val, mask=m,
              sem=_ir.MEM_SEMANTIC.RELAXED)


def _random_launch(rng, ib, base, n_programs):
    """Issue a random launch through the hooks; return the byte-level model."""
    model = []   # (byte, program, epoch, (shape, lane), op, line site, elem address, size)
    ib.set_grid_dim(n_programs, 1, 1)
    for p in range(n_programs):
        ib.set_grid_idx(p, 0, 0)
        epoch = 0
        for _ in range(rng.integers(1, 6)):
            if rng.random() < 0.15:
                ib.create_barrier()
                epoch += 1
                continue
            op = ["load", "store", "atomic"][rng.choice(3, p=[0.45, 0.45, 0.1])]
            size = int(rng.choice([4, 8] if op == "atomic" else [1, 2, 4, 8]))
            shape = [(), (1,), (4,), (8,), (2, 4)][rng.integers(0, 5)]
            n = int(np.prod(shape)) if shape else 1
            stride = int(rng.choice([1, 1, 2, 0, -1]))
            start = int(rng.integers(0, 48)) // size * size
            if op != "atomic" and rng.random() < 0.25:
                start += int(rng.integers(0, size))  # may be misaligned
            offs = start + stride * size * np.arange(n)
            if rng.random() < 0.2:
                offs = rng.integers(0, 48, n) // size * size
            offs = np.clip(offs, 0, 56)
            if op == "atomic":
                offs = offs // size * size
            mask = rng.random(n) < 0.8
            addrs = (base + offs).astype(np.uint64).reshape(shape if shape else (1,))
            site = int(rng.integers(0, 2))
            _issue(ib, op, site, addrs, mask.reshape(addrs.shape), size)
            lane_shape = () if shape in ((), (1,)) else shape
            for lane in np.flatnonzero(mask):
                a = int(addrs.reshape(-1)[lane])
                for b in range(a, a + size):
                    model.append((b, p, epoch, (lane_shape, int(lane)), op, (op, site), a, size))
    return model


def _brute_force(model):
    by_byte = {}
    for acc in model:
        by_byte.setdefault(acc[0], []).append(acc)
    first = {}
    for byte, accs in by_byte.items():
        for s in accs:
            if s[4] != "store":
                continue
            for o in accs:
                if o[4] == "atomic":
                    continue
                if o[1] == s[1] and o[2] == s[2] and o[3] != s[3]:
                    first["intra-program"] = min(first.get("intra-program", byte), byte)
                if o[1] != s[1]:
                    first["cross-program"] = min(first.get("cross-program", byte), byte)
    mis = [acc[6] for acc in model if acc[6] % acc[7]]
    if mis:
        first["misaligned"] = min(mis)
    return first


def test_random_patterns_match_brute_force():
    rng = np.random.default_rng(1234)
    buf = torch.zeros(128, dtype=torch.uint8)
    base = (buf.data_ptr() + 63) // 64 * 64
    ib = _interp.interpreter_builder
    seen = set()
    for trial in range(300):
        with RaceRecorder({"buf": (base, 64)}, max_hazards=1000) as rec:
            model = _random_launch(rng, ib, base, int(rng.integers(1, 4)))
        expect = _brute_force(model)
        got = {}
        for h in rec.hazards:
            got[h.kind] = min(got.get(h.kind, h.address), h.address)
            assert h.region == "buf" and h.offset == h.address - base
            if h.kind == "misaligned":
                assert h.first.address % h.first.elem_size != 0
                continue
            f, s = h.first, h.second
            assert f.op == "store" and s.op != "atomic"
            assert f.address <= h.address < f.address + f.elem_size
            assert s.address <= h.address < s.address + s.elem_size
            if h.kind == "intra-program":
                assert f.program == s.program and f.epoch == s.epoch
                assert (f.lane, f.lane_shape) != (s.lane, s.lane_shape)
            else:
                assert f.program != s.program
        assert got == expect, (trial, got, expect)
        seen |= set(expect)
    assert seen == {"intra-program", "cross-program", "misaligned"}


# --------------------------------------------------------------------------
# the builder-signature adapter (racecheck._param_reader)
# --------------------------------------------------------------------------
class _Builder38:
    """Triton 3.5..3.8's interpreter builder signatures."""
    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile): ...
    def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy): ...
    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope): ...
    def create_atomic_cas(self, ptr, cmp, val, sem, scope): ...
    def set_grid_idx(self, x, y, z): ...


class _Builder39(_Builder38):
    """Triton 3.9's: one cache argument, renamed."""
    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile): ...
    def create_masked_store(self, ptrs, value, mask, cache_policy): ...


class _BuilderMoved(_Builder38):
    """A made-up release that moves the mask first and renames ptrs to ptr."""
    def create_masked_load(self, mask, ptr, other=None): ...
    def create_masked_store(self, value, mask, ptr): ...
    def create_atomic_rmw(self, mask, rmwOp, ptrs, val, sem, scope): ...


class _BuilderNoMask(_Builder38):
    def create_masked_load(self, ptrs, other, cache_policy, is_volatile): ...


@pytest.mark.parametrize("cls, load_pos, store_pos, rmw_pos", [
    (_Builder38, (0, 1), (0, 2), (1, 3)),
    (_Builder39, (0, 1), (0, 2), (1, 3)),
    (_BuilderMoved, (1, 0), (2, 1), (2, 0)),
])
def test_param_reader_finds_pointer_and_mask_by_name(cls, load_pos, store_pos, rmw_pos):
    from mambafuzz.racecheck import _param_reader
    b = cls()
    for hook, (p_at, m_at) in (("create_masked_load", load_pos), ("create_masked_store", store_pos),
                               ("create_atomic_rmw", rmw_pos)):
        names = list(inspect.signature(getattr(cls, hook)).parameters)[1:]
        read = _param_reader(b, hook)
        args = [f"arg{i}" for i in range(len(names))]
        assert read(tuple(args), {}) == (f"arg{p_at}", f"arg{m_at}"), (cls, hook)
        # by keyword, and positional up to the pointer only
        kwargs = dict(zip(names, args))
        assert read((), kwargs) == (f"arg{p_at}", f"arg{m_at}")
        k = min(p_at, m_at) + 1
        assert read(tuple(args[:k]), dict(zip(names[k:], args[k:]))) == (f"arg{p_at}", f"arg{m_at}")
    assert _param_reader(b, "create_atomic_cas")(("P", "C", "V", "S", "X"), {}) == ("P",)
    assert _param_reader(b, "set_grid_idx")((3, 4, 5), {}) == (3, 4, 5)


def test_param_reader_refuses_a_builder_without_the_names():
    from mambafuzz.racecheck import _param_reader
    with pytest.raises(RuntimeError, match="create_masked_load.*no parameter named mask"):
        _param_reader(_BuilderNoMask(), "create_masked_load")
    assert _param_reader(_BuilderNoMask(), "create_masked_store")(("p", "v", "m", None, None), {}) == ("p", "m")


def test_param_reader_reads_the_class_not_a_wrapper():
    """A patched instance attribute (*args, **kwargs) does not hide the real names."""
    from mambafuzz.racecheck import _param_reader
    b = _Builder39()
    b.create_masked_load = lambda *args, **kwargs: None
    assert _param_reader(b, "create_masked_load")(("p", "m", None, None, False), {}) == ("p", "m")

"""Tests for the language-level race checker (mambafuzz.racecheck, docs/contracts.md#races).

Every kernel here is tiny and runs in Triton's interpreter on a CPU uint8
arena; the expected witnesses (bytes, offsets, lanes, source lines) are worked
out by hand in the comments.  The last sections test the hazard rules and the
event store on hand-made numpy arrays, without running Triton.
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
_ROOT = str(Path(__file__).resolve().parents[2])
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
def block_then_one_lane(p, out, BLOCK: tl.constexpr):
    x = tl.load(p + tl.arange(0, BLOCK))
    tl.store(out + tl.arange(0, BLOCK), x)
    tl.store(p + tl.arange(0, 1), tl.full((1,), 7, tl.uint8))


@triton.jit
def scalar_then_one_lane(p):
    first = tl.load(p)
    tl.store(p + tl.arange(0, 1), tl.full((1,), 3, tl.uint8) + first)


@triton.jit
def store_word_wild(p, ADDR: tl.constexpr):
    wild = tl.full((), ADDR, tl.int64).to(tl.pointer_type(tl.uint32))
    tl.store(wild, tl.load(p).to(tl.uint32))


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
    """'tests/unit/test_racecheck.py:N: text' for the unique line `text` of kernel."""
    lines, start = inspect.getsourcelines(kernel.fn)
    hits = [i for i, ln in enumerate(lines) if ln.strip() == text]
    assert len(hits) == 1, (text, hits)
    return f"tests/unit/test_racecheck.py:{start + hits[0]}: {text}"


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


def test_a_shape_1_store_is_named_as_its_shape_and_is_the_scalars_lane():
    """A block op of shape (1,) is the one lane of a scalar for the rules (a scalar load and a (1,)
    store of one byte are program order), but the witness names the shape the kernel used."""
    arena = make_arena()
    out = torch.zeros(4, dtype=torch.uint8)
    base = arena.data_ptr()
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        rec.add_region("out", out)
        block_then_one_lane[(1,)](arena, out, BLOCK=4)
    (h,) = rec.hazards
    assert h.kind == "intra-program" and h.address == base
    assert (h.first.op, h.first.lane, h.first.lane_shape) == ("store", 0, (1,))
    assert (h.second.op, h.second.lane, h.second.lane_shape) == ("load", 0, (4,))
    assert h.explanation.startswith("program (0,0,0): lane 0 of shape (1,) stores byte arena+0 (")
    assert "and lane 0 of shape (4,) loads it (" in h.explanation
    with RaceRecorder() as rec:
        rec.add_region("arena", arena)
        scalar_then_one_lane[(1,)](arena)
    assert rec.hazards == []


def test_a_store_4_bytes_before_the_arena_is_said_to_be_4_bytes_before_it():
    arena = make_arena(64)
    base = arena.data_ptr()
    with pytest.raises(OutOfBoundsAccess) as info:  # a u32 store at arena - 4: its last byte just before it
        with RaceRecorder({"arena": (base, 64)}):
            store_word_wild[(1,)](arena, ADDR=base - 4)
    text = info.value.hazard.explanation
    assert f"lane 0 stores 4 byte(s) at {hex(base - 4)} (" in text
    assert f"), 4 byte(s) before arena [{hex(base)}, +64); outside every live region" in text, text


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
    assert rec.regions.locate(arena.data_ptr() + 3) == ("head", 3)
    assert rec.regions.locate(arena.data_ptr() + 20) == ("arena", 20)
    assert rec.regions.locate(arena.data_ptr() + 40) == ("raw", 8)
    assert rec.regions.locate(arena.data_ptr() + 64) == (None, None)
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


def _issue(ib, op, site, addrs, mask, size, fill=1):
    """One access through the hooks; site 0 calls by keyword, site 1 by position.  A store writes
    `fill` into every byte."""
    tt, nt = _TYPES[size]
    ptr = _interp.TensorHandle(np.ascontiguousarray(addrs, dtype=np.uint64), tl.pointer_type(tt))
    m = _interp.TensorHandle(np.ascontiguousarray(mask, dtype=bool), tl.int1)
    val = _interp.TensorHandle(np.full(addrs.size * size, fill, dtype=np.uint8).view(nt).reshape(addrs.shape), tt)
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
    issued = 0
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
            # each access its own fill byte in a zeroed buffer: every store changes every byte it writes
            # (same-value stores are tested on their own)
            issued += 1
            _issue(ib, op, site, addrs, mask.reshape(addrs.shape), size, fill=issued)
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
        buf.zero_()
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
# the builder-signature adapter (racecheck.hooks._param_reader)
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
    from mambafuzz.racecheck.hooks import _param_reader
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
    from mambafuzz.racecheck.hooks import _param_reader
    with pytest.raises(RuntimeError, match="create_masked_load.*no parameter named mask"):
        _param_reader(_BuilderNoMask(), "create_masked_load")
    assert _param_reader(_BuilderNoMask(), "create_masked_store")(("p", "v", "m", None, None), {}) == ("p", "m")


def test_param_reader_reads_the_class_not_a_wrapper():
    """A patched instance attribute (*args, **kwargs) does not hide the real names."""
    from mambafuzz.racecheck.hooks import _param_reader
    b = _Builder39()
    b.create_masked_load = lambda *args, **kwargs: None
    assert _param_reader(b, "create_masked_load")(("p", "m", None, None, False), {}) == ("p", "m")


# --------------------------------------------------------------------------
# re-entrancy: one recorder at a time; a hook re-entered by the interpreter records once
# --------------------------------------------------------------------------
def test_recorders_do_not_nest():
    arena = make_arena()
    inner = RaceRecorder()
    with RaceRecorder() as outer:
        with pytest.raises(RuntimeError, match="already active"):
            with outer:
                pass
        with pytest.raises(RuntimeError, match="do not nest"):
            with inner:
                pass
        # the refusals left the first recorder recording: program 0 stores
        # arena+8 (lane 0), which program 1 loads
        block_copy[(4,)](arena, arena[8:], BLOCK=8)
    assert [(h.kind, h.address) for h in outer.hazards] == [("cross-program", arena.data_ptr() + 8)]
    assert outer.stats["programs"] == 4
    assert inner.hazards == [] and inner.stats["launches"] == 0
    assert patched_names() == set()
    # once the first has left, another may record
    with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}) as again:
        block_copy[(4,)](arena, arena[8:], BLOCK=8)
    assert [(h.kind, h.offset) for h in again.hazards] == [("cross-program", 8)]


def test_a_hook_reentered_by_the_interpreter_records_once(monkeypatch):
    """An interpreter whose compare-and-swap loads through the (patched) masked load."""
    ib = _interp.interpreter_builder
    names = list(inspect.signature(type(ib).create_atomic_cas).parameters)[1:]
    assert names[0] == "ptr", names

    def create_atomic_cas(self, ptr, *rest):
        on = _interp.TensorHandle(np.ones(ptr.data.shape, dtype=bool), tl.int1)
        return _call(self, "create_masked_load", True, ptrs=ptr, mask=on)  # re-enters a hook

    create_atomic_cas.__signature__ = inspect.signature(type(ib).create_atomic_cas)
    monkeypatch.setattr(type(ib), "create_atomic_cas", create_atomic_cas)
    buf = torch.zeros(16, dtype=torch.uint8)
    base = (buf.data_ptr() + 7) // 8 * 8
    ptr = _interp.TensorHandle(np.array([base + 1], dtype=np.uint64), tl.pointer_type(tl.uint32))
    with RaceRecorder({"buf": (buf.data_ptr(), 16)}) as rec:
        ib.set_grid_dim(1, 1, 1)
        ib.set_grid_idx(0, 0, 0)
        ib.create_atomic_cas(ptr, None, None, None, None)
    # one event, the atomic: the inner load (also misaligned, from another line) is not recorded
    assert rec.stats["events"] == 1 and rec.stats["accesses"] == 1
    (h,) = rec.hazards
    assert (h.kind, h.first.op, h.address) == ("misaligned", "atomic", base + 1)
    assert patched_names() == set()


# --------------------------------------------------------------------------
# the rules on hand-made arrays (no Triton runs; mambafuzz.racecheck.rules imports numpy only)
# --------------------------------------------------------------------------
from mambafuzz.racecheck import rules  # noqa: E402
from mambafuzz.racecheck.events import EventStore, Regions, OP_LOAD, OP_STORE  # noqa: E402

_OPS = {"load": (False, False), "store": (True, False), "atomic": (False, True)}


def flat_launch(*events):
    """A FlatLaunch from events (op, program, segment, shape_id, elem_size, line_id, addrs); lanes 0..n-1."""
    counts = [len(e[6]) for e in events]
    col = lambda k: np.array([e[k] for e in events], dtype=np.int64)  # noqa: E731
    return rules.FlatLaunch(
        is_store=np.array([_OPS[e[0]][0] for e in events]), is_atomic=np.array([_OPS[e[0]][1] for e in events]),
        program=col(1), segment=col(2), shape_id=col(3), elem_size=col(4), line_id=col(5),
        first_elem=np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64),
        addr=np.concatenate([np.asarray(e[6], dtype=np.int64) for e in events]),
        lane=np.concatenate([np.arange(c, dtype=np.int64) for c in counts]),
        event=np.repeat(np.arange(len(events)), counts).astype(np.int64))


def conflicts(c):
    return (c.store.tolist(), c.other.tolist(), c.byte.tolist())


NONE = ([], [], [])


def test_rules_import_numpy_only():
    import subprocess
    path = Path(rules.__file__)
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('rules_alone', {str(path)!r})\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['rules_alone'] = m\n"
            "spec.loader.exec_module(m)\n"
            "print(sorted(n for n in ('triton', 'torch', 'mambafuzz') if n in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_rule_misaligned_lowest_per_line_in_address_order():
    # positions: 0..3 line 0 u32 at 0, 4, 9, 13 (9 and 13 misaligned); 4: line 1 u16 at 7;
    # 5: line 0 u32 at 5; 6: line 1 u64 at 7 (ties position 4: the first wins)
    addr = np.array([0, 4, 9, 13, 7, 5, 7])
    size = np.array([4, 4, 4, 4, 2, 4, 8])
    line = np.array([0, 0, 0, 0, 1, 0, 1])
    # line 0: lowest misaligned is 5 (position 5); line 1: 7 (position 4); by address: 5, then 7
    assert rules.misaligned_elements(addr, size, line).tolist() == [5, 4]
    assert rules.misaligned_elements(addr[:2], size[:2], line[:2]).tolist() == []


def test_rule_intra_program_needs_two_lanes_one_segment_and_a_store():
    # one program: lanes 0..3 load 8..11 (line 0), then lanes 0..3 store 6..9 (line 1).
    # Byte 8: loaded by lane 0 (position 0), stored by lane 2 (position 4 + 2); byte 9: lanes 1, 3.
    load = ("load", 0, 1, 1, 1, 0, [8, 9, 10, 11])
    store = ("store", 0, 1, 1, 1, 1, [6, 7, 8, 9])
    f = rules.find_hazards(flat_launch(load, store))
    assert conflicts(f.intra_program) == ([6], [0], [8])     # one witness per line pair, lowest byte
    assert conflicts(f.cross_program) == NONE and f.misaligned.tolist() == []
    # a barrier between them (a new segment): ordered
    f = rules.find_hazards(flat_launch(load, ("store", 0, 2, 1, 1, 1, [6, 7, 8, 9])))
    assert conflicts(f.intra_program) == NONE
    # loads alone never race
    f = rules.find_hazards(flat_launch(load, ("load", 0, 1, 1, 1, 1, [6, 7, 8, 9])))
    assert conflicts(f.intra_program) == NONE


def test_rule_same_lane_is_program_order_but_a_scalar_is_another_lane():
    # lanes 0..3 of shape 1 load 0..3 and store 0..3: each byte has one lane: no hazard
    f = rules.find_hazards(flat_launch(("load", 0, 1, 1, 1, 0, [0, 1, 2, 3]),
                                       ("store", 0, 1, 1, 1, 1, [0, 1, 2, 3])))
    assert conflicts(f.intra_program) == NONE
    # a scalar (shape 0, lane 0) loads byte 0 that lane 0 of shape 1 stores
    f = rules.find_hazards(flat_launch(("load", 0, 1, 0, 1, 0, [0]),
                                       ("store", 0, 1, 1, 1, 1, [0, 1, 2, 3])))
    assert conflicts(f.intra_program) == ([1], [0], [0])


def test_rule_broadcast_store_overlaps_itself():
    # one event, 4 lanes all storing byte 5: the sweep keeps it although it is alone;
    # the witness is the first store (lane 0) and the first other lane (lane 1)
    flat = flat_launch(("store", 0, 1, 1, 1, 0, [5, 5, 5, 5]))
    assert rules.suspect_events(flat, flat.elem_size[flat.event]).tolist() == [True]
    assert conflicts(rules.find_hazards(flat).intra_program) == ([0], [1], [5])
    # increasing addresses cannot overlap: nothing to look at
    flat = flat_launch(("store", 0, 1, 1, 1, 0, [5, 6, 7, 8]))
    assert rules.suspect_events(flat, flat.elem_size[flat.event]) is None


def test_rule_cross_program_needs_two_programs_and_a_plain_store():
    # program p (segment p+1) loads 8p..8p+7 (line 0) and stores 8p+8..8p+15 (line 1):
    # byte 8 is stored by program 0 (position 8) and loaded by program 1 (position 16)
    events = []
    for p in range(2):
        events += [("load", p, p + 1, 1, 1, 0, list(range(8 * p, 8 * p + 8))),
                   ("store", p, p + 1, 1, 1, 1, list(range(8 * p + 8, 8 * p + 16)))]
    f = rules.find_hazards(flat_launch(*events))
    assert conflicts(f.cross_program) == ([8], [16], [8])
    assert conflicts(f.intra_program) == NONE
    # an atomic is not a plain access: a store and an atomic of another program do not race
    f = rules.find_hazards(flat_launch(("store", 0, 1, 0, 4, 0, [0]), ("atomic", 1, 2, 0, 4, 1, [0])))
    assert conflicts(f.cross_program) == NONE
    # a store and a load of another program at different bytes do not race either
    f = rules.find_hazards(flat_launch(("store", 0, 1, 0, 4, 0, [0]), ("load", 1, 2, 0, 4, 1, [4])))
    assert conflicts(f.cross_program) == NONE


def test_rule_bytes_compared_across_sizes_and_misalignment():
    # u8 lanes 0..7 load 0..7, a scalar u32 store at 4: bytes 4..7 shared; lowest 4 is
    # stored by position 8 and loaded by lane 4 (position 4)
    f = rules.find_hazards(flat_launch(("load", 0, 1, 1, 1, 0, list(range(8))), ("store", 0, 1, 0, 4, 1, [4])))
    assert conflicts(f.intra_program) == ([8], [4], [4])
    # one size, but misaligned: a u16 store at 1 (bytes 1, 2) and a u16 load at 2 (bytes 2, 3)
    # share byte 2 although their addresses differ
    f = rules.find_hazards(flat_launch(("store", 0, 1, 0, 2, 0, [1]), ("load", 0, 1, 1, 2, 1, [2])))
    assert f.misaligned.tolist() == [0]
    assert conflicts(f.intra_program) == ([0], [1], [2])


def test_expand_to_bytes():
    addr, elems = np.array([0, 10]), np.array([3, 7])
    b, e = rules.expand_to_bytes(addr, elems, np.array([2, 4]), elementwise_ok=True)
    assert (b.tolist(), e.tolist()) == ([0, 1, 10, 11, 12, 13], [3, 3, 7, 7, 7, 7])
    b, e = rules.expand_to_bytes(addr, elems, np.array([2, 2]), elementwise_ok=False)
    assert (b.tolist(), e.tolist()) == ([0, 1, 10, 11], [3, 3, 7, 7])
    b, e = rules.expand_to_bytes(addr, elems, np.array([4, 4]), elementwise_ok=True)
    assert (b.tolist(), e.tolist()) == ([0, 10], [3, 7])


def test_first_conflicts_one_witness_per_line_pair():
    # groups [0, 1], [2, 3], [4, 5], [6, 7] of a sorted order
    new_group = np.array([False, True, False, True, False, True, False])
    is_store = np.array([True, False, True, False, True, False, False, True])
    who = np.array([0, 1, 0, 1, 0, 0, 5, 6])
    line = np.array([1, 0, 1, 0, 2, 0, 3, 2])
    # group 0: store 0 (who 0), other 1 (who 1), lines (1, 0); group 1: the same lines, dropped;
    # group 2: one who, no race; group 3: a load by who 5 comes before the store by who 6
    store, other = rules.first_conflicts(new_group, is_store, who, line)
    assert (store.tolist(), other.tolist()) == ([0, 7], [1, 6])
    # every group a single entry
    store, other = rules.first_conflicts(np.ones(3, dtype=bool), np.ones(4, dtype=bool), np.arange(4), np.zeros(4))
    assert store.tolist() == other.tolist() == []


# --------------------------------------------------------------------------
# the event store and the fence, fed numpy arrays (no Triton)
# --------------------------------------------------------------------------
def test_fence_union_of_regions():
    regions = Regions()
    assert not regions.fenced
    regions.add("a", 1000, 16)
    regions.add("b", 1016, 16)          # touches a: one interval [1000, 1032)
    regions.add("c", 1040, 8)
    regions.add("empty", 5000, 0)
    assert regions.fenced
    inside = np.array([1000, 1012, 1024, 1040], dtype=np.int64)
    assert regions.first_outside(inside, 8) == -1            # 1012..1019 spans a and b
    assert regions.first_outside(np.array([1000, 1028], dtype=np.int64), 8) == 1   # 1028..1035
    assert regions.first_outside(np.array([1044, 1036], dtype=np.int64), 4) == 1    # the gap
    assert regions.first_outside(np.array([1000, -1], dtype=np.int64), 1) == 1
    assert regions.first_outside(np.array([5000], dtype=np.int64), 1) == 0
    assert regions.locate(1020) == ("b", 4) and regions.address_text(1020) == "b+4"
    assert regions.address_text(1036) == hex(1036)
    assert not regions.add_storage("clone", 1040, 8)        # known: not added again
    assert [n for n, _, _ in regions.named] == ["a", "b", "c", "empty"]
    unfenced = Regions()
    assert not unfenced.add_storage("clone", 0, 8)          # no fence asked for: stays off
    assert not unfenced.fenced


def test_event_store_keeps_active_lanes_and_refuses_before_storing():
    regions = Regions()
    regions.add("buf", 100, 32)
    store = EventStore(regions)
    store.start_program(2, 0, 0)
    ptrs = np.array([[100, 101], [102, 103]], dtype=np.uint64)
    store.record(OP_LOAD, ptrs, np.array([[True, False], [True, True]]), 1, "k.py:1: a")
    store.record(OP_STORE, ptrs, np.zeros((2, 2), dtype=bool), 1, "k.py:2: b")   # no lane on
    store.barrier()
    store.record(OP_STORE, np.array([104], dtype=np.uint64), None, 4, "k.py:3: c")  # a scalar
    flat = store.flatten()
    assert flat.addr.tolist() == [100, 102, 103, 104] and flat.lane.tolist() == [0, 2, 3, 0]
    assert flat.segment.tolist() == [1, 2] and flat.shape_id.tolist() == [1, 0]
    assert flat.first_elem.tolist() == [0, 3] and flat.is_store.tolist() == [False, True]
    assert store.access(flat, 2) == Access("load", (2, 0, 0), 3, (2, 2), 0, "k.py:1: a", 1, 103)
    assert store.access(flat, 3).epoch == 1
    with pytest.raises(OutOfBoundsAccess) as info:
        store.record(OP_STORE, np.array([128, 130], dtype=np.uint64), None, 4, "k.py:4: d")
    h = info.value.hazard
    assert (h.kind, h.address, h.first.lane, h.first.op) == ("out-of-bounds", 130, 1, "store")
    assert "buf [0x64, +32)" in h.explanation
    assert store.stats == {"launches": 0, "programs": 1, "events": 2, "accesses": 4, "bytes": 7}


# --------------------------------------------------------------------------
# memory allocated while recording, freed memory, the oob witness's words
# --------------------------------------------------------------------------
class _Ref:
    """A stand-in for StorageWeakRef: expired() is what the test says."""

    def __init__(self):
        self.dead = False

    def expired(self):
        return self.dead


def test_regions_drop_freed_storages_at_prune_and_name_them():
    regions = Regions()
    regions.add("arena", 1000, 64)
    ref = _Ref()
    assert regions.add_storage("alloc#1 uint8[32] at a.py:3", 2000, 32, ref)
    assert regions.first_outside(np.array([2000, 2024], dtype=np.int64), 8) == -1
    ref.dead = True
    assert not regions.knows(2000, 32)                # freed: no longer known, still fenced until prune
    regions.prune()
    assert [n for n, _, _ in regions.named] == ["arena"]
    assert regions.first_outside(np.array([2008], dtype=np.int64), 1) == 0
    assert regions.outside_text(2008, 1) == "inside alloc#1 uint8[32] at a.py:3 [0x7d0, +32), freed before this launch"
    regions.prune()                                   # nothing more to drop; case regions never expire
    assert [n for n, _, _ in regions.named] == ["arena"]


def test_regions_register_again_an_address_the_allocator_reused():
    regions = Regions()
    regions.add("arena", 1000, 64)
    old, new = _Ref(), _Ref()
    regions.add_storage("alloc#1", 2000, 32, old)
    old.dead = True                                   # freed, and the same bytes handed out again
    assert regions.add_storage("alloc#2", 2000, 32, new)
    regions.prune()
    assert [n for n, _, _ in regions.named] == ["arena", "alloc#2"]
    assert regions.first_outside(np.array([2000], dtype=np.int64), 8) == -1


def test_outside_text_says_where_a_refused_access_lies():
    regions = Regions()
    regions.add("a", 0x10000, 16)
    regions.add("b", 0x20000, 8)
    assert regions.outside_text(0x10010, 4) == "right after the end of a [0x10000, +16)"
    assert regions.outside_text(0x10014, 1) == "4 byte(s) after the end of a [0x10000, +16)"
    # before a region, counted from the access's first byte (as after one): 2 bytes at b - 10 start 10
    # bytes before b; a 4-byte store at b - 4 is 4 bytes before it (it used to read "0 byte(s)")
    assert regions.outside_text(0x20000 - 10, 2) == "10 byte(s) before b [0x20000, +8)"
    assert regions.outside_text(0x20000 - 4, 4) == "4 byte(s) before b [0x20000, +8)"
    assert regions.outside_text(0x20000 - 1, 1) == "1 byte(s) before b [0x20000, +8)"
    # 8 bytes from b - 2: its first 2 bytes outside, its last 6 inside b
    assert regions.outside_text(0x20000 - 2, 8) == "2 byte(s) before b [0x20000, +8), running 6 byte(s) into it"
    assert regions.outside_text(0x1000c, 8) == "offset 12 of a [0x10000, +16), running 4 byte(s) past its end"
    assert regions.outside_text(8, 1) == "a null pointer's page"
    assert regions.outside_text(1 << 60, 1) == "far from every region"


def _tmp_address_store(arena, tmp):
    store_wild[(1,)](arena, ADDR=tmp.data_ptr() + 3)


def test_recorder_knows_memory_allocated_while_recording():
    from mambafuzz import adapters
    from mambafuzz.racecheck import recording

    arena = make_arena()
    before = torch.zeros(8, dtype=torch.uint8)
    with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}) as rec:
        assert recording() is rec
        tmp = torch.zeros(8, dtype=torch.uint8)      # reached only through a constant address
        _tmp_address_store(arena, tmp)
    assert recording() is None and rec.hazards == [] and tmp[3] == arena[0]
    name = rec.regions.locate(tmp.data_ptr() + 3)[0]
    assert name.startswith("alloc#") and " uint8[8] at tests/unit/test_racecheck.py:" in name
    with pytest.raises(OutOfBoundsAccess):           # made before the recording: unknown
        with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}):
            _tmp_address_store(arena, before)
    with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}) as rec:
        adapters.add_region("before", before)        # handed over: known
        _tmp_address_store(arena, before)
    assert rec.hazards == [] and rec.regions.locate(before.data_ptr()) == ("before", 0)
    with pytest.raises(OutOfBoundsAccess) as info:   # allocated, then freed before the launch
        with RaceRecorder({"arena": (arena.data_ptr(), arena.numel())}):
            gone = torch.zeros(4096, dtype=torch.uint8)
            address = gone.data_ptr()
            del gone
            store_wild[(1,)](arena, ADDR=address)
    assert "freed before this launch" in info.value.hazard.explanation
    assert patched_names() == set()


# --------------------------------------------------------------------------
# same-value stores: a store that leaves its bytes as they were cannot corrupt a reader
# --------------------------------------------------------------------------
def test_rule_same_value_is_per_byte_and_a_changing_witness_is_preferred():
    # program 0 stores a u64 at 0 changing only its byte 0 (bitmask 0b1), and a u8 at 16 changing it;
    # program 1 loads bytes 3 and 0 (line 0), and byte 16 (line 2).  Line pair (store 1, load 0): the
    # lowest shared byte is 0, changed: a witness that can change bytes.
    events = [("store", 0, 1, 0, 8, 1, [0]), ("store", 0, 1, 0, 1, 1, [16]),
              ("load", 1, 2, 0, 1, 0, [3]), ("load", 1, 2, 0, 1, 0, [0]), ("load", 1, 2, 0, 1, 2, [16])]
    base = flat_launch(*events)
    changed = np.array([0b1, 1, 0, 0, 0], dtype=np.int64)
    flat = rules.FlatLaunch(**{**base.__dict__, "changed": changed})
    cross = rules.find_hazards(flat).cross_program
    assert conflicts(cross) == ([0, 1], [3, 4], [0, 16]) and cross.same().tolist() == [False, False]
    # byte 0 left as it was too: the line pair's only witness is same-value (byte 0, the lowest)
    flat = rules.FlatLaunch(**{**base.__dict__, "changed": np.array([0, 1, 0, 0, 0], dtype=np.int64)})
    cross = rules.find_hazards(flat).cross_program
    assert conflicts(cross) == ([0, 1], [3, 4], [0, 16]) and cross.same().tolist() == [True, False]
    # only byte 3 of the u64 changed: the load of byte 3 is the witness, the load of byte 0 is not
    flat = rules.FlatLaunch(**{**base.__dict__, "changed": np.array([0b1000, 1, 0, 0, 0], dtype=np.int64)})
    cross = rules.find_hazards(flat).cross_program
    assert conflicts(cross) == ([0, 1], [2, 4], [3, 16]) and cross.same().tolist() == [False, False]
    # no values known: every store changes every byte (the rules as before)
    assert rules.find_hazards(base).cross_program.same().tolist() == [False, False]


def test_the_recorder_ranks_hazards_that_change_bytes_first_and_upgrades_a_line_pair():
    buf = torch.zeros(128, dtype=torch.uint8)
    base = (buf.data_ptr() + 63) // 64 * 64
    ib = _interp.interpreter_builder

    def one(p, op, site, offset, fill=0):
        ib.set_grid_idx(p, 0, 0)
        _issue(ib, op, site, np.array([base + offset], dtype=np.uint64), np.array([True]), 1, fill=fill)

    with RaceRecorder({"buf": (base, 64)}) as rec:
        ib.set_grid_dim(2, 1, 1)
        one(0, "store", 0, 8)                   # a zero stored over a zero (site 0) ...
        one(1, "load", 0, 8)                    # ... read by program 1
        one(0, "store", 1, 40, fill=7)          # a 7 over a zero (site 1), read by program 1
        one(1, "load", 1, 40)
    first, second = rec.hazards
    assert (first.offset, first.same_value, second.offset, second.same_value) == (40, False, 8, True)
    assert "already there" in second.explanation and "already there" not in first.explanation
    assert first.to_json()["same_value"] is False and second.to_json()["same_value"] is True
    with RaceRecorder({"buf": (base, 64)}) as rec:
        for offset, fill in ((8, 0), (16, 5)):  # the same line pair, same-value in launch 1, changing in 2
            ib.set_grid_dim(2, 1, 1)
            one(0, "store", 0, offset, fill=fill)
            one(1, "load", 0, offset)
    (h,) = rec.hazards
    assert (h.offset, h.same_value) == (16, False)

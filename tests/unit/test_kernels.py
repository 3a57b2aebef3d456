"""Tests of the project's kernels, the torch path, the bug zoo and the registry.

On a CPU-only machine every kernel runs through Triton's interpreter (the
conftest sets ``TRITON_INTERPRET=1`` before anything imports ``kernels``).  Run
the same file compiled on a GPU with ``TRITON_INTERPRET=0 pytest -m gpu
tests/unit/test_kernels.py``: the device parameter then becomes ``cuda``.

Expected values come ONLY from the numpy oracle (``oracle``) applied to an
unmodified snapshot of the arena, never from a second copy implementation.
Arenas are filled with non-periodic pseudo-random bytes.

What the interpreter can and cannot show (programs run one after another and
every block op loads all its lanes before storing any):

* wrong-kind zoo rows (TAIL-DROP, DS-CONTIG, TILE-GAP, PAD-CLOBBER, NOOP-SKIP,
  ADDR-I32, the wrong half of BM-RIGHT) differ from the oracle here;
* PP-INPLACE also differs here, deterministically, once a self-copy-with-bias
  request has more than one program (later programs read accepted = 1);
* BM-NOGUARD, SD-SPAN, DS-ROW and MISALIGN give the right bytes here; the race
  recorder (``mambafuzz.racecheck``) flags them, which the last section checks.
"""
import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from common import compile_for_sm90

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mambafuzz import kernels  # noqa: E402
from mambafuzz import oracle  # noqa: E402
from mambafuzz.kernels import registry  # noqa: E402
from mambafuzz.kernels.batch_memcpy import BLOCK  # noqa: E402
from mambafuzz.oracle import PoolLayout  # noqa: E402

INTERP = kernels.INTERPRETED
if INTERP:
    DEVICES = [pytest.param("cpu", id="cpu")]
else:
    DEVICES = [pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
interp_only = pytest.mark.skipif(not INTERP, reason="needs TRITON_INTERPRET=1")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def fill(seed, n):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def make_arena(seed, n, device):
    snap = fill(seed, n)
    snap.flags.writeable = False
    return torch.from_numpy(snap.copy()).to(device), snap


def i32(values, device):
    return torch.tensor(np.asarray(values, dtype=np.int32).reshape(-1), dtype=torch.int32,
                        device=device)


def i64(values, device):
    return torch.tensor(np.asarray(values, dtype=np.int64).reshape(-1), dtype=torch.int64,
                        device=device)


def meta_table(pools, base, device):
    meta = np.zeros((len(pools), kernels.META_COLS), dtype=np.int64)
    for s, p in enumerate(pools):
        ds = p.kind == "conv_ds"
        meta[s, kernels.META_BASE] = base + p.offset
        meta[s, kernels.META_BLOCK_STRIDE] = p.block_stride
        meta[s, kernels.META_ELEM] = p.elem_size
        meta[s, kernels.META_INNER] = p.inner_elems
        meta[s, kernels.META_CONV_LEN] = p.state_len if p.is_conv else 0
        meta[s, kernels.META_GROUP] = p.group
        meta[s, kernels.META_DS_ROWS] = p.dim if ds else 0
        meta[s, kernels.META_DS_ROW_STRIDE] = p.row_stride_eff if ds else 0
    return torch.from_numpy(meta).to(device)


def sd_pool(elem, state_len, dim, num_blocks=4, pad=0, group=0):
    data = state_len * dim * elem
    return PoolLayout("conv_sd", 0, num_blocks, data + pad * elem, elem,
                      state_len=state_len, dim=dim, group=group)


def ds_pool(elem, state_len, dim, num_blocks=4, pad=0, row_pad=0, group=0):
    rs = (state_len + row_pad) * elem if row_pad else 0
    data = (dim - 1) * (rs or state_len * elem) + state_len * elem
    return PoolLayout("conv_ds", 0, num_blocks, data + pad * elem, elem,
                      state_len=state_len, dim=dim, row_stride=rs, group=group)


def temporal_pool(elem, inner, num_blocks=4, pad=0, group=0):
    data = int(np.prod(inner)) * elem
    return PoolLayout("temporal", 0, num_blocks, data + pad * elem, elem,
                      inner=tuple(inner), group=group)


def place(pools, shift=0):
    """Lay pools out one after another (64-byte spacing, then ``shift`` elements
    off the 64-byte boundary); returns (pools, arena size)."""
    out, off = [], 64
    for p in pools:
        off = (off + 63) // 64 * 64 + shift * p.elem_size
        out.append(dataclasses.replace(p, offset=off))
        off += p.num_blocks * p.block_stride + 40
    return out, off + 64


def run_batch(target, device, copies, arena_size=6000, seed=0):
    """Run one batch (list of (src, dst, n) byte offsets); (actual, expected)."""
    arena, snap = make_arena(seed, arena_size, device)
    rows = np.asarray(copies, dtype=np.int64).reshape(-1, 3)
    src, dst, n = rows[:, 0], rows[:, 1], rows[:, 2]
    expected = oracle.expect_batch(snap, src, dst, n)
    base = arena.data_ptr()
    registry.get(target)(i64(src + base, device), i64(dst + base, device), i64(n, device),
                         arena=arena)
    return arena.cpu().numpy(), expected


def run_states(target, device, pools, arena_size, bt, src, dst, bias, num_tiles=1, seed=1):
    """Run one state_copy call; (actual, expected)."""
    arena, snap = make_arena(seed, arena_size, device)
    bt = np.asarray(bt, dtype=np.int32)
    expected = oracle.expect_state_copies(snap, pools, bt, src, dst, bias)
    registry.get(target)(meta_table(pools, arena.data_ptr(), device),
                         torch.from_numpy(bt.copy()).to(device),
                         i32(src, device), i32(dst, device), i32(bias, device),
                         num_tiles=num_tiles, arena=arena)
    return arena.cpu().numpy(), expected


def run_post(target, device, pools, arena_size, bt, req, block_size, num_tiles=1, seed=2):
    """Run one postprocess call; (actual arena, expected arena, actual accepted, expected)."""
    arena, snap = make_arena(seed, arena_size, device)
    bt = np.asarray(bt, dtype=np.int32)
    names = ("num_computed", "num_scheduled", "num_draft", "num_accepted", "state_idx")
    exp_arena, exp_acc = oracle.expect_postprocess(snap, pools, bt, *(req[k] for k in names),
                                                   block_size)
    args = {k: i32(req[k], device) for k in names}
    registry.get(target)(meta_table(pools, arena.data_ptr(), device),
                         torch.from_numpy(bt.copy()).to(device), **args,
                         block_size=block_size, num_tiles=num_tiles, arena=arena)
    return (arena.cpu().numpy(), exp_arena, args["num_accepted"].cpu().numpy(),
            np.asarray(exp_acc))


def same(actual, expected):
    if np.array_equal(actual, expected):
        return True
    bad = np.flatnonzero(actual != expected)
    print(f"{bad.size} bytes differ, first at {bad[:8].tolist()}: "
          f"got {actual[bad[:8]].tolist()} expected {expected[bad[:8]].tolist()}")
    return False


def single_request_table(src_block, dst_block, src_col, dst_col, cols=4, filler=3):
    row = [filler] * cols
    row[src_col] = src_block
    row[dst_col] = dst_block
    return [[row]]


# --------------------------------------------------------------------------
# batch_memcpy
# --------------------------------------------------------------------------
BATCH_CASES = {
    # name: (src, dst, n)
    "size0": (100, 200, 0),
    "size1": (101, 300, 1),
    "size7": (104, 301, 7),
    "size8": (96, 400, 8),
    "size9": (97, 505, 9),
    "size8-misaligned": (99, 400, 8),
    "aligned-head-tail": (1003, 2011, 40),  # head 5, body 32, tail 3
    "big-aligned": (16, 3024, 2500),
    "big-misaligned": (17, 3022, 2500),
    "exact-overlap": (500, 500, 1500),
    "left-shift1": (1001, 1000, 2100),
    "left-shift8": (1008, 1000, 2100),
    "left-shift16-aligned": (1016, 1000, 3000),
    "left-shift3-odd": (1003, 1000, 9),
    "left-shift-block": (1000 + BLOCK, 1000, 3 * BLOCK),
    "left-shift-misaligned-body": (1013, 1002, 2500),
    "right-shift1": (1000, 1001, 2100),
    "right-shift8": (1000, 1008, 2100),
    "right-shift16-aligned": (1000, 1016, 3000),
    "right-shift3-odd": (1000, 1003, 9),
    "right-shift-block": (1000, 1000 + BLOCK, 3 * BLOCK),
    "right-misaligned-body": (1002, 1013, 2500),
    "right-headtail": (1005, 1013, 45),
    "adjacent-no-overlap": (1000, 2000, 1000),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", ["triton.batch_memcpy", "torch.batch_memcpy"])
@pytest.mark.parametrize("case", list(BATCH_CASES))
def test_batch_memcpy_single(case, target, device):
    actual, expected = run_batch(target, device, [BATCH_CASES[case]])
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", ["triton.batch_memcpy", "torch.batch_memcpy"])
def test_batch_memcpy_many_copies(target, device):
    # disjoint footprints, each copy overlapping itself in its own way
    copies = [(1, 5, 300), (410, 400, 300), (800, 800, 64), (1203, 1200, 1), (1300, 1309, 0),
              (1500, 2700, 1100), (4003, 4011, 1500), (5600, 5900, 7)]
    actual, expected = run_batch(target, device, copies, arena_size=7000)
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_memcpy_random(device):
    """A sweep of random single copies: every offset mod 8, sizes up to 3 BLOCKs."""
    rng = np.random.default_rng(7)
    n_arena = 8000
    for i in range(60):
        n = int(rng.choice([int(rng.integers(0, 24)), int(rng.integers(0, 3 * BLOCK))]))
        src = int(rng.integers(0, n_arena - n))
        if i % 2:
            dst = int(np.clip(src + rng.integers(-40, 41), 0, n_arena - n))
        else:
            dst = int(rng.integers(0, n_arena - n))
        actual, expected = run_batch("triton.batch_memcpy", device, [(src, dst, n)],
                                     arena_size=n_arena, seed=i)
        assert same(actual, expected), (src, dst, n)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_memcpy_empty_batch_launches_nothing(device):
    arena, snap = make_arena(0, 64, device)
    empty = torch.zeros(0, dtype=torch.int64, device=device)
    registry.get("triton.batch_memcpy")(empty, empty, empty, arena=arena)
    assert np.array_equal(arena.cpu().numpy(), snap)


# long rows split over programs (kernels.batch_memcpy: a (row, part) grid)
from mambafuzz.kernels.batch_memcpy import MAX_PARTS, SPLIT_BLOCK, SPLIT_MIN, parts_cap, parts_needed  # noqa: E402

# rows that do not overlap themselves, long enough to split (the byte path, the u64 path with a head
# and a tail, an exact overlap), plus rows that overlap themselves and must stay in one program
SPLIT_ROWS = [
    (0, 300_000 + 3, 2 * SPLIT_MIN + 5),              # dst 3 mod 8, src 0 mod 8: the byte path, 3 parts
    (8 + 5, 600_000 + 5, 3 * SPLIT_MIN + 7),          # same residue (5): head 3, u64 body, tail, 4 parts
    (1_000_000, 1_000_000, 2 * SPLIT_MIN),            # exact overlap: split too (reads = writes, per part)
    (1_300_003, 1_300_003 - 16, 2 * SPLIT_MIN + 11),  # left overlap: one program
    (1_500_000, 1_500_000 + 24, 2 * SPLIT_MIN + 1),   # right overlap: one program
    # src = dst mod 16 (3): the 16-byte path, a 13-byte head (two byte pieces), whole blocks, a
    # masked last block of 3 words, a 5-byte tail, 4 parts
    (1_800_000 + 3 + 16 * 7, 2_200_000 + 3, 3 * SPLIT_MIN + 42),
]
SPLIT_ARENA = 2_600_000


def test_parts_needed_counts_only_rows_that_do_not_overlap():
    rows = np.asarray(SPLIT_ROWS, dtype=np.int64)
    assert parts_needed(*rows.T) == 4
    assert parts_needed([0], [10], [SPLIT_MIN]) == 1
    assert parts_needed([0], [10 * SPLIT_MIN], [SPLIT_MIN + 1]) == 2
    assert parts_needed([0], [200 * SPLIT_MIN], [100 * SPLIT_MIN]) == 100
    assert parts_needed([0], [2000 * SPLIT_MIN], [1000 * SPLIT_MIN]) == MAX_PARTS == 256
    assert parts_needed([16], [0], [100 * SPLIT_MIN]) == 1  # overlaps itself
    assert parts_needed([], [], []) == 1
    # the cap comes from the row count: about PROGRAMS programs in all
    assert [parts_cap(r) for r in (1, 64, 256, 4096, 16384, 10**6)] == [256, 256, 64, 4, 1, 1]
    long_rows = [[i * 200 * SPLIT_MIN for i in range(256)], [(i * 200 + 100) * SPLIT_MIN for i in range(256)],
                 [100 * SPLIT_MIN] * 256]
    assert parts_needed(*long_rows) == 64
    assert parts_needed(*long_rows, cap=3) == 3


@pytest.mark.parametrize("device", DEVICES)
def test_batch_memcpy_splits_long_rows_exactly(device):
    for rows in (SPLIT_ROWS, SPLIT_ROWS[:2], SPLIT_ROWS[3:]):
        actual, expected = run_batch("triton.batch_memcpy", device, rows, arena_size=SPLIT_ARENA, seed=3)
        assert same(actual, expected), rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.matrix
def test_batch_memcpy_bytes_do_not_depend_on_the_grid(device):
    """The tuning knobs change who copies what, never the bytes: any parts cap, any step, any part size."""
    from mambafuzz.kernels.batch_memcpy import batch_memcpy
    knobs = [(parts, split_block, interleave, unroll) for parts in (1, 2, 3, 7, 64) for split_block in (1024, 4096)
             for interleave, unroll in ((False, 1), (True, 2) if parts % 2 else (True, 1), (False, 2),
                                        (True, 4) if parts % 2 else (False, 4))]
    for i, (parts, split_block, interleave, unroll) in enumerate(knobs):
        split_min, part_major = (4096, 8192, SPLIT_MIN)[i % 3], i % 2 == 1
        arena, snap = make_arena(4, SPLIT_ARENA, device)
        rows = np.asarray(SPLIT_ROWS, dtype=np.int64)
        base = arena.data_ptr()
        expected = oracle.expect_batch(snap, rows[:, 0], rows[:, 1], rows[:, 2])
        batch_memcpy(i64(rows[:, 0] + base, device), i64(rows[:, 1] + base, device), i64(rows[:, 2], device),
                     parts=parts, split_block=split_block, interleave=interleave, unroll=unroll,
                     split_min=split_min, part_major=part_major)
        assert same(arena.cpu().numpy(), expected), (parts, split_block, interleave, unroll, split_min, part_major)


@interp_only
@pytest.mark.parametrize("interleave, unroll, part_major", [(False, 1, False), (True, 1, True), (True, 2, False),
                                                            (False, 2, True), (True, 4, False), (False, 4, True)])
def test_batch_memcpy_gpu_grid_gives_the_same_bytes(interleave, unroll, part_major):
    """The GPU launch (a cap of parts for every row, idle ones exit) as the interpreter runs it."""
    from mambafuzz.kernels.batch_memcpy import _batch_memcpy_kernel, _flags
    arena, snap = make_arena(4, SPLIT_ARENA, "cpu")
    rows = np.asarray(SPLIT_ROWS + [(1_700_000, 1_750_000, 9)], dtype=np.int64)
    base = arena.data_ptr()
    expected = oracle.expect_batch(snap, rows[:, 0], rows[:, 1], rows[:, 2])
    cap = 64  # of MAX_PARTS: what 256 rows get; each idle program costs the interpreter
    grid = (len(rows) * cap,) if part_major else (len(rows), cap)
    _batch_memcpy_kernel[grid](i64(rows[:, 0] + base, "cpu"), i64(rows[:, 1] + base, "cpu"), i64(rows[:, 2], "cpu"),
                               cap, 0, BLOCK=BLOCK, SPLIT_BLOCK=SPLIT_BLOCK, SPLIT_MIN=SPLIT_MIN,
                               INTERLEAVE=interleave, UNROLL=unroll, PART_MAJOR=part_major, **_flags(None),
                               DELAY_POS=0, DELAY_NS=0, SCHEDULE=0)
    assert same(arena.numpy(), expected)


@interp_only
def test_split_rows_record_no_hazards_and_zoo_rows_still_show():
    assert _recorded_batch("triton.batch_memcpy", SPLIT_ROWS, arena_size=SPLIT_ARENA) == set()
    # a row that overlaps itself is still guarded and walked in the guard's direction
    long_left = [(2_000 + 16, 2_000, 2 * SPLIT_MIN)]
    long_right = [(2_000, 2_000 + 16, 2 * SPLIT_MIN)]
    assert _recorded_batch("triton.batch_memcpy", long_left + long_right[:0], arena_size=300_000) == set()
    assert _recorded_batch("triton.batch_memcpy", long_right, arena_size=300_000) == set()
    assert "intra-program" in _recorded_batch("zoo.BM-NOGUARD", long_left, arena_size=300_000)
    assert "intra-program" in _recorded_batch("zoo.BM-RIGHT", long_right, arena_size=300_000)
    actual, expected = run_batch("zoo.BM-RIGHT", "cpu", long_right, arena_size=300_000)
    assert not np.array_equal(actual, expected)
    # MISALIGN on a split row: misaligned u64 loads in every part
    assert "misaligned" in _recorded_batch("zoo.MISALIGN", SPLIT_ROWS[:1], arena_size=SPLIT_ARENA)


@pytest.mark.parametrize("device", DEVICES)
def test_tail_drop_on_a_split_row_drops_only_the_row_tail(device):
    row = SPLIT_ROWS[1]  # same residue: head 3, then whole words, tail (n - 3) % 8 = 4 bytes
    actual, expected = run_batch("zoo.TAIL-DROP", device, [row], arena_size=SPLIT_ARENA, seed=5)
    src, dst, n = row
    tail = (n - (8 - dst % 8) % 8) % 8
    bad = np.flatnonzero(actual != expected)
    assert tail == 4 and set(bad.tolist()) <= set(range(dst + n - tail, dst + n)) and bad.size >= 1


def test_batch_memcpy_rejects_bad_inputs():
    from mambafuzz.kernels.batch_memcpy import batch_memcpy
    p = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(TypeError):
        batch_memcpy(p, p, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError):
        batch_memcpy(p, p, torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="unknown variant"):
        batch_memcpy(p, p, p, variant="NOPE")


# --------------------------------------------------------------------------
# state_copy: SD conv
# --------------------------------------------------------------------------
STATE_TARGETS = ["triton.state_copy", "torch.state_copy"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("elem", [1, 2, 4, 8])
@pytest.mark.parametrize("same_block", [True, False], ids=["same", "distinct"])
@pytest.mark.parametrize("bias", [0, 1, 2, 3, 4, 6])
def test_sd_conv(bias, same_block, elem, target, device):
    # state_len 4: bias 4 and 6 copy nothing; dim 5 makes tokens odd-sized
    # (the u64 head/body/tail split moves with every token); padded blocks.
    pools, size = place([sd_pool(elem, state_len=4, dim=5, pad=3)], shift=1)
    bt = single_request_table(2, 2 if same_block else 1, src_col=0, dst_col=1)
    actual, expected = run_states(target, device, pools, size, bt, [0], [1], [bias])
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("same_col", [True, False], ids=["same-col", "same-block"])
def test_sd_conv_big_tokens(same_col, target, device):
    # tokens of 1200 bytes: the u64 body spans more than one BLOCK chunk
    pools, size = place([sd_pool(4, state_len=4, dim=300, num_blocks=3, pad=2)])
    if same_col:
        bt, src, dst = single_request_table(1, 1, 2, 2), [2], [2]
    else:
        bt, src, dst = single_request_table(1, 1, 0, 3), [0], [3]
    for bias in (1, 3):
        actual, expected = run_states(target, device, pools, size, bt, src, dst, [bias])
        assert same(actual, expected)


# --------------------------------------------------------------------------
# state_copy: DS conv
# --------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("elem", [1, 2, 4, 8])
@pytest.mark.parametrize("same_block", [True, False], ids=["same", "distinct"])
@pytest.mark.parametrize("bias", [0, 1, 2, 3, 4, 7])
@pytest.mark.parametrize("row_pad", [0, 3], ids=["dense-rows", "padded-rows"])
def test_ds_conv(row_pad, bias, same_block, elem, target, device):
    pools, size = place([ds_pool(elem, state_len=4, dim=6, pad=5, row_pad=row_pad)])
    bt = single_request_table(3, 3 if same_block else 0, src_col=1, dst_col=2)
    actual, expected = run_states(target, device, pools, size, bt, [1], [2], [bias])
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("elem", [2, 8])
def test_ds_conv_many_rows(elem, target, device):
    # more rows than one chunk of ROWS lanes
    from mambafuzz.kernels.state_copy import ROWS
    pools, size = place([ds_pool(elem, state_len=5, dim=ROWS + 7, num_blocks=2, row_pad=1)])
    bt = single_request_table(1, 1, 0, 0)
    actual, expected = run_states(target, device, pools, size, bt, [0], [0], [2])
    assert same(actual, expected)


# --------------------------------------------------------------------------
# state_copy: temporal
# --------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("elem", [1, 2, 4, 8])
@pytest.mark.parametrize("num_tiles", [1, 16])
@pytest.mark.parametrize("bias", [0, 1, 2])
def test_temporal(bias, num_tiles, elem, target, device):
    # 3*37 elements: the size is no multiple of 8 nor of 8*num_tiles; padded blocks
    pools, size = place([temporal_pool(elem, (3, 37), num_blocks=5, pad=9)])
    bt = [[[4, 0, 2, 1, 3]]]  # src_col 0 (+bias) -> dst_col 3
    actual, expected = run_states(target, device, pools, size, bt, [0], [3], [bias],
                                  num_tiles=num_tiles)
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("num_tiles", [1, 16])
def test_temporal_same_block_and_large(num_tiles, target, device):
    # src_col + bias names the destination's physical block (exact overlap),
    # and a 2.4 KB state (several BLOCK chunks per tile when num_tiles == 1)
    pools, size = place([temporal_pool(4, (601,), num_blocks=3, pad=1)])
    bt = [[[0, 2, 1, 2]]]  # src_col 1 + bias 2 -> col 3 -> block 2 == dst block (col 1)
    actual, expected = run_states(target, device, pools, size, bt, [1], [1], [2],
                                  num_tiles=num_tiles)
    assert same(actual, expected)


# --------------------------------------------------------------------------
# state_copy: several requests, states and groups in one launch
# --------------------------------------------------------------------------
def _mixed_pools():
    return place([
        sd_pool(2, state_len=4, dim=7, num_blocks=8, pad=1, group=0),
        ds_pool(4, state_len=3, dim=5, num_blocks=8, pad=2, row_pad=2, group=1),
        temporal_pool(8, (5, 3), num_blocks=8, pad=3, group=0),
        temporal_pool(1, (77,), num_blocks=8, pad=0, group=1),
    ])


# group 0 / group 1 tables, 3 requests, 4 columns; each request owns its blocks
_MIXED_BT = [
    [[0, 1, 1, 2], [3, 4, 5, 4], [6, 6, 7, 7]],
    [[7, 7, 6, 5], [4, 3, 3, 2], [1, 0, 0, 0]],
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", STATE_TARGETS)
@pytest.mark.parametrize("num_tiles", [1, 16])
def test_state_copy_mixed_launch(num_tiles, target, device):
    pools, size = _mixed_pools()
    src, dst, bias = [0, 1, 0], [1, 2, 1], [1, 1, 2]
    actual, expected = run_states(target, device, pools, size, _MIXED_BT, src, dst, bias,
                                  num_tiles=num_tiles)
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_state_copy_int64_request_arrays(device):
    pools, size = _mixed_pools()
    arena, snap = make_arena(5, size, device)
    bt = np.asarray(_MIXED_BT, dtype=np.int32)
    expected = oracle.expect_state_copies(snap, pools, bt, [0, 1, 0], [1, 2, 1], [1, 1, 2])
    registry.get("triton.state_copy")(
        meta_table(pools, arena.data_ptr(), device), torch.from_numpy(bt).to(device),
        i64([0, 1, 0], device), i64([1, 2, 1], device), i64([1, 1, 2], device),
        num_tiles=3, arena=arena)
    assert same(arena.cpu().numpy(), expected)


# --------------------------------------------------------------------------
# postprocess (docs/contracts.md#postprocess)
# --------------------------------------------------------------------------
BS = 4  # block size (tokens)

# Each case: one request; (num_computed, num_scheduled, num_draft, num_accepted, state_idx)
# with running = nc + ns - nd, new = running + acc - 1, aligned = new // BS * BS.
POST_CASES = {
    # running 5, new 6, aligned 4 < 5: nothing, accepted left alone
    "no-copy": (3, 5, 3, 2, 0),
    # running 8, new 10, aligned 8: bias 0, dst_col 1 == state_idx: skip, accepted -> 1
    "self-copy-skip": (5, 6, 3, 3, 1),
    # running 6, new 8, aligned 8: bias 2, dst_col 1 == state_idx: copy, accepted -> 1
    "self-copy-bias": (4, 5, 3, 3, 1),
    # running 6, new 8: bias 2, dst_col 1, state_idx 0: cross-column copy
    "cross-block": (4, 5, 3, 3, 0),
    # running 7, new 8: bias 1, dst_col 1, state_idx 0, columns share the block
    "cross-col-same-block": (4, 5, 2, 2, 0),
    # running 8, new 8: bias 0, dst_col 1, state_idx 0: plain copy, accepted unchanged
    "cross-bias0": (8, 3, 3, 1, 0),
}


def _post_setup(case):
    pools, size = place([
        sd_pool(2, state_len=4, dim=5, num_blocks=6, pad=1, group=0),
        ds_pool(2, state_len=4, dim=3, num_blocks=6, row_pad=1, group=0),
        temporal_pool(4, (19,), num_blocks=6, pad=2, group=0),
    ])
    if case == "cross-col-same-block":
        bt = [[[2, 2, 4, 5]]]
    else:
        bt = [[[2, 1, 4, 5]]]
    nc, ns, nd, na, si = POST_CASES[case]
    req = {"num_computed": [nc], "num_scheduled": [ns], "num_draft": [nd],
           "num_accepted": [na], "state_idx": [si]}
    return pools, size, bt, req


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_tiles", [1, 16])
@pytest.mark.parametrize("case", list(POST_CASES))
def test_postprocess_decisions(case, num_tiles, device):
    pools, size, bt, req = _post_setup(case)
    actual, expected, acc, exp_acc = run_post("triton.postprocess", device, pools, size, bt,
                                              req, BS, num_tiles=num_tiles)
    assert same(actual, expected)
    assert acc.tolist() == exp_acc.tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_tiles", [1, 16])
def test_postprocess_many_requests(num_tiles, device):
    pools, size = place([
        sd_pool(4, state_len=3, dim=6, num_blocks=12, pad=1, group=0),
        ds_pool(2, state_len=4, dim=5, num_blocks=12, row_pad=3, group=1),
        temporal_pool(8, (11,), num_blocks=12, pad=1, group=1),
    ])
    # five requests, one per decision kind; the blocks each request touches
    # (cols 1 and 3 for self-copy-bias, 0..2 for cross-block, 0..1 for the
    # shared-block case) belong to it alone, so the batch is well-posed
    order = ["no-copy", "self-copy-skip", "self-copy-bias", "cross-block", "cross-col-same-block"]
    bt = [
        [[0, 0, 0, 0], [0, 0, 0, 0], [9, 2, 9, 3], [4, 5, 6, 9], [7, 7, 9, 9]],
        [[0, 0, 0, 0], [0, 0, 0, 0], [0, 10, 0, 11], [1, 2, 3, 0], [4, 4, 0, 0]],
    ]
    req = {k: [] for k in ("num_computed", "num_scheduled", "num_draft", "num_accepted",
                           "state_idx")}
    for c in order:
        for k, v in zip(req, POST_CASES[c]):
            req[k].append(v)
    actual, expected, acc, exp_acc = run_post("triton.postprocess", device, pools, size, bt,
                                              req, BS, num_tiles=num_tiles)
    assert same(actual, expected)
    assert acc.tolist() == exp_acc.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_postprocess_no_states_still_updates_accepted(device):
    arena, _ = make_arena(0, 64, device)
    meta = torch.zeros((0, kernels.META_COLS), dtype=torch.int64, device=device)
    bt = torch.zeros((1, 1, 4), dtype=torch.int32, device=device)
    nc, ns, nd, na, si = POST_CASES["self-copy-skip"]
    acc = i32([na], device)
    registry.get("triton.postprocess")(meta, bt, i32([nc], device), i32([ns], device),
                                       i32([nd], device), acc, i32([si], device),
                                       block_size=BS, arena=arena)
    assert acc.cpu().tolist() == [1]


# --------------------------------------------------------------------------
# the bug zoo: table, and each wrong row caught by the oracle
# --------------------------------------------------------------------------
SPEC_ZOO = {
    "BM-NOGUARD": "racy", "BM-RIGHT": "wrong + racy", "SD-SPAN": "racy", "DS-ROW": "racy",
    "DS-CONTIG": "wrong", "ADDR-I32": "wrong", "TAIL-DROP": "wrong",
    "MISALIGN": "wrong (fault on some GPUs)", "TILE-GAP": "wrong / racy", "NOOP-SKIP": "wrong",
    "PP-INPLACE": "racy (cross-program)", "PAD-CLOBBER": "wrong",
}
# issue 13's rows for the indexed slot contracts (docs/contracts.md#slot_copy)
SLOT_ZOO = {"SLOT-CHAIN": "racy (cross-program)", "FORK-CHAIN": "racy (cross-program)", "SLOT-I32": "wrong",
            "SLOT-FLAT": "wrong", "SLOT-PAD": "wrong"}


def test_zoo_table_matches_spec():
    # the copy contracts' rows; a declaring kernel module's rows are checked in its contract's own tests
    assert {e.id: e.kind for e in registry.ZOO if e.contract not in registry.DECLARED} == {**SPEC_ZOO, **SLOT_ZOO}
    for e in registry.ZOO:
        t = registry.get(f"zoo.{e.id}")
        assert (t.kind, t.bug, t.zoo_id, t.contract) == ("zoo", e.kind, e.id, e.contract)
        assert e.description and "\n" not in e.description and e.produced_by


@pytest.mark.parametrize("device", DEVICES)
def test_zoo_bm_right_is_wrong(device):
    case = BATCH_CASES["right-shift8"]
    actual, expected = run_batch("zoo.BM-RIGHT", device, [case])
    assert not np.array_equal(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_zoo_tail_drop_is_wrong(device):
    actual, expected = run_batch("zoo.TAIL-DROP", device, [BATCH_CASES["aligned-head-tail"]])
    bad = np.flatnonzero(actual != expected)
    src, dst, n = BATCH_CASES["aligned-head-tail"]
    assert bad.size and bad.min() >= dst + n - 7 and bad.max() < dst + n


@pytest.mark.parametrize("device", DEVICES)
def test_zoo_ds_contig_is_wrong(device):
    pools, size = place([ds_pool(2, state_len=4, dim=6, row_pad=2)])
    bt = single_request_table(1, 2, 0, 1)
    actual, expected = run_states("zoo.DS-CONTIG", device, pools, size, bt, [0], [1], [1])
    assert not np.array_equal(actual, expected)
    # bias 0 takes the correct path
    actual, expected = run_states("zoo.DS-CONTIG", device, pools, size, bt, [0], [1], [0])
    assert same(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_zoo_tile_gap_is_wrong(device):
    pools, size = place([temporal_pool(4, (25,), num_blocks=3)])  # 100 bytes over 16 tiles
    bt = single_request_table(0, 2, 0, 1)
    actual, expected = run_states("zoo.TILE-GAP", device, pools, size, bt, [0], [1], [0],
                                  num_tiles=16)
    assert not np.array_equal(actual, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_zoo_pad_clobber_is_wrong(device):
    pools, size = place([temporal_pool(2, (9,), num_blocks=3, pad=5)])
    bt = single_request_table(0, 1, 0, 1)
    actual, expected = run_states("zoo.PAD-CLOBBER", device, pools, size, bt, [0], [1], [0])
    p = pools[0]
    pad_lo = p.offset + p.block_stride + p.data_bytes
    bad = np.flatnonzero(actual != expected)
    assert bad.size and bad.min() >= pad_lo and bad.max() < p.offset + 2 * p.block_stride


@pytest.mark.parametrize("device", DEVICES)
def test_zoo_noop_skip_is_wrong(device):
    pools, size, bt, req = _post_setup("self-copy-bias")
    actual, expected, acc, exp_acc = run_post("zoo.NOOP-SKIP", device, pools, size, bt, req, BS)
    assert not np.array_equal(actual, expected)
    assert acc.tolist() == exp_acc.tolist()


@interp_only
def test_zoo_pp_inplace_in_the_interpreter():
    # Programs run in order, so every program after (r, 0, 0) reads accepted = 1
    # and redoes the decision: with 3 states the other two are never copied.
    pools, size, bt, req = _post_setup("self-copy-bias")
    actual, expected, acc, exp_acc = run_post("zoo.PP-INPLACE", "cpu", pools, size, bt, req, BS)
    assert not np.array_equal(actual, expected)
    # one program per request: the only reader reads before it writes
    actual, expected, acc, exp_acc = run_post("zoo.PP-INPLACE", "cpu", pools[:1], size, bt,
                                              req, BS)
    assert same(actual, expected) and acc.tolist() == exp_acc.tolist()


# ADDR-I32: a 32-bit block_id * block_stride only goes wrong past 2 GiB.  Between
# 2 and 4 GiB the product wraps negative and the address leaves the pool (a
# fault, a segfault in the interpreter); from 4 GiB on it wraps onto a lower
# block of the same pool, which is the silent corruption this test shows.  The
# pool is a ~4.01 GiB torch.empty (pages are only committed where written: the
# four blocks involved, about 2 MiB).  Expected bytes come from the oracle run on
# a compact snapshot of those four blocks (the copy is position-independent).
_I32_STRIDE = 1 << 20          # 1 MiB blocks
_I32_BLOCKS = (4100, 4101)     # src, dst: 4100 MiB and 4101 MiB, past 4 GiB
_I32_ALIASES = (4, 5)          # where a 32-bit product lands: (id * stride) mod 2**32


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", ["triton.state_copy", "zoo.ADDR-I32"])
def test_addr_i32_past_4gib(target, device):
    data = 1000  # temporal, 250 x fp32
    src_b, dst_b = _I32_BLOCKS
    touched = list(_I32_ALIASES) + [src_b, dst_b]
    for b in touched:
        assert b * _I32_STRIDE % 2**32 == _I32_ALIASES[touched.index(b) % 2] * _I32_STRIDE
    try:
        big = torch.empty((dst_b + 1) * _I32_STRIDE, dtype=torch.uint8, device=device)
    except (RuntimeError, MemoryError) as exc:  # pragma: no cover - small machines
        pytest.skip(f"cannot reserve a 4 GiB pool: {exc}")
    # defined bytes in every block either kernel can touch
    compact = fill(11, len(touched) * data)
    compact.flags.writeable = False
    for k, b in enumerate(touched):
        big[b * _I32_STRIDE:b * _I32_STRIDE + data] = torch.from_numpy(
            compact[k * data:(k + 1) * data].copy()).to(device)
    pool = PoolLayout("temporal", 0, dst_b + 1, _I32_STRIDE, 4, inner=(250,))
    meta = meta_table([pool], big.data_ptr(), device)
    bt = np.array([[[src_b, dst_b]]], dtype=np.int32)
    registry.get(target)(meta, torch.from_numpy(bt).to(device), i32([0], device),
                         i32([1], device), i32([0], device), num_tiles=2, arena=big)
    # oracle on the compact snapshot: blocks (4, 5, 4100, 4101) -> ids (0, 1, 2, 3)
    small_pool = PoolLayout("temporal", 0, 4, data, 4, inner=(250,))
    expected = oracle.expect_state_copies(compact, [small_pool], np.array([[[2, 3]]]), [0], [1],
                                          [0])
    actual = np.concatenate([big[b * _I32_STRIDE:b * _I32_STRIDE + data].cpu().numpy()
                             for b in touched])
    del big
    if target == "triton.state_copy":
        assert same(actual, expected)
    else:
        assert not np.array_equal(actual, expected)


# --------------------------------------------------------------------------
# racy rows: right bytes in the interpreter, hazards in the race recorder
# --------------------------------------------------------------------------
def _sd_same_block():
    pools, size = place([sd_pool(2, state_len=4, dim=40, num_blocks=2)])
    return pools, size, single_request_table(1, 1, 0, 0), [0], [0], [1]


def _ds_same_block():
    pools, size = place([ds_pool(1, state_len=64, dim=2, num_blocks=2)])
    return pools, size, single_request_table(1, 1, 0, 1), [0], [1], [9]


@interp_only
def test_racy_rows_give_right_bytes_in_the_interpreter():
    left = BATCH_CASES["left-shift16-aligned"]
    for t in ("zoo.BM-NOGUARD", "zoo.MISALIGN"):
        actual, expected = run_batch(t, "cpu", [left, (4003, 5000, 900)], arena_size=7000)
        assert same(actual, expected), t
    # BM-RIGHT with a single piece (byte-wise, under one BLOCK): right bytes too
    actual, expected = run_batch("zoo.BM-RIGHT", "cpu", [(1000, 1003, 500)])
    assert same(actual, expected)
    for t, setup in (("zoo.SD-SPAN", _sd_same_block), ("zoo.DS-ROW", _ds_same_block)):
        pools, size, bt, src, dst, bias = setup()
        actual, expected = run_states(t, "cpu", pools, size, bt, src, dst, bias)
        assert same(actual, expected), t


def _recorded(fn, arena, *tensors):
    from mambafuzz.racecheck import RaceRecorder
    rec = RaceRecorder({"arena": (arena.data_ptr(), arena.numel())})
    for k, t in enumerate(tensors):
        rec.add_region(f"arg{k}", t)
    with rec:
        fn()
    return {h.kind for h in rec.hazards}


def _recorded_batch(target, copies, arena_size=7000):
    arena, _ = make_arena(0, arena_size, "cpu")
    rows = np.asarray(copies, dtype=np.int64).reshape(-1, 3)
    base = arena.data_ptr()
    s, d, n = i64(rows[:, 0] + base, "cpu"), i64(rows[:, 1] + base, "cpu"), i64(rows[:, 2], "cpu")
    return _recorded(lambda: registry.get(target)(s, d, n, arena=arena), arena, s, d, n)


def _recorded_states(target, pools, size, bt, src, dst, bias, num_tiles=1):
    arena, _ = make_arena(1, size, "cpu")
    meta = meta_table(pools, arena.data_ptr(), "cpu")
    bt = torch.tensor(bt, dtype=torch.int32)
    s, d, b = i32(src, "cpu"), i32(dst, "cpu"), i32(bias, "cpu")
    return _recorded(lambda: registry.get(target)(meta, bt, s, d, b, num_tiles=num_tiles,
                                                  arena=arena), arena, meta, bt, s, d, b)


def _recorded_post(target, pools, size, bt, req, num_tiles=1):
    arena, _ = make_arena(2, size, "cpu")
    meta = meta_table(pools, arena.data_ptr(), "cpu")
    bt = torch.tensor(bt, dtype=torch.int32)
    args = {k: i32(v, "cpu") for k, v in req.items()}
    # the launcher's per-step clone is a fresh tensor: let the recorder see all memory
    # of this process's small tensors by registering the arguments and wrapping clone
    regions = [meta, bt, *args.values()]
    from mambafuzz.racecheck import RaceRecorder
    rec = RaceRecorder({"arena": (arena.data_ptr(), arena.numel())})
    for k, t in enumerate(regions):
        rec.add_region(f"arg{k}", t)
    orig_clone = torch.Tensor.clone

    def clone(self, *a, **kw):
        out = orig_clone(self, *a, **kw)
        rec.add_region("clone", out)
        return out

    torch.Tensor.clone = clone
    try:
        with rec:
            registry.get(target)(meta, bt, **args, block_size=BS, num_tiles=num_tiles,
                                 arena=arena)
    finally:
        torch.Tensor.clone = orig_clone
    return {h.kind for h in rec.hazards}


BATCH_RACE_CASES = [BATCH_CASES[k] for k in (
    "left-shift1", "left-shift8", "left-shift16-aligned", "left-shift-block", "right-shift1",
    "right-shift16-aligned", "right-shift-block", "right-headtail", "exact-overlap")]


@interp_only
def test_correct_kernels_record_no_hazards():
    for c in BATCH_RACE_CASES:
        assert _recorded_batch("triton.batch_memcpy", [c]) == set(), c
    for setup in (_sd_same_block, _ds_same_block):
        assert _recorded_states("triton.state_copy", *setup()) == set()
    for elem in (1, 2, 4, 8):
        pools, size = place([sd_pool(elem, state_len=4, dim=5, pad=3)], shift=1)
        bt = single_request_table(2, 2, 0, 1)
        assert _recorded_states("triton.state_copy", pools, size, bt, [0], [1], [1]) == set()
        pools, size = place([ds_pool(elem, state_len=4, dim=6, row_pad=3)])
        bt = single_request_table(3, 3, 1, 2)
        assert _recorded_states("triton.state_copy", pools, size, bt, [1], [2], [2]) == set()
    pools, size = _mixed_pools()
    for nt in (1, 16):
        assert _recorded_states("triton.state_copy", pools, size, _MIXED_BT, [0, 1, 0], [1, 2, 1],
                                [1, 1, 2], num_tiles=nt) == set()
    for case in ("self-copy-bias", "cross-col-same-block"):
        pools, size, bt, req = _post_setup(case)
        assert _recorded_post("triton.postprocess", pools, size, bt, req, num_tiles=4) == set()


@interp_only
def test_racy_rows_are_flagged_by_the_recorder():
    left = [BATCH_CASES["left-shift16-aligned"]]
    assert "intra-program" in _recorded_batch("zoo.BM-NOGUARD", left)
    assert "intra-program" in _recorded_batch("zoo.BM-RIGHT", [BATCH_CASES["right-shift8"]])
    assert "misaligned" in _recorded_batch("zoo.MISALIGN", [BATCH_CASES["big-misaligned"]])
    assert "intra-program" in _recorded_states("zoo.SD-SPAN", *_sd_same_block())
    assert "intra-program" in _recorded_states("zoo.DS-ROW", *_ds_same_block())
    pools, size, bt, req = _post_setup("self-copy-bias")
    assert "cross-program" in _recorded_post("zoo.PP-INPLACE", pools, size, bt, req)


# --------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------
def test_registry_names_and_kinds():
    names = set(registry.TARGETS)
    correct = {"triton.batch_memcpy", "triton.state_copy", "triton.postprocess", "triton.slot_copy",
               "triton.slot_fork"}
    assert correct | {"torch.batch_memcpy", "torch.state_copy", "torch.slot_copy", "torch.slot_fork"} <= names
    assert {t.name for t in registry.correct_targets()} == correct | {f"triton.{c}" for c in registry.DECLARED}
    assert {t.zoo_id for t in registry.zoo_targets() if t.contract not in registry.DECLARED} == (
        set(SPEC_ZOO) | set(SLOT_ZOO))
    assert {f"zoo.{i}" for i in {**SPEC_ZOO, **SLOT_ZOO}} <= names
    for t in registry.all_targets():
        assert t.overlap == "full" and set(t.devices) == {"cpu", "cuda"}
        assert (t.bug is None) == (t.kind != "zoo")


def test_every_built_in_contract_declares_its_kernels_in_its_own_module():
    """Each built-in contract has a kernel module of its name declaring it (CONTRACT, contract_fn, torch_fn,
    ZOO or a family's), the registry's triton target comes from it, and only modules that declare
    AMPLIFIABLE give amplifiable targets."""
    import importlib

    from mambafuzz import contracts

    for module_name in contracts.BUILTIN:
        name = module_name.rpartition(".")[2]
        module = importlib.import_module(f"mambafuzz.kernels.{name}")
        assert module.CONTRACT == name and callable(module.contract_fn) and isinstance(module.DESCRIPTION, str)
        assert module.torch_fn is None or callable(module.torch_fn)
        amplifiable = getattr(module, "AMPLIFIABLE", False)
        assert ("perturb" in inspect.signature(module.contract_fn(None)).parameters) == amplifiable, name
        triton = registry.get(f"triton.{name}")
        assert triton.contract == name and triton.description == module.DESCRIPTION
        assert triton.amplifiable == amplifiable == (name not in registry.DECLARED)
        assert (f"torch.{name}" in registry.TARGETS) == (module.torch_fn is not None)
        for t in registry.all_targets():
            if t.contract == name:
                assert t.amplifiable == (amplifiable and t.kind != "torch"), t.name


@pytest.mark.parametrize("name", sorted(registry.TARGETS))
def test_registry_signatures(name):
    """Every target takes its contract's arguments in order, its options and arena= by keyword."""
    from mambafuzz import contracts

    t = registry.get(name)
    contract = contracts.get(t.contract)
    params = inspect.signature(t.fn).parameters
    pos = [p.name for p in params.values()
           if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kw = {p.name for p in params.values() if p.kind == p.KEYWORD_ONLY}
    # amplifiable targets (the project's kernels and zoo) also take perturb= (race amplification)
    assert pos == list(contract.positional)
    assert kw - {"arena"} == set(contract.option_names) | ({"perturb"} if t.amplifiable else set())
    assert "arena" in kw or t.contract in registry.DECLARED  # the tensor contracts' kernels need no arena


def test_registry_unknown_target_message():
    with pytest.raises(KeyError) as ei:
        registry.get("zoo.BM-NOGAURD")
    msg = str(ei.value)
    assert isinstance(ei.value, registry.UnknownTarget)
    assert "\n" not in msg and "zoo.BM-NOGAURD" in msg and "zoo.BM-NOGUARD" in msg
    with pytest.raises(registry.UnknownTarget) as ei:
        registry.get("qqq")
    assert "triton.batch_memcpy" in str(ei.value) and "\n" not in str(ei.value)


def test_registry_register_user_target():
    fn = registry.get("torch.batch_memcpy").fn
    t = registry.Target("user.test", "batch_memcpy", "user", "left", "a user kernel", fn)
    registry.register(t)
    try:
        assert registry.get("user.test") is t
        with pytest.raises(ValueError):
            registry.register(t)
    finally:
        del registry.TARGETS["user.test"]
    with pytest.raises(ValueError):
        registry.Target("x", "", "user", "full", "", fn)


def test_every_registered_target_names_a_known_contract_and_overlap():
    """The kernels name their contract by string (they never import the engine); the engine knows them all."""
    from mambafuzz import contracts

    overlaps = {o.name: set(o.choices) for o in contracts.get("batch_memcpy").cli_options}["overlap"]
    assert set(registry.OVERLAPS) == overlaps
    for t in registry.all_targets():
        assert t.contract in contracts.registered(), t.name


@pytest.mark.matrix
def test_registry_import_does_not_import_mambafuzz():
    code = ("import sys, mambafuzz.kernels.registry; "
            "bad = [m for m in sys.modules if m.startswith('mambafuzz.') "
            "and not m.startswith(('mambafuzz.kernels', 'mambafuzz.oracle'))]; assert not bad, bad")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env, timeout=120)


# --------------------------------------------------------------------------
# compiled mode without a GPU: every kernel and zoo flag compiles to sm_90 cubin
# (common.compile_for_sm90)
# --------------------------------------------------------------------------
_COMPILE_CODE = r'''
for i, v in enumerate((None,) + BM_FLAGS):  # every zoo flag; interleaved or spans, unrolled or not
    comp(_batch_memcpy_kernel, BM_SIG, {"BLOCK": 1024, "SPLIT_BLOCK": 8192, "SPLIT_MIN": 8192 << i % 2,
                                        "INTERLEAVE": i % 2 == 0, "PART_MAJOR": i % 3 == 0,
                                        "UNROLL": 1 << (i // 2) % 3, **{f: f == v for f in BM_FLAGS}, **NO_DELAY})
from mambafuzz.judge.check import _check_chunks, _walk_chunks, _sum_chunks, _restore_chunks
comp(_restore_chunks, {"arena": "*u8", "snapshot": "*u8", "order": "*i64", "n": "i64"},
     {"WORDS": 512, "ALIGNED16": True}, 2)
CHK = {"arena": "*u8", "expected": "*u8", "snapshot": "*u8", "sums": "*i64", "order": "*i64",
       "counter": "*i64", "slot_base": "*i64", "slot": "i32", "n": "i64", "n_check": "i32"}
for aux, base in ((False, False), (True, True)):
    comp(_check_chunks, {**CHK, "n_restore": "i32", "aux": "*u8", "aux_expected": "*u8", "aux_snapshot": "*u8",
                         "n_aux": "i32"},
         {"WORDS": 1024, "AUX_BLOCK": 256, "HAS_BASE": base, "HAS_AUX": aux, "ALIGNED16": aux})
    comp(_walk_chunks, {**CHK, "n_chunks": "i64", "full_every": "i32", "last_slot": "i32"},
         {"WORDS": 1024, "HAS_BASE": base, "ALIGNED16": base})
comp(_sum_chunks, {"buf": "*u8", "sums": "*i64", "n": "i64"}, {"WORDS": 1024})
for v in (None,) + FLAG_NAMES:
    comp(_state_copy_kernel, SC_SIG, {"BLOCK": 1024, "ROWS": 128, **{f: f == v for f in FLAG_NAMES},
                                      **NO_DELAY})
for noop in (False, True):
    comp(_postprocess_kernel, PP_SIG, {"BLOCK": 1024, "ROWS": 128, "NOOP_SKIP": noop,
                                       **{f: False for f in FLAG_NAMES}, **NO_DELAY})
print("compiled")
'''


@pytest.mark.slow
@pytest.mark.matrix
def test_kernels_compile_for_sm90_without_a_gpu():
    """The interpreter does not enforce compiled-mode typing rules (e.g. a
    variable assigned in both branches of a runtime ``if`` must keep one type);
    compiling to cubin with Triton's bundled ptxas does, with no GPU needed."""
    compile_for_sm90(_COMPILE_CODE)

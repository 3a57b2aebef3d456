"""Tests of the pure-numpy oracle (docs/contracts.md).

Expected values are literal arrays worked out by hand, or properties read
straight off the snapshot (slice equality, untouched bytes); none comes from
a second implementation of the same copy.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mambafuzz import oracle
from mambafuzz.oracle import (
    AlignDecision,
    IllPosedBatch,
    OracleError,
    PoolLayout,
    apply_state_copy,
    check_batch,
    decide,
    expect_batch,
    expect_memmove,
    expect_postprocess,
    expect_state_copies,
    find_batch_conflict,
)

ROOT = Path(__file__).resolve().parents[2]
PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only copy: any write into it by the oracle raises."""
    a = np.array(a, dtype=np.uint8, copy=True)
    a.flags.writeable = False
    return a


def random_bytes(rng, n):
    return rng.integers(0, 256, size=n, dtype=np.uint8)


# ---------------------------------------------------------------- hand-worked: memmove

def test_memmove_left_shift_by_hand():
    snap = frozen(np.arange(16))
    out = expect_memmove(snap, 2, 5, 6)  # bytes 5..10 land on 2..7
    assert out.tolist() == [0, 1, 5, 6, 7, 8, 9, 10, 8, 9, 10, 11, 12, 13, 14, 15]
    assert snap.tolist() == list(range(16))


def test_memmove_right_shift_by_hand():
    snap = frozen(np.arange(16))
    out = expect_memmove(snap, 7, 3, 6)  # bytes 3..8 land on 7..12
    assert out.tolist() == [0, 1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 7, 8, 13, 14, 15]


def test_memmove_edges_by_hand():
    snap = frozen(np.arange(16))
    assert expect_memmove(snap, 3, 9, 0).tolist() == list(range(16))
    assert expect_memmove(snap, 0, 0, 16).tolist() == list(range(16))
    assert expect_memmove(snap, 0, 15, 1).tolist() == [15] + list(range(1, 16))
    assert expect_memmove(snap, 16, 0, 0).tolist() == list(range(16))  # empty range at the end
    out = expect_memmove(snap, 0, 0, 16)
    assert out is not snap and not np.shares_memory(out, snap)


def test_batch_by_hand():
    snap = frozen(np.arange(16))
    # copy 0: 0..3 -> 8..11; copy 1: 12..13 -> 4..5; copy 2: 15 -> 14; copy 3 empty
    out = expect_batch(snap, [0, 12, 15, 3], [8, 4, 14, 3], [4, 2, 1, 0])
    assert out.tolist() == [0, 1, 2, 3, 12, 13, 6, 7, 0, 1, 2, 3, 12, 13, 15, 15]
    # a copy that overlaps itself (left, then right) is legal
    out = expect_batch(snap, [2, 10], [0, 12], [4, 3])
    assert out.tolist() == [2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 11, 10, 11, 12, 15]


def test_batch_conflict_by_hand():
    snap = frozen(np.arange(16))
    # copy 0 writes 0..3; copy 1 reads 0..1 and writes 12..13
    with pytest.raises(IllPosedBatch) as ei:
        expect_batch(snap, [4, 0], [0, 12], [4, 2])
    e = ei.value
    assert (e.first, e.second, e.offset) == (0, 1, 0)
    assert str(e) == "ill-posed batch: copy 0 writes byte 0 that copy 1 reads"
    # two writes of byte 7 (and 8): copy 1 writes 5..8, copy 2 writes 7..9
    assert find_batch_conflict([0, 10, 12], [20, 5, 7], [1, 4, 3]) == (1, 2, 7)
    with pytest.raises(IllPosedBatch, match="copy 1 writes byte 7 that copy 2 writes"):
        check_batch([0, 10, 12], [20, 5, 7], [1, 4, 3], 32)
    # reads of the same bytes by several copies are fine; so are zero-size copies
    assert find_batch_conflict([0, 0, 2], [8, 12, 3], [4, 4, 0]) is None
    # a read by the writer itself is not a conflict, a read by another copy is
    assert find_batch_conflict([1, 9], [0, 10], [4, 2]) is None
    assert find_batch_conflict([1, 3], [0, 10], [4, 2]) == (0, 1, 3)
    # conflict reported at the lowest conflicting byte, not the first pair found
    assert find_batch_conflict([100, 200, 300, 400], [50, 10, 54, 12], [8, 4, 2, 1]) == (1, 3, 12)
    # with check=False an ill-posed batch still gets a result: reads from the
    # snapshot, the higher copy index wins overlapping destinations
    out = expect_batch(snap, [4, 0, 8], [0, 12, 1], [4, 2, 2], check=False)
    assert out.tolist() == [4, 8, 9, 7, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 14, 15]


# ---------------------------------------------------------------- hand-worked: pools

def sd_pool():
    # [2 blocks, state_len 3, dim 2] of 2-byte elements at offset 4; 16-byte blocks
    # (12 data + 4 padding): block 0 data 4..15, padding 16..19; block 1 data 20..31, padding 32..35
    return PoolLayout("conv_sd", offset=4, num_blocks=2, block_stride=16, elem_size=2, state_len=3, dim=2)


def ds_pool():
    # [2 blocks, dim 2, state_len 3] of 2-byte elements; rows 8 bytes apart (6 data + 2 padding),
    # data_bytes 14, block_stride 16: block 0 row 0 = 0..5 (pad 6,7), row 1 = 8..13 (pad 14,15)
    return PoolLayout("conv_ds", offset=0, num_blocks=2, block_stride=16, elem_size=2, state_len=3, dim=2,
                      row_stride=8)


def one_request(pool, row, src_col, dst_col, bias):
    return dict(pools=[pool], block_tables=np.array([[row]]), src_cols=[src_col], dst_cols=[dst_col],
                biases=[bias])


def test_pool_properties_by_hand():
    sd, ds = sd_pool(), ds_pool()
    assert (sd.token_bytes, sd.data_bytes, sd.nbytes, sd.inner_elems) == (4, 12, 32, 2)
    assert (ds.token_bytes, ds.data_bytes, ds.row_stride_eff, ds.nbytes) == (2, 14, 8, 32)
    t = PoolLayout("temporal", offset=8, num_blocks=3, block_stride=32, elem_size=4, inner=(2, 3))
    assert (t.data_bytes, t.inner_elems, t.nbytes, t.block_offset(2)) == (24, 6, 96, 72)
    assert sd.block_offset(1) == 20 and ds.block_offset(1) == 16
    assert ds.data_mask(34).astype(int).tolist() == (
        [1] * 6 + [0, 0] + [1] * 6 + [0, 0] + [1] * 6 + [0, 0] + [1] * 6 + [0, 0] + [0, 0])
    assert sd.data_mask(36).astype(int).tolist() == [0] * 4 + [1] * 12 + [0] * 4 + [1] * 12 + [0] * 4
    arena = np.arange(32, dtype=np.uint8)
    assert ds.token_view(arena, 1).tolist() == [[16, 17, 18, 19, 20, 21], [24, 25, 26, 27, 28, 29]]
    assert ds.logical_state(arena, 0).tolist() == [[[0, 1], [8, 9]], [[2, 3], [10, 11]], [[4, 5], [12, 13]]]
    assert sd.logical_state(np.arange(40, dtype=np.uint8), 0).tolist() == [
        [[4, 5], [6, 7]], [[8, 9], [10, 11]], [[12, 13], [14, 15]]]
    view = sd.token_view(arena := np.zeros(40, np.uint8), 1)
    view[2] = 7  # the view is writable and lands on token 2 of block 1
    assert np.flatnonzero(arena).tolist() == [28, 29, 30, 31]


def test_sd_same_block_shift_by_hand():
    snap = frozen(np.arange(40))
    out = expect_state_copies(snap, **one_request(sd_pool(), [0, 1], 0, 0, 1))
    # tokens 1,2 of block 0 (bytes 8..15) become tokens 0,1 (bytes 4..11); token 2 stays
    assert out.tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 12, 13, 14, 15,
                            16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                            32, 33, 34, 35, 36, 37, 38, 39]


def test_sd_cross_block_shift_by_hand():
    snap = frozen(np.arange(40))
    out = expect_state_copies(snap, **one_request(sd_pool(), [0, 1], 0, 1, 2))
    # token 2 of block 0 (bytes 12..15) becomes token 0 of block 1 (bytes 20..23)
    assert out.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                            16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31,
                            32, 33, 34, 35, 36, 37, 38, 39]
    # bias >= state_len copies nothing
    assert expect_state_copies(snap, **one_request(sd_pool(), [0, 1], 0, 1, 3)).tolist() == list(range(40))


def test_ds_same_block_shift_by_hand():
    snap = frozen(np.arange(32))
    out = expect_state_copies(snap, **one_request(ds_pool(), [0, 1], 0, 0, 1))
    # row 0: tokens 1,2 (bytes 2..5) -> tokens 0,1 (bytes 0..3); row 1: bytes 10..13 -> 8..11;
    # token 2 of each row and the row padding (6,7 and 14,15) unchanged
    assert out.tolist() == [2, 3, 4, 5, 4, 5, 6, 7, 10, 11, 12, 13, 12, 13, 14, 15,
                            16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]


def test_ds_cross_block_shift_by_hand():
    snap = frozen(np.arange(32))
    out = expect_state_copies(snap, **one_request(ds_pool(), [0, 1], 0, 1, 2))
    # token 2 of block 0 (row 0: 4,5; row 1: 12,13) -> token 0 of block 1 (16,17 and 24,25)
    assert out.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                            4, 5, 18, 19, 20, 21, 22, 23, 12, 13, 26, 27, 28, 29, 30, 31]


def test_temporal_copy_by_hand():
    pool = PoolLayout("temporal", offset=0, num_blocks=3, block_stride=12, elem_size=4, inner=(2,))
    snap = frozen(np.arange(36))
    # row [2, 0, 1]: src_col 0 + bias 1 -> column 1 = block 0 (bytes 0..7) onto column 2 = block 1 (12..19)
    out = expect_state_copies(snap, **one_request(pool, [2, 0, 1], 0, 2, 1))
    assert out.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                            0, 1, 2, 3, 4, 5, 6, 7, 20, 21, 22, 23,
                            24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35]


def test_apply_state_copy_writes_into_out():
    snap = frozen(np.arange(32))
    out = np.arange(32, dtype=np.uint8)
    apply_state_copy(out, snap, ds_pool(), np.array([0, 1]), 0, 0, 1)
    assert out.tolist()[:16] == [2, 3, 4, 5, 4, 5, 6, 7, 10, 11, 12, 13, 12, 13, 14, 15]
    with pytest.raises(OracleError, match="shares memory"):
        apply_state_copy(out, out, ds_pool(), [0, 1], 0, 0, 1)
    with pytest.raises(OracleError, match="shares memory"):
        apply_state_copy(out[:], out, ds_pool(), [0, 1], 0, 0, 1)
    with pytest.raises(OracleError, match="out is read-only"):
        apply_state_copy(frozen(out), out, ds_pool(), [0, 1], 0, 0, 1)


def test_state_copy_conflicts_by_hand():
    pool = PoolLayout("temporal", offset=0, num_blocks=4, block_stride=8, elem_size=4, inner=(1,))
    snap = frozen(np.arange(32))
    # request 0 copies block 0 -> 2; request 1 copies block 3 -> 2: both write bytes 16..19
    bt = np.array([[[0, 2], [3, 2]]])
    with pytest.raises(IllPosedBatch) as ei:
        expect_state_copies(snap, [pool], bt, [0, 0], [1, 1], [0, 0])
    assert (ei.value.first, ei.value.second, ei.value.offset) == ((0, 0), (1, 0), 16)
    assert "writes byte 16" in str(ei.value) and "request 1, state 0" in str(ei.value)
    # request 1 reading what request 0 writes
    bt = np.array([[[0, 2], [2, 3]]])
    with pytest.raises(IllPosedBatch) as ei:
        expect_state_copies(snap, [pool], bt, [0, 0], [1, 1], [0, 0])
    assert (ei.value.first, ei.value.second, ei.value.offset, ei.value.access) == ((0, 0), (1, 0), 16, "reads")
    # both requests reading the same block is fine
    out = expect_state_copies(snap, [pool], np.array([[[0, 2], [0, 3]]]), [0, 0], [1, 1], [0, 0])
    assert out.tolist()[16:28] == [0, 1, 2, 3, 20, 21, 22, 23, 0, 1, 2, 3]
    # two states of one request writing the same bytes (pools that overlap in the arena):
    # state 0 (temporal, column 0+1 -> 1: block 2 onto itself) writes 16..19, state 1 (SD,
    # token 1 of block 0 -> token 0 of block 2) writes 16..17
    sd = PoolLayout("conv_sd", offset=0, num_blocks=4, block_stride=8, elem_size=1, state_len=2, dim=2)
    with pytest.raises(IllPosedBatch) as ei:
        expect_state_copies(snap, [pool, sd], np.array([[[0, 2]]]), [0], [1], [1])
    assert (ei.value.first, ei.value.second, ei.value.offset, ei.value.access) == ((0, 0), (0, 1), 16, "writes")


# ---------------------------------------------------------------- hand-worked: decision table

# (num_computed, num_scheduled, num_draft, num_accepted, state_idx) ->
# (running, new_computed, aligned, needs_copy, bias, dst_col, accepted_out, self_copy_skip, do_copy)
DECISION_TABLE = [
    # no copy: running 6, new 6, aligned 4 < 6; accepted count untouched
    ((5, 3, 2, 1, 1), (6, 6, 4, False, -2, 0, 1, False, False)),
    # no copy with several accepted tokens that do not reach the next boundary
    ((3, 4, 2, 2, 1), (5, 6, 4, False, -1, 0, 2, False, False)),
    # self-copy skip: running 8, new 10, aligned 8, bias 0, src == dst == 1 -> accepted 1
    ((6, 4, 2, 3, 1), (8, 10, 8, True, 0, 1, 1, True, False)),
    # self-copy with bias > 0: running 6, new 8, aligned 8, bias 2, src == dst == 1 -> copy and accepted 1
    ((4, 4, 2, 3, 1), (6, 8, 8, True, 2, 1, 1, False, True)),
    # cross-block copy: same numbers, running state in column 0 -> copy 0 -> 1, accepted stays 3
    ((4, 4, 2, 3, 0), (6, 8, 8, True, 2, 1, 3, False, True)),
    # block boundary exactly hit by new_computed: running 5, new 8, bias 3
    ((3, 3, 1, 4, 1), (5, 8, 8, True, 3, 1, 1, False, True)),
    # running exactly on a boundary with nothing extra accepted: bias 0, dst 0 == src -> skip
    ((4, 1, 1, 1, 0), (4, 4, 4, True, 0, 0, 1, True, False)),
    # same, running state in another column: a cross-block copy with bias 0
    ((4, 1, 1, 1, 2), (4, 4, 4, True, 0, 0, 1, False, True)),
]


@pytest.mark.parametrize("inputs,expected", DECISION_TABLE)
def test_decision_table_row(inputs, expected):
    d = decide(*[[v] for v in inputs], block_size=4)
    got = (int(d.running[0]), int(d.new_computed[0]), int(d.aligned[0]), bool(d.needs_copy[0]),
           int(d.bias[0]), int(d.dst_col[0]), int(d.accepted_out[0]), bool(d.self_copy_skip[0]),
           bool(d.do_copy[0]))
    assert got == expected
    assert int(d.src_col[0]) == inputs[4]


def test_decision_vectorised_table():
    cols = list(zip(*[row for row, _ in DECISION_TABLE]))
    d = decide(*[np.array(c, dtype=np.int32) for c in cols], block_size=4)
    assert isinstance(d, AlignDecision) and len(d) == len(DECISION_TABLE)
    assert d.accepted_out.dtype == np.int32
    assert d.accepted_out.tolist() == [exp[6] for _, exp in DECISION_TABLE]
    assert d.do_copy.tolist() == [exp[8] for _, exp in DECISION_TABLE]
    assert decide([], [], [], [], [], 16).running.size == 0


def test_postprocess_by_hand():
    sd = PoolLayout("conv_sd", offset=0, num_blocks=4, block_stride=4, elem_size=1, state_len=4, dim=1)
    tp = PoolLayout("temporal", offset=16, num_blocks=4, block_stride=4, elem_size=1, inner=(3,), group=1)
    bt = np.array([[[0, 1, 2, 3], [2, 3, 0, 1], [3, 3, 3, 3]],
                   [[0, 1, 2, 3], [0, 0, 0, 0], [1, 2, 3, 0]]], dtype=np.int32)
    snap = frozen(np.arange(32))
    # request 0: running 6, accepted 3 -> aligned 8, bias 2, column 1 -> column 1 (self-copy, bias 2)
    # request 1: running 6, accepted 1 -> no copy
    # request 2: running 8, accepted 2 -> aligned 8, bias 0, src 1 == dst 1 -> skip
    out, acc = expect_postprocess(snap, [sd, tp], bt, [4, 5, 6], [4, 3, 4], [2, 2, 2], [3, 1, 2],
                                  [1, 1, 1], 4)
    assert acc.dtype == np.int32 and acc.tolist() == [1, 1, 1]
    # sd: block 1 (bytes 4..7) tokens 2,3 -> 0,1; temporal: column 1+2=3 -> block 3 (bytes 28..30)
    # onto column 1 = block 1 (bytes 20..22); byte 23 is padding
    assert out.tolist() == [0, 1, 2, 3, 6, 7, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                            16, 17, 18, 19, 28, 29, 30, 23, 24, 25, 26, 27, 28, 29, 30, 31]


# ---------------------------------------------------------------- properties: memmove and batches

@st.composite
def memmove_case(draw):
    size = draw(st.integers(1, 300))
    n = draw(st.integers(0, size))
    src = draw(st.integers(0, size - n))
    dst = draw(st.integers(0, size - n))
    seed = draw(st.integers(0, 2**32 - 1))
    return size, dst, src, n, seed


@PROPS
@given(memmove_case())
def test_memmove_property(case):
    size, dst, src, n, seed = case
    snap = frozen(random_bytes(np.random.default_rng(seed), size))
    before = snap.copy()
    out = expect_memmove(snap, dst, src, n)
    assert out.dtype == np.uint8 and out.shape == snap.shape
    assert np.array_equal(out[dst:dst + n], before[src:src + n])
    outside = np.ones(size, bool)
    outside[dst:dst + n] = False
    assert np.array_equal(out[outside], before[outside])
    assert np.array_equal(snap, before)


@st.composite
def well_posed_batch(draw, max_copies=12):
    """A batch built to be well-posed: each copy owns a private region holding both
    its source and destination (a copy may overlap itself); some copies instead read
    a shared read-only region."""
    k = draw(st.integers(0, max_copies))
    shared_len = draw(st.integers(0, 24))
    regions = [("shared", shared_len)] + [("own", draw(st.integers(0, 24))) for _ in range(k)]
    order = draw(st.permutations(range(len(regions))))
    gaps = [draw(st.integers(0, 5)) for _ in regions]
    base, pos = {}, 0
    for idx, gap in zip(order, gaps):
        pos += gap
        base[idx] = pos
        pos += regions[idx][1]
    size = pos + draw(st.integers(0, 5))
    copies = []
    for c in range(1, k + 1):
        rlen = regions[c][1]
        n = draw(st.integers(0, rlen))
        dst = base[c] + draw(st.integers(0, rlen - n))
        if shared_len and n <= shared_len and draw(st.booleans()):
            src = base[0] + draw(st.integers(0, shared_len - n))
        else:
            src = base[c] + draw(st.integers(0, rlen - n))
        copies.append((src, dst, n))
    copies = draw(st.permutations(copies)) if copies else copies
    src = [c[0] for c in copies]
    dst = [c[1] for c in copies]
    sizes = [c[2] for c in copies]
    return max(size, 1), src, dst, sizes


@PROPS
@given(well_posed_batch(), st.integers(0, 2**32 - 1))
def test_batch_property_well_posed(batch, seed):
    size, src, dst, sizes = batch
    snap = frozen(random_bytes(np.random.default_rng(seed), size))
    before = snap.copy()
    assert find_batch_conflict(src, dst, sizes) is None
    check_batch(src, dst, sizes, size)
    out = expect_batch(snap, src, dst, sizes)
    touched = np.zeros(size, bool)
    for s, d, n in zip(src, dst, sizes):
        assert np.array_equal(out[d:d + n], before[s:s + n])
        touched[d:d + n] = True
    assert np.array_equal(out[~touched], before[~touched])  # bytes outside every destination
    assert np.array_equal(expect_batch(snap, src, dst, sizes, check=False), out)
    assert np.array_equal(snap, before)


def brute_force_conflicts(src, dst, sizes, size):
    """Every (writer, other, byte) conflict, by marking bytes one copy at a time."""
    writers = [set() for _ in range(size)]
    readers = [set() for _ in range(size)]
    for i, (s, d, n) in enumerate(zip(src, dst, sizes)):
        for b in range(d, d + n):
            writers[b].add(i)
        for b in range(s, s + n):
            readers[b].add(i)
    found = set()
    for b in range(size):
        for w in writers[b]:
            for o in (writers[b] | readers[b]) - {w}:
                found.add((w, o, b))
    return found


@PROPS
@given(well_posed_batch(max_copies=6), st.data())
def test_ill_posed_batch_is_reported(batch, data):
    size, src, dst, sizes = batch
    size += 8
    # add a copy built to conflict: it writes a byte an existing copy touches, or reads a byte one writes
    touched = [(i, b) for i, (s, d, n) in enumerate(zip(src, dst, sizes)) for b in range(d, d + n)]
    mode = data.draw(st.sampled_from(["write_over_read", "write_over_write", "read_a_write"]))
    if mode == "read_a_write":
        assume(touched)
        _, b = data.draw(st.sampled_from(touched))
        n = data.draw(st.integers(1, 4))
        new_src = data.draw(st.integers(max(0, b - n + 1), min(b, size - n)))
        new_dst = data.draw(st.integers(0, size - n))
    else:
        ranges = [(s, n) if mode == "write_over_read" else (d, n) for s, d, n in zip(src, dst, sizes) if n]
        assume(ranges)
        start, rn = data.draw(st.sampled_from(ranges))
        b = data.draw(st.integers(start, start + rn - 1))
        n = data.draw(st.integers(1, 4))
        new_dst = data.draw(st.integers(max(0, b - n + 1), min(b, size - n)))
        new_src = data.draw(st.integers(0, size - n))
    pos = data.draw(st.integers(0, len(src)))
    src = src[:pos] + [new_src] + src[pos:]
    dst = dst[:pos] + [new_dst] + dst[pos:]
    sizes = sizes[:pos] + [n] + sizes[pos:]

    conflicts = brute_force_conflicts(src, dst, sizes, size)
    assert conflicts  # the construction always conflicts
    got = find_batch_conflict(src, dst, sizes)
    assert got is not None
    i, j, off = got
    assert i != j
    assert dst[i] <= off < dst[i] + sizes[i]
    assert src[j] <= off < src[j] + sizes[j] or dst[j] <= off < dst[j] + sizes[j]
    assert (i, j, off) in conflicts
    assert off == min(b for _, _, b in conflicts)
    snap = frozen(np.zeros(size, np.uint8))
    with pytest.raises(IllPosedBatch) as ei:
        expect_batch(snap, src, dst, sizes)
    assert (ei.value.first, ei.value.second, ei.value.offset) == (i, j, off)
    assert f"copy {i} writes byte {off} that copy {j}" in str(ei.value)
    with pytest.raises(IllPosedBatch):
        check_batch(src, dst, sizes, size)


def test_find_batch_conflict_many_copies_is_fast():
    import time
    n = 200_000
    rng = np.random.default_rng(1)
    order = rng.permutation(n)
    dst = order.astype(np.int64) * 64
    src = dst + 8  # each copy overlaps only itself
    sizes = np.full(n, 56)
    t0 = time.perf_counter()
    assert find_batch_conflict(src, dst, sizes) is None
    k = 12345  # copy k sits at byte order[k] * 64; its right neighbour is the copy at the next slot
    pos = int(order[k])
    assume_ok = pos + 1 < n
    assert assume_ok
    neighbour = int(np.flatnonzero(order == pos + 1)[0])
    sizes[k] = 65  # now copy k writes (and reads) the first byte of its neighbour, which writes it too
    i, j, off = find_batch_conflict(src, dst, sizes)
    assert {i, j} == {k, neighbour} and off == (pos + 1) * 64
    assert time.perf_counter() - t0 < 10


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 64), st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1),
                                              st.integers(-2**63, 2**63 - 1)), max_size=4),
       st.integers(-10, 80), st.integers(-10, 80), st.integers(-10, 80))
def test_garbage_inputs_only_raise_oracle_error(size, copies, a, b, c):
    snap = frozen(np.zeros(size, np.uint8))
    for call in (lambda: expect_memmove(snap, a, b, c),
                 lambda: expect_batch(snap, *zip(*copies)) if copies else expect_batch(snap, [], [], []),
                 lambda: find_batch_conflict(*zip(*copies)) if copies else None,
                 lambda: check_batch([a], [b], [c], size)):
        try:
            call()
        except OracleError:
            pass


# ---------------------------------------------------------------- properties: state pools

def addresses(pool: PoolLayout, block: int) -> np.ndarray:
    """Arena offsets of a block's state by index arithmetic: conv [state_len, dim, elem], temporal [bytes]."""
    o = pool.offset + block * pool.block_stride
    e = pool.elem_size
    if pool.kind == "temporal":
        return o + np.arange(int(np.prod(pool.inner)) * e)
    t, d, k = np.meshgrid(np.arange(pool.state_len), np.arange(pool.dim), np.arange(e), indexing="ij")
    if pool.kind == "conv_sd":
        return o + (t * pool.dim + d) * e + k
    rs = pool.row_stride or pool.state_len * e
    return o + d * rs + t * e + k


def all_data(pool: PoolLayout, size: int) -> np.ndarray:
    mask = np.zeros(size, bool)
    for blk in range(pool.num_blocks):
        mask[addresses(pool, blk).ravel()] = True
    return mask


@st.composite
def conv_pair(draw):
    """An SD and a DS pool of the same logical shape, each with its own padding."""
    L = draw(st.integers(1, 6))
    dim = draw(st.integers(1, 5))
    e = draw(st.sampled_from([1, 2, 4, 8]))
    nb = draw(st.integers(1, 4))
    sd = PoolLayout("conv_sd", offset=e * draw(st.integers(0, 3)), num_blocks=nb,
                    block_stride=(L * dim + draw(st.integers(0, 3))) * e, elem_size=e, state_len=L, dim=dim)
    pad_row = draw(st.integers(0, 2))
    row_stride = (L + pad_row) * e if (pad_row or draw(st.booleans())) else 0
    rs = row_stride or L * e
    ds = PoolLayout("conv_ds", offset=e * draw(st.integers(0, 3)), num_blocks=nb,
                    block_stride=(dim - 1) * rs + L * e + e * draw(st.integers(0, 3)), elem_size=e,
                    state_len=L, dim=dim, row_stride=row_stride)
    return sd, ds


@PROPS
@given(conv_pair(), st.data())
def test_sd_and_ds_give_the_same_logical_result(pools, data):
    sd, ds = pools
    L, nb = sd.state_len, sd.num_blocks
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    logical = random_bytes(rng, (nb, L, sd.dim, sd.elem_size))
    ncols = data.draw(st.integers(1, 4))
    row = data.draw(st.lists(st.integers(0, nb - 1), min_size=ncols, max_size=ncols))
    src_col = data.draw(st.integers(0, ncols - 1))
    dst_col = data.draw(st.integers(0, ncols - 1))
    bias = data.draw(st.integers(0, L + 1))

    results = []
    for pool in (sd, ds):
        size = pool.offset + pool.nbytes + data.draw(st.integers(0, 9))
        arena = random_bytes(rng, size)  # background (padding) bytes are random too
        for blk in range(nb):
            arena[addresses(pool, blk)] = logical[blk]
        assert np.array_equal(pool.logical_state(arena, 0), logical[0])
        snap = frozen(arena)
        out = expect_state_copies(snap, **one_request(pool, row, src_col, dst_col, bias))
        assert np.array_equal(snap, arena)
        # padding and every byte outside the destination block's data never change
        dst_bytes = np.zeros(size, bool)
        dst_bytes[addresses(pool, row[dst_col]).ravel()] = True
        assert np.array_equal(out[~dst_bytes], arena[~dst_bytes])
        assert np.array_equal(all_data(pool, size), pool.data_mask(size))
        results.append(np.stack([out[addresses(pool, blk)] for blk in range(nb)]))
    assert np.array_equal(results[0], results[1])
    # the logical result itself, straight from the snapshot's logical state
    got = results[0][row[dst_col]]
    keep = max(L - bias, 0)
    assert np.array_equal(got[:keep], logical[row[src_col]][bias:bias + keep])
    assert np.array_equal(got[keep:], logical[row[dst_col]][keep:])


@st.composite
def mixed_pools(draw):
    """Pools of all kinds packed one after another in one arena, in two groups."""
    pools, pos = [], draw(st.integers(0, 2)) * 8
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["conv_sd", "conv_ds", "temporal"]))
        e = draw(st.sampled_from([1, 2, 4, 8]))
        nb = draw(st.integers(4, 8))
        group = draw(st.integers(0, 1))
        pad = e * draw(st.integers(0, 3))
        if kind == "temporal":
            inner = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
            p = PoolLayout(kind, pos, nb, int(np.prod(inner)) * e + pad, e, inner=inner, group=group)
        elif kind == "conv_sd":
            L, dim = draw(st.integers(1, 5)), draw(st.integers(1, 4))
            p = PoolLayout(kind, pos, nb, L * dim * e + pad, e, state_len=L, dim=dim, group=group)
        else:
            L, dim = draw(st.integers(1, 5)), draw(st.integers(1, 4))
            rs = (L + draw(st.integers(0, 2))) * e
            p = PoolLayout(kind, pos, nb, (dim - 1) * rs + L * e + pad, e, state_len=L, dim=dim,
                           row_stride=rs, group=group)
        pools.append(p)
        pos += p.nbytes + 8 * draw(st.integers(0, 2))
        pos = -(-pos // 8) * 8  # the next pool's offset is a multiple of any element size
    return pools, pos


@PROPS
@given(mixed_pools(), st.data())
def test_state_copies_many_requests(pp, data):
    """Requests own disjoint blocks (well-posed by construction); every state of every
    request lands where docs/contracts.md#state_copy says, and nothing else changes (padding included)."""
    pools, size = pp
    R = data.draw(st.integers(1, 2))  # every pool has >= 4 blocks: requests own blocks {2r, 2r+1}
    C = data.draw(st.integers(1, 4))
    bt = np.array([[[2 * r + data.draw(st.integers(0, 1)) for _ in range(C)] for r in range(R)]
                   for _ in range(2)], dtype=np.int32)
    src_cols, dst_cols, biases = [], [], []
    for r in range(R):
        src_cols.append(data.draw(st.integers(0, C - 1)))
        dst_cols.append(data.draw(st.integers(0, C - 1)))
        biases.append(data.draw(st.integers(0, C - 1 - src_cols[-1])))  # temporal src_col+bias in range
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    snap = frozen(random_bytes(rng, size))
    before = snap.copy()
    out = expect_state_copies(snap, pools, bt, src_cols, dst_cols, biases)
    assert np.array_equal(snap, before)
    changed_ok = np.zeros(size, bool)
    for r in range(R):
        b = biases[r]
        for pool in pools:
            row = bt[pool.group, r]
            dst_addr = addresses(pool, row[dst_cols[r]])
            changed_ok[dst_addr.ravel()] = True
            if pool.kind == "temporal":
                assert np.array_equal(out[dst_addr], before[addresses(pool, row[src_cols[r] + b])])
            else:
                keep = max(pool.state_len - b, 0)
                src_addr = addresses(pool, row[src_cols[r]])
                assert np.array_equal(out[dst_addr][:keep], before[src_addr][b:b + keep])
                assert np.array_equal(out[dst_addr][keep:], before[dst_addr][keep:])
    assert np.array_equal(out[~changed_ok], before[~changed_ok])
    # padding never changes
    data_bytes = np.zeros(size, bool)
    for pool in pools:
        data_bytes |= pool.data_mask(size)
    assert np.array_equal(out[~data_bytes], before[~data_bytes])


@PROPS
@given(mixed_pools(), st.data())
def test_two_requests_writing_one_block_are_reported(pp, data):
    pools, size = pp
    bt = np.zeros((2, 2, 2), np.int32)
    bt[:, 0] = [0, 3]  # request 0: column 0 = block 0, column 1 = block 3
    bt[:, 1] = [1, 3]  # request 1: column 0 = block 1, column 1 = block 3
    snap = frozen(np.zeros(size, np.uint8))
    # every state, bias 0: every state of both requests writes all of block 3
    with pytest.raises(IllPosedBatch) as ei:
        expect_state_copies(snap, pools, bt, [0, 0], [1, 1], [0, 0])
    e = ei.value
    # the lowest conflicting byte is the first data byte of block 3 of the first pool in the arena
    first = min(range(len(pools)), key=lambda s: pools[s].offset)
    assert (e.first, e.second, e.offset) == ((0, first), (1, first), pools[first].block_offset(3))
    # one state with a bias: still both write block 3 (temporal: column 0+1 = block 3 onto itself)
    s = data.draw(st.integers(0, len(pools) - 1))
    pool = pools[s]
    bias = data.draw(st.integers(0, 1 if pool.kind == "temporal" else pool.state_len - 1))
    with pytest.raises(IllPosedBatch) as ei:
        expect_state_copies(snap, [pool], bt, [0, 0], [1, 1], [bias, bias])
    e = ei.value
    assert (e.first, e.second, e.offset) == ((0, 0), (1, 0), pool.block_offset(3))
    # and it is legal once request 1 writes its own block
    bt[:, 1] = [1, 2]
    expect_state_copies(snap, [pool], bt, [0, 0], [1, 1], [bias, bias])


# ---------------------------------------------------------------- align-mode properties

@PROPS
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20), st.integers(0, 8), st.integers(1, 9),
                          st.integers(0, 15)), min_size=1, max_size=20), st.integers(1, 16))
def test_decision_properties(rows, block_size):
    rows = [r for r in rows if r[0] + r[1] >= r[2]]
    assume(rows)
    nc, ns, nd, na, si = (np.array(c) for c in zip(*rows))
    d = decide(nc, ns, nd, na, si, block_size)
    running = nc + ns - nd
    assert np.array_equal(d.running, running)
    assert np.array_equal(d.new_computed, running + na - 1)
    assert (d.aligned % block_size == 0).all() and (d.aligned <= d.new_computed).all()
    assert (d.aligned + block_size > d.new_computed).all()
    assert np.array_equal(d.needs_copy, d.aligned >= running)
    assert (d.bias[d.needs_copy] >= 0).all() and (d.bias[d.needs_copy] < na[d.needs_copy]).all()
    assert not (d.do_copy & d.self_copy_skip).any()
    assert not (d.do_copy & ~d.needs_copy).any()
    same = d.needs_copy & (d.src_col == si) & (si == d.dst_col)
    assert np.array_equal(d.accepted_out, np.where(same, 1, na))


# ---------------------------------------------------------------- bad inputs

def _snap(n=32):
    return frozen(np.zeros(n, np.uint8))


def _bt(row=(0, 1)):
    return np.array([[list(row)]])


_T = PoolLayout("temporal", offset=0, num_blocks=4, block_stride=8, elem_size=4, inner=(2,))
_SD = PoolLayout("conv_sd", offset=0, num_blocks=2, block_stride=8, elem_size=2, state_len=2, dim=2)

BAD_INPUTS = [
    ("memmove negative size", lambda: expect_memmove(_snap(), 0, 4, -1), "negative size n=-1"),
    ("memmove src outside", lambda: expect_memmove(_snap(), 0, 30, 4), "src range [30, 34)"),
    ("memmove dst outside", lambda: expect_memmove(_snap(), -1, 0, 4), "dst range [-1, 3)"),
    ("memmove non-integer", lambda: expect_memmove(_snap(), 1.5, 0, 4), "dst must be an integer"),
    ("memmove bool", lambda: expect_memmove(_snap(), True, 0, 4), "dst must be an integer"),
    ("snapshot dtype", lambda: expect_memmove(np.zeros(8, np.int32), 0, 0, 1), "dtype uint8, got int32"),
    ("snapshot 2-D", lambda: expect_memmove(np.zeros((2, 4), np.uint8), 0, 0, 1), "1-D, got shape (2, 4)"),
    ("snapshot not array", lambda: expect_memmove(bytes(8), 0, 0, 1), "numpy uint8 array, got bytes"),
    ("snapshot strided", lambda: expect_memmove(np.zeros(16, np.uint8)[::2], 0, 0, 1), "C-contiguous"),
    ("batch lengths", lambda: expect_batch(_snap(), [0, 1], [2], [1]),
     "mismatched array lengths: src has 2, dst has 1"),
    ("batch negative size", lambda: expect_batch(_snap(), [0, 1], [8, 9], [1, -3]), "negative size -3 for copy 1"),
    ("batch outside", lambda: expect_batch(_snap(), [0, 1], [8, 30], [1, 4]), "dst range of copy 1 [30, 34)"),
    ("batch negative ptr", lambda: expect_batch(_snap(), [-2], [8], [1]), "src range of copy 0 [-2, -1)"),
    ("batch float ptrs", lambda: expect_batch(_snap(), [0.0], [8], [1]), "src must have an integer dtype"),
    ("batch 2-D", lambda: find_batch_conflict([[0]], [[8]], [[1]]), "src must have 1 dimension"),
    ("batch overflow", lambda: find_batch_conflict([2**63 - 2], [0], [4]), "overflows int64"),
    ("check_batch arena", lambda: check_batch([0], [4], [1], -1), "negative arena_size -1"),
    ("check_batch outside", lambda: check_batch([0], [4], [1], 4), "dst range of copy 0 [4, 5)"),
    ("unknown kind", lambda: PoolLayout("conv_xy", 0, 1, 8, 1, 1, 1).validate(), "unknown layout kind 'conv_xy'"),
    ("elem size", lambda: PoolLayout("conv_sd", 0, 1, 9, 3, 1, 3).validate(), "elem_size must be one of"),
    ("block stride small", lambda: PoolLayout("conv_sd", 0, 1, 6, 2, 2, 2).validate(),
     "block_stride 6 is smaller than a block's data (8 bytes)"),
    ("block stride multiple", lambda: PoolLayout("conv_sd", 0, 1, 9, 2, 2, 2).validate(),
     "block_stride 9 is not a multiple of elem_size 2"),
    ("offset multiple", lambda: PoolLayout("conv_sd", 2, 1, 8, 4, 1, 2).validate(),
     "offset 2 is not a multiple of elem_size 4"),
    ("row stride small", lambda: PoolLayout("conv_ds", 0, 1, 32, 2, 4, 2, row_stride=6).validate(),
     "row_stride 6 is smaller than a row's data"),
    ("row stride multiple", lambda: PoolLayout("conv_ds", 0, 1, 32, 2, 2, 2, row_stride=5).validate(),
     "row_stride 5 is not a multiple of elem_size 2"),
    ("row stride on sd", lambda: PoolLayout("conv_sd", 0, 1, 8, 2, 2, 2, row_stride=8).validate(),
     "row_stride is for conv_ds pools"),
    ("conv no state_len", lambda: PoolLayout("conv_sd", 0, 1, 8, 2, 0, 2).validate(), "state_len must be >= 1"),
    ("temporal no inner", lambda: PoolLayout("temporal", 0, 1, 8, 2).validate(), "non-empty inner"),
    ("temporal zero inner", lambda: PoolLayout("temporal", 0, 1, 8, 2, inner=(2, 0)).validate(),
     "inner[1] must be >= 1, got 0"),
    ("temporal with dim", lambda: PoolLayout("temporal", 0, 1, 8, 2, dim=4, inner=(4,)).validate(),
     "dim is for conv pools"),
    ("no blocks", lambda: PoolLayout("temporal", 0, 0, 8, 2, inner=(4,)).validate(), "num_blocks must be >= 1"),
    ("negative offset", lambda: PoolLayout("temporal", -8, 1, 8, 2, inner=(4,)).validate(), "negative offset -8"),
    ("pool past arena", lambda: _T.validate(30), "ends at byte 32, past the arena size 30"),
    ("block id range", lambda: _T.block_offset(4), "block id 4 out of range [0, 4)"),
    ("token_view arena", lambda: _T.token_view(np.zeros(32, np.float32), 0), "arena must have dtype uint8"),
    ("bias < 0", lambda: expect_state_copies(_snap(), [_T], _bt(), [0], [1], [-1]), "bias < 0: bias=-1"),
    ("temporal col+bias", lambda: expect_state_copies(_snap(), [_T], _bt(), [1], [0], [1]),
     "temporal src_col+bias = 1+1 = 2 is past the block-table columns (2)"),
    ("src_col range", lambda: expect_state_copies(_snap(), [_SD], _bt(), [2], [0], [0]), "src_col 2 out of range"),
    ("dst_col range", lambda: expect_state_copies(_snap(), [_SD], _bt(), [0], [-1], [0]), "dst_col -1 out of range"),
    ("block id in table", lambda: expect_state_copies(_snap(), [_SD], _bt((0, 7)), [0], [1], [0]),
     "destination block id 7 (block-table column 1) out of range [0, 2)"),
    ("state lengths", lambda: expect_state_copies(_snap(), [_SD], _bt(), [0, 0], [1], [0]),
     "mismatched array lengths: src_cols has 2, dst_cols has 1"),
    ("too many requests", lambda: expect_state_copies(_snap(), [_SD], _bt(), [0, 0], [1, 1], [0, 0]),
     "2 requests but block_tables has only 1 rows"),
    ("block table ndim", lambda: expect_state_copies(_snap(), [_SD], [[0, 1]], [0], [1], [0]),
     "block_tables must have 3 dimension(s)"),
    ("group range", lambda: expect_state_copies(_snap(), [PoolLayout("temporal", 0, 4, 8, 4, inner=(2,), group=1)],
                                                _bt(), [0], [1], [0]),
     "uses group 1 but block_tables has 1 group(s)"),
    ("not a pool", lambda: expect_state_copies(_snap(), ["pool"], _bt(), [0], [1], [0]),
     "pools[0] must be a PoolLayout, got str"),
    ("pool past snapshot", lambda: expect_state_copies(_snap(16), [_T], _bt(), [0], [1], [0]), "past the arena size 16"),
    ("num_accepted 0", lambda: decide([4], [4], [2], [0], [1], 4), "num_accepted must be >= 1, got 0"),
    ("block_size 0", lambda: decide([4], [4], [2], [1], [1], 0), "block_size must be >= 1, got 0"),
    ("decide lengths", lambda: decide([4, 4], [4], [2], [1], [1], 4), "mismatched array lengths"),
    ("decide negative", lambda: decide([4], [-4], [2], [1], [1], 4), "negative num_scheduled -4 for request 0"),
    ("decide draft", lambda: decide([1], [1], [3], [1], [0], 4), "num_draft 3 exceeds"),
    ("postprocess dst_col < 0", lambda: expect_postprocess(_snap(), [_SD], _bt(), [0], [1], [1], [1], [0], 4),
     "dst_col -1 out of range"),
    ("postprocess dst_col past", lambda: expect_postprocess(_snap(), [_SD], _bt(), [8], [4], [2], [3], [0], 4),
     "dst_col 2 out of range [0, 2)"),
]


@pytest.mark.parametrize("name,call,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_oracle_error(name, call, message):
    with pytest.raises(OracleError) as ei:
        call()
    assert message in str(ei.value)
    assert not isinstance(ei.value, IllPosedBatch)


def test_postprocess_ignores_requests_without_a_copy():
    # request 1 has no copy, so its out-of-range state_idx and block table never matter
    snap = frozen(np.arange(32))
    bt = np.array([[[0, 1], [9, 9]]])
    out, acc = expect_postprocess(snap, [_SD], bt, [4, 5], [4, 3], [2, 2], [3, 1], [1, 40], 4)
    assert acc.tolist() == [1, 1]
    # _SD block 1 = bytes 8..15, 2 tokens of 4 bytes; bias 2 >= state_len: nothing copied
    assert out.tolist() == list(range(32))


def test_layout_is_frozen_and_hashable():
    p = PoolLayout("temporal", 0, 2, 8, 4, inner=[2])
    assert p.inner == (2,) and hash(p) == hash(PoolLayout("temporal", 0, 2, 8, 4, inner=(2,)))
    with pytest.raises(AttributeError):
        p.offset = 8  # type: ignore[misc]
    assert oracle.LAYOUT_KINDS == ("conv_sd", "conv_ds", "temporal")


def test_numpy_integer_fields_do_not_wrap():
    # int32 fields from a block table must not wrap when a block starts past 2 GiB
    p = PoolLayout("temporal", np.int32(0), np.int32(3), np.int32(2**30), np.int32(4), inner=np.array([2, 3]))
    assert p.block_offset(np.int32(2)) == 2**31 and type(p.block_offset(2)) is int
    assert p.inner == (2, 3) and p == PoolLayout("temporal", 0, 3, 2**30, 4, inner=(2, 3))


def test_ill_posed_batch_pickles():
    import pickle
    e = pickle.loads(pickle.dumps(IllPosedBatch((0, 1), (2, 0), 7, "writes")))
    assert (e.first, e.second, e.offset, e.access) == ((0, 1), (2, 0), 7, "writes")
    assert str(e) == "ill-posed batch: copy (request 0, state 1) writes byte 7 that copy (request 2, state 0) writes"
    assert isinstance(e, OracleError) and isinstance(e, ValueError)


def test_bench_runs():
    """The oracle benchmark runs as a user runs it (a script, never imported by a test)."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "oracle_bench.py"), "--arena-mib", "1", "--rows",
                           "16", "--reps", "1", "--markdown"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]  # 1: a goal missed
    out = proc.stdout
    assert "| case | oracle GB/s | numpy GB/s | ratio |" in out and "(d) expect_batch 256 rows" in out


def test_oracle_imports_only_numpy():
    code = ("import sys; from mambafuzz import oracle; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'hypothesis') "
            "or (m.startswith('mambafuzz.') and not m.startswith('mambafuzz.oracle'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)

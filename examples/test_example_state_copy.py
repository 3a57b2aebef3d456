"""A state copy as engines write it: per-column metadata, one block-table pointer per group.

The engine's kernel takes the per-state metadata as separate arrays (int64
addresses and strides, int32 sizes), the address of each group's block table
and the tables' row stride, handles the SD conv layout and temporal states,
splits temporal copies over a fixed number of tiles (NUM_TILES, as vLLM's 16),
and its host wrapper skips every request whose source and destination column
are equal.  The contract's options say so (``layout="sd"``, ``tiles=NUM_TILES``,
``skip_equal_cols=True``); ``mambafuzz.adapters`` turns the contract's meta
table and block tables into the engine's arguments.
"""
import os

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings

import mambafuzz
from mambafuzz import adapters, strategies

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1" and tuple(map(int, triton.__version__.split(".")[:2])) < (3, 7),
    reason="Triton < 3.7's interpreter cannot run range() over a loaded bound")

NUM_TILES = 16


@triton.jit
def _memmove(src, dst, n, BLOCK: tl.constexpr):
    """n bytes, in chunks walked away from the overlap, a barrier between each chunk's loads and stores."""
    down = (src < dst) & (dst < src + n)
    lanes = tl.arange(0, BLOCK)
    chunks = (n + BLOCK - 1) // BLOCK
    for k in range(0, chunks):
        c = tl.where(down, chunks - 1 - k, k)
        offs = c * BLOCK + lanes
        mask = offs < n
        x = tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=mask)
        tl.debug_barrier()
        tl.store((dst + offs).to(tl.pointer_type(tl.uint8)), x, mask=mask)


@triton.jit
def _state_copy_kernel(bases, block_strides, elem_sizes, inners, conv_lens, groups, table_ptrs, row_stride,
                       req_ids, src_cols, dst_cols, biases, NUM_TILES: tl.constexpr, BLOCK: tl.constexpr,
                       TEMPORAL_BIAS: tl.constexpr):
    i = tl.program_id(0)  # request (of those not skipped)
    s = tl.program_id(1)  # state
    t = tl.program_id(2)  # tile
    base = tl.load(bases + s)
    stride = tl.load(block_strides + s)
    elem = tl.load(elem_sizes + s).to(tl.int64)
    inner = tl.load(inners + s).to(tl.int64)
    conv_len = tl.load(conv_lens + s).to(tl.int64)
    table = tl.load(table_ptrs + tl.load(groups + s)).to(tl.pointer_type(tl.int32))
    row = table + tl.load(req_ids + i).to(tl.int64) * row_stride
    src_col = tl.load(src_cols + i)
    bias = tl.load(biases + i).to(tl.int64)
    dst = base + tl.load(row + tl.load(dst_cols + i)).to(tl.int64) * stride
    if conv_len > 0:  # SD conv: tokens bias.. of the source block become tokens 0.. of the destination
        if t == 0:
            token = inner * elem
            src = base + tl.load(row + src_col).to(tl.int64) * stride
            _memmove(src + bias * token, dst, tl.maximum(conv_len - bias, 0) * token, BLOCK)
    else:  # temporal: block src_col + bias, whole, split over the tiles
        if TEMPORAL_BIAS:
            col = src_col + bias
        else:
            col = src_col + 0 * bias  # the WRONG variant forgets the bias
        src = base + tl.load(row + col).to(tl.int64) * stride
        size = inner * elem
        tile = (size + NUM_TILES - 1) // NUM_TILES
        lo = tl.minimum(t * tile, size)
        _memmove(src + lo, dst + lo, tl.minimum(lo + tile, size) - lo, BLOCK)


def engine_state_copy(columns, table_ptrs, row_stride, src_cols, dst_cols, biases, temporal_bias=True):
    """The engine's host wrapper: requests whose two columns are equal are skipped."""
    keep = torch.nonzero(src_cols != dst_cols).flatten()
    grid = (keep.numel(), columns["base"].numel(), NUM_TILES)
    if 0 in grid:
        return
    _state_copy_kernel[grid](columns["base"], columns["block_stride"], columns["elem_size"], columns["inner"],
                             columns["conv_len"], columns["group"], table_ptrs, row_stride, keep.to(torch.int32),
                             src_cols[keep], dst_cols[keep], biases[keep], NUM_TILES=NUM_TILES, BLOCK=256,
                             TEMPORAL_BIAS=temporal_bias)


def state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles, temporal_bias=True):
    """The adapter: the contract's meta table and block tables in the engine's shapes."""
    assert num_tiles == NUM_TILES, "tiles=NUM_TILES fixes the tile count"
    columns = adapters.state_columns(meta)
    assert not (columns["kind"] == adapters.KIND_DS).any(), "layout='sd' draws no DS states"
    engine_state_copy(columns, adapters.block_table_ptrs(block_tables), adapters.block_table_row_stride(block_tables),
                      src_cols, dst_cols, biases, temporal_bias)


def state_copy_without_temporal_bias(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles):
    """WRONG (tests/integration/test_plugin.py): a temporal state is copied from src_col, not src_col + bias."""
    state_copy(meta, block_tables, src_cols, dst_cols, biases, num_tiles=num_tiles, temporal_bias=False)


ENGINE = dict(layout="sd", tiles=NUM_TILES, skip_equal_cols=True)


@pytest.mark.matrix
def test_state_copy_fits_the_contract():
    mambafuzz.check(state_copy, "state_copy", max_examples=30, **ENGINE)


@settings(max_examples=10, deadline=None)
@given(strategies.state_copies(**ENGINE))
def test_state_copy_with_your_own_given(case):
    """The same check as a plain Hypothesis test: draw cases, judge each with the engine."""
    device = os.environ.get("MAMBAFUZZ_DEVICE", "cpu")
    verdict = mambafuzz.judge.engine.run_case(state_copy, case, device, mode="race" if device == "cpu" else "compare")
    assert not verdict.failed, verdict.summary()

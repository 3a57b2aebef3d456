"""Hand-built cases where known races and bugs show on a GPU (the geometries where they were measured on an H200).

Strategies draw cases at random; these are fixed, large, named ones that the
GPU benchmarks (``bench/gpu_racy.py``, ``bench/amplify_bench.py``) and the GPU
tests run the zoo on, so a figure in ``bench/RESULTS.md`` can be re-measured
on exactly the same bytes.
"""
from __future__ import annotations

from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.cases.postprocess import PostprocessCase
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.oracle import PoolLayout


def batch_rows(rows: int, size: int, shift: int) -> BatchCopyCase:
    """`rows` copies of `size` bytes, each moved by `shift` (negative: left) inside its own region."""
    region = size + abs(shift) + 256
    copies = []
    for r in range(rows):
        base = 256 + r * region
        src, dst = (base + abs(shift), base) if shift < 0 else (base, base + shift)
        copies.append((src, dst, size))
    return BatchCopyCase(arena_size=256 + rows * region + 256, copies=tuple(copies), seed=1)


def same_block_conv(kind: str, requests: int, state_len: int, dim: int, elem: int, bias: int) -> StateCopyCase:
    """Every request shifts its conv window inside one physical block (columns 0 and 1 alias)."""
    if kind == "conv_sd":
        stride = state_len * dim * elem
        pool = PoolLayout("conv_sd", 256, requests, stride, elem, state_len=state_len, dim=dim)
    else:
        stride = dim * state_len * elem
        pool = PoolLayout("conv_ds", 256, requests, stride, elem, state_len=state_len, dim=dim)
    tables = (tuple((r, r) for r in range(requests)),)
    return StateCopyCase(arena_size=256 + requests * stride + 256, pools=(pool,), block_tables=tables,
                         num_tiles=1, seed=1, src_cols=(0,) * requests, dst_cols=(1,) * requests,
                         biases=(bias,) * requests)


def self_copy_postprocess(requests: int, states: int, tiles: int) -> PostprocessCase:
    """Self-copies with bias 1 (accepted count becomes 1) over several states and tiles."""
    pools, cursor = [], 256
    for _ in range(states):
        pools.append(PoolLayout("conv_sd", cursor, 2 * requests, 4 * 64 * 2, 2, state_len=4, dim=64))
        cursor += 2 * requests * 512 + 256
    tables = (tuple((2 * r, 2 * r + 1) for r in range(requests)),)
    # block_size 4: computed 2, scheduled 3, draft 2, accepted 3 -> running 3, aligned 4, bias 1, dst col 0
    return PostprocessCase(arena_size=cursor, pools=tuple(pools), block_tables=tables, num_tiles=tiles, seed=1,
                           block_size=4, num_computed=(2,) * requests, num_scheduled=(3,) * requests,
                           num_draft=(2,) * requests, num_accepted=(3,) * requests, state_idx=(0,) * requests)


def huge_pool() -> StateCopyCase:
    """Block 2 of a pool starts past 2 GiB; copy block 2 -> block 0."""
    stride = (1 << 30) + 4096
    pool = PoolLayout("temporal", 256, 3, stride, 4, inner=(256,))
    return StateCopyCase(arena_size=256 + 3 * stride, pools=(pool,), block_tables=(((2, 0),),), num_tiles=4,
                         seed=1, src_cols=(0,), dst_cols=(1,), biases=(0,))


GEOMETRIES = {
    "batch 128 rows x 32 KiB, left shift 16": ("batch_memcpy", lambda: batch_rows(128, 32 << 10, -16)),
    "batch 128 rows x 32 KiB, left shift 256": ("batch_memcpy", lambda: batch_rows(128, 32 << 10, -256)),
    "batch 4096 rows x 1 KiB, left shift 8": ("batch_memcpy", lambda: batch_rows(4096, 1 << 10, -8)),
    "batch 128 rows x 32 KiB, right shift 16": ("batch_memcpy", lambda: batch_rows(128, 32 << 10, 16)),
    "batch 1024 rows x 3 KiB+5, left shift 3": ("batch_memcpy", lambda: batch_rows(1024, 3077, -3)),
    "SD same block, 1024 req, 256 B tokens, bias 1": (
        "state_copy", lambda: same_block_conv("conv_sd", 1024, 4, 128, 2, 1)),
    "SD same block, 1024 req, 2 KiB tokens, bias 2": (
        "state_copy", lambda: same_block_conv("conv_sd", 1024, 4, 1024, 2, 2)),
    "DS same block, 512 req, 512 rows fp16, bias 1": (
        "state_copy", lambda: same_block_conv("conv_ds", 512, 4, 512, 2, 1)),
    "DS same block, 512 req, 512 rows fp32, bias 2": (
        "state_copy", lambda: same_block_conv("conv_ds", 512, 4, 512, 4, 2)),
    "postprocess self-copy bias 1, 256 req, 4 states, 16 tiles": (
        "postprocess", lambda: self_copy_postprocess(256, 4, 16)),
    "temporal pool past 2 GiB": ("state_copy", huge_pool),
}

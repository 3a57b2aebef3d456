"""A batch copy as engines write it: uint64 pointers, int32 sizes, one program per copy.

The engine's kernel walks each copy in chunks away from the overlap (up when
the destination is below the source, down when it is above) and puts a
barrier between a chunk's loads and its stores, so no lane stores a byte
another lane has yet to load.  The adapter converts the contract's int64
tensors to the engine's dtypes; mambafuzz draws the overlaps.
"""
import torch
import triton
import triton.language as tl

import mambafuzz


@triton.jit
def _batch_memcpy_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr, BARRIER: tl.constexpr):
    i = tl.program_id(0)
    src = tl.load(src_ptrs + i).to(tl.int64)  # uint64 address
    dst = tl.load(dst_ptrs + i).to(tl.int64)
    n = tl.load(sizes + i).to(tl.int64)       # int32 size
    down = (src < dst) & (dst < src + n)      # destination above the source: walk down
    lanes = tl.arange(0, BLOCK)
    chunks = (n + BLOCK - 1) // BLOCK
    for k in range(0, chunks):
        c = tl.where(down, chunks - 1 - k, k)
        offs = c * BLOCK + lanes
        mask = offs < n
        x = tl.load((src + offs).to(tl.pointer_type(tl.uint8)), mask=mask)
        if BARRIER:
            tl.debug_barrier()  # every lane has loaded before any lane stores
        tl.store((dst + offs).to(tl.pointer_type(tl.uint8)), x, mask=mask)


def engine_batch_memcpy(src_ptrs, dst_ptrs, sizes, barrier=True):
    """The engine's entry point: uint64 [n] pointers, int32 [n] sizes."""
    if sizes.numel():
        _batch_memcpy_kernel[(sizes.numel(),)](src_ptrs, dst_ptrs, sizes, BLOCK=256, BARRIER=barrier)


def batch_copy(src_ptrs, dst_ptrs, sizes):
    """The adapter: the contract's int64 tensors in the engine's dtypes."""
    engine_batch_memcpy(src_ptrs.to(torch.uint64), dst_ptrs.to(torch.uint64), sizes.to(torch.int32))


def batch_copy_without_barrier(src_ptrs, dst_ptrs, sizes):
    """A WRONG variant (tests/integration/test_plugin.py): no barrier, so an overlapping chunk races."""
    engine_batch_memcpy(src_ptrs.to(torch.uint64), dst_ptrs.to(torch.uint64), sizes.to(torch.int32),
                        barrier=False)


def test_batch_copy_is_a_memmove():
    mambafuzz.check(batch_copy, "batch_memcpy", max_examples=40)

"""``batch_memcpy`` kernels in engine style, each correct or with one named bug.

Engine style: the copy size is loaded from memory and bounds a
``for i in range(0, size, BLOCK)`` loop (Triton 3.5/3.6 interpreters run that
only under mambafuzz, which mends them), overlap guards use Python
``and``/``or`` on scalars, a ``tl.where`` picks the walk direction, pointer
arrays are uint64 or int64, sizes int32 and a program moves BLOCK = 1024
one-byte lanes at a time.

Adapters have the contract signature ``fn(src_ptrs, dst_ptrs, sizes, *,
arena=None)`` (int64 tensors of absolute byte addresses, ``arena`` ignored)
and convert to what their kernel takes.

| adapter | overlap | expected | bug |
| --- | --- | --- | --- |
| ``memmove`` | full | clean | none (uint64 pointers) |
| ``memmove_left`` | left | clean | none (int64 pointers) |
| ``left_barrier_before_load`` | left | race | barrier before the load, none between load and store |
| ``left_guard_misses_short`` | left | race | guard skips overlaps shorter than one block |
| ``forward_on_right_overlap`` | full | mismatch | walks ascending when dst > src overlaps |
| ``tail_dropped`` | full | mismatch | loop stops at the last whole block |
| ``memmove_nc_sizes`` | full | inconclusive on the CPU | none; sizes read by inline PTX |
"""
import torch
import triton
import triton.language as tl

BLOCK = 1024  # one-byte lanes per piece


# --------------------------------------------------------------------------
# full memmove, uint64 pointer arrays
# --------------------------------------------------------------------------
@triton.jit
def _memmove_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """Copy i = program i.  Overlapping pieces: load, barrier, store, barrier.

    dst above an overlapping src walks the pieces downwards so that no piece
    loads bytes an earlier piece stored; the barrier after the store orders
    the pieces of one copy for the language as well.
    """
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    left = dst < src and src < dst + size
    right = src < dst and dst < src + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    for i in range(0, size, BLOCK):
        start = tl.where(right, size - BLOCK - i, i)
        offs = start + lanes
        mask = (offs >= 0) & (offs < size)
        v = tl.load(src_p + offs, mask=mask)
        if left or right:
            tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)
        if left or right:
            tl.debug_barrier()


@triton.jit
def _forward_right_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """BUG (forward walk on right overlap): pieces always go upwards, so with
    dst above src a later piece loads bytes an earlier piece already stored.
    The barriers keep it free of races: the bytes are simply wrong."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    left = dst < src and src < dst + size
    right = src < dst and dst < src + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    for i in range(0, size, BLOCK):
        offs = i + lanes
        mask = offs < size
        v = tl.load(src_p + offs, mask=mask)
        if left or right:
            tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)
        if left or right:
            tl.debug_barrier()


@triton.jit
def _tail_dropped_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """BUG (tail dropped): the loop bound is rounded down to whole blocks, so
    the last ``size % BLOCK`` bytes of the walk are never copied."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    left = dst < src and src < dst + size
    right = src < dst and dst < src + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    whole = size // BLOCK * BLOCK
    for i in range(0, whole, BLOCK):
        start = tl.where(right, size - BLOCK - i, i)
        offs = start + lanes
        mask = (offs >= 0) & (offs < size)
        v = tl.load(src_p + offs, mask=mask)
        if left or right:
            tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)
        if left or right:
            tl.debug_barrier()


# --------------------------------------------------------------------------
# left-overlap-only memmove, int64 pointer arrays
# --------------------------------------------------------------------------
@triton.jit
def _memmove_left_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """Ascending walk, correct when dst is below src (or apart).  A left
    overlap puts a barrier between each piece's load and its store: a lane
    must not store a byte another lane of the piece has yet to load."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    left = dst < src and src < dst + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    for i in range(0, size, BLOCK):
        offs = i + lanes
        mask = offs < size
        v = tl.load(src_p + offs, mask=mask)
        if left:
            tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)


@triton.jit
def _barrier_before_load_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """BUG (barrier before the load): the barrier sits before each piece's
    load, so its load and store share an epoch: racy on left overlap."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    left = dst < src and src < dst + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    for i in range(0, size, BLOCK):
        offs = i + lanes
        mask = offs < size
        if left:
            tl.debug_barrier()
        v = tl.load(src_p + offs, mask=mask)
        tl.store(dst_p + offs, v, mask=mask)


@triton.jit
def _guard_short_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """BUG (guard misses short overlaps): the guard asks for at least one
    block of overlapping bytes, so an overlap shorter than BLOCK runs without
    the barrier: racy."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.load(sizes + pid)
    left = dst < src and src + BLOCK <= dst + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    for i in range(0, size, BLOCK):
        offs = i + lanes
        mask = offs < size
        v = tl.load(src_p + offs, mask=mask)
        if left:
            tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)


# --------------------------------------------------------------------------
# sizes read through inline PTX (no Triton interpreter runs inline assembly)
# --------------------------------------------------------------------------
@triton.jit
def _memmove_nc_sizes_kernel(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    """The full memmove, its size read through the read-only data cache
    (``ld.global.nc``) in inline PTX, as engines read launch metadata."""
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid)
    dst = tl.load(dst_ptrs + pid)
    size = tl.inline_asm_elementwise("ld.global.nc.b32 $0, [$1];", "=r,l", [sizes + pid],
                                     dtype=tl.int32, is_pure=True, pack=1)
    left = dst < src and src < dst + size
    right = src < dst and dst < src + size
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, BLOCK)
    for i in range(0, size, BLOCK):
        start = tl.where(right, size - BLOCK - i, i)
        offs = start + lanes
        mask = (offs >= 0) & (offs < size)
        v = tl.load(src_p + offs, mask=mask)
        if left or right:
            tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)
        if left or right:
            tl.debug_barrier()


# --------------------------------------------------------------------------
# contract adapters
# --------------------------------------------------------------------------
def _launch(kernel, src_ptrs, dst_ptrs, sizes, ptr_dtype):
    """One program per copy; pointers reinterpreted as `ptr_dtype`, sizes as int32."""
    n = int(src_ptrs.shape[0])
    if n == 0:
        return
    kernel[(n,)](src_ptrs.view(ptr_dtype), dst_ptrs.view(ptr_dtype), sizes.to(torch.int32), BLOCK=BLOCK)


def memmove(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Correct memmove, both overlap directions (uint64 pointer arrays)."""
    _launch(_memmove_kernel, src_ptrs, dst_ptrs, sizes, torch.uint64)


def forward_on_right_overlap(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Bug: walks upwards on right overlap (wrong bytes, no race)."""
    _launch(_forward_right_kernel, src_ptrs, dst_ptrs, sizes, torch.uint64)


def tail_dropped(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Bug: the last size % BLOCK bytes are never copied (wrong bytes)."""
    _launch(_tail_dropped_kernel, src_ptrs, dst_ptrs, sizes, torch.uint64)


def memmove_left(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Correct memmove for dst below src or apart (int64 pointer arrays)."""
    _launch(_memmove_left_kernel, src_ptrs, dst_ptrs, sizes, torch.int64)


def left_barrier_before_load(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Bug: barrier before the load instead of between load and store (racy)."""
    _launch(_barrier_before_load_kernel, src_ptrs, dst_ptrs, sizes, torch.int64)


def left_guard_misses_short(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Bug: overlap guard misses overlaps shorter than one block (racy)."""
    _launch(_guard_short_kernel, src_ptrs, dst_ptrs, sizes, torch.int64)


def memmove_nc_sizes(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Correct memmove reading its sizes through inline PTX: inconclusive in every interpreter."""
    _launch(_memmove_nc_sizes_kernel, src_ptrs, dst_ptrs, sizes, torch.uint64)

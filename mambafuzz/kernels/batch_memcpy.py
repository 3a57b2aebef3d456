"""Batched memmove (``batch_memcpy`` contract): a 2-D grid of (row, part) programs.

``batch_memcpy(src_ptrs, dst_ptrs, sizes, *, arena=None, variant=None)``:
int64 ``[n]`` tensors of absolute byte addresses and byte counts; copy i is a
memmove of ``sizes[i]`` bytes (full overlap support, both directions).
``variant`` selects one bug-zoo flag of ``_move_span`` (see ``VARIANTS``);
``perturb`` (``kernels.perturb.Perturb``) sleeps chosen warps to make races show.

Splitting long rows: a row whose source and destination do not overlap (or
overlap exactly) is cut into ``min(MAX_PARTS, ceil(size / SPLIT_MIN))`` parts,
program (row, p) copying part p in steps of ``SPLIT_BLOCK`` bytes; parts cover
disjoint bytes and read none another part writes, so no ordering between
programs is needed.  Part boundaries after the first sit where ``dst`` is
8-byte aligned, so only the first part has a byte head and only the last a
byte tail (the zoo's TAIL-DROP drops the same bytes as unsplit).  A row that
overlaps itself stays in program (row, 0), walking away from the overlap with
the barrier of ``_move_span``: a second program could store bytes the first
has yet to load.  The split is decided in the kernel from ``sizes`` (no host
synchronisation, so the launch can be captured in a CUDA graph): on a GPU the
grid's second dimension is ``MAX_PARTS`` and parts past a row's count exit at
once; on the CPU (the interpreter, where every idle program costs) the
launcher reads the sizes and launches only as many parts as the longest row
needs, each row split exactly as on a GPU.
"""
import torch
import triton
import triton.language as tl

from .copy import _move_span
from .launch import launch, variant_flags

BLOCK = 1024  # bytes per body chunk
MAX_PARTS = 32        # programs one row may be split over (the grid's second dimension on a GPU)
SPLIT_MIN = 64 << 10  # bytes per part at least: shorter rows stay in one program
SPLIT_BLOCK = 8192    # bytes per step of a row that does not overlap itself (no barrier, wider steps)
_MAX_PARTS = tl.constexpr(MAX_PARTS)
_SPLIT_MIN = tl.constexpr(SPLIT_MIN)
_SPLIT_BLOCK = tl.constexpr(SPLIT_BLOCK)

# zoo id -> constexpr flags of _move_span
VARIANTS = {
    None: {},
    "BM-NOGUARD": {"NOGUARD_LEFT": True},
    "BM-RIGHT": {"FORWARD_RIGHT": True},
    "TAIL-DROP": {"DROP_TAIL": True},
    "MISALIGN": {"CHECK_DST_ALIGN_ONLY": True},
}


@triton.jit
def _parts(n):
    """How many programs a row of ``n`` bytes that does not overlap itself is split over."""
    return tl.minimum(tl.maximum((n + _SPLIT_MIN - 1) // _SPLIT_MIN, 1), _MAX_PARTS)


@triton.jit(do_not_specialize=["seed"])
def _batch_memcpy_kernel(src_ptrs, dst_ptrs, sizes, seed, BLOCK: tl.constexpr,
                         NOGUARD_LEFT: tl.constexpr, FORWARD_RIGHT: tl.constexpr,
                         DROP_TAIL: tl.constexpr, CHECK_DST_ALIGN_ONLY: tl.constexpr,
                         DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1).to(tl.int64)
    src = tl.load(src_ptrs + row).to(tl.int64)
    dst = tl.load(dst_ptrs + row).to(tl.int64)
    n = tl.load(sizes + row).to(tl.int64)
    overlaps = ((dst < src) & (src < dst + n)) | ((src < dst) & (dst < src + n))
    if overlaps:  # one program, in the guard's direction
        if part == 0:
            _move_span(src, dst, n, BLOCK,
                       NOGUARD_LEFT=NOGUARD_LEFT, FORWARD_RIGHT=FORWARD_RIGHT,
                       DROP_TAIL=DROP_TAIL, CHECK_DST_ALIGN_ONLY=CHECK_DST_ALIGN_ONLY,
                       DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)
    else:
        parts = _parts(n)
        if part < parts:
            piece = ((n + parts - 1) // parts + 7) // 8 * 8
            head = (8 - dst % 8) % 8  # boundaries after the first where dst + offset is 8-aligned
            lo = tl.where(part == 0, 0, tl.minimum(head + part * piece, n))
            hi = tl.where(part == parts - 1, n, tl.minimum(head + (part + 1) * piece, n))
            _move_span(src + lo, dst + lo, hi - lo, _SPLIT_BLOCK,
                       NOGUARD_LEFT=NOGUARD_LEFT, FORWARD_RIGHT=FORWARD_RIGHT,
                       DROP_TAIL=DROP_TAIL, CHECK_DST_ALIGN_ONLY=CHECK_DST_ALIGN_ONLY,
                       DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)


def parts_needed(src, dst, sizes) -> int:
    """The grid's second dimension the longest row needs (host values; what the CPU launches)."""
    most = 1
    for s, d, n in zip(src, dst, sizes):
        if not (d < s < d + n or s < d < s + n):
            most = max(most, min(MAX_PARTS, max(1, -(-n // SPLIT_MIN))))
    return most


FLAG_NAMES = ("NOGUARD_LEFT", "FORWARD_RIGHT", "DROP_TAIL", "CHECK_DST_ALIGN_ONLY")


def _flags(variant):
    return variant_flags("batch_memcpy", VARIANTS, FLAG_NAMES, variant)


def _check_vec(name, t):
    if not isinstance(t, torch.Tensor) or t.dim() != 1:
        raise TypeError(f"batch_memcpy: {name} must be a 1-D tensor")
    if t.dtype not in (torch.int64, torch.uint64):
        raise TypeError(f"batch_memcpy: {name} must be int64, got {t.dtype}")
    if not t.is_contiguous():
        raise ValueError(f"batch_memcpy: {name} must be contiguous")


def batch_memcpy(src_ptrs, dst_ptrs, sizes, *, arena=None, variant=None,
                 block=BLOCK, num_warps=4, perturb=None):
    """memmove ``sizes[i]`` bytes from ``src_ptrs[i]`` to ``dst_ptrs[i]`` for every i.

    ``arena`` is accepted for the contract and ignored (pointers are absolute).
    ``perturb`` (a ``kernels.perturb.Perturb`` or its 5-tuple) sleeps chosen
    warps to make races show; its ``num_warps`` replaces ``num_warps``.
    """
    for name, t in (("src_ptrs", src_ptrs), ("dst_ptrs", dst_ptrs), ("sizes", sizes)):
        _check_vec(name, t)
    n = src_ptrs.shape[0]
    if dst_ptrs.shape[0] != n or sizes.shape[0] != n:
        raise ValueError("batch_memcpy: src_ptrs, dst_ptrs and sizes differ in length")
    flags = _flags(variant)
    if sizes.device.type == "cuda":
        parts = MAX_PARTS  # decided per row in the kernel: no host synchronisation
    else:
        parts = parts_needed(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist())
    launch(_batch_memcpy_kernel, (n, parts), (src_ptrs, dst_ptrs, sizes), perturb=perturb,
           num_warps=num_warps, BLOCK=block, **flags)

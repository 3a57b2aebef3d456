"""Batched memmove: one program per copy (``batch_memcpy`` contract).

``batch_memcpy(src_ptrs, dst_ptrs, sizes, *, arena=None, variant=None)``:
int64 ``[n]`` tensors of absolute byte addresses and byte counts; copy i is a
memmove of ``sizes[i]`` bytes (full overlap support, both directions).
``variant`` selects one bug-zoo flag of ``_move_span`` (see ``VARIANTS``);
``perturb`` (``kernels.perturb.Perturb``) sleeps chosen warps to make races show.
"""
import torch
import triton
import triton.language as tl

from .copy import _move_span
from .launch import launch, variant_flags

BLOCK = 1024  # bytes per body chunk

# zoo id -> constexpr flags of _move_span
VARIANTS = {
    None: {},
    "BM-NOGUARD": {"NOGUARD_LEFT": True},
    "BM-RIGHT": {"FORWARD_RIGHT": True},
    "TAIL-DROP": {"DROP_TAIL": True},
    "MISALIGN": {"CHECK_DST_ALIGN_ONLY": True},
}


@triton.jit(do_not_specialize=["seed"])
def _batch_memcpy_kernel(src_ptrs, dst_ptrs, sizes, seed, BLOCK: tl.constexpr,
                         NOGUARD_LEFT: tl.constexpr, FORWARD_RIGHT: tl.constexpr,
                         DROP_TAIL: tl.constexpr, CHECK_DST_ALIGN_ONLY: tl.constexpr,
                         DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.load(src_ptrs + pid).to(tl.int64)
    dst = tl.load(dst_ptrs + pid).to(tl.int64)
    n = tl.load(sizes + pid).to(tl.int64)
    _move_span(src, dst, n, BLOCK,
               NOGUARD_LEFT=NOGUARD_LEFT, FORWARD_RIGHT=FORWARD_RIGHT,
               DROP_TAIL=DROP_TAIL, CHECK_DST_ALIGN_ONLY=CHECK_DST_ALIGN_ONLY,
               DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)


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
    launch(_batch_memcpy_kernel, (n,), (src_ptrs, dst_ptrs, sizes), perturb=perturb,
           num_warps=num_warps, BLOCK=block, **flags)

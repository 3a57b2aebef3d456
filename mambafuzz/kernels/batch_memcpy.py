"""Batched memmove (``batch_memcpy`` contract): a 2-D grid of (row, part) programs.

``batch_memcpy(src_ptrs, dst_ptrs, sizes, *, arena=None, variant=None)``:
int64 ``[n]`` tensors of absolute byte addresses and byte counts; copy i is a
memmove of ``sizes[i]`` bytes (full overlap support, both directions).
``variant`` selects one bug-zoo flag of ``move_span`` (see ``VARIANTS``);
``perturb`` (``kernels.perturb.Perturb``) sleeps chosen warps to make races show.

Splitting long rows: a row whose source and destination do not overlap (or
overlap exactly) is shared by ``min(parts, ceil(size / SPLIT_MIN))`` programs,
``parts`` being the parts the grid holds for every row; program (row, p)
copies part p.  The grid is 1-D and part-major (``PART_MAJOR``): program
``row * parts + p``, so programs that run side by side stream through
neighbouring blocks of one row, as a flat copy does; the 2-D (row, part) grid
ran 3-5 points of ``copy_`` slower at every shape tried.
Parts cover disjoint bytes and read none another part writes, so no ordering
between programs is needed.  When source and destination agree mod 16, the
row goes to ``_copy_disjoint``: a byte head (part 0) to 16-byte alignment,
then whole blocks of ``SPLIT_BLOCK`` bytes dealt out to the parts in turn
(``INTERLEAVE``: the parts walk the row side by side), unmasked, through
pointers marked 16-byte aligned so every lane moves 16-byte vectors, four
blocks loaded before any is stored (``UNROLL``), and the last partial block
and byte tail (the last part).  ``move_span``'s masked u64 lanes reached
about three quarters of ``copy_`` on an H200, this path 92-95% with the
defaults (``bench/tune_large.py``, which sweeps every knob; a flat Triton copy
of the same bytes reaches 96-97%).  Other rows, and every row of the
TAIL-DROP and MISALIGN variants, are cut into spans whose boundaries after the
first sit where ``dst`` is ``ALIGN``-byte aligned, so only the first span has a
byte head and only the last a byte tail (TAIL-DROP drops the same bytes as
unsplit); each span goes through ``move_span`` in steps of ``BLOCK`` (wider
byte lanes there would cost the whole kernel its registers).
A row that overlaps itself stays in program (row, 0), walking away from the
overlap with the barrier of ``move_span``: a second program could store bytes
the first has yet to load.

The parts a row gets on the grid (``parts_cap``) come from the row count
alone: about ``PROGRAMS`` programs in all, at most ``MAX_PARTS`` a row, so no
host synchronisation is needed (the launch can be captured in a CUDA graph).
The price is idle programs when rows are short: about half a nanosecond
each on an H200, so a batch of up to 64 short rows pays a few microseconds
(``tune_large.py --sections idle``).
On the CPU (the interpreter, where every idle program costs) the launcher
reads the sizes and launches no more parts than the longest row needs; each
row is split exactly as on a GPU.
"""
import torch
import triton
import triton.language as tl

from . import torch_path
from .copy import move_bytes_small, move_span, warp_delay
from .launch import launch, variant_flags

CONTRACT = "batch_memcpy"
DESCRIPTION = ("Triton batched memmove: long rows split over programs; a row that overlaps itself "
               "stays in one, with barriers")
AMPLIFIABLE = True  # its targets take perturb= (warp delays built into the kernel)

BLOCK = 1024  # bytes per body chunk
MAX_PARTS = 256       # programs one row may be split over, at most (a 4 MiB row in 16 KiB parts)
PROGRAMS = 16384      # about this many programs in a launch when rows are split (see parts_cap)
SPLIT_MIN = 16 << 10  # bytes per part at least: shorter rows stay in one program
SPLIT_BLOCK = 4096    # bytes per step of a row that does not overlap itself (no barrier, wider steps)
ALIGN = 128           # part boundaries after the first: dst at a multiple of this
INTERLEAVE = True     # the 16-byte path: parts take a row's blocks in turn (True) or a span each
UNROLL = 4            # the 16-byte path: blocks loaded before the first is stored (1, 2 or 4)
PART_MAJOR = True     # the grid: 1-D with a row's parts side by side (True) or 2-D (rows, parts)
_ALIGN = tl.constexpr(ALIGN)

# zoo id -> constexpr flags of move_span
VARIANTS = {
    None: {},
    "BM-NOGUARD": {"NOGUARD_LEFT": True},
    "BM-RIGHT": {"FORWARD_RIGHT": True},
    "TAIL-DROP": {"DROP_TAIL": True},
    "MISALIGN": {"CHECK_DST_ALIGN_ONLY": True},
}


@triton.jit
def _parts(n, cap, SPLIT_MIN: tl.constexpr):
    """How many programs a row of ``n`` bytes that does not overlap itself is split over."""
    return tl.minimum(tl.maximum((n + SPLIT_MIN - 1) // SPLIT_MIN, 1), cap)


@triton.jit
def _copy_disjoint(src_addr, dst_addr, n, part, parts, BLOCK: tl.constexpr, UNROLL: tl.constexpr,
                   DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr, seed):
    """Part ``part`` of ``parts`` of a copy of ``n`` bytes between ranges that do not overlap (or
    coincide), ``src == dst`` mod 16.

    A byte head (part 0) brings both to 16-byte alignment; whole blocks of
    ``BLOCK`` bytes then move as u64 lanes, unmasked, through pointers marked
    16-byte aligned (``tl.multiple_of``: an address loaded from memory tells
    the compiler nothing), so every lane moves 16-byte vectors.  Part p takes
    blocks p, p + parts, p + 2 parts, ...: the parts of a row walk it side by
    side.  ``UNROLL`` blocks are loaded before any is stored.  The last part
    moves the last partial block's words, masked, then a byte tail.  No lane
    loads a byte another lane stores: no barrier.
    """
    head = tl.minimum((16 - dst_addr % 16) % 16, n)
    if part == 0:
        move_bytes_small(src_addr, dst_addr, tl.minimum(head, 8), False, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        move_bytes_small(src_addr + 8, dst_addr + 8, head - 8, False, DELAY_POS, DELAY_NS, SCHEDULE, seed)
    ps = (src_addr + head).to(tl.pointer_type(tl.uint64))
    pd = (dst_addr + head).to(tl.pointer_type(tl.uint64))
    lanes = tl.arange(0, BLOCK // 8).to(tl.int64)
    blocks = (n - head) // BLOCK
    k = part
    step = parts * (BLOCK // 8)
    while k + (UNROLL - 1) * parts < blocks:
        o = k * (BLOCK // 8) + lanes
        warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        x = tl.load(tl.multiple_of(ps + o, 16))
        if UNROLL >= 2:
            x2 = tl.load(tl.multiple_of(ps + o + step, 16))
        if UNROLL == 4:
            x3 = tl.load(tl.multiple_of(ps + o + 2 * step, 16))
            x4 = tl.load(tl.multiple_of(ps + o + 3 * step, 16))
        warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        tl.store(tl.multiple_of(pd + o, 16), x)
        if UNROLL >= 2:
            tl.store(tl.multiple_of(pd + o + step, 16), x2)
        if UNROLL == 4:
            tl.store(tl.multiple_of(pd + o + 2 * step, 16), x3)
            tl.store(tl.multiple_of(pd + o + 3 * step, 16), x4)
        k += UNROLL * parts
    if UNROLL >= 2:
        while k < blocks:  # the part's last blocks, fewer than UNROLL
            o = k * (BLOCK // 8) + lanes
            warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            x = tl.load(tl.multiple_of(ps + o, 16))
            warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            tl.store(tl.multiple_of(pd + o, 16), x)
            k += parts
    if part == parts - 1:
        words = (n - head - blocks * BLOCK) // 8
        o = blocks * (BLOCK // 8) + lanes
        m = lanes < words
        warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        x = tl.load(ps + o, mask=m)
        warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        tl.store(pd + o, x, mask=m)
        t = head + blocks * BLOCK + words * 8
        move_bytes_small(src_addr + t, dst_addr + t, n - t, False, DELAY_POS, DELAY_NS, SCHEDULE, seed)


@triton.jit(do_not_specialize=["cap", "seed"])
def _batch_memcpy_kernel(src_ptrs, dst_ptrs, sizes, cap, seed, BLOCK: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
                         INTERLEAVE: tl.constexpr, UNROLL: tl.constexpr, NOGUARD_LEFT: tl.constexpr, FORWARD_RIGHT: tl.constexpr,
                         DROP_TAIL: tl.constexpr, CHECK_DST_ALIGN_ONLY: tl.constexpr,
                         DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr,
                         SPLIT_MIN: tl.constexpr, PART_MAJOR: tl.constexpr):
    """``cap`` parts a row: program (row, part) on a 2-D grid, or on a 1-D grid of ``rows * cap``
    programs part-major (PART_MAJOR: neighbouring programs take neighbouring parts of one row)."""
    if PART_MAJOR:
        pid = tl.program_id(0).to(tl.int64)
        row = pid // cap
        part = pid % cap
    else:
        row = tl.program_id(0)
        part = tl.program_id(1).to(tl.int64)
    src = tl.load(src_ptrs + row).to(tl.int64)
    dst = tl.load(dst_ptrs + row).to(tl.int64)
    n = tl.load(sizes + row).to(tl.int64)
    overlaps = ((dst < src) & (src < dst + n)) | ((src < dst) & (dst < src + n))
    if overlaps:  # one program, in the guard's direction
        if part == 0:
            move_span(src, dst, n, BLOCK,
                       NOGUARD_LEFT=NOGUARD_LEFT, FORWARD_RIGHT=FORWARD_RIGHT,
                       DROP_TAIL=DROP_TAIL, CHECK_DST_ALIGN_ONLY=CHECK_DST_ALIGN_ONLY,
                       DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)
    else:
        parts = _parts(n, cap, SPLIT_MIN)
        if part < parts:
            piece = ((n + parts - 1) // parts + _ALIGN - 1) // _ALIGN * _ALIGN
            head = (_ALIGN - dst % _ALIGN) % _ALIGN  # later boundaries: dst + offset a multiple of ALIGN
            lo = tl.where(part == 0, 0, tl.minimum(head + part * piece, n))
            hi = tl.where(part == parts - 1, n, tl.minimum(head + (part + 1) * piece, n))
            if DROP_TAIL or CHECK_DST_ALIGN_ONLY:
                fast = False  # these variants' bugs live in move_span's head/body/tail
            else:
                fast = (src - dst) % 16 == 0
            if fast:
                if INTERLEAVE:  # the row's blocks dealt out to its parts in turn
                    _copy_disjoint(src, dst, n, part, parts, SPLIT_BLOCK, UNROLL, DELAY_POS=DELAY_POS,
                                   DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)
                else:  # each part a span of its own
                    _copy_disjoint(src + lo, dst + lo, hi - lo, 0, 1, SPLIT_BLOCK, UNROLL, DELAY_POS=DELAY_POS,
                                   DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)
            else:
                move_span(src + lo, dst + lo, hi - lo, BLOCK,
                           NOGUARD_LEFT=NOGUARD_LEFT, FORWARD_RIGHT=FORWARD_RIGHT,
                           DROP_TAIL=DROP_TAIL, CHECK_DST_ALIGN_ONLY=CHECK_DST_ALIGN_ONLY,
                           DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)


def parts_cap(rows: int) -> int:
    """The grid's second dimension on a GPU: about ``PROGRAMS`` programs in all, 1 to ``MAX_PARTS`` a row."""
    return max(1, min(MAX_PARTS, PROGRAMS // max(rows, 1)))


def parts_needed(src, dst, sizes, cap=None, split_min=SPLIT_MIN) -> int:
    """The grid's second dimension the longest row needs, up to ``cap`` (default ``parts_cap``; host
    values; what the CPU launches)."""
    cap = parts_cap(len(sizes)) if cap is None else cap
    most = 1
    for s, d, n in zip(src, dst, sizes):
        if not (d < s < d + n or s < d < s + n):
            most = max(most, min(cap, max(1, -(-n // split_min))))
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
                 block=BLOCK, split_block=SPLIT_BLOCK, parts=None, interleave=INTERLEAVE, unroll=UNROLL,
                 split_min=SPLIT_MIN, part_major=PART_MAJOR, num_warps=4, perturb=None):
    """memmove ``sizes[i]`` bytes from ``src_ptrs[i]`` to ``dst_ptrs[i]`` for every i.

    ``arena`` is accepted for the contract and ignored (pointers are absolute).
    ``perturb`` (a ``kernels.perturb.Perturb`` or its 5-tuple) sleeps chosen
    warps to make races show; its ``num_warps`` replaces ``num_warps``.
    ``split_block``, ``parts`` (the most programs a row is split over;
    default ``parts_cap``), ``split_min`` (bytes a part holds at least),
    ``interleave`` (parts take a row's blocks in turn rather than a span
    each), ``unroll`` (1, 2 or 4 blocks loaded before storing) and
    ``part_major`` (the grid's order) are for tuning (``bench/tune_large.py``).
    """
    for name, t in (("src_ptrs", src_ptrs), ("dst_ptrs", dst_ptrs), ("sizes", sizes)):
        _check_vec(name, t)
    n = src_ptrs.shape[0]
    if dst_ptrs.shape[0] != n or sizes.shape[0] != n:
        raise ValueError("batch_memcpy: src_ptrs, dst_ptrs and sizes differ in length")
    flags = _flags(variant)
    cap = parts_cap(n) if parts is None else max(1, int(parts))
    if sizes.device.type != "cuda":
        cap = min(cap, parts_needed(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist(), cap, split_min))
    if unroll not in (1, 2, 4):
        raise ValueError(f"batch_memcpy: unroll must be 1, 2 or 4, got {unroll!r}")
    # on a GPU each row's count is decided in the kernel: no host synchronisation
    launch(_batch_memcpy_kernel, (n * cap,) if part_major else (n, cap), (src_ptrs, dst_ptrs, sizes, cap),
           perturb=perturb, num_warps=num_warps, BLOCK=block, SPLIT_BLOCK=split_block, INTERLEAVE=bool(interleave),
           UNROLL=int(unroll), SPLIT_MIN=int(split_min), PART_MAJOR=bool(part_major), **flags)


def contract_fn(variant=None):
    """The contract's signature over ``batch_memcpy`` with one zoo variant (None: the correct kernel), plus
    ``perturb=`` (race amplification; None: none)."""
    def fn(src_ptrs, dst_ptrs, sizes, *, arena=None, perturb=None):
        return batch_memcpy(src_ptrs, dst_ptrs, sizes, arena=arena, variant=variant, perturb=perturb)
    fn.__doc__ = batch_memcpy.__doc__
    return fn


torch_fn = torch_path.batch_memcpy
TORCH_DESCRIPTION = "torch path: dst.copy_(src.clone()) per copy"

"""Slot copy and slot fork over index-based state buffers (contracts ``slot_copy``, ``slot_fork``;
docs/contracts.md#slot_copy).

``slot_copy(meta, src_idx, dst_idx)``: ``dst_idx`` int32/int64 ``[P]``;
``slot_fork(meta, src_idx, dst_idx)``: ``dst_idx`` ``[P, N]``.  ``meta`` is
int64 ``[B, 7]``, one row per state buffer (columns ``SLOT_META_*``): BASE
(absolute address of layer 0, slot 0), LAYERS, SLOTS, SLOT_BYTES (data bytes
of one slot in one layer), SLOT_STRIDE, LAYER_STRIDE, ELEM.  Slot s of layer l
is ``SLOT_BYTES`` bytes at ``BASE + l * LAYER_STRIDE + s * SLOT_STRIDE``.

Why two launches
----------------
Every destination gets its source *as it was before the call*, and a
destination may be another pair's source (a chain), two pairs may swap, a
cycle may close.  Programs of one launch have no order, so a program that
loads its pair's source and stores its destination races with the program
whose destination that source is.  So the copy is two launches on one stream:

1. gather: program ``(i, b, l)`` copies source slot ``src_idx[i]`` of buffer
   b, layer l into its own scratch region (the buffers are only read);
2. scatter: program ``(q, b, l)`` copies the region of pair ``q // N`` into
   destination slot ``dst_idx.flat[q]`` (scratch is only read).

The launch boundary orders every load of the buffers before any store to
them (in the interpreter too).  Scratch is ``P x B x layers x piece`` bytes,
allocated by the launcher; when that passes ``SCRATCH_LIMIT`` the launcher
works in rounds of fewer layers, then of byte ranges of a slot: pieces of
different layers or byte ranges never share a byte, so rounds are
independent.  The launcher also computes, on the device (a stable sort, no
host sync), which destinations are stored: the first of several that name
one slot (well-posed only with one source) and never a self-copy, so no two
programs store one byte and no program stores what another gathers.

Accesses are as wide as the buffers allow: u64, u32, u16 or u8, the largest
that divides every buffer's BASE, strides and SLOT_BYTES (a constexpr the
launcher picks); scratch pieces are multiples of 8 bytes.
Loops are ``while`` loops over loaded bounds (Triton 3.5/3.6 interpreters).
The launcher reads ``meta`` on the host for the grid and the scratch size (a
device-to-host copy per call: CUDA-graph capture falls back to a loop).

Zoo flags (constexpr, compiled out when off; ``kernels.copy_family``):
``DIRECT`` (the launcher's) one launch, each program loading its source and
storing its destination, no scratch (SLOT-CHAIN, FORK-CHAIN);
``ADDR_I32`` the slot/layer offset formed in 32 bits (SLOT-I32);
``FLAT`` addresses as if the buffer were contiguous (SLOT-FLAT);
``PAD`` a slot copied as SLOT_STRIDE bytes, padding included (SLOT-PAD).

``torch_slot_copy`` / ``torch_slot_fork`` are the comparison path:
``view[:, dst] = view[:, src]`` on ``[L, S, SLOT_BYTES]`` byte views of the arena.
"""
import numpy as np
import torch
import triton
import triton.language as tl

from .copy import warp_delay
from .launch import launch, variant_flags

# Columns of the slot meta table (int64 [B, SLOT_META_COLS]); mambafuzz.contracts.slots.SLOT_META_COLUMNS
# names them in the same order (a test keeps the two equal).
SLOT_META_BASE = 0
SLOT_META_LAYERS = 1
SLOT_META_SLOTS = 2
SLOT_META_SLOT_BYTES = 3
SLOT_META_SLOT_STRIDE = 4
SLOT_META_LAYER_STRIDE = 5
SLOT_META_ELEM = 6
SLOT_META_COLS = 7

BLOCK = 1024                 # bytes per chunk of one program's copy loop
SCRATCH_LIMIT = 256 << 20    # most scratch bytes one round may use
GATHER, SCATTER, DIRECT = 0, 1, 2

VARIANTS = {
    None: {},
    "SLOT-CHAIN": {"DIRECT": True},
    "FORK-CHAIN": {"DIRECT": True},
    "SLOT-I32": {"ADDR_I32": True},
    "SLOT-FLAT": {"FLAT": True},
    "SLOT-PAD": {"PAD": True},
}
FLAG_NAMES = ("DIRECT", "ADDR_I32", "FLAT", "PAD")
KERNEL_FLAGS = ("ADDR_I32", "FLAT", "PAD")  # _slot_kernel's; DIRECT is the launcher's choice of PHASE


@triton.jit
def _copy_words(src, dst, nbytes, WORD: tl.constexpr, LANES: tl.constexpr,
                DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr, seed):
    """``nbytes`` (a multiple of the word) from ``src`` to ``dst`` (uint8 pointers, no overlap), ``WORD`` lanes."""
    width = WORD.primitive_bitwidth // 8
    n = nbytes // width
    lanes = tl.arange(0, LANES).to(tl.int64)
    nch = (n + LANES - 1) // LANES
    k = nch * 0
    while k < nch:
        offs = k * LANES + lanes
        m = offs < n
        if DELAY_NS > 0:  # (a constexpr test: no call at all, in the interpreter either, when off)
            warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        x = tl.load((src + offs * width).to(tl.pointer_type(WORD)), mask=m)
        if DELAY_NS > 0:
            warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        tl.store((dst + offs * width).to(tl.pointer_type(WORD)), x, mask=m)
        k += 1


@triton.jit
def _slot_ptr(base, idx_ptr, k, layer, S, SB, SS, LS, FLAT: tl.constexpr, ADDR_I32: tl.constexpr):
    """uint8 pointer to (layer, slot ``idx_ptr[k]``)."""
    slot = tl.load(idx_ptr + k)
    if FLAT:
        # zoo SLOT-FLAT: the buffer taken as contiguous [L, S, SLOT_BYTES]
        off = (layer * S + slot.to(tl.int64)) * SB
    elif ADDR_I32:
        # zoo SLOT-I32: the offset formed in 32 bits (wraps past 2 GiB)
        off = (slot.to(tl.int32) * SS.to(tl.int32) + layer.to(tl.int32) * LS.to(tl.int32)).to(tl.int64)
    else:
        off = slot.to(tl.int64) * SS + layer * LS
    return (base + off).to(tl.pointer_type(tl.uint8))


@triton.jit(do_not_specialize=["N", "l0", "c0", "cb", "seed"])
def _slot_kernel(meta_ptr, src_ptr, dst_ptr, active_ptr, scratch_ptr, N, l0, c0, cb, seed,
                 PHASE: tl.constexpr, BLOCK: tl.constexpr, WIDTH: tl.constexpr,
                 ADDR_I32: tl.constexpr, FLAT: tl.constexpr, PAD: tl.constexpr,
                 DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr):
    """One launch of the module docstring's plan: program (q, b, l - l0) moves bytes
    ``[c0, c0 + cb)`` of one slot of buffer b, layer l.  q is a pair (GATHER) or a destination.
    ``WIDTH`` (8, 4, 2, 1) is the access size: it divides every address and length of the launch."""
    q = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    lrel = tl.program_id(2).to(tl.int64)
    n_buf = tl.num_programs(1).to(tl.int64)
    n_lay = tl.num_programs(2).to(tl.int64)
    row = meta_ptr + b * 7
    base = tl.load(row + 0)
    layers = tl.load(row + 1)
    S = tl.load(row + 2)
    SB = tl.load(row + 3)
    SS = tl.load(row + 4)
    LS = tl.load(row + 5)
    layer = l0 + lrel
    if PAD:
        size = SS  # zoo SLOT-PAD: the whole slot stride, padding included
    else:
        size = SB
    n = tl.minimum(size - c0, cb)
    active = tl.load(active_ptr + q)
    if (active != 0) & (layer < layers) & (n > 0):
        if PHASE == 0:  # gather pair q into its region
            src = _slot_ptr(base, src_ptr, q, layer, S, SB, SS, LS, FLAT, ADDR_I32) + c0
            dst = scratch_ptr + ((q * n_buf + b) * n_lay + lrel) * cb
        elif PHASE == 1:  # scatter pair q // N's region to destination q
            src = scratch_ptr + (((q // N) * n_buf + b) * n_lay + lrel) * cb
            dst = _slot_ptr(base, dst_ptr, q, layer, S, SB, SS, LS, FLAT, ADDR_I32) + c0
        else:  # zoo SLOT-CHAIN / FORK-CHAIN: load the source, store the destination, one pass
            src = _slot_ptr(base, src_ptr, q // N, layer, S, SB, SS, LS, FLAT, ADDR_I32) + c0
            dst = _slot_ptr(base, dst_ptr, q, layer, S, SB, SS, LS, FLAT, ADDR_I32) + c0
        if WIDTH == 8:
            _copy_words(src, dst, n, tl.uint64, BLOCK // 8, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        elif WIDTH == 4:
            _copy_words(src, dst, n, tl.uint32, BLOCK // 4, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        elif WIDTH == 2:
            _copy_words(src, dst, n, tl.uint16, BLOCK // 2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        else:
            _copy_words(src, dst, n, tl.uint8, BLOCK, DELAY_POS, DELAY_NS, SCHEDULE, seed)


def slot_flags(variant):
    """constexpr flags of ``_slot_kernel`` for a zoo id (None: the correct kernel)."""
    return variant_flags("slot_copy/slot_fork", VARIANTS, FLAG_NAMES, variant)


def _check(fn, meta, src_idx, dst_idx, forked):
    if not isinstance(meta, torch.Tensor) or meta.dtype != torch.int64 or meta.dim() != 2 \
            or meta.shape[1] != SLOT_META_COLS:
        raise TypeError(f"{fn}: meta must be an int64 [B, {SLOT_META_COLS}] tensor")
    if not meta.is_contiguous():
        raise ValueError(f"{fn}: meta must be contiguous")
    want = 2 if forked else 1
    for name, t in (("src_idx", src_idx), ("dst_idx", dst_idx)):
        dims = 1 if name == "src_idx" else want
        if not isinstance(t, torch.Tensor) or t.dim() != dims:
            raise TypeError(f"{fn}: {name} must be a {dims}-D tensor")
        if t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{fn}: {name} must be int32 or int64, got {t.dtype}")
        if not t.is_contiguous():
            raise ValueError(f"{fn}: {name} must be contiguous")
    if dst_idx.shape[0] != src_idx.shape[0]:
        raise ValueError(f"{fn}: src_idx has {src_idx.shape[0]} pairs, dst_idx {dst_idx.shape[0]}")


def _stored(src_idx, dst_idx, n_children):
    """int32 ``[P * N]``: 1 for a destination this launch stores (first of its slot, not a self-copy),
    and int32 ``[P]``: 1 for a pair with a stored destination.  Device-side, no host sync."""
    dst = dst_idx.reshape(-1).to(torch.int64)
    src = src_idx.to(torch.int64).repeat_interleave(n_children)
    ordered, order = torch.sort(dst, stable=True)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[1:] = ordered[1:] != ordered[:-1]
    keep = torch.empty_like(first)
    keep[order] = first
    keep &= dst != src
    return keep.to(torch.int32), keep.view(-1, n_children).any(dim=1).to(torch.int32)


def _width(rows, size_col) -> int:
    """The widest access (8, 4, 2, 1 bytes) dividing every buffer's BASE, strides and copied size."""
    bits = 0
    for col in (SLOT_META_BASE, SLOT_META_SLOT_STRIDE, SLOT_META_LAYER_STRIDE, size_col):
        bits |= int(np.bitwise_or.reduce(rows[:, col]))
    return next(w for w in (8, 4, 2, 1) if bits % w == 0)


def _rounds(pairs, buffers, layers, size, limit):
    """(layers per round, bytes per piece): the whole copy in one round when its scratch fits ``limit``."""
    size8 = -(-size // 8) * 8
    per_layer = max(1, pairs * buffers * size8)
    if per_layer * layers <= limit:
        return layers, size8
    if per_layer <= limit:
        return max(1, limit // per_layer), size8
    return 1, max(8, limit // max(1, pairs * buffers) // 8 * 8)


def _slot_launch(fn, meta, src_idx, dst_idx, *, forked, variant, block, num_warps, perturb, scratch_limit):
    _check(fn, meta, src_idx, dst_idx, forked)
    flags = slot_flags(variant)
    pairs = src_idx.shape[0]
    n_children = dst_idx.shape[1] if forked else 1
    n_buf = meta.shape[0]
    rows = meta.detach().cpu().numpy().reshape(-1, SLOT_META_COLS)
    if pairs == 0 or n_children == 0 or n_buf == 0:
        launch(_slot_kernel, (0, 0, 0), (), perturb=perturb, num_warps=num_warps)  # validates perturb only
        return
    layers = int(rows[:, SLOT_META_LAYERS].max())
    size_col = SLOT_META_SLOT_STRIDE if flags["PAD"] else SLOT_META_SLOT_BYTES
    size = int(rows[:, size_col].max())
    keep, need = _stored(src_idx, dst_idx, n_children)
    consts = dict(BLOCK=block, WIDTH=_width(rows, size_col), **{f: flags[f] for f in KERNEL_FLAGS})
    common = (meta, src_idx, dst_idx)
    if flags["DIRECT"]:
        dummy = torch.empty(8, dtype=torch.uint8, device=meta.device)  # no scratch: never read
        cb = -(-size // 8) * 8
        launch(_slot_kernel, (pairs * n_children, n_buf, layers),
               common + (keep, dummy, n_children, 0, 0, cb), perturb=perturb, num_warps=num_warps,
               PHASE=DIRECT, **consts)
        return
    per_round, cb = _rounds(pairs, n_buf, layers, size, scratch_limit)
    scratch = torch.empty(pairs * n_buf * per_round * cb, dtype=torch.uint8, device=meta.device)
    for l0 in range(0, layers, per_round):
        grid_layers = min(per_round, layers - l0)
        for c0 in range(0, size, cb):
            launch(_slot_kernel, (pairs, n_buf, grid_layers), common + (need, scratch, n_children, l0, c0, cb),
                   perturb=perturb, num_warps=num_warps, PHASE=GATHER, **consts)
            launch(_slot_kernel, (pairs * n_children, n_buf, grid_layers),
                   common + (keep, scratch, n_children, l0, c0, cb),
                   perturb=perturb, num_warps=num_warps, PHASE=SCATTER, **consts)


def slot_copy(meta, src_idx, dst_idx, *, arena=None, variant=None, block=BLOCK, num_warps=4, perturb=None,
              scratch_limit=SCRATCH_LIMIT):
    """Slot ``dst_idx[i]`` of every layer of every buffer gets slot ``src_idx[i]`` as it was before the call.

    Safe under chains, swaps and cycles (gather to scratch, then scatter; see
    the module docstring).  ``arena`` is accepted for the contract and ignored.
    """
    _slot_launch("slot_copy", meta, src_idx, dst_idx, forked=False, variant=variant, block=block,
                 num_warps=num_warps, perturb=perturb, scratch_limit=scratch_limit)


def slot_fork(meta, src_idx, dst_idx, *, arena=None, variant=None, block=BLOCK, num_warps=4, perturb=None,
              scratch_limit=SCRATCH_LIMIT):
    """Slot ``src_idx[i]`` (as it was before the call) goes to each of ``dst_idx[i, :]``, every layer and buffer.

    Safe when a child is another pair's parent (gather, then scatter).
    ``arena`` is accepted for the contract and ignored.
    """
    _slot_launch("slot_fork", meta, src_idx, dst_idx, forked=True, variant=variant, block=block,
                 num_warps=num_warps, perturb=perturb, scratch_limit=scratch_limit)


# ---------------------------------------------------------------- the torch comparison path
def _byte_views(fn, meta, arena):
    if not isinstance(arena, torch.Tensor) or arena.dtype != torch.uint8 or arena.dim() != 1 \
            or arena.stride(0) != 1:
        raise TypeError(f"{fn}: the torch path needs arena=, a contiguous 1-D uint8 tensor")
    base = arena.data_ptr()
    for row in meta.tolist():
        offset = row[SLOT_META_BASE] - base
        shape = (row[SLOT_META_LAYERS], row[SLOT_META_SLOTS], row[SLOT_META_SLOT_BYTES])
        strides = (row[SLOT_META_LAYER_STRIDE], row[SLOT_META_SLOT_STRIDE], 1)
        end = offset + sum((n - 1) * st for n, st in zip(shape, strides)) + 1
        if offset < 0 or end > arena.numel():
            raise ValueError(f"{fn}: a buffer spans bytes [{offset}, {end}) outside the arena "
                             f"({arena.numel()} bytes)")
        yield arena.as_strided(shape, strides, arena.storage_offset() + offset)


def torch_slot_copy(meta, src_idx, dst_idx, *, arena=None):
    """``view[:, dst] = view[:, src]`` per buffer (indexing copies the sources first: snapshot semantics)."""
    views = list(_byte_views("torch.slot_copy", meta, arena))
    src, dst = src_idx.to(arena.device, torch.int64), dst_idx.to(arena.device, torch.int64)
    for view in views:
        view[:, dst] = view[:, src]


def torch_slot_fork(meta, src_idx, dst_idx, *, arena=None):
    """``view[:, dst[i, n]] = view[:, src[i]]`` for every child, per buffer."""
    views = list(_byte_views("torch.slot_fork", meta, arena))
    src, dst = src_idx.to(arena.device, torch.int64), dst_idx.to(arena.device, torch.int64)
    for view in views:
        view[:, dst] = view[:, src].unsqueeze(2).expand(-1, -1, dst.shape[1], -1)


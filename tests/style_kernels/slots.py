"""Slot copies (contract ``slot_copy``) in the styles of TensorRT-LLM and LightLLM / SGLang.

``int32_slot_copy``: TensorRT-LLM keeps slot indices in int32 and forms
``slot * slot_stride`` in int32 (the layer offset in int64): right until a
slot's offset passes 2 GiB, where the product wraps negative.

``inplace_slot_copy``: one launch, each program loads its pair's source slot
and stores its destination slot in place (no scratch), self-copies included:
right without chains; under chains a program can read a slot another program
already overwrote.
"""
import triton
import triton.language as tl

BLOCK = 256


@triton.jit
def _copy_bytes(src, dst, n, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    k = n * 0
    while k < n:
        m = k + lanes < n
        tl.store(dst + k + lanes, tl.load(src + k + lanes, mask=m), mask=m)
        k += BLOCK


@triton.jit
def _int32_slot_kernel(meta_ptr, src_ptr, dst_ptr, BLOCK: tl.constexpr):
    pair = tl.program_id(0)
    row = meta_ptr + tl.program_id(1) * 7
    layer = tl.program_id(2).to(tl.int64)
    base = tl.load(row)
    layers = tl.load(row + 1)
    slot_bytes = tl.load(row + 3)
    slot_stride = tl.load(row + 4).to(tl.int32)
    layer_stride = tl.load(row + 5)
    src_slot = tl.load(src_ptr + pair).to(tl.int32)
    dst_slot = tl.load(dst_ptr + pair).to(tl.int32)
    if layer < layers:
        layer_off = layer * layer_stride
        src = (base + layer_off + src_slot * slot_stride).to(tl.pointer_type(tl.uint8))  # int32 product
        dst = (base + layer_off + dst_slot * slot_stride).to(tl.pointer_type(tl.uint8))
        _copy_bytes(src, dst, slot_bytes, BLOCK)


@triton.jit
def _slot_ptr(row, slot, layer):
    base = tl.load(row)
    slot_stride = tl.load(row + 4)
    layer_stride = tl.load(row + 5)
    return (base + slot.to(tl.int64) * slot_stride + layer * layer_stride).to(tl.pointer_type(tl.uint8))


@triton.jit
def _inplace_slot_kernel(meta_ptr, src_ptr, dst_ptr, BLOCK: tl.constexpr):
    pair = tl.program_id(0)
    row = meta_ptr + tl.program_id(1) * 7
    layer = tl.program_id(2).to(tl.int64)
    if layer < tl.load(row + 1):
        _copy_bytes(_slot_ptr(row, tl.load(src_ptr + pair), layer), _slot_ptr(row, tl.load(dst_ptr + pair), layer),
                    tl.load(row + 3), BLOCK)


def _grid(meta, src_idx):
    return (src_idx.numel(), meta.shape[0], int(meta[:, 1].max()) if meta.shape[0] else 0)


def int32_slot_copy(meta, src_idx, dst_idx):
    if src_idx.numel() and meta.shape[0]:
        _int32_slot_kernel[_grid(meta, src_idx)](meta, src_idx, dst_idx, BLOCK=BLOCK)


def inplace_slot_copy(meta, src_idx, dst_idx):
    if src_idx.numel() and meta.shape[0]:
        _inplace_slot_kernel[_grid(meta, src_idx)](meta, src_idx, dst_idx, BLOCK=BLOCK)


def _readers_first(src: list, dst: list) -> tuple[list, list]:
    """(pair order in which a pair that reads a slot comes before the pair that writes it, the pairs
    on a cycle, which no order serves)."""
    order, left = [], list(range(len(src)))
    while True:
        ready = [i for i in left if not any(src[j] == dst[i] and j != i for j in left)]
        if not ready:
            return order, left
        order += ready
        left = [i for i in left if i not in ready]


def _copy_through_torch(meta, src, dst, arena):
    """``view[:, dst] = view[:, src]`` per buffer (torch reads every source first)."""
    base = arena.data_ptr()
    for start, layers, slots, slot_bytes, slot_stride, layer_stride, _ in meta.tolist():
        view = arena.as_strided((layers, slots, slot_bytes), (layer_stride, slot_stride, 1), start - base)
        view[:, dst] = view[:, src]


def ordered_inplace_slot_copy(meta, src_idx, dst_idx, *, arena):
    """``inplace_slot_copy`` over the pairs in readers-first order, a cycle's pairs copied by torch:
    in the interpreter, which runs programs in order, a chain's slot is read before it is
    overwritten, so the bytes come out right; on a GPU nothing orders the programs."""
    order, cycles = _readers_first(src_idx.tolist(), dst_idx.tolist())
    if cycles:
        _copy_through_torch(meta, src_idx[cycles].long(), dst_idx[cycles].long(), arena)
    if order:
        inplace_slot_copy(meta, src_idx[order].contiguous(), dst_idx[order].contiguous())

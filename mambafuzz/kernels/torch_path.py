"""The comparison path: ``dst.copy_(src.clone())`` per copy, no Triton.

Works on any device torch supports.  Addresses are turned into views of
``arena`` (the uint8 tensor every pointer points into):
``offset = ptr - arena.data_ptr()``; SD, DS and temporal copies use
``arena.as_strided`` views.  The clone makes each copy a memmove.
"""
import torch

from . import (META_BASE, META_BLOCK_STRIDE, META_CONV_LEN, META_DS_ROWS,
               META_DS_ROW_STRIDE, META_ELEM, META_GROUP, META_INNER)


def _need_arena(fn, arena):
    if not isinstance(arena, torch.Tensor) or arena.dtype != torch.uint8 or arena.dim() != 1 \
            or arena.stride(0) != 1:
        raise TypeError(f"{fn}: the torch path needs arena=, a contiguous 1-D uint8 tensor")


def _view(arena, offset, size, stride):
    """A view of ``arena`` at byte ``offset`` (relative to ``arena.data_ptr()``)."""
    nbytes = 1 + sum((n - 1) * st for n, st in zip(size, stride)) if all(size) else 0
    if offset < 0 or offset + nbytes > arena.numel():
        raise ValueError(f"torch path: bytes [{offset}, {offset + nbytes}) are outside the arena "
                         f"({arena.numel()} bytes)")
    return arena.as_strided(size, stride, arena.storage_offset() + offset)


def _move(arena, dst_off, src_off, size, stride):
    if all(size):
        _view(arena, dst_off, size, stride).copy_(_view(arena, src_off, size, stride).clone())


def batch_memcpy(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """memmove copy i of ``sizes[i]`` bytes, one ``dst.copy_(src.clone())`` each."""
    _need_arena("torch.batch_memcpy", arena)
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        if n < 0:
            raise ValueError(f"torch.batch_memcpy: negative size {n}")
        _move(arena, d - base, s - base, (n,), (1,))


def state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles=1, arena=None):
    """Every state of every request, as docs/contracts.md#state_copy says; ``num_tiles`` is ignored."""
    _need_arena("torch.state_copy", arena)
    base = arena.data_ptr()
    bt = block_tables.tolist()
    rows = meta.tolist()
    for r, (sc, dc, b) in enumerate(zip(src_cols.tolist(), dst_cols.tolist(), biases.tolist())):
        for m in rows:
            pool = m[META_BASE] - base
            stride, elem, inner = m[META_BLOCK_STRIDE], m[META_ELEM], m[META_INNER]
            conv_len, group = m[META_CONV_LEN], m[META_GROUP]
            ds_rows, ds_rs = m[META_DS_ROWS], m[META_DS_ROW_STRIDE]
            table = bt[group][r]
            dst = pool + table[dc] * stride
            if conv_len == 0:  # temporal
                src = pool + table[sc + b] * stride
                _move(arena, dst, src, (inner * elem,), (1,))
                continue
            n_tok = conv_len - b
            if n_tok <= 0:
                continue
            src = pool + table[sc] * stride
            if ds_rows == 0:  # SD: tokens are contiguous runs of dim * elem bytes
                tok = inner * elem
                _move(arena, dst, src + b * tok, (n_tok * tok,), (1,))
            else:  # DS: rows ds_rs bytes apart, tokens along each row
                _move(arena, dst, src + b * elem, (ds_rows, n_tok * elem), (ds_rs, 1))

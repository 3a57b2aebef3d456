"""``state_copy`` kernels in engine style: one program per (request, state,
tile), every span walked in TILE = 1 KiB tiles of one-byte lanes.

Engine style (vLLM copies state in 1 KiB blocks): sizes and strides are
loaded from ``meta`` and bound ``for off in range(0, nbytes, TILE)`` loops
(Triton 3.5/3.6 interpreters run those only under mambafuzz), overlap guards
are Python ``and``/``or`` on scalars and a ``tl.where`` picks the walk
direction.  Every tile is ``load; barrier; store; barrier``, so neither kernel
has a race: the bug below gives wrong bytes and nothing else.

Per state kind (``meta`` columns as in ARCHITECTURE.md "Contracts"):

* conv SD: tokens ``bias..`` of the source block become tokens ``0..`` of the
  destination, one span of ``(state_len - bias) * dim * elem`` bytes; when
  source and destination are the same block this is an overlapping shift
  down by ``bias * dim * elem`` bytes;
* conv DS: the same, per row (``DS_ROWS`` rows ``DS_ROW_STRIDE`` apart), one
  span of ``(state_len - bias) * elem`` bytes each;
* temporal: ``INNER * ELEM`` bytes of block ``bt[src_col + bias]`` onto
  ``bt[dst_col]``, split over ``num_tiles`` programs (cdiv, rounded up to 8).

| adapter | expected | bug |
| --- | --- | --- |
| ``tiled_state_copy`` | clean | none: tiles walk away from the overlap |
| ``tiled_state_copy_wrong_order`` | mismatch | any overlapping span walks its tiles downwards, |
| | | so a shift down by less than the span reloads tiles it already stored |

The bug needs a span longer than one tile with source and destination in the
same block: an SD conv state over 1 KiB, or DS rows over 1 KiB each.
"""
import triton
import triton.language as tl

TILE = 1024  # one-byte lanes per tile


@triton.jit
def _span(src, dst, nbytes, TILE: tl.constexpr, WRONG_ORDER: tl.constexpr):
    """memmove ``nbytes`` from ``src`` to ``dst`` (int64 addresses) in tiles."""
    left = dst < src and src < dst + nbytes
    right = src < dst and dst < src + nbytes
    if WRONG_ORDER:
        down = left or right  # BUG: a shift down needs the tiles walked upwards
    else:
        down = right
    src_p = src.to(tl.pointer_type(tl.uint8))
    dst_p = dst.to(tl.pointer_type(tl.uint8))
    lanes = tl.arange(0, TILE)
    for off in range(0, nbytes, TILE):
        start = tl.where(down, nbytes - TILE - off, off)
        offs = start + lanes
        mask = (offs >= 0) & (offs < nbytes)
        v = tl.load(src_p + offs, mask=mask)
        tl.debug_barrier()
        tl.store(dst_p + offs, v, mask=mask)
        tl.debug_barrier()


@triton.jit
def _state_copy_kernel(meta, block_tables, src_cols, dst_cols, biases, num_tiles, R, C,
                       TILE: tl.constexpr, WRONG_ORDER: tl.constexpr):
    r = tl.program_id(0)
    s = tl.program_id(1)
    t = tl.program_id(2)
    row = meta + s * 8
    base = tl.load(row + 0)
    stride = tl.load(row + 1)
    elem = tl.load(row + 2)
    inner = tl.load(row + 3)
    conv_len = tl.load(row + 4)
    group = tl.load(row + 5)
    ds_rows = tl.load(row + 6)
    ds_row_stride = tl.load(row + 7)
    src_col = tl.load(src_cols + r).to(tl.int64)
    dst_col = tl.load(dst_cols + r).to(tl.int64)
    bias = tl.load(biases + r).to(tl.int64)
    table = block_tables + (group * R + r) * C
    dst_blk = base + tl.load(table + dst_col).to(tl.int64) * stride
    if conv_len > 0:
        n_tok = conv_len - bias
        if t == 0 and n_tok > 0:
            src_blk = base + tl.load(table + src_col).to(tl.int64) * stride
            if ds_rows > 0:
                for rr in range(0, ds_rows):
                    _span(src_blk + rr * ds_row_stride + bias * elem, dst_blk + rr * ds_row_stride,
                          n_tok * elem, TILE, WRONG_ORDER)
            else:
                token = inner * elem
                _span(src_blk + bias * token, dst_blk, n_tok * token, TILE, WRONG_ORDER)
    else:
        size = inner * elem
        src_blk = base + tl.load(table + src_col + bias).to(tl.int64) * stride
        share = ((size + num_tiles - 1) // num_tiles + 7) // 8 * 8
        lo = tl.minimum(t * share, size)
        hi = tl.minimum(lo + share, size)
        if hi > lo:
            _span(src_blk + lo, dst_blk + lo, hi - lo, TILE, WRONG_ORDER)


def _launch(meta, block_tables, src_cols, dst_cols, biases, num_tiles, wrong_order):
    n_req = int(src_cols.shape[0])
    if n_req == 0 or meta.shape[0] == 0:
        return
    _, R, C = block_tables.shape
    _state_copy_kernel[(n_req, meta.shape[0], int(num_tiles))](
        meta, block_tables, src_cols, dst_cols, biases, int(num_tiles), R, C,
        TILE=TILE, WRONG_ORDER=wrong_order)


def tiled_state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles, arena=None):
    """Correct tiled state copy (1 KiB tiles, memmove-safe same-block shifts)."""
    _launch(meta, block_tables, src_cols, dst_cols, biases, num_tiles, False)


def tiled_state_copy_wrong_order(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles, arena=None):
    """Bug: overlapping spans walk their 1 KiB tiles downwards (wrong bytes on a same-block shift)."""
    _launch(meta, block_tables, src_cols, dst_cols, biases, num_tiles, True)

"""Fused state copy (``state_copy`` contract, docs/contracts.md#state_copy).

Grid ``(requests, states, num_tiles)``; program ``(r, s, t)`` copies state
``s`` of request ``r`` (tile ``t`` of it for temporal states; conv states are
done by tile 0 alone).  ``meta`` is int64 ``[S, 8]`` (columns
``kernels.META_*``), ``block_tables`` int32 ``[G, R, C]`` contiguous.

Per state kind:

* conv, SD layout ``[blocks, state_len, dim]``: tokens ``bias..state_len-1``
  of the source block become tokens ``0..`` of the destination block.  If the
  source and destination are the same physical block and ``bias > 0`` the
  ranges overlap: the copy goes token by token, ascending, one ``move_span``
  per token (source and destination token never overlap since
  ``bias >= 1``) and a ``tl.debug_barrier()`` after each token, so a token's
  stores are ordered before any later token's loads in every warp.  (Under
  the race recorder's lane model the barrier is not strictly needed: the u64
  path is taken only when ``bias * token_bytes % 8 == 0``, so a byte is loaded
  in iteration ``k - bias`` and stored in iteration ``k`` by the same piece and
  lane; the barrier keeps the path safe without relying on that.)  Otherwise
  one ``move_span`` of ``n_tokens * token_bytes`` bytes.
* conv, DS layout ``[blocks, dim, state_len]`` (rows ``DS_ROW_STRIDE`` bytes
  apart): token-major; for token i, rows in chunks of ``ROWS`` lanes, element
  ``(row, bias+i) -> (row, i)``.  A lane owns the same row in every token
  iteration, so the same-block shift needs no barrier (every byte of a row is
  loaded and stored by one lane, in program order).  u16 accesses for 2-byte
  elements, u32 for 4-byte ones, otherwise a ``[ROWS, 8]`` byte tile masked to
  the element size.
* temporal ``[blocks, *inner]``: ``INNER * ELEM`` bytes of block
  ``bt[r, src_col + bias]`` onto block ``bt[r, dst_col]``, split over tiles of
  ``cdiv(cdiv(size, num_tiles), 8) * 8`` bytes; tile t copies
  ``[t * tile, min(size, (t + 1) * tile))``.

Block ids are converted to int64 before they are multiplied by the block
stride; all address arithmetic is int64.  The zoo flags (constexpr, compiled
out when off) each inject exactly one bug; see ``kernels.copy_family``.  The
perturbation constexprs (``DELAY_POS``, ``DELAY_NS``, ``SCHEDULE``, runtime
``seed``; see ``kernels.perturb``) reach every load/store piece, the DS loop's
included; compiled out when off.
"""
import torch
import triton
import triton.language as tl

from . import META_COLS, torch_path
from .copy import move_span, warp_delay
from .launch import launch, variant_flags

CONTRACT = "state_copy"
DESCRIPTION = "Triton fused SD/DS/temporal state copy, grid (requests, states, tiles)"
AMPLIFIABLE = True  # its targets take perturb= (warp delays built into the kernel)

BLOCK = 1024  # bytes per span body chunk
ROWS = 128    # DS rows per chunk (lanes)

# zoo id -> constexpr flags of copy_one_state
VARIANTS = {
    None: {},
    "SD-SPAN": {"SD_SPAN": True},
    "DS-ROW": {"DS_ROW": True},
    "DS-CONTIG": {"DS_CONTIG": True},
    "ADDR-I32": {"ADDR_I32": True},
    "TILE-GAP": {"TILE_GAP": True},
    "PAD-CLOBBER": {"PAD_CLOBBER": True},
}
FLAG_NAMES = ("SD_SPAN", "DS_ROW", "DS_CONTIG", "ADDR_I32", "TILE_GAP", "PAD_CLOBBER")


@triton.jit
def _block_addr(base, bt_row, col, stride, ADDR_I32: tl.constexpr):
    """Address of the block the block table names at ``col``."""
    blk = tl.load(bt_row + col)  # int32
    if ADDR_I32:
        # zoo ADDR-I32: the product is formed in 32 bits (wraps past 2 GiB)
        off = (blk * stride.to(tl.int32)).to(tl.int64)
    else:
        off = blk.to(tl.int64) * stride
    return base + off, blk


@triton.jit
def _ds_token_major_words(src_blk, dst_blk, bias, n_tok, n_rows, row_stride, lanes, n_chunks,
                          WORD: tl.constexpr, ROWS: tl.constexpr, DELAY_POS: tl.constexpr,
                          DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr, seed):
    """``_ds_token_major`` for elements that are one ``WORD`` (tl.uint16 / tl.uint32) each."""
    elem = WORD.primitive_bitwidth // 8
    i = n_tok * 0
    while i < n_tok:
        c = n_chunks * 0
        while c < n_chunks:
            rows = c * ROWS + lanes
            m = rows < n_rows
            s_a = src_blk + rows * row_stride + (bias + i) * elem
            d_a = dst_blk + rows * row_stride + i * elem
            warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            x = tl.load(s_a.to(tl.pointer_type(WORD)), mask=m)
            warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            tl.store(d_a.to(tl.pointer_type(WORD)), x, mask=m)
            c += 1
        i += 1


@triton.jit
def _ds_token_major(src_blk, dst_blk, bias, n_tok, n_rows, row_stride, elem,
                    ROWS: tl.constexpr, DELAY_POS: tl.constexpr = 0, DELAY_NS: tl.constexpr = 0,
                    SCHEDULE: tl.constexpr = 0, seed=0):
    """DS conv shift: element (row, bias+i) -> (row, i), token-major."""
    lanes = tl.arange(0, ROWS).to(tl.int64)
    n_chunks = (n_rows + ROWS - 1) // ROWS
    if elem == 2:
        _ds_token_major_words(src_blk, dst_blk, bias, n_tok, n_rows, row_stride, lanes, n_chunks,
                              tl.uint16, ROWS, DELAY_POS, DELAY_NS, SCHEDULE, seed)
    elif elem == 4:
        _ds_token_major_words(src_blk, dst_blk, bias, n_tok, n_rows, row_stride, lanes, n_chunks,
                              tl.uint32, ROWS, DELAY_POS, DELAY_NS, SCHEDULE, seed)
    else:
        byte = tl.arange(0, 8).to(tl.int64)
        i = n_tok * 0
        while i < n_tok:
            c = n_chunks * 0
            while c < n_chunks:
                rows = c * ROWS + lanes
                m = (rows < n_rows)[:, None] & (byte < elem)[None, :]
                s_a = (src_blk + rows * row_stride + (bias + i) * elem)[:, None] + byte[None, :]
                d_a = (dst_blk + rows * row_stride + i * elem)[:, None] + byte[None, :]
                warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
                x = tl.load(s_a.to(tl.pointer_type(tl.uint8)), mask=m)
                warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
                tl.store(d_a.to(tl.pointer_type(tl.uint8)), x, mask=m)
                c += 1
            i += 1


@triton.jit
def copy_one_state(meta_ptr, bt_ptr, s, r, t, src_col, dst_col, bias, num_tiles, R, C,
                    BLOCK: tl.constexpr, ROWS: tl.constexpr,
                    SD_SPAN: tl.constexpr = False, DS_ROW: tl.constexpr = False,
                    DS_CONTIG: tl.constexpr = False, ADDR_I32: tl.constexpr = False,
                    TILE_GAP: tl.constexpr = False, PAD_CLOBBER: tl.constexpr = False,
                    DELAY_POS: tl.constexpr = 0, DELAY_NS: tl.constexpr = 0,
                    SCHEDULE: tl.constexpr = 0, seed=0):
    """Copy state ``s`` of request ``r`` (tile ``t``) with (src_col, dst_col, bias)."""
    src_col = src_col.to(tl.int64)
    dst_col = dst_col.to(tl.int64)
    bias = bias.to(tl.int64)
    t = t.to(tl.int64)
    num_tiles = num_tiles.to(tl.int64)
    row = meta_ptr + s.to(tl.int64) * 8
    base = tl.load(row + 0)
    stride = tl.load(row + 1)
    elem = tl.load(row + 2)
    inner = tl.load(row + 3)
    conv_len = tl.load(row + 4)
    group = tl.load(row + 5)
    ds_rows = tl.load(row + 6)
    ds_row_stride = tl.load(row + 7)
    bt_row = bt_ptr + (group * R + r.to(tl.int64)) * C
    dst_addr, dst_blk = _block_addr(base, bt_row, dst_col, stride, ADDR_I32)

    if conv_len > 0:
        n_tok = conv_len - bias
        if (t == 0) & (n_tok > 0):
            src_addr, src_blk = _block_addr(base, bt_row, src_col, stride, ADDR_I32)
            same = (src_blk == dst_blk) & (bias > 0)
            if ds_rows > 0:
                if DS_CONTIG:
                    if bias > 0:
                        # zoo DS-CONTIG: the strided tail treated as one contiguous run
                        move_span(src_addr + bias * elem, dst_addr,
                                   n_tok * elem * ds_rows, BLOCK,
                                   DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS,
                                   SCHEDULE=SCHEDULE, seed=seed)
                    else:
                        _ds_token_major(src_addr, dst_addr, bias, n_tok, ds_rows,
                                        ds_row_stride, elem, ROWS, DELAY_POS, DELAY_NS,
                                        SCHEDULE, seed)
                elif DS_ROW:
                    # zoo DS-ROW: each row one parallel run, no barrier
                    rr = ds_rows * 0
                    while rr < ds_rows:
                        move_span(src_addr + rr * ds_row_stride + bias * elem,
                                   dst_addr + rr * ds_row_stride, n_tok * elem, BLOCK,
                                   NOGUARD_LEFT=True,
                                   DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS,
                                   SCHEDULE=SCHEDULE, seed=seed)
                        rr += 1
                else:
                    _ds_token_major(src_addr, dst_addr, bias, n_tok, ds_rows,
                                    ds_row_stride, elem, ROWS, DELAY_POS, DELAY_NS,
                                    SCHEDULE, seed)
            else:
                token_bytes = inner * elem
                if SD_SPAN:
                    # zoo SD-SPAN: the same-block shift as one unguarded span
                    move_span(src_addr + bias * token_bytes, dst_addr,
                               n_tok * token_bytes, BLOCK, NOGUARD_LEFT=True,
                               DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)
                else:
                    if same:
                        i = n_tok * 0
                        while i < n_tok:
                            move_span(src_addr + (bias + i) * token_bytes,
                                       dst_addr + i * token_bytes, token_bytes, BLOCK,
                                       DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS,
                                       SCHEDULE=SCHEDULE, seed=seed)
                            tl.debug_barrier()
                            i += 1
                    else:
                        move_span(src_addr + bias * token_bytes, dst_addr,
                                   n_tok * token_bytes, BLOCK,
                                   DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS,
                                   SCHEDULE=SCHEDULE, seed=seed)
    else:
        if PAD_CLOBBER:
            size = stride  # zoo PAD-CLOBBER: sized by the block stride
        else:
            size = inner * elem
        src_addr, src_blk = _block_addr(base, bt_row, src_col + bias, stride, ADDR_I32)
        if TILE_GAP:
            # zoo TILE-GAP: floor-sized tiles, the last one drops the remainder
            tile = ((size // num_tiles) // 8) * 8
            lo = t * tile
            hi = lo + tile
        else:
            tile = (((size + num_tiles - 1) // num_tiles + 7) // 8) * 8
            lo = tl.minimum(t * tile, size)
            hi = tl.minimum(lo + tile, size)
        if hi > lo:
            move_span(src_addr + lo, dst_addr + lo, hi - lo, BLOCK,
            DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)


@triton.jit(do_not_specialize=["num_tiles", "R", "C", "seed"])
def _state_copy_kernel(meta_ptr, bt_ptr, src_cols, dst_cols, biases, num_tiles, R, C, seed,
                       BLOCK: tl.constexpr, ROWS: tl.constexpr,
                       SD_SPAN: tl.constexpr, DS_ROW: tl.constexpr,
                       DS_CONTIG: tl.constexpr, ADDR_I32: tl.constexpr,
                       TILE_GAP: tl.constexpr, PAD_CLOBBER: tl.constexpr,
                       DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr):
    r = tl.program_id(0)
    s = tl.program_id(1)
    t = tl.program_id(2)
    src_col = tl.load(src_cols + r)
    dst_col = tl.load(dst_cols + r)
    bias = tl.load(biases + r)
    copy_one_state(meta_ptr, bt_ptr, s, r, t, src_col, dst_col, bias, num_tiles, R, C,
                    BLOCK, ROWS,
                    SD_SPAN=SD_SPAN, DS_ROW=DS_ROW, DS_CONTIG=DS_CONTIG,
                    ADDR_I32=ADDR_I32, TILE_GAP=TILE_GAP, PAD_CLOBBER=PAD_CLOBBER,
                    DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE, seed=seed)


def state_flags(variant):
    """constexpr flags of ``copy_one_state`` for a zoo id (None: correct kernel)."""
    return variant_flags("state_copy", VARIANTS, FLAG_NAMES, variant)


def check_tables(fn, meta, block_tables):
    if not isinstance(meta, torch.Tensor) or meta.dtype != torch.int64 or meta.dim() != 2 \
            or meta.shape[1] != META_COLS:
        raise TypeError(f"{fn}: meta must be an int64 [S, {META_COLS}] tensor")
    if not isinstance(block_tables, torch.Tensor) or block_tables.dtype != torch.int32 \
            or block_tables.dim() != 3:
        raise TypeError(f"{fn}: block_tables must be an int32 [G, R, C] tensor")
    if not meta.is_contiguous() or not block_tables.is_contiguous():
        raise ValueError(f"{fn}: meta and block_tables must be contiguous")


def check_requests(fn, n, **arrays):
    for name, a in arrays.items():
        if not isinstance(a, torch.Tensor) or a.dim() != 1 or a.shape[0] != n:
            raise TypeError(f"{fn}: {name} must be a 1-D tensor of length {n}")
        if a.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{fn}: {name} must be int32 or int64, got {a.dtype}")
        if not a.is_contiguous():
            raise ValueError(f"{fn}: {name} must be contiguous")


def check_launch(fn, meta, block_tables, **arrays):
    """Validate the tables and the request arrays (the first one sets the length); the length."""
    check_tables(fn, meta, block_tables)
    first = next(iter(arrays.values()))
    n_req = first.shape[0] if isinstance(first, torch.Tensor) else -1
    check_requests(fn, n_req, **arrays)
    return n_req


def check_rows(fn, n_req, block_tables):
    if n_req > block_tables.shape[1]:
        raise ValueError(f"{fn}: more requests than block-table rows")


def positive_int(fn, name, value):
    value = int(value)
    if value < 1:
        raise ValueError(f"{fn}: {name} must be >= 1")
    return value


def state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles=1,
               arena=None, variant=None, block=BLOCK, rows=ROWS, num_warps=4, perturb=None):
    """Copy every state of every request (request i uses row i of each block table).

    ``arena`` is accepted for the contract and ignored (addresses are absolute).
    ``perturb`` (a ``kernels.perturb.Perturb`` or its 5-tuple) sleeps chosen
    warps to make races show; its ``num_warps`` replaces ``num_warps``.
    """
    n_req = check_launch("state_copy", meta, block_tables,
                         src_cols=src_cols, dst_cols=dst_cols, biases=biases)
    check_rows("state_copy", n_req, block_tables)
    num_tiles = positive_int("state_copy", "num_tiles", num_tiles)
    flags = state_flags(variant)
    _, R, C = block_tables.shape
    launch(_state_copy_kernel, (n_req, meta.shape[0], num_tiles),
           (meta, block_tables, src_cols, dst_cols, biases, num_tiles, R, C),
           perturb=perturb, num_warps=num_warps, BLOCK=block, ROWS=rows, **flags)


def contract_fn(variant=None):
    """The contract's signature over ``state_copy`` with one zoo variant (None: the correct kernel), plus
    ``perturb=`` (race amplification; None: none)."""
    def fn(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles=1, arena=None, perturb=None):
        return state_copy(meta, block_tables, src_cols, dst_cols, biases, num_tiles=num_tiles, arena=arena,
                          variant=variant, perturb=perturb)
    fn.__doc__ = state_copy.__doc__
    return fn


torch_fn = torch_path.state_copy
TORCH_DESCRIPTION = "torch path: dst.copy_(src.clone()) per state copy (as_strided views)"

"""The causal-conv1d prefill with prefix caching (contract ``conv_prefill``,
docs/contracts.md#conv_prefill).

``conv_prefill(x, conv_state, weight, bias, cache_indices, has_initial_state, query_start_loc,
initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens,
out, *, activation, pad_slot_id, block_size)``: one program per (row, block of channels).  A program
loads its row's initial entry and token count, returns on the pad or no tokens, loads the initial
window ``pool[src, :, :W - 1]`` (masked off, zeros, without an initial state) into registers before it
stores anything (so the initial block may also be a destination), then per token computes the output
and shifts the window; at each block boundary strictly inside the chunk (``Bs - c % Bs + k * Bs``
tokens in) it stores the window to ``idx[b, first + k]``, and after the last token to
``idx[b, last]``, each unless it is the pad.  The math is fp32 (states and tokens converted on load,
back on store).  Slot offsets are int64; every stride is the tensor's own, so both pool layouts,
padded slots, strided 1-D tables and 2-D tables with padded rows work.

Zoo flags (constexpr, compiled out when off; ``kernels.zoo``): ``SHORT_SRC`` (a chunk shorter than
``W - 1`` stores its final window through the pointer it read: vLLM #56196), ``NO_HAS_INIT``
(``has_initial_state`` ignored: vllm-ascend #10558), ``ROW_1D`` (the table's row stride taken as 1:
vLLM #54504 / #54505), ``BOUNDARY_X`` (a boundary's window loaded from the packed tokens at absolute
positions, zeros before token 0: the previous row's tokens where the boundary is fewer than ``W - 1``
tokens in), ``PAD_STORE`` (the pad taken for a slot: a pad row runs and stores: vLLM #33937), ``I32_OFFSET``
(``slot * stride`` in 32 bits: vLLM #20838).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .conv_window import conv_step, conv_taps
from .launch import variant_flags
from .prefill_columns import row_columns
from .zoo import PAST_2GIB, ZooEntry

CONTRACT = "conv_prefill"
DESCRIPTION = ("Triton causal-conv1d prefill with prefix caching: grid (rows, channel blocks), the initial "
               "window in registers before any store, a window stored at every block boundary, int64 slot offsets")
BLOCK_D = 32
FLAGS = ("SHORT_SRC", "NO_HAS_INIT", "ROW_1D", "BOUNDARY_X", "PAD_STORE", "I32_OFFSET")


@triton.jit
def _slot_base(slot, s_slot, dims, s_dim, I32_OFFSET: tl.constexpr):
    if I32_OFFSET:
        return (slot.to(tl.int32) * s_slot.to(tl.int32)).to(tl.int64) + dims * s_dim
    return slot * s_slot + dims * s_dim


@triton.jit
def _column(state_ptr, base, col, s_tok, mask):
    return tl.load(state_ptr + base + col * s_tok, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _store_window(state_ptr, base, s_tok, c0, c1, c2, c3, c4, mask, W: tl.constexpr):
    ty = state_ptr.dtype.element_ty
    tl.store(state_ptr + base, c0.to(ty), mask=mask)
    if W > 2:
        tl.store(state_ptr + base + s_tok, c1.to(ty), mask=mask)
    if W > 3:
        tl.store(state_ptr + base + 2 * s_tok, c2.to(ty), mask=mask)
    if W > 4:
        tl.store(state_ptr + base + 3 * s_tok, c3.to(ty), mask=mask)
    if W > 5:
        tl.store(state_ptr + base + 4 * s_tok, c4.to(ty), mask=mask)


@triton.jit
def _token(x_ptr, pos, sx_tok, dims, sx_dim, mask):
    """Token `pos` of the packed x (zeros where `pos` < 0), fp32."""
    pos = pos + dims * 0  # a block: the interpreter takes no block & scalar for a mask
    return tl.load(x_ptr + pos * sx_tok + dims * sx_dim, mask=mask & (pos >= 0), other=0.0).to(tl.float32)


@triton.jit(do_not_specialize=["dim", "pad", "block_size", "idx_row_stride", "idx_col_stride", "sx_tok", "sx_dim",
                               "s_slot", "s_dim", "s_tok", "sw_dim", "sw_tap", "so_tok", "so_dim"])
def _conv_prefill_kernel(x_ptr, state_ptr, w_ptr, b_ptr, idx_ptr, has_ptr, qsl_ptr, init_ptr, first_ptr, last_ptr,
                         computed_ptr, out_ptr, dim, pad, block_size, idx_row_stride, idx_col_stride,
                         sx_tok, sx_dim, s_slot, s_dim, s_tok, sw_dim, sw_tap, so_tok, so_dim,
                         W: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr, APC: tl.constexpr,
                         BLOCK: tl.constexpr, SHORT_SRC: tl.constexpr, NO_HAS_INIT: tl.constexpr,
                         ROW_1D: tl.constexpr, BOUNDARY_X: tl.constexpr, PAD_STORE: tl.constexpr,
                         I32_OFFSET: tl.constexpr):
    b = tl.program_id(0)
    dims = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = dims < dim
    if ROW_1D:
        row = b.to(tl.int64)
    else:
        row = b.to(tl.int64) * idx_row_stride
    init_col, first_col, last_col, computed = row_columns(init_ptr, first_ptr, last_ptr, computed_ptr, b, APC)
    src = tl.load(idx_ptr + row + init_col * idx_col_stride).to(tl.int64)
    start = tl.load(qsl_ptr + b).to(tl.int64)
    length = tl.load(qsl_ptr + b + 1).to(tl.int64) - start
    live = src != pad
    if PAD_STORE:
        live = src == src
    if live and length > 0:
        has = tl.load(has_ptr + b + dims * 0) != 0  # per lane: the interpreter's block & scalar is no mask
        if NO_HAS_INIT:
            has = dims == dims
        dst = tl.load(idx_ptr + row + last_col * idx_col_stride).to(tl.int64)
        if SHORT_SRC:
            if length < W - 1:
                dst = src
        # the initial window in registers before any store (W <= 6: five columns); zeros without one
        read = mask & has
        src_base = _slot_base(src, s_slot, dims, s_dim, I32_OFFSET)
        c0 = _column(state_ptr, src_base, 0, s_tok, read)
        c1 = tl.zeros([BLOCK], dtype=tl.float32)
        c2 = tl.zeros([BLOCK], dtype=tl.float32)
        c3 = tl.zeros([BLOCK], dtype=tl.float32)
        c4 = tl.zeros([BLOCK], dtype=tl.float32)
        if W > 2:
            c1 = _column(state_ptr, src_base, 1, s_tok, read)
        if W > 3:
            c2 = _column(state_ptr, src_base, 2, s_tok, read)
        if W > 4:
            c3 = _column(state_ptr, src_base, 3, s_tok, read)
        if W > 5:
            c4 = _column(state_ptr, src_base, 4, s_tok, read)
        w0, w1, w2, w3, w4, w5, bias = conv_taps(w_ptr, b_ptr, dims, sw_dim, sw_tap, mask, W, HAS_BIAS, BLOCK)
        first_boundary = 0
        if APC:
            first_boundary = block_size - computed % block_size
        for t in range(0, length):
            xt = tl.load(x_ptr + (start + t) * sx_tok + dims * sx_dim, mask=mask, other=0.0).to(tl.float32)
            acc, c0, c1, c2, c3, c4 = conv_step(xt, c0, c1, c2, c3, c4, w0, w1, w2, w3, w4, w5, bias, W, SILU)
            tl.store(out_ptr + (start + t) * so_tok + dims * so_dim, acc.to(out_ptr.dtype.element_ty), mask=mask)
            if APC:  # the window after t + 1 tokens, at a block boundary inside the chunk
                rel = t + 1 - first_boundary
                if (rel >= 0) & (t + 1 < length):
                    if rel % block_size == 0:
                        slot = tl.load(idx_ptr + row + (first_col + rel // block_size) * idx_col_stride)
                        slot = slot.to(tl.int64)
                        if (slot != pad) | PAD_STORE:
                            base = _slot_base(slot, s_slot, dims, s_dim, I32_OFFSET)
                            if BOUNDARY_X:  # from x at absolute positions: before the row, another row's tokens
                                end = start + t + 1
                                b0 = _token(x_ptr, end - (W - 1), sx_tok, dims, sx_dim, mask)
                                b1 = b0
                                b2 = b0
                                b3 = b0
                                b4 = b0
                                if W > 2:
                                    b1 = _token(x_ptr, end - (W - 2), sx_tok, dims, sx_dim, mask)
                                if W > 3:
                                    b2 = _token(x_ptr, end - (W - 3), sx_tok, dims, sx_dim, mask)
                                if W > 4:
                                    b3 = _token(x_ptr, end - (W - 4), sx_tok, dims, sx_dim, mask)
                                if W > 5:
                                    b4 = _token(x_ptr, end - (W - 5), sx_tok, dims, sx_dim, mask)
                                _store_window(state_ptr, base, s_tok, b0, b1, b2, b3, b4, mask, W)
                            else:
                                _store_window(state_ptr, base, s_tok, c0, c1, c2, c3, c4, mask, W)
        if (dst != pad) | PAD_STORE:  # the window now holds the last W - 1 columns of [initial, tokens]
            _store_window(state_ptr, _slot_base(dst, s_slot, dims, s_dim, I32_OFFSET), s_tok, c0, c1, c2, c3, c4,
                          mask, W)


def conv_prefill(x, conv_state, weight, bias, cache_indices, has_initial_state, query_start_loc, initial_state_idx,
                 block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *,
                 activation=None, pad_slot_id=-1, block_size=0, variant=None):
    """Triton causal-conv1d prefill with prefix caching: grid (rows, channel blocks), int64 slot offsets."""
    flags = variant_flags("conv_prefill", VARIANTS, FLAGS, variant)
    rows = query_start_loc.shape[0] - 1
    dim, width = weight.shape
    idx = cache_indices if cache_indices.dim() == 2 else cache_indices.unsqueeze(1)
    if rows <= 0:
        return out
    apc = block_idx_last_scheduled_token is not None
    columns = (initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
               num_computed_tokens) if apc else (idx,) * 4
    grid = (rows, triton.cdiv(dim, BLOCK_D))
    _conv_prefill_kernel[grid](
        x, conv_state, weight, bias if bias is not None else weight, idx, has_initial_state.view(torch.uint8),
        query_start_loc, *columns, out, dim, pad_slot_id, block_size if apc else 1, idx.stride(0), idx.stride(1),
        x.stride(0), x.stride(1), conv_state.stride(0), conv_state.stride(1), conv_state.stride(2),
        weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
        W=width, HAS_BIAS=bias is not None, SILU=activation in ("silu", "swish", True), APC=apc, BLOCK=BLOCK_D,
        **flags)
    return out


def torch_fn(x, conv_state, weight, bias, cache_indices, has_initial_state, query_start_loc, initial_state_idx,
             block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *,
             activation=None, pad_slot_id=-1, block_size=0):
    """The same prefill in plain torch, row by row (float32 math; the reference's torch path)."""
    idx = cache_indices if cache_indices.dim() == 2 else cache_indices.unsqueeze(1)
    width = weight.shape[1]
    w = weight.float()
    qsl = query_start_loc.tolist()
    apc = block_idx_last_scheduled_token is not None
    for b in range(len(qsl) - 1):
        init, first, last, computed = ((int(initial_state_idx[b]), int(block_idx_first_scheduled_token[b]),
                                        int(block_idx_last_scheduled_token[b]), int(num_computed_tokens[b]))
                                       if apc else (0, 0, 0, 0))
        src, lo, hi = int(idx[b, init]), qsl[b], qsl[b + 1]
        if src == pad_slot_id or hi == lo:
            continue
        if bool(has_initial_state[b]):
            prev = conv_state[src, :, :width - 1].float()
        else:
            prev = torch.zeros(x.shape[1], width - 1, dtype=torch.float32, device=x.device)
        full = torch.cat([prev, x[lo:hi].t().float()], dim=1)                  # [dim, W - 1 + L], a copy
        acc = (full.unfold(1, width, 1) * w[:, None, :]).sum(-1)              # [dim, L]
        if bias is not None:
            acc = acc + bias.float()[:, None]
        if activation in ("silu", "swish", True):
            acc = acc * torch.sigmoid(acc)
        out[lo:hi] = acc.t().to(out.dtype)
        ends = list(range(block_size - computed % block_size, hi - lo, block_size)) if apc else []
        stores = [(int(idx[b, first + k]), o) for k, o in enumerate(ends)] + [(int(idx[b, last]), hi - lo)]
        for slot, o in stores:
            if slot != pad_slot_id:
                conv_state[slot, :, :width - 1] = full[:, o:o + width - 1].to(conv_state.dtype)
    return out


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "CP-SHORTSTORE": {"SHORT_SRC": True}, "CP-NOINIT": {"NO_HAS_INIT": True},
            "CP-ROWSTRIDE": {"ROW_1D": True}, "CP-BOUNDARYX": {"BOUNDARY_X": True},
            "CP-PADSTORE": {"PAD_STORE": True}, "CP-I32": {"I32_OFFSET": True}}


def contract_fn(variant=None):
    """The contract's signature over ``conv_prefill`` with one zoo variant (None: the correct kernel)."""
    def fn(x, conv_state, weight, bias, cache_indices, has_initial_state, query_start_loc, initial_state_idx,
           block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *,
           activation=None, pad_slot_id=-1, block_size=0):
        return conv_prefill(x, conv_state, weight, bias, cache_indices, has_initial_state, query_start_loc,
                            initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
                            num_computed_tokens, out, activation=activation, pad_slot_id=pad_slot_id,
                            block_size=block_size, variant=variant)
    return fn


# Zoo rows: the prefix-caching conv bugs engines shipped in 2025-2026 (and one suspected from reading);
# kernels.registry lists them.
ZOO = (
    ZooEntry(
        "CP-SHORTSTORE", "conv_prefill", "wrong",
        "a chunk shorter than W - 1 stores its final window through the pointer it read the initial state "
        "from: the shared prefix block overwritten, the row's own block never written (vLLM #56196)",
        "conv_prefill(variant='CP-SHORTSTORE'): dst = src when the chunk has fewer than W - 1 tokens",
        "wrong when a short chunk's initial and final blocks differ (a chunk right after a block boundary)",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "CP-NOINIT", "conv_prefill", "wrong",
        "has_initial_state ignored: a request without one starts from its initial block's stale bytes "
        "(vllm-ascend #10558)",
        "conv_prefill(variant='CP-NOINIT'): the initial window always loaded",
        "wrong when a row has no initial state (a first chunk, c = 0)",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "CP-ROWSTRIDE", "conv_prefill", "wrong",
        "a 2-D block table mis-indexed: its row stride taken as if the table were 1-D (vLLM #54504, #54505)",
        "conv_prefill(variant='CP-ROWSTRIDE'): row b's entries at b + col, not b * stride(0) + col",
        "wrong when a row other than the first has a 2-D table (or a strided 1-D one): another row's "
        "blocks, or the pad",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
    ZooEntry(
        "CP-BOUNDARYX", "conv_prefill", "wrong",
        "a block boundary fewer than W - 1 tokens into a chunk takes its window from the previous request's "
        "tokens (or zeros) instead of the initial state (suspected from reading vLLM's _causal_conv1d_fwd_kernel)",
        "conv_prefill(variant='CP-BOUNDARYX'): a boundary's window loaded from x at absolute token positions, "
        "zeros before token 0",
        "wrong when a boundary falls fewer than W - 1 tokens into a chunk",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "CP-PADSTORE", "conv_prefill", "wrong",
        "the pad taken for a slot: a pad row (a batch's padding, a block not allocated) runs and stores its "
        "windows: slot -1 before the pool, or the shared null block 0 (vLLM #33937: block 0 passed to kernels "
        "that check -1 only)",
        "conv_prefill(variant='CP-PADSTORE'): neither the initial entry nor a destination checked for the pad",
        "wrong or out of bounds when a row's initial entry or a live row's destination is the pad",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
    ZooEntry(
        "CP-I32", "conv_prefill", "wrong",
        "the state offset slot * stride in 32 bits: a slot past 2^31 elements wraps (the int32-offset family: "
        "vLLM #20838 and #20938, causal-conv1d indexing overflowing 32 bits on v1's large caches)",
        "conv_prefill(variant='CP-I32'): (slot.to(int32) * stride.to(int32))",
        "wrong or out of bounds when a slot the prefill reads or stores starts past 2 GiB",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault"), memory=PAST_2GIB),
)

"""The causal-conv1d state update of a decode or spec-decode step (contract ``conv_update``,
docs/contracts.md#conv_update).

``conv_update(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
initial_state_idx, last_state_idx, out, *, activation, pad_slot_id, max_query_len)``: one program per
(row, block of channels).  A program loads its row's read slot and token count, returns on a pad slot
or no tokens, loads the whole window ``pool[src, :, off : off + W - 1]`` (``off = max(nacc - 1, 0)``)
into registers before it stores anything (so a row may store the slot it read), then per token
computes the output and shifts the window, storing the new state to the write slot unless it is the
pad: the last ``W - 1`` columns (non-spec) or the window's columns 1.. and every token (spec).  Slot
offsets are int64 (``slot * stride`` passes 2 GiB); every stride is the tensor's own, so both pool
layouts, padded slots and index rows further apart than their columns work.

Zoo flags (constexpr, compiled out when off; ``kernels.zoo``):
``NO_CLAMP`` (``off = nacc - 1``: column -1 at nacc = 0), ``NO_DST_PAD`` (the write slot never
checked for the pad), ``PAD_TO_ZERO`` (a -1 index clamped to slot 0, a live one), ``NARROW`` (the spec
state stored as W - 1 columns, not widened for the drafts: the window's end dropped), ``COL0``
(the spec window read at column 0, not nacc - 1), ``ROW_STRIDE`` (the index array read as if its rows
were C apart), ``I32_OFFSET`` (``slot * stride`` in 32 bits).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .conv_window import conv_step, conv_taps
from .launch import variant_flags
from .zoo import PAST_2GIB, ZooEntry

CONTRACT = "conv_update"
DESCRIPTION = ("Triton causal-conv1d update: grid (rows, channel blocks), the window in registers before "
               "any store, int64 slot offsets")
BLOCK_D = 32
FLAGS = ("NO_CLAMP", "NO_DST_PAD", "PAD_TO_ZERO", "NARROW", "COL0", "ROW_STRIDE", "I32_OFFSET")


@triton.jit
def _col(state_ptr, base, col, stride_tok, dims, mask):
    return tl.load(state_ptr + base + dims * 0 + col * stride_tok, mask=mask, other=0.0).to(tl.float32)


@triton.jit(do_not_specialize=["dim", "pad", "idx_row_stride", "idx_col_stride", "idx_cols", "sx_seq", "sx_dim",
                               "sx_tok", "s_slot", "s_dim", "s_tok", "sw_dim", "sw_tap", "so_seq", "so_dim", "so_tok",
                               "L_FIXED"])
def _conv_update_kernel(x_ptr, state_ptr, w_ptr, b_ptr, idx_ptr, nacc_ptr, qsl_ptr, init_ptr, last_ptr, out_ptr,
                        dim, pad, idx_row_stride, idx_col_stride, idx_cols,
                        sx_seq, sx_dim, sx_tok, s_slot, s_dim, s_tok, sw_dim, sw_tap, so_seq, so_dim, so_tok,
                        L_FIXED, W: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                        SPEC: tl.constexpr, VARLEN: tl.constexpr, APC: tl.constexpr, BLOCK: tl.constexpr,
                        NO_CLAMP: tl.constexpr, NO_DST_PAD: tl.constexpr, PAD_TO_ZERO: tl.constexpr,
                        NARROW: tl.constexpr, COL0: tl.constexpr, ROW_STRIDE: tl.constexpr,
                        I32_OFFSET: tl.constexpr):
    b = tl.program_id(0)
    dims = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = dims < dim
    row = b.to(tl.int64) * (idx_cols if ROW_STRIDE else idx_row_stride)
    read_col = 0
    write_col = 0
    if APC:
        read_col = tl.load(init_ptr + b).to(tl.int64)
        write_col = tl.load(last_ptr + b).to(tl.int64)
    src = tl.load(idx_ptr + row + read_col * idx_col_stride).to(tl.int64)
    dst = tl.load(idx_ptr + row + write_col * idx_col_stride).to(tl.int64)
    if PAD_TO_ZERO:
        src = tl.maximum(src, 0)
        dst = tl.maximum(dst, 0)
    if VARLEN:
        start = tl.load(qsl_ptr + b).to(tl.int64)
        length = tl.load(qsl_ptr + b + 1).to(tl.int64) - start
        x_row = start * sx_tok
        o_row = start * so_tok
    else:
        length = L_FIXED
        x_row = b.to(tl.int64) * sx_seq
        o_row = b.to(tl.int64) * so_seq
    if src != pad and length > 0:
        off = src * 0
        if SPEC:
            if not COL0:
                off = tl.load(nacc_ptr + b).to(tl.int64) - 1
                if not NO_CLAMP:
                    off = tl.maximum(off, 0)
        if I32_OFFSET:
            src_base = (src.to(tl.int32) * s_slot.to(tl.int32)).to(tl.int64) + dims * s_dim
            dst_base = (dst.to(tl.int32) * s_slot.to(tl.int32)).to(tl.int64) + dims * s_dim
        else:
            src_base = src * s_slot + dims * s_dim
            dst_base = dst * s_slot + dims * s_dim
        # the whole window in registers before any store (W <= 6: five columns)
        c0 = _col(state_ptr, src_base, off, s_tok, dims, mask)
        c1 = c0 * 0.0
        c2 = c0 * 0.0
        c3 = c0 * 0.0
        c4 = c0 * 0.0
        if W > 2:
            c1 = _col(state_ptr, src_base, off + 1, s_tok, dims, mask)
        if W > 3:
            c2 = _col(state_ptr, src_base, off + 2, s_tok, dims, mask)
        if W > 4:
            c3 = _col(state_ptr, src_base, off + 3, s_tok, dims, mask)
        if W > 5:
            c4 = _col(state_ptr, src_base, off + 4, s_tok, dims, mask)
        store = dst != pad
        if NO_DST_PAD:
            store = dst == dst
        if SPEC:
            if not NARROW:
                if store:  # the window's columns 1.. go first: the drafts' states stay recoverable
                    if W > 2:
                        tl.store(state_ptr + dst_base, c1.to(state_ptr.dtype.element_ty), mask=mask)
                    if W > 3:
                        tl.store(state_ptr + dst_base + s_tok, c2.to(state_ptr.dtype.element_ty), mask=mask)
                    if W > 4:
                        tl.store(state_ptr + dst_base + 2 * s_tok, c3.to(state_ptr.dtype.element_ty), mask=mask)
                    if W > 5:
                        tl.store(state_ptr + dst_base + 3 * s_tok, c4.to(state_ptr.dtype.element_ty), mask=mask)
        w0, w1, w2, w3, w4, w5, bias = conv_taps(w_ptr, b_ptr, dims, sw_dim, sw_tap, mask, W, HAS_BIAS, BLOCK)
        for t in range(0, length):
            xt = tl.load(x_ptr + x_row + t * sx_tok + dims * sx_dim, mask=mask, other=0.0).to(tl.float32)
            acc, c0, c1, c2, c3, c4 = conv_step(xt, c0, c1, c2, c3, c4, w0, w1, w2, w3, w4, w5, bias, W, SILU)
            tl.store(out_ptr + o_row + t * so_tok + dims * so_dim, acc.to(out_ptr.dtype.element_ty), mask=mask)
            if SPEC:
                if not NARROW:
                    if store:
                        tl.store(state_ptr + dst_base + (W - 2 + t) * s_tok, xt.to(state_ptr.dtype.element_ty),
                                 mask=mask)
        if not SPEC or NARROW:
            if store:  # the window now holds the last W - 1 columns of [window, tokens]
                tl.store(state_ptr + dst_base, c0.to(state_ptr.dtype.element_ty), mask=mask)
                if W > 2:
                    tl.store(state_ptr + dst_base + s_tok, c1.to(state_ptr.dtype.element_ty), mask=mask)
                if W > 3:
                    tl.store(state_ptr + dst_base + 2 * s_tok, c2.to(state_ptr.dtype.element_ty), mask=mask)
                if W > 4:
                    tl.store(state_ptr + dst_base + 3 * s_tok, c3.to(state_ptr.dtype.element_ty), mask=mask)
                if W > 5:
                    tl.store(state_ptr + dst_base + 4 * s_tok, c4.to(state_ptr.dtype.element_ty), mask=mask)


def conv_update(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
                initial_state_idx, last_state_idx, out, *, activation=None, pad_slot_id=-1, max_query_len=0,
                variant=None):
    """Triton causal-conv1d update: grid (rows, channel blocks), window in registers, int64 slot offsets."""
    flags = variant_flags("conv_update", VARIANTS, FLAGS, variant)
    varlen = query_start_loc is not None
    rows = conv_state_indices.shape[0]
    dim, width = weight.shape
    idx = conv_state_indices if conv_state_indices.dim() == 2 else conv_state_indices.unsqueeze(1)
    if rows == 0:
        return out
    if varlen:
        sx = (0, x.stride(1), x.stride(0))
        so = (0, out.stride(1), out.stride(0))
        fixed = 0
    else:
        sx = (x.stride(0), x.stride(1), x.stride(2))
        so = (out.stride(0), out.stride(1), out.stride(2))
        fixed = x.shape[2]
    dummy = idx
    grid = (rows, triton.cdiv(dim, BLOCK_D))
    _conv_update_kernel[grid](
        x, conv_state, weight, bias if bias is not None else weight, idx,
        num_accepted_tokens if num_accepted_tokens is not None else dummy,
        query_start_loc if varlen else dummy,
        initial_state_idx if initial_state_idx is not None else dummy,
        last_state_idx if last_state_idx is not None else dummy, out,
        dim, pad_slot_id, idx.stride(0), idx.stride(1), idx.shape[1],
        *sx, conv_state.stride(0), conv_state.stride(1), conv_state.stride(2), weight.stride(0), weight.stride(1),
        *so, fixed, W=width, HAS_BIAS=bias is not None, SILU=activation in ("silu", "swish", True),
        SPEC=num_accepted_tokens is not None, VARLEN=varlen, APC=initial_state_idx is not None, BLOCK=BLOCK_D,
        **flags)
    return out


def torch_fn(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
                      initial_state_idx, last_state_idx, out, *, activation=None, pad_slot_id=-1, max_query_len=0):
    """The same step in plain torch, row by row (float32 math; the reference's torch path)."""
    idx = conv_state_indices if conv_state_indices.dim() == 2 else conv_state_indices.unsqueeze(1)
    width = weight.shape[1]
    w = weight.float()
    for b in range(idx.shape[0]):
        read_col = int(initial_state_idx[b]) if initial_state_idx is not None else 0
        write_col = int(last_state_idx[b]) if last_state_idx is not None else 0
        src, dst = int(idx[b, read_col]), int(idx[b, write_col])
        if query_start_loc is not None:
            lo, hi = int(query_start_loc[b]), int(query_start_loc[b + 1])
            xb, ob = x[lo:hi].t(), out[lo:hi].t()
        else:
            xb, ob = x[b], out[b]
        length = xb.shape[1]
        if src == pad_slot_id or length == 0:
            continue
        spec = num_accepted_tokens is not None
        off = max(int(num_accepted_tokens[b]) - 1, 0) if spec else 0
        window = conv_state[src, :, off:off + width - 1].float()
        full = torch.cat([window, xb.float()], dim=1)
        acc = torch.stack([(full[:, t:t + width] * w).sum(1) for t in range(length)], dim=1)
        if bias is not None:
            acc = acc + bias.float()[:, None]
        if activation in ("silu", "swish", True):
            acc = acc * torch.sigmoid(acc)
        ob.copy_(acc.to(ob.dtype))
        if dst != pad_slot_id:
            new = full[:, -(width - 1):] if not spec else torch.cat([window[:, 1:], xb.float()], dim=1)
            conv_state[dst, :, :new.shape[1]] = new.to(conv_state.dtype)
    return out


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "CU-NOCLAMP": {"NO_CLAMP": True}, "CU-DSTPAD": {"NO_DST_PAD": True},
            "CU-PAD0": {"PAD_TO_ZERO": True}, "CU-NARROW": {"NARROW": True}, "CU-COL0": {"COL0": True},
            "CU-ROWSTRIDE": {"ROW_STRIDE": True}, "CU-I32": {"I32_OFFSET": True}}


def contract_fn(variant=None):
    """The contract's signature over ``conv_update`` with one zoo variant (None: the correct kernel)."""
    def fn(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
           initial_state_idx, last_state_idx, out, *, activation=None, pad_slot_id=-1, max_query_len=0):
        return conv_update(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
                           initial_state_idx, last_state_idx, out, activation=activation, pad_slot_id=pad_slot_id,
                           max_query_len=max_query_len, variant=variant)
    return fn


# Zoo rows (docs/contracts.md#zoo): the conv-state index bugs engines shipped in 2025-2026; kernels.registry lists them.
ZOO = (
    ZooEntry(
        "CU-NOCLAMP", "conv_update", "wrong",
        "accepted count 0 read as window column -1, no clamp (vLLM #56419, PR #48475)",
        "conv_update(variant='CU-NOCLAMP'): off = nacc - 1, not max(nacc - 1, 0)",
        "wrong when a row has nacc = 0 (--min-accepted 0): the window starts one column early, in the "
        "previous channel or slot, or before the arena (out of bounds)",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault"), options=(("min_accepted", "0"),)),
    ZooEntry(
        "CU-DSTPAD", "conv_update", "wrong",
        "the write slot never checked for the pad: a pad destination stores slot -1 (before the pool) or slot 0",
        "conv_update(variant='CU-DSTPAD'): store = True whatever idx[b, last] holds",
        "wrong when a live row's write column holds the pad (prefix caching): bytes before the pool, or "
        "out of bounds",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
    ZooEntry(
        "CU-PAD0", "conv_update", "wrong",
        "pad -1 clamped to 0: a pad row reads and stores slot 0, a live slot (tokenspeed #700; vLLM #33937, "
        "#35431)",
        "conv_update(variant='CU-PAD0'): src, dst = max(src, 0), max(dst, 0)",
        "wrong when a row is pad (-1): slot 0 gets its state",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch",)),
    ZooEntry(
        "CU-NARROW", "conv_update", "wrong",
        "conv state not widened for draft tokens: a spec step stores W - 1 columns, the drafts' windows lost "
        "(vLLM #50272)",
        "conv_update(variant='CU-NARROW'): the non-spec store in spec mode",
        "wrong in spec mode whenever a row has more than one token",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "CU-COL0", "conv_update", "wrong",
        "the window read at column 0 instead of nacc - 1 after verification (vLLM #39273)",
        "conv_update(variant='CU-COL0'): off = 0 in spec mode",
        "wrong when a row accepted more than one token",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "CU-ROWSTRIDE", "conv_update", "wrong",
        "the index array's row stride ignored: a non-contiguous [B, C] (or strided [B]) view read as contiguous",
        "conv_update(variant='CU-ROWSTRIDE'): row b at b * C, not b * stride(0)",
        "wrong when the index rows are further apart than their columns",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
    ZooEntry(
        "CU-I32", "conv_update", "wrong",
        "the state offset slot * stride in 32 bits: a slot past 2 GiB wraps (the int32-offset family)",
        "conv_update(variant='CU-I32'): (slot.to(int32) * stride.to(int32))",
        "wrong or out of bounds when a named slot starts past 2 GiB",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault"), memory=PAST_2GIB),
)

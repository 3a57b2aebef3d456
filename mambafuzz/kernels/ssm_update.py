"""The Mamba2 selective state update of a decode or spec-decode step (contract ``ssm_update``,
docs/contracts.md#ssm_update).

``ssm_update(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
num_accepted_tokens, cu_seqlens, out, *, dt_softplus, pad_slot_id)``: one program per (row, head, block
of dim).  A program loads its row's read slot (column ``max(nacc - 1, 0)`` in spec decode) and its
``[BLOCK_D, N]`` state tile into registers (zeros for a pad row) before it stores anything, so a row
may store the slot it read; then for each of ``T_MAX`` token positions (a constexpr bound, tokens past
the row's count masked off: no loop bound is loaded from memory) it updates the tile, writes the
output and, in spec decode, stores the tile to ``dst[b, t]`` unless that is the pad; otherwise the
final tile goes to ``dst[b, 0]``.  Nothing is stored for a pad row.  Slot offsets are int64 and every
stride is the tensor's own (index columns and rows anywhere, padded slots, a broadcast A).

Zoo flags (constexpr, compiled out when off; ``kernels.zoo``): ``NO_CLAMP`` (the read column
``nacc - 1``: column -1 at nacc = 0), ``NO_DST_PAD`` (a spec destination never checked for the pad),
``TOK_STRIDE`` (index column t read at ``b * stride(0) + t``, the column stride ignored),
``I32_OFFSET`` (``slot * stride`` in 32 bits).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import variant_flags
from .zoo import PAST_2GIB, ZooEntry

CONTRACT = "ssm_update"
DESCRIPTION = ("Triton selective state update: grid (rows, heads, dim blocks), the state tile in registers "
               "before any store, a constexpr token bound, int64 slot offsets")
BLOCK_D_MAX = 16
FLAGS = ("NO_CLAMP", "NO_DST_PAD", "TOK_STRIDE", "I32_OFFSET")


@triton.jit
def _slot_offset(slot, stride, I32_OFFSET: tl.constexpr):
    if I32_OFFSET:
        return (slot.to(tl.int32) * stride.to(tl.int32)).to(tl.int64)
    return slot.to(tl.int64) * stride


@triton.jit(do_not_specialize=["dim", "dstate", "pad", "ratio", "s_slot", "s_head", "s_dim", "s_n",
                               "sx_tok", "sx_head", "sx_dim", "sdt_tok", "sdt_head", "sdt_dim",
                               "sa_head", "sa_dim", "sa_n", "sb_tok", "sb_group", "sb_n", "sc_tok", "sc_group",
                               "sc_n", "sd_head", "sd_dim", "sz_tok", "sz_head", "sz_dim", "sbias_head",
                               "sbias_dim", "so_tok", "so_head", "so_dim", "si_row", "si_col", "sj_row", "sj_col"])
def _ssm_update_kernel(state_ptr, x_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, z_ptr, bias_ptr, src_ptr, dst_ptr,
                       nacc_ptr, cu_ptr, out_ptr, dim, dstate, pad, ratio,
                       s_slot, s_head, s_dim, s_n, sx_tok, sx_head, sx_dim, sdt_tok, sdt_head, sdt_dim,
                       sa_head, sa_dim, sa_n, sb_tok, sb_group, sb_n, sc_tok, sc_group, sc_n, sd_head, sd_dim,
                       sz_tok, sz_head, sz_dim, sbias_head, sbias_dim, so_tok, so_head, so_dim,
                       si_row, si_col, sj_row, sj_col,
                       T_MAX: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                       HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
                       SPEC: tl.constexpr, VARLEN: tl.constexpr,
                       NO_CLAMP: tl.constexpr, NO_DST_PAD: tl.constexpr, TOK_STRIDE: tl.constexpr,
                       I32_OFFSET: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    dims = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    ns = tl.arange(0, BLOCK_N)
    dmask = dims < dim
    tile = dmask[:, None] & (ns[None, :] < dstate)
    if VARLEN:
        bos = tl.load(cu_ptr + b).to(tl.int64)
        length = tl.load(cu_ptr + b + 1).to(tl.int64) - bos
    else:
        bos = b.to(tl.int64)
        length = bos * 0 + 1
    col = bos * 0
    if SPEC:
        col = tl.load(nacc_ptr + b).to(tl.int64) - 1
        if not NO_CLAMP:
            col = tl.maximum(col, 0)
    col_step = si_col
    dst_step = sj_col
    if TOK_STRIDE:
        col_step = si_col * 0 + 1
        dst_step = sj_col * 0 + 1
    src = tl.load(src_ptr + b.to(tl.int64) * si_row + col * col_step).to(tl.int64)
    zero_d = dims * 0  # scalar conditions broadcast to lanes (the interpreter refuses a scalar & a tile)
    live = ((zero_d + src) != pad) & ((zero_d + length) > 0)
    head = h.to(tl.int64)
    inner = head * s_head + dims[:, None] * s_dim + ns[None, :] * s_n
    st = tl.load(state_ptr + _slot_offset(src, s_slot, I32_OFFSET) + inner, mask=tile & live[:, None],
                 other=0.0).to(tl.float32)
    a = tl.load(a_ptr + head * sa_head + dims[:, None] * sa_dim + ns[None, :] * sa_n, mask=tile,
                other=0.0).to(tl.float32)
    bias = tl.zeros([BLOCK_D], dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + head * sbias_head + dims * sbias_dim, mask=dmask, other=0.0).to(tl.float32)
    skip = tl.zeros([BLOCK_D], dtype=tl.float32)
    if HAS_D:
        skip = tl.load(d_ptr + head * sd_head + dims * sd_dim, mask=dmask, other=0.0).to(tl.float32)
    group = head // ratio
    for t in range(T_MAX):
        on = (zero_d + t) < length
        on_n = (ns * 0 + t) < length
        tok = bos + t
        x = tl.load(x_ptr + tok * sx_tok + head * sx_head + dims * sx_dim, mask=dmask & on, other=0.0).to(tl.float32)
        dt = tl.load(dt_ptr + tok * sdt_tok + head * sdt_head + dims * sdt_dim, mask=dmask & on,
                     other=0.0).to(tl.float32) + bias
        if SOFTPLUS:
            dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
        bn = tl.load(b_ptr + tok * sb_tok + group * sb_group + ns * sb_n, mask=(ns < dstate) & on_n,
                     other=0.0).to(tl.float32)
        cn = tl.load(c_ptr + tok * sc_tok + group * sc_group + ns * sc_n, mask=(ns < dstate) & on_n,
                     other=0.0).to(tl.float32)
        new = st * tl.exp(a * dt[:, None]) + (dt * x)[:, None] * bn[None, :]
        st = tl.where(on[:, None], new, st)
        y = tl.sum(st * cn[None, :], axis=1) + skip * x
        if HAS_Z:
            zv = tl.load(z_ptr + tok * sz_tok + head * sz_head + dims * sz_dim, mask=dmask & on,
                         other=0.0).to(tl.float32)
            y = y * (zv / (1.0 + tl.exp(-zv)))
        tl.store(out_ptr + tok * so_tok + head * so_head + dims * so_dim, y.to(out_ptr.dtype.element_ty),
                 mask=dmask & on)
        if SPEC:
            dst = tl.load(dst_ptr + b.to(tl.int64) * sj_row + t * dst_step + zero_d, mask=on, other=0).to(tl.int64)
            keep = on & live
            if not NO_DST_PAD:
                keep = keep & (dst != pad)
            tl.store(state_ptr + _slot_offset(dst, s_slot, I32_OFFSET)[:, None] + inner,
                     st.to(state_ptr.dtype.element_ty), mask=tile & keep[:, None])
    if not SPEC:
        dst = tl.load(dst_ptr + b.to(tl.int64) * sj_row).to(tl.int64)
        tl.store(state_ptr + _slot_offset(dst, s_slot, I32_OFFSET) + inner, st.to(state_ptr.dtype.element_ty),
                 mask=tile & live[:, None])


def _t_max(longest: int) -> int:
    """The constexpr token bound: a power of two at least `longest` (few compiles)."""
    return triton.next_power_of_2(max(longest, 1))


def ssm_update(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
               num_accepted_tokens, cu_seqlens, out, *, dt_softplus=False, pad_slot_id=-1, variant=None):
    """Triton selective state update: grid (rows, heads, dim blocks), the tile in registers, int64 offsets."""
    flags = variant_flags("ssm_update", VARIANTS, FLAGS, variant)
    src = state_batch_indices if state_batch_indices.dim() == 2 else state_batch_indices.unsqueeze(1)
    dst = src if dst_state_batch_indices is None else dst_state_batch_indices
    dst = dst if dst.dim() == 2 else dst.unsqueeze(1)
    rows = src.shape[0]
    _, heads, dim, dstate = state.shape
    if rows == 0:
        return out
    varlen = cu_seqlens is not None
    longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if varlen else 1
    block_d = min(triton.next_power_of_2(dim), BLOCK_D_MAX)
    dummy = x
    zs = z.stride() if z is not None else (0, 0, 0)
    ds = D.stride() if D is not None else (0, 0)
    bs = dt_bias.stride() if dt_bias is not None else (0, 0)
    grid = (rows, heads, triton.cdiv(dim, block_d))
    _ssm_update_kernel[grid](
        state, x, dt, A, B, C, D if D is not None else dummy, z if z is not None else dummy,
        dt_bias if dt_bias is not None else dummy, src, dst,
        num_accepted_tokens if num_accepted_tokens is not None else src,
        cu_seqlens if varlen else src, out, dim, dstate, pad_slot_id, heads // B.shape[1],
        *state.stride(), *x.stride(), *dt.stride(), *A.stride(), *B.stride(), *C.stride(), *ds, *zs, *bs,
        *out.stride(), *src.stride(), *dst.stride(),
        T_MAX=_t_max(longest), BLOCK_D=block_d, BLOCK_N=triton.next_power_of_2(dstate), HAS_D=D is not None,
        HAS_Z=z is not None, HAS_BIAS=dt_bias is not None, SOFTPLUS=bool(dt_softplus),
        SPEC=num_accepted_tokens is not None, VARLEN=varlen, **flags)
    return out


def torch_fn(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
             num_accepted_tokens, cu_seqlens, out, *, dt_softplus=False, pad_slot_id=-1):
    """The same step in plain torch, row by row (float32 math; the reference's torch path)."""
    src = state_batch_indices if state_batch_indices.dim() == 2 else state_batch_indices.unsqueeze(1)
    dst = src if dst_state_batch_indices is None else dst_state_batch_indices
    dst = dst if dst.dim() == 2 else dst.unsqueeze(1)
    heads = state.shape[1]
    group = torch.arange(heads, device=x.device) // (heads // B.shape[1])
    spec = num_accepted_tokens is not None
    a = A.float()
    for b in range(src.shape[0]):
        lo, hi = (int(cu_seqlens[b]), int(cu_seqlens[b + 1])) if cu_seqlens is not None else (b, b + 1)
        col = max(int(num_accepted_tokens[b]) - 1, 0) if spec else 0
        slot = int(src[b, col])
        if slot == pad_slot_id or hi == lo:
            continue
        st = state[slot].float()
        for t, tok in enumerate(range(lo, hi)):
            d = dt[tok].float() + (dt_bias.float() if dt_bias is not None else 0.0)
            if dt_softplus:
                d = torch.nn.functional.softplus(d)
            xt = x[tok].float()
            st = st * torch.exp(a * d[..., None]) + (d * xt)[..., None] * B[tok].float()[group][:, None, :]
            y = (st * C[tok].float()[group][:, None, :]).sum(-1)
            if D is not None:
                y = y + D.float() * xt
            if z is not None:
                y = y * torch.nn.functional.silu(z[tok].float())
            out[tok] = y.to(out.dtype)
            if spec and int(dst[b, t]) != pad_slot_id:
                state[int(dst[b, t])] = st.to(state.dtype)
        if not spec:
            state[int(dst[b, 0])] = st.to(state.dtype)
    return out


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "SSM-NOCLAMP": {"NO_CLAMP": True}, "SSM-DSTPAD": {"NO_DST_PAD": True},
            "SSM-TOKSTRIDE": {"TOK_STRIDE": True}, "SSM-I32": {"I32_OFFSET": True}}


def contract_fn(variant=None):
    """The contract's signature over ``ssm_update`` with one zoo variant (None: the correct kernel)."""
    def fn(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
           num_accepted_tokens, cu_seqlens, out, *, dt_softplus=False, pad_slot_id=-1):
        return ssm_update(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
                          num_accepted_tokens, cu_seqlens, out, dt_softplus=dt_softplus, pad_slot_id=pad_slot_id,
                          variant=variant)
    return fn


# Zoo rows (docs/contracts.md#zoo): the SSM-state index bugs engines shipped; kernels.registry lists them.
ZOO = (
    ZooEntry(
        "SSM-NOCLAMP", "ssm_update", "wrong",
        "accepted count 0 read as index column -1, no clamp (vLLM PR #48475: an illegal address at nacc = 0)",
        "ssm_update(variant='SSM-NOCLAMP'): col = nacc - 1, not max(nacc - 1, 0)",
        "wrong when a row has nacc = 0 (--min-accepted 0): the slot comes from the previous row's last column "
        "or its row padding, or from before the index array (out of bounds)",
        cpu=("mismatch", "oob"), gpu=("mismatch", "fault"), options=(("min_accepted", "0"),)),
    ZooEntry(
        "SSM-DSTPAD", "ssm_update", "wrong",
        "a spec destination never checked for the pad: a pad dst's state stored to slot -1 or slot 0",
        "ssm_update(variant='SSM-DSTPAD'): the dst != pad test dropped from the per-token store",
        "wrong when a live row's draft column holds the pad: slot 0 changes (pad 0), or the bytes before "
        "the pool (pad -1: out of bounds)",
        cpu=("mismatch", "oob"), gpu=("mismatch", "fault")),
    ZooEntry(
        "SSM-TOKSTRIDE", "ssm_update", "wrong",
        "the index array's column (token) stride ignored: idx[b, t] read at b * stride(0) + t",
        "ssm_update(variant='SSM-TOKSTRIDE'): column t at offset t, not t * stride(1)",
        "wrong when the index columns are not adjacent (a strided view) and a row reads or stores column >= 1",
        cpu=("mismatch", "oob"), gpu=("mismatch", "fault")),
    ZooEntry(
        "SSM-I32", "ssm_update", "wrong",
        "the state offset slot * stride in 32 bits: a slot past 2^31 elements wraps (state-spaces/mamba #884 "
        "family)",
        "ssm_update(variant='SSM-I32'): slot.to(int32) * stride.to(int32)",
        "wrong or out of bounds when a named slot starts past 2^31 elements (exact cases: the pool in the arena)",
        cpu=("mismatch", "oob"), gpu=("mismatch", "fault"), memory=PAST_2GIB),
)

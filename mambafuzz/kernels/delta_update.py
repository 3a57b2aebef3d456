"""The gated delta rule of a decode or spec-decode step (contract ``delta_update``, docs/contracts.md#delta_update;
GDN and KDA).

``delta_update(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
intermediate_states_buffer, intermediate_state_indices, out, *, scale, use_qk_l2norm_in_kernel,
state_layout, pad_slot_id, cache_steps, max_query_len)``: one program per (sequence, value head, block
of V rows), as vLLM's ``fused_recurrent_gated_delta_rule_fwd_kernel``.  A program loads its sequence's
read slot (column ``max(nacc - 1, 0)`` in spec mode), returns on a pad slot or no tokens, holds its
``[BV, K]`` rows of the state in fp32 registers, and per token (a constexpr ``T_MAX`` bound and a
guard: no loop over a loaded bound, which Triton 3.5/3.6's interpreters cannot run) decays it,
applies the delta rule, writes the output and stores the state: to ``idx[n, t]`` unless the pad (spec),
to buffer row ``inter[n]`` step ``t`` for ``t < cache_steps``; the final state to ``idx[n, 0]``
(non-spec).  The state is addressed through the tensor's own strides, so V-major ``[S, HV, V, K]``
and K-major ``[S, HV, K, V]`` pools are one kernel; slot offsets are int64.

Zoo flags (``kernels.zoo``): ``TRANSPOSE`` (the launcher hands the kernel the other layout's dense
strides: a V-major state read and stored as K-major, sgl-kernel-npu #640), ``STEPS_UNCHECKED`` (the
per-step buffer written at ``row * cache_steps + t`` with no ``t < cache_steps`` check: past a row's
steps into the next row's, or past the buffer), ``PAD_STORE`` (a pad read slot skips only the load:
the sequence runs from a zero state and its final state is stored to the pad slot).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import variant_flags
from .zoo import ZooEntry

CONTRACT = "delta_update"
DESCRIPTION = ("Triton gated delta rule (GDN / KDA): grid (sequences x value heads, V blocks), the state in "
               "fp32 registers, stores per token (spec) or final, the per-step buffer, int64 slot offsets")
FLAGS = ("TRANSPOSE", "STEPS_UNCHECKED", "PAD_STORE")
MAX_BV = 32


@triton.jit(do_not_specialize=["scale", "pad", "cache_steps", "H", "HV", "K", "V", "idx_row_stride",
                               "idx_col_stride", "s_slot", "s_head", "s_v", "s_k", "sb_row", "sb_step", "sb_head",
                               "sb_v", "sb_k"])
def _delta_update_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, cu_ptr, idx_ptr, nacc_ptr, buf_ptr,
                         inter_ptr, out_ptr, scale, pad, cache_steps, H, HV, K, V, idx_row_stride, idx_col_stride,
                         s_slot, s_head, s_v, s_k, sb_row, sb_step, sb_head, sb_v, sb_k,
                         T_MAX: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, KDA: tl.constexpr,
                         BETA_V: tl.constexpr, L2NORM: tl.constexpr, SPEC: tl.constexpr, BUFFER: tl.constexpr,
                         STEPS_UNCHECKED: tl.constexpr, PAD_STORE: tl.constexpr):
    pid = tl.program_id(0)
    n = pid // HV
    hv = pid % HV
    h = hv // (HV // H)
    o_v = tl.program_id(1) * BV + tl.arange(0, BV)
    o_k = tl.arange(0, BK)
    mask_v = o_v < V
    mask_k = o_k < K
    mask_h = mask_v[:, None] & mask_k[None, :]
    bos = tl.load(cu_ptr + n).to(tl.int64)
    length = tl.load(cu_ptr + n + 1).to(tl.int64) - bos
    row = n.to(tl.int64) * idx_row_stride
    read_col = bos * 0
    if SPEC:
        read_col = tl.maximum(tl.load(nacc_ptr + n).to(tl.int64) - 1, 0)
    src = tl.load(idx_ptr + row + read_col * idx_col_stride).to(tl.int64)
    run = (src != pad) & (length > 0)
    if PAD_STORE:
        run = length > 0
    if run:
        within = hv.to(tl.int64) * s_head + o_v[:, None].to(tl.int64) * s_v + o_k[None, :].to(tl.int64) * s_k
        b_h = tl.zeros([BV, BK], dtype=tl.float32)
        if src != pad:  # always, unless PAD_STORE: then a pad sequence runs from zeros
            b_h = tl.load(state_ptr + src * s_slot + within, mask=mask_h, other=0.0).to(tl.float32)
        inter = src * 0 - 1
        if BUFFER:
            inter = tl.load(inter_ptr + n).to(tl.int64)
        b_within = hv.to(tl.int64) * sb_head + o_v[:, None].to(tl.int64) * sb_v + o_k[None, :].to(tl.int64) * sb_k
        for t in range(0, T_MAX):
            if t < length:
                tok = bos + t
                b_q = tl.load(q_ptr + (tok * H + h) * K + o_k, mask=mask_k, other=0.0).to(tl.float32)
                b_k = tl.load(k_ptr + (tok * H + h) * K + o_k, mask=mask_k, other=0.0).to(tl.float32)
                b_v = tl.load(v_ptr + (tok * HV + hv) * V + o_v, mask=mask_v, other=0.0).to(tl.float32)
                if L2NORM:
                    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
                    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
                b_q = b_q * scale
                if KDA:
                    b_g = tl.load(g_ptr + (tok * HV + hv) * K + o_k, mask=mask_k, other=0.0).to(tl.float32)
                    b_h = b_h * tl.exp(b_g)[None, :]
                else:
                    b_h = b_h * tl.exp(tl.load(g_ptr + tok * HV + hv).to(tl.float32))
                if BETA_V:
                    b_beta = tl.load(beta_ptr + (tok * HV + hv) * V + o_v, mask=mask_v, other=0.0).to(tl.float32)
                else:
                    b_beta = tl.load(beta_ptr + tok * HV + hv).to(tl.float32)
                b_u = b_beta * (b_v - tl.sum(b_h * b_k[None, :], axis=1))
                b_h = b_h + b_u[:, None] * b_k[None, :]
                b_o = tl.sum(b_h * b_q[None, :], axis=1)
                tl.store(out_ptr + (tok * HV + hv) * V + o_v, b_o.to(out_ptr.dtype.element_ty), mask=mask_v)
                if SPEC:
                    dst = tl.load(idx_ptr + row + t * idx_col_stride).to(tl.int64)
                    if dst != pad:
                        tl.store(state_ptr + dst * s_slot + within, b_h.to(state_ptr.dtype.element_ty), mask=mask_h)
                if BUFFER:
                    cache = (inter >= 0) & (t < cache_steps)
                    if STEPS_UNCHECKED:
                        cache = inter >= 0
                    if cache:
                        tl.store(buf_ptr + inter * sb_row + t * sb_step + b_within, b_h.to(buf_ptr.dtype.element_ty),
                                 mask=mask_h)
        if not SPEC:
            tl.store(state_ptr + src * s_slot + within, b_h.to(state_ptr.dtype.element_ty), mask=mask_h)


def _vk_strides(tensor, layout: str, transpose: bool):
    """(V stride, K stride) of a state tensor in `layout`; `transpose`: the other layout's dense ones."""
    last, second = tensor.stride(-1), tensor.stride(-2)
    sv, sk = (second, last) if layout == "vk" else (last, second)
    if transpose:
        kdim, vdim = (tensor.shape[-1], tensor.shape[-2]) if layout == "vk" else (tensor.shape[-2], tensor.shape[-1])
        sv, sk = (1, vdim) if layout == "vk" else (kdim, 1)
    return sv, sk


def delta_update(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                 intermediate_states_buffer, intermediate_state_indices, out, *, scale, use_qk_l2norm_in_kernel=False,
                 state_layout="vk", pad_slot_id=-1, cache_steps=0, max_query_len=0, variant=None):
    """Triton gated delta rule: grid (sequences x value heads, V blocks), fp32 state in registers."""
    flags = variant_flags("delta_update", VARIANTS, FLAGS, variant)
    transpose = flags.pop("TRANSPOSE")  # a launcher bug: the kernel gets the wrong strides
    rows = cu_seqlens.shape[0] - 1
    heads, kdim = q.shape[1], q.shape[2]
    value_heads, vdim = v.shape[1], v.shape[2]
    idx = ssm_state_indices if ssm_state_indices.dim() == 2 else ssm_state_indices.unsqueeze(1)
    if rows == 0 or max_query_len == 0:
        return out
    for t in (q, k, v, g, beta, out):
        if not t.is_contiguous():
            raise ValueError("delta_update: q, k, v, g, beta and out must be contiguous")
    sv, sk = _vk_strides(initial_state, state_layout, transpose)
    buffer = intermediate_states_buffer
    if buffer is not None:
        bv, bk = _vk_strides(buffer, state_layout, transpose)
        bstrides = (buffer.stride(0), buffer.stride(1), buffer.stride(2), bv, bk)
    else:
        bstrides = (0, 0, 0, 0, 0)
    block_v = min(triton.next_power_of_2(vdim), MAX_BV)
    grid = (rows * value_heads, triton.cdiv(vdim, block_v))
    _delta_update_kernel[grid](
        q, k, v, g, beta, initial_state, cu_seqlens, idx,
        num_accepted_tokens if num_accepted_tokens is not None else idx,
        buffer if buffer is not None else initial_state,
        intermediate_state_indices if intermediate_state_indices is not None else idx, out,
        float(scale), pad_slot_id, cache_steps, heads, value_heads, kdim, vdim, idx.stride(0), idx.stride(1),
        initial_state.stride(0), initial_state.stride(1), sv, sk, *bstrides,
        T_MAX=triton.next_power_of_2(max_query_len), BK=triton.next_power_of_2(kdim), BV=block_v,
        KDA=g.dim() == 3, BETA_V=beta.dim() == 3, L2NORM=bool(use_qk_l2norm_in_kernel),
        SPEC=num_accepted_tokens is not None, BUFFER=buffer is not None, num_warps=4, **flags)
    return out


def torch_fn(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
             intermediate_states_buffer, intermediate_state_indices, out, *, scale, use_qk_l2norm_in_kernel=False,
             state_layout="vk", pad_slot_id=-1, cache_steps=0, max_query_len=0):
    """The same step in plain torch, sequence by sequence (float32 math, heads at once; the torch path)."""
    idx = ssm_state_indices if ssm_state_indices.dim() == 2 else ssm_state_indices.unsqueeze(1)
    group = v.shape[1] // q.shape[1]
    kmajor = state_layout == "kv"
    spec = num_accepted_tokens is not None

    def put(target, state):
        target.copy_((state.transpose(-1, -2) if kmajor else state).to(target.dtype))

    def norm(x):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) if use_qk_l2norm_in_kernel else x
    for n in range(idx.shape[0]):
        lo, hi = int(cu_seqlens[n]), int(cu_seqlens[n + 1])
        src = int(idx[n, max(int(num_accepted_tokens[n]) - 1, 0) if spec else 0])
        if src == pad_slot_id or hi == lo:
            continue
        state = initial_state[src].float()
        state = state.transpose(-1, -2) if kmajor else state.clone()   # [HV, V, K]
        row = -1 if intermediate_state_indices is None else int(intermediate_state_indices[n])
        for t in range(hi - lo):
            tok = lo + t
            qt = norm(q[tok].float().repeat_interleave(group, 0)) * scale
            kt = norm(k[tok].float().repeat_interleave(group, 0))
            decay = torch.exp(g[tok].float())
            state = state * (decay[:, None, :] if g.dim() == 3 else decay[:, None, None])
            bt = beta[tok].float() if beta.dim() == 3 else beta[tok].float()[:, None]
            u = bt * (v[tok].float() - (state * kt[:, None, :]).sum(-1))
            state = state + u[..., None] * kt[:, None, :]
            out[tok] = (state * qt[:, None, :]).sum(-1).to(out.dtype)
            if spec and int(idx[n, t]) != pad_slot_id:
                put(initial_state[int(idx[n, t])], state)
            if row >= 0 and t < cache_steps:
                put(intermediate_states_buffer[row, t], state)
        if not spec:
            put(initial_state[src], state)
    return out


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "DU-TRANSPOSE": {"TRANSPOSE": True}, "DU-STEPS": {"STEPS_UNCHECKED": True},
            "DU-PADSTORE": {"PAD_STORE": True}}


def contract_fn(variant=None):
    """The contract's signature over ``delta_update`` with one zoo variant (None: the correct kernel)."""
    def fn(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
           intermediate_states_buffer, intermediate_state_indices, out, *, scale, use_qk_l2norm_in_kernel=False,
           state_layout="vk", pad_slot_id=-1, cache_steps=0, max_query_len=0):
        return delta_update(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                            intermediate_states_buffer, intermediate_state_indices, out, scale=scale,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout,
                            pad_slot_id=pad_slot_id, cache_steps=cache_steps, max_query_len=max_query_len,
                            variant=variant)
    return fn


# Zoo rows (docs/contracts.md#zoo): the delta-rule state bugs engines shipped; kernels.registry lists them.
ZOO = (
    ZooEntry(
        "DU-TRANSPOSE", "delta_update", "wrong",
        "a V-major state [.., V, K] read and stored as K-major [.., K, V]: a silently transposed state "
        "(sgl-kernel-npu #640)",
        "delta_update(variant='DU-TRANSPOSE'): the launcher passes the other layout's dense (V, K) strides",
        "wrong on every live sequence: K != V scrambles the state within its head, K == V transposes it",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "DU-STEPS", "delta_update", "wrong",
        "the per-step buffer indexed past its steps: cache_steps < tokens, unchecked (SGLang's "
        "fused_recurrent_gated_delta_rule_update writes row * cache_steps + t for every t)",
        "delta_update(variant='DU-STEPS'): no t < cache_steps check on the buffer store",
        "wrong when a sequence has more tokens than the buffer's steps: the next row's first steps, or "
        "past the buffer (out of bounds)",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
    ZooEntry(
        "DU-PADSTORE", "delta_update", "wrong",
        "the final state stored even when the read slot was pad (the pad check guards the load only)",
        "delta_update(variant='DU-PADSTORE'): a pad sequence runs from zeros and stores slot P",
        "wrong when a sequence's read slot is the pad: slot 0 (pad 0) or the bytes before the pool "
        "(pad -1: out of bounds), and in spec mode its live draft columns",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
)

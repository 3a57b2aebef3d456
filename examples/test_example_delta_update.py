"""A gated-delta-rule decode kernel as vLLM writes it, behind the `delta_update` adapter.

The engine's function is shaped like vLLM's ``fused_recurrent_gated_delta_rule``: packed tokens with
``cu_seqlens``, a V-major pool ``[S, HV, V, K]`` updated in place, ``ssm_state_indices`` ``[N]`` or
``[N, C]``, ``num_accepted_tokens`` for spec decode, and the null block: it skips ``idx <= 0`` (so the
test runs it under ``pad=0``).  It returns a new output.  It has no K-major pools, no per-step buffer,
and its non-spec path stores a token's state to ``idx[n, t]`` (one token per sequence in decode), so the
test narrows the contract to what it takes (``state_layout="vk", step_buffer="never",
nonspec_tokens="1"``: those cases are never drawn); the adapter still declines them
(``mambafuzz.reject``) should one come (a saved crash file).  The kernel is written
the engines' way: one program per (V block, sequence x head), a token loop over a bound loaded from
memory (Triton 3.7+'s interpreter, or mambafuzz's mends), int32 sizes, an early ``return``.
"""
import pytest
import torch
import triton
import triton.language as tl

import mambafuzz


@triton.jit
def _engine_delta_kernel(q, k, v, g, beta, o, h0, cu_seqlens, ssm_state_indices, num_accepted_tokens, scale,
                         stride_state, stride_indices_seq, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
                         V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, IS_SPEC: tl.constexpr,
                         IS_KDA: tl.constexpr, BETA_PER_V: tl.constexpr, L2NORM: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    T = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
    if T == 0:
        return
    col = 0
    if IS_SPEC:
        col = tl.maximum(tl.load(num_accepted_tokens + i_n) - 1, 0)
    state_idx = tl.load(ssm_state_indices + i_n * stride_indices_seq + col).to(tl.int64)
    if state_idx <= 0:  # the null block
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_h = (o_v[:, None] < V) & (o_k[None, :] < K)
    p_h = h0 + i_hv * V * K + o_v[:, None] * K + o_k[None, :]
    b_h = tl.load(p_h + state_idx * stride_state, mask=mask_h, other=0).to(tl.float32)
    for i_t in range(0, T):
        tok = bos + i_t
        b_q = tl.load(q + (tok * H + i_h) * K + o_k, mask=o_k < K, other=0).to(tl.float32)
        b_k = tl.load(k + (tok * H + i_h) * K + o_k, mask=o_k < K, other=0).to(tl.float32)
        b_v = tl.load(v + (tok * HV + i_hv) * V + o_v, mask=o_v < V, other=0).to(tl.float32)
        if L2NORM:
            b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
            b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        b_q = b_q * scale
        if IS_KDA:
            b_h *= tl.exp(tl.load(g + (tok * HV + i_hv) * K + o_k, mask=o_k < K, other=0).to(tl.float32))[None, :]
        else:
            b_h *= tl.exp(tl.load(g + tok * HV + i_hv).to(tl.float32))
        b_v -= tl.sum(b_h * b_k[None, :], 1)
        if BETA_PER_V:
            b_v *= tl.load(beta + (tok * HV + i_hv) * V + o_v, mask=o_v < V, other=0).to(tl.float32)
        else:
            b_v *= tl.load(beta + tok * HV + i_hv).to(tl.float32)
        b_h += b_v[:, None] * b_k[None, :]
        tl.store(o + (tok * HV + i_hv) * V + o_v, tl.sum(b_h * b_q[None, :], 1).to(o.dtype.element_ty), mask=o_v < V)
        final_idx = tl.load(ssm_state_indices + i_n * stride_indices_seq + i_t).to(tl.int64)
        if final_idx > 0:
            tl.store(p_h + final_idx * stride_state, b_h.to(h0.dtype.element_ty), mask=mask_h)


def fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale, initial_state, cu_seqlens, ssm_state_indices,
                                     num_accepted_tokens=None, use_qk_l2norm_in_kernel=False):
    """The engine's entry point: q, k [1, T, H, K], v [1, T, HV, V]; returns o [1, T, HV, V]."""
    _, _, heads, kdim = k.shape
    value_heads, vdim = v.shape[2], v.shape[3]
    rows = cu_seqlens.shape[0] - 1
    o = q.new_empty(v.shape)
    block_v = min(triton.next_power_of_2(vdim), 8)
    stride_seq = ssm_state_indices.stride(0)
    if rows:
        _engine_delta_kernel[(triton.cdiv(vdim, block_v), rows * value_heads)](
            q, k, v, g, beta, o, initial_state, cu_seqlens, ssm_state_indices,
            num_accepted_tokens if num_accepted_tokens is not None else ssm_state_indices, scale,
            initial_state.stride(0), stride_seq, H=heads, HV=value_heads, K=kdim, V=vdim,
            BK=triton.next_power_of_2(kdim), BV=block_v, IS_SPEC=num_accepted_tokens is not None,
            IS_KDA=g.dim() == 4, BETA_PER_V=beta.dim() == 4, L2NORM=use_qk_l2norm_in_kernel, num_warps=1)
    return o


def delta_update(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                 intermediate_states_buffer, intermediate_state_indices, out, *, scale, use_qk_l2norm_in_kernel,
                 state_layout, pad_slot_id, cache_steps, max_query_len):
    """The adapter: the contract's arguments in the engine's call; what it lacks is declined."""
    if state_layout != "vk":
        mambafuzz.reject("V-major pools only")
    if intermediate_states_buffer is not None:
        mambafuzz.reject("no per-step buffer")
    if num_accepted_tokens is None and max_query_len > 1:
        mambafuzz.reject("non-spec decode is one token per sequence")
    if pad_slot_id != 0:
        mambafuzz.reject("the null block is slot 0")
    o = fused_recurrent_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], scale, initial_state,
                                         cu_seqlens, ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel)
    out.copy_(o[0])


@pytest.mark.matrix
@pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 7),
                    reason="the engine kernel's token loop has a loaded bound: Triton 3.7+'s interpreter")
def test_the_engine_delta_rule_is_right_on_what_it_supports():
    report = mambafuzz.check(delta_update, "delta_update", max_examples=40, database=None, pad="0",
                             state_layout="vk", step_buffer="never", nonspec_tokens="1")
    assert report.examples == 40 and not report.tally.rejections, report.tally.rejections  # none drawn

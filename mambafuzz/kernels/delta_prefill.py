"""The gated-delta-rule prefill with prefix caching (contract ``delta_prefill``, docs/contracts.md#delta_prefill;
GDN and KDA), chunked.

``delta_prefill(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state,
initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out,
*, scale, use_qk_l2norm_in_kernel, state_layout, pad_slot_id, block_size, output_final_state, max_seqlen)``:
one program per (sequence, value head, block of V rows).  A program loads its sequence's initial entry and
token count, returns on the pad or no tokens, loads its ``[BV, K]`` rows of the initial state (zeros
without one) into fp32 registers before it stores anything, and scans the sequence in chunks of
``CHUNK`` tokens, each block boundary also ending a chunk.  A chunk is the WY form of the delta rule, as
FLA's ``chunk_gated_delta_rule`` computes it: the cumulative log decay ``G``, the decayed key Gram
matrix ``A[t, j] = k_t . (k_j exp(G_t - G_j))`` (``tl.dot``), a forward substitution for the chunk's
``u_t = beta_t (v_t - exp(G_t) S_0 k_t - sum_{j<t} A[t, j] u_j)``, the outputs as two products
(``q S_0`` decayed, plus the causal ``q . k`` matrix times ``u``), and the chunk's final state as
``exp(G_end) S_0 + u^T (k exp(G_end - G))``.  So every float sum differs from a sequential scan's.  At
a boundary strictly inside the sequence the state goes to ``idx[n, first + k]``, the final one to
``idx[n, last]`` when ``output_final_state``; each unless the pad.  KDA's per-K decay uses ``k exp(G)``
and ``k exp(-G)`` (the contract draws decays whose chunk sums stay in float32's range).  The dot
products are fp32 (``input_precision="ieee"``); slot offsets int64; the pool is addressed through its
own strides (both layouts).

Zoo flags (constexpr; ``kernels.zoo``): ``KDA_LAYOUT`` (a KDA state stored in the other layout's dense
strides: vLLM #41292), ``TAIL_GATE`` (a partial tail chunk's gates loaded up to the batch's end, not the
sequence's: the final state decays by the next sequence's gates: cuLA #38), ``NO_FINAL_CHECK`` (the final
state stored though none was asked for: cuLA #66), ``NO_HAS_INIT`` (``has_initial_state`` ignored:
tpu-inference #2431), ``WRONG_CHUNK`` (a boundary stores the state of the chunk before it: SGLang #31833 /
#33450), ``BF16_CKPT`` (boundary states rounded through bfloat16: SGLang #34820), ``ZERO_LEN`` (an empty
sequence runs one token: the next sequence's, or past the tensors: vllm-ascend #11438 / #11807),
``I32_OFFSET`` (a slot's offset ``slot * stride`` formed in 32 bits: wraps past 2^31 elements).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import variant_flags
from .zoo import PAST_2GIB, ZooEntry

CONTRACT = "delta_prefill"
DESCRIPTION = ("Triton gated-delta-rule prefill (GDN / KDA), chunked (16 tokens, WY form with tl.dot): grid "
               "(sequences x value heads, V blocks), the initial state in registers before any store, a state "
               "stored at every block boundary and the final one, int64 slot offsets")
FLAGS = ("KDA_LAYOUT", "TAIL_GATE", "NO_FINAL_CHECK", "NO_HAS_INIT", "WRONG_CHUNK", "BF16_CKPT", "ZERO_LEN",
         "I32_OFFSET")
CHUNK = 16
MAX_BV = 32


@triton.jit
def _slot_offset(slot, stride, I32_OFFSET: tl.constexpr):
    """Elements from the pool's start to `slot`'s: int64 (I32_OFFSET: the product in 32 bits, wrapping)."""
    if I32_OFFSET:
        return (slot.to(tl.int32) * stride.to(tl.int32)).to(tl.int64)
    return slot.to(tl.int64) * stride


@triton.jit(do_not_specialize=["scale", "pad", "block_size", "n_tokens", "H", "HV", "K", "V", "idx_row_stride",
                               "idx_col_stride", "s_slot", "s_head", "s_v", "s_k", "t_v", "t_k"])
def _delta_prefill_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, cu_ptr, idx_ptr, has_ptr, init_ptr,
                          first_ptr, last_ptr, computed_ptr, out_ptr, scale, pad, block_size, n_tokens, H, HV, K, V,
                          idx_row_stride, idx_col_stride, s_slot, s_head, s_v, s_k, t_v, t_k,
                          CH: tl.constexpr, N_CHUNKS: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                          KDA: tl.constexpr, BETA_V: tl.constexpr, L2NORM: tl.constexpr, APC: tl.constexpr,
                          FINAL: tl.constexpr, KDA_LAYOUT: tl.constexpr, TAIL_GATE: tl.constexpr,
                          NO_FINAL_CHECK: tl.constexpr, NO_HAS_INIT: tl.constexpr, WRONG_CHUNK: tl.constexpr,
                          BF16_CKPT: tl.constexpr, ZERO_LEN: tl.constexpr, I32_OFFSET: tl.constexpr):
    pid = tl.program_id(0)
    n = pid // HV
    hv = pid % HV
    h = hv // (HV // H)
    o_v = tl.program_id(1) * BV + tl.arange(0, BV)
    o_k = tl.arange(0, BK)
    o_c = tl.arange(0, CH)
    mask_v = o_v < V
    mask_k = o_k < K
    mask_h = mask_v[:, None] & mask_k[None, :]
    bos = tl.load(cu_ptr + n).to(tl.int64)
    length = tl.load(cu_ptr + n + 1).to(tl.int64) - bos
    row = n.to(tl.int64) * idx_row_stride
    c_init = bos * 0
    c_first = bos * 0
    c_last = bos * 0
    nb = bos * 0 - 1  # tokens in at the next block boundary (-1: none)
    if APC:
        c_init = tl.load(init_ptr + n).to(tl.int64)
        c_first = tl.load(first_ptr + n).to(tl.int64)
        c_last = tl.load(last_ptr + n).to(tl.int64)
        nb = block_size - tl.load(computed_ptr + n).to(tl.int64) % block_size
    src = tl.load(idx_ptr + row + c_init * idx_col_stride).to(tl.int64)
    if ZERO_LEN:
        length = tl.maximum(length, 1)
    if (src != pad) & (length > 0):
        within = hv.to(tl.int64) * s_head + o_v[:, None].to(tl.int64) * s_v + o_k[None, :].to(tl.int64) * s_k
        st_v = s_v
        st_k = s_k
        if KDA_LAYOUT and KDA:
            st_v = t_v
            st_k = t_k
        within_st = hv.to(tl.int64) * s_head + o_v[:, None].to(tl.int64) * st_v + o_k[None, :].to(tl.int64) * st_k
        b_h = tl.zeros([BV, BK], dtype=tl.float32)
        has = tl.load(has_ptr + n).to(tl.int32)
        if NO_HAS_INIT:
            has = has * 0 + 1
        if has != 0:
            b_h = tl.load(state_ptr + _slot_offset(src, s_slot, I32_OFFSET) + within, mask=mask_h, other=0.0).to(tl.float32)
        b_prev = b_h
        pos = bos * 0
        kst = bos * 0
        for _c in range(0, N_CHUNKS):
            if pos < length:
                end = tl.minimum(pos + CH, length)
                if APC:
                    if nb < length:
                        end = tl.minimum(end, nb)
                rel = pos + o_c
                m_c = rel < end
                tok = bos + rel
                m_ck = m_c[:, None] & mask_k[None, :]
                m_cv = m_c[:, None] & mask_v[None, :]
                b_k = tl.load(k_ptr + (tok[:, None] * H + h) * K + o_k[None, :], mask=m_ck, other=0.0).to(tl.float32)
                b_q = tl.load(q_ptr + (tok[:, None] * H + h) * K + o_k[None, :], mask=m_ck, other=0.0).to(tl.float32)
                b_v = tl.load(v_ptr + (tok[:, None] * HV + hv) * V + o_v[None, :], mask=m_cv,
                              other=0.0).to(tl.float32)
                if L2NORM:
                    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=1) + 1e-6)[:, None]
                    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=1) + 1e-6)[:, None]
                b_q = b_q * scale
                m_g = m_c
                if TAIL_GATE:
                    m_g = tok < n_tokens
                causal = o_c[:, None] >= o_c[None, :]
                if KDA:
                    b_g = tl.load(g_ptr + (tok[:, None] * HV + hv) * K + o_k[None, :],
                                  mask=m_g[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
                    b_G = tl.cumsum(b_g, axis=0)
                    g_end = tl.sum(tl.where(o_c[:, None] == CH - 1, b_G, 0.0), axis=0)        # [BK]
                    b_kg = b_k * tl.exp(b_G)
                    b_kn = b_k * tl.exp(-b_G)
                    b_qg = b_q * tl.exp(b_G)
                    b_A = tl.dot(b_kg, tl.trans(b_kn), input_precision="ieee")
                    b_hk = tl.dot(b_kg, tl.trans(b_h), input_precision="ieee")
                    b_Aq = tl.dot(b_qg, tl.trans(b_kn), input_precision="ieee")
                    b_oh = tl.dot(b_qg, tl.trans(b_h), input_precision="ieee")
                    b_kend = b_k * tl.exp(g_end[None, :] - b_G)
                    decay_end = tl.exp(g_end)[None, :]
                else:
                    b_g = tl.load(g_ptr + tok * HV + hv, mask=m_g, other=0.0).to(tl.float32)
                    b_G = tl.cumsum(b_g, axis=0)
                    g_end = tl.sum(tl.where(o_c == CH - 1, b_G, 0.0), axis=0)
                    b_D = tl.where(causal, tl.exp(b_G[:, None] - b_G[None, :]), 0.0)
                    b_A = tl.dot(b_k, tl.trans(b_k), input_precision="ieee") * b_D
                    b_hk = tl.dot(b_k, tl.trans(b_h), input_precision="ieee") * tl.exp(b_G)[:, None]
                    b_Aq = tl.dot(b_q, tl.trans(b_k), input_precision="ieee") * b_D
                    b_oh = tl.dot(b_q, tl.trans(b_h), input_precision="ieee") * tl.exp(b_G)[:, None]
                    b_kend = b_k * tl.exp(g_end - b_G)[:, None]
                    decay_end = tl.exp(g_end)
                if BETA_V:
                    b_b = tl.load(beta_ptr + (tok[:, None] * HV + hv) * V + o_v[None, :], mask=m_cv,
                                  other=0.0).to(tl.float32)
                else:
                    b_b = tl.load(beta_ptr + tok * HV + hv, mask=m_c, other=0.0).to(tl.float32)[:, None]
                b_A = tl.where(o_c[:, None] > o_c[None, :], b_A, 0.0)
                b_w = b_b * (b_v - b_hk)  # beta_t (v_t - exp(G_t) S_0 k_t)
                b_u = tl.zeros([CH, BV], dtype=tl.float32)
                for t in range(0, CH):  # forward substitution: row t of u from the rows before it
                    if t < end - pos:   # (rows after t are still 0; no tl.sum: the interpreter runs it slowly)
                        b_r = tl.dot(b_A, b_u, input_precision="ieee")
                        b_u = tl.where((o_c == t)[:, None], b_w - b_b * b_r, b_u)
                b_o = b_oh + tl.dot(tl.where(causal, b_Aq, 0.0), b_u, input_precision="ieee")
                tl.store(out_ptr + (tok[:, None] * HV + hv) * V + o_v[None, :], b_o.to(out_ptr.dtype.element_ty),
                         mask=m_cv)
                b_prev = b_h
                b_h = b_h * decay_end + tl.dot(tl.trans(b_u), b_kend, input_precision="ieee")
                pos = end
                if APC:
                    if (pos == nb) & (pos < length):  # a block boundary inside the sequence
                        dst = tl.load(idx_ptr + row + (c_first + kst) * idx_col_stride).to(tl.int64)
                        if dst != pad:
                            b_s = b_h
                            if WRONG_CHUNK:
                                b_s = b_prev
                            if BF16_CKPT:
                                b_s = b_s.to(tl.bfloat16).to(tl.float32)
                            tl.store(state_ptr + _slot_offset(dst, s_slot, I32_OFFSET) + within_st, b_s.to(state_ptr.dtype.element_ty),
                                     mask=mask_h)
                        kst += 1
                        nb += block_size
        if FINAL or NO_FINAL_CHECK:
            dst = tl.load(idx_ptr + row + c_last * idx_col_stride).to(tl.int64)
            if dst != pad:
                tl.store(state_ptr + _slot_offset(dst, s_slot, I32_OFFSET) + within_st, b_h.to(state_ptr.dtype.element_ty), mask=mask_h)


def _vk_strides(tensor, layout: str):
    """(V stride, K stride) of a state tensor in `layout`, and the other layout's dense ones."""
    last, second = tensor.stride(-1), tensor.stride(-2)
    kdim, vdim = (tensor.shape[-1], tensor.shape[-2]) if layout == "vk" else (tensor.shape[-2], tensor.shape[-1])
    own = (second, last) if layout == "vk" else (last, second)
    other = (1, vdim) if layout == "vk" else (kdim, 1)
    return own, other


def delta_prefill(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state, initial_state_idx,
                  block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *,
                  scale, use_qk_l2norm_in_kernel=False, state_layout="vk", pad_slot_id=-1, block_size=0,
                  output_final_state=True, max_seqlen=0, variant=None):
    """Triton gated-delta-rule prefill, chunked: grid (sequences x value heads, V blocks)."""
    flags = variant_flags("delta_prefill", VARIANTS, FLAGS, variant)
    rows = cu_seqlens.shape[0] - 1
    heads, kdim = q.shape[1], q.shape[2]
    value_heads, vdim = v.shape[1], v.shape[2]
    idx = ssm_state_indices if ssm_state_indices.dim() == 2 else ssm_state_indices.unsqueeze(1)
    if rows == 0 or (max_seqlen == 0 and not flags["ZERO_LEN"]):
        return out
    for t in (q, k, v, g, beta, out):
        if not t.is_contiguous():
            raise ValueError("delta_prefill: q, k, v, g, beta and out must be contiguous")
    apc = initial_state_idx is not None
    longest = max(int(max_seqlen), 1)
    chunks = triton.cdiv(longest, CHUNK) + (triton.cdiv(longest, block_size) + 1 if apc and block_size else 0)
    (sv, sk), (tv, tk) = _vk_strides(ssm_state, state_layout)
    block_v = max(16, min(triton.next_power_of_2(vdim), MAX_BV))
    grid = (rows * value_heads, triton.cdiv(vdim, block_v))
    _delta_prefill_kernel[grid](
        q, k, v, g, beta, ssm_state, cu_seqlens, idx, has_initial_state,
        initial_state_idx if apc else cu_seqlens, block_idx_first_scheduled_token if apc else cu_seqlens,
        block_idx_last_scheduled_token if apc else cu_seqlens, num_computed_tokens if apc else cu_seqlens, out,
        float(scale), pad_slot_id, max(int(block_size), 1), q.shape[0], heads, value_heads, kdim, vdim,
        idx.stride(0), idx.stride(1), ssm_state.stride(0), ssm_state.stride(1), sv, sk, tv, tk,
        CH=CHUNK, N_CHUNKS=triton.next_power_of_2(chunks), BK=max(16, triton.next_power_of_2(kdim)), BV=block_v,
        KDA=g.dim() == 3, BETA_V=beta.dim() == 3, L2NORM=bool(use_qk_l2norm_in_kernel), APC=apc,
        FINAL=bool(output_final_state), num_warps=4, **flags)
    return out


def torch_fn(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state, initial_state_idx,
             block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *, scale,
             use_qk_l2norm_in_kernel=False, state_layout="vk", pad_slot_id=-1, block_size=0, output_final_state=True,
             max_seqlen=0):
    """The same prefill in plain torch, sequence by sequence, token by token (float32 math, heads at once; the
    torch path)."""
    idx = ssm_state_indices if ssm_state_indices.dim() == 2 else ssm_state_indices.unsqueeze(1)
    group = v.shape[1] // q.shape[1]
    kmajor = state_layout == "kv"
    apc = initial_state_idx is not None

    def put(slot, state):
        ssm_state[slot].copy_((state.transpose(-1, -2) if kmajor else state).to(ssm_state.dtype))

    def norm(x):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) if use_qk_l2norm_in_kernel else x
    for n in range(idx.shape[0]):
        lo, hi = int(cu_seqlens[n]), int(cu_seqlens[n + 1])
        init, first, last = ((int(initial_state_idx[n]), int(block_idx_first_scheduled_token[n]),
                              int(block_idx_last_scheduled_token[n])) if apc else (0, 0, 0))
        src = int(idx[n, init])
        if src == pad_slot_id or hi == lo:
            continue
        if bool(has_initial_state[n]):
            state = ssm_state[src].float()
            state = state.transpose(-1, -2).clone() if kmajor else state.clone()   # [HV, V, K]
        else:
            state = torch.zeros((v.shape[1], v.shape[2], q.shape[2]), dtype=torch.float32, device=q.device)
        boundary = block_size - int(num_computed_tokens[n]) % block_size if apc else -1
        stored = 0
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
            if t + 1 == boundary and t + 1 < hi - lo:
                dst = int(idx[n, first + stored])
                if dst != pad_slot_id:
                    put(dst, state)
                stored += 1
                boundary += block_size
        if output_final_state and int(idx[n, last]) != pad_slot_id:
            put(int(idx[n, last]), state)
    return out


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "DP-KDALAYOUT": {"KDA_LAYOUT": True}, "DP-TAIL": {"TAIL_GATE": True},
            "DP-NOFINAL": {"NO_FINAL_CHECK": True}, "DP-NOINIT": {"NO_HAS_INIT": True},
            "DP-WRONGCHUNK": {"WRONG_CHUNK": True}, "DP-BF16CKPT": {"BF16_CKPT": True},
            "DP-ZEROLEN": {"ZERO_LEN": True}, "DP-I32": {"I32_OFFSET": True}}


def contract_fn(variant=None):
    """The contract's signature over ``delta_prefill`` with one zoo variant (None: the correct kernel)."""
    def fn(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state, initial_state_idx,
           block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *, scale,
           use_qk_l2norm_in_kernel=False, state_layout="vk", pad_slot_id=-1, block_size=0, output_final_state=True,
           max_seqlen=0):
        return delta_prefill(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state,
                             initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
                             num_computed_tokens, out, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                             state_layout=state_layout, pad_slot_id=pad_slot_id, block_size=block_size,
                             output_final_state=output_final_state, max_seqlen=max_seqlen, variant=variant)
    return fn


# Zoo rows (docs/contracts.md#zoo): the chunked-prefill state bugs engines shipped; kernels.registry lists them.
ZOO = (
    ZooEntry(
        "DP-KDALAYOUT", "delta_prefill", "wrong",
        "a KDA prefill's state stored in the other layout (vLLM #41292)",
        "delta_prefill(variant='DP-KDALAYOUT'): with a per-K gate, stores use the other layout's dense (V, K) strides",
        "wrong on every stored KDA state: K != V scrambles it within its head, K == V transposes it; where the "
        "initial slot is also a destination, lanes store what other lanes load (an intra-program race)",
        cpu=("mismatch", "race"), gpu=("mismatch",), options=(("gate", "kda"),)),
    ZooEntry(
        "DP-TAIL", "delta_prefill", "wrong",
        "the wrong final state after a partial tail chunk (cuLA #38)",
        "delta_prefill(variant='DP-TAIL'): a chunk's gates are masked at the batch's end, not the sequence's, so "
        "a partial tail chunk's final decay takes in the next sequence's gates",
        "wrong final state (and the next boundary's) when a sequence ends mid-chunk and another follows it",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "DP-NOFINAL", "delta_prefill", "wrong",
        "a final state written though none was asked for (output_final_state False; cuLA #66)",
        "delta_prefill(variant='DP-NOFINAL'): the final store ignores output_final_state",
        "wrong slot values when no final state is asked for and a live sequence has a destination",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "DP-NOINIT", "delta_prefill", "wrong",
        "has_initial_state ignored: a new sequence starts from its slot's stale state (tpu-inference #2431)",
        "delta_prefill(variant='DP-NOINIT'): the initial state is always loaded",
        "wrong outputs and states for every live sequence without an initial state",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "DP-WRONGCHUNK", "delta_prefill", "wrong",
        "the wrong chunk's state cached at a block boundary (SGLang #31833 / #33450)",
        "delta_prefill(variant='DP-WRONGCHUNK'): a boundary stores the state before the chunk that ends there",
        "wrong boundary states with prefix caching; final states and outputs right",
        cpu=("mismatch",), gpu=("mismatch",), options=(("cache_mode", "all"),)),
    ZooEntry(
        "DP-BF16CKPT", "delta_prefill", "wrong",
        "a block-boundary checkpoint stored through bfloat16, not the state's dtype (SGLang #34820)",
        "delta_prefill(variant='DP-BF16CKPT'): boundary states rounded to bfloat16 before the store",
        "boundary states off by bfloat16's rounding: outside the bound for a float32 state with float32 "
        "activations (16-bit activations allow chunk intermediates that coarse)",
        cpu=("mismatch",), gpu=("mismatch",), options=(("cache_mode", "all"),)),
    ZooEntry(
        "DP-ZEROLEN", "delta_prefill", "wrong",
        "a zero-length sequence read out of bounds (vllm-ascend #11438 / #11807)",
        "delta_prefill(variant='DP-ZEROLEN'): an empty sequence runs one token: the next sequence's first, or "
        "the one past the tensors",
        "the next sequence's first output overwritten and a state stored for the empty one (mismatch), or a "
        "load past q (out of bounds)",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault")),
    ZooEntry(
        "DP-I32", "delta_prefill", "wrong",
        "the state offset slot * stride in 32 bits: a slot past 2^31 elements wraps (the int32-offset family of "
        "vLLM #20838 and state-spaces/mamba #884)",
        "delta_prefill(variant='DP-I32'): slot.to(int32) * stride.to(int32)",
        "wrong or out of bounds when a slot the prefill reads or stores starts past 2^31 elements (exact cases: "
        "the pool in the arena)",
        cpu=("mismatch", "oob", "race"), gpu=("fault", "mismatch"), memory=PAST_2GIB),
)

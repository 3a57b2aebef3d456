"""A chunked gated-delta-rule prefill as an engine calls it, behind the `delta_prefill` adapter.

The engine side is shaped like vLLM's GDN prefill around FLA's ``chunk_gated_delta_rule``: gather the
sequences' initial states from the pool (``ssm_state[idx]``), zero those without ``has_initial_state``,
run the chunked kernel on the packed tokens (``cu_seqlens``), and write the final states back by index.
The chunked function here is a plain-torch stand-in with FLA's conventions and FLA's float math: a
K-major state ``[N, HV, K, V]``, 64-token chunks per sequence, the WY form (the decayed, beta-scaled key
Gram matrix inverted by a triangular solve, ``u`` and ``w``), and ``v - w S`` cast to the keys' dtype
before it updates the state, as FLA does.  It takes a per-head gate only (GDN), no prefix caching, and
K-major pools, so the test narrows the contract to that (``gate="gdn", cache_mode="none",
state_layout="kv"``); the adapter still declines anything else (``mambafuzz.reject``) should a saved
crash file bring it.  It runs on the CPU as it is (no Triton): the contract's bound covers its chunked
order and its 16-bit intermediates.
"""
import pytest
import torch

import mambafuzz

CHUNK = 64


def chunk_gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, output_final_state, cu_seqlens,
                           use_qk_l2norm_in_kernel=False):
    """The engine's chunked kernel (a stand-in): q, k ``[1, T, H, K]``, v ``[1, T, HV, V]``, g, beta ``[1, T,
    HV]``, initial_state ``[N, HV, K, V]`` float32; returns (o ``[1, T, HV, V]``, final states or None)."""
    q, k, v, g, beta = (t[0] for t in (q, k, v, g, beta))
    heads, value_heads = q.shape[1], v.shape[1]
    group = value_heads // heads
    o = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
    finals = initial_state.clone()
    for n in range(len(cu_seqlens) - 1):
        lo, hi = int(cu_seqlens[n]), int(cu_seqlens[n + 1])
        state = initial_state[n].float().clone()                       # [HV, K, V]
        for start in range(lo, hi, CHUNK):
            end = min(start + CHUNK, hi)
            qc = q[start:end].float().repeat_interleave(group, 1).transpose(0, 1)    # [HV, C, K]
            kc = k[start:end].float().repeat_interleave(group, 1).transpose(0, 1)
            if use_qk_l2norm_in_kernel:
                qc = qc / torch.sqrt((qc * qc).sum(-1, keepdim=True) + 1e-6)
                kc = kc / torch.sqrt((kc * kc).sum(-1, keepdim=True) + 1e-6)
            qc = qc * scale
            vc = v[start:end].float().transpose(0, 1)                                 # [HV, C, V]
            gc = g[start:end].float().transpose(0, 1).cumsum(-1)                      # [HV, C]
            bc = beta[start:end].float().transpose(0, 1)[..., None]                   # [HV, C, 1]
            decay = torch.exp(gc[:, :, None] - gc[:, None, :]).tril()               # [HV, C, C]
            a = (bc * kc @ kc.transpose(1, 2) * decay).tril(-1)
            eye = torch.eye(end - start, device=a.device).expand_as(a)
            u = torch.linalg.solve_triangular(eye + a, bc * vc, upper=False, unitriangular=True)
            w = torch.linalg.solve_triangular(eye + a, bc * kc * torch.exp(gc)[..., None], upper=False,
                                              unitriangular=True)
            v_new = (u - w @ state).to(k.dtype).float()                 # FLA holds it in the keys' dtype
            attn = (qc @ kc.transpose(1, 2) * decay).tril()
            oc = (qc * torch.exp(gc)[..., None]) @ state + attn @ v_new
            o[start:end] = oc.transpose(0, 1).to(o.dtype)
            last = gc[:, -1:]
            state = state * torch.exp(last)[..., None] + (kc * torch.exp(last - gc)[..., None]).transpose(1, 2) @ v_new
        finals[n] = state
    return o[None], (finals if output_final_state else None)


def delta_prefill(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state, initial_state_idx,
                  block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *, scale,
                  use_qk_l2norm_in_kernel, state_layout, pad_slot_id, block_size, output_final_state, max_seqlen):
    """The adapter: gather, zero, chunk, scatter back, as the engine's layer does."""
    if initial_state_idx is not None or g.dim() == 3 or beta.dim() == 3 or state_layout != "kv":
        mambafuzz.reject("prefix caching, a per-K gate, beta per V or a V-major pool: the engine has none")
    idx = (ssm_state_indices if ssm_state_indices.dim() == 1 else ssm_state_indices[:, 0]).long()
    lens = cu_seqlens.diff()
    live = (idx != pad_slot_id) & (lens > 0)
    initial = ssm_state[idx.clamp(0, ssm_state.shape[0] - 1)].float()
    initial[~has_initial_state] = 0
    o, final = chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], scale=scale,
                                      initial_state=initial, output_final_state=output_final_state,
                                      cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    out.copy_(o[0])
    if final is not None:
        ssm_state[idx[live]] = final[live].to(ssm_state.dtype)


ENGINE = {"gate": "gdn", "cache_mode": "none", "state_layout": "kv"}


def test_the_engine_delta_prefill_is_right_on_what_it_supports():
    mambafuzz.check(delta_prefill, "delta_prefill", max_examples=15, min_examples=8, database=None, crashes_dir=None,
                    **ENGINE)


def test_a_final_state_written_though_none_was_asked_for_is_caught():
    def always_final(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state,
                     initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
                     num_computed_tokens, out, *, scale, use_qk_l2norm_in_kernel, state_layout, pad_slot_id,
                     block_size, output_final_state, max_seqlen):  # cuLA #66's bug
        delta_prefill(q, k, v, g, beta, ssm_state, cu_seqlens, ssm_state_indices, has_initial_state, initial_state_idx,
                      block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out,
                      scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout,
                      pad_slot_id=pad_slot_id, block_size=block_size, output_final_state=True, max_seqlen=max_seqlen)
    with pytest.raises(mambafuzz.Failure) as info:
        mambafuzz.check(always_final, "delta_prefill", max_examples=60, database=None, crashes_dir=None,
                        shrink_time=2.0, **ENGINE)
    assert info.value.verdict.kind == "mismatch"

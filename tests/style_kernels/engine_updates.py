"""Update kernels shaped as the engines ship them, as torch reference code, behind the contracts' adapters.

Each engine function takes the engine's own arguments and supports what that engine's kernel supports,
nothing more; its adapter maps the contract's arguments onto it and declines (``mambafuzz.reject``)
every case outside that, the way a user fuzzing a copied engine kernel does.  The code follows the
kernels' program structure (one program per row, or per sequence and value head: an early return for
a pad or empty row, fp32 work, a cast on store) in torch on the host, so that the interpreter has no
Triton to run and a check of many examples stays quick.  ``tests/integration/test_narrowing.py`` fuzzes
them with and without the contract options that say what each supports.

| engine function | as | supports | declines |
| --- | --- | --- | --- |
| ``sglang_causal_conv1d_update`` | SGLang's | ``x [B, dim, L]``, channel-contiguous pools, W <= 4, [B] indices, spec | varlen, prefix caching, W > 4, token-contiguous pools |
| ``sglang_selective_state_update`` | SGLang's | one token a row, D and dt_bias given, in place, [B] indices | spec, varlen, a dst table, no D, no dt_bias |
| ``vllm_fused_recurrent_gated_delta_rule`` | vLLM's FLA copy | K-major pools, GDN gate, spec columns, the null block 0 | V-major, KDA, a per-step buffer, several non-spec tokens, pad -1 |
"""
import torch

import mambafuzz


# --------------------------------------------------------------------------- conv (SGLang's causal_conv1d_update)
def sglang_causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None,
                                num_accepted_tokens=None, pad_slot_id=-1):
    """x [B, dim, L]; conv_state [S, dim, SL] (channels contiguous); weight [dim, W], W <= 4; returns out."""
    assert conv_state.stride(1) == 1, "expect contiguous along feat-dim of conv_state"
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    assert width <= 4, "KERNEL_WIDTH 2..4"
    out = torch.zeros_like(x)  # a skipped row's output is anything: zeros keep numpy's compare quiet
    state_len = width - 1 + (seqlen - 1) if num_accepted_tokens is not None else width - 1
    w = weight.float()
    for b in range(batch):  # one program per row (and channel block)
        slot = int(conv_state_indices[b])
        if slot == pad_slot_id or seqlen == 0:
            continue
        offset = int(num_accepted_tokens[b]) - 1 if num_accepted_tokens is not None else 0
        offset = max(offset, 0)
        window = conv_state[slot, :, offset:offset + width - 1].float()
        full = torch.cat([window, x[b].float()], dim=1)  # [dim, W - 1 + L]
        acc = torch.stack([(full[:, t:t + width] * w).sum(1) for t in range(seqlen)], dim=1)
        if bias is not None:
            acc = acc + bias.float()[:, None]
        if activation in ("silu", "swish"):
            acc = acc / (1 + torch.exp(-acc))
        out[b] = acc.to(out.dtype)
        if num_accepted_tokens is not None:  # every draft's window stays recoverable
            new = torch.cat([conv_state[slot, :, offset + 1:offset + width - 1].float(), x[b].float()], dim=1)
        else:
            new = full[:, full.shape[1] - (width - 1):]
        conv_state[slot, :, :min(state_len, new.shape[1])] = new[:, :state_len].to(conv_state.dtype)
    return out


def conv_update(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
                initial_state_idx, last_state_idx, out, *, activation, pad_slot_id, max_query_len):
    """The adapter: the contract's arguments in SGLang's call; what SGLang's kernel cannot take is declined."""
    if query_start_loc is not None:
        mambafuzz.reject("no varlen batches")
    if initial_state_idx is not None:
        mambafuzz.reject("no prefix caching")
    if weight.shape[1] > 4:
        mambafuzz.reject("widths up to 4")
    if conv_state.stride(1) != 1:
        mambafuzz.reject("channel-contiguous pools only")
    indices = conv_state_indices if conv_state_indices.dim() == 1 else conv_state_indices[:, 0]
    out.copy_(sglang_causal_conv1d_update(x, conv_state, weight, bias, activation, indices,
                                          num_accepted_tokens, pad_slot_id))


# --------------------------------------------------------------------------- ssm (SGLang's selective_state_update)
def sglang_selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                                  pad_slot_id, out):
    """state [S, H, D, N] updated in place; x, dt [B, H, D] (one token a row); D and dt_bias [H, D] required."""
    batch, heads, _ = x.shape
    ratio = heads // B.shape[1]
    for b in range(batch):  # one program per (row, head)
        slot = int(state_batch_indices[b])
        if slot == pad_slot_id:
            continue
        for h in range(heads):
            st = state[slot, h].float()                                    # [D, N]
            dt_h = dt[b, h].float() + dt_bias[h].float()
            if dt_softplus:
                dt_h = torch.where(dt_h <= 20.0, torch.log1p(torch.exp(dt_h)), dt_h)
            d_a = torch.exp(A[h].float() * dt_h[:, None])
            st = st * d_a + (dt_h * x[b, h].float())[:, None] * B[b, h // ratio].float()[None, :]
            y = (st * C[b, h // ratio].float()[None, :]).sum(1) + D[h].float() * x[b, h].float()
            if z is not None:
                zf = z[b, h].float()
                y = y * zf * torch.sigmoid(zf)
            out[b, h] = y.to(out.dtype)
            state[slot, h] = st.to(state.dtype)


def ssm_update(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
               num_accepted_tokens, cu_seqlens, out, *, dt_softplus, pad_slot_id):
    """The adapter: the contract's arguments in SGLang's call; what SGLang's kernel cannot take is declined."""
    if num_accepted_tokens is not None:
        mambafuzz.reject("no spec decode")
    if cu_seqlens is not None:
        mambafuzz.reject("no varlen batches")
    if dst_state_batch_indices is not None:
        mambafuzz.reject("in place only")
    if D is None or dt_bias is None:
        mambafuzz.reject("D and dt_bias are required")
    sglang_selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                  state_batch_indices[:, 0].contiguous(), pad_slot_id, out)


# --------------------------------------------------------------------------- delta rule (vLLM's FLA copy)
def vllm_fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale, initial_state, inplace_final_state=True,
                                          cu_seqlens=None, ssm_state_indices=None, num_accepted_tokens=None,
                                          use_qk_l2norm_in_kernel=False):
    """q, k [1, T, H, K]; v [1, T, HV, V]; g [1, T, HV] (GDN); beta [1, T, HV] or [1, T, HV, V];
    initial_state [S, HV, K, V] (K-major), updated in place; returns (o [1, T, HV, V], initial_state)."""
    assert inplace_final_state and g.dim() == 3
    _, _, heads, _ = k.shape
    value_heads = v.shape[2]
    o = q.new_zeros(v.shape)  # a skipped sequence's output is anything
    indices = ssm_state_indices if ssm_state_indices.dim() == 2 else ssm_state_indices[:, None]
    for n in range(len(cu_seqlens) - 1):  # one program per (V block, sequence x value head)
        bos, eos = int(cu_seqlens[n]), int(cu_seqlens[n + 1])
        if eos == bos:
            continue
        col = int(num_accepted_tokens[n]) - 1 if num_accepted_tokens is not None else 0
        slot = int(indices[n, col])
        if slot <= 0:  # the null block
            continue
        for hv in range(value_heads):
            h = hv // (value_heads // heads)
            b_h = initial_state[slot, hv].float()                        # [K, V]
            for i_t in range(eos - bos):
                tok = bos + i_t
                b_q, b_k = q[0, tok, h].float(), k[0, tok, h].float()
                if use_qk_l2norm_in_kernel:
                    b_q = b_q / torch.sqrt((b_q * b_q).sum() + 1e-6)
                    b_k = b_k / torch.sqrt((b_k * b_k).sum() + 1e-6)
                b_q = b_q * scale
                b_h = b_h * torch.exp(g[0, tok, hv].float())
                b_v = v[0, tok, hv].float() - (b_h * b_k[:, None]).sum(0)
                b_v = b_v * beta[0, tok, hv].float()
                b_h = b_h + b_k[:, None] * b_v[None, :]
                o[0, tok, hv] = (b_h * b_q[:, None]).sum(0).to(o.dtype)
                final = int(indices[n, i_t])  # token t's state to column t
                if final > 0:
                    initial_state[final, hv] = b_h.to(initial_state.dtype)
    return o, initial_state


def delta_update(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                 intermediate_states_buffer, intermediate_state_indices, out, *, scale, use_qk_l2norm_in_kernel,
                 state_layout, pad_slot_id, cache_steps, max_query_len):
    """The adapter: the contract's arguments in vLLM's call; what vLLM's kernel cannot take is declined."""
    if state_layout != "kv":
        mambafuzz.reject("K-major pools only")
    if g.dim() != 2:
        mambafuzz.reject("GDN gates only (g per head)")
    if intermediate_states_buffer is not None:
        mambafuzz.reject("no per-step buffer")
    if num_accepted_tokens is None and max_query_len > 1:
        mambafuzz.reject("non-spec decode is one token per sequence")
    if pad_slot_id != 0:
        mambafuzz.reject("the null block is slot 0")
    o, _ = vllm_fused_recurrent_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], scale,
                                                 initial_state, True, cu_seqlens, ssm_state_indices,
                                                 num_accepted_tokens, use_qk_l2norm_in_kernel)
    out.copy_(o[0])

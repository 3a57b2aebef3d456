"""A Mamba2 chunked-scan prefill as vLLM's mixer shapes it, behind the `ssm_prefill` adapter.

The engine's scan does not touch the pool: like vLLM's ``mamba_chunk_scan_combined_varlen`` it takes
the initial states ``[B, H, P, N]`` (gathered by the caller, zeros where a request has none), the
chunks as ``cu_chunk_seqlens`` (no chunk spans two requests; with prefix caching the host cuts them at
block boundaries too) and returns the state at the end of every chunk, float32.  The mixer then stores
the chunk-end states that sit on block boundaries and each request's final state into the pool.  Its
kernel here: one program per (request, head, block of P) walks the request's chunks in order, per chunk
the cumulative decay, each token's weighted B rounded to the inputs' dtype and one ``tl.dot``, as SSD
does.  It takes block sizes that are multiples of its 16-token chunk (vLLM asserts the same of its
chunk size): the test narrows the contract to that (``block_multiple``), so other cases are never
drawn.

Written this way, three things go wrong; each was tried as a variant of this file and caught by the
test below within its first examples (a mismatch): storing, at a boundary, the state of the chunk that
starts there instead of the one that ends there (an off-by-one in the chunk index, the shape of
SGLang #31833); the gather forgetting ``has_initial_state`` (the pool's stale state as the initial
one: tpu-inference #2431); and picking the boundary states out of the chunk states by a stride of
``block_size // CHUNK`` chunks from the request's first, as if every request started on a block
boundary (the strided slice of vLLM #57266: a request that starts mid-block gets another chunk's
state, or the slice runs past its chunks).
"""
import torch
import triton
import triton.language as tl

import mambafuzz

CHUNK = 16
BLOCK_P = 16


@triton.jit
def _engine_chunk_states_kernel(x_ptr, dt_ptr, a_ptr, b_ptr, bias_ptr, init_ptr, cu_chunk_ptr, seq_chunk_ptr,
                                out_ptr, hdim, dstate, ratio, sx_tok, sx_head, sdt_tok, sb_tok, sb_group,
                                HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CHUNK: tl.constexpr,
                                BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    ps = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    ns = tl.arange(0, BLOCK_N)
    tile = (ps < hdim)[:, None] & (ns < dstate)[None, :]
    heads = tl.num_programs(1)
    inner = ps[:, None] * dstate + ns[None, :]
    st = tl.load(init_ptr + (seq * heads + head) * hdim * dstate + inner, mask=tile, other=0.0)
    a_h = tl.load(a_ptr + head)
    bias = 0.0
    if HAS_BIAS:
        bias = tl.load(bias_ptr + head)
    group = head // ratio
    c0 = tl.load(seq_chunk_ptr + seq)
    c1 = tl.load(seq_chunk_ptr + seq + 1)
    for c in range(c0, c1):
        lo = tl.load(cu_chunk_ptr + c)
        hi = tl.load(cu_chunk_ptr + c + 1)
        toks = lo + tl.arange(0, CHUNK)
        on = toks < hi
        d = tl.load(dt_ptr + toks * sdt_tok + head, mask=on, other=0.0).to(tl.float32) + bias
        if SOFTPLUS:
            d = tl.where(d <= 20.0, tl.log(1.0 + tl.exp(d)), d)
        d = tl.where(on, d, 0.0)
        cs = tl.cumsum(d * a_h, axis=0)
        total = tl.sum(d * a_h, axis=0)
        w = tl.exp(total - cs) * d
        xt = tl.load(x_ptr + toks[None, :] * sx_tok + head * sx_head + ps[:, None], mask=on[None, :] & (ps < hdim)[:, None],
                     other=0.0)
        bt = tl.load(b_ptr + toks[:, None] * sb_tok + group * sb_group + ns[None, :],
                     mask=on[:, None] & (ns < dstate)[None, :], other=0.0).to(tl.float32)
        st = st * tl.exp(total) + tl.dot(xt, (bt * w[:, None]).to(x_ptr.dtype.element_ty))
        tl.store(out_ptr + (c * heads + head) * hdim * dstate + inner, st, mask=tile)


def mamba_chunk_states_varlen(x, dt, A, B, cu_chunk_seqlens, seq_chunks, initial_states, dt_bias=None,
                              dt_softplus=False):
    """The engine's scan: x [T, H, P] (contiguous), chunks cu_chunk_seqlens [C + 1] of at most CHUNK tokens,
    request b's chunks seq_chunks[b]:seq_chunks[b + 1]; returns the state after every chunk, [C, H, P, N]
    float32."""
    heads, hdim = x.shape[1:]
    dstate = B.shape[2]
    chunks = cu_chunk_seqlens.shape[0] - 1
    out = torch.zeros((chunks, heads, hdim, dstate), dtype=torch.float32, device=x.device)
    rows = seq_chunks.shape[0] - 1
    if chunks == 0 or rows == 0:
        return out
    _engine_chunk_states_kernel[(rows, heads, triton.cdiv(hdim, BLOCK_P))](
        x, dt, A, B, dt_bias if dt_bias is not None else A, initial_states, cu_chunk_seqlens, seq_chunks, out,
        hdim, dstate, heads // B.shape[1], x.stride(0), x.stride(1), dt.stride(0), B.stride(0), B.stride(1),
        HAS_BIAS=dt_bias is not None, SOFTPLUS=bool(dt_softplus), CHUNK=CHUNK, BLOCK_P=BLOCK_P,
        BLOCK_N=max(16, triton.next_power_of_2(dstate)))
    return out


def ssm_prefill(x, dt, A, B, dt_bias, ssm_state, cache_indices, has_initial_state, cu_seqlens, initial_state_idx,
                block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, *,
                dt_softplus, pad_slot_id, block_size):
    """The adapter, the mixer's part: gather the initial states, cut the chunks, run the scan, store the
    boundary and final states."""
    idx = cache_indices if cache_indices.dim() == 2 else cache_indices.unsqueeze(1)
    rows = cu_seqlens.shape[0] - 1
    apc = initial_state_idx is not None
    assert not apc or block_size % CHUNK == 0
    cu = cu_seqlens.tolist()
    cols = [(initial_state_idx[b].item(), block_idx_first_scheduled_token[b].item(),
             block_idx_last_scheduled_token[b].item(), num_computed_tokens[b].item()) if apc else (0, 0, 0, 0)
            for b in range(rows)]
    live = [int(idx[b, cols[b][0]]) != pad_slot_id and cu[b + 1] > cu[b] for b in range(rows)]
    # gather: zeros where a request has no initial state (or is skipped)
    heads, hdim, dstate = ssm_state.shape[1:]
    init = torch.zeros((rows, heads, hdim, dstate), dtype=torch.float32, device=x.device)
    for b in range(rows):
        if live[b] and bool(has_initial_state[b]):
            init[b] = ssm_state[int(idx[b, cols[b][0]])].float()
    # chunks: cut at every CHUNK tokens and at block boundaries; remember which chunk ends where
    cuts, seq_chunks, ends = [0], [0], {}
    for b in range(rows):
        if live[b]:
            c = cols[b][3]
            stops = set(range(CHUNK, cu[b + 1] - cu[b], CHUNK)) | {cu[b + 1] - cu[b]}
            if apc:
                stops |= set(range(block_size - c % block_size, cu[b + 1] - cu[b], block_size))
            for o in sorted(stops):
                cuts.append(cu[b] + o)
                ends[(b, o)] = len(cuts) - 2
        else:
            cuts.append(cu[b + 1])  # an empty chunk keeps the rows' chunk ranges contiguous
        seq_chunks.append(len(cuts) - 1)
    cu_chunks = torch.tensor(cuts, dtype=torch.int32, device=x.device)
    states = mamba_chunk_states_varlen(x, dt, A, B, cu_chunks,
                                       torch.tensor(seq_chunks, dtype=torch.int32, device=x.device), init,
                                       dt_bias=dt_bias, dt_softplus=dt_softplus)
    # scatter: the boundary states and the final one, after every load
    for b in range(rows):
        if not live[b]:
            continue
        _, first, last, c = cols[b]
        length = cu[b + 1] - cu[b]
        stores = [(first + k, o) for k, o in enumerate(range(block_size - c % block_size, length, block_size))] \
            if apc else []
        for col, o in stores + [(last, length)]:
            slot = int(idx[b, col])
            if slot != pad_slot_id:
                ssm_state[slot] = states[ends[(b, o)]].to(ssm_state.dtype)


def test_the_engine_ssm_prefill_is_right_on_what_it_supports():
    mambafuzz.check(ssm_prefill, "ssm_prefill", max_examples=6, min_examples=4, database=None, crashes_dir=None,
                    block_multiple="16")

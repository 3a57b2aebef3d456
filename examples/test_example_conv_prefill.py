"""A conv prefill with prefix caching as vLLM shapes it, behind the `conv_prefill` adapter.

The engine's function takes vLLM's ``causal_conv1d_fn`` arguments: ``x`` channel-last ``[dim, T]``
(a transposed view), ``conv_states`` with channels contiguous, a 1-D ``cache_indices`` (a column of
the block table, strided) or, with prefix caching, the 2-D table and the four column arrays, and
``block_size_to_align``; it returns a new output.  It takes W <= 4, dim-contiguous pools, block
sizes that are multiples of 8 and pad -1 only: the test narrows the contract to that (options), so
those cases are never drawn.  The kernel is written vLLM's way: the host lists one program per
(row, 8-token chunk), chunk 0 loads the initial window and every other chunk its prior tokens from
x; it stores what it owns, with a 2-D window built from x and the initial state.

Written vLLM's way, four things go wrong here; each was tried as a variant of this file and
caught by the test below within its first examples (a mismatch, or the race check naming two
programs): the final window of a chunk shorter than ``W - 1`` stored through the pointer the initial
state came from (zoo CP-SHORTSTORE, vLLM #56196); a boundary window taking the positions before the
row's first token from the previous row's tokens or zeros (zoo CP-BOUNDARYX); boundary k stored by
the program of chunk k + 1, so a chunk of at most 8 tokens that crosses a boundary never stores it;
and, with that assignment, chunk 1 storing boundary 0 while chunk 0 still reads the same block
(mid-block, the initial block is the first boundary's): a race.  Here chunk 0 owns every store that
reads the initial block or may land on it (the first boundary's, the final one) and chunk k the
boundary k >= 1; a case whose columns put the initial block under a later boundary, which vLLM
never issues, is declined.
"""
import torch
import triton
import triton.language as tl

import mambafuzz

BLOCK_M = 8    # tokens per program
BLOCK_N = 16   # channels per program
NP2 = 4        # the window's columns, padded to a power of two (W <= 4)


@triton.jit
def _window(x_ptr, state_ptr, start, seqlen, src_base, has_row, end, feats, fmask, sx_dim, sx_tok, s_tok,
            W: tl.constexpr, NP2: tl.constexpr):
    """The window that ends `end` tokens into the row: [dim block, W - 1] as [NP2, BLOCK_N], from x and,
    before the row's first token, from the initial state (zeros without one; nothing past the row)."""
    i = tl.arange(0, NP2)
    p = end + i - (W - 1)                      # position in the row; < 0: the initial state's column
    col = (i < W - 1)[:, None] & fmask[None, :]
    from_x = tl.load(x_ptr + (start + p)[:, None] * sx_tok + feats[None, :] * sx_dim,
                     mask=col & ((p >= 0) & (p < seqlen))[:, None], other=0.0)
    from_state = tl.load(state_ptr + src_base[None, :] + (W - 1 + p)[:, None] * s_tok,
                         mask=col & (p < 0)[:, None] & (has_row != 0)[:, None], other=0.0)
    return tl.where((p >= 0)[:, None], from_x, from_state)


@triton.jit
def _engine_conv_fwd_kernel(x_ptr, w_ptr, bias_ptr, state_ptr, cache_indices_ptr, has_ptr, qsl_ptr, batch_ptr,
                            chunk_ptr, first_ptr, last_ptr, init_ptr, computed_ptr, o_ptr, dim, pad_slot_id,
                            block_size, sx_dim, sx_tok, sw_dim, sw_width, s_seq, s_tok, s_idx, so_dim, so_tok,
                            HAS_BIAS: tl.constexpr, W: tl.constexpr, SILU: tl.constexpr, APC: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NP2: tl.constexpr):
    seq = tl.load(batch_ptr + tl.program_id(0)).to(tl.int64)
    chunk = tl.load(chunk_ptr + tl.program_id(0))
    feats = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    fmask = feats < dim
    start = tl.load(qsl_ptr + seq).to(tl.int64)
    seqlen = tl.load(qsl_ptr + seq + 1).to(tl.int64) - start
    init_col = 0
    first_col = 0
    last_col = 0
    first_boundary = seqlen  # none
    n_boundaries = 0
    if APC:
        init_col = tl.load(init_ptr + seq).to(tl.int64)
        first_col = tl.load(first_ptr + seq).to(tl.int64)
        last_col = tl.load(last_ptr + seq).to(tl.int64)
        computed = tl.load(computed_ptr + seq).to(tl.int64)
        first_boundary = block_size - computed % block_size
        n_boundaries = last_col - first_col
    src = tl.load(cache_indices_ptr + seq * s_idx + init_col).to(tl.int64)
    if src == pad_slot_id:
        return
    src_base = src * s_seq + feats
    has_row = tl.load(has_ptr + seq + tl.arange(0, NP2) * 0)   # the flag on every window row
    token0 = chunk * BLOCK_M
    # the window before this chunk's first token: the initial state (chunk 0) or x
    prior = _window(x_ptr, state_ptr, start, seqlen, src_base, has_row, token0, feats, fmask, sx_dim, sx_tok, s_tok,
                    W, NP2)
    if chunk == 0:
        final = _window(x_ptr, state_ptr, start, seqlen, src_base, has_row, seqlen, feats, fmask, sx_dim, sx_tok,
                        s_tok, W, NP2)
        first_win = _window(x_ptr, state_ptr, start, seqlen, src_base, has_row, first_boundary, feats, fmask, sx_dim, sx_tok,
                            s_tok, W, NP2)
        tl.debug_barrier()  # every lane has read the initial block before any lane stores a window
        rows = tl.arange(0, NP2)[:, None]
        keep = (rows < W - 1) & fmask[None, :]
        dst = tl.load(cache_indices_ptr + seq * s_idx + last_col).to(tl.int64)
        if dst != pad_slot_id:
            tl.store(state_ptr + (dst * s_seq + feats)[None, :] + rows * s_tok, final, mask=keep)
        if n_boundaries > 0:
            dst0 = tl.load(cache_indices_ptr + seq * s_idx + first_col).to(tl.int64)
            if dst0 != pad_slot_id:
                tl.store(state_ptr + (dst0 * s_seq + feats)[None, :] + rows * s_tok, first_win, mask=keep)
    else:
        if chunk < n_boundaries:  # boundary `chunk` (1..): only x, never the initial block
            win = _window(x_ptr, state_ptr, start, seqlen, src_base, has_row, first_boundary + chunk * block_size, feats,
                          fmask, sx_dim, sx_tok, s_tok, W, NP2)
            dst = tl.load(cache_indices_ptr + seq * s_idx + first_col + chunk).to(tl.int64)
            if dst != pad_slot_id:
                rows = tl.arange(0, NP2)[:, None]
                tl.store(state_ptr + (dst * s_seq + feats)[None, :] + rows * s_tok, win,
                         mask=(rows < W - 1) & fmask[None, :])
    # the outputs of this chunk's tokens
    w0 = tl.load(w_ptr + feats * sw_dim, mask=fmask, other=0.0).to(tl.float32)
    w1 = tl.load(w_ptr + feats * sw_dim + sw_width, mask=fmask, other=0.0).to(tl.float32)
    w2 = w0 * 0.0
    w3 = w0 * 0.0
    if W > 2:
        w2 = tl.load(w_ptr + feats * sw_dim + 2 * sw_width, mask=fmask, other=0.0).to(tl.float32)
    if W > 3:
        w3 = tl.load(w_ptr + feats * sw_dim + 3 * sw_width, mask=fmask, other=0.0).to(tl.float32)
    rows = tl.arange(0, NP2)[:, None]
    col0 = tl.sum(tl.where(rows == 0, prior, 0.0), axis=0).to(tl.float32)
    col1 = tl.sum(tl.where(rows == 1, prior, 0.0), axis=0).to(tl.float32)
    col2 = tl.sum(tl.where(rows == 2, prior, 0.0), axis=0).to(tl.float32)
    acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)
    if HAS_BIAS:
        acc0 = tl.load(bias_ptr + feats, mask=fmask, other=0.0).to(tl.float32)
    segment = tl.minimum(BLOCK_M, seqlen - token0)
    for t in range(0, segment):
        xt = tl.load(x_ptr + (start + token0 + t) * sx_tok + feats * sx_dim, mask=fmask, other=0.0).to(tl.float32)
        if W == 2:
            acc = acc0 + w0 * col0 + w1 * xt
            col0 = xt
        elif W == 3:
            acc = acc0 + w0 * col0 + w1 * col1 + w2 * xt
            col0 = col1
            col1 = xt
        else:
            acc = acc0 + w0 * col0 + w1 * col1 + w2 * col2 + w3 * xt
            col0 = col1
            col1 = col2
            col2 = xt
        if SILU:
            acc = acc / (1.0 + tl.exp(-acc))
        tl.store(o_ptr + (start + token0 + t) * so_tok + feats * so_dim, acc.to(o_ptr.dtype.element_ty), mask=fmask)


def causal_conv1d_fn(x, weight, bias, conv_states, query_start_loc, cache_indices=None, has_initial_state=None,
                     activation="silu", pad_slot_id=-1, block_idx_first_scheduled_token=None,
                     block_idx_last_scheduled_token=None, initial_state_idx=None, num_computed_tokens=None,
                     block_size_to_align=0):
    """The engine's entry point: x [dim, T] channel-last; returns the output, shaped and strided as x (a
    skipped row's zeros)."""
    assert weight.shape[1] <= 4 and pad_slot_id == -1  # (and channels contiguous: the kernel takes no strides)
    out = torch.zeros_like(x)  # vLLM: empty_like; zeros keep a skipped row's don't-care outputs finite
    dim, width = weight.shape
    lens = query_start_loc.diff().tolist()
    programs = [(b, c) for b, n in enumerate(lens) for c in range(triton.cdiv(n, BLOCK_M))]
    if not programs:
        return out
    batch = torch.tensor([b for b, _ in programs], dtype=torch.int32, device=x.device)
    chunks = torch.tensor([c for _, c in programs], dtype=torch.int32, device=x.device)
    apc = block_idx_last_scheduled_token is not None
    columns = ((block_idx_first_scheduled_token, block_idx_last_scheduled_token, initial_state_idx,
                num_computed_tokens) if apc else (batch,) * 4)
    assert not apc or block_size_to_align % BLOCK_M == 0
    _engine_conv_fwd_kernel[(len(programs), triton.cdiv(dim, BLOCK_N))](
        x, weight, bias if bias is not None else weight, conv_states, cache_indices, has_initial_state, query_start_loc,
        batch, chunks, *columns, out, dim, pad_slot_id, max(block_size_to_align, 1), x.stride(0), x.stride(1),
        weight.stride(0), weight.stride(1), conv_states.stride(0), conv_states.stride(2), cache_indices.stride(0),
        out.stride(0), out.stride(1), HAS_BIAS=bias is not None, W=width, SILU=activation == "silu", APC=apc,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, NP2=NP2)
    return out


def conv_prefill(x, conv_state, weight, bias, cache_indices, has_initial_state, query_start_loc, initial_state_idx,
                 block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, out, *,
                 activation, pad_slot_id, block_size):
    """The adapter: the contract's arguments in the engine's call; what it lacks is declined."""
    if initial_state_idx is None and cache_indices.dim() == 2:
        cache_indices = cache_indices[:, 0]  # without prefix caching vLLM passes the table's first column
    if initial_state_idx is not None:
        first, init = block_idx_first_scheduled_token.tolist(), initial_state_idx.tolist()
        last = block_idx_last_scheduled_token.tolist()
        if any(f < i < l for i, f, l in zip(init, first, last)):  # arbitrary columns: a later boundary's block
            mambafuzz.reject("the initial block under a later boundary (vLLM derives init <= first)")
    o = causal_conv1d_fn(x.t(), weight, bias, conv_state, query_start_loc, cache_indices,
                         has_initial_state.view(torch.uint8), activation, pad_slot_id,
                         block_idx_first_scheduled_token, block_idx_last_scheduled_token, initial_state_idx,
                         num_computed_tokens, block_size)
    out.copy_(o.t())


VLLM = {"max_width": "4", "conv_layout": "dim", "block_multiple": "8"}


def test_the_engine_conv_prefill_is_right_on_what_it_supports():
    mambafuzz.check(conv_prefill, "conv_prefill", max_examples=10, min_examples=5, database=None, crashes_dir=None,
                    **VLLM)

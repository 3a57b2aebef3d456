"""A conv-state decode update as SGLang writes it, behind the `conv_update` adapter.

The engine's function takes ``x [B, dim, L]`` and returns a new output (rows
of a pad slot are left uninitialised); it has no varlen batches and no prefix
caching, so the test narrows the contract to what it takes (``varlen="never",
prefix_caching="never"``: those cases are never drawn), and the adapter still
declines them (``mambafuzz.reject``) should one come (a saved crash file).  The kernel is one program
per (row, channel): the window as a small vector, a dot product per token, a
loop bound loaded from memory, Python ``and`` on scalars, int32 indices.
Its first version had no barrier between loading the window and storing the
slot: the race check flagged lane 1 storing a column lane 0 had loaded, on a
one-row case, the first example drawn.
"""
import pytest
import torch
import triton
import triton.language as tl

import mambafuzz

WPAD = 8  # the window and the taps, padded to a power of two (W <= 6)


@triton.jit
def _engine_conv_kernel(x_ptr, state_ptr, w_ptr, b_ptr, idx_ptr, nacc_ptr, out_ptr, seqlen_ptr, pad,
                        sx0, sx1, sx2, ss0, ss1, ss2, sw0, sw1, si0, so0, so1, so2,
                        W: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr, SPEC: tl.constexpr,
                        WPAD: tl.constexpr):
    b = tl.program_id(0)
    d = tl.program_id(1)
    slot = tl.load(idx_ptr + b * si0).to(tl.int64)
    seqlen = tl.load(seqlen_ptr)
    if slot != pad and seqlen > 0:
        off = 0
        if SPEC:
            off = tl.maximum(tl.load(nacc_ptr + b) - 1, 0)
        k = tl.arange(0, WPAD)
        row = state_ptr + slot * ss0 + d * ss1
        window = tl.load(row + (off + k) * ss2, mask=k < W - 1, other=0.0).to(tl.float32)
        taps = tl.load(w_ptr + d * sw0 + k * sw1, mask=k < W, other=0.0).to(tl.float32)
        bias = 0.0
        if HAS_BIAS:
            bias = tl.load(b_ptr + d).to(tl.float32)
        keep = window
        if SPEC:
            keep = tl.load(row + (off + 1 + k) * ss2, mask=k < W - 2, other=0.0)
        tl.debug_barrier()  # every lane has read the window before any lane stores the slot
        for t in range(0, seqlen):
            xt = tl.load(x_ptr + b * sx0 + d * sx1 + t * sx2).to(tl.float32)
            full = tl.where(k == W - 1, xt, window)
            acc = bias + tl.sum(full * taps, axis=0)
            if SILU:
                acc = acc / (1.0 + tl.exp(-acc))
            tl.store(out_ptr + b * so0 + d * so1 + t * so2, acc.to(out_ptr.dtype.element_ty))
            window = tl.where(k == W - 2, xt, tl.sum(tl.where(k[:, None] + 1 == k[None, :], full[None, :], 0.0),
                                                        axis=1))
            if SPEC:
                tl.store(row + (W - 2 + t) * ss2, xt.to(state_ptr.dtype.element_ty))
        if SPEC:
            tl.store(row + k * ss2, keep.to(state_ptr.dtype.element_ty), mask=k < W - 2)
        else:
            tl.store(row + k * ss2, window.to(state_ptr.dtype.element_ty), mask=k < W - 1)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None,
                         num_accept_tokens=None, pad_slot_id=-1):
    """The engine's entry point: x [B, dim, L]; returns the output (pad rows uninitialised)."""
    out = torch.empty_like(x)
    rows, dim, seqlen = x.shape
    idx = conv_state_indices if conv_state_indices.dim() == 1 else conv_state_indices[:, 0]
    if rows:
        length = torch.tensor([seqlen], dtype=torch.int32, device=x.device)
        _engine_conv_kernel[(rows, dim)](
            x, conv_state, weight, bias if bias is not None else weight, idx,
            num_accept_tokens if num_accept_tokens is not None else idx, out, length, pad_slot_id,
            *x.stride(), *conv_state.stride(), *weight.stride(), idx.stride(0), *out.stride(),
            W=weight.shape[1], HAS_BIAS=bias is not None, SILU=activation == "silu",
            SPEC=num_accept_tokens is not None, WPAD=WPAD)
    return out


def conv_update(x, conv_state, weight, bias, conv_state_indices, num_accepted_tokens, query_start_loc,
                initial_state_idx, last_state_idx, out, *, activation, pad_slot_id, max_query_len):
    """The adapter: the contract's arguments in the engine's call; what it lacks is declined."""
    if query_start_loc is not None:
        mambafuzz.reject("no varlen batches")
    if initial_state_idx is not None:
        mambafuzz.reject("no prefix caching")
    out.copy_(causal_conv1d_update(x, conv_state, weight, bias, activation, conv_state_indices,
                                   num_accepted_tokens, pad_slot_id))


@pytest.mark.matrix
def test_the_engine_conv_update_is_right_on_what_it_supports():
    report = mambafuzz.check(conv_update, "conv_update", max_examples=10, database=None, varlen="never",
                             prefix_caching="never")
    assert report.examples == 10 and not report.tally.rejections, report.tally.rejections  # none drawn

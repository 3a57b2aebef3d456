"""The causal-conv window step the conv kernels (update and prefill) share: a channel block's taps and bias
loaded once, then one token at a time through a window of up to five columns held in registers (W <= 6)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def conv_taps(w_ptr, b_ptr, dims, sw_dim, sw_tap, mask, W: tl.constexpr, HAS_BIAS: tl.constexpr,
              BLOCK: tl.constexpr):
    """The W taps (zeros past W) and the bias (zeros without one) of the channels `dims`, fp32."""
    w0 = tl.load(w_ptr + dims * sw_dim, mask=mask, other=0.0).to(tl.float32)
    w1 = tl.load(w_ptr + dims * sw_dim + sw_tap, mask=mask, other=0.0).to(tl.float32)
    w2 = tl.zeros([BLOCK], dtype=tl.float32)
    w3 = tl.zeros([BLOCK], dtype=tl.float32)
    w4 = tl.zeros([BLOCK], dtype=tl.float32)
    w5 = tl.zeros([BLOCK], dtype=tl.float32)
    if W > 2:
        w2 = tl.load(w_ptr + dims * sw_dim + 2 * sw_tap, mask=mask, other=0.0).to(tl.float32)
    if W > 3:
        w3 = tl.load(w_ptr + dims * sw_dim + 3 * sw_tap, mask=mask, other=0.0).to(tl.float32)
    if W > 4:
        w4 = tl.load(w_ptr + dims * sw_dim + 4 * sw_tap, mask=mask, other=0.0).to(tl.float32)
    if W > 5:
        w5 = tl.load(w_ptr + dims * sw_dim + 5 * sw_tap, mask=mask, other=0.0).to(tl.float32)
    bias = tl.zeros([BLOCK], dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(b_ptr + dims, mask=mask, other=0.0).to(tl.float32)
    return w0, w1, w2, w3, w4, w5, bias


@triton.jit
def conv_step(xt, c0, c1, c2, c3, c4, w0, w1, w2, w3, w4, w5, bias, W: tl.constexpr, SILU: tl.constexpr):
    """Token `xt` through the window: its output (silu'd when SILU) and the window shifted by one column."""
    acc = bias + w0 * c0
    if W == 2:
        acc += w1 * xt
        c0 = xt
    if W == 3:
        acc += w1 * c1 + w2 * xt
        c0 = c1
        c1 = xt
    if W == 4:
        acc += w1 * c1 + w2 * c2 + w3 * xt
        c0 = c1
        c1 = c2
        c2 = xt
    if W == 5:
        acc += w1 * c1 + w2 * c2 + w3 * c3 + w4 * xt
        c0 = c1
        c1 = c2
        c2 = c3
        c3 = xt
    if W == 6:
        acc += w1 * c1 + w2 * c2 + w3 * c3 + w4 * c4 + w5 * xt
        c0 = c1
        c1 = c2
        c2 = c3
        c3 = c4
        c4 = xt
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    return acc, c0, c1, c2, c3, c4

"""Kernels in the idioms of TensorRT-LLM's PyTorch-flow Mamba modules (``tensorrt_llm/_torch/modules/mamba/``).

Written for this corpus after reading its ``softplus.py``, SSD state passing
and the fused split/transpose kernels around causal conv1d; none of their code
is here.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from . import Entry
from .numerics import EXACT, close, ulps

try:                                    # where engines import it from on 3.x
    from triton.language.extra import libdevice
except ImportError:                     # pragma: no cover - older layouts
    from triton.language.extra.cuda import libdevice


def _t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


# --------------------------------------------------------------------------
# 1. libdevice functions
# --------------------------------------------------------------------------
@triton.jit
def _libdevice_kernel(x_ptr, tanh_ptr, exp_ptr, log1p_ptr, rsqrt_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(tanh_ptr + offs, libdevice.tanh(x), mask=m)
    tl.store(exp_ptr + offs, libdevice.exp(x), mask=m)
    tl.store(log1p_ptr + offs, libdevice.log1p(tl.abs(x)), mask=m)
    tl.store(rsqrt_ptr + offs, libdevice.rsqrt(tl.abs(x) + 0.5), mask=m)


def _ld_inputs(device):
    return {"x": _t(np.random.default_rng(501).uniform(-4, 4, 40).astype(np.float32), device)}


def _ld_launch(t):
    x = t["x"]
    outs = {k: torch.empty_like(x) for k in ("tanh", "exp", "log1p", "rsqrt")}
    _libdevice_kernel[(triton.cdiv(x.numel(), 16),)](x, outs["tanh"], outs["exp"], outs["log1p"], outs["rsqrt"],
                                                     x.numel(), BLOCK=16)
    return outs


def _ld_expect(a):
    x = a["x"].astype(np.float64)
    f = np.float32
    return {"tanh": np.tanh(x).astype(f), "exp": np.exp(x).astype(f), "log1p": np.log1p(np.abs(x)).astype(f),
            "rsqrt": (1.0 / np.sqrt(np.abs(x) + 0.5)).astype(f)}


# --------------------------------------------------------------------------
# 2. softplus and friends through tl.math
# --------------------------------------------------------------------------
@triton.jit
def _softplus(dt):
    return tl.math.log(tl.math.exp(dt) + 1)


@triton.jit
def _tl_math_kernel(x_ptr, sp_ptr, e2_ptr, l2_ptr, ceil_ptr, sig_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(sp_ptr + offs, _softplus(x), mask=m)
    tl.store(e2_ptr + offs, tl.math.exp2(x), mask=m)
    tl.store(l2_ptr + offs, tl.math.log2(tl.abs(x) + 1.0), mask=m)
    tl.store(ceil_ptr + offs, tl.math.ceil(x * 3.0), mask=m)
    tl.store(sig_ptr + offs, tl.sigmoid(x), mask=m)


def _tm_inputs(device):
    return {"x": _t(np.random.default_rng(502).uniform(-5, 5, 40).astype(np.float32), device)}


def _tm_launch(t):
    x = t["x"]
    outs = {k: torch.empty_like(x) for k in ("softplus", "exp2", "log2", "ceil", "sigmoid")}
    _tl_math_kernel[(triton.cdiv(x.numel(), 16),)](x, outs["softplus"], outs["exp2"], outs["log2"], outs["ceil"],
                                                   outs["sigmoid"], x.numel(), BLOCK=16)
    return outs


def _tm_expect(a):
    x = a["x"].astype(np.float64)
    f = np.float32
    return {"softplus": np.log1p(np.exp(x)).astype(f), "exp2": np.exp2(x).astype(f),
            "log2": np.log2(np.abs(x) + 1.0).astype(f),
            "ceil": np.ceil(a["x"] * np.float32(3.0)).astype(f),          # fp32 product, then ceil: exact
            "sigmoid": (1.0 / (1.0 + np.exp(-x))).astype(f)}


# --------------------------------------------------------------------------
# 3. a linear grid split over three outputs: tl.where between pointers on a scalar condition,
#    tl.cdiv of a runtime size, tl.trans
# --------------------------------------------------------------------------
@triton.jit
def _split_transpose_kernel(src_ptr, out_x_ptr, out_B_ptr, out_C_ptr, num_tokens, d_inner, bc_size,
                            x_tiles, bc_tiles, BLOCK_SEQ: tl.constexpr, BLOCK_DIM: tl.constexpr):
    tile_id = tl.program_id(0)
    is_x = tile_id < x_tiles
    is_B = (tile_id >= x_tiles) & (tile_id < x_tiles + bc_tiles)
    local_tile = tl.where(is_x, tile_id, tl.where(is_B, tile_id - x_tiles, tile_id - x_tiles - bc_tiles))
    dim_size = tl.where(is_x, d_inner, bc_size)
    num_dim_blocks = tl.cdiv(dim_size, BLOCK_DIM)
    pid_seq = local_tile // num_dim_blocks
    pid_dim = local_tile % num_dim_blocks
    seq_offs = pid_seq * BLOCK_SEQ + tl.arange(0, BLOCK_SEQ)
    dim_offs = pid_dim * BLOCK_DIM + tl.arange(0, BLOCK_DIM)
    seq_mask = seq_offs < num_tokens
    dim_mask = dim_offs < dim_size
    src_off = tl.where(is_x, 0, tl.where(is_B, d_inner, d_inner + bc_size))
    data = tl.load(src_ptr + (src_off + dim_offs[:, None]) * num_tokens + seq_offs[None, :],
                   mask=dim_mask[:, None] & seq_mask[None, :], other=0.0)
    out_ptr = tl.where(is_x, out_x_ptr, tl.where(is_B, out_B_ptr, out_C_ptr))
    tl.store(out_ptr + seq_offs[:, None] * dim_size + dim_offs[None, :], tl.trans(data),
             mask=seq_mask[:, None] & dim_mask[None, :])


def _split_inputs(device):
    return {"xbc": _t(np.random.default_rng(503).standard_normal((24 + 2 * 10, 12)).astype(np.float32), device)}


def _split_launch(t):
    xbc = t["xbc"]
    d_inner, bc = 24, 10
    ntok = xbc.shape[1]
    outs = {"x": torch.full((ntok, d_inner), -1.0, device=xbc.device),
            "B": torch.full((ntok, bc), -1.0, device=xbc.device),
            "C": torch.full((ntok, bc), -1.0, device=xbc.device)}
    seq_blocks = triton.cdiv(ntok, 16)
    x_tiles = seq_blocks * triton.cdiv(d_inner, 16)
    bc_tiles = seq_blocks * triton.cdiv(bc, 16)
    _split_transpose_kernel[(x_tiles + 2 * bc_tiles,)](xbc, outs["x"], outs["B"], outs["C"], ntok, d_inner, bc,
                                                       x_tiles, bc_tiles, BLOCK_SEQ=16, BLOCK_DIM=16)
    return outs


def _split_expect(a):
    xbc = a["xbc"]
    return {"x": xbc[:24].T.copy(), "B": xbc[24:34].T.copy(), "C": xbc[34:44].T.copy()}


# --------------------------------------------------------------------------
# 4. SSD state passing: a runtime loop over chunks, exp of a loaded scalar, the state carried in
#    fp32 and stored per chunk, reset at sequence boundaries
# --------------------------------------------------------------------------
@triton.jit(do_not_specialize=["nchunks"])
def _state_passing_kernel(states_ptr, out_ptr, final_ptr, dA_ptr, init_ptr, seq_idx_ptr, nchunks, dim,
                          BLOCK: tl.constexpr, HAS_INITSTATES: tl.constexpr):
    pid_b, pid_h, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    nheads = tl.num_programs(1)
    offs = pid_m * BLOCK + tl.arange(0, BLOCK)
    m = offs < dim
    base = (pid_b * nheads + pid_h) * nchunks
    if HAS_INITSTATES:
        states = tl.load(init_ptr + (pid_b * nheads + pid_h) * dim + offs, mask=m, other=0.0).to(tl.float32)
    else:
        states = tl.zeros([BLOCK], dtype=tl.float32)
    seq_prev = tl.load(seq_idx_ptr + pid_b * nchunks)
    for c in range(nchunks):
        seq = tl.load(seq_idx_ptr + pid_b * nchunks + c)
        scale = tl.exp(tl.load(dA_ptr + base + c))
        scale = tl.where(seq == seq_prev, scale, 0.0)
        seq_prev = seq
        tl.store(out_ptr + (base + c) * dim + offs, states, mask=m)
        new = tl.load(states_ptr + (base + c) * dim + offs, mask=m, other=0.0).to(tl.float32)
        states = scale * states + new
    tl.store(final_ptr + (pid_b * nheads + pid_h) * dim + offs, states, mask=m)


def _sp_inputs(device):
    r = np.random.default_rng(504)
    batch, heads, nchunks, dim = 2, 2, 4, 20
    return {"states": _t(r.standard_normal((batch, heads, nchunks, dim)).astype(np.float32), device),
            "dA": _t(-r.uniform(0.0, 2.0, (batch, heads, nchunks)).astype(np.float32), device),
            "init": _t(r.standard_normal((batch, heads, dim)).astype(np.float32), device),
            "seq_idx": _t(np.array([[0, 0, 1, 1], [0, 0, 0, 0]], dtype=np.int32), device)}


def _sp_launch(t):
    states = t["states"]
    batch, heads, nchunks, dim = states.shape
    out, final = torch.empty_like(states), torch.empty_like(t["init"])
    _state_passing_kernel[(batch, heads, triton.cdiv(dim, 16))](states, out, final, t["dA"], t["init"],
                                                                 t["seq_idx"], nchunks, dim, BLOCK=16,
                                                                 HAS_INITSTATES=True)
    return {"out": out, "final": final}


def _sp_expect(a):
    states, dA = a["states"].astype(np.float64), a["dA"].astype(np.float64)
    batch, heads, nchunks, _ = states.shape
    out, final = np.zeros_like(states), np.zeros_like(a["init"], dtype=np.float64)
    for b in range(batch):
        for h in range(heads):
            s = a["init"][b, h].astype(np.float64)
            prev = a["seq_idx"][b, 0]
            for c in range(nchunks):
                seq = a["seq_idx"][b, c]
                scale = np.exp(dA[b, h, c]) if seq == prev else 0.0
                prev = seq
                out[b, h, c] = s
                s = scale * s + states[b, h, c]
            final[b, h] = s
    return {"out": out.astype(np.float32), "final": final.astype(np.float32)}


_APPROX = ("compiled exp/exp2 run on ex2.approx, log/log2 on libdevice polynomials (not correctly rounded), "
           "sigmoid divides with div.full")

ENTRIES = [
    Entry("trtllm_libdevice",
          "`from triton.language.extra import libdevice`: libdevice.tanh, exp, log1p, rsqrt on fp32 "
          "(TensorRT-LLM / Unsloth-style activations)",
          _ld_inputs, _ld_launch, _ld_expect,
          ulps(4, "libdevice's tanh/exp/log1p/rsqrt are accurate to a few ulp, not correctly rounded", atol=1e-7)),
    Entry("trtllm_tl_math",
          "softplus as `tl.math.log(tl.math.exp(dt) + 1)` in a jit helper, tl.math.exp2, tl.math.log2, "
          "tl.math.ceil, tl.sigmoid (TensorRT-LLM mamba softplus.py)",
          _tm_inputs, _tm_launch, _tm_expect,
          {"softplus": close(2e-6, 4e-6, _APPROX + "; fp32 log(exp(x) + 1) loses bits to cancellation"),
           "exp2": close(0, 4e-7, _APPROX), "log2": close(1e-6, 4e-7, _APPROX),
           "ceil": EXACT, "sigmoid": close(1e-7, 4e-7, _APPROX)}),
    Entry("trtllm_split_pointer_where",
          "a linear grid split over three outputs, `tl.where(is_x, out_x_ptr, tl.where(is_B, ...))` between "
          "pointers, `tl.cdiv` of a runtime size, tl.trans (TensorRT-LLM fused conv-output split/transpose)",
          _split_inputs, _split_launch, _split_expect, EXACT),
    Entry("trtllm_state_passing",
          "a 3-D grid with tl.num_programs, a runtime loop over chunks under do_not_specialize, exp of a "
          "loaded scalar, a scalar `tl.where` reset at sequence boundaries (TensorRT-LLM ssd_state_passing)",
          _sp_inputs, _sp_launch, _sp_expect,
          close(1e-5, 1e-5, "compiled exp is ex2.approx-based and scale * s + new contracts into an fma")),
]

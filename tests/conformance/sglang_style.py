"""Kernels in the idioms of SGLang's Mamba and FLA layers (``python/sglang/srt/layers/attention/mamba/``,
``.../fla/``).

Written for this corpus after reading SGLang's state scatter after MTP verify,
its Triton causal conv1d and its fused GDN gating; none of their code is here.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from . import Entry
from .numerics import EXACT, close, ulps

# constexpr module globals (Triton 3.7+ refuses a plain global in a jit body)
KERNEL_WIDTH = tl.constexpr(4)
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)


def _t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


# --------------------------------------------------------------------------
# 1. state scatter after a verify step: a 3-D grid, early returns on loaded scalars,
#    `not (... & ...)` on scalar conditions
# --------------------------------------------------------------------------
@triton.jit
def _state_scatter_kernel(src_ptr, dst_ptr, dst_idx_ptr, step_idx_ptr, elem_per_entry,
                          src_layer_stride, src_req_stride, src_step_stride, dst_layer_stride, dst_req_stride,
                          dst_req_size, src_step_size, BLOCK_SIZE: tl.constexpr):
    pid_req = tl.program_id(0)
    pid_layer = tl.program_id(1).to(tl.int64)
    pid_block = tl.program_id(2).to(tl.int64)
    step = tl.load(step_idx_ptr + pid_req).to(tl.int64)
    if step < 0:
        return
    dst = tl.load(dst_idx_ptr + pid_req).to(tl.int64)
    if not ((dst >= 0) & (dst < dst_req_size) & (step < src_step_size)):
        return
    src_off = pid_layer * src_layer_stride + pid_req * src_req_stride + step * src_step_stride
    dst_off = pid_layer * dst_layer_stride + dst * dst_req_stride
    offs = pid_block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m = offs < elem_per_entry
    tl.store(dst_ptr + dst_off + offs, tl.load(src_ptr + src_off + offs, mask=m), mask=m)


def _scatter_inputs(device):
    r = np.random.default_rng(201)
    layers, reqs, steps, elems, cache = 2, 4, 3, 20, 6
    return {"src": _t(r.standard_normal((layers, reqs, steps, elems)).astype(np.float32), device),
            "dst": _t(r.standard_normal((layers, cache, elems)).astype(np.float32), device),
            "dst_idx": _t(np.array([4, 1, 9, 2], dtype=np.int32), device),     # 9: out of range, skipped
            "step_idx": _t(np.array([2, -1, 0, 1], dtype=np.int32), device)}   # -1: rejected draft


def _scatter_launch(t):
    src, dst = t["src"], t["dst"].clone()
    layers, reqs, steps, elems = src.shape
    grid = (reqs, layers, triton.cdiv(elems, 16))
    _state_scatter_kernel[grid](src, dst, t["dst_idx"], t["step_idx"], elems, src.stride(0), src.stride(1),
                                src.stride(2), dst.stride(0), dst.stride(1), dst.shape[1], steps, BLOCK_SIZE=16)
    return {"dst": dst}


def _scatter_expect(a):
    dst = a["dst"].copy()
    for req, (d, s) in enumerate(zip(a["dst_idx"].tolist(), a["step_idx"].tolist())):
        if s < 0 or not (0 <= d < dst.shape[1]) or s >= a["src"].shape[2]:
            continue
        dst[:, d] = a["src"][:, req, s]
    return {"dst": dst}


# --------------------------------------------------------------------------
# 2. causal conv1d over a varlen batch: tl.static_range taps, constexpr module globals,
#    a loaded int1 flag as a scalar `if`, SiLU
# --------------------------------------------------------------------------
@triton.jit
def _causal_conv_kernel(x_ptr, w_ptr, init_ptr, has_init_ptr, cu_ptr, o_ptr, act_ptr, dim,
                        BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)
    feats = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    fmask = feats < dim
    bos = tl.load(cu_ptr + seq)
    eos = tl.load(cu_ptr + seq + 1)
    load_init = tl.load(has_init_ptr + seq).to(tl.int1)
    for t in range(bos, eos):
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for k in tl.static_range(KERNEL_WIDTH):
            src = t - (KERNEL_WIDTH - 1) + k                     # token this tap reads
            w = tl.load(w_ptr + feats * KERNEL_WIDTH + k, mask=fmask, other=0.0)
            if src >= bos:
                v = tl.load(x_ptr + src * dim + feats, mask=fmask, other=0.0)
            else:                                                # before the sequence: the initial state
                col = (KERNEL_WIDTH - 1) + (src - bos)
                v = tl.load(init_ptr + (seq * dim + feats) * (KERNEL_WIDTH - 1) + col,
                            mask=fmask & load_init, other=0.0)
            acc += w * v
        tl.store(o_ptr + t * dim + feats, acc, mask=fmask)
        tl.store(act_ptr + t * dim + feats, acc / (1 + tl.exp(-acc)), mask=fmask)


def _conv_inputs(device):
    r = np.random.default_rng(202)
    total, dim, width = 9, 20, 4
    ints = lambda *s: r.integers(-3, 4, s).astype(np.float32)          # noqa: E731
    return {"x": _t(ints(total, dim), device), "w": _t(ints(dim, width), device),
            "init": _t(ints(3, dim, width - 1), device),
            "has_init": _t(np.array([1, 0, 1], dtype=np.int32), device),
            "cu": _t(np.array([0, 4, 6, 9], dtype=np.int32), device)}


def _conv_launch(t):
    x = t["x"]
    o, act = torch.zeros_like(x), torch.zeros_like(x)
    nseq, dim = t["cu"].numel() - 1, x.shape[1]
    _causal_conv_kernel[(nseq, triton.cdiv(dim, 16))](x, t["w"], t["init"], t["has_init"], t["cu"], o, act, dim,
                                                      BLOCK_N=16)
    return {"o": o, "act": act}


def _conv_expect(a):
    x, w, cu = a["x"].astype(np.float64), a["w"].astype(np.float64), a["cu"]
    o = np.zeros_like(x)
    width = w.shape[1]
    for s in range(len(cu) - 1):
        init = a["init"][s] if a["has_init"][s] else np.zeros_like(a["init"][s])
        seq = np.concatenate([init.T, x[cu[s]:cu[s + 1]]], axis=0)      # [width - 1 + len, dim]
        for i in range(cu[s + 1] - cu[s]):
            o[cu[s] + i] = (seq[i:i + width] * w.T).sum(axis=0)
    act = o / (1.0 + np.exp(-o))
    return {"o": o.astype(np.float32), "act": act.astype(np.float32)}


# --------------------------------------------------------------------------
# 3. tl.where with a scalar condition, Python `and`/`or` on scalar conditions
# --------------------------------------------------------------------------
@triton.jit
def _scalar_cond_kernel(state_ptr, x_ptr, idx_ptr, flag_ptr, o_ptr, num_slots, pad_slot_id, dim,
                        USE_PAD_SLOT: tl.constexpr, BLOCK: tl.constexpr):
    seq = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < dim
    slot = tl.load(idx_ptr + seq).to(tl.int64)
    if USE_PAD_SLOT and slot == pad_slot_id:
        tl.store(o_ptr + seq * dim + offs, tl.full([BLOCK], -2.0, tl.float32), mask=m)
        return
    if slot < 0 or slot >= num_slots:
        return
    keep = tl.load(flag_ptr + seq) != 0
    s = tl.load(state_ptr + slot * dim + offs, mask=m, other=0.0)
    x = tl.load(x_ptr + seq * dim + offs, mask=m, other=0.0)
    val = tl.where(keep, s, 0.0) + x
    if keep and seq > 0:
        val = val + 0.5
    tl.store(o_ptr + seq * dim + offs, val, mask=m)


def _cond_inputs(device):
    r = np.random.default_rng(203)
    return {"state": _t(r.standard_normal((5, 12)).astype(np.float32), device),
            "x": _t(r.standard_normal((5, 12)).astype(np.float32), device),
            "idx": _t(np.array([3, -1, 0, 7, 4], dtype=np.int32), device),
            "flag": _t(np.array([1, 1, 0, 1, 1], dtype=np.int32), device)}


def _cond_launch(t):
    x = t["x"]
    o = torch.full_like(x, 9.0)
    _scalar_cond_kernel[(x.shape[0],)](t["state"], x, t["idx"], t["flag"], o, t["state"].shape[0], -1, x.shape[1],
                                       USE_PAD_SLOT=True, BLOCK=16)
    return {"o": o}


def _cond_expect(a):
    o = np.full_like(a["x"], 9.0)
    slots = a["state"].shape[0]
    for seq, slot in enumerate(a["idx"].tolist()):
        if slot == -1:
            o[seq] = -2.0
            continue
        if slot < 0 or slot >= slots:
            continue
        keep = a["flag"][seq] != 0
        val = (a["state"][slot] if keep else np.float32(0.0)) + a["x"][seq]
        if keep and seq > 0:
            val = val + np.float32(0.5)
        o[seq] = val
    return {"o": o}


# --------------------------------------------------------------------------
# 4. fused GDN gating: softplus with beta/threshold constexprs, sigmoid, bf16 in and out
# --------------------------------------------------------------------------
@triton.jit
def _gdn_gating_kernel(g_ptr, beta_ptr, A_log_ptr, a_ptr, b_ptr, dt_bias_ptr, seq_len, num_heads,
                       beta: tl.constexpr, BLK_HEADS: tl.constexpr):
    i_b, i_s = tl.program_id(0), tl.program_id(1)
    head_off = tl.arange(0, BLK_HEADS)
    off = i_b * seq_len * num_heads + i_s * num_heads + head_off
    mask = head_off < num_heads
    blk_A_log = tl.load(A_log_ptr + head_off, mask=mask)
    blk_a = tl.load(a_ptr + off, mask=mask)
    blk_b = tl.load(b_ptr + off, mask=mask)
    blk_bias = tl.load(dt_bias_ptr + head_off, mask=mask)
    x = blk_a.to(tl.float32) + blk_bias.to(tl.float32)
    softplus_x = tl.where(beta * x <= SOFTPLUS_THRESHOLD, (1 / beta) * tl.log(1 + tl.exp(beta * x)), x)
    blk_g = -tl.exp(blk_A_log.to(tl.float32)) * softplus_x
    tl.store(g_ptr + off, blk_g.to(g_ptr.dtype.element_ty), mask=mask)
    blk_beta = tl.sigmoid(blk_b.to(tl.float32))
    tl.store(beta_ptr + off, blk_beta.to(beta_ptr.dtype.element_ty), mask=mask)


def _bf16(a, device):
    from .numerics import to_bf16, unwire
    return unwire(to_bf16(a), "bfloat16", device)


def _gating_inputs(device):
    r = np.random.default_rng(204)
    batch, seq, heads = 2, 3, 6
    a = r.uniform(-4, 4, (batch, seq, heads))
    a[0, 0, 0] = 23.0                                         # past the threshold: softplus is x
    return {"A_log": _t(r.uniform(-1, 1, heads).astype(np.float32), device),
            "a": _bf16(a, device), "b": _bf16(r.uniform(-6, 6, (batch, seq, heads)), device),
            "dt_bias": _t(r.uniform(-1, 1, heads).astype(np.float32), device)}


def _gating_launch(t):
    a = t["a"]
    batch, seq, heads = a.shape
    g = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    beta = torch.empty_like(a)
    _gdn_gating_kernel[(batch, seq)](g, beta, t["A_log"], a, t["b"], t["dt_bias"], seq, heads,
                                     beta=1.0, BLK_HEADS=8)
    return {"g": g, "beta": beta}


def _gating_expect(a):
    from .numerics import bf16, to_bf16
    x = bf16(a["a"]) + a["dt_bias"].astype(np.float64)
    sp = np.where(x <= 20.0, np.log1p(np.exp(x)), x)
    g = -np.exp(a["A_log"].astype(np.float64)) * sp
    beta = 1.0 / (1.0 + np.exp(-bf16(a["b"])))
    return {"g": g.astype(np.float32), "beta": to_bf16(beta)}


ENTRIES = [
    Entry("sglang_state_scatter_3d",
          "3-D grid (request, layer, block), `tl.program_id(1).to(tl.int64)`, early `return` on loaded "
          "scalars, `if not ((a >= 0) & (a < n) & ...)` (SGLang mamba_state_scatter_triton)",
          _scatter_inputs, _scatter_launch, _scatter_expect, EXACT),
    Entry("sglang_causal_conv_static_range",
          "`tl.static_range(KERNEL_WIDTH)` taps over a tl.constexpr module global, a loaded int1 flag in a "
          "mask, `if src >= bos` on a scalar inside an unrolled loop, SiLU (SGLang causal_conv1d_triton)",
          _conv_inputs, _conv_launch, _conv_expect,
          {"o": EXACT,
           "act": close(2e-6, 2e-6, "compiled exp is ex2.approx-based and fp32 division is div.full (2 ulp)")},
          model="inputs are small integers: every tap product and partial sum of `o` is exact in fp32, "
                "so fma contraction and order cannot change it"),
    Entry("sglang_scalar_conditions",
          "`tl.where` with a scalar condition, `if USE_PAD_SLOT and slot == pad_slot_id:`, "
          "`if slot < 0 or slot >= n:`, `if keep and seq > 0:` (SGLang conv/SSM state guards)",
          _cond_inputs, _cond_launch, _cond_expect, EXACT),
    Entry("sglang_gdn_gating",
          "softplus with beta/threshold (a constexpr argument and a constexpr global), `-exp(A_log) * "
          "softplus(a + dt_bias)`, tl.sigmoid, bf16 loads `.to(tl.float32)` and a store cast to "
          "`ptr.dtype.element_ty` (SGLang/vLLM fused_gdn_gating)",
          _gating_inputs, _gating_launch, _gating_expect,
          {"g": close(2e-6, 2e-6, "compiled exp runs on ex2.approx, log on libdevice's logf; the kernel's fp32 "
                                  "log(1 + exp(x)) loses ~50 ulp to cancellation where numpy takes float64 log1p"),
           "beta": ulps(1, "the fp32 sigmoid may differ in its last bits (ex2.approx, div.full), which can move the "
                           "bf16 rounding by one ulp")},
          model="beta: the fp32 sigmoid rounded once to bf16, nearest even (compiled cvt.rn.bf16.f32)"),
]

"""Kernels in the idioms of vLLM's Mamba ops (``vllm/model_executor/layers/mamba/ops/``).

Written for this corpus after reading how ``causal_conv1d.py`` (the update
path), ``mamba_ssm.py`` (selective state update), the varlen SSD kernels and
the Mamba state-copy postprocess are written; none of their code is here.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from . import Entry
from .numerics import EXACT, close

PAD_SLOT_ID = -1


def _t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


# --------------------------------------------------------------------------
# 1. conv-state shift under a pad-slot mask: a loaded scalar & a block
# --------------------------------------------------------------------------
@triton.jit
def _conv_state_shift_kernel(x_ptr, state_ptr, idx_ptr, o_ptr, dim, pad_slot_id,
                             stride_x_seq, stride_s_seq, stride_s_dim, stride_s_tok,
                             BLOCK_N: tl.constexpr):
    idx_seq = tl.program_id(0)
    idx_feats = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    coord = tl.load(idx_ptr + idx_seq).to(tl.int64)
    mask = (coord != pad_slot_id) & (idx_feats < dim)
    base = state_ptr + coord * stride_s_seq + idx_feats * stride_s_dim
    col0 = tl.load(base, mask, 0.0)
    col1 = tl.load(base + stride_s_tok, mask, 0.0)
    col2 = tl.load(base + 2 * stride_s_tok, mask, 0.0)
    x = tl.load(x_ptr + idx_seq * stride_x_seq + idx_feats, mask=idx_feats < dim, other=0.0)
    tl.store(base, col1, mask=mask)
    tl.store(base + stride_s_tok, col2, mask=mask)
    tl.store(base + 2 * stride_s_tok, x, mask=mask)
    tl.store(o_ptr + idx_seq * stride_x_seq + idx_feats, (col0 + col1) + x, mask=mask)


def _conv_inputs(device):
    r = np.random.default_rng(101)
    return {"state": _t(r.standard_normal((4, 24, 3)).astype(np.float32), device),
            "x": _t(r.standard_normal((3, 24)).astype(np.float32), device),
            "idx": _t(np.array([2, PAD_SLOT_ID, 0], dtype=np.int32), device)}


def _conv_launch(t):
    state, x, idx = t["state"].clone(), t["x"], t["idx"]
    o = torch.full_like(x, -7.0)
    batch, dim = x.shape
    _conv_state_shift_kernel[(batch, triton.cdiv(dim, 16))](
        x, state, idx, o, dim, PAD_SLOT_ID, x.stride(0), state.stride(0), state.stride(1), state.stride(2),
        BLOCK_N=16)
    return {"state": state, "o": o}


def _conv_expect(a):
    state, x = a["state"].copy(), a["x"]
    o = np.full_like(x, -7.0)
    for seq, slot in enumerate(a["idx"].tolist()):
        if slot == PAD_SLOT_ID:
            continue
        old = a["state"][slot]
        o[seq] = (old[:, 0] + old[:, 1]) + x[seq]          # float32, the kernel's order
        state[slot] = np.stack([old[:, 1], old[:, 2], x[seq]], axis=1)
    return {"state": state, "o": o}


# --------------------------------------------------------------------------
# 2. selective state update: stacked heuristics, a 3-D grid, do_not_specialize,
#    softplus through tl.math, exp2-based fast exp, `mask &= slot != pad`
# --------------------------------------------------------------------------
@triton.jit
def _softplus(dt):
    return tl.where(dt <= 20.0, tl.math.log(tl.math.exp(dt) + 1), dt)


@triton.jit
def _fast_exp(x):
    LOG2E = tl.constexpr(1.4426950408889634)
    return tl.math.exp2(LOG2E * x)


@triton.heuristics({"HAS_DT_BIAS": lambda args: args["dt_bias_ptr"] is not None})
@triton.heuristics({"HAS_D": lambda args: args["D_ptr"] is not None})
@triton.heuristics({"HAS_Z": lambda args: args["z_ptr"] is not None})
@triton.heuristics({"BLOCK_SIZE_DSTATE": lambda args: triton.next_power_of_2(args["dstate"])})
@triton.jit(do_not_specialize=["N"])
def _ssm_update_kernel(state_ptr, x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, out_ptr,
                       idx_ptr, pad_slot_id, N, dim, dstate, nheads_ngroups_ratio,
                       stride_state_batch, stride_state_head, stride_state_dim,
                       stride_x_batch, stride_x_head, stride_B_batch, stride_B_group,
                       DT_SOFTPLUS: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
                       HAS_D: tl.constexpr, HAS_Z: tl.constexpr, BLOCK_SIZE_DSTATE: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_b = tl.program_id(axis=1)
    pid_h = tl.program_id(axis=2)
    slot = tl.load(idx_ptr + pid_b).to(tl.int64)
    state_ptr += slot * stride_state_batch + pid_h * stride_state_head
    x_ptr += pid_b * stride_x_batch + pid_h * stride_x_head
    dt_ptr += pid_b * stride_x_batch + pid_h * stride_x_head
    out_ptr += pid_b * stride_x_batch + pid_h * stride_x_head
    A_ptr += pid_h * dim * dstate
    B_ptr += pid_b * stride_B_batch + (pid_h // nheads_ngroups_ratio) * stride_B_group
    C_ptr += pid_b * stride_B_batch + (pid_h // nheads_ngroups_ratio) * stride_B_group

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = tl.arange(0, BLOCK_SIZE_DSTATE)
    state_ptrs = state_ptr + offs_m[:, None] * stride_state_dim + offs_n[None, :]
    mask = (offs_m[:, None] < dim) & (offs_n[None, :] < dstate)
    mask &= slot != pad_slot_id
    state = tl.load(state_ptrs, mask=mask, other=0.0)

    x = tl.load(x_ptr + offs_m, mask=offs_m < dim, other=0.0)
    dt = tl.load(dt_ptr + offs_m, mask=offs_m < dim, other=0.0)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + pid_h * dim + offs_m, mask=offs_m < dim, other=0.0)
    if DT_SOFTPLUS:
        dt = _softplus(dt)
    A = tl.load(A_ptr + offs_m[:, None] * dstate + offs_n[None, :],
                mask=(offs_m[:, None] < dim) & (offs_n[None, :] < dstate), other=0.0)
    dA = _fast_exp(A * dt[:, None])
    B = tl.load(B_ptr + offs_n, mask=offs_n < dstate, other=0.0)
    C = tl.load(C_ptr + offs_n, mask=offs_n < dstate, other=0.0)
    dB = B[None, :] * dt[:, None]
    state = state * dA + dB * x[:, None]
    tl.store(state_ptrs, state, mask=mask)

    out = tl.sum(state * C[None, :], axis=1)
    if HAS_D:
        out += x * tl.load(D_ptr + pid_h * dim + offs_m, mask=offs_m < dim, other=0.0)
    if HAS_Z:
        z = tl.load(z_ptr + offs_m, mask=offs_m < dim, other=0.0)
        out *= z * tl.sigmoid(z)
    tl.store(out_ptr + offs_m, out, mask=offs_m < dim)


def _ssm_inputs(device):
    r = np.random.default_rng(102)
    slots, nheads, dim, dstate, batch = 4, 2, 6, 12, 3
    f = np.float32
    return {"state": _t(r.standard_normal((slots, nheads, dim, dstate)).astype(f), device),
            "x": _t(r.standard_normal((batch, nheads, dim)).astype(f), device),
            "dt": _t(r.uniform(-1.0, 1.0, (batch, nheads, dim)).astype(f), device),
            "dt_bias": _t(r.uniform(-0.5, 0.5, (nheads, dim)).astype(f), device),
            "A": _t(-r.uniform(0.1, 2.0, (nheads, dim, dstate)).astype(f), device),
            "B": _t(r.standard_normal((batch, 1, dstate)).astype(f), device),
            "C": _t(r.standard_normal((batch, 1, dstate)).astype(f), device),
            "D": _t(r.standard_normal((nheads, dim)).astype(f), device),
            "idx": _t(np.array([3, PAD_SLOT_ID, 1], dtype=np.int32), device)}


def _ssm_launch(t):
    state = t["state"].clone()
    x = t["x"]
    out = torch.empty_like(x)
    batch, nheads, dim = x.shape
    dstate, ngroups = state.shape[-1], t["B"].shape[1]
    block_m = 4
    grid = lambda META: (triton.cdiv(dim, META["BLOCK_SIZE_M"]), batch, nheads)  # noqa: E731
    _ssm_update_kernel[grid](state, x, t["dt"], t["dt_bias"], t["A"], t["B"], t["C"], t["D"], None, out,
                             t["idx"], PAD_SLOT_ID, batch, dim, dstate, nheads // ngroups,
                             state.stride(0), state.stride(1), state.stride(2), x.stride(0), x.stride(1),
                             t["B"].stride(0), t["B"].stride(1), DT_SOFTPLUS=True, BLOCK_SIZE_M=block_m)
    return {"state": state, "out": out}


def _ssm_expect(a):
    state = a["state"].astype(np.float64)
    new_state = a["state"].copy()
    x, dt = a["x"].astype(np.float64), a["dt"].astype(np.float64)
    batch, nheads, dim = x.shape
    out = np.zeros_like(x)
    for b, slot in enumerate(a["idx"].tolist()):
        for h in range(nheads):
            d = dt[b, h] + a["dt_bias"][h]
            d = np.where(d <= 20.0, np.log1p(np.exp(d)), d)
            s = state[slot, h] if slot != PAD_SLOT_ID else np.zeros_like(state[0, h])
            s = s * np.exp(a["A"][h] * d[:, None]) + a["B"][b, 0][None, :] * d[:, None] * x[b, h][:, None]
            if slot != PAD_SLOT_ID:
                new_state[slot, h] = s.astype(np.float32)
            out[b, h] = (s * a["C"][b, 0][None, :]).sum(axis=1) + x[b, h] * a["D"][h]
    return {"state": new_state, "out": out.astype(np.float32)}


# --------------------------------------------------------------------------
# 3. loops over bounds loaded from memory (varlen, cu_seqlens-style)
# --------------------------------------------------------------------------
@triton.jit
def _varlen_kernel(x_ptr, cu_ptr, n_ptr, o_ptr, sums_ptr, tail_ptr, BLOCK: tl.constexpr):
    seq = tl.program_id(0)
    bos = tl.load(cu_ptr + seq)
    eos = tl.load(cu_ptr + seq + 1)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(bos, eos, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < eos
        v = tl.load(x_ptr + offs, mask=m, other=0)
        acc += v
        tl.store(o_ptr + offs, v * 2 + seq, mask=m)
    tl.store(sums_ptr + seq, tl.sum(acc, axis=0))
    if seq == 0:
        for i in range(0, tl.load(n_ptr), BLOCK):
            offs = i + tl.arange(0, BLOCK)
            m = offs < tl.load(n_ptr)
            tl.store(tail_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1000, mask=m)


def _varlen_inputs(device):
    r = np.random.default_rng(103)
    return {"x": _t(r.integers(-100, 100, 40).astype(np.int32), device),
            "cu": _t(np.array([0, 5, 5, 23, 40], dtype=np.int32), device),
            "n": _t(np.array([37], dtype=np.int32), device)}


def _varlen_launch(t):
    x, cu = t["x"], t["cu"]
    nseq = cu.numel() - 1
    o = torch.full_like(x, -1)
    sums = torch.full((nseq,), -1, dtype=torch.int32, device=x.device)
    tail = torch.full_like(x, -1)
    _varlen_kernel[(nseq,)](x, cu, t["n"], o, sums, tail, BLOCK=8)
    return {"o": o, "sums": sums, "tail": tail}


def _varlen_expect(a):
    x, cu, n = a["x"], a["cu"], int(a["n"][0])
    o = np.full_like(x, -1)
    sums = np.zeros(len(cu) - 1, dtype=np.int32)
    for s in range(len(cu) - 1):
        o[cu[s]:cu[s + 1]] = x[cu[s]:cu[s + 1]] * 2 + s
        sums[s] = x[cu[s]:cu[s + 1]].sum()
    tail = np.full_like(x, -1)
    tail[:n] = x[:n] + 1000
    return {"o": o, "sums": sums, "tail": tail}


# --------------------------------------------------------------------------
# 4. raw int64 byte addresses cast to typed pointers (the state-copy postprocess)
# --------------------------------------------------------------------------
@triton.jit(do_not_specialize=["pool_addr", "table_addr", "block_stride_bytes", "n_elem"])
def _raw_address_copy_kernel(pool_addr, table_addr, pairs_ptr, block_stride_bytes, n_elem, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    table = table_addr.to(tl.pointer_type(tl.int32))
    src_blk = tl.load(table + tl.load(pairs_ptr + 2 * pid)).to(tl.int64)
    dst_blk = tl.load(table + tl.load(pairs_ptr + 2 * pid + 1)).to(tl.int64)
    src = (pool_addr + src_blk * block_stride_bytes).to(tl.pointer_type(tl.float32))
    dst = (pool_addr + dst_blk * block_stride_bytes).to(tl.pointer_type(tl.float32))
    for start in range(0, n_elem, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n_elem
        tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def _raw_inputs(device):
    r = np.random.default_rng(104)
    return {"pool": _t(r.standard_normal((8, 24)).astype(np.float32), device),
            "table": _t(np.array([5, 1, 7, 0, 3, 6], dtype=np.int32), device),
            # (table index of the source block, table index of the destination block)
            "pairs": _t(np.array([[0, 3], [2, 4], [1, 5]], dtype=np.int32), device)}


def _raw_launch(t):
    pool, table, pairs = t["pool"].clone(), t["table"], t["pairs"]
    _raw_address_copy_kernel[(pairs.shape[0],)](pool.data_ptr(), table.data_ptr(), pairs,
                                                pool.stride(0) * pool.element_size(), 20, BLOCK=8)
    return {"pool": pool}


def _raw_expect(a):
    pool, table = a["pool"].copy(), a["table"]
    for s, d in a["pairs"].tolist():
        pool[table[d], :20] = a["pool"][table[s], :20]
    return {"pool": pool}


# --------------------------------------------------------------------------
# 5. int64 offsets past 2**31 elements: a loaded int32 slot widened before the multiply
# --------------------------------------------------------------------------
@triton.jit
def _int64_offset_kernel(x_ptr, slots_ptr, shift_ptr, off_ptr, o_ptr, slot_stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + pid).to(tl.int64)
    off = slot * slot_stride + pid * BLOCK
    tl.store(off_ptr + pid, off)
    shift = tl.load(shift_ptr + pid)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + off + (offs - shift))        # a pointer 2**33 elements out, then back
    tl.store(o_ptr + pid * BLOCK + offs, v)


_SLOT_STRIDE = 2 ** 30 + 3      # an int32 argument; slot * stride passes 2**31 from slot 2 on


def _i64_inputs(device):
    r = np.random.default_rng(105)
    slots = np.array([0, 3, 5, 7], dtype=np.int32)
    return {"x": _t(r.standard_normal(4 * 16).astype(np.float32), device),
            "slots": _t(slots, device),
            "shift": _t(slots.astype(np.int64) * _SLOT_STRIDE, device)}


def _i64_launch(t):
    n = t["slots"].numel()
    off = torch.zeros(n, dtype=torch.int64, device=t["x"].device)
    o = torch.zeros_like(t["x"])
    _int64_offset_kernel[(n,)](t["x"], t["slots"], t["shift"], off, o, _SLOT_STRIDE, BLOCK=16)
    return {"off": off, "o": o}


def _i64_expect(a):
    pid = np.arange(len(a["slots"]), dtype=np.int64)
    return {"off": a["slots"].astype(np.int64) * _SLOT_STRIDE + pid * 16, "o": a["x"].copy()}


_SSM_REASON = ("compiled exp/exp2 run on ex2.approx and log on libdevice's logf (neither correctly rounded), "
               "a*b+c contracts into an fma and the dstate sum is a tree; numpy works in float64")

ENTRIES = [
    Entry("vllm_conv_pad_mask",
          "a loaded scalar & a block as a mask, `(coord != pad_slot_id) & (feats < dim)`, positional "
          "mask/other loads, col0/col1/col2 shift (vLLM causal_conv1d_update)",
          _conv_inputs, _conv_launch, _conv_expect, EXACT),
    Entry("vllm_ssm_update",
          "stacked triton.heuristics (None pointers, next_power_of_2), 3-D grid from a META lambda, "
          "do_not_specialize, pointer args advanced in place, `mask &= slot != pad`, softplus via tl.math, "
          "exp2 fast exp with a local tl.constexpr (vLLM mamba_ssm selective_state_update)",
          _ssm_inputs, _ssm_launch, _ssm_expect, close(3e-5, 3e-5, _SSM_REASON)),
    Entry("vllm_loaded_loop_bounds",
          "for loops over bounds loaded from memory, `range(bos, eos, BLOCK)` and "
          "`range(0, tl.load(n_ptr), BLOCK)`, an empty sequence (vLLM varlen cu_seqlens kernels)",
          _varlen_inputs, _varlen_launch, _varlen_expect, EXACT),
    Entry("vllm_raw_address_pointers",
          "int64 byte addresses passed as ints and cast with `.to(tl.pointer_type(...))`, a loaded int32 "
          "block id widened before `* block_stride` (vLLM Mamba state-copy postprocess)",
          _raw_inputs, _raw_launch, _raw_expect, EXACT),
    Entry("vllm_int64_offsets",
          "`tl.program_id(0).to(tl.int64)`, a loaded int32 slot `.to(tl.int64)` times an int32 stride past "
          "2**31, a pointer 2**33 elements out and back (vLLM state indices, `.to(tl.int64)` before strides)",
          _i64_inputs, _i64_launch, _i64_expect, EXACT),
]

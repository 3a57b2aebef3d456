"""Kernels in the idioms of LightLLM's Triton kernels (``lightllm/common/basemodel/triton_kernel/``,
``lightllm/models/*/triton_kernel/``).

Written for this corpus after reading LightLLM's per-layer KV moves over a
table of buffer addresses, ``destindex_copy_kv_fp8`` and
``copy_kv_index_to_req``; none of their code is here.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from . import Entry
from .numerics import E4M3, EXACT, bf16, round_to, to_bf16, unwire


def _t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


# --------------------------------------------------------------------------
# 1. a uint64 table of per-layer buffer addresses: `tl.load(ptrs + i).to(tl.pointer_type(...))`
# --------------------------------------------------------------------------
@triton.jit
def _layer_table_copy_kernel(src_ptrs, dst_ptrs, src_loc_ptr, dst_loc_ptr, row_elems,
                             BLOCK: tl.constexpr):
    tok = tl.program_id(0)
    layer = tl.program_id(1)
    src = tl.load(src_ptrs + layer).to(tl.pointer_type(tl.float32))
    dst = tl.load(dst_ptrs + layer).to(tl.pointer_type(tl.float32))
    s = tl.load(src_loc_ptr + tok).to(tl.int64)
    d = tl.load(dst_loc_ptr + tok).to(tl.int64)
    for start in range(0, row_elems, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < row_elems
        tl.store(dst + d * row_elems + offs, tl.load(src + s * row_elems + offs, mask=m), mask=m)


def _table_inputs(device):
    r = np.random.default_rng(401)
    out = {f"src{i}": _t(r.standard_normal((5, 20)).astype(np.float32), device) for i in range(3)}
    out.update({f"dst{i}": _t(r.standard_normal((6, 20)).astype(np.float32), device) for i in range(3)})
    out["src_loc"] = _t(np.array([4, 0, 2], dtype=np.int32), device)
    out["dst_loc"] = _t(np.array([1, 5, 3], dtype=np.int32), device)
    return out


def _table_launch(t):
    dsts = [t[f"dst{i}"].clone() for i in range(3)]
    srcs = [t[f"src{i}"] for i in range(3)]
    device = srcs[0].device
    # built as int64 and viewed as uint64: the engines' address tables (torch has few uint64 ops)
    src_ptrs = torch.tensor([s.data_ptr() for s in srcs], dtype=torch.int64, device=device).view(torch.uint64)
    dst_ptrs = torch.tensor([d.data_ptr() for d in dsts], dtype=torch.int64, device=device).view(torch.uint64)
    ntok = t["src_loc"].numel()
    _layer_table_copy_kernel[(ntok, len(srcs))](src_ptrs, dst_ptrs, t["src_loc"], t["dst_loc"], 20, BLOCK=16)
    return {f"dst{i}": d for i, d in enumerate(dsts)}


def _table_expect(a):
    out = {}
    for i in range(3):
        d = a[f"dst{i}"].copy()
        d[a["dst_loc"]] = a[f"src{i}"][a["src_loc"]]
        out[f"dst{i}"] = d
    return out


# --------------------------------------------------------------------------
# 2. per-head fp8 quantisation into a cache at loaded destinations: tl.clamp, float constexprs,
#    `.to(tl.float8e4nv)`
# --------------------------------------------------------------------------
@triton.jit
def _destindex_fp8_kernel(K, Dest_loc, Out, scale, stride_k_bs, stride_k_h, stride_o_bs, stride_o_h, head_num,
                          BLOCK_DMODEL: tl.constexpr, BLOCK_HEAD: tl.constexpr, FP8_MIN: tl.constexpr,
                          FP8_MAX: tl.constexpr):
    cur_index = tl.program_id(0)
    offs_h = tl.arange(0, BLOCK_HEAD)
    offs_d = tl.arange(0, BLOCK_DMODEL)
    dest_index = tl.load(Dest_loc + cur_index).to(tl.int64)
    k_ptrs = K + cur_index * stride_k_bs + stride_k_h * offs_h[:, None] + offs_d[None, :]
    o_ptrs = Out + dest_index * stride_o_bs + stride_o_h * offs_h[:, None] + offs_d[None, :]
    scales = tl.load(scale + offs_h, mask=offs_h < head_num, other=1.0)
    k = tl.load(k_ptrs, mask=offs_h[:, None] < head_num, other=0.0)
    k_fp8 = tl.clamp(k / scales[:, None], min=FP8_MIN, max=FP8_MAX).to(tl.float8e4nv)
    tl.store(o_ptrs, k_fp8, mask=offs_h[:, None] < head_num)


def _fp8_inputs(device):
    r = np.random.default_rng(402)
    k = r.standard_normal((4, 3, 16)) * 40.0
    k[0, 0, :4] = [1000.0, -1000.0, 0.0, 3.0e-3]                    # clamped both ways; zero; subnormal
    return {"k": unwire(to_bf16(k), "bfloat16", device),
            "dest": _t(np.array([5, 0, 2, 7], dtype=np.int32), device),
            "scale": _t(np.array([0.5, 2.0, 0.25], dtype=np.float32), device)}   # powers of two


def _fp8_launch(t):
    k = t["k"]
    ntok, heads, dm = k.shape
    out = torch.zeros((8, heads, dm), dtype=torch.float8_e4m3fn, device=k.device)
    _destindex_fp8_kernel[(ntok,)](k, t["dest"], out, t["scale"], k.stride(0), k.stride(1), out.stride(0),
                                   out.stride(1), heads, BLOCK_DMODEL=dm, BLOCK_HEAD=triton.next_power_of_2(heads),
                                   FP8_MIN=-448.0, FP8_MAX=448.0)
    return {"out": out}


def _fp8_expect(a):
    k = bf16(a["k"]) / a["scale"].astype(np.float64)[None, :, None]
    q = round_to(np.clip(k, -448.0, 448.0), E4M3)
    out = np.zeros((8,) + k.shape[1:], dtype=np.uint8)
    out[a["dest"]] = q
    return {"out": out}


# --------------------------------------------------------------------------
# 3. int32 sizes and indices: a request-to-token table written at loaded positions
# --------------------------------------------------------------------------
@triton.jit
def _req_table_kernel(req_to_token, b_req_idx, b_start, b_seq_len, mem_index, stride_req, BLOCK: tl.constexpr):
    cur = tl.program_id(0)
    req = tl.load(b_req_idx + cur)
    start = tl.load(b_start + cur)
    seq_len = tl.load(b_seq_len + cur)
    for i in range(0, seq_len, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        m = offs < seq_len
        v = tl.load(mem_index + start + offs, mask=m, other=0)
        tl.store(req_to_token + req * stride_req + offs, tl.where(v >= 0, v, -v), mask=m)


def _req_inputs(device):
    r = np.random.default_rng(403)
    return {"req_idx": _t(np.array([2, 0, 3], dtype=np.int32), device),
            "start": _t(np.array([0, 7, 7], dtype=np.int32), device),
            "seq_len": _t(np.array([7, 0, 12], dtype=np.int32), device),
            "mem": _t(r.integers(-500, 500, 19).astype(np.int32), device)}


def _req_launch(t):
    table = torch.full((4, 16), -1, dtype=torch.int32, device=t["mem"].device)
    _req_table_kernel[(t["req_idx"].numel(),)](table, t["req_idx"], t["start"], t["seq_len"], t["mem"],
                                              table.stride(0), BLOCK=8)
    return {"table": table}


def _req_expect(a):
    table = np.full((4, 16), -1, dtype=np.int32)
    for req, s, n in zip(a["req_idx"].tolist(), a["start"].tolist(), a["seq_len"].tolist()):
        table[req, :n] = np.abs(a["mem"][s:s + n])
    return {"table": table}


ENTRIES = [
    Entry("lightllm_pointer_table",
          "a uint64 tensor of per-layer buffer addresses, `tl.load(ptrs + layer).to(tl.pointer_type(tl.float32))`, "
          "loaded int32 token locations `.to(tl.int64)` (LightLLM per-layer KV moves over address tables)",
          _table_inputs, _table_launch, _table_expect, EXACT),
    Entry("lightllm_destindex_fp8",
          "bf16 / fp32 scale per head, `tl.clamp(min=FP8_MIN, max=FP8_MAX)` with float constexprs, "
          "`.to(tl.float8e4nv)` stored at a loaded destination row (LightLLM destindex_copy_kv_fp8)",
          _fp8_inputs, _fp8_launch, _fp8_expect, EXACT,
          model="k is bf16 widened exactly; scales are powers of two, so k / scale is exact even with div.full; "
                "the clamped value is rounded once to e4m3fn, nearest even (compiled cvt.rn.satfinite.e4m3x2.f32)"),
    Entry("lightllm_int32_sizes",
          "int32 request indices, starts and lengths loaded as loop bounds, a zero-length request, "
          "`tl.where` on int32 (LightLLM copy_kv_index_to_req)",
          _req_inputs, _req_launch, _req_expect, EXACT),
]

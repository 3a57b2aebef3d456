"""16-bit and 8-bit float math, casts and bitcasts, as the engines' state kernels do them.

Every expectation here models what compiled Triton computes on an sm_90 GPU
(``Entry.model`` says how): a 16-bit product or sum is the exact result
rounded once to the format, nearest even (``mul.rn.bf16``/``add.rn.f16``, or
the fp32 result rounded: for two 8- or 11-bit mantissas fp32 holds enough
bits that the double rounding is harmless); every downcast (fp32 -> bf16,
fp16, fp8; fp16 -> fp8) rounds to nearest even (``cvt.rn``, ``satfinite`` for
fp8, whose inputs the kernels clamp first); widening casts are exact;
float -> int truncates toward zero; int -> int keeps the low bits.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from . import Entry
from .numerics import E4M3, E5M2, EXACT, F16, bf16, decode, round_to, to_bf16, ulps, unwire


def _t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def _bf16_tensor(values, device):
    return unwire(to_bf16(values), "bfloat16", device)


_RNE = "the exact result rounded once to the output format, nearest even (compiled mul.rn/add.rn/cvt.rn)"


# --------------------------------------------------------------------------
# 1. bf16 elementwise product and sum
# --------------------------------------------------------------------------
@triton.jit
def _bf16_arith_kernel(a_ptr, b_ptr, prod_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=0.0)
    b = tl.load(b_ptr + offs, mask=m, other=0.0)
    tl.store(prod_ptr + offs, a * b, mask=m)
    tl.store(sum_ptr + offs, a + b, mask=m)


def _bf16_arith_inputs(device):
    r = np.random.default_rng(601)
    a = r.standard_normal(48) * 4
    b = r.standard_normal(48) * 4
    a[:4], b[:4] = [1.5, -3.0, 0.0078125, 100.0], [2.0, 0.5, 3.0, -1.25]     # 1.5 * 2.0 must be 3.0
    return {"a": _bf16_tensor(a, device), "b": _bf16_tensor(b, device)}


def _bf16_arith_launch(t):
    a, b = t["a"], t["b"]
    prod, s = torch.empty_like(a), torch.empty_like(a)
    _bf16_arith_kernel[(triton.cdiv(a.numel(), 16),)](a, b, prod, s, a.numel(), BLOCK=16)
    return {"prod": prod, "sum": s}


def _bf16_arith_expect(a):
    x, y = bf16(a["a"]), bf16(a["b"])
    return {"prod": to_bf16(x * y), "sum": to_bf16(x + y)}


# --------------------------------------------------------------------------
# 2. fp32 -> bf16 casts: ties, near-ties, subnormals, overflow
# --------------------------------------------------------------------------
@triton.jit
def _to_bf16_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m).to(tl.bfloat16), mask=m)


def _to_bf16_inputs(device):
    r = np.random.default_rng(602)
    hi = r.integers(0x3C00, 0x4400, 24, dtype=np.uint32) << 16            # |x| in [2**-7, 2**9)
    low = np.array([0x8000, 0x8000, 0x7FFF, 0x8001] * 6, dtype=np.uint32)  # ties (even/odd heads), near-ties
    hi[0::2] &= ~np.uint32(1 << 16)                                       # even bf16 mantissa
    hi[1::2] |= np.uint32(1 << 16)                                        # odd
    bits = np.concatenate([hi | low, r.integers(0, 2 ** 32, 16, dtype=np.uint32),
                           np.array([0x00012345, 0x80008000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000,
                                     0, 0x80000000], dtype=np.uint32)])
    x = bits.view(np.float32)
    x = np.where(np.isfinite(x), x, 1.0).astype(np.float32)                 # random bits may be NaN/inf
    return {"x": _t(x, device)}


def _to_bf16_launch(t):
    x = t["x"]
    y = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    _to_bf16_kernel[(triton.cdiv(x.numel(), 32),)](x, y, x.numel(), BLOCK=32)
    return {"y": y}


def _to_bf16_expect(a):
    return {"y": to_bf16(a["x"].astype(np.float64))}


# --------------------------------------------------------------------------
# 3. fp16 math and casts
# --------------------------------------------------------------------------
@triton.jit
def _fp16_kernel(a_ptr, b_ptr, x_ptr, prod_ptr, sum_ptr, down_ptr, up_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=0.0)
    b = tl.load(b_ptr + offs, mask=m, other=0.0)
    tl.store(prod_ptr + offs, a * b, mask=m)
    tl.store(sum_ptr + offs, a + b, mask=m)
    tl.store(down_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float16), mask=m)
    tl.store(up_ptr + offs, a.to(tl.float32), mask=m)


def _fp16_inputs(device):
    r = np.random.default_rng(603)
    a = (r.standard_normal(40) * 30).astype(np.float16)
    b = (r.standard_normal(40) * 30).astype(np.float16)
    a[:3], b[:3] = [300.0, 6.1e-5, -2.0], [300.0, 0.25, 1e-3]                # overflow to inf, subnormal
    mids = (decode(np.arange(0x3C00, 0x3C14, dtype=np.uint16), F16)[:-1]
            + decode(np.arange(0x3C01, 0x3C14, dtype=np.uint16), F16)) / 2  # ties above 1.0
    x = np.concatenate([r.standard_normal(18) * 100, mids, [70000.0, -1e-6, 65519.0]]).astype(np.float32)
    return {"a": _t(a, device), "b": _t(b, device), "x": _t(x[:40], device)}


def _fp16_launch(t):
    a = t["a"]
    outs = {"prod": torch.empty_like(a), "sum": torch.empty_like(a), "down": torch.empty_like(a),
            "up": torch.empty(a.shape, dtype=torch.float32, device=a.device)}
    _fp16_kernel[(triton.cdiv(a.numel(), 16),)](a, t["b"], t["x"], outs["prod"], outs["sum"], outs["down"],
                                                outs["up"], a.numel(), BLOCK=16)
    return outs


def _fp16_expect(a):
    x, y = a["a"].astype(np.float64), a["b"].astype(np.float64)
    h = lambda v: round_to(v, F16).view(np.float16)           # noqa: E731
    return {"prod": h(x * y), "sum": h(x + y), "down": h(a["x"].astype(np.float64)),
            "up": a["a"].astype(np.float32)}


# --------------------------------------------------------------------------
# 4. bf16 tl.dot with fp32 accumulation, accumulated over a K loop
# --------------------------------------------------------------------------
@triton.jit
def _bf16_dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _dot_inputs(device):
    r = np.random.default_rng(604)
    return {"a": _bf16_tensor(r.integers(-8, 9, (20, 40)) * 0.5, device),
            "b": _bf16_tensor(r.integers(-8, 9, (40, 24)) * 0.25, device)}


def _dot_launch(t):
    a, b = t["a"], t["b"]
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    _bf16_dot_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BM=16, BN=16, BK=16)
    return {"c": c}


def _dot_expect(a):
    return {"c": (bf16(a["a"]) @ bf16(a["b"])).astype(np.float32)}


# --------------------------------------------------------------------------
# 5. fp8 e4m3: fp32 -> fp8 (clamped), its bits through a bitcast, fp8 -> fp32
# --------------------------------------------------------------------------
@triton.jit
def _e4m3_kernel(x_ptr, q_ptr, bits_ptr, y_ptr, up_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    q = tl.clamp(x, -448.0, 448.0).to(tl.float8e4nv)
    tl.store(q_ptr + offs, q, mask=m)
    tl.store(bits_ptr + offs, q.to(tl.uint8, bitcast=True), mask=m)
    tl.store(up_ptr + offs, tl.load(y_ptr + offs, mask=m).to(tl.float32), mask=m)


def _e4m3_inputs(device):
    r = np.random.default_rng(605)
    grid = decode(np.arange(0x30, 0x40, dtype=np.uint8), E4M3)           # [0.5, 1) .. a few binades
    ties = ((grid[:-1] + grid[1:]) / 2)[:10]
    x = np.concatenate([r.standard_normal(18) * 50, ties, [500.0, -1000.0, 1e-3, 0.0]]).astype(np.float32)
    y = r.integers(0, 256, 32).astype(np.uint8)
    y[(y & 0x7F) == 0x7F] = 0x42                                        # no NaN patterns
    return {"x": _t(x, device), "y": unwire(y, "float8_e4m3fn", device)}


def _e4m3_launch(t):
    x = t["x"]
    n = x.numel()
    q = torch.empty(n, dtype=torch.float8_e4m3fn, device=x.device)
    bits = torch.empty(n, dtype=torch.uint8, device=x.device)
    up = torch.empty(n, dtype=torch.float32, device=x.device)
    _e4m3_kernel[(triton.cdiv(n, 16),)](x, q, bits, t["y"], up, n, BLOCK=16)
    return {"q": q, "bits": bits, "up": up}


def _e4m3_expect(a):
    q = round_to(np.clip(a["x"].astype(np.float64), -448.0, 448.0), E4M3)
    return {"q": q, "bits": q.copy(), "up": decode(a["y"], E4M3).astype(np.float32)}


# --------------------------------------------------------------------------
# 6. fp8 e5m2: fp16 -> fp8 (clamped), fp8 -> fp16
# --------------------------------------------------------------------------
@triton.jit
def _e5m2_kernel(x_ptr, q_ptr, y_ptr, up_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(q_ptr + offs, tl.clamp(x, -57344.0, 57344.0).to(tl.float8e5), mask=m)
    tl.store(up_ptr + offs, tl.load(y_ptr + offs, mask=m).to(tl.float16), mask=m)


def _e5m2_inputs(device):
    r = np.random.default_rng(606)
    grid = decode(np.arange(0x38, 0x44, dtype=np.uint8), E5M2)
    ties = (grid[:-1] + grid[1:]) / 2
    x = np.concatenate([r.standard_normal(17) * 100, ties, [60000.0, -3e-5, 0.0, 1.0]]).astype(np.float16)
    y = r.integers(0, 256, 32).astype(np.uint8)
    y[(y & 0x7C) == 0x7C] = 0x3A                                        # no inf/NaN patterns
    return {"x": _t(x, device), "y": unwire(y, "float8_e5m2", device)}


def _e5m2_launch(t):
    x = t["x"]
    n = x.numel()
    q = torch.empty(n, dtype=torch.float8_e5m2, device=x.device)
    up = torch.empty(n, dtype=torch.float16, device=x.device)
    _e5m2_kernel[(triton.cdiv(n, 16),)](x, q, t["y"], up, n, BLOCK=16)
    return {"q": q, "up": up}


def _e5m2_expect(a):
    return {"q": round_to(np.clip(a["x"].astype(np.float64), -57344.0, 57344.0), E5M2),
            "up": decode(a["y"], E5M2).astype(np.float16)}


# --------------------------------------------------------------------------
# 7. integer and float casts, bitcasts
# --------------------------------------------------------------------------
@triton.jit
def _casts_kernel(f_ptr, i_ptr, l_ptr, u_ptr, f2i_ptr, i2f_ptr, l2i_ptr, i2b_ptr, u2f_ptr, bits_ptr, h2s_ptr, n,
                  BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    f = tl.load(f_ptr + offs, mask=m, other=0.0)
    i = tl.load(i_ptr + offs, mask=m, other=0)
    big = tl.load(l_ptr + offs, mask=m, other=0)
    u = tl.load(u_ptr + offs, mask=m, other=0)
    tl.store(f2i_ptr + offs, f.to(tl.int32), mask=m)
    tl.store(i2f_ptr + offs, i.to(tl.float32), mask=m)
    tl.store(l2i_ptr + offs, big.to(tl.int32), mask=m)
    tl.store(i2b_ptr + offs, i.to(tl.int8), mask=m)
    tl.store(u2f_ptr + offs, u.to(tl.float32) * 0.5, mask=m)
    tl.store(bits_ptr + offs, f.to(tl.int32, bitcast=True), mask=m)
    tl.store(h2s_ptr + offs, f.to(tl.float16).to(tl.int16), mask=m)


def _casts_inputs(device):
    r = np.random.default_rng(607)
    n = 32
    f = (r.standard_normal(n) * 1000).astype(np.float32)          # |f| well below 65504: fp16 -> int16 fits
    f[:3] = [-3.7, 3.7, -0.5]
    i = r.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    i[:3] = [2 ** 24 + 1, -(2 ** 24 + 3), 16777219]                  # int -> fp32 rounds (nearest even)
    big = r.integers(-2 ** 62, 2 ** 62, n, dtype=np.int64)
    u = r.integers(0, 256, n).astype(np.uint8)
    return {"f": _t(f, device), "i": _t(i, device), "big": _t(big, device), "u": _t(u, device)}


def _casts_launch(t):
    f = t["f"]
    n = f.numel()
    dev = f.device
    outs = {"f2i": torch.empty(n, dtype=torch.int32, device=dev), "i2f": torch.empty(n, dtype=torch.float32, device=dev),
            "l2i": torch.empty(n, dtype=torch.int32, device=dev), "i2b": torch.empty(n, dtype=torch.int8, device=dev),
            "u2f": torch.empty(n, dtype=torch.float32, device=dev), "bits": torch.empty(n, dtype=torch.int32, device=dev),
            "h2s": torch.empty(n, dtype=torch.int16, device=dev)}
    _casts_kernel[(triton.cdiv(n, 16),)](f, t["i"], t["big"], t["u"], outs["f2i"], outs["i2f"], outs["l2i"],
                                         outs["i2b"], outs["u2f"], outs["bits"], outs["h2s"], n, BLOCK=16)
    return outs


def _casts_expect(a):
    f, i, big, u = a["f"], a["i"], a["big"], a["u"]
    half = round_to(f.astype(np.float64), F16).view(np.float16)
    return {"f2i": np.trunc(f.astype(np.float64)).astype(np.int32),
            "i2f": i.astype(np.float32),
            "l2i": (big & 0xFFFFFFFF).astype(np.uint32).view(np.int32),
            "i2b": (i & 0xFF).astype(np.uint8).view(np.int8),
            "u2f": (u.astype(np.float32) * np.float32(0.5)),
            "bits": f.view(np.int32).copy(),
            "h2s": np.trunc(half.astype(np.float64)).astype(np.int16)}


# --------------------------------------------------------------------------
# 8. a bf16 state decayed and updated in fp32, stored back as bf16
# --------------------------------------------------------------------------
@triton.jit
def _bf16_state_kernel(state_ptr, x_ptr, decay_ptr, idx_ptr, dim, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    slot = tl.load(idx_ptr + pid).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < dim
    s = tl.load(state_ptr + slot * dim + offs, mask=m, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + pid * dim + offs, mask=m, other=0.0).to(tl.float32)
    s = s * tl.load(decay_ptr + pid) + x
    tl.store(state_ptr + slot * dim + offs, s.to(state_ptr.dtype.element_ty), mask=m)


def _state_inputs(device):
    r = np.random.default_rng(608)
    return {"state": _bf16_tensor(r.standard_normal((5, 24)), device),
            "x": _bf16_tensor(r.standard_normal((3, 24)), device),
            "decay": _t(r.uniform(0.5, 1.0, 3).astype(np.float32), device),
            "idx": _t(np.array([4, 1, 2], dtype=np.int32), device)}


def _state_launch(t):
    state = t["state"].clone()
    _bf16_state_kernel[(t["idx"].numel(),)](state, t["x"], t["decay"], t["idx"], state.shape[1], BLOCK=32)
    return {"state": state}


def _state_expect(a):
    state = a["state"].copy()
    for p, slot in enumerate(a["idx"].tolist()):
        s = bf16(a["state"][slot]) * a["decay"][p].astype(np.float64) + bf16(a["x"][p])
        state[slot] = to_bf16(s)
    return {"state": state}


ENTRIES = [
    Entry("lowp_bf16_arith",
          "bf16 * bf16 and bf16 + bf16 stored as bf16 (the elementwise math of bf16 state kernels; "
          "`1.5 * 2.0` is among the inputs)",
          _bf16_arith_inputs, _bf16_arith_launch, _bf16_arith_expect, EXACT, model=_RNE),
    Entry("lowp_fp32_to_bf16",
          "`.to(tl.bfloat16)` of fp32: exact ties with even and odd heads, near-ties, subnormals, -0, "
          "values that round to inf (every engine's bf16 state store)",
          _to_bf16_inputs, _to_bf16_launch, _to_bf16_expect, EXACT,
          model="fp32 -> bf16 rounds to nearest, ties to even (compiled cvt.rn.bf16.f32); past the largest "
                "finite bf16 it is inf"),
    Entry("lowp_fp16_math",
          "fp16 * fp16, fp16 + fp16 (one overflows to inf, one is subnormal), fp32 -> fp16 with ties and "
          "overflow, fp16 -> fp32",
          _fp16_inputs, _fp16_launch, _fp16_expect, EXACT, model=_RNE),
    Entry("lowp_bf16_dot",
          "`acc = tl.dot(a, b, acc)` on bf16 blocks with fp32 accumulation over a masked K loop "
          "(FLA chunk kernels' bf16 dots)",
          _dot_inputs, _dot_launch, _dot_expect, EXACT,
          model="inputs are multiples of 1/4 below 4 in magnitude: every bf16 product and fp32 partial sum is "
                "exact, so the MMA's order and precision cannot change a bit"),
    Entry("lowp_fp8_e4m3",
          "`tl.clamp(x, -448.0, 448.0).to(tl.float8e4nv)` with ties, its bits by "
          "`.to(tl.uint8, bitcast=True)`, an fp8 e4m3 load `.to(tl.float32)` (LightLLM/vLLM fp8 caches)",
          _e4m3_inputs, _e4m3_launch, _e4m3_expect, EXACT,
          model="fp32 -> e4m3fn rounds to nearest even (compiled cvt.rn.satfinite.e4m3x2.f32) after the clamp; "
                "e4m3 -> fp32 is exact"),
    Entry("lowp_fp8_e5m2",
          "fp16 `tl.clamp(...).to(tl.float8e5)` with ties, an fp8 e5m2 load `.to(tl.float16)`",
          _e5m2_inputs, _e5m2_launch, _e5m2_expect, EXACT,
          model="fp16 -> e5m2 rounds to nearest even (compiled cvt.rn.satfinite.e5m2x2.f16x2) after the clamp; "
                "e5m2 -> fp16 is exact"),
    Entry("lowp_int_float_casts",
          "fp32 -> int32 (toward zero), int32 -> fp32 past 2**24 (rounds), int64 -> int32 and int32 -> int8 "
          "(low bits), uint8 -> fp32, `.to(tl.int32, bitcast=True)`, fp32 -> fp16 -> int16",
          _casts_inputs, _casts_launch, _casts_expect, EXACT,
          model="int -> fp32 rounds to nearest even (cvt.rn.f32.s32); float -> int truncates (cvt.rzi); "
                "narrowing ints keep the low bits"),
    Entry("lowp_bf16_state_update",
          "a bf16 state slot loaded `.to(tl.float32)`, `s * decay + x`, stored back through "
          "`.to(state_ptr.dtype.element_ty)` at a loaded slot (bf16 Mamba/GDN state pools)",
          _state_inputs, _state_launch, _state_expect,
          ulps(1, "s * decay + x contracts into an fma on the GPU: its fp32 result can differ in the last bit, "
                  "which can move the bf16 rounding by one ulp"),
          model="the fp32 update rounded once to bf16, nearest even"),
]

"""Kernels in the idioms of FLA as vLLM and SGLang ship it (``vllm/model_executor/layers/fla/ops/``).

Written for this corpus after reading ``op.py``, ``fused_recurrent.py``,
``chunk_delta_h.py``, ``chunk_scaled_dot_kkt.py`` and ``cumsum.py``; none of
their code is here.  The aliases (``exp``, ``div``, ``safe_exp``) come from
``fla_op.py`` the way FLA's kernels import them from ``op.py``.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from . import Entry
from .fla_op import div, exp, safe_exp
from .numerics import EXACT, close


def _t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def _ints(r, *shape, lo=-3, hi=4):
    return r.integers(lo, hi, shape).astype(np.float32)


_EXACT_INTS = ("inputs are small integers: every product and partial sum is exact in fp32, so fma contraction "
               "and summation order cannot change a bit")


# --------------------------------------------------------------------------
# 1. module-level aliases called in a jit body
# --------------------------------------------------------------------------
@triton.jit
def _alias_kernel(g_ptr, v_ptr, o_ptr, s_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    b_g = tl.load(g_ptr + offs, mask=m, other=0.0)
    b_v = tl.load(v_ptr + offs, mask=m, other=0.0)
    tl.store(o_ptr + offs, exp(b_g) * b_v, mask=m)
    tl.store(s_ptr + offs, div(safe_exp(b_g), 1.0 + exp(-b_g)), mask=m)


def _alias_inputs(device):
    r = np.random.default_rng(301)
    return {"g": _t(r.uniform(-3, 2, 40).astype(np.float32), device),
            "v": _t(r.standard_normal(40).astype(np.float32), device)}


def _alias_launch(t):
    g, v = t["g"], t["v"]
    o, s = torch.empty_like(g), torch.empty_like(g)
    _alias_kernel[(triton.cdiv(g.numel(), 16),)](g, v, o, s, g.numel(), BLOCK=16)
    return {"o": o, "s": s}


def _alias_expect(a):
    g, v = a["g"].astype(np.float64), a["v"].astype(np.float64)
    with np.errstate(over="ignore"):
        s = np.exp(np.where(g <= 0, g, -np.inf)) / (1.0 + np.exp(-g))
    return {"o": (np.exp(g) * v).astype(np.float32), "s": s.astype(np.float32)}


# --------------------------------------------------------------------------
# 2. `.to(tl.int64)` on a `range` loop variable; builtin `min` on scalars
# --------------------------------------------------------------------------
@triton.jit(do_not_specialize=["T"])
def _chunk_last_kernel(x_ptr, h_ptr, last_ptr, T, stride_h, BT: tl.constexpr, D: tl.constexpr):
    i_n = tl.program_id(0)
    NT = tl.cdiv(T, BT)
    offs = tl.arange(0, D)
    x_ptr += (i_n * T * D).to(tl.int64)
    for i_t in range(NT):
        last_idx = min((i_t.to(tl.int64) + 1) * BT, T) - 1
        b = tl.load(x_ptr + last_idx * D + offs)
        tl.store(h_ptr + (i_n * NT + i_t.to(tl.int64)) * stride_h + offs, b)
        tl.store(last_ptr + i_n * NT + i_t, last_idx)


def _last_inputs(device):
    r = np.random.default_rng(302)
    return {"x": _t(r.standard_normal((2, 11, 16)).astype(np.float32), device)}


def _last_launch(t):
    x = t["x"]
    n, T, D = x.shape
    NT = triton.cdiv(T, 4)
    h = torch.zeros((n, NT, D), dtype=x.dtype, device=x.device)
    last = torch.full((n, NT), -1, dtype=torch.int64, device=x.device)
    _chunk_last_kernel[(n,)](x, h, last, T, h.stride(1), BT=4, D=D)
    return {"h": h, "last": last}


def _last_expect(a):
    x = a["x"]
    n, T, _ = x.shape
    idx = np.minimum((np.arange(-(-T // 4)) + 1) * 4, T) - 1
    return {"h": x[:, idx].copy(), "last": np.tile(idx.astype(np.int64), (n, 1))}


# --------------------------------------------------------------------------
# 3. block pointers: tl.make_block_ptr, boundary_check, padding_option, tl.advance, tl.cumsum
# --------------------------------------------------------------------------
@triton.jit(do_not_specialize=["T"])
def _block_ptr_kernel(x_ptr, o_ptr, T, D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    i_d, i_n = tl.program_id(0), tl.program_id(1)
    p_x = tl.make_block_ptr(x_ptr + i_n * T * D, (T, D), (D, 1), (0, i_d * BD), (BT, BD), (1, 0))
    p_o = tl.make_block_ptr(o_ptr + i_n * T * D, (T, D), (D, 1), (0, i_d * BD), (BT, BD), (1, 0))
    acc = tl.zeros([BD], dtype=tl.float32)
    for _ in range(tl.cdiv(T, BT)):
        b = tl.load(p_x, boundary_check=(0, 1), padding_option="zero")
        c = tl.cumsum(b, axis=0) + acc[None, :]
        tl.store(p_o, c.to(p_o.dtype.element_ty), boundary_check=(0, 1))
        acc += tl.sum(b, axis=0)
        p_x = tl.advance(p_x, (BT, 0))
        p_o = tl.advance(p_o, (BT, 0))


def _bp_inputs(device):
    return {"x": _t(_ints(np.random.default_rng(303), 2, 10, 24), device)}


def _bp_launch(t):
    x = t["x"]
    n, T, D = x.shape
    o = torch.full_like(x, -99.0)
    _block_ptr_kernel[(triton.cdiv(D, 16), n)](x, o, T, D=D, BT=4, BD=16)
    return {"o": o}


def _bp_expect(a):
    return {"o": np.cumsum(a["x"].astype(np.float64), axis=1).astype(np.float32)}


# --------------------------------------------------------------------------
# 4. triton.heuristics over triton.autotune, a grid lambda over META, varlen
# --------------------------------------------------------------------------
@triton.heuristics({"USE_INITIAL_STATE": lambda args: args["h0"] is not None,
                    "IS_VARLEN": lambda args: args["cu_seqlens"] is not None})
@triton.autotune(configs=[triton.Config({"BV": BV}, num_warps=nw) for BV in (8, 16) for nw in (1, 2)],
                 key=["K", "V"])
@triton.jit(do_not_specialize=["T"])
def _outer_state_kernel(k, v, h0, ht, cu_seqlens, T, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                        USE_INITIAL_STATE: tl.constexpr, IS_VARLEN: tl.constexpr):
    i_v, i_n = tl.program_id(0), tl.program_id(1)
    if IS_VARLEN:
        bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        T = eos - bos
    else:
        bos = i_n * T
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_v = o_v < V
    b_h = tl.zeros([K, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_h += tl.load(h0 + i_n * K * V + o_k[:, None] * V + o_v[None, :], mask=mask_v[None, :], other=0.0)
    for t in range(0, T):
        b_k = tl.load(k + (bos + t) * K + o_k)
        b_v = tl.load(v + (bos + t) * V + o_v, mask=mask_v, other=0.0)
        b_h += b_k[:, None] * b_v[None, :]
    tl.store(ht + i_n * K * V + o_k[:, None] * V + o_v[None, :], b_h, mask=mask_v[None, :])


def _at_inputs(device):
    r = np.random.default_rng(304)
    return {"k": _t(_ints(r, 5, 8), device), "v": _t(_ints(r, 5, 24), device),
            "h0": _t(_ints(r, 3, 8, 24), device),
            "cu": _t(np.array([0, 2, 2, 5], dtype=np.int64), device)}


def _at_launch(t):
    k, v, h0, cu = t["k"], t["v"], t["h0"], t["cu"]
    n, K, V = h0.shape
    ht = torch.zeros_like(h0)
    grid = lambda meta: (triton.cdiv(V, meta["BV"]), n)       # noqa: E731
    _outer_state_kernel[grid](k, v, h0, ht, cu, k.shape[0], K=K, V=V)
    return {"ht": ht}


def _at_expect(a):
    k, v, cu = a["k"].astype(np.float64), a["v"].astype(np.float64), a["cu"]
    ht = a["h0"].astype(np.float64).copy()
    for i in range(len(cu) - 1):
        ht[i] += k[cu[i]:cu[i + 1]].T @ v[cu[i]:cu[i + 1]]
    return {"ht": ht.astype(np.float32)}


# --------------------------------------------------------------------------
# 5. fused recurrent gated delta rule: `T: tl.int64` args, `if T == 0: return`, a loop over a
#    loaded length, pointers advanced per token, the exp alias, l2norm, an in-place state pool
# --------------------------------------------------------------------------
@triton.heuristics({"USE_INITIAL_STATE": lambda args: args["h0"] is not None})
@triton.jit(do_not_specialize=["N", "T"])
def _recurrent_kernel(q, k, v, g, beta, o, h0, ht, cu_seqlens, ssm_state_indices, scale, N: tl.int64, T: tl.int64,
                      H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                      BV: tl.constexpr, USE_INITIAL_STATE: tl.constexpr, USE_QK_L2NORM_IN_KERNEL: tl.constexpr):
    i_k, i_v, i_nh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    T = eos - bos
    if T == 0:
        return
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    p_q = q + (bos * H + i_h) * K + o_k
    p_k = k + (bos * H + i_h) * K + o_k
    p_v = v + (bos * HV + i_hv) * V + o_v
    p_g = g + bos * HV + i_hv
    p_beta = beta + bos * HV + i_hv
    p_o = o + (bos * HV + i_hv) * V + o_v
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]
    idx = tl.load(ssm_state_indices + i_n).to(tl.int64)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        p_h0 = h0 + idx * HV * K * V + i_hv * K * V + o_k[:, None] * V + o_v[None, :]
        b_h += tl.load(p_h0, mask=mask_h, other=0).to(tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q, mask=mask_k, other=0).to(tl.float32)
        b_k = tl.load(p_k, mask=mask_k, other=0).to(tl.float32)
        b_v = tl.load(p_v, mask=mask_v, other=0).to(tl.float32)
        if USE_QK_L2NORM_IN_KERNEL:
            b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
            b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        b_q = b_q * scale
        b_h *= exp(tl.load(p_g).to(tl.float32))
        b_v -= tl.sum(b_h * b_k[:, None], 0)
        b_v *= tl.load(p_beta).to(tl.float32)
        b_h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=mask_v)
        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_o += HV * V
        p_g += HV
        p_beta += HV
    p_ht = ht + idx * HV * K * V + i_hv * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_ht, b_h.to(p_ht.dtype.element_ty), mask=mask_h)


def _rec_inputs(device):
    r = np.random.default_rng(305)
    total, H, HV, K, V, slots = 5, 1, 2, 16, 16, 4
    f = np.float32
    return {"q": _t(r.standard_normal((total, H, K)).astype(f), device),
            "k": _t(r.standard_normal((total, H, K)).astype(f), device),
            "v": _t(r.standard_normal((total, HV, V)).astype(f), device),
            "g": _t(-r.uniform(0.05, 1.0, (total, HV)).astype(f), device),
            "beta": _t(r.uniform(0.1, 0.9, (total, HV)).astype(f), device),
            "state": _t(r.standard_normal((slots, HV, K, V)).astype(f), device),
            "cu": _t(np.array([0, 2, 2, 5], dtype=np.int32), device),
            "idx": _t(np.array([2, 0, 3], dtype=np.int32), device)}


def _rec_launch(t):
    q, v = t["q"], t["v"]
    state = t["state"].clone()                     # the pool: read at idx, written back at idx
    total, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    N = t["cu"].numel() - 1
    o = torch.zeros_like(v)
    BV = 8
    _recurrent_kernel[(1, triton.cdiv(V, BV), N * HV)](
        q, t["k"], v, t["g"], t["beta"], o, state, state, t["cu"], t["idx"], K ** -0.5, N, total,
        H=H, HV=HV, K=K, V=V, BK=triton.next_power_of_2(K), BV=BV, USE_QK_L2NORM_IN_KERNEL=True)
    return {"o": o, "state": state}


def _rec_expect(a):
    q, k, v = (a[n].astype(np.float64) for n in ("q", "k", "v"))
    g, beta, cu = a["g"].astype(np.float64), a["beta"].astype(np.float64), a["cu"]
    state = a["state"].astype(np.float64)
    out_state = a["state"].copy()
    o = np.zeros_like(v)
    HV, K = v.shape[1], q.shape[2]
    H = q.shape[1]
    for n, slot in enumerate(a["idx"].tolist()):
        if cu[n + 1] == cu[n]:
            continue
        for hv in range(HV):
            h = state[slot, hv].copy()
            hq = hv // (HV // H)
            for t in range(cu[n], cu[n + 1]):
                bq = q[t, hq] / np.sqrt((q[t, hq] ** 2).sum() + 1e-6) * K ** -0.5
                bk = k[t, hq] / np.sqrt((k[t, hq] ** 2).sum() + 1e-6)
                h = h * np.exp(g[t, hv])
                bv = (v[t, hv] - (h * bk[:, None]).sum(0)) * beta[t, hv]
                h = h + bk[:, None] * bv[None, :]
                o[t, hv] = (h * bq[:, None]).sum(0)
            out_state[slot, hv] = h.astype(np.float32)
    return {"o": o.astype(np.float32), "state": out_state}


# --------------------------------------------------------------------------
# 6. chunk K K^T with tl.dot(input_precision="ieee"), tl.trans, a strict lower-triangular
#    tl.where over an iota, tl.cumsum of the gates
# --------------------------------------------------------------------------
@triton.jit(do_not_specialize=["T"])
def _kkt_kernel(k_ptr, g_ptr, A_ptr, gc_ptr, T, K: tl.constexpr, BT: tl.constexpr):
    i_t, i_n = tl.program_id(0), tl.program_id(1)
    NT = tl.cdiv(T, BT)
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < T
    o_k = tl.arange(0, K)
    b_k = tl.load(k_ptr + (i_n * T + o_t[:, None]) * K + o_k[None, :], mask=m_t[:, None], other=0.0)
    b_A = tl.dot(b_k, tl.trans(b_k), input_precision="ieee")
    b_A = tl.where(o_i[:, None] > o_i[None, :], b_A, 0)
    p_A = A_ptr + ((i_n * NT + i_t) * BT + o_i[:, None]) * BT + o_i[None, :]
    tl.store(p_A, b_A, mask=m_t[:, None] & m_t[None, :])
    b_g = tl.load(g_ptr + i_n * T + o_t, mask=m_t, other=0.0)
    tl.store(gc_ptr + i_n * T + o_t, tl.cumsum(b_g, axis=0), mask=m_t)


def _kkt_inputs(device):
    r = np.random.default_rng(306)
    return {"k": _t(_ints(r, 2, 20, 16), device), "g": _t(_ints(r, 2, 20, lo=-4, hi=1), device)}


def _kkt_launch(t):
    k, g = t["k"], t["g"]
    n, T, K = k.shape
    NT = triton.cdiv(T, 16)
    A = torch.full((n, NT, 16, 16), -1.0, dtype=k.dtype, device=k.device)
    gc = torch.zeros_like(g)
    _kkt_kernel[(NT, n)](k, g, A, gc, T, K=K, BT=16)
    return {"A": A, "gc": gc}


def _kkt_expect(a):
    k, g = a["k"].astype(np.float64), a["g"].astype(np.float64)
    n, T, _ = k.shape
    NT = -(-T // 16)
    A = np.full((n, NT, 16, 16), -1.0)
    gc = np.zeros_like(g)
    for b in range(n):
        for c in range(NT):
            kc = k[b, c * 16:(c + 1) * 16]
            m = kc.shape[0]
            A[b, c, :m, :m] = np.tril(kc @ kc.T, -1)
            gc[b, c * 16:(c + 1) * 16] = np.cumsum(g[b, c * 16:(c + 1) * 16])
    return {"A": A.astype(np.float32), "gc": gc.astype(np.float32)}


_REC_REASON = ("compiled exp is ex2.approx-based, sqrt is sqrt.approx, fp32 division is div.full (2 ulp), a*b+c "
               "contracts into fma and the sums are trees; numpy works in float64")

ENTRIES = [
    Entry("fla_module_aliases",
          "module-level aliases imported into the kernel module and called in a jit body: `exp = tl.exp`, "
          "`div = div_normal` (a jit function), `safe_exp` calling the alias (FLA op.py)",
          _alias_inputs, _alias_launch, _alias_expect,
          close(1e-6, 4e-6, "compiled exp is ex2.approx-based and fp32 division is div.full (2 ulp)")),
    Entry("fla_loop_var_int64",
          "`i_t.to(tl.int64)` on a `range` loop variable, `for i_t in range(tl.cdiv(T, BT))`, builtin "
          "`min(..., T)` on scalars, do_not_specialize, a pointer argument advanced by an int64 "
          "(FLA chunk_delta_h / chunk_o)",
          _last_inputs, _last_launch, _last_expect, EXACT),
    Entry("fla_block_pointers",
          "`tl.make_block_ptr` with order (1, 0), `tl.load(boundary_check=(0, 1), padding_option=\"zero\")`, "
          "`tl.advance` in a loop, a store through a block pointer cast to `p.dtype.element_ty`, tl.cumsum "
          "(FLA chunk kernels, cumsum.py)",
          _bp_inputs, _bp_launch, _bp_expect, EXACT, model=_EXACT_INTS,
          unrunnable={"3.9": "`tl.make_block_ptr`"}),
    Entry("fla_heuristics_autotune",
          "`triton.heuristics` (`h0 is not None`, `cu_seqlens is not None`) over `triton.autotune` with four "
          "configs and a key, a grid lambda over META, varlen bounds `.to(tl.int64)`, an empty sequence "
          "(FLA chunk_delta_h)",
          _at_inputs, _at_launch, _at_expect, EXACT, model=_EXACT_INTS),
    Entry("fla_fused_recurrent",
          "`N: tl.int64, T: tl.int64` annotated args under do_not_specialize, `T = eos - bos` then "
          "`if T == 0: return`, a 3-D grid, pointers advanced per token, the `exp` alias, l2norm in kernel, "
          "an in-place state pool at loaded indices (FLA fused_recurrent gated delta rule)",
          _rec_inputs, _rec_launch, _rec_expect, close(2e-5, 2e-5, _REC_REASON)),
    Entry("fla_chunk_kkt_dot",
          "`tl.dot(k, tl.trans(k), input_precision=\"ieee\")`, a strict lower-triangular `tl.where` over "
          "iotas, masked partial chunks, tl.cumsum of the gates (FLA chunk_scaled_dot_kkt, cumsum)",
          _kkt_inputs, _kkt_launch, _kkt_expect, EXACT, model=_EXACT_INTS),
]

"""A Mamba2 selective state update as vLLM writes it, behind the `ssm_update` adapter.

The engine's function is vLLM-shaped: ``selective_state_update(state, x, dt, A, B, C, D, z, dt_bias,
dt_softplus, state_batch_indices, dst_state_batch_indices, pad_slot_id, out, num_accepted_tokens,
cu_seqlens)``, one program per (dim block, row, head), the token loop bounded by a length loaded from
``cu_seqlens`` (an empty row returns before it stores), a pad row's state loaded as zeros (its output written from them, which the contract
does not judge) and nothing stored for it; the full ``[H, D, N]`` strides of ``A`` are read, so the
per-head value broadcast with strides (1, 0, 0) works as is.

The loop over a loaded bound needs Triton 3.7+'s interpreter (3.5 and 3.6 cannot run it).
"""
import pytest
import triton
import triton.language as tl

import mambafuzz

OLD_INTERPRETER = tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 7)


@triton.jit
def _engine_ssu_kernel(state_ptr, x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, out_ptr,
                       sbi_ptr, dsbi_ptr, pad_slot_id, nacc_ptr, cu_ptr, dim, dstate, ratio,
                       ss_b, ss_h, ss_d, ss_n, sx_b, sx_h, sx_d, sdt_b, sdt_h, sdt_d, sdb_h, sdb_d,
                       sa_h, sa_d, sa_n, sb_b, sb_g, sb_n, sc_b, sc_g, sc_n, sd_h, sd_d, sz_b, sz_h, sz_d,
                       so_b, so_h, so_d, si_b, si_t, sj_b, sj_t,
                       DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr,
                       HAS_Z: tl.constexpr, SPEC: tl.constexpr, VARLEN: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_b = tl.program_id(1)
    pid_h = tl.program_id(2)
    if VARLEN:
        bos = tl.load(cu_ptr + pid_b)
        seq_len = tl.load(cu_ptr + pid_b + 1) - bos
        if seq_len == 0:  # an empty row stores nothing (vLLM returns here too)
            return
    else:
        bos = pid_b
        seq_len = 1
    init = 0
    if SPEC:
        init = tl.maximum(tl.load(nacc_ptr + pid_b) - 1, 0)
    slot = tl.load(sbi_ptr + pid_b * si_b + init * si_t).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    tile = (offs_m[:, None] < dim) & (offs_n[None, :] < dstate)
    inner = pid_h * ss_h + offs_m[:, None] * ss_d + offs_n[None, :] * ss_n
    live = tile & (offs_m[:, None] * 0 + slot != pad_slot_id)
    state = tl.load(state_ptr + slot * ss_b + inner, mask=live, other=0.0).to(tl.float32)
    A = tl.load(A_ptr + pid_h * sa_h + offs_m[:, None] * sa_d + offs_n[None, :] * sa_n, mask=tile,
                other=0.0).to(tl.float32)
    g = pid_h // ratio
    for t in range(seq_len):
        tok = bos + t
        x = tl.load(x_ptr + tok * sx_b + pid_h * sx_h + offs_m * sx_d, mask=offs_m < dim, other=0.0).to(tl.float32)
        dt = tl.load(dt_ptr + tok * sdt_b + pid_h * sdt_h + offs_m * sdt_d, mask=offs_m < dim,
                     other=0.0).to(tl.float32)
        if HAS_DT_BIAS:
            dt += tl.load(dt_bias_ptr + pid_h * sdb_h + offs_m * sdb_d, mask=offs_m < dim, other=0.0).to(tl.float32)
        if DT_SOFTPLUS:
            dt = tl.where(dt <= 20.0, tl.log(tl.exp(dt) + 1), dt)
        Bv = tl.load(B_ptr + tok * sb_b + g * sb_g + offs_n * sb_n, mask=offs_n < dstate, other=0.0).to(tl.float32)
        Cv = tl.load(C_ptr + tok * sc_b + g * sc_g + offs_n * sc_n, mask=offs_n < dstate, other=0.0).to(tl.float32)
        state = state * tl.exp(A * dt[:, None]) + Bv[None, :] * dt[:, None] * x[:, None]
        if SPEC:
            dst = tl.load(dsbi_ptr + pid_b * sj_b + t * sj_t).to(tl.int64)
            if dst != pad_slot_id:
                tl.store(state_ptr + dst * ss_b + inner, state.to(state_ptr.dtype.element_ty), mask=live)
        out = tl.sum(state * Cv[None, :], axis=1)
        if HAS_D:
            out += x * tl.load(D_ptr + pid_h * sd_h + offs_m * sd_d, mask=offs_m < dim, other=0.0)
        if HAS_Z:
            z = tl.load(z_ptr + tok * sz_b + pid_h * sz_h + offs_m * sz_d, mask=offs_m < dim, other=0.0).to(tl.float32)
            out *= z * tl.sigmoid(z)
        tl.store(out_ptr + tok * so_b + pid_h * so_h + offs_m * so_d, out, mask=offs_m < dim)
    if not SPEC:
        dst = tl.load(dsbi_ptr + pid_b * sj_b).to(tl.int64)
        tl.store(state_ptr + dst * ss_b + inner, state.to(state_ptr.dtype.element_ty), mask=live)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None, dst_state_batch_indices=None, pad_slot_id=-1, out=None,
                           num_accepted_tokens=None, cu_seqlens=None):
    """The engine's entry point (vLLM's argument names); `out` written in place."""
    dst = state_batch_indices if dst_state_batch_indices is None else dst_state_batch_indices
    _, nheads, dim, dstate = state.shape
    batch = state_batch_indices.shape[0]
    dummy = x
    strides = lambda t, n: t.stride() if t is not None else (0,) * n  # noqa: E731
    block_m = 16
    grid = (triton.cdiv(dim, block_m), batch, nheads)
    _engine_ssu_kernel[grid](
        state, x, dt, dt_bias if dt_bias is not None else dummy, A, B, C, D if D is not None else dummy,
        z if z is not None else dummy, out, state_batch_indices, dst, pad_slot_id,
        num_accepted_tokens if num_accepted_tokens is not None else state_batch_indices,
        cu_seqlens if cu_seqlens is not None else state_batch_indices, dim, dstate, nheads // B.shape[1],
        *state.stride(), *x.stride(), *dt.stride(), *strides(dt_bias, 2), *A.stride(), *B.stride(), *C.stride(),
        *strides(D, 2), *strides(z, 3), *out.stride(), *state_batch_indices.stride(), *dst.stride(),
        DT_SOFTPLUS=dt_softplus, HAS_DT_BIAS=dt_bias is not None, HAS_D=D is not None, HAS_Z=z is not None,
        SPEC=num_accepted_tokens is not None, VARLEN=cu_seqlens is not None, BLOCK_M=block_m,
        BLOCK_N=triton.next_power_of_2(dstate))
    return out


def ssm_update(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
               num_accepted_tokens, cu_seqlens, out, *, dt_softplus, pad_slot_id):
    """The adapter: the contract's arguments in the engine's call."""
    selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                           state_batch_indices=state_batch_indices, dst_state_batch_indices=dst_state_batch_indices,
                           pad_slot_id=pad_slot_id, out=out, num_accepted_tokens=num_accepted_tokens,
                           cu_seqlens=cu_seqlens)


@pytest.mark.matrix
@pytest.mark.skipif(OLD_INTERPRETER, reason="the token loop's bound is loaded from memory: Triton 3.7+'s interpreter")
def test_the_engine_ssm_update_is_right():
    report = mambafuzz.check(ssm_update, "ssm_update", max_examples=25, database=None)
    assert report.examples >= 25 and not report.tally.rejections, report.tally.rejections

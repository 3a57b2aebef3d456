"""The gated-delta-rule prefill of a batch of sequences, with prefix caching (docs/contracts.md#delta_prefill;
GDN, and KDA's per-K decay), in float64.

Sequence n (tokens ``cu[n] : cu[n + 1]``, block-table row ``idx[n]``) is skipped when it has no tokens or
its initial entry ``src = idx[n, init[n]]`` is the pad (column 0 without prefix caching).  Otherwise its
state ``S [HV, V, K]`` (V-major; a K-major pool is its transpose) starts as ``pool[src]`` when
``has_init[n]``, else zeros, and each token runs the decode step of ``delta_update``: q and k optionally
l2-normalised, q times ``scale``; ``S = S * exp(g)`` (g per head, or per K for KDA); ``u = beta * (v -
S k)``; ``S = S + u k^T``; ``o = S q``.  The final S goes to ``idx[n, last[n]]`` (unless no final state
is asked for); with prefix caching, the S after each block boundary the sequence crosses (``o_k = Bs -
c % Bs + k * Bs`` tokens in, ``0 < o_k < L``) to ``idx[n, first[n] + k]``.  A destination holding the
pad stores nothing; every slot nothing stores is unchanged (the initial one included, unless it is also
a destination: loads first).  Who reads and stores what, and what is ill-posed or out of range, is
``conv_prefill``'s plan (``plan_conv_prefill``): the same block-table rules.

Tolerance (``delta_prefill_tolerance``).  Engines chunk the scan (FLA: 64 tokens; the project's kernel:
16, and each block boundary ends a chunk): within a chunk the residual ``S_{t-1} k_t`` is the chunk's
initial state times the decayed key plus a sum over the chunk's earlier tokens (a triangular solve,
``(I + A)^{-1}``), and the chunk's final state one product over its tokens, so the float sums have other
terms and another order than the sequential scan's.  Every such sum is still a sum of terms whose
absolute values the magnitude recurrence bounds: ``mag`` is the scan run on absolute values (``|S|
exp(g)``, ``|u| |k|``, ``|beta| (|v| + |S| |k|)``), and ``|A_tj| |u_j|``, ``exp(G_t) |S_0| |k_t|`` are
each at most the term ``mag`` carries for them.  So a token's local error is at most ``gamma_d`` times
``mag``, with d the longest chain of one token (two K-long products, a 64-term chunk sum each way, the
l2 norms, exp: ``2K + 128 + 16``), and an error made at token j reaches token t scaled like the state
itself: by the decays between them, which ``mag`` carries too (inputs are drawn in the contraction
regime: ``|k| <= 1`` or l2-normalised, beta in (0, 1], so ``I - beta k k^T`` does not grow an error).
Hence a bound that does not grow with the token count: ``1.5 d eps32 mag``, plus, for kernels that hold
chunk intermediates (``v - S k``, the state fed to a product) in the activations' dtype as FLA does with
16-bit inputs, ``2 eps_act mag``, plus the result's rounding to its dtype.  Checked at 2048 tokens, K = V = 128
(``bench/delta_prefill_bound.py``): the project's chunked kernel uses at most 0.6% of the bound, a
chunked scan with FLA's float math 1% (15% with bfloat16 activations), while a 32-bit state stored
through bfloat16 (32-bit activations) lands up to 82 times outside it.

The engines differ: vLLM and SGLang gather ``initial_state`` through the table and zero it where
``has_initial_state`` is false, then scatter the final state back; FLA chunks 64 tokens and, with prefix
caching, engines read the block-boundary states from its per-chunk states (a block size a multiple of
64).  This oracle allows any boundary.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _xp
from .conv_prefill import PrefillRow, plan_conv_prefill
from .delta_update import EPS, EPS_ACC, delta_step, token_inputs
from .errors import OracleError

__all__ = ["DeltaPrefill", "delta_prefill_tolerance", "expect_delta_prefill", "plan_delta_prefill"]

CHUNK_TERMS = 2 * 64  # a chunk's sums: up to 64 terms, once in the solve and once into the state
ACT_ROUNDING = 2.0    # chunk intermediates held in the activations' dtype (two roundings a chunk)
STEP_BLOCK = 64       # token positions whose inputs are gathered at once ([64, sequences, HV, K] a block)


@dataclass
class DeltaPrefill:
    """What a correct prefill leaves: pool and output values with per-element bounds (0: exact)."""

    pool: np.ndarray          # [S, HV, V, K] float64
    pool_bound: np.ndarray    # as pool (float32)
    stored: list[int]         # slots written
    out: np.ndarray           # [T, HV, V] float64
    out_bound: np.ndarray     # as out
    care: np.ndarray          # bool [T]: tokens of live sequences (others: anything)


def plan_delta_prefill(slots: int, lens, idx, has_init, *, init=None, first=None, last=None, computed=None,
                       block_size: int = 0, pad: int = -1, final: bool = True) -> list[PrefillRow]:
    """Every sequence's plan (``PrefillRow``: read slot, whether it reads it, its stores as (slot, tokens
    in)); the final store dropped when no final state is asked for.  Raises OracleError (out of range) or
    IllPosedUpdate, as ``plan_conv_prefill``."""
    plan = plan_conv_prefill(slots, 1, 2, lens, idx, has_init, init=init, first=first, last=last,
                             computed=computed, block_size=block_size, pad=pad)
    if final:
        return plan
    return [PrefillRow(p.row, p.src, p.reads, tuple(s for s in p.stores if s[1] != lens[p.row])) for p in plan]


def delta_prefill_tolerance(state_dtype: str, act_dtype: str, mag, want, kdim: int):
    """Per-element bound on |kernel - oracle| for a value `want` of magnitude `mag` (see the module
    docstring): chunked fp32 work, chunk intermediates in `act_dtype`, the result rounded to `state_dtype`."""
    xp = _xp.of(want)
    bound = xp.f32(abs(want))
    bound *= EPS[state_dtype]
    bound += (1.5 * (2 * kdim + CHUNK_TERMS + 16) * EPS_ACC + ACT_ROUNDING * EPS[act_dtype]) * mag
    bound += 1e-6
    return bound


def expect_delta_prefill(pool, q, k, v, g, beta, cu_seqlens, idx, has_init, *, scale: float, init=None,
                         first=None, last=None, computed=None, block_size: int = 0, pad: int = -1,
                         l2norm: bool = False, final: bool = True, state_dtype: str = "float32",
                         act_dtype: str = "float32") -> DeltaPrefill:
    """The prefill on `pool` (float64 ``[S, HV, V, K]``), tokens q, k ``[T, H, K]``, v ``[T, HV, V]``, g
    ``[T, HV]`` or ``[T, HV, K]``, beta ``[T, HV]`` or ``[T, HV, V]`` (float64); `idx` ``[N][M]``.  Arrays
    are numpy or torch tensors on one device, the result's of the same kind (``care`` numpy).  Vectorised
    over sequences, heads and elements: one pass per token position, a few array operations each."""
    xp = _xp.of(pool)
    slots, hv_count, vdim, kdim = pool.shape
    heads = q.shape[1]
    if heads == 0 or hv_count % heads:
        raise OracleError(f"{hv_count} value heads are not a multiple of {heads} key heads")
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    lens = np.diff(cu)
    rows = len(lens)
    plan = plan_delta_prefill(slots, lens.tolist(), idx, has_init, init=init, first=first, last=last,
                              computed=computed, block_size=block_size, pad=pad, final=final)
    live = np.array([p.src is not None for p in plan], dtype=bool)
    reads = np.array([p.reads for p in plan], dtype=bool)
    src = np.array([p.src if p.reads else 0 for p in plan], dtype=np.int64)
    events = [(p.row, o, s) for p in plan for s, o in p.stores]   # (sequence, tokens in, slot)
    head_of = xp.index(np.arange(hv_count) // (hv_count // heads))
    kda, beta_v = g.ndim == 3, beta.ndim == 3
    state = xp.where(reads[:, None, None, None], pool[xp.index(src)], 0.0) if rows else \
        xp.zeros((0, hv_count, vdim, kdim))
    mag = xp.f32(abs(state))
    new_pool = xp.copy(pool)
    pool_bound = xp.zeros(pool.shape, f32=True)
    care = np.zeros(len(q), dtype=bool)
    by_step: dict[int, list] = {}
    for n, o, s in events:
        by_step.setdefault(o, []).append((n, s))

    # numpy: one sequence at a time (its [HV, V, K] state stays in cache); tensors: every sequence at once,
    # each step's token rows one slice of a table made up front (no index travels to the device a token),
    # a sequence already done fed a neutral token (no decay, beta 0: its state and bound unchanged)
    live_rows = np.flatnonzero(live)
    groups = [live_rows[i:i + 1] for i in range(live_rows.size)] if xp is _xp.NUMPY else [live_rows]
    neutral = len(q)  # one token past the end: zero q, k, v, g and beta
    if xp is not _xp.NUMPY:
        q, k, v, g, beta = (_padded(xp, a) for a in (q, k, v, g, beta))
    out, out_mag = xp.zeros((neutral + 1, hv_count, vdim)), xp.zeros((neutral + 1, hv_count, vdim), f32=True)
    for members in groups:
        at_all = xp.index(members)
        s_all, m_all = state[at_all], mag[at_all]
        place = {int(n): i for i, n in enumerate(members)}
        steps = int(lens[members].max(initial=0))
        positions = np.arange(steps)[:, None]
        rows_of = np.where(positions < lens[members][None], cu[members][None] + positions, neutral)
        table = xp.index(rows_of)                                                 # [steps, members]
        care[rows_of[rows_of < neutral]] = True
        for t0 in range(0, steps, STEP_BLOCK):  # a block of steps' inputs gathered at once
            block = token_inputs(xp, q, k, v, g, beta, table[t0:t0 + STEP_BLOCK], head_of, scale=scale,
                                 l2norm=l2norm, kda=kda, beta_v=beta_v)
            for j in range(min(STEP_BLOCK, steps - t0)):
                t = t0 + j
                tok = table[t]
                out[tok], out_mag[tok] = delta_step(s_all, m_all, block.at(j))
                due = [(place[n], slot) for n, slot in by_step.get(t + 1, ()) if n in place]
                if due:
                    local, dst = (np.array(c, dtype=np.int64) for c in zip(*due))
                    values, scale_ = s_all[xp.index(local)], m_all[xp.index(local)]
                    new_pool[xp.index(dst)] = values
                    pool_bound[xp.index(dst)] = delta_prefill_tolerance(state_dtype, act_dtype, scale_, values,
                                                                        kdim)
    out, out_mag = out[:neutral], out_mag[:neutral]
    out_bound = delta_prefill_tolerance(act_dtype, act_dtype, out_mag, out, kdim)
    stored = sorted({s for _, _, s in events})
    return DeltaPrefill(new_pool, pool_bound, stored, out, out_bound, care)


def _padded(xp, a):
    """`a` [T, ...] with one more row of zeros: the neutral token a finished sequence is fed."""
    out = xp.zeros((a.shape[0] + 1,) + tuple(a.shape[1:]))
    out[:-1] = a
    return out

"""The gated delta rule of one decode or spec-decode step (docs/contracts.md#delta_update; GDN, and KDA's per-K
decay), in float64.

Sequence n (tokens ``cu[n] : cu[n + 1]``), value head hv (key head ``h = hv // (HV / H)``) reads slot
``s = idx[n, max(nacc[n] - 1, 0)]`` (spec) or ``idx[n, 0]``, and skips itself when ``s`` is the pad or
it has no tokens.  Per token, with the state ``S [V, K]`` (V-major; a K-major pool is its transpose):
q and k optionally l2-normalised (``x / sqrt(sum x^2 + 1e-6)``, as the engines write it), q times
``scale``; ``S = S * exp(g)`` (g a scalar per head, or per K for KDA); ``u = beta * (v - S k)`` (beta
a scalar per head or a vector per V); ``S = S + u k^T``; ``o = S q``.  Spec: S after token t is stored
to ``idx[n, t]`` unless that is the pad; non-spec: the final S to ``idx[n, 0]``.  The per-step buffer
(SGLang's ``intermediate_states_buffer``): S after token t goes to ``buf[r, t]`` with ``r = inter[n]``,
for ``t < cache_steps`` only (a token past the buffer's steps caches nothing) and ``r >= 0``.

Ill-posed (``IllPosedUpdate``, from ``conv_update``): two live sequences storing one slot (or caching
into one buffer row), a live sequence storing a slot another reads, a spec sequence with more tokens
than index columns.  Out of range (``OracleError``): a slot neither the pad nor in ``[0, S)``, an
accepted count past the columns, a buffer row past ``R``.

Tolerance (``delta_tolerance``): the kernel works in fp32 from the stored inputs (which the oracle
reads exactly), so its error is a forward error bound: ``gamma_n`` times the same recurrence run on
absolute values (``|S| exp(g)``, ``|S| |k|``, ``|beta| (|v| + |S k|)``, ...: ``mag``), n the chain
depth (per token two K-long dot products, the l2 norms, exp, a few more: ``2K + 16``), plus the
result's rounding to its dtype.  Inputs are drawn in the contraction regime (``|k| ~ 1``, beta in
(0, 1], exp(g) <= 1), so ``mag`` stays within a small factor of ``|S|`` and a wrong slot, head,
layout or step (values of unit size) is far outside the bound.

The engines differ (vLLM and SGLang as of 2026): vLLM reads column ``nacc - 1`` unclamped, and its
``fused_recurrent`` kernel checks no pad (``fused_sigmoid_gating`` skips only ``idx < 0``); SGLang's update kernel starts a
pad row (``idx < 0``) from zeros, writes its output and its per-step states, and checks no step
against ``cache_steps``; SGLang's KDA gate is ``[T, H, K]`` (by key head), vLLM's ``[T, HV, K]``.
This oracle follows docs/contracts.md#delta_update.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import _xp
from .conv_update import IllPosedUpdate
from .errors import OracleError

__all__ = ["DeltaPlan", "DeltaUpdate", "delta_tolerance", "expect_delta_update", "plan_delta_update"]

EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
EPS_ACC = 2.0 ** -23  # kernels work in fp32
L2_EPS = 1e-6


@dataclass
class DeltaPlan:
    """What each sequence does: whether it runs, the slot it reads, the slots it stores (per token in
    spec mode, one column otherwise) and its buffer row (-1: none)."""

    live: np.ndarray         # bool [N]
    src: np.ndarray          # int64 [N] (meaningful where live)
    write_slot: np.ndarray   # int64 [N, Tw]: spec Tw = max tokens (slot stored after token t); else 1
    write_mask: np.ndarray   # bool [N, Tw]
    inter: np.ndarray        # int64 [N]: buffer row, -1 none
    spec: bool


@dataclass
class DeltaUpdate:
    """What a correct step leaves: pool, output and buffer values with per-element bounds (0: exact)."""

    pool: np.ndarray          # [S, HV, V, K] float64
    pool_bound: np.ndarray    # as pool
    stored: list[int]         # slots written
    out: np.ndarray           # [T, HV, V] float64
    out_bound: np.ndarray     # as out
    care: np.ndarray          # bool [T]: tokens of live sequences (others: anything)
    buffer: np.ndarray | None        # [R, steps, HV, V, K] float64 (the input's where not written)
    buffer_bound: np.ndarray | None  # as buffer


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_range(values: np.ndarray, where: np.ndarray, pad: int, slots: int, what) -> None:
    bad = where & (values != pad) & ((values < 0) | (values >= slots))
    if bad.any():
        i = np.argwhere(bad)[0]
        raise OracleError(f"{what(*i)} = {int(values[tuple(i)])} is neither the pad {pad} nor a slot in "
                          f"0..{slots - 1}")


def plan_delta_update(slots: int, lens, idx, *, nacc=None, pad: int = -1, inter_idx=None,
                      inter_rows: int = 0) -> DeltaPlan:
    """The plan of one step; raises for a case out of range (OracleError) or ill-posed (IllPosedUpdate)."""
    lens = np.asarray(lens, dtype=np.int64)
    rows = len(lens)
    idx = np.asarray(idx, dtype=np.int64).reshape(rows, -1)
    cols = idx.shape[1]
    seqs = np.arange(rows)
    spec = nacc is not None
    if spec:
        nacc = np.asarray(nacc, dtype=np.int64)
        if (nacc > cols).any():
            n = _first(nacc > cols)
            raise OracleError(f"row {n}: nacc = {int(nacc[n])} is past its {cols} index column(s)")
        read_col = np.maximum(nacc - 1, 0)
    else:
        read_col = np.zeros(rows, dtype=np.int64)
    src = idx[seqs, read_col]
    _check_range(src[:, None], np.ones((rows, 1), bool), pad, slots, lambda n, _: f"idx[{n}, {read_col[n]}]")
    live = (src != pad) & (lens > 0)
    if spec:
        if (live & (lens > cols)).any():
            n = _first(live & (lens > cols))
            raise IllPosedUpdate(f"row {n} has {int(lens[n])} tokens, its index row {cols} column(s)")
        width = int(lens.max(initial=0))
        t = np.arange(width)
        write_slot = idx[:, np.minimum(t, cols - 1)] if width else np.zeros((rows, 0), np.int64)
        write_mask = live[:, None] & (t[None, :] < lens[:, None]) & (write_slot != pad)
        _check_range(write_slot, write_mask, pad, slots, lambda n, c: f"idx[{n}, {c}]")
    else:
        write_slot, write_mask = src[:, None].copy(), live[:, None].copy()
    # two sequences storing one slot, or one storing what another reads (they run concurrently)
    who, col = np.nonzero(write_mask)
    pairs = np.unique(np.stack([write_slot[who, col], who], axis=1), axis=0) if who.size else np.zeros((0, 2), int)
    same = (pairs[1:, 0] == pairs[:-1, 0]) & (pairs[1:, 1] != pairs[:-1, 1])
    if same.any():
        i = _first(same)
        raise IllPosedUpdate(f"rows {int(pairs[i, 1])} and {int(pairs[i + 1, 1])} both store slot {int(pairs[i, 0])}")
    if pairs.size:  # each written slot has one writer now: find the one of each read slot
        at = np.minimum(np.searchsorted(pairs[:, 0], src), len(pairs) - 1)
        owner = np.where(pairs[at, 0] == src, pairs[at, 1], seqs)
        clash = live & (owner != seqs)
        if clash.any():
            n = _first(clash)
            raise IllPosedUpdate(f"row {int(owner[n])} stores slot {int(src[n])}, which row {n} reads")
    inter = np.full(rows, -1, dtype=np.int64)
    if inter_idx is not None and inter_rows > 0:
        given = np.asarray(inter_idx, dtype=np.int64)
        if (given >= inter_rows).any():
            n = _first(given >= inter_rows)
            raise OracleError(f"intermediate_state_indices[{n}] = {int(given[n])} is past the buffer's "
                              f"{inter_rows} row(s)")
        inter = np.where(live & (given >= 0), given, -1)
        used = np.sort(inter[inter >= 0])
        if (used[1:] == used[:-1]).any():
            r = int(used[1:][used[1:] == used[:-1]][0])
            raise IllPosedUpdate(f"two rows cache their steps into buffer row {r}")
    return DeltaPlan(live, src, write_slot, write_mask, inter, spec)


def delta_tolerance(dtype: str, mag, want, depth: int):
    """Per-element bound on |kernel - oracle|: fp32 work of chain depth `depth` on the magnitudes `mag`,
    then the result rounded to `dtype` (see the module docstring); arrays of either kind (``_xp``)."""
    xp = _xp.of(want)
    bound = xp.f32(abs(want))  # float32: a bound needs no more, and it halves the traffic
    bound *= EPS[dtype]
    bound += (1.5 * depth * EPS_ACC) * mag
    bound += 1e-6
    return bound


def _normed(xp, x, on: bool):
    return x / xp.sqrt(xp.sum(x * x, -1, keepdims=True) + L2_EPS) if on else x


def dot(a, b):
    """[A, HV, V, K] . [A, HV, K] -> [A, HV, V], batched BLAS."""
    return (a @ b[..., None])[..., 0]


class TokenInputs(NamedTuple):
    """One token's inputs a state takes, for a batch of states (leading axes: any, the same for each):
    q, k by value head (normed, q scaled), the decay, beta, v, and the magnitudes the bound takes."""

    q: object       # [..., HV, K]
    k: object       # [..., HV, K]
    decay: object   # [..., HV, 1, K or 1]
    beta: object    # [..., HV, V or 1]
    v: object       # [..., HV, V]
    decay32: object  # the rest float32: the bound's scale
    kabs: object
    qabs: object
    babs: object
    bvabs: object   # |beta| |v|

    def at(self, j):
        """The inputs of step `j` of a block of steps (views, no copy)."""
        return TokenInputs(*(a[j] for a in self))


def token_inputs(xp, q, k, v, g, beta, tok, head_of, *, scale: float, l2norm: bool, kda: bool,
                 beta_v: bool) -> TokenInputs:
    """The inputs of tokens `tok` (rows of the packed inputs: one per state, or [steps, states]) at once."""
    qt = _normed(xp, q[tok][..., head_of, :], l2norm) * scale
    kt = _normed(xp, k[tok][..., head_of, :], l2norm)
    decay = xp.exp(g[tok])[..., None, :] if kda else xp.exp(g[tok])[..., None, None]
    bt = beta[tok] if beta_v else beta[tok][..., None]
    vt = v[tok]
    return TokenInputs(qt, kt, decay, bt, vt, xp.f32(decay), xp.f32(abs(kt)), xp.f32(abs(qt)), xp.f32(abs(bt)),
                       xp.f32(abs(bt) * abs(vt)))


def delta_step(s, m, t: TokenInputs):
    """One token of the gated delta rule on the states `s` [A, HV, V, K] and their magnitude bound `m`:
    decayed and given the rank-one update, in place; returns the output and its magnitude bound [A, HV, V]."""
    s *= t.decay
    m *= t.decay32
    u = t.beta * (t.v - dot(s, t.k))
    mu = t.bvabs + t.babs * dot(m, t.kabs)
    s += u[..., None] * t.k[..., None, :]
    m += mu[..., None] * t.kabs[..., None, :]
    return dot(s, t.q), dot(m, t.qabs)


def delta_token(xp, s, m, q, k, v, g, beta, tok, head_of, *, scale: float, l2norm: bool, kda: bool,
                beta_v: bool):
    """One token (`tok`: its row in the packed inputs, one per state) of the gated delta rule on `s` and
    `m`, in place (``delta_step``); returns the output and its magnitude bound, [A, HV, V]."""
    return delta_step(s, m, token_inputs(xp, q, k, v, g, beta, tok, head_of, scale=scale, l2norm=l2norm, kda=kda,
                                         beta_v=beta_v))


def expect_delta_update(pool, q, k, v, g, beta, cu_seqlens, idx, *, scale: float, nacc=None,
                        pad: int = -1, l2norm: bool = False, state_dtype: str = "float32",
                        out_dtype: str = "float32", buffer=None, inter_idx=None,
                        cache_steps: int = 0) -> DeltaUpdate:
    """The step on `pool` (float64 ``[S, HV, V, K]``), tokens q, k ``[T, H, K]``, v ``[T, HV, V]``, g
    ``[T, HV]`` or ``[T, HV, K]``, beta ``[T, HV]`` or ``[T, HV, V]`` (float64); `idx` ``[N][C]``;
    `buffer` the per-step buffer's values ``[R, steps, HV, V, K]`` (None: none).  Arrays are numpy or
    torch tensors on one device, the result's of the same kind (``care`` numpy).  Vectorised over
    sequences, heads and elements; one pass per token position."""
    xp = _xp.of(pool)
    slots, hv_count, vdim, kdim = pool.shape
    heads = q.shape[1]
    if heads == 0 or hv_count % heads:
        raise OracleError(f"{hv_count} value heads are not a multiple of {heads} key heads")
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    lens = np.diff(cu)
    buffer_rows = 0 if buffer is None else buffer.shape[0]
    plan = plan_delta_update(slots, lens, idx, nacc=nacc, pad=pad, inter_idx=inter_idx, inter_rows=buffer_rows)
    head_of = xp.index(np.arange(hv_count) // (hv_count // heads))
    kda, beta_v = g.ndim == 3, beta.ndim == 3
    state = xp.where(plan.live[:, None, None, None], pool[xp.index(np.where(plan.live, plan.src, 0))], 0.0)
    mag = xp.f32(abs(state))  # a bound's scale: float32 is plenty, and half the traffic
    new_pool = xp.copy(pool)
    pool_bound = xp.zeros(pool.shape, f32=True)  # calloc: pages only where a slot is stored
    out, out_mag = xp.zeros((len(q), hv_count, vdim)), xp.zeros((len(q), hv_count, vdim), f32=True)
    care = np.zeros(len(q), dtype=bool)
    new_buf = None if buffer is None else xp.copy(buffer)
    buf_bound = None if buffer is None else xp.zeros(buffer.shape, f32=True)
    depth = 2 * kdim + 16

    def store(target, bound, where, seqs, t):
        whole = np.array_equal(seqs, np.arange(len(lens)))  # every sequence, in order: no gather
        at = xp.index(seqs)
        values, scale = (state, mag) if whole else (state[at], mag[at])
        where = tuple(xp.index(w) if isinstance(w, np.ndarray) else w for w in where)
        target[where] = values
        bound[where] = delta_tolerance(state_dtype, scale, values, depth * (t + 1))

    for t in range(int(lens.max(initial=0))):
        act = np.flatnonzero(plan.live & (t < lens))
        whole = act.size == len(lens)  # every sequence: work in place, no gather
        tok = xp.index(cu[act] + t)
        at = xp.index(act)
        s = state if whole else state[at]
        m = mag if whole else mag[at]
        out[tok], out_mag[tok] = delta_token(xp, s, m, q, k, v, g, beta, tok, head_of, scale=scale, l2norm=l2norm,
                                             kda=kda, beta_v=beta_v)
        if not whole:
            state[at], mag[at] = s, m
        care[cu[act] + t] = True
        if plan.spec:
            seqs = np.flatnonzero(plan.write_mask[:, t])
            store(new_pool, pool_bound, (plan.write_slot[seqs, t],), seqs, t)
        if new_buf is not None and t < cache_steps:
            seqs = act[plan.inter[act] >= 0]
            store(new_buf, buf_bound, (plan.inter[seqs], t), seqs, t)
    if not plan.spec:
        seqs = np.flatnonzero(plan.write_mask[:, 0])
        store(new_pool, pool_bound, (plan.write_slot[seqs, 0],), seqs, max(int(lens.max(initial=1)) - 1, 0))
    tokens = np.arange(len(q))
    token_depth = tokens - cu[np.searchsorted(cu, tokens, side="right") - 1] + 1  # 1-based place in its sequence
    out_bound = delta_tolerance(out_dtype, out_mag, out, 1)
    steps = xp.f32(xp.array(1.5 * EPS_ACC * (depth * token_depth + kdim + 4)))
    out_bound += out_mag * steps[:, None, None]
    stored = sorted(set(plan.write_slot[plan.write_mask].tolist()))
    return DeltaUpdate(new_pool, pool_bound, stored, out, out_bound, care, new_buf, buf_bound)

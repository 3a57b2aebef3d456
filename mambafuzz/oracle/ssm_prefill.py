"""The Mamba2 prefill of a batch of chunks from states in a pool, with prefix caching
(docs/contracts.md#ssm_prefill), in float64.

Row b (tokens ``x_b [L, H, P]``, ``dt_b [L, H]``, ``B_b [L, G, N]``, block-table row ``idx[b]``) is skipped
when it has no tokens or its initial entry ``src = idx[b, init[b]]`` is the pad (column 0 without prefix
caching).  Otherwise it starts from ``pool[src]`` when ``has_init[b]``, else from zeros, and scans its
tokens in order, per head h (group ``g = h // (H / G)``)::

    dt' = softplus(dt + dt_bias)   (or dt + dt_bias)
    st  = st * exp(A[h] * dt') + (dt' * x)[:, None] * B[g][None, :]

(the recurrence ``ssm_update`` judges, with SSD's per-head dt and A).  The state after the whole chunk goes
to slot ``idx[b, last[b]]``; with prefix caching, the state after the first ``o_k`` tokens, ``o_k = Bs - c %
Bs + k * Bs`` (the k-th block boundary the chunk crosses strictly inside it, ``c`` tokens computed before),
goes to ``idx[b, first[b] + k]``.  A pad destination stores nothing; every slot no row stores is unchanged.
The rows, their columns and what is ill-posed are exactly ``conv_prefill``'s (``plan_conv_prefill``).

Tolerance (``SsmPrefill.pool_tol``).  Engines chunk the scan (16-256 tokens a chunk, SSD): within a
chunk the decay is a cumulative sum of ``A dt'`` and each token's term ``exp(cs_end - cs_u) dt'_u x_u
B_u`` is summed (a ``tl.dot`` over the chunk's tokens, its weighted operand rounded to the inputs' dtype
first, TF32 for float32 inputs), the carried state scaled by ``exp(cs_end)``.  Along the float64 scan
three magnitudes follow each element: the state ``st``, ``M = M exp(a) + |u|`` (the sum of every term's
absolute value, as decayed to this token: what a reordered sum can lose against) and the error bound
``E``::

    E = E exp(a) + eps_dot |u| + K eps32 (1 + W |a|) M

``eps_dot |u|``: the token's weighted term rounded to the dot's input precision (3 x 2^-10 for float32
inputs: a TF32 MMA reads both fp32 operands with their low 13 bits dropped, up to 2^-10 each, and one
half more for margin, as measured on an H100; 2^-10 for float16, 2^-7 for bfloat16); ``K eps32 M``: each token charged the rounding
of a sum over a chunk whose end it may be (K = 8: the exp, the products, a tree or MMA sum of up to 256
terms); ``K eps32 W |a| M``: the cumulative sum's error, ``W`` (256, the longest chunk covered) ulps of the
decay summed so far, which every weight's exp carries.  A stored state adds its rounding to the state
dtype, ``eps_state |st|``, and 1e-6.  (The state, ``M`` and ``E`` are linear recurrences: ``_scan``
sums them piece by piece between stores, SSD's order in float64.)  A wrong slot, token, chunk or boundary, a decay taken from the wrong
start, a state rounded to bfloat16: errors of the values' own size, or of bfloat16's (2^-8), far outside
it for float32 states and the inputs' default scales (``bench/ssm_prefill_tolerance.py`` measures both).

Ill-posed (``IllPosedUpdate``) and out of range (``OracleError``): as ``conv_prefill``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _xp
from .conv_prefill import PrefillRow, boundary_offsets, derived_columns, plan_conv_prefill

__all__ = ["SsmPrefill", "expect_ssm_prefill", "plan_ssm_prefill", "boundary_offsets", "derived_columns",
           "CHUNK_COVERED", "EPS_DOT", "K"]

EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # a stored state's: one ulp
EPS_DOT = {"float32": 3 * 2.0 ** -10, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # a weighted term's: TF32 (both operands truncated), fp16, bf16
EPS32 = 2.0 ** -24
K = 8.0
CHUNK_COVERED = 256  # the longest chunk the bound covers (vLLM's Mamba2 models: 256)
FLOOR = 1e-6
PIECE_ELEMENTS = 1 << 22  # a piece's gathered inputs at most (rows x tokens x heads x max(P, N)): 32 MiB of float64
HOST_TILE = 1 << 16  # elements of a row group's [R, H, P, N] arrays on the host (float64: 512 KiB)


@dataclass
class SsmPrefill:
    """What a correct prefill leaves, with the bound each element is judged by."""

    pool: np.ndarray       # [S, H, P, N] float64
    pool_tol: np.ndarray   # [S, H, P, N]: 0 where no row stores (exact), the bound where one does
    stored: np.ndarray     # bool [S]: the slots some row stores
    plan: list             # the rows' PrefillRow plans


def plan_ssm_prefill(slots: int, lens, idx, has_init, *, init=None, first=None, last=None, computed=None,
                     block_size: int = 0, pad: int = -1) -> list[PrefillRow]:
    """Every row's plan (the slot it reads, whether it reads it, its stores as (slot, tokens in)); raises
    for a case out of range (OracleError) or ill-posed (IllPosedUpdate), as the conv prefill does."""
    return plan_conv_prefill(slots, 1, 2, lens, idx, has_init, init=init, first=first, last=last,
                             computed=computed, block_size=block_size, pad=pad)


def expect_ssm_prefill(pool, x, dt, A, B, lens, idx, has_init, *, dt_bias=None, softplus=False, init=None,
                       first=None, last=None, computed=None, block_size: int = 0, pad: int = -1,
                       dtype: str = "float32", io_dtype: str = "float32") -> SsmPrefill:
    """The prefill on `pool` (float64 [S, H, P, N]); x [R, T, H, P], dt [R, T, H] and B [R, T, G, N] padded
    to the longest row's T (zeros past a row's end); A, dt_bias [H]; `idx` [R][M]; values float64, numpy
    arrays or torch tensors on one device (the result's arrays are of that kind, ``stored`` numpy)."""
    xp = _xp.of(pool)
    slots, heads, hdim, dstate = pool.shape
    plan = plan_ssm_prefill(slots, lens, idx, has_init, init=init, first=first, last=last, computed=computed,
                            block_size=block_size, pad=pad)
    new_pool = xp.copy(pool)
    pool_tol = xp.zeros(pool.shape)
    stored = np.zeros(slots, dtype=bool)
    live = [p for p in plan if p.src is not None]
    for slot in (slot for p in live for slot, _ in p.stores):
        stored[slot] = True
    # on the host, rows in groups whose working arrays stay in cache; on a device, all at once
    per_row = heads * hdim * dstate
    group_rows = max(1, HOST_TILE // per_row) if xp is _xp.NUMPY else max(len(live), 1)
    for k in range(0, len(live), group_rows):
        _scan(xp, live[k:k + group_rows], pool, new_pool, pool_tol, x, dt, A, B, lens, dt_bias, softplus,
              EPS_DOT[io_dtype], EPS[dtype])
    return SsmPrefill(new_pool, pool_tol, stored, plan)


def _pieces(live, n_tok, longest: int) -> np.ndarray:
    """Each row's scan cut into pieces that end at its stores and are at most `longest` tokens, as tokens
    done at each cut: ``[R, pieces + 1]`` (a row past its last store repeats it: empty pieces)."""
    cuts = []
    for p in live:
        ends = {int(o) for _, o in p.stores}
        ends |= set(range(longest, max(ends, default=0), longest))
        cuts.append([0] + sorted(ends))
    steps = max(len(c) for c in cuts)
    return np.array([c + [c[-1]] * (steps - len(c)) for c in cuts], dtype=np.int64)


def _scan(xp, live, pool, new_pool, pool_tol, x, dt, A, B, lens, dt_bias, softplus, eps_dot, eps_state):
    """The scan of the rows `live` (their plans), storing each due state into `new_pool` and its bound into
    `pool_tol`.  The recurrences are linear, so the scan goes piece by piece between stores (SSD's order,
    in float64): over a piece from s to e tokens done, with ``cs`` the cumulative sum of ``a`` (``cs_0 =
    0``), ``c = K eps32 (1 + W |a|)`` and ``C`` its cumulative sum, ``v_u = |dt'_u x_u| |B_u|^T``::

        st_e = exp(cs_e - cs_s) st_s + sum_u exp(cs_e - cs_u+1) dt'_u x_u B_u^T
        M_e  = exp(cs_e - cs_s) M_s  + sum_u exp(cs_e - cs_u+1) v_u
        E_e  = exp(cs_e - cs_s) (E_s + (C_e - C_s) M_s) + sum_u exp(cs_e - cs_u+1) (eps_dot + C_e - C_u+1 + c_u) v_u

    each sum one matrix product a head over the piece's tokens: the token-by-token recurrences reordered
    (float64: far below any bound; exact cases stay exact), a few dozen array operations a piece rather
    than a few a token."""
    heads, hdim = pool.shape[1], pool.shape[2]
    rows, every = len(live), np.arange(len(live))
    at = xp.index(np.array([p.row for p in live]))
    n_tok = np.array([int(lens[p.row]) for p in live])
    x, dt, B = x[at], dt[at], B[at]
    group = xp.index(np.arange(heads) // (heads // B.shape[2]))
    reads = np.array([p.reads for p in live])
    st = xp.where(reads[:, None, None, None], pool[xp.index(np.array([p.src for p in live]))], 0.0)
    mag, err = abs(st), xp.zeros(st.shape)
    bias = 0.0 if dt_bias is None else dt_bias[None]
    d_all = dt + bias
    d_all = xp.softplus(d_all) if softplus else d_all                            # [R, T, H]
    tok = np.arange(dt.shape[1])
    d_all = d_all * xp.array((tok[None, :] < n_tok[:, None]).astype(np.float64))[..., None]  # past a row's end: 0
    a_all = A[None, None] * d_all                                                # [R, T, H]
    charge = abs(a_all) * (K * EPS32 * CHUNK_COVERED) + K * EPS32
    cs, charged = xp.zeros((rows, dt.shape[1] + 1, heads)), xp.zeros((rows, dt.shape[1] + 1, heads))
    cs[:, 1:], charged[:, 1:] = a_all.cumsum(1), charge.cumsum(1)                # by tokens done
    due: dict[tuple[int, int], list[int]] = {}
    for r, p in enumerate(live):
        for slot, o in p.stores:
            due.setdefault((r, int(o)), []).append(slot)
    longest = int(np.clip(PIECE_ELEMENTS // (rows * heads * max(hdim, pool.shape[3])), 16, 256))
    cuts = _pieces(live, n_tok, longest)
    ri = xp.index(every)
    for i in range(cuts.shape[1] - 1):
        s, e = cuts[:, i], cuts[:, i + 1]
        si, ei = xp.index(s), xp.index(e)
        width = int((e - s).max())
        if width:
            lanes = np.arange(width)[None]
            ui = xp.index(np.minimum(s[:, None] + lanes, dt.shape[1] - 1))       # [R, L]: the piece's tokens
            inside = xp.array((lanes < (e - s)[:, None]).astype(np.float64))[..., None]
            gap = (cs[ri, ei][:, None] - cs[ri[:, None], ui + 1]) * inside     # [R, L, H]; 0 past the piece
            w = xp.exp(gap) * d_all[ri[:, None], ui] * inside
            xw = x[ri[:, None], ui] * w[..., None]                               # [R, L, H, P]
            bg = B[ri[:, None], ui][:, :, group]                                 # [R, L, H, N]
            grown = charged[ri, ei][:, None] - charged[ri[:, None], ui + 1] + charge[ri[:, None], ui]
            both = xp.zeros(xw.shape[:3] + (2 * hdim,))
            both[..., :hdim] = abs(xw)
            both[..., hdim:] = both[..., :hdim] * (eps_dot + grown)[..., None]
            piece, abs_piece = _bmm(xp, xw, bg), _bmm(xp, both, abs(bg))          # [R, H, P, N], [R, H, 2P, N]
        err += (charged[ri, ei] - charged[ri, si])[..., None, None] * mag
        step = xp.exp(cs[ri, ei] - cs[ri, si])[..., None, None]
        for a in (st, mag, err):
            a *= step
        if width:
            st += piece
            mag += abs_piece[:, :, :hdim]
            err += abs_piece[:, :, hdim:]
        for r in np.flatnonzero(e > s):
            for slot in due.get((int(r), int(e[r])), ()):
                new_pool[slot] = st[r]
                pool_tol[slot] = err[r] + eps_state * abs(st[r]) + FLOOR


def _bmm(xp, a, b):
    """``sum_l a[r, l, h, p] b[r, l, h, n]``: ``[R, H, P, N]``, one batched matrix product (BLAS)."""
    return xp.copy(a.swapaxes(1, 2).swapaxes(2, 3)) @ xp.copy(b.swapaxes(1, 2))

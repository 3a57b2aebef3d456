"""The Mamba2 selective state update of one decode or spec-decode step (docs/contracts.md#ssm_update), in float64.

Row b reads slot ``s = src[b, max(nacc[b] - 1, 0)]`` (column 0 without spec
decode); it is skipped (no store, output don't-care) when ``s`` is the pad or
the row has no tokens.  Per head h (group ``g = h // (H / G)``) and token t:
``dt' = softplus(dt + dt_bias)`` (or ``dt + dt_bias``), ``st = st * exp(A *
dt') + (dt' * x)[:, None] * B[g][None, :]``, ``y = (st * C[g]).sum(-1) + D *
x``, ``out = y * silu(z)`` when z is given.  Spec decode stores ``st`` after
token t to ``dst[b, t]`` unless that is the pad; otherwise the final ``st``
goes to ``dst[b, 0]``.  ``dst`` defaults to ``src``.

Ill-posed (``IllPosedUpdate``): two rows storing one slot, a row storing a slot
another row reads, a spec row with more tokens than index columns, a live
non-spec row whose destination is the pad (the row is live, yet ``dst[b, 0]``
names no slot to store to).  Out of range (``OracleError``):
a used index that is neither the pad nor a slot, a read column past the row.

Tolerance (``SsmUpdate.pool_tol``, ``out_tol``): the kernels work in fp32.  Per
token the state's error grows as ``e = e * exp(A dt') + K eps32 (|st| exp(A
dt') (1 + |A dt'|) + |dt' x B|)`` (each product and the exp rounded, the exp's
argument carrying its own rounding), starting from 0 (the read slot is
exact); a stored state adds its rounding to the state dtype, ``eps_state
|st|``.  An output adds ``K eps32`` of its magnitude ``sum |st| |C| + |D x|``
to ``sum e |C|``, scales by ``|silu(z)|`` (itself within ``K eps32``) and
rounds to the output dtype (``eps_io |out|``; a whole ulp, since Triton's interpreter
truncates where a GPU rounds to nearest).  K = 8 covers the fast exp
(2 ulp) and a fused multiply-add ordering; a wrong slot, column or head is
an error of the values' own size (the pool holds distinct unit-sized
values), far outside it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _xp
from .conv_update import IllPosedUpdate
from .errors import OracleError

__all__ = ["SsmUpdate", "expect_ssm_update", "plan_ssm_update"]

EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # one ulp: the interpreter truncates
EPS32 = 2.0 ** -24
K = 8.0


@dataclass
class SsmUpdate:
    """What a correct step leaves, with the bound each element is judged by."""

    pool: np.ndarray       # [S, H, D, N] float64
    pool_tol: np.ndarray   # [S, H, D, N]: 0 where no row stores (exact), the bound where one does
    out: np.ndarray        # [B, T, H, D] float64 (T the longest row; only live tokens matter)
    out_tol: np.ndarray    # as out
    out_care: np.ndarray   # bool [B, T]: a live row's tokens
    stored: np.ndarray     # bool [S]: the slots some row stores


@dataclass
class Plan:
    """Which slot each row reads (``read``: -1 none) and the (row, token, slot) stores, in token order."""

    read: np.ndarray       # [B] int64; -1 for a skipped row
    live: np.ndarray       # [B] bool
    store: np.ndarray      # [B, C] bool: whether token t of row b stores (spec: t < lens; else column 0)
    target: np.ndarray     # [B, C] int64: the slot it stores


def _range_check(values: np.ndarray, used: np.ndarray, pad: int, slots: int, what: str) -> None:
    bad = used & (values != pad) & ((values < 0) | (values >= slots))
    if bad.any():
        b, c = np.argwhere(bad)[0]
        raise OracleError(f"{what}[{b}, {c}] = {int(values[b, c])} is neither the pad {pad} nor a slot in "
                          f"0..{slots - 1}")


def plan_ssm_update(slots: int, lens, src, dst=None, nacc=None, pad: int = -1) -> Plan:
    """The rows' reads and stores; raises for a case out of range (OracleError) or ill-posed."""
    src = np.asarray(src, dtype=np.int64).reshape(len(lens), -1)
    dst = src if dst is None else np.asarray(dst, dtype=np.int64).reshape(src.shape)
    lens = np.asarray(lens, dtype=np.int64)
    rows, cols = src.shape
    ar = np.arange(rows)
    spec = nacc is not None
    read_col = np.maximum(np.asarray(nacc, dtype=np.int64) - 1, 0) if spec else np.zeros(rows, dtype=np.int64)
    if rows and (read_col >= cols).any():
        b = int(np.argmax(read_col >= cols))
        raise OracleError(f"row {b}: read column {int(read_col[b])} is outside its {cols} index column(s)")
    used_src = np.zeros(src.shape, dtype=bool)
    used_src[ar, read_col] = True
    _range_check(src, used_src, pad, slots, "src")
    read = src[ar, read_col] if rows else np.zeros(0, dtype=np.int64)
    live = (read != pad) & (lens > 0)
    tok = np.arange(cols)[None, :]
    if spec:
        if (live & (lens > cols)).any():
            b = int(np.argmax(live & (lens > cols)))
            raise IllPosedUpdate(f"row {b} has {int(lens[b])} tokens and {cols} index column(s) to store them")
        wants = live[:, None] & (tok < lens[:, None])
        _range_check(dst, wants, pad, slots, "dst")
        store = wants & (dst != pad)
    else:
        store = live[:, None] & (tok == 0)
        _range_check(dst, store, pad, slots, "dst")
        if (store & (dst == pad)).any():
            b = int(np.argmax((store & (dst == pad)).any(axis=1)))
            raise IllPosedUpdate(f"row {b}: a live non-spec row's destination dst[{b}, 0] is the pad")
    pairs = np.unique(np.stack([dst[store], np.nonzero(store)[0]], axis=1), axis=0)  # (slot, row)
    slot_of, counts = np.unique(pairs[:, 0], return_counts=True)
    if (counts > 1).any():
        s = int(slot_of[np.argmax(counts > 1)])
        a, b = pairs[pairs[:, 0] == s][:2, 1]
        raise IllPosedUpdate(f"rows {a} and {b} both store slot {s}")
    writer = dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))
    for b in np.flatnonzero(live & np.isin(read, pairs[:, 0])):
        if writer[int(read[b])] != b:
            raise IllPosedUpdate(f"row {writer[int(read[b])]} stores slot {int(read[b])}, which row {b} reads")
    return Plan(np.where(live, read, -1), live, store, np.where(store, dst, -1))


def expect_ssm_update(pool, x, dt, A, B, C, lens, src, *, D=None, z=None, dt_bias=None, softplus=False,
                      dst=None, nacc=None, pad: int = -1, dtype: str = "float32",
                      io_dtype: str = "float32") -> SsmUpdate:
    """The step on `pool` (float64 [S, H, D, N]); x, dt, z [B, T, H, D] and B, C [B, T, G, N] padded to the
    longest row's T; A [H, D, N]; D, dt_bias [H, D]; `src`, `dst` [B][C]; all values float64, numpy
    arrays or torch tensors on one device (the result's arrays are of that kind; ``out_care`` and
    ``stored`` numpy)."""
    xp = _xp.of(pool)
    slots, heads, dim, dstate = pool.shape
    rows, tmax = x.shape[:2]
    plan = plan_ssm_update(slots, lens, src, dst, nacc, pad)
    lens = np.asarray(lens, dtype=np.int64)
    group = xp.index(np.arange(heads) // (heads // B.shape[2]))
    st = xp.where(plan.live[:, None, None, None], pool[xp.index(np.maximum(plan.read, 0))], 0.0)  # [B, H, D, N]
    err = xp.zeros(st.shape)
    new_pool = xp.copy(pool)
    pool_tol = xp.zeros(pool.shape)
    out = xp.zeros(x.shape)
    out_tol = xp.zeros(x.shape)
    bias = 0.0 if dt_bias is None else dt_bias[None]
    eps_state, eps_io = EPS[dtype], EPS[io_dtype]

    def store(rows_at, t):
        at, slot = xp.index(rows_at), xp.index(plan.target[rows_at, t])
        new_pool[slot] = st[at]
        pool_tol[slot] = err[at] + eps_state * abs(st[at]) + 1e-6

    for t in range(tmax):
        active = plan.live & (lens > t)
        if not active.any():
            break
        on = active[:, None, None, None]
        d = dt[:, t] + bias
        d = xp.softplus(d) if softplus else d                            # [B, H, D]
        arg = A[None] * d[..., None]                                     # [B, H, D, N]
        decay = xp.exp(arg)
        inc = (d * x[:, t])[..., None] * B[:, t][:, group][:, :, None, :]
        xp.abs_(arg)
        arg += 1.0
        arg *= decay
        arg *= abs(st)
        arg += abs(inc)
        arg *= K * EPS32                                                 # this token's rounding
        new = st * decay
        new += inc
        decay *= err
        decay += arg                                                     # the error carried and added
        st = new if active.all() else xp.where(on, new, st)
        err = decay if active.all() else xp.where(on, decay, err)
        c = C[:, t][:, group][:, :, None, :]                             # [B, H, 1, N]
        skip = 0.0 if D is None else D[None] * x[:, t]
        y = (st * c).sum(-1) + skip
        y_err = (err * abs(c)).sum(-1) + K * EPS32 * ((abs(st) * abs(c)).sum(-1) + abs(skip))
        if z is None:
            o, o_err = y, y_err
        else:
            gate = z[:, t] / (1.0 + xp.exp(-z[:, t]))
            o = y * gate
            o_err = (y_err + K * EPS32 * abs(y)) * abs(gate)
        out[:, t] = o
        out_tol[:, t] = o_err + eps_io * abs(o) + 1e-6
        if nacc is not None and t < plan.store.shape[1]:
            store(np.flatnonzero(plan.store[:, t]), t)
    if nacc is None:
        store(np.flatnonzero(plan.store[:, 0]), 0)
    care = plan.live[:, None] & (np.arange(tmax)[None, :] < lens[:, None])
    stored = np.zeros(slots, dtype=bool)
    stored[plan.target[plan.store]] = True
    return SsmUpdate(new_pool, pool_tol, out, out_tol, care, stored)

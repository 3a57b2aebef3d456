"""The causal-conv1d state update of one decode or spec-decode step (docs/contracts.md#conv_update), in float64.

Row b reads slot ``src = idx[b, init[b]]`` (column 0 without prefix caching),
skips itself when ``src`` is the pad value or it has no tokens, takes the
window ``pool[src, :, off : off + W - 1]`` with ``off = max(nacc[b] - 1, 0)``
in spec mode (else 0), and convolves it with its tokens:
``full = concat(window, x_b)``, ``out[:, t] = act(bias + sum_j w[:, j] *
full[:, t + j])``.  The new state, the last ``W - 1`` columns of ``full``
(non-spec) or ``concat(pool[src, :, off + 1 : off + W - 1], x_b)`` of length
``W - 2 + L_b`` (spec: every draft token's window stays recoverable), goes to
columns from 0 of ``dst = idx[b, last[b]]``; later columns are untouched.  A
pad ``dst`` stores nothing (the engines store it: a zoo row).

Ill-posed (``IllPosedUpdate``): two live rows storing one slot, a live row
storing a slot another live row reads (rows run concurrently), a window or
new state longer than the pool's ``SL``.  Out of range (``OracleError``): a
slot that is neither the pad nor in ``[0, S)``, a column outside the row.

The engines differ (vLLM and SGLang as of 2026): they read ``off = nacc - 1``
unclamped (column -1 at ``nacc = 0``), check the pad on the read slot only,
and vLLM's varlen non-spec update keeps only ``W - 1 - (max L - L_b)``
columns of a short row; this oracle follows docs/contracts.md#conv_update.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import OracleError

__all__ = ["ConvUpdate", "IllPosedUpdate", "conv_tolerance", "expect_conv_update", "plan_conv_update"]

EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
EPS_ACC = 2.0 ** -23  # kernels accumulate in fp32


class IllPosedUpdate(OracleError):
    """Two rows of one update touch one slot, and one of them stores it (a finding about the case)."""


@dataclass
class ConvUpdate:
    """What a correct step leaves: the pool, each live row's output and its error scale."""

    pool: np.ndarray                 # [S, dim, SL], the input's dtype
    out: list[np.ndarray | None]     # per row [dim, L_b] float64; None for a skipped row (don't care)
    scale: list[np.ndarray | None]   # per row [dim, L_b]: |bias| + sum_j |w_j| |full_{t+j}|
    stored: list[int | None]         # per row, the slot it stores (None: none)


def _slot(value: int, pad: int, slots: int, what: str) -> int | None:
    """`value` as a slot, None for the pad; OracleError when it is neither."""
    if value == pad:
        return None
    if not 0 <= value < slots:
        raise OracleError(f"{what} = {value} is neither the pad {pad} nor a slot in 0..{slots - 1}")
    return value


def plan_conv_update(slots: int, state_len: int, width: int, lens, idx, *, nacc=None, init=None, last=None,
                     pad: int = -1) -> list[tuple[int, int | None, int | None, int]]:
    """Per row (row, read slot or None: skipped, stored slot or None, window column); raises for a case
    that is out of range (OracleError) or ill-posed (IllPosedUpdate)."""
    plan = []
    for b, length in enumerate(lens):
        row = idx[b]
        cols = len(row)
        read_col = 0 if init is None else int(init[b])
        write_col = 0 if last is None else int(last[b])
        for name, col in (("read", read_col), ("write", write_col)):
            if not 0 <= col < cols:
                raise OracleError(f"row {b}: {name} column {col} is outside its {cols} index column(s)")
        src = _slot(int(row[read_col]), pad, slots, f"idx[{b}, {read_col}]")
        if src is None or length == 0:
            plan.append((b, None, None, 0))
            continue
        dst = _slot(int(row[write_col]), pad, slots, f"idx[{b}, {write_col}]")
        off = 0 if nacc is None else max(int(nacc[b]) - 1, 0)
        new_len = width - 1 if nacc is None else width - 2 + length
        if off + width - 1 > state_len:
            raise IllPosedUpdate(f"row {b}: the window at column {off} needs {off + width - 1} columns, "
                                 f"the pool has {state_len}")
        if dst is not None and new_len > state_len:
            raise IllPosedUpdate(f"row {b}: the new state has {new_len} columns, the pool {state_len} "
                                 "(not widened for draft tokens)")
        plan.append((b, src, dst, off))
    writers: dict[int, int] = {}
    for b, _, dst, _ in plan:
        if dst is not None:
            if dst in writers:
                raise IllPosedUpdate(f"rows {writers[dst]} and {b} both store slot {dst}")
            writers[dst] = b
    for b, src, _, _ in plan:
        if src is not None and writers.get(src, b) != b:
            raise IllPosedUpdate(f"row {writers[src]} stores slot {src}, which row {b} reads")
    return plan


def expect_conv_update(pool: np.ndarray, x_rows, weight: np.ndarray, bias: np.ndarray | None, idx, *,
                       nacc=None, init=None, last=None, silu: bool = False, pad: int = -1) -> ConvUpdate:
    """The step on `pool` (float64 [S, dim, SL]) for rows `x_rows` (each float64 [dim, L_b]); `idx` [B][C]."""
    slots, dim, state_len = pool.shape
    width = weight.shape[1]
    w = weight.astype(np.float64)
    b64 = np.zeros(dim) if bias is None else bias.astype(np.float64)
    plan = plan_conv_update(slots, state_len, width, [x.shape[1] for x in x_rows], idx, nacc=nacc, init=init,
                            last=last, pad=pad)
    new_pool = pool.copy()
    out: list = []
    scale: list = []
    stored: list = []
    for b, src, dst, off in plan:
        if src is None:
            out.append(None)
            scale.append(None)
            stored.append(None)
            continue
        x_b = x_rows[b].astype(np.float64)
        length = x_b.shape[1]
        window = pool[src, :, off:off + width - 1].astype(np.float64)
        full = np.concatenate([window, x_b], axis=1)                     # [dim, W - 1 + L]
        taps = np.stack([full[:, j:j + length] for j in range(width)], axis=0)  # [W, dim, L]
        acc = b64[:, None] + np.einsum("dj,jdt->dt", w, taps)
        scale.append(np.abs(b64)[:, None] + np.einsum("dj,jdt->dt", np.abs(w), np.abs(taps)))
        out.append(acc / (1.0 + np.exp(-acc)) if silu else acc)
        if dst is not None:
            if nacc is None:
                new = np.concatenate([pool[src, :, :width - 1], x_rows[b]], axis=1)
                new = new[:, -(width - 1):]
            else:
                new = np.concatenate([pool[src, :, off + 1:off + width - 1], x_rows[b]], axis=1)
            new_pool[dst, :, :new.shape[1]] = new
        stored.append(dst)
    return ConvUpdate(new_pool, out, scale, stored)


def conv_tolerance(dtype: str, scale: np.ndarray, want: np.ndarray, width: int) -> np.ndarray:
    """Per-element bound on |kernel - oracle|: each product rounded to `dtype`, the sum in fp32, SiLU
    (slope at most 1.1), the result rounded to `dtype`.  A wrong slot, column or tap is far outside it:
    the pool holds distinct values of unit size."""
    eps = EPS[dtype]
    return 1.1 * (eps + width * EPS_ACC) * scale + eps * np.abs(want) + 1e-6

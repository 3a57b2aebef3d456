"""The causal-conv1d prefill of a batch of chunks, with prefix caching (docs/contracts.md#conv_prefill), in
float64.

Row b (tokens ``x_b [dim, L]``, block-table row ``idx[b]``) is skipped when it
has no tokens or its initial entry ``src = idx[b, init[b]]`` is the pad value
(column 0 without prefix caching).  Otherwise ``prev`` is the window
``pool[src, :, :W - 1]`` when ``has_init[b]``, else zeros (+0.0);
``full = prev ++ x_b`` (``W - 1 + L`` columns); output token t is
``act(bias + sum_j w[:, j] * full[:, t + j])``.  The final window
``full[:, L : L + W - 1]`` goes to columns ``:W - 1`` of slot
``idx[b, last[b]]``.  With prefix caching (every block cached), the chunk also
stores the window at each block boundary it crosses: with ``c`` tokens
computed before and blocks of ``Bs`` tokens, the k-th boundary crossed is
``o_k = Bs - c % Bs + k * Bs`` tokens into the chunk (``0 < o_k < L``) and its
window ``full[:, o_k : o_k + W - 1]`` goes to slot ``idx[b, first[b] + k]``.
A destination holding the pad value stores nothing.  Columns ``W - 1`` and
later of a stored slot are untouched, as is every slot no row stores (the
initial block included, unless it is also a destination: loads first).

The engines derive the columns from ``c``, ``L`` and ``Bs``
(:func:`derived_columns`): ``init = max(ceil(c / Bs) - 1, 0)``,
``first = c // Bs``, ``last = max(ceil((c + L) / Bs) - 1, 0)``,
``has_init = c > 0``; any other columns are taken as given, as long as
``last - first`` is the number of boundaries the chunk crosses.

Ill-posed (``IllPosedUpdate``): ``last - first`` not the number of boundaries
crossed (vLLM counts them from ``last - first``, backwards from the chunk's
end; this oracle forward from ``first``: the two agree only then); one row
storing one slot twice; two live rows storing one slot; a row storing a slot
another live row reads (rows run concurrently).  Out of range
(``OracleError``): a read or stored entry neither the pad nor a slot, a column
outside the row, a pool narrower than ``W - 1``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .conv_update import IllPosedUpdate, conv_tolerance
from .errors import OracleError

__all__ = ["ConvPrefill", "PrefillRow", "boundary_offsets", "conv_prefill_tolerance", "derived_columns",
           "expect_conv_prefill", "plan_conv_prefill"]


@dataclass(frozen=True)
class PrefillRow:
    """One row's plan: the slot it reads (None: skipped), whether it reads it (else zeros), and its stores
    as (slot, token offset into the chunk): each boundary's, then the final one (offset L)."""

    row: int
    src: int | None
    reads: bool
    stores: tuple[tuple[int, int], ...]


@dataclass
class ConvPrefill:
    """What a correct prefill leaves: the pool, each live row's output and its error scale."""

    pool: np.ndarray                 # [S, dim, SL], float64
    out: list[np.ndarray | None]     # per row [dim, L_b] float64; None for a skipped row (don't care)
    scale: list[np.ndarray | None]   # per row [dim, L_b]: |bias| + sum_j |w_j| |full_{t+j}|
    stored: list[tuple[int, ...]]    # per row, the slots it stores (boundaries first)


def derived_columns(computed: int, length: int, block_size: int) -> tuple[int, int, int, bool]:
    """(init, first, last, has_init) as vLLM derives them from the tokens computed before, the chunk's
    length and the block size."""
    c, bs = int(computed), int(block_size)
    init = max(-(-c // bs) - 1, 0)
    last = max(-(-(c + int(length)) // bs) - 1, 0)
    return init, c // bs, last, c > 0


def boundary_offsets(computed: int, length: int, block_size: int) -> list[int]:
    """The token offsets into a chunk of `length` tokens of the block boundaries it crosses (strictly
    inside it), `computed` tokens having been computed before, blocks of `block_size` tokens."""
    bs = int(block_size)
    return list(range(bs - int(computed) % bs, int(length), bs))


def _slot(value: int, pad: int, slots: int, what: str) -> int | None:
    """`value` as a slot, None for the pad; OracleError when it is neither."""
    if value == pad:
        return None
    if not 0 <= value < slots:
        raise OracleError(f"{what} = {value} is neither the pad {pad} nor a slot in 0..{slots - 1}")
    return value


def plan_conv_prefill(slots: int, state_len: int, width: int, lens, idx, has_init, *, init=None, first=None,
                      last=None, computed=None, block_size: int = 0, pad: int = -1) -> list[PrefillRow]:
    """Every row's plan; raises for a case that is out of range (OracleError) or ill-posed
    (IllPosedUpdate).  Without prefix caching (`init` None) row b reads and stores column 0."""
    if state_len < width - 1:
        raise OracleError(f"the pool has {state_len} columns, a window {width - 1}")
    apc = init is not None
    if apc and int(block_size) < 1:
        raise OracleError(f"the block size must be positive, got {block_size}")
    plan = []
    for b, length in enumerate(lens):
        row, cols = idx[b], len(idx[b])
        c_init, c_first, c_last = (int(init[b]), int(first[b]), int(last[b])) if apc else (0, 0, 0)
        for name, col in (("initial", c_init), ("first", c_first), ("last", c_last)):
            if not 0 <= col < cols:
                raise OracleError(f"row {b}: the {name} column {col} is outside its {cols} table column(s)")
        src = _slot(int(row[c_init]), pad, slots, f"idx[{b}, {c_init}]")
        if src is None or length == 0:
            plan.append(PrefillRow(b, None, False, ()))
            continue
        crossed = boundary_offsets(computed[b], length, block_size) if apc else []
        if apc and c_last - c_first != len(crossed):
            raise IllPosedUpdate(f"row {b}: last - first = {c_last - c_first}, but its {length} tokens after "
                                 f"{computed[b]} cross {len(crossed)} block boundar{'y' if len(crossed) == 1 else 'ies'}"
                                 f" (block size {block_size})")
        stores = []
        for k, o in enumerate(crossed):
            dst = _slot(int(row[c_first + k]), pad, slots, f"idx[{b}, {c_first + k}]")
            if dst is not None:
                stores.append((dst, o))
        dst = _slot(int(row[c_last]), pad, slots, f"idx[{b}, {c_last}]")
        if dst is not None:
            stores.append((dst, int(length)))
        named = [s for s, _ in stores]
        if len(set(named)) < len(named):
            twice = next(s for s in named if named.count(s) > 1)
            raise IllPosedUpdate(f"row {b} stores slot {twice} twice (two of its columns name it)")
        plan.append(PrefillRow(b, src, bool(has_init[b]), tuple(stores)))
    writers: dict[int, int] = {}
    for p in plan:
        for dst, _ in p.stores:
            if dst in writers:
                raise IllPosedUpdate(f"rows {writers[dst]} and {p.row} both store slot {dst}")
            writers[dst] = p.row
    for p in plan:
        if p.reads and writers.get(p.src, p.row) != p.row:
            raise IllPosedUpdate(f"row {writers[p.src]} stores slot {p.src}, which row {p.row} reads")
    return plan


def expect_conv_prefill(pool: np.ndarray, x_rows, weight: np.ndarray, bias: np.ndarray | None, idx, has_init, *,
                        init=None, first=None, last=None, computed=None, block_size: int = 0, silu: bool = False,
                        pad: int = -1) -> ConvPrefill:
    """The prefill on `pool` (float64 [S, dim, SL]) for rows `x_rows` (each float64 [dim, L_b]); `idx` [B][M]."""
    slots, dim, state_len = pool.shape
    width = weight.shape[1]
    w = weight.astype(np.float64)
    b64 = np.zeros(dim) if bias is None else bias.astype(np.float64)
    plan = plan_conv_prefill(slots, state_len, width, [x.shape[1] for x in x_rows], idx, has_init, init=init,
                             first=first, last=last, computed=computed, block_size=block_size, pad=pad)
    new_pool = pool.copy()
    out: list = []
    scale: list = []
    stored: list = []
    for p in plan:
        if p.src is None:
            out.append(None)
            scale.append(None)
            stored.append(())
            continue
        x_b = np.asarray(x_rows[p.row], dtype=np.float64)
        length = x_b.shape[1]
        prev = pool[p.src, :, :width - 1] if p.reads else np.zeros((dim, width - 1))
        full = np.concatenate([prev, x_b], axis=1)                              # [dim, W - 1 + L]
        magnitude = np.abs(full)
        acc = np.repeat(b64[:, None], length, axis=1)
        bound = np.repeat(np.abs(b64)[:, None], length, axis=1)
        for j in range(width):                       # tap j of every output: one shifted slice
            acc += w[:, j:j + 1] * full[:, j:j + length]
            bound += np.abs(w[:, j:j + 1]) * magnitude[:, j:j + length]
        scale.append(bound)
        out.append(acc / (1.0 + np.exp(-acc)) if silu else acc)
        for dst, o in p.stores:                      # every window from `full`: the snapshot's, never a store's
            new_pool[dst, :, :width - 1] = full[:, o:o + width - 1]
        stored.append(tuple(dst for dst, _ in p.stores))
    return ConvPrefill(new_pool, out, scale, stored)


def conv_prefill_tolerance(dtype: str, scale: np.ndarray, want: np.ndarray, width: int) -> np.ndarray:
    """Per-element bound on |kernel - oracle|, the decode update's: each product rounded to `dtype`, the sum
    in fp32, SiLU, the result rounded to `dtype`.  A wrong slot, column, token or tap is far outside it."""
    return conv_tolerance(dtype, scale, want, width)

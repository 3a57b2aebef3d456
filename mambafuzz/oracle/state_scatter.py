"""The state scatter after a spec-decode verify step (docs/contracts.md#state_scatter), on raw bytes.

The pool is a :class:`SlotBuffer` (``[L, S, slot_bytes]``); the per-step
states are a :class:`StepStates` in the same arena.  Index row r (of N, which
need not equal the states' R rows) is *valid* iff ``0 <= step[r] < T``,
``0 <= dst[r] < S`` and ``r < R``; then every layer's slot ``dst[r]`` gets
``states[:, r, step[r]]`` as it was in the snapshot, byte for byte (the same
dtype both sides).  Other rows do nothing: a dst of -1 is how a freed row is
skipped, and so is any slot out of range, a step of -1 or past T, a row past R.
Every other byte (slot padding, the states, other slots) is unchanged.

Dense states: ``[L, R, T, E]`` elements, each step's E followed by ``pad``
elements.  Conv-window states: one buffer ``[L, R, dim, T + W - 2]`` (each
channel's run followed by ``pad`` elements) seen as the overlapping view
``[L, R, T, dim, W - 1]`` (step and window strides 1), so
``pool[:, dst, d, w] = buf[:, r, d, step + w]``; the pool slot is ``dim x
(W - 1)`` elements, channel-major.

The index arrays need not have R rows: as in SGLang's ``fused_mamba_state_scatter_with_mask``
and ``fused_conv_window_scatter_with_mask``, there are N index rows, rows past R
skipped.  Two valid rows on one slot are ill-posed (:class:`IllPosedScatter`):
SGLang's per-block programs would leave a mixture of both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _checks
from .errors import OracleError
from .slots import SlotBuffer

__all__ = ["IllPosedScatter", "StepStates", "check_state_scatter", "expect_state_scatter", "plan_state_scatter"]

_FIELDS = ("offset", "layers", "rows", "steps", "slot_bytes", "elem_size", "pad", "window")


class IllPosedScatter(OracleError):
    """Two valid rows write one slot (a finding about the case): ``first``, ``second`` rows, ``slot``."""

    def __init__(self, first: int, second: int, slot: int):
        self.first, self.second, self.slot = int(first), int(second), int(slot)
        super().__init__(f"ill-posed scatter: valid rows {self.first} and {self.second} both write slot {self.slot}")

    def __reduce__(self):
        return (type(self), (self.first, self.second, self.slot))


@dataclass(frozen=True)
class StepStates:
    """Geometry of the per-step states in the arena (construction does not validate; ``validate`` does)."""

    offset: int        # arena byte of states[0, 0, 0]
    layers: int
    rows: int          # R
    steps: int         # T
    slot_bytes: int    # bytes of one step's state: the pool's slot bytes
    elem_size: int
    pad: int = 0       # elements after each step entry (dense) or each channel's run (window)
    window: int = 0    # W (conv windows); 0: dense

    def __post_init__(self):
        for name in _FIELDS:
            v = getattr(self, name)
            if isinstance(v, np.integer):
                object.__setattr__(self, name, int(v))

    @property
    def dim(self) -> int:
        """Channels (window) or elements E of one step's state (dense)."""
        per = self.slot_bytes // self.elem_size
        return per // (self.window - 1) if self.window else per

    @property
    def run(self) -> int:
        """Window: elements of one channel's run, padding included (T + W - 2 + pad)."""
        return self.steps + self.window - 2 + self.pad

    @property
    def step_stride(self) -> int:
        return self.elem_size if self.window else (self.dim + self.pad) * self.elem_size

    @property
    def row_stride(self) -> int:
        return self.dim * self.run * self.elem_size if self.window else self.steps * self.step_stride

    @property
    def layer_stride(self) -> int:
        return self.rows * self.row_stride

    @property
    def nbytes(self) -> int:
        return self.layers * self.layer_stride

    def validate(self, pool: SlotBuffer, arena_size: int | None = None) -> None:
        v = {name: _checks.int_scalar(name, getattr(self, name)) for name in _FIELDS}
        for name in ("layers", "rows", "steps"):
            if v[name] < 1:
                raise OracleError(f"states {name} must be >= 1, got {v[name]}")
        if v["offset"] < 0 or v["pad"] < 0:
            raise OracleError(f"states offset and pad must be >= 0, got {v['offset']} and {v['pad']}")
        if (v["layers"], v["slot_bytes"], v["elem_size"]) != (pool.layers, pool.slot_bytes, pool.elem_size):
            raise OracleError("the states must have the pool's layers, slot bytes and element size")
        if v["offset"] % v["elem_size"]:
            raise OracleError(f"states offset {v['offset']} is not a multiple of elem_size {v['elem_size']}")
        if v["window"] == 1 or v["window"] < 0:
            raise OracleError(f"window must be 0 (dense) or >= 2, got {v['window']}")
        if v["window"] and v["slot_bytes"] % ((v["window"] - 1) * v["elem_size"]):
            raise OracleError(f"a conv-window slot of {v['slot_bytes']} bytes is not dim x (W - 1 = "
                              f"{v['window'] - 1}) elements of {v['elem_size']} bytes")
        if arena_size is not None and v["offset"] + self.nbytes > arena_size:
            raise OracleError(f"the states at offset {v['offset']} of {self.nbytes} bytes end past the arena "
                              f"size {arena_size}")

    def gather(self, arena: np.ndarray, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """``[L, n, slot_bytes]``: states[:, rows[i], steps[i]] for each i, as bytes (validate first)."""
        e = self.elem_size
        if self.window:
            shape = (self.layers, self.rows, self.steps, self.dim, self.window - 1, e)
            strides = (self.layer_stride, self.row_stride, e, self.run * e, e, 1)
        else:
            shape = (self.layers, self.rows, self.steps, self.slot_bytes)
            strides = (self.layer_stride, self.row_stride, self.step_stride, 1)
        view = as_strided(arena[self.offset:], shape=shape, strides=strides, writeable=False)
        return view[:, rows, steps].reshape(self.layers, len(rows), self.slot_bytes)

    def locate(self, offset: int) -> str | None:
        """Arena byte `offset` named inside the states; None outside them."""
        rel = offset - self.offset
        if not 0 <= rel < self.nbytes:
            return None
        layer, rel = divmod(rel, self.layer_stride)
        row, rel = divmod(rel, self.row_stride)
        e = self.elem_size
        if self.window:
            d, rel = divmod(rel, self.run * e)
            col = rel // e
            if col >= self.steps + self.window - 2:
                return f"states layer {layer} row {row} channel {d} padding"
            return f"states layer {layer} row {row} channel {d} column {col}"
        step, rel = divmod(rel, self.step_stride)
        if rel >= self.slot_bytes:
            return f"states layer {layer} row {row} step {step} padding"
        return f"states layer {layer} row {row} step {step} byte {rel}"


def plan_state_scatter(slots: int, rows: int, steps: int, dst_idx, step_idx) -> np.ndarray:
    """bool [N]: which index rows copy; IllPosedScatter when two of them name one slot."""
    dst, step = _checks.int_arrays(dst_idx=dst_idx, step_idx=step_idx)
    r = np.arange(dst.size)
    valid = (step >= 0) & (step < steps) & (dst >= 0) & (dst < slots) & (r < rows)
    which = np.flatnonzero(valid)
    if which.size > 1:
        order = np.argsort(dst[which], kind="stable")
        d = dst[which][order]
        same = d[1:] == d[:-1]
        if same.any():
            k = _checks.first_bad(same)
            a, b = sorted((int(which[order[k]]), int(which[order[k + 1]])))
            raise IllPosedScatter(a, b, int(d[k]))
    return valid


def check_state_scatter(pool: SlotBuffer, states: StepStates, dst_idx, step_idx,
                        arena_size: int | None = None) -> np.ndarray:
    """Validate the geometry (inside the arena, pool and states apart) and the rows; the valid-row mask."""
    if not isinstance(pool, SlotBuffer) or not isinstance(states, StepStates):
        raise OracleError("the pool must be a SlotBuffer and the states a StepStates")
    pool.validate(arena_size)
    states.validate(pool, arena_size)
    a, b = sorted(((pool.offset, pool.offset + pool.nbytes, "pool"),
                   (states.offset, states.offset + states.nbytes, "states")))
    if b[0] < a[1]:
        raise OracleError(f"the {b[2]} (from byte {b[0]}) overlap the {a[2]} (bytes {a[0]}..{a[1] - 1})")
    return plan_state_scatter(pool.slots, states.rows, states.steps, dst_idx, step_idx)


def expect_state_scatter(snapshot, pool: SlotBuffer, states: StepStates, dst_idx, step_idx,
                         check: bool = True) -> np.ndarray:
    """The arena after the scatter: each valid row's state (from the snapshot) in every layer of its slot."""
    snapshot = _checks.arena("snapshot", snapshot)
    if check:
        valid = check_state_scatter(pool, states, dst_idx, step_idx, snapshot.size)
    else:
        valid = plan_state_scatter(pool.slots, states.rows, states.steps, dst_idx, step_idx)
    dst, step = _checks.int_arrays(dst_idx=dst_idx, step_idx=step_idx)
    rows = np.flatnonzero(valid)
    out = snapshot.copy()
    if rows.size:
        pool.view(out, writeable=True)[:, dst[rows]] = states.gather(snapshot, rows, step[rows])
    return out

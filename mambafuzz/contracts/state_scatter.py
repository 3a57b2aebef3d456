"""Contract `state_scatter` (docs/contracts.md#state_scatter): commit the accepted step's state into each request's
slot.

The target gets SGLang's ``fused_mamba_state_scatter_with_mask(dst, src,
dst_indices, step_indices)`` arguments as tensors: ``pool`` (``[L, S, E]``, or
``[L, S, dim, W - 1]`` for conv windows: a view of the arena, slots and
layers padded, layer- or slot-major), ``states`` (a view of the arena:
``[L, R, T, E]`` with padding after each step, or the overlapping windows
``[L, R, T, dim, W - 1]`` of one ``[L, R, dim, T + W - 2]`` buffer, step and
window strides 1, as SGLang's ``fused_conv_window_scatter_with_mask`` gets
them), ``dst_indices [N]`` and ``step_indices [N]`` (int32 or int64; N need
not be R).  Pool and states are the signed integer dtype of the element size:
the scatter moves raw bytes.

Checked, exactly: each valid row's slot (``oracle.state_scatter``: 0 <= step
< T, 0 <= dst < S, r < R), every other slot and all padding, the states, and
the index arrays, unchanged.  Pools past 256 MiB are materialised sparsely
(the named slots and slot 0, plus GUARD bytes of padding each; the states).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.pools import DENSE_LIMIT, MAX_SPARSE_ARENA
from mambafuzz.cases.state_scatter import INDEX_DTYPES, StateScatterCase
from mambafuzz.errors import UsageError
from mambafuzz.oracle import SlotBuffer, StepStates

from .base import Argument, CliOption, Contract, Image, Output, Prepared, down_to, without
from .features import COUNT_EDGES, COUNTS, ELEMS, HUGE, NO_YES, bucket, joined
from .slots import slot_window

SCATTERS = ("both", "dense", "window")
ROW_KINDS = ("valid", "step<0", "step>=T", "dst<0", "dst>=S", "r>=R")
_INT_RANGE = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}


def _scatter(value) -> str:
    if value not in SCATTERS:
        raise UsageError(f"state_scatter option scatter must be one of {', '.join(SCATTERS)}, got {value!r}")
    return value


def geometry(case: StateScatterCase) -> tuple[SlotBuffer, StepStates]:
    """The case's pool and states as the oracle sees them."""
    p = case.pool
    return p, StepStates(case.states_offset, p.layers, case.rows, case.steps, p.slot_bytes, p.elem_size,
                         case.states_pad, case.window)


def _end(case: StateScatterCase) -> int:
    pool, states = geometry(case)
    return max(pool.offset + pool.nbytes, states.offset + states.nbytes)


def _cut(case: StateScatterCase, **changes) -> StateScatterCase:
    out = dataclasses.replace(case, **changes)
    return dataclasses.replace(out, arena_size=max(1, _end(out)))


def _pooled(case: StateScatterCase, **changes) -> StateScatterCase:
    return _cut(case, pool=dataclasses.replace(case.pool, **changes))


class StateScatter(Contract):
    name = "state_scatter"
    case_type = StateScatterCase
    summary = "commit after verify: pool[:, dst[r]] = states[:, r, step[r]] for each valid row r, raw bytes"
    arguments = (
        Argument("pool", "int8, int16, int32 or int64 (by element size)", "[L, S, E] or [L, S, dim, W - 1]",
                 "the slot pool: a view of the arena, slot and layer strides padded, layer- or slot-major"),
        Argument("states", "the pool's dtype", "[L, R, T, E] or [L, R, T, dim, W - 1]",
                 "per-step states, a view of the arena (padded steps; conv: overlapping windows, strides 1)"),
        Argument("dst_indices", "int32 or int64", "[N]", "row r's slot; out of [0, S) (a freed row's -1): skip"),
        Argument("step_indices", "as dst_indices", "[N]", "row r's accepted step; out of [0, T): skip; r >= R: skip"),
    )
    cli_options = (
        CliOption("scatter", SCATTERS, "both", "which states your kernel takes: dense [L, R, T, E] "
                                               "(fused_mamba_state_scatter_with_mask), conv windows "
                                               "[L, R, T, dim, W - 1] (fused_conv_window_scatter_with_mask), or both"),
    )
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "row_kind": ROW_KINDS, "shared_slot": NO_YES, "slot0": NO_YES,
        "rows_vs_states": ("N<R", "N=R", "N>R"), "window": ("none", "2", "3", "4", "5", "6"),
        "layout": ("layer-major", "slot-major"), "padding": ("none", "slot", "layer"), "states_padding": NO_YES,
        "elem": ELEMS, "past_2gib": NO_YES, "past_2g_elements": NO_YES, "index_dtype": INDEX_DTYPES,
    }

    def strategy(self, profile, scatter="both", ill_posed: bool = False, **_):
        from mambafuzz.strategies.state_scatter import state_scatter_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return state_scatter_cases(profile, scatter=_scatter(scatter), ill_posed=ill_posed)

    # ------------------------------------------------------------ memory
    def image(self, case: StateScatterCase) -> Image:
        pool, states = geometry(case)
        if case.index_dtype not in INDEX_DTYPES:
            raise oracle.OracleError(f"index_dtype must be one of {', '.join(INDEX_DTYPES)}")
        low, high = _INT_RANGE[case.index_dtype]
        if any(not low <= v <= high for v in case.dst_idx + case.step_idx):
            raise oracle.OracleError(f"index values must fit {case.index_dtype}")
        oracle.check_state_scatter(pool, states, case.dst_idx, case.step_idx, case.arena_size)
        dst = np.asarray(case.dst_idx, dtype=np.int64)
        if case.arena_size <= DENSE_LIMIT:
            return Image(None, (pool, states, dst))
        used = np.unique(np.concatenate([[0], dst[(dst >= 0) & (dst < pool.slots)]]))
        w = slot_window(pool)
        layer_offsets = np.arange(pool.layers, dtype=np.int64) * pool.layer_stride
        slot_offsets = used * pool.slot_stride
        if pool.layer_major:
            starts = (layer_offsets[:, None] + slot_offsets[None, :]).reshape(-1)
            compact = SlotBuffer(0, pool.layers, len(used), pool.slot_bytes, w, len(used) * w, pool.elem_size)
        else:
            starts = (slot_offsets[:, None] + layer_offsets[None, :]).reshape(-1)
            compact = SlotBuffer(0, pool.layers, len(used), pool.slot_bytes, pool.layers * w, w, pool.elem_size)
        pool_positions = (pool.offset + starts[:, None] + np.arange(w)[None, :]).reshape(-1)
        filler = -len(pool_positions) % 8  # the states 8-aligned in the image; filler maps to no arena byte
        states_at = len(pool_positions) + filler
        positions = np.concatenate([pool_positions, np.full(filler, -1, dtype=np.int64),
                                    states.offset + np.arange(states.nbytes, dtype=np.int64)])
        inside = (dst >= 0) & (dst < pool.slots)
        compact_dst = np.where(inside, np.searchsorted(used, dst), -1)
        return Image(positions, (compact, dataclasses.replace(states, offset=states_at), compact_dst))

    def prepare(self, case: StateScatterCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        pool_i, states_i, dst_i = image.plan
        expected = oracle.expect_state_scatter(snapshot, pool_i, states_i, dst_i, case.step_idx, check=False)
        pool, states = geometry(case)
        e = pool.elem_size
        dtype = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[e]
        flat = arena[pool.offset:pool.offset + pool.nbytes].view(dtype)
        if case.window:
            shape = (pool.layers, pool.slots, states.dim, case.window - 1)
            strides = (pool.layer_stride // e, pool.slot_stride // e, case.window - 1, 1)
        else:
            shape = (pool.layers, pool.slots, states.dim)
            strides = (pool.layer_stride // e, pool.slot_stride // e, 1)
        pool_t = flat.as_strided(shape, strides)
        flat = arena[states.offset:states.offset + states.nbytes].view(dtype)
        if case.window:
            shape = (pool.layers, case.rows, case.steps, states.dim, case.window - 1)
            strides = (states.layer_stride // e, states.row_stride // e, 1, states.run, 1)
        else:
            shape = (pool.layers, case.rows, case.steps, states.dim)
            strides = (states.layer_stride // e, states.row_stride // e, states.step_stride // e, 1)
        states_t = flat.as_strided(shape, strides)
        index = getattr(torch, case.index_dtype)
        dst_t = torch.tensor(list(case.dst_idx), dtype=index, device=device)
        step_t = torch.tensor(list(case.step_idx), dtype=index, device=device)
        args = {"pool": pool_t, "states": states_t, "dst_indices": dst_t, "step_indices": step_t}
        outputs = tuple(Output(name, args[name].cpu().numpy().copy(), what=f"{name} (an input) element {{i}}")
                        for name in ("dst_indices", "step_indices"))
        return Prepared(args, {}, expected, outputs=outputs)

    def locate(self, case: StateScatterCase, offset: int) -> str:
        pool, states = geometry(case)
        where = pool.locate(offset)
        if where is not None:
            layer, slot, byte, data = where
            valid = self._valid_rows(case)
            writers = [f"row {r} (step {case.step_idx[r]})" for r in np.flatnonzero(valid)
                       if case.dst_idx[r] == slot]
            who = f"; written by {writers[0]}" if writers else "; no valid row writes this slot"
            return f"pool layer {layer} slot {slot} byte {byte} ({'data' if data else 'padding'}{who})"
        return states.locate(offset) or "outside the pool and the states"

    @staticmethod
    def _valid_rows(case: StateScatterCase) -> np.ndarray:
        try:
            return oracle.plan_state_scatter(case.pool.slots, case.rows, case.steps, case.dst_idx, case.step_idx)
        except oracle.OracleError:
            return np.zeros(len(case.dst_idx), dtype=bool)

    # ------------------------------------------------------------ shrinking
    def valid(self, case: StateScatterCase) -> bool:
        if not 1 <= case.arena_size <= self.max_arena:
            return False
        try:
            self.image(case)
        except (oracle.OracleError, TypeError, ValueError):
            return False
        return True

    def candidates(self, case: StateScatterCase) -> Iterator[StateScatterCase]:
        """Strictly smaller cases (``StateScatterCase.size``), biggest cuts first."""
        size = case.size
        for smaller in self._cuts(case):
            if smaller.size < size:
                yield smaller

    def _cuts(self, case: StateScatterCase) -> Iterator[StateScatterCase]:
        dst, step, p = case.dst_idx, case.step_idx, case.pool
        n, e = len(dst), p.elem_size
        if n > 1:  # an index row dropped
            for i in range(n):
                yield _cut(case, dst_idx=without(dst, i), step_idx=without(step, i))
        for layers in sorted({1, p.layers // 2, p.layers - 1} - {0}):
            if layers < p.layers:
                yield _pooled(case, layers=layers)
        if case.window:
            dim = p.slot_bytes // e // (case.window - 1)
            for d in sorted({1, dim // 2, dim - 1} - {0}):
                if d < dim:
                    yield _pooled(case, slot_bytes=d * (case.window - 1) * e)
            if case.window > 2:
                yield _cut(case, window=case.window - 1, pool=dataclasses.replace(
                    p, slot_bytes=dim * (case.window - 2) * e))
            yield _cut(case, window=0)
        else:
            for nb in sorted({e, p.slot_bytes // 2 // e * e, p.slot_bytes - e} - {0}):
                if nb < p.slot_bytes:
                    yield _pooled(case, slot_bytes=nb)
        for rows in sorted({1, case.rows - 1} - {0}):
            if rows < case.rows:
                yield _cut(case, rows=rows)
        for steps in sorted({1, case.steps - 1} - {0}):
            if steps < case.steps:
                yield _cut(case, steps=steps)
        yield from self._renumbered(case)
        # index values lowered: a valid step to 0, a step past T to T, a slot past S to S, negatives to -1
        low_step = tuple(-1 if s < 0 else case.steps if s >= case.steps else 0 for s in step)
        yield _cut(case, step_idx=low_step)
        yield _cut(case, dst_idx=tuple(-1 if d < 0 else min(d, p.slots) for d in dst))
        if case.states_pad:
            yield _cut(case, states_pad=0)
        yield _pooled(case, slot_stride=p.slot_bytes, layer_stride=p.slots * p.slot_bytes)
        for tighter in self._less_padded(p):
            yield _cut(case, pool=tighter)
        if case.index_dtype != "int32":
            yield dataclasses.replace(case, index_dtype="int32")
        for keep in (True, False):  # both regions down to byte 0 (each offset's residue mod 8 or mod e kept)
            yield self._packed(case, 8 if keep else e)
        if _end(case) < case.arena_size:
            yield _cut(case)

    @staticmethod
    def _renumbered(case: StateScatterCase) -> Iterator[StateScatterCase]:
        """The named slots renumbered 0.. in order (slots past S kept past the new S), or the slots past
        the last named one dropped."""
        p = case.pool
        used = sorted({d for d in case.dst_idx if 0 <= d < p.slots})
        if not used:
            yield _pooled(case, slots=1)
            return
        where = {s: k for k, s in enumerate(used)}
        for slots, mapping in ((len(used), where), (used[-1] + 1, {s: s for s in used})):
            if slots >= p.slots:
                continue
            dst = tuple(mapping[d] if 0 <= d < p.slots else d - p.slots + slots if d >= p.slots else d
                        for d in case.dst_idx)
            layer_stride = p.layer_stride - (p.slots - slots) * p.slot_stride if p.layer_major else p.layer_stride
            yield _cut(case, dst_idx=dst, pool=dataclasses.replace(p, slots=slots, layer_stride=layer_stride))

    @staticmethod
    def _less_padded(b: SlotBuffer) -> Iterator[SlotBuffer]:
        """One element of slot padding (or none), and no padding between layers or slots."""
        e = b.elem_size
        if b.layer_major:
            for ss in sorted({b.slot_bytes, b.slot_bytes + e}):
                if ss < b.slot_stride:
                    yield dataclasses.replace(b, slot_stride=ss)
            if b.layer_stride > b.slots * b.slot_stride:
                yield dataclasses.replace(b, layer_stride=b.slots * b.slot_stride)
        else:
            for ls in sorted({b.slot_bytes, b.slot_bytes + e}):
                if ls < b.layer_stride:
                    yield dataclasses.replace(b, layer_stride=ls)
            if b.slot_stride > b.layers * b.layer_stride:
                yield dataclasses.replace(b, slot_stride=b.layers * b.layer_stride)

    @staticmethod
    def _packed(case: StateScatterCase, modulus: int) -> StateScatterCase:
        pool, states = geometry(case)
        regions = sorted([(pool.offset, pool.nbytes, "pool"), (states.offset, states.nbytes, "states")])
        cursor, offsets = 0, {}
        for offset, nbytes, name in regions:
            offsets[name] = min(offset, down_to(cursor, offset, modulus))
            cursor = offsets[name] + nbytes
        return _cut(case, pool=dataclasses.replace(case.pool, offset=offsets["pool"]),
                    states_offset=offsets["states"])

    # ------------------------------------------------------------ coverage
    def features(self, case: StateScatterCase) -> dict[str, str]:
        p = case.pool
        valid = self._valid_rows(case)
        kinds = []
        for r, (d, s) in enumerate(zip(case.dst_idx, case.step_idx)):
            kinds.append("valid" if valid[r] else "step<0" if s < 0 else "step>=T" if s >= case.steps
                         else "dst<0" if d < 0 else "dst>=S" if d >= p.slots else "r>=R")
        written = {d for r, d in enumerate(case.dst_idx) if valid[r]}
        shared = any(not valid[r] and d in written for r, d in enumerate(case.dst_idx))
        n, rows = len(case.dst_idx), case.rows
        if p.layer_major:
            slot_min, layer_min = p.slot_bytes, p.slots * p.slot_stride
        else:
            slot_min, layer_min = p.layers * p.layer_stride, p.slot_bytes
        padding = [name for name, stride, least in (("slot", p.slot_stride, slot_min),
                                                    ("layer", p.layer_stride, layer_min)) if stride > least]
        named = [d for d in case.dst_idx if 0 <= d < p.slots]
        top = max(named, default=0)
        past = p.offset + (p.layers - 1) * p.layer_stride + top * p.slot_stride + p.slot_bytes > HUGE
        return {
            "rows": bucket(n, COUNT_EDGES), "row_kind": joined(kinds or ["valid"], ROW_KINDS),
            "shared_slot": "yes" if shared else "no", "slot0": "yes" if 0 in written else "no",
            "rows_vs_states": "N<R" if n < rows else "N=R" if n == rows else "N>R",
            "window": str(case.window) if case.window else "none", "layout": "layer-major" if p.layer_major
            else "slot-major", "padding": joined(padding or ["none"], self.buckets["padding"]),
            "states_padding": "yes" if case.states_pad else "no", "elem": str(p.elem_size),
            "past_2gib": "yes" if past else "no",
            "past_2g_elements": "yes" if top * (p.slot_stride // p.elem_size) >= HUGE else "no",
            "index_dtype": case.index_dtype,
        }

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3", "4-15")
        scatter = options.get("scatter") or "both"
        out["window"] = {"dense": ("none",), "window": out["window"][1:]}.get(scatter, out["window"])
        return out


CONTRACT = StateScatter()

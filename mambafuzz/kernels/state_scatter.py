"""The state scatter after verification (contract ``state_scatter``, docs/contracts.md#state_scatter).

``state_scatter(pool, states, dst_indices, step_indices)``: one program per (index row, layer, block of
the slot's elements).  A program loads its row's step and slot and copies only when the row is valid
(``0 <= step < T``, ``0 <= dst < S``, ``r < R``), as SGLang's ``fused_mamba_state_scatter_with_mask``
does: ``pool[l, dst] = states[l, r, step]``.  A 4-D pool ``[L, S, dim, W - 1]`` takes the conv windows
``[L, R, T, dim, W - 1]`` (``fused_conv_window_scatter_with_mask``): element e of a slot is channel
``e // (W - 1)``, column ``e % (W - 1)``.  Every stride is the tensor's own (padded or slot-major pools,
padded or overlapping states) and every offset int64.  The elements are moved as they are (no dtype
conversion: pool and states must share one).

Zoo flags (constexpr, compiled out when off; ``kernels.zoo``): ``STEP_CLAMP`` (the step mask ignored, a
step of -1 clamped to 0: a skipped row still writes its slot, which may be a valid row's: write-write,
the class of SGLang's accept/track multi scatter race), ``DST_ZERO`` (a dst below 0 taken as slot 0: a
freed row clobbers slot 0, SGLang #29449), ``SLOT_I32`` (the slot offset ``dst * slot stride`` formed in 32
bits: a slot past 2^31 elements wraps, the int32-offset family).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import variant_flags
from .zoo import PAST_2GIB, ZooEntry

CONTRACT = "state_scatter"
DESCRIPTION = ("Triton state scatter: grid (rows, layers, element blocks), the valid-row mask, tensor strides, "
               "int64 offsets (dense states or conv windows)")
BLOCK = 512
FLAGS = ("STEP_CLAMP", "DST_ZERO", "SLOT_I32")


@triton.jit(do_not_specialize=["slots", "rows", "steps", "entry", "inner", "p_layer", "p_slot", "p_d", "p_w",
                               "s_layer", "s_row", "s_step", "s_d", "s_w"])
def _state_scatter_kernel(pool_ptr, states_ptr, dst_ptr, step_ptr, slots, rows, steps, entry, inner,
                          p_layer, p_slot, p_d, p_w, s_layer, s_row, s_step, s_d, s_w,
                          BLOCK: tl.constexpr, STEP_CLAMP: tl.constexpr, DST_ZERO: tl.constexpr,
                          SLOT_I32: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    layer = tl.program_id(1).to(tl.int64)
    step = tl.load(step_ptr + r).to(tl.int64)
    dst = tl.load(dst_ptr + r).to(tl.int64)
    if STEP_CLAMP:
        step = tl.maximum(step, 0)
    if DST_ZERO:
        dst = tl.maximum(dst, 0)
    if (step >= 0) & (step < steps) & (dst >= 0) & (dst < slots) & (r < rows):
        e = tl.program_id(2).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = e < entry
        d = e // inner
        w = e % inner
        src = layer * s_layer + r * s_row + step * s_step + d * s_d + w * s_w
        if SLOT_I32:
            slot_off = (dst.to(tl.int32) * p_slot.to(tl.int32)).to(tl.int64)
        else:
            slot_off = dst * p_slot
        out = layer * p_layer + slot_off + d * p_d + w * p_w
        tl.store(pool_ptr + out, tl.load(states_ptr + src, mask=mask), mask=mask)


def _geometry(pool, states):
    """(entry elements, inner, pool strides (layer, slot, d, w), states strides (layer, row, step, d, w))."""
    if pool.dtype != states.dtype:
        raise ValueError(f"state_scatter: pool is {pool.dtype}, states {states.dtype}: one dtype (raw bytes)")
    if pool.dim() == 4 and states.dim() == 5:
        if states.shape[0] != pool.shape[0] or states.shape[3:] != pool.shape[2:]:
            raise ValueError(f"state_scatter: windows {tuple(states.shape)} do not fit pool {tuple(pool.shape)}")
        return (pool.shape[2] * pool.shape[3], pool.shape[3], pool.stride(), states.stride())
    if pool.dim() == 3 and states.dim() == 4:
        if states.shape[0] != pool.shape[0] or states.shape[3] != pool.shape[2]:
            raise ValueError(f"state_scatter: states {tuple(states.shape)} do not fit pool {tuple(pool.shape)}")
        return pool.shape[2], 1, tuple(pool.stride()) + (0,), tuple(states.stride()) + (0,)
    raise ValueError(f"state_scatter: pool [L, S, E] takes states [L, R, T, E], pool [L, S, dim, W - 1] "
                     f"windows [L, R, T, dim, W - 1]; got {pool.dim()}-D and {states.dim()}-D")


def state_scatter(pool, states, dst_indices, step_indices, *, variant=None):
    """Triton state scatter: grid (rows, layers, element blocks), the valid-row mask, int64 offsets."""
    flags = variant_flags("state_scatter", VARIANTS, FLAGS, variant)
    entry, inner, ps, ss = _geometry(pool, states)
    n, layers = dst_indices.shape[0], pool.shape[0]
    if n == 0 or layers == 0 or entry == 0:
        return pool
    grid = (n, layers, triton.cdiv(entry, BLOCK))
    _state_scatter_kernel[grid](pool, states, dst_indices, step_indices, pool.shape[1], states.shape[1],
                                states.shape[2], entry, inner, *ps, *ss, BLOCK=BLOCK, **flags)
    return pool


def torch_fn(pool, states, dst_indices, step_indices):
    """The same scatter in plain torch: the valid rows' states gathered, then stored through the pool view."""
    _geometry(pool, states)
    dst, step = dst_indices.long(), step_indices.long()
    r = torch.arange(dst.shape[0], device=dst.device)
    ok = (step >= 0) & (step < states.shape[2]) & (dst >= 0) & (dst < pool.shape[1]) & (r < states.shape[1])
    if bool(ok.any()):
        pool[:, dst[ok]] = states[:, r[ok], step[ok]]
    return pool


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "SS-WW": {"STEP_CLAMP": True}, "SS-FREED0": {"DST_ZERO": True}, "SS-I32": {"SLOT_I32": True}}


def contract_fn(variant=None):
    """The contract's signature over ``state_scatter`` with one zoo variant (None: the correct kernel)."""
    def fn(pool, states, dst_indices, step_indices):
        return state_scatter(pool, states, dst_indices, step_indices, variant=variant)
    return fn


# Zoo rows (docs/contracts.md#zoo): the commit scatter after verification; kernels.registry lists them.
ZOO = (
    ZooEntry(
        "SS-WW", "state_scatter", "wrong + racy",
        "scatter with two valid rows on one slot: the step mask ignored (-1 clamped to 0), so a skipped row "
        "writes its slot too, another row's (the race of SGLang's accept/track multi scatter)",
        "state_scatter(variant='SS-WW'): step = max(step, 0) before the valid-row test",
        "race when the skipped row's slot is a valid row's (two programs store it); wrong bytes when "
        "the slot is its own or the skipped row runs last",
        cpu=("race", "mismatch"), gpu=("mismatch",)),
    ZooEntry(
        "SS-FREED0", "state_scatter", "wrong",
        "a freed row's destination defaulting to slot 0, which another row owns (SGLang #29449)",
        "state_scatter(variant='SS-FREED0'): dst = max(dst, 0)",
        "wrong when a row with a dst of -1 has a step in range: slot 0 gets its state (a race as well "
        "when a valid row writes slot 0)",
        cpu=("mismatch", "race"), gpu=("mismatch",)),
    ZooEntry(
        "SS-I32", "state_scatter", "wrong",
        "the slot offset dst * slot stride in 32 bits: a slot past 2^31 elements wraps (the int32-offset family)",
        "state_scatter(variant='SS-I32'): (dst.to(int32) * p_slot.to(int32))",
        "wrong or out of bounds when a valid row's slot starts past 2^31 elements (1- and 2-byte pools)",
        cpu=("mismatch", "oob", "race"), gpu=("mismatch", "fault"), memory=PAST_2GIB),
)

"""The post-verify commit as SGLang writes it (``fused_mamba_state_scatter_with_mask``), behind the
`state_scatter` adapter.

One program per (row, layer, block of elements): a row whose accepted step is
negative returns; one whose step, slot or row is out of range copies nothing;
the copy is a raw load and store of the step's state into the slot, with the
tensors' own strides (padded, slot-major pools).  The engine's conv-window
variant is another kernel, so the adapter declines those cases.
"""
import torch
import triton
import triton.language as tl

import mambafuzz


@triton.jit
def _scatter_kernel(dst_ptr, src_ptr, dst_idx_ptr, step_idx_ptr, slots, rows, steps, elems,
                    d_layer, d_slot, d_elem, s_layer, s_row, s_step, s_elem, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    layer = tl.program_id(1)
    step = tl.load(step_idx_ptr + r).to(tl.int64)
    if step >= 0:
        slot = tl.load(dst_idx_ptr + r).to(tl.int64)
        if slot >= 0 and slot < slots and r < rows and step < steps:
            offs = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < elems
            src = src_ptr + layer.to(tl.int64) * s_layer + r.to(tl.int64) * s_row + step * s_step + offs * s_elem
            dst = dst_ptr + layer.to(tl.int64) * d_layer + slot * d_slot + offs * d_elem
            tl.store(dst, tl.load(src, mask=mask), mask=mask)


def fused_mamba_state_scatter_with_mask(dst, src, dst_indices, step_indices, block=256):
    """The engine's entry point: dst [L, S, E], src [L, R, T, E], indices [N] (N may differ from R)."""
    n = step_indices.numel()
    layers, slots, elems = dst.shape
    if n and layers and elems:
        grid = (n, layers, triton.cdiv(elems, block))
        _scatter_kernel[grid](dst, src, dst_indices, step_indices, slots, src.shape[1], src.shape[2], elems,
                              *dst.stride(), *src.stride(), BLOCK=block)


def state_scatter(pool, states, dst_indices, step_indices):
    """The adapter: the dense commit goes to the engine's kernel; the conv-window one is not this kernel."""
    if states.dim() != 4:
        mambafuzz.reject("conv-window states go to the engine's other kernel")
    fused_mamba_state_scatter_with_mask(pool, states, dst_indices, step_indices)


def test_the_engine_scatter_commits_exactly_the_valid_rows():
    report = mambafuzz.check(state_scatter, "state_scatter", max_examples=40, database=None)
    assert report.examples >= 10

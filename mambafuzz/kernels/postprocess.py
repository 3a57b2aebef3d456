"""Fused align-mode postprocess on the GPU (``postprocess`` contract, docs/contracts.md#postprocess).

Grid ``(requests, states, num_tiles)``.  Every program recomputes the
decision for its request r from the request arrays (int32 ``[R]``) and
``block_size``:

    running     = num_computed + num_scheduled - num_draft
    new_computed = running + accepted - 1
    aligned     = floor(new_computed / block_size) * block_size
    aligned < running            -> nothing for this request
    bias = aligned - running, dst_col = aligned // block_size - 1, src_col = state_idx
    src_col == dst_col           -> accepted count becomes 1
    src_col == dst_col, bias == 0 -> no copy (self-copy)
    otherwise                    -> copy_one_state(s, tile t) with (src_col, dst_col, bias)

The accepted counts are READ from a per-step snapshot (``accepted_in``, a
clone the launcher makes) and WRITTEN to ``num_accepted`` (the live tensor,
updated in place) only by program ``(r, 0, 0)``: no program reads what
another program of the same launch writes.

Perturbation (``kernels.perturb``): position 1 also sleeps chosen warps before
the decision reads (with schedule 3 the delay differs per program, which is
what a cross-program race such as PP-INPLACE needs); the copy pieces get both
positions through ``copy_one_state``.
"""
import torch
import triton
import triton.language as tl

from .copy import floordiv, warp_delay
from .launch import launch, variant_flags
from .state_copy import (BLOCK, FLAG_NAMES, ROWS, VARIANTS as STATE_VARIANTS,
                         copy_one_state, check_launch, check_rows, positive_int)

CONTRACT = "postprocess"
DESCRIPTION = "Triton fused align-mode postprocess (decision + state copy + accepted update)"
AMPLIFIABLE = True  # its targets take perturb= (warp delays built into the kernel)

# zoo ids handled here on top of the state-copy ones
PP_VARIANTS = ("NOOP-SKIP", "PP-INPLACE")


@triton.jit(do_not_specialize=["block_size", "num_tiles", "S", "R", "C", "seed"])
def _postprocess_kernel(meta_ptr, bt_ptr, num_computed, num_scheduled, num_draft,
                        accepted_in, num_accepted, state_idx, block_size, num_tiles, S, R, C, seed,
                        BLOCK: tl.constexpr, ROWS: tl.constexpr, NOOP_SKIP: tl.constexpr,
                        SD_SPAN: tl.constexpr, DS_ROW: tl.constexpr,
                        DS_CONTIG: tl.constexpr, ADDR_I32: tl.constexpr,
                        TILE_GAP: tl.constexpr, PAD_CLOBBER: tl.constexpr,
                        DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr, SCHEDULE: tl.constexpr):
    r = tl.program_id(0)
    s = tl.program_id(1)
    t = tl.program_id(2)
    warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)  # before the decision reads
    bs = block_size.to(tl.int64)
    nc = tl.load(num_computed + r).to(tl.int64)
    ns = tl.load(num_scheduled + r).to(tl.int64)
    nd = tl.load(num_draft + r).to(tl.int64)
    acc = tl.load(accepted_in + r).to(tl.int64)
    src_col = tl.load(state_idx + r).to(tl.int64)
    running = nc + ns - nd
    new_computed = running + acc - 1
    aligned = floordiv(new_computed, bs) * bs
    if aligned >= running:
        bias = aligned - running
        dst_col = floordiv(aligned, bs) - 1
        self_col = src_col == dst_col
        if self_col & (s == 0) & (t == 0):
            tl.store(num_accepted + r, tl.full((), 1, tl.int32))
        if NOOP_SKIP:
            do_copy = src_col != dst_col  # zoo NOOP-SKIP: ignores the bias
        else:
            do_copy = (src_col != dst_col) | (bias != 0)
        if do_copy & (s < S):
            copy_one_state(meta_ptr, bt_ptr, s, r, t, src_col, dst_col, bias, num_tiles, R, C,
                            BLOCK, ROWS,
                            SD_SPAN=SD_SPAN, DS_ROW=DS_ROW, DS_CONTIG=DS_CONTIG,
                            ADDR_I32=ADDR_I32, TILE_GAP=TILE_GAP, PAD_CLOBBER=PAD_CLOBBER,
                            DELAY_POS=DELAY_POS, DELAY_NS=DELAY_NS, SCHEDULE=SCHEDULE,
                            seed=seed)


# zoo id -> state-copy constexpr flags (the PP ids set none of them)
VARIANTS = {**STATE_VARIANTS, **{v: {} for v in PP_VARIANTS}}


def _flags(variant):
    flags = variant_flags("postprocess", VARIANTS, FLAG_NAMES, variant)
    flags["NOOP_SKIP"] = variant == "NOOP-SKIP"
    return flags


def postprocess(meta, block_tables, num_computed, num_scheduled, num_draft, num_accepted,
                state_idx, *, block_size, num_tiles=1, arena=None, variant=None,
                block=BLOCK, rows=ROWS, num_warps=4, perturb=None):
    """Align-mode postprocess: copy states per the decision, update ``num_accepted`` in place.

    ``arena`` is accepted for the contract and ignored (addresses are absolute).
    ``perturb`` (a ``kernels.perturb.Perturb`` or its 5-tuple) sleeps chosen
    warps to make races show; its ``num_warps`` replaces ``num_warps``.
    """
    n_req = check_launch("postprocess", meta, block_tables, num_computed=num_computed,
                         num_scheduled=num_scheduled, num_draft=num_draft,
                         num_accepted=num_accepted, state_idx=state_idx)
    if num_accepted.dtype != torch.int32:
        raise TypeError(f"postprocess: num_accepted must be int32, got {num_accepted.dtype}")
    check_rows("postprocess", n_req, block_tables)
    block_size = positive_int("postprocess", "block_size", block_size)
    num_tiles = positive_int("postprocess", "num_tiles", num_tiles)
    flags = _flags(variant)
    if variant == "PP-INPLACE":
        accepted_in = num_accepted  # zoo PP-INPLACE: read the live tensor
    else:
        accepted_in = num_accepted.clone()  # per-step snapshot
    # Every request needs its (r, 0, 0) program to update its accepted count,
    # even when there is no state to copy.
    n_states = max(meta.shape[0], 1)
    _, R, C = block_tables.shape
    launch(_postprocess_kernel, (n_req, n_states, num_tiles),
           (meta, block_tables, num_computed, num_scheduled, num_draft, accepted_in, num_accepted,
            state_idx, block_size, num_tiles, meta.shape[0], R, C),
           perturb=perturb, num_warps=num_warps, BLOCK=block, ROWS=rows, **flags)


def contract_fn(variant=None):
    """The contract's signature over ``postprocess`` with one zoo variant (None: the correct kernel), plus
    ``perturb=`` (race amplification; None: none)."""
    def fn(meta, block_tables, num_computed, num_scheduled, num_draft, num_accepted, state_idx, *, block_size,
           num_tiles=1, arena=None, perturb=None):
        return postprocess(meta, block_tables, num_computed, num_scheduled, num_draft, num_accepted, state_idx,
                           block_size=block_size, num_tiles=num_tiles, arena=arena, variant=variant,
                           perturb=perturb)
    fn.__doc__ = postprocess.__doc__
    return fn


torch_fn = None  # no torch path: the decision and the in-place count are the kernel's

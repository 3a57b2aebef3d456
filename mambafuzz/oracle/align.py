"""The align-mode postprocess decision after a spec-decode step (docs/contracts.md#postprocess)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks
from .errors import OracleError
from .state_copy import checked_block_tables, checked_pools, run_state_copies

__all__ = ["AlignDecision", "decide", "expect_postprocess"]

_I32 = np.iinfo(np.int32)


@dataclass(frozen=True, eq=False)
class AlignDecision:
    """Per-request decision arrays (one entry per request).

    ``bias``, ``src_col`` and ``dst_col`` are the contract's formulas evaluated for
    every request; they only mean something where ``needs_copy`` (elsewhere
    ``bias`` is negative).
    """

    running: np.ndarray       # int64: num_computed + num_scheduled - num_draft
    new_computed: np.ndarray  # int64: running + num_accepted - 1
    aligned: np.ndarray       # int64: new_computed rounded down to a block boundary
    needs_copy: np.ndarray    # bool: aligned >= running
    bias: np.ndarray          # int64: aligned - running
    src_col: np.ndarray       # int64: state_idx
    dst_col: np.ndarray       # int64: aligned // block_size - 1
    accepted_out: np.ndarray  # int32: 1 where needs_copy & src_col == dst_col, else num_accepted
    self_copy_skip: np.ndarray  # bool: needs_copy & src_col == dst_col & bias == 0
    do_copy: np.ndarray       # bool: needs_copy & ~self_copy_skip

    def __len__(self) -> int:
        return int(self.running.size)


def decide(num_computed, num_scheduled, num_draft, num_accepted, state_idx, block_size) -> AlignDecision:
    """The decision for every request, vectorised."""
    named = {"num_computed": num_computed, "num_scheduled": num_scheduled, "num_draft": num_draft,
             "num_accepted": num_accepted, "state_idx": state_idx}
    arrs = _checks.int_arrays(**named)
    nc, ns, nd, na, si = arrs
    block_size = _checks.int_scalar("block_size", block_size)
    if block_size < 1:
        raise OracleError(f"block_size must be >= 1, got {block_size}")
    for name, a in zip(named, arrs):
        if a.size and (a < 0).any():
            i = _checks.first_bad(a < 0)
            raise OracleError(f"negative {name} {int(a[i])} for request {i}")
        if a.size and (a > _I32.max).any():
            i = _checks.first_bad(a > _I32.max)
            raise OracleError(f"{name} {int(a[i])} for request {i} does not fit in int32")
    if na.size and (na < 1).any():
        i = _checks.first_bad(na < 1)
        raise OracleError(f"num_accepted must be >= 1, got {int(na[i])} for request {i}")
    running = nc + ns - nd
    if (running < 0).any():
        i = _checks.first_bad(running < 0)
        raise OracleError(
            f"num_draft {int(nd[i])} exceeds num_computed + num_scheduled = {int(nc[i] + ns[i])} "
            f"for request {i} (running would be {int(running[i])})"
        )
    new_computed = running + na - 1
    aligned = (new_computed // block_size) * block_size
    needs_copy = aligned >= running
    bias = aligned - running
    src_col = si.copy()
    dst_col = aligned // block_size - 1
    same = needs_copy & (src_col == dst_col)
    self_copy_skip = same & (bias == 0)
    do_copy = needs_copy & ~self_copy_skip
    accepted_out = np.where(same, 1, na).astype(np.int32)
    return AlignDecision(
        running=running, new_computed=new_computed, aligned=aligned, needs_copy=needs_copy,
        bias=bias, src_col=src_col, dst_col=dst_col, accepted_out=accepted_out,
        self_copy_skip=self_copy_skip, do_copy=do_copy,
    )


def expect_postprocess(snapshot, pools, block_tables, num_computed, num_scheduled, num_draft,
                       num_accepted, state_idx, block_size) -> tuple[np.ndarray, np.ndarray]:
    """(expected arena, expected accepted counts int32) after the postprocess.

    Every state of every ``do_copy`` request is copied with its (src_col,
    dst_col, bias) from the snapshot, with the same well-posedness check as
    :func:`expect_state_copies`.
    """
    snapshot = _checks.arena("snapshot", snapshot)
    d = decide(num_computed, num_scheduled, num_draft, num_accepted, state_idx, block_size)
    bt = checked_block_tables(block_tables, len(d))
    pools = checked_pools(pools, snapshot.size, bt.shape[0])
    requests = np.flatnonzero(d.do_copy).tolist()
    out = run_state_copies(snapshot, pools, bt, requests, d.src_col, d.dst_col, d.bias)
    return out, d.accepted_out

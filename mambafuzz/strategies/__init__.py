"""Hypothesis strategies that draw mambafuzz Cases (they know cases, not kernels).

The public ones, for your own ``@given`` tests (run each case with
``mambafuzz.judge.engine.run_case(fn, case, device)``): ``batch_copies``,
``state_copies``, ``postprocesses``, ``slot_copies`` and ``slot_forks``; their
options are the contracts' options.  Any contract's strategy, a user's own
included: ``mambafuzz.contracts.strategy(name, profile, **options)`` (this
package sits below the contracts, which declare their strategies from it).
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.slots import check_chains
from mambafuzz.cases.state_copy import parse_options
from mambafuzz.errors import UsageError

from .batch import batch_copy_cases, copy_rows, layout_rows
from .pools import align_requests, block_tables, pool_shapes, postprocess_cases, state_copy_cases
from .perturb import perturbs
from .profiles import CPU, GPU, GPU_AMP, PROFILES, Profile, resolve
from .slots import pair_graph, slot_cases

__all__ = ["CPU", "GPU", "GPU_AMP", "PROFILES", "Profile", "align_requests", "batch_copy_cases", "block_tables",
           "copy_rows", "layout_rows", "perturbs", "pool_shapes", "postprocess_cases",
           "state_copy_cases", "batch_copies", "state_copies", "postprocesses"]


def batch_copies(profile: Profile | str = CPU, *, overlap: str = "full") -> st.SearchStrategy:
    """``batch_memcpy`` cases (BatchCopyCase); `overlap` 'left' draws no dst > src overlap."""
    if overlap not in ("full", "left"):
        raise UsageError(f"batch_memcpy option overlap must be one of full, left, got {overlap!r}")
    return batch_copy_cases(resolve(profile), overlap=overlap)


def state_copies(profile: Profile | str = CPU, *, layout: str = "both", tiles="drawn",
                 skip_equal_cols: bool = False) -> st.SearchStrategy:
    """``state_copy`` cases (StateCopyCase): conv `layout` sd | ds | both; `tiles` 'drawn' or a fixed
    count; `skip_equal_cols` for a kernel that skips requests with src_col == dst_col."""
    layout, fixed, skip = parse_options(layout, tiles, skip_equal_cols)
    return state_copy_cases(resolve(profile), layout=layout, tiles=fixed, skip_equal_cols=skip)


def postprocesses(profile: Profile | str = CPU) -> st.SearchStrategy:
    """``postprocess`` cases (PostprocessCase): the align-mode decision and its copies."""
    return postprocess_cases(resolve(profile))


# index-based slot pools (docs/contracts.md#slot-buffers)
__all__ += ["pair_graph", "slot_cases", "slot_copies", "slot_forks"]


def slot_copies(profile: Profile | str = CPU, *, chains: str = "allowed") -> st.SearchStrategy:
    """``slot_copy`` cases (SlotCopyCase); `chains` 'forbidden' draws no slot that is both a destination
    and a source (no chains, swaps, cycles or self-copies)."""
    return slot_cases(resolve(profile), chains=check_chains("slot_copy", chains))


def slot_forks(profile: Profile | str = CPU, *, chains: str = "allowed") -> st.SearchStrategy:
    """``slot_fork`` cases (SlotForkCase); `chains` as for slot_copies."""
    return slot_cases(resolve(profile), forked=True, chains=check_chains("slot_fork", chains))

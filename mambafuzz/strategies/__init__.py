"""Hypothesis strategies that draw mambafuzz Cases (they know cases, not kernels).

The public ones, for your own ``@given`` tests (run each case with
``mambafuzz.judge.engine.run_case(fn, case, device)``): ``batch_copies``,
``state_copies`` and ``postprocesses``; their options are the contracts' options.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz import contracts

from .batch import batch_copy_cases, copy_rows, layout_rows
from .pools import align_requests, block_tables, pool_shapes, postprocess_cases, state_copy_cases
from .perturb import perturbs
from .profiles import CPU, GPU, GPU_AMP, PROFILES, Profile
from .slots import pair_graph, slot_cases

__all__ = ["CPU", "GPU", "GPU_AMP", "PROFILES", "Profile", "align_requests", "batch_copy_cases", "block_tables",
           "copy_rows", "for_contract", "layout_rows", "perturbs", "pool_shapes", "postprocess_cases",
           "state_copy_cases", "batch_copies", "state_copies", "postprocesses"]


def _profile(profile) -> Profile:
    return PROFILES[profile] if isinstance(profile, str) else profile


def batch_copies(profile: Profile | str = CPU, *, overlap: str = "full") -> st.SearchStrategy:
    """``batch_memcpy`` cases (BatchCopyCase); `overlap` 'left' draws no dst > src overlap."""
    return for_contract("batch_memcpy", profile=_profile(profile), overlap=overlap)


def state_copies(profile: Profile | str = CPU, *, layout: str = "both", tiles="drawn",
                 skip_equal_cols: bool = False) -> st.SearchStrategy:
    """``state_copy`` cases (StateCopyCase): conv `layout` sd | ds | both; `tiles` 'drawn' or a fixed
    count; `skip_equal_cols` for a kernel that skips requests with src_col == dst_col."""
    return for_contract("state_copy", profile=_profile(profile), layout=layout, tiles=tiles,
                        skip_equal_cols=skip_equal_cols)


def postprocesses(profile: Profile | str = CPU) -> st.SearchStrategy:
    """``postprocess`` cases (PostprocessCase): the align-mode decision and its copies."""
    return for_contract("postprocess", profile=_profile(profile))


def for_contract(contract: str, *, profile: Profile = CPU, **options) -> st.SearchStrategy:
    """The case strategy of a contract (``mambafuzz.contracts``), with its options (overlap='left', ...)."""
    return contracts.get(contract).strategy(profile, **options)


# index-based slot pools (docs/contracts.md#slot-buffers)
__all__ += ["pair_graph", "slot_cases", "slot_copies", "slot_forks"]


def slot_copies(profile: Profile | str = CPU, *, chains: str = "allowed") -> st.SearchStrategy:
    """``slot_copy`` cases (SlotCopyCase); `chains` 'forbidden' draws no slot that is both a destination
    and a source (no chains, swaps, cycles or self-copies)."""
    return for_contract("slot_copy", profile=PROFILES[profile] if isinstance(profile, str) else profile, chains=chains)


def slot_forks(profile: Profile | str = CPU, *, chains: str = "allowed") -> st.SearchStrategy:
    """``slot_fork`` cases (SlotForkCase); `chains` as for slot_copies."""
    return for_contract("slot_fork", profile=PROFILES[profile] if isinstance(profile, str) else profile, chains=chains)

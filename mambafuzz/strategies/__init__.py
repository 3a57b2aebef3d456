"""Hypothesis strategies that draw mambafuzz Cases (they know cases, not kernels)."""
from __future__ import annotations

from hypothesis import strategies as st

from .batch import batch_copy_cases, copy_rows, layout_rows
from .pools import align_requests, block_tables, pool_shapes, postprocess_cases, state_copy_cases
from .perturb import perturbs
from .profiles import CPU, GPU, GPU_AMP, PROFILES, Profile

__all__ = ["CPU", "GPU", "GPU_AMP", "PROFILES", "Profile", "align_requests", "batch_copy_cases", "block_tables",
           "copy_rows", "for_contract", "layout_rows", "perturbs", "pool_shapes", "postprocess_cases",
           "state_copy_cases"]


def for_contract(contract: str, *, profile: Profile = CPU, **options) -> st.SearchStrategy:
    """The case strategy of a contract (``mambafuzz.contracts``), with its options (overlap='left', ...)."""
    from mambafuzz import contracts
    return contracts.get(contract).strategy(profile, **options)

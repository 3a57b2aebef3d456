"""The contracts: one module each, listed here once.

Adding a contract is one new module (its case type and a ``Contract``
instance named ``CONTRACT``) and one line below.
"""
from __future__ import annotations

from mambafuzz.errors import UsageError

from . import batch_memcpy, postprocess, state_copy
from . import slot_copy, slot_fork  # index-based slot pools (SPEC 2.6)
from .base import Argument, CliOption, Contract, Image, Prepared
from .batch_memcpy import BatchCopyCase
from .postprocess import PostprocessCase
from .state_copy import StateCopyCase

CONTRACTS: dict[str, Contract] = {m.CONTRACT.name: m.CONTRACT for m in (batch_memcpy, state_copy, postprocess,
                                                                            slot_copy, slot_fork)}
NAMES = tuple(CONTRACTS)

__all__ = ["CONTRACTS", "NAMES", "Argument", "BatchCopyCase", "CliOption", "Contract", "Image", "PostprocessCase",
           "Prepared", "StateCopyCase", "get", "of"]


def get(name: str) -> Contract:
    """The contract called `name`; UsageError (one line) naming the known ones otherwise."""
    try:
        return CONTRACTS[name]
    except (KeyError, TypeError):
        raise UsageError(f"unknown contract {name!r} (known: {', '.join(NAMES)})") from None


def of(case) -> Contract:
    """The contract a case belongs to."""
    return CONTRACTS[case.contract]

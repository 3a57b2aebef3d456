"""What a target function is called with, per contract, checked before fuzzing.

A user's function that does not fit its contract must be a usage error (exit
2, naming the expected signature), never a finding against the kernel.  The
contract's arguments are passed positionally (by name to a function that
takes only ``**kwargs``), its options by keyword; ``arena=`` only to a
function that accepts it.
"""
from __future__ import annotations

import inspect
from functools import lru_cache

from mambafuzz.errors import UsageError

@lru_cache(maxsize=256)
def _signature(fn) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: assume it takes what it is given
        return None


def accepts(fn, keyword: str) -> bool:
    """Whether `fn` can be called with ``keyword=`` (named, or a ``**kwargs``)."""
    sig = _signature(fn)
    if sig is None:
        return True
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            return True
        if p.name == keyword and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            return True
    return False


def by_position(fn, count: int) -> bool:
    """Whether `fn` takes the contract's `count` arguments positionally (else by name, into **kwargs)."""
    sig = _signature(fn)
    if sig is None:
        return True
    kinds = [p.kind for p in sig.parameters.values()]
    positional = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)
    return positional >= count or inspect.Parameter.VAR_POSITIONAL in kinds


def check(fn, contract: str, name: str) -> None:
    """UsageError (one line) when `fn` cannot be called the way `contract` calls it."""
    sig = _signature(fn)
    if sig is None:
        return
    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

    spec = contracts.get(contract)
    positional, options = spec.positional, spec.option_names
    extra = {"arena": "arena"} if accepts(fn, "arena") else {}
    try:
        if by_position(fn, len(positional)):
            sig.bind(*positional, **{o: o for o in options}, **extra)
        else:
            sig.bind(**{a: a for a in positional}, **{o: o for o in options}, **extra)
    except TypeError as exc:
        raise UsageError(f"target {name}: {getattr(fn, '__name__', 'fn')}{sig} does not fit the {contract} contract "
                         f"({exc}); expected {spec.signature_text()}") from None

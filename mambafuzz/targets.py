"""Resolve target specs from the command line: registry names, globs, user functions."""
from __future__ import annotations

import fnmatch
import importlib

from .cases import CONTRACTS
from .errors import UsageError


def _registry():
    from kernels import registry  # imported late: the device must be chosen first
    return registry


def user_target(spec: str, contract: str | None, overlap: str = "full"):
    """`module:function` with `contract`: a user's own kernel behind a documented adapter."""
    registry = _registry()
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"target {spec!r}: a user target is written module:function")
    if contract not in CONTRACTS:
        raise UsageError(f"target {spec!r} needs --contract ({', '.join(CONTRACTS)})")
    if overlap not in ("left", "full"):
        raise UsageError(f"--overlap must be 'left' or 'full', got {overlap!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix, in one line
        raise UsageError(f"target {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"target {spec!r}: module {module_name!r} has no callable {attr!r}")
    return registry.Target(name=spec, contract=contract, kind="user", overlap=overlap,
                           description=(fn.__doc__ or "user kernel").strip().splitlines()[0], fn=fn)


def resolve(specs: list[str], *, contract: str | None = None, overlap: str = "full") -> list:
    """Targets named by `specs` (exact names, globs, or module:function), in order, no repeats."""
    registry = _registry()
    names = list(registry.TARGETS)
    chosen: dict[str, object] = {}
    for spec in specs:
        if ":" in spec:
            target = user_target(spec, contract, overlap)
            chosen[target.name] = target
            continue
        if any(ch in spec for ch in "*?["):
            matches = fnmatch.filter(names, spec)
            if not matches:
                raise UsageError(f"target pattern {spec!r} matches nothing (known: {', '.join(names)})")
            for name in matches:
                chosen[name] = registry.TARGETS[name]
            continue
        try:
            chosen[spec] = registry.get(spec)
        except KeyError as exc:
            raise UsageError(str(exc.args[0]) if exc.args else f"unknown target {spec!r}") from None
    return list(chosen.values())

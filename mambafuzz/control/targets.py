"""Resolve target specs from the command line: registry names, globs, user functions.

A user target is ``module:function``.  Its module is imported from the
current directory too (the ``mambafuzz`` console script does not put it on
``sys.path`` the way ``python -m`` does), and the folder it was imported
from is remembered (``user_info``) so that a crash file can record it and
replay can import the module again from anywhere.
"""
from __future__ import annotations

import fnmatch
import importlib
import os
import sys

from mambafuzz import contracts
from mambafuzz.errors import UsageError


def _registry():
    from mambafuzz.kernels import registry  # deferred: the device must be chosen first
    return registry


_USER_INFO: dict[str, dict] = {}  # spec -> {"overlap", "target_path"} of user targets resolved here


def load_user_fn(spec: str, target_path: str | None = None):
    """Import `module:function`; `target_path` (a crash file's record) goes first on sys.path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"target {spec!r}: a user target is written module:function")
    if target_path and os.path.isdir(target_path) and target_path not in sys.path:
        sys.path.insert(0, target_path)
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)  # last: the user's folder never shadows an installed package
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix, in one line
        raise UsageError(f"target {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"target {spec!r}: module {module_name!r} has no callable {attr!r}")
    return fn, module


def user_target(spec: str, contract: str | None, overlap: str = "full", target_path: str | None = None):
    """`module:function` with `contract`: a user's own kernel behind a documented adapter."""
    registry = _registry()
    if not contract:
        raise UsageError(f"target {spec!r} needs --contract ({', '.join(contracts.names())})")
    if overlap not in ("left", "full"):
        raise UsageError(f"--overlap must be 'left' or 'full', got {overlap!r}")
    fn, module = load_user_fn(spec, target_path)  # first: the module may register its own contract
    contracts.get(contract)
    _USER_INFO[spec] = {"overlap": overlap, "target_path": contracts.import_root(module)}
    return registry.Target(name=spec, contract=contract, kind="user", overlap=overlap,
                           description=((fn.__doc__ or "").strip() or "user kernel").splitlines()[0], fn=fn)


def user_info(name: str) -> dict | None:
    """What a crash file records about target `name`: overlap and, for a user target, its import folder."""
    if name in _USER_INFO:
        return dict(_USER_INFO[name])
    registry = sys.modules.get("mambafuzz.kernels.registry")
    target = getattr(registry, "TARGETS", {}).get(name) if registry is not None else None
    return {"overlap": target.overlap} if target is not None else None


def resolve_one(name: str, *, contract: str, overlap: str = "full", target_path: str | None = None):
    """One exact target (a registry name or module:function, never a glob), as a crash file names it."""
    if ":" in name:
        return user_target(name, contract, overlap, target_path)
    try:
        return _registry().get(name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0]) if exc.args else f"unknown target {name!r}") from None


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

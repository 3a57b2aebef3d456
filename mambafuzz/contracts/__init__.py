"""The registry: every contract mambafuzz can fuzz, built in or a user's own.

A contract is a ``Contract`` instance (``contracts/base.py``) named ``CONTRACT``
in its module.  The built-in ones are listed in ``BUILTIN``, one line each, by
module name; a user's come in through the same seam, either
``mambafuzz.contracts.register(CONTRACT)`` in their own module (run when the
module is imported: the target's module, a test file) or an entry point in the
``mambafuzz.contracts`` group naming a module or a ``Contract``.  Modules are
imported on the first lookup, so importing this package imports no contract.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any

from mambafuzz.errors import CaseError, UsageError

from .base import Argument, CliOption, Contract, Image, Output, Prepared

# One line per built-in contract: the module that defines CONTRACT.
BUILTIN = (
    "mambafuzz.contracts.batch_memcpy",
    "mambafuzz.contracts.state_copy",
    "mambafuzz.contracts.postprocess",
    "mambafuzz.contracts.slot_copy",
    "mambafuzz.contracts.slot_fork",
    "mambafuzz.contracts.conv_update",
    "mambafuzz.contracts.state_scatter",
    "mambafuzz.contracts.ssm_update",
    "mambafuzz.contracts.delta_update",
    "mambafuzz.contracts.conv_prefill",
    "mambafuzz.contracts.ssm_prefill",
    "mambafuzz.contracts.delta_prefill",
)
ENTRY_POINTS = "mambafuzz.contracts"

_CONTRACTS: dict[str, Contract] = {}
_LOADED = False

__all__ = ["BUILTIN", "ENTRY_POINTS", "Argument", "CliOption", "Contract", "Image", "Output", "Prepared",
           "SharedOption", "case_from_json", "get", "import_origin", "import_root", "names", "of", "options",
           "register", "registered", "strategy"]


def register(contract: Contract) -> Contract:
    """Add `contract` to the registry (again with the same instance: no-op); UsageError for a bad one."""
    if not isinstance(contract, Contract):
        raise UsageError(f"register() takes a mambafuzz.contracts.Contract instance, got {type(contract).__name__}")
    name = contract.name
    if not isinstance(name, str) or not name.isidentifier():
        raise UsageError(f"contract {type(contract).__name__}: name must be an identifier, got {name!r}")
    case_type = contract.case_type
    if getattr(case_type, "contract", None) != name:
        raise UsageError(f"contract {name!r}: its case type {getattr(case_type, '__name__', case_type)!r} must say "
                         f"contract = {name!r} (a ClassVar)")
    fields = [f.name for f in dataclasses.fields(case_type)] if dataclasses.is_dataclass(case_type) else []
    checks = {k for klass in case_type.__mro__ for k in klass.__dict__.get("FIELD_CHECKS", {})}
    unchecked = [f for f in fields if f not in checks]
    if unchecked:
        raise UsageError(f"contract {name!r}: case field(s) {', '.join(unchecked)} have no FIELD_CHECKS entry "
                         "(a crash file's hand-edited value must fail in one line)")
    module = type(contract).__module__
    if contract.origin is None and not module.startswith("mambafuzz.") and module in sys.modules:
        contract.origin, contract.origin_path = module, import_root(sys.modules[module])
    known = _CONTRACTS.get(name)
    if known is not None and known is not contract and type(known) is not type(contract):
        raise UsageError(f"contract {name!r} is registered twice: by {known.origin or 'mambafuzz'} and by "
                         f"{contract.origin or type(contract).__module__}")
    _CONTRACTS[name] = contract
    return contract


def import_root(module) -> str | None:
    """The folder to put on sys.path so that `module` imports again (None: namespace or built-in)."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    up = module.__name__.count(".") + (1 if Path(file).name == "__init__.py" else 0)
    root = Path(file).resolve().parent
    for _ in range(up):
        root = root.parent
    return str(root)


def _load() -> None:
    """Import the built-in contracts and the installed entry points, once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in BUILTIN:
        register(importlib.import_module(module).CONTRACT)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin is named in one line
            raise UsageError(f"contract entry point {ep.name!r} ({ep.value}): cannot load: "
                             f"{type(exc).__name__}: {exc}") from None
        obj = getattr(obj, "CONTRACT", obj)
        if isinstance(obj, Contract) and not obj.origin:
            obj.origin = ep.value.partition(":")[0]
        register(obj)


def registered() -> dict[str, Contract]:
    """Every contract known now, by name (built-in first)."""
    _load()
    return dict(_CONTRACTS)


@dataclasses.dataclass(frozen=True)
class SharedOption:
    """One contract option as a user sets it (a ``--flag``, a keyword of ``check``), with every contract
    that declares it: what the CLI, the pytest plugin and ``list`` show."""

    name: str
    contracts: tuple[str, ...]       # the contracts that declare it, in registry order
    choices: tuple                   # every contract's choices, in order, each once
    default: Any                     # the default, or None where the contracts' defaults differ
    helps: tuple[tuple[str, str], ...]  # (contract, help) where a contract says something else than the first

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def text(self) -> str:
        """The help: which contracts it applies to, then what it means (per contract where they differ)."""
        first = ", ".join(c for c in self.contracts if c not in dict(self.helps[1:]))
        return "; ".join([f"{first}: {self.helps[0][1]}"] + [f"{c}: {h}" for c, h in self.helps[1:]])


def options(built_in: bool = False) -> tuple[SharedOption, ...]:
    """Every contract option of every registered contract (`built_in`: of mambafuzz's own), one per name,
    in the order first declared."""
    found: dict[str, list] = {}
    for contract in registered().values():
        if built_in and contract.origin is not None:
            continue
        for option in contract.cli_options:
            found.setdefault(option.name, []).append((contract.name, option))
    out = []
    for name, declared in found.items():
        choices = declared[0][1].choices  # as declared (a choices object may accept more than it lists)
        if any(tuple(o.choices) != tuple(choices) for _, o in declared):
            choices = tuple(dict.fromkeys(c for _, o in declared for c in o.choices))
        defaults = {str(o.default) for _, o in declared}
        helps = [declared[0][0:1] + (declared[0][1].help,)]
        helps += [(c, o.help) for c, o in declared[1:] if o.help != declared[0][1].help]
        out.append(SharedOption(name, tuple(c for c, _ in declared), choices,
                                declared[0][1].default if len(defaults) == 1 else None, tuple(helps)))
    return tuple(out)


def names() -> tuple[str, ...]:
    return tuple(registered())


def get(name: str) -> Contract:
    """The contract called `name`; UsageError (one line) naming the known ones otherwise."""
    _load()
    try:
        return _CONTRACTS[name]
    except (KeyError, TypeError):
        raise UsageError(f"unknown contract {name!r} (known: {', '.join(_CONTRACTS)})") from None


def strategy(name: str, profile: Any = "cpu", **options):
    """The case strategy of contract `name` with its options (overlap='left', chains='forbidden', ...);
    `profile` is a ``mambafuzz.strategies`` Profile or its name ('cpu', 'gpu', 'gpu-amp', ...)."""
    from mambafuzz.strategies.profiles import resolve  # deferred: Hypothesis loads with the first strategy, not with the registry
    return get(name).strategy(resolve(profile), **options)


def of(case) -> Contract:
    """The contract a case belongs to."""
    return get(case.contract)


def import_origin(origin: dict | None) -> None:
    """Import the module that registers a user contract, as a crash file or a worker records it
    (``Contract.origin_record``): its folder first on sys.path.  UsageError in one line if it fails."""
    if not isinstance(origin, dict) or not isinstance(origin.get("module"), str):
        return
    path = origin.get("path")
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)
    try:
        importlib.import_module(origin["module"])
    except Exception as exc:  # noqa: BLE001 - the user's module: one line
        raise UsageError(f"cannot import {origin['module']!r}, which registers a contract: "
                         f"{type(exc).__name__}: {exc}") from None


def case_from_json(body: dict[str, Any]):
    """Any contract's case from its JSON; CaseError naming what is wrong.

    Every field is type-checked (ints are ints, never bools or floats; sizes
    positive, offsets non-negative) so that a hand-edited or corrupted case
    fails in one line before it reaches numpy or a kernel; geometry (overlaps,
    pools past the arena) is the oracle's to judge.
    """
    if not isinstance(body, dict):
        raise CaseError(f"a case must be a JSON object, got {type(body).__name__}")
    contract = body.get("contract")
    known = registered().get(contract) if isinstance(contract, str) else None
    if known is None:
        raise CaseError(f"unknown case contract {contract!r} (known: {', '.join(_CONTRACTS)})")
    return known.case_type.from_json(body)

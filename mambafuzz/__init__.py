"""mambafuzz: a property-based correctness fuzzer and numpy oracle for kernels that move recurrent state.

``import mambafuzz`` imports neither torch nor triton: Triton fixes compiled or
interpreted when a kernel is defined, so the device must be chosen first
(``mambafuzz.check`` does it).  The public names load on first use:

- ``check(fn, contract, ...)`` (``mambafuzz.api``): fuzz your function from your tests;
- ``Failure``, ``Inconclusive``, ``UsageError``, ``MambafuzzError``, ``Rejected`` (``mambafuzz.errors``);
- ``reject(why)``: a target declines an input it does not support (counted, never a finding);
- ``strategies``: ``batch_copies``, ``state_copies``, ``postprocesses`` for your own ``@given`` tests;
- ``adapters``: views of the bytes behind a pointer, the meta table as per-column arrays;
- ``engine``: ``run_case(fn, case, device)`` judges one case.
"""
from __future__ import annotations

import importlib

__all__ = ["Failure", "Inconclusive", "MambafuzzError", "Rejected", "UsageError", "adapters", "check", "engine",
           "reject", "strategies"]

_ERRORS = ("Failure", "Inconclusive", "MambafuzzError", "Rejected", "UsageError")
# public modules by the name they load under (engine and device live by job, in judge/ and control/)
_MODULES = {"adapters": "adapters", "api": "api", "engine": "judge.engine", "strategies": "strategies",
            "contracts": "contracts", "findings": "findings", "device": "control.device", "errors": "errors"}


def __getattr__(name: str):
    if name in _ERRORS:
        return getattr(importlib.import_module("mambafuzz.errors"), name)
    if name in ("check", "reject"):
        return getattr(importlib.import_module("mambafuzz.api"), name)
    if name in _MODULES:
        return importlib.import_module(f"mambafuzz.{_MODULES[name]}")
    raise AttributeError(f"module 'mambafuzz' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

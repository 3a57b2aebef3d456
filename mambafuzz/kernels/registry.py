"""Target registry: everything the fuzzer can run on a case.

A :class:`Target` wraps a plain function with one of the contract signatures
of ARCHITECTURE.md.  Names: ``triton.<contract>`` (the project's kernels),
``torch.<contract>`` (the torch path) and
``zoo.<ID>`` (one per bug-zoo row).  User adapters register with
:func:`register` (kind ``'user'``).

``amplifiable`` targets (those of a kernel module that declares ``AMPLIFIABLE``: the
copy kernels and their zoo variants) take ``perturb=`` (a ``kernels.perturb.Perturb``): chosen warps sleep at a
chosen place so that GPU races show (see ``kernels.copy.warp_delay``).  Their
functions also carry ``fn.amplifiable = True``, which is what the engine reads
(it is handed the function, not the Target).

Importing this module imports torch and triton (the kernels) but nothing from
``mambafuzz``.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable

from .zoo import ZooEntry

KINDS = ("correct", "torch", "zoo", "user")
OVERLAPS = ("full", "left")


@dataclass(frozen=True)
class Target:
    name: str
    contract: str        # a contract's name (mambafuzz.contracts)
    kind: str            # 'correct' | 'torch' | 'zoo' | 'user'
    overlap: str         # 'full' (true memmove) | 'left' (dst < src only)
    description: str
    fn: Callable
    bug: str | None = None      # zoo kind, in the words of docs/contracts.md#zoo
    zoo_id: str | None = None
    devices: tuple = ("cpu", "cuda")
    amplifiable: bool = False   # fn takes perturb= (kernels.perturb.Perturb)
    options: dict = field(default_factory=dict)  # contract options the target is written for (a zoo row's)

    def __post_init__(self):
        if not isinstance(self.contract, str) or not self.contract:  # the engine knows the contracts
            raise ValueError(f"target {self.name!r}: contract must be a contract's name, "
                             f"got {self.contract!r}")
        if self.kind not in KINDS:
            raise ValueError(f"target {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.overlap not in OVERLAPS:
            raise ValueError(f"target {self.name!r}: overlap must be one of {OVERLAPS}, "
                             f"got {self.overlap!r}")
        if not callable(self.fn):
            raise TypeError(f"target {self.name!r}: fn is not callable")
        if not isinstance(self.amplifiable, bool):
            raise TypeError(f"target {self.name!r}: amplifiable must be a bool")

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


class UnknownTarget(KeyError):
    """``get`` was asked for a name that is not registered.

    ``str()`` (and ``args[0]``) is one line naming the target and listing the
    close matches, or every known name when nothing is close.
    """

    def __init__(self, name: str, known):
        self.name = name
        self.known = sorted(known)
        close = difflib.get_close_matches(str(name), self.known, n=3, cutoff=0.5)
        if close:
            msg = f"unknown target {name!r}; did you mean: {', '.join(close)}?"
        else:
            msg = f"unknown target {name!r}; known targets: {', '.join(self.known)}"
        self.message = msg
        super().__init__(msg)

    def __str__(self) -> str:
        return self.message


TARGETS: dict[str, Target] = {}


def register(t: Target, *, replace: bool = False) -> Target:
    if not isinstance(t, Target):
        raise TypeError(f"register() takes a Target, got {type(t).__name__}")
    if t.name in TARGETS and not replace:
        raise ValueError(f"target {t.name!r} is already registered")
    TARGETS[t.name] = t
    return t


def get(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTarget(name, TARGETS) from None


def all_targets() -> list[Target]:
    return list(TARGETS.values())


def correct_targets() -> list[Target]:
    return [t for t in TARGETS.values() if t.kind == "correct"]


def zoo_targets() -> list[Target]:
    return [t for t in TARGETS.values() if t.kind == "zoo"]


# ---------------------------------------------------------------- declared targets
# A kernel module of this package declares its contract's targets: CONTRACT (the contract's name), DESCRIPTION,
# contract_fn(variant) (the contract's signature over its kernel with one zoo variant; None: the correct one),
# torch_fn (the torch path; None: none) and optionally TORCH_DESCRIPTION (default: torch_fn's first doc line),
# AMPLIFIABLE (its functions take perturb=: warp delays built into the kernel; default False: on a GPU
# mambafuzz.instrument adds them as to a user's kernel) and ZOO (its rows).  A module that defines FAMILY (member
# modules) lists its members together: every member's Triton target, then every torch path, then the family's ZOO.
# Families come first, then the other declaring modules, each in module-name order: adding a contract's kernels
# touches no line here.

def _named(fn, name, doc):
    fn.__qualname__ = fn.__name__ = name.replace(".", "_").replace("-", "_")
    fn.__doc__ = doc
    fn.amplifiable = True  # every amplifiable fn takes perturb=
    return fn


def _package_modules():
    found = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name == "registry" or info.ispkg:
            continue
        found.append(importlib.import_module(f"{__package__}.{info.name}"))
    return found


def _groups():
    """(members, zoo rows) per declaring group: each family, then each other declaring module."""
    modules = _package_modules()
    families = [m for m in modules if isinstance(getattr(m, "FAMILY", None), tuple)]
    in_family = {id(member) for f in families for member in f.FAMILY}
    singles = [m for m in modules if isinstance(getattr(m, "CONTRACT", None), str) and id(m) not in in_family]
    groups = [(f.FAMILY, f.ZOO, f.__name__) for f in families] + [((m,), m.ZOO, m.__name__) for m in singles]
    for members, rows, where in groups:
        contracts = {m.CONTRACT for m in members}
        for e in rows:
            if e.contract not in contracts:
                raise ValueError(f"{where}: zoo row {e.id} is for {e.contract!r}, the module's contract is "
                                 f"{' or '.join(map(repr, sorted(contracts)))}")
    return tuple(groups)


_GROUPS = _groups()
_BY_CONTRACT = {m.CONTRACT: m for members, _, _ in _GROUPS for m in members}
# the contracts whose targets take no perturb= (the tensor contracts: arena= optional)
DECLARED = tuple(c for c, m in _BY_CONTRACT.items() if not getattr(m, "AMPLIFIABLE", False))
ZOO: tuple[ZooEntry, ...] = tuple(e for _, rows, _ in _GROUPS for e in rows)  # every zoo row
ZOO_BY_ID = {e.id: e for e in ZOO}


def zoo_entry(zoo_id: str) -> ZooEntry:
    try:
        return ZOO_BY_ID[zoo_id]
    except KeyError:
        raise KeyError(f"unknown zoo id {zoo_id!r}; known: {', '.join(ZOO_BY_ID)}") from None


def _target(module, name, kind, description, fn, doc, **extra):
    amplifiable = bool(getattr(module, "AMPLIFIABLE", False))
    if amplifiable:
        _named(fn, name, doc)
    else:
        fn.__doc__ = doc
    return Target(name, module.CONTRACT, kind, "full", description, fn, amplifiable=amplifiable, **extra)


def _register_declared():
    for members, rows, _ in _GROUPS:
        for m in members:
            fn = m.contract_fn(None)
            register(_target(m, f"triton.{m.CONTRACT}", "correct", m.DESCRIPTION, fn, fn.__doc__ or m.DESCRIPTION))
        for m in members:
            if m.torch_fn is not None:
                described = getattr(m, "TORCH_DESCRIPTION", None) or m.torch_fn.__doc__.splitlines()[0]
                register(Target(f"torch.{m.CONTRACT}", m.CONTRACT, "torch", "full", described, m.torch_fn))
        for e in rows:
            m = _BY_CONTRACT[e.contract]
            register(_target(m, f"zoo.{e.id}", "zoo", e.description, m.contract_fn(e.variant),
                             f"zoo {e.id} ({e.kind}): {e.description}. Made by {e.produced_by}.",
                             bug=e.kind, zoo_id=e.id, options=dict(e.options)))


_register_declared()

"""Target registry: everything the fuzzer can run on a case.

A :class:`Target` wraps a plain function with one of the contract signatures
of ARCHITECTURE.md.  Names: ``triton.<contract>`` (the project's kernels),
``torch.<contract>`` (the ``dst.copy_(src.clone())`` path) and
``zoo.<ID>`` (one per bug-zoo row).  User adapters register with
:func:`register` (kind ``'user'``).

``amplifiable`` targets (the project's Triton kernels and their zoo variants)
take ``perturb=`` (a ``kernels.perturb.Perturb``): chosen warps sleep at a
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

from . import batch_memcpy as _bm
from . import postprocess as _pp
from . import slots as _sl
from . import state_copy as _sc
from . import torch_path as _tp
from . import zoo as _zoo
from .zoo import ZooEntry

KINDS = ("correct", "torch", "zoo", "user")
OVERLAPS = ("full", "left")


@dataclass(frozen=True)
class Target:
    name: str
    contract: str        # a contract's name (mambafuzz.contracts), e.g. 'batch_memcpy', 'slot_copy'
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


# ---------------------------------------------------------------- contract fns
# Plain functions with exactly the contract signatures (no variant= exposed),
# plus perturb= (race amplification; None: none).

def _batch_memcpy_fn(variant):
    def batch_memcpy(src_ptrs, dst_ptrs, sizes, *, arena=None, perturb=None):
        return _bm.batch_memcpy(src_ptrs, dst_ptrs, sizes, arena=arena, variant=variant,
                                perturb=perturb)
    return batch_memcpy


def _state_copy_fn(variant):
    def state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles=1, arena=None,
                   perturb=None):
        return _sc.state_copy(meta, block_tables, src_cols, dst_cols, biases,
                              num_tiles=num_tiles, arena=arena, variant=variant, perturb=perturb)
    return state_copy


def _postprocess_fn(variant):
    def postprocess(meta, block_tables, num_computed, num_scheduled, num_draft, num_accepted,
                    state_idx, *, block_size, num_tiles=1, arena=None, perturb=None):
        return _pp.postprocess(meta, block_tables, num_computed, num_scheduled, num_draft,
                               num_accepted, state_idx, block_size=block_size,
                               num_tiles=num_tiles, arena=arena, variant=variant,
                               perturb=perturb)
    return postprocess


def _slot_fn(launcher, variant):
    def slot_fn(meta, src_idx, dst_idx, *, arena=None, perturb=None):
        return launcher(meta, src_idx, dst_idx, arena=arena, variant=variant, perturb=perturb)
    return slot_fn


_FACTORIES = {"batch_memcpy": _batch_memcpy_fn, "state_copy": _state_copy_fn,
              "postprocess": _postprocess_fn,
              "slot_copy": lambda variant: _slot_fn(_sl.slot_copy, variant),
              "slot_fork": lambda variant: _slot_fn(_sl.slot_fork, variant)}


def _named(fn, name, doc):
    fn.__qualname__ = fn.__name__ = name.replace(".", "_").replace("-", "_")
    fn.__doc__ = doc
    fn.amplifiable = True  # every contract fn made here takes perturb=
    return fn


_TRITON_BUILTINS = (
    (_bm.batch_memcpy, "Triton batched memmove: long rows split over programs; a row that overlaps itself "
                       "stays in one, with barriers"),
    (_sc.state_copy, "Triton fused SD/DS/temporal state copy, grid (requests, states, tiles)"),
    (_pp.postprocess,
     "Triton fused align-mode postprocess (decision + state copy + accepted update)"),
    (_sl.slot_copy, "Triton slot copy: gather every source into scratch, then scatter (chain- and swap-safe)"),
    (_sl.slot_fork, "Triton slot fork: gather every parent into scratch, then scatter to the children"),
)


def _register_builtins():
    for launcher, description in _TRITON_BUILTINS:
        contract = launcher.__name__
        name = f"triton.{contract}"
        register(Target(
            name, contract, "correct", "full", description,
            _named(_FACTORIES[contract](None), name, launcher.__doc__),
            amplifiable=True))
    register(Target(
        "torch.batch_memcpy", "batch_memcpy", "torch", "full",
        "torch path: dst.copy_(src.clone()) per copy",
        _tp.batch_memcpy))
    register(Target(
        "torch.state_copy", "state_copy", "torch", "full",
        "torch path: dst.copy_(src.clone()) per state copy (as_strided views)",
        _tp.state_copy))
    register(Target(
        "torch.slot_copy", "slot_copy", "torch", "full",
        "torch path: view[:, dst] = view[:, src] on [L, S, slot bytes] byte views",
        _sl.torch_slot_copy))
    register(Target(
        "torch.slot_fork", "slot_fork", "torch", "full",
        "torch path: view[:, dst[i, n]] = view[:, src[i]] on [L, S, slot bytes] byte views",
        _sl.torch_slot_fork))
    for e in _zoo.ZOO:
        name = f"zoo.{e.id}"
        fn = _named(_FACTORIES[e.contract](e.variant), name,
                    f"zoo {e.id} ({e.kind}): {e.description}. Made by {e.produced_by}.")
        register(Target(name, e.contract, "zoo", "full", e.description, fn,
                        bug=e.kind, zoo_id=e.id, amplifiable=True))


# Kernel modules that declare their targets: CONTRACT (its name), DESCRIPTION, contract_fn(variant), torch_fn
# and ZOO (its rows).  Any module of this package that defines CONTRACT is one: adding a contract's kernels
# touches no line here.  Their kernels take no perturb= (on a GPU, mambafuzz.instrument adds warp delays as
# to a user's).
def _declaring_modules():
    found = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name == "registry" or info.ispkg:
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        if isinstance(getattr(module, "CONTRACT", None), str):
            found.append(module)
    return tuple(found)


_DECLARING = _declaring_modules()
DECLARED = tuple(m.CONTRACT for m in _DECLARING)  # their contracts: targets not amplifiable, arena= optional
ZOO: tuple[ZooEntry, ...] = _zoo.ZOO + tuple(e for m in _DECLARING for e in m.ZOO)  # every zoo row
ZOO_BY_ID = {e.id: e for e in ZOO}


def zoo_entry(zoo_id: str) -> ZooEntry:
    try:
        return ZOO_BY_ID[zoo_id]
    except KeyError:
        raise KeyError(f"unknown zoo id {zoo_id!r}; known: {', '.join(ZOO_BY_ID)}") from None


def _register_declared():
    for module in _DECLARING:
        contract = module.CONTRACT
        fn = module.contract_fn(None)
        fn.__doc__ = module.DESCRIPTION
        register(Target(f"triton.{contract}", contract, "correct", "full", module.DESCRIPTION, fn))
        register(Target(f"torch.{contract}", contract, "torch", "full", module.torch_fn.__doc__.splitlines()[0],
                        module.torch_fn))
        for e in module.ZOO:
            if e.contract != contract:
                raise ValueError(f"{module.__name__}: zoo row {e.id} is for {e.contract!r}, the module's contract "
                                 f"is {contract!r}")
            fn = module.contract_fn(e.variant)
            fn.__doc__ = f"zoo {e.id} ({e.kind}): {e.description}. Made by {e.produced_by}."
            register(Target(f"zoo.{e.id}", contract, "zoo", "full", e.description, fn, bug=e.kind,
                            zoo_id=e.id, options=dict(e.options)))


_register_builtins()
_register_declared()

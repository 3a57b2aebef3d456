"""Intercepting a target's Triton launches for the duration of one call.

``perturbed_launches(perturb)`` patches Triton's launch entry point
(``JITFunction.run``, which ``kernel[grid](...)``, ``Autotuner`` and
``Heuristics`` all go through; in the interpreter ``InterpretedFunction.run``,
or its ``__getitem__`` on Triton 3.5) and restores it on the way out, however
the call ends.  Inside, every launch of a kernel that is not itself a variant
goes to the kernel's instrumented variant with the perturbation's delay
constexprs, seed and warp count.  A kernel that cannot be instrumented, or
whose variant does not compile, runs as written (at the perturbation's warp
count where that compiles) and the record says why.

Compiled, each launch first asks the variant to compile (``warmup=True``: a
cache hit after the first time) so that a failure of *our* variant is told
from a failure of the launch itself, which is the kernel's and propagates.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from mambafuzz.kernels.perturb import Perturb

from .transform import SEED, NotInstrumentable
from .variant import PREFIX, Variant, kernel_name, variant_of

# kernels whose variant failed to compile in this process: id -> (kernel, reason)
_BROKEN: dict[int, tuple[object, str]] = {}


@dataclass
class KernelNote:
    """What happened to one kernel's launches inside the context."""

    name: str
    delays: bool = False            # launched as the instrumented variant
    load_sites: int = 0
    store_sites: int = 0
    helpers: tuple[str, ...] = ()   # helper functions instrumented with it
    skipped_helpers: dict[str, str] = field(default_factory=dict)
    reason: str | None = None       # why it ran without warp delays (None: it had them, or none were asked)
    num_warps: int | None = None    # the warp count it was launched with (None: as the target wrote it)
    launches: int = 0

    def describe(self) -> str:
        warps = f"{self.num_warps} warps" if self.num_warps else "its own warp count"
        if self.delays:
            extra = f"; helpers {', '.join(self.helpers)}" if self.helpers else ""
            left = ("; left as written: " + "; ".join(f"{k} ({v})" for k, v in self.skipped_helpers.items())
                    if self.skipped_helpers else "")
            return (f"{self.name}: warp delays at {self.load_sites} load and {self.store_sites} store sites, "
                    f"{warps}{extra}{left}")
        if self.reason:
            return f"{self.name}: no warp delays ({self.reason}), {warps}"
        return f"{self.name}: {warps}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "delays": self.delays, "load_sites": self.load_sites,
                "store_sites": self.store_sites, "helpers": list(self.helpers),
                "skipped_helpers": dict(self.skipped_helpers), "reason": self.reason,
                "num_warps": self.num_warps, "launches": self.launches}


@dataclass
class LaunchRecord:
    """The kernels a target launched under one perturbation, by name."""

    perturb: Perturb
    kernels: dict[str, KernelNote] = field(default_factory=dict)
    _ids: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def instrumented(self) -> list[str]:
        return [n for n, k in self.kernels.items() if k.delays]

    @property
    def uninstrumented(self) -> dict[str, str]:
        """Kernels that ran without the asked-for warp delays, and why."""
        return {n: k.reason for n, k in self.kernels.items() if k.reason}

    def note(self) -> str:
        """One line for a verdict or report."""
        if not self.kernels:
            return (f"perturbation {self.perturb.describe()}: the target launched no Triton kernel through "
                    f"Triton's launcher, so nothing was perturbed")
        return f"perturbation {self.perturb.describe()}: " + "; ".join(k.describe() for k in self.kernels.values())

    def to_json(self) -> dict[str, Any]:
        return {"perturb": list(self.perturb.to_tuple()), "kernels": [k.to_json() for k in self.kernels.values()]}

    # ------------------------------------------------------------ routing
    def _entry(self, kernel) -> tuple[KernelNote, Variant | None]:
        name = self._ids.get(id(kernel))
        if name is None:
            name = kernel_name(kernel)
            if name in self.kernels:  # another kernel of that name
                name = f"{getattr(getattr(kernel, 'fn', None), '__module__', '?')}.{name}"
            self._ids[id(kernel)] = name
            self.kernels[name] = KernelNote(name)
        note = self.kernels[name]
        if not self.perturb.delays:
            return note, None
        broken = _BROKEN.get(id(kernel))
        if broken is not None and broken[0] is kernel:
            note.reason = broken[1]
            return note, None
        try:
            v = variant_of(kernel)
        except NotInstrumentable as exc:
            note.reason = str(exc)
            return note, None
        note.load_sites, note.store_sites = v.load_sites, v.store_sites
        note.helpers, note.skipped_helpers = v.helpers, dict(v.skipped)
        return note, v

    def _launch(self, kernel, launch: Callable, args: tuple, grid, kwargs: dict, compiled: bool):
        note, v = self._entry(kernel)
        p = self.perturb
        kw = {**kwargs, "num_warps": p.num_warps}
        if v is not None:
            v.refresh()
            # the variant's constexprs are the project kernels' names, prefixed; delay, schedule and seed ride in the word
            vkw = {**kw, **{PREFIX + k: v for k, v in p.constexprs().items()}, SEED: p.word()}
            try:
                if compiled:
                    launch(v.jit, args, grid, True, vkw)
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                reason = f"its instrumented variant did not compile: {type(exc).__name__}: {first}"
                _BROKEN[id(kernel)] = (kernel, reason)
                note.reason, note.delays = reason, False
            else:
                note.delays, note.reason = True, None
                note.num_warps = p.num_warps
                note.launches += 1
                return launch(v.jit, args, grid, False, vkw)
        if compiled:
            try:
                launch(kernel, args, grid, True, kw)
            except Exception:  # not at this warp count (or not at all: then the launch below says so)
                note.num_warps = None
                note.launches += 1
                return launch(kernel, args, grid, False, kwargs)
        note.num_warps = p.num_warps
        note.launches += 1
        return launch(kernel, args, grid, False, kw)


def _patches(record: LaunchRecord) -> list[tuple[type, str, Callable]]:
    """(class, attribute, replacement) for every launch entry point of the installed Triton."""
    from triton.runtime.jit import JITFunction  # deferred: Triton: loaded with the kernels, after the device is chosen

    out = []
    orig_run = JITFunction.__dict__["run"]

    def launch_jit(fn, args, grid, warmup, kwargs):
        return orig_run(fn, *args, grid=grid, warmup=warmup, **kwargs)

    def run(self, *args, grid=None, warmup=False, **kwargs):
        if warmup or getattr(self, PREFIX + "variant", False) or _is_gluon(self):
            return orig_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        return record._launch(self, launch_jit, args, grid, kwargs, compiled=True)

    out.append((JITFunction, "run", run))
    try:
        from triton.runtime.interpreter import InterpretedFunction  # deferred: Triton: loaded with the kernels, after the device is chosen
    except ImportError:  # pragma: no cover
        return out
    if "run" in InterpretedFunction.__dict__:  # Triton 3.6+: kernel[grid] and Autotuner call run
        orig_irun = InterpretedFunction.__dict__["run"]

        def launch_interp(fn, args, grid, warmup, kwargs):
            return orig_irun(fn, *args, grid=grid, warmup=warmup, **kwargs)

        def irun(self, *args, grid=None, warmup=False, **kwargs):
            if warmup or getattr(self, PREFIX + "variant", False):
                return orig_irun(self, *args, grid=grid, warmup=warmup, **kwargs)
            return record._launch(self, launch_interp, args, grid, kwargs, compiled=False)

        out.append((InterpretedFunction, "run", irun))
    else:  # Triton 3.5: run is per instance, kernel[grid] builds the executor itself
        orig_getitem = InterpretedFunction.__dict__["__getitem__"]

        def launch_interp35(fn, args, grid, warmup, kwargs):
            return orig_getitem(fn, grid)(*args, **kwargs)

        def getitem(self, grid):
            if getattr(self, PREFIX + "variant", False):
                return orig_getitem(self, grid)
            return lambda *args, **kwargs: record._launch(self, launch_interp35, args, grid, kwargs, compiled=False)

        out.append((InterpretedFunction, "__getitem__", getitem))
    return out


def _is_gluon(fn) -> bool:
    try:
        return bool(fn.is_gluon())
    except Exception:
        return False


@contextlib.contextmanager
def perturbed_launches(perturb) -> Iterator[LaunchRecord]:
    """Within the block, Triton launches run perturbed (see the module docstring); yields the record.

    ``perturb`` is a ``Perturb`` or its 5-tuple.  Contexts nest (the inner one
    wins); the launch path is restored on exit, exception or not.
    """
    record = LaunchRecord(Perturb.from_tuple(perturb))
    patches = _patches(record)
    saved = [(cls, attr, cls.__dict__[attr]) for cls, attr, _ in patches]
    try:
        for cls, attr, new in patches:
            setattr(cls, attr, new)
        yield record
    finally:
        for cls, attr, old in reversed(saved):
            setattr(cls, attr, old)

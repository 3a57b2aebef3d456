"""Instrumented variants of a user's ``@triton.jit`` function, built once and cached.

The variant is the transformed source (``transform``) defined in a copy of the
kernel's globals (plus its closure's names) with three names added: the delay
helper (``kernels.copy.warp_delay``, the project kernels' own), and the variants
of the helpers it calls.  It is jitted the way the kernel was (compiled or
interpreted, ``do_not_specialize`` + the seed, ``debug``, ``noinline``), so
Triton caches its compilations per specialization like any kernel's.

The source is registered in ``linecache`` under a ``<mambafuzz-instrumented
...>`` name: Triton (compiled and interpreted) reads a kernel's source through
``inspect``, and this needs no file on disk.

Helpers are instrumented up to ``MAX_DEPTH`` calls deep; Triton's own
(``triton.*``) and mambafuzz's are left alone.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import linecache
import re
import textwrap
from dataclasses import dataclass, field

from .transform import DELAY, PREFIX, SEED, NotInstrumentable, transform

MAX_DEPTH = 3
_MISSING = object()
_COUNTER = itertools.count()
# id(kernel) -> (kernel, source, Variant | NotInstrumentable); the kernel is kept so the id stays its own
_CACHE: dict[int, tuple[object, str | None, object]] = {}


@dataclass
class Variant:
    kernel: object                  # the user's jitted function
    jit: object                     # its instrumented twin (same kind: JITFunction or InterpretedFunction)
    name: str
    load_sites: int = 0             # delay sites before loads, helpers included
    store_sites: int = 0
    helpers: tuple[str, ...] = ()   # helper functions instrumented (by name)
    skipped: dict[str, str] = field(default_factory=dict)  # helper -> why it was left as written
    source: str = ""
    _scopes: list[tuple[dict, dict, dict]] = field(default_factory=list, repr=False)

    @property
    def sites(self) -> int:
        return self.load_sites + self.store_sites

    def refresh(self) -> None:
        """Bring the copied globals up to date (Triton compares a kernel's globals at every launch)."""
        for g, source, injected in self._scopes:
            g.update(source)
            g.update(injected)


def _jit_types() -> tuple[type, ...]:
    from triton.runtime.jit import JITFunction  # deferred: Triton: loaded with the kernels, after the device is chosen
    kinds: list[type] = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction  # deferred: Triton: loaded with the kernels, after the device is chosen
        kinds.append(InterpretedFunction)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


def is_jit(obj) -> bool:
    return isinstance(obj, _jit_types())


def kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__qualname__", None) or getattr(kernel, "__name__", None) or repr(kernel)


def source_of(kernel) -> str:
    """The kernel's source from its ``def`` on, as Triton itself takes it."""
    src = getattr(kernel, "src", None)  # JITFunction (it may have been updated in place)
    if isinstance(src, str):
        return src
    fn = getattr(kernel, "fn", None)
    if fn is None:
        raise NotInstrumentable("it is not a Triton JIT function")
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise NotInstrumentable(f"its source is not available ({exc})") from None
    m = re.search(r"^def\s+\w+\s*\(", src, re.MULTILINE)
    if m is None:
        raise NotInstrumentable("its source has no def line")
    return src[m.start():]


def _scope(fn) -> dict:
    """The names the kernel sees: its globals, then its closure's."""
    env = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
    return env


def _resolve(node, env):
    """The object a dotted name denotes in ``env`` (``_MISSING`` when it is not a plain dotted name)."""
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        return getattr(builtins, node.id, _MISSING)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, env)
        return _MISSING if base is _MISSING else getattr(base, node.attr, _MISSING)
    return _MISSING


def _memory_op(func: ast.expr, env) -> str | None:
    """'load' / 'store' when ``func`` is Triton's: ``tl.load``, an imported ``load``, or a descriptor's."""
    import triton.language as tl  # deferred: Triton: loaded with the kernels, after the device is chosen

    if isinstance(func, ast.Attribute) and func.attr in ("load", "store"):
        base = _resolve(func.value, env)
        if inspect.ismodule(base):  # tl.load / triton.language.core.load (the interpreter swaps the function)
            return func.attr if base.__name__.startswith("triton.language") else None
        if base is _MISSING and isinstance(func.value, ast.Name):
            return func.attr  # a local's method: a tensor descriptor's load/store
        return None
    obj = _resolve(func, env)
    if obj is _MISSING:
        return None
    for op in ("load", "store"):
        if _same_function(obj, getattr(tl.core, op)):
            return op
    try:  # Triton's interpreter swaps tl.core.load while kernels run; a name imported before is the original
        inner = inspect.unwrap(obj)
    except ValueError:
        return None
    name, module = getattr(inner, "__name__", None), getattr(inner, "__module__", "") or ""
    return name if name in ("load", "store") and module.startswith("triton.language") else None


def _same_function(a, b) -> bool:
    """``a`` is ``b``, or both wrap the same function (Triton's builtins carry ``__wrapped__``)."""
    if a is b:
        return True
    try:
        return callable(a) and inspect.unwrap(a) is inspect.unwrap(b)
    except ValueError:  # a wrapper cycle
        return False


def _delay_helper():
    """The project kernels' warp-delay function (imported late: kernels load after the device is chosen)."""
    from mambafuzz.kernels.copy import warp_delay  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)
    return warp_delay


def _jit_like(kernel, raw_fn, *, seed_unspecialized: bool):
    import triton  # deferred: Triton: loaded with the kernels, after the device is chosen

    opts = {}
    dns = list(getattr(kernel, "do_not_specialize", None) or
               getattr(kernel, "kwargs", {}).get("do_not_specialize") or [])
    if seed_unspecialized:
        dns.append(SEED)
    if dns:
        opts["do_not_specialize"] = dns
    for name in ("do_not_specialize_on_alignment", "debug", "noinline"):
        value = getattr(kernel, name, None)
        if value is None:
            value = getattr(kernel, "kwargs", {}).get(name)
        if value is not None and value != []:
            opts[name] = value
    out = triton.jit(raw_fn, **opts)
    setattr(out, PREFIX + "variant", True)
    return out


def variant_of(kernel) -> Variant:
    """The instrumented variant of ``kernel`` (cached); raises NotInstrumentable with the reason."""
    return _variant(kernel, 0)


def _variant(kernel, depth: int) -> Variant:
    try:
        src = source_of(kernel)
    except NotInstrumentable as exc:
        src, built = None, exc
    else:
        hit = _CACHE.get(id(kernel))
        if hit is not None and hit[0] is kernel and hit[1] == src:
            built = hit[2]
        else:
            try:
                built = _build(kernel, src, depth)
            except NotInstrumentable as exc:
                built = exc
            except Exception as exc:  # a Triton that differs, a source we did not foresee
                built = NotInstrumentable(f"instrumenting it failed ({type(exc).__name__}: {exc})")
    _CACHE[id(kernel)] = (kernel, src, built)
    if isinstance(built, NotInstrumentable):
        raise built
    return built


def _build(kernel, src: str, depth: int) -> Variant:
    fn = kernel.fn
    env = _scope(fn)
    delay = _delay_helper()
    helpers: dict[int, tuple[str, Variant]] = {}
    skipped: dict[str, str] = {}

    def classify(call: ast.Call):
        op = _memory_op(call.func, env)
        if op is not None:
            return op
        obj = _resolve(call.func, env)
        if obj is _MISSING or obj is delay or not is_jit(obj):
            return None
        module = getattr(getattr(obj, "fn", None), "__module__", "") or ""
        if module.startswith(("triton.", "mambafuzz.")):
            return None
        if id(obj) in helpers:
            return ("helper", helpers[id(obj)][0])
        name = kernel_name(obj)
        if name in skipped:
            return None
        if depth + 1 > MAX_DEPTH:
            skipped[name] = f"more than {MAX_DEPTH} calls deep"
            return None
        try:
            hv = _variant(obj, depth + 1)
        except NotInstrumentable as exc:
            skipped[name] = str(exc)
            return None
        helpers[id(obj)] = (f"{PREFIX}h{len(helpers)}", hv)
        return ("helper", helpers[id(obj)][0])

    t = transform(src, classify)
    injected = {DELAY: delay, **{alias: hv.jit for alias, hv in helpers.values()}}
    g = dict(fn.__globals__)
    nonlocals = {k: v for k, v in env.items() if k not in fn.__globals__}
    g.update(nonlocals)
    g.update(injected)
    filename = f"<mambafuzz-instrumented {fn.__module__}.{fn.__qualname__} #{next(_COUNTER)}>"
    linecache.cache[filename] = (len(t.source), None, t.source.splitlines(True), filename)
    code = compile(t.source, filename, "exec")
    before = g.get(t.name, _MISSING)
    exec(code, g)
    raw = g[t.name]
    if before is _MISSING:
        del g[t.name]
    else:
        g[t.name] = before
    raw.__qualname__ = fn.__qualname__
    raw.__module__ = fn.__module__
    jit = _jit_like(kernel, raw, seed_unspecialized=depth == 0)
    scopes = [(g, fn.__globals__, {**nonlocals, **injected})]
    names: list[str] = []
    for _, hv in helpers.values():
        scopes.extend(hv._scopes)
        names.extend((hv.name,) + hv.helpers)
        skipped.update(hv.skipped)
    return Variant(kernel=kernel, jit=jit, name=kernel_name(kernel),
                   load_sites=t.load_sites + sum(hv.load_sites for _, hv in helpers.values()),
                   store_sites=t.store_sites + sum(hv.store_sites for _, hv in helpers.values()),
                   helpers=tuple(dict.fromkeys(names)), skipped=skipped, source=t.source, _scopes=scopes)

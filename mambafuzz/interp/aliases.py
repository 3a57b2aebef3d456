"""Names a kernel's module binds to Triton functions, made callable in the interpreter.

The interpreter makes ``tl.exp`` callable in a jit body by patching the
attributes of ``triton.language`` (and ``tl.math``) at each launch.  A name
bound at module level keeps the original builtin: FLA's ``exp = tl.exp``
(imported into the kernel's module) then raises "Did you forget to add
@triton.jit".  libdevice is worse: ``triton.language.extra.libdevice`` holds
stubs that the compiler swaps for the backend's functions, and in the
interpreter they return None.  Before each launch (and each device-function
call) the interpreter patches the language for a function; this module then
rebinds, in that function's module, every name that holds a Triton builtin
to a wrapper that passes the interpreter's semantic, and every libdevice
(stub or CUDA module, or one of their functions) to the CUDA functions so
wrapped; their ``extern_elementwise`` runs in numpy (``builder.py``).  What
it rebinds is put back when the outermost adapters exit.
"""
from __future__ import annotations

import importlib
import types

import triton.language as tl
from triton.runtime import interpreter as _interp

__all__ = ["patch_function_globals", "patch_language_attributes", "restore"]

_STUB = "triton.language.extra.libdevice"
_CUDA = "triton.language.extra.cuda.libdevice"
_WRAPPED = "__mambafuzz_alias__"
_namespace = None           # the libdevice namespace, built on first use
_checked: dict = {}         # id(globals) -> len(globals) when last checked (nothing left to rebind)


def _is_builtin(value) -> bool:
    return bool(getattr(value, "__triton_builtin__", False)) and callable(value)


def _with_semantic(member):
    """What the interpreter's own patch puts in place of a builtin: the call with its semantic."""

    def call(*args, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k != "_semantic"}
        return member(*args, **kwargs, _semantic=_interp.interpreter_semantic)

    setattr(call, _WRAPPED, member)
    call.__name__ = getattr(member, "__name__", "builtin")
    return call


def _libdevice():
    """A namespace of CUDA libdevice's functions, callable in the interpreter."""
    global _namespace
    if _namespace is None:
        try:
            cuda = importlib.import_module(_CUDA)
        except ImportError:      # pragma: no cover - every supported release ships it
            cuda = None
        ns = types.SimpleNamespace()
        for name in dir(cuda) if cuda is not None else ():
            value = getattr(cuda, name)
            if _is_builtin(value):
                setattr(ns, name, _with_semantic(value))
        ns.__name__ = "libdevice"
        _namespace = ns
    return _namespace


def _replacement(value):
    """What a module-level name should hold in the interpreter, or None to leave it."""
    if getattr(value, _WRAPPED, None) is not None:
        return None
    if isinstance(value, types.ModuleType):
        return _libdevice() if value.__name__ in (_STUB, _CUDA) else None
    module = getattr(value, "__module__", None) or ""
    if module == _STUB and callable(value):                       # a stub function imported by name
        return getattr(_libdevice(), getattr(value, "__name__", ""), None)
    if _is_builtin(value) and module.startswith("triton.language"):
        return _with_semantic(value)
    return None


def patch_function_globals(fn, undo: list) -> None:
    """Rebind the builtins and libdevice names of `fn`'s module; record each for `undo`."""
    namespace = getattr(fn, "__globals__", None)
    if namespace is None:
        return
    size = len(namespace)
    if _checked.get(id(namespace)) == size:
        return
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        new = _replacement(value)
        if new is not None:
            undo.append((namespace, name, value))
            namespace[name] = new
    _checked[id(namespace)] = len(namespace)


def patch_language_attributes(undo: list) -> None:
    """``tl.extra.libdevice`` (reached as an attribute chain from ``tl``) to the callable namespace."""
    extra = getattr(tl, "extra", None)
    if extra is not None and isinstance(getattr(extra, "libdevice", None), types.ModuleType):
        undo.append((extra.__dict__, "libdevice", extra.libdevice))
        extra.libdevice = _libdevice()


def restore(undo: list) -> None:
    """Put back what the patches above rebound, newest first."""
    while undo:
        namespace, name, value = undo.pop()
        namespace[name] = value
    _checked.clear()

"""Patching Triton's interpreter so that a sink sees every memory access.

Everything that depends on how Triton's interpreter is built lives here,
with one adapter per difference between releases; the sink (the recorder)
receives plain numpy arrays and Python values and knows nothing of Triton.

What is patched: the module-level ``interpreter_builder`` singleton of
``triton.runtime.interpreter`` gets instance attributes that shadow its class
methods (``create_load``/``create_store`` call the masked variants through
``self``, so every access passes a hook), and ``GridExecutor.__call__`` is
wrapped to see each launch's arguments.  :meth:`InterpreterHooks.remove`
puts back exactly what was there, instance attributes included.  The hooks
also enter :func:`mambafuzz.interp.adapters` (the engine enters it alone for
unrecorded CPU repetitions), which mends what the interpreter runs differently
from compiled Triton.

Sink methods, in the order the interpreter calls them::

    on_launch_args(pairs)        # (name, value) of each kernel argument of a launch
    on_launch()                  # after set_grid_dim: a launch begins
    on_program(x, y, z)          # after set_grid_idx: a program begins
    on_access(op, ptr_data, mask, elem_size, line[, value], shape=None)   # before the access touches memory
                                 # (value: a store's numpy values, broadcastable to ptr_data; shape: the
                                 # kernel's shape of the access when it differs from ptr_data's, () for a
                                 # scalar, whose handle holds a shape-(1,) array like a block of 1)
    on_barrier()                 # tl.debug_barrier()

Re-entrancy rules:

- one set of hooks per process: the interpreter has one builder, so a second
  :meth:`~InterpreterHooks.install` while any hooks are installed raises
  ``RuntimeError`` (recorders do not nest; the first keeps recording);
- a hook entered while another hook is running (the interpreter implementing
  one patched method with another, or the sink touching the builder) passes
  straight through unrecorded: the access the kernel issued is recorded once,
  by the outermost hook.
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import Optional

import triton
import triton.language as tl
from triton.runtime import interpreter as _interp

from mambafuzz.interp import adapters_enter, adapters_exit

from .events import OP_ATOMIC, OP_LOAD, OP_STORE
from .witness import source_line

__all__ = ["InterpreterHooks"]

# the builder methods the hooks shadow
PATCHED = ("create_masked_load", "create_masked_store", "create_atomic_rmw",
           "create_atomic_cas", "create_barrier", "set_grid_dim", "set_grid_idx")


# --------------------------------------------------------------------------
# adapter: where each patched method takes the arguments the hooks read
# --------------------------------------------------------------------------
# hook -> the parameters read, each a tuple of accepted names
_HOOK_PARAMS = {
    "create_masked_load": (("ptrs", "ptr"), ("mask",)),
    "create_masked_store": (("ptrs", "ptr"), ("mask",)),
    "create_atomic_rmw": (("ptr", "ptrs"), ("mask",)),
    "create_atomic_cas": (("ptr", "ptrs"),),
    "set_grid_idx": (("x",), ("y",), ("z",)),
}


def _param_reader(builder, hook: str, params=None):
    """``read(args, kwargs) -> tuple`` of the `_HOOK_PARAMS` arguments of ``builder.<hook>``.

    Positions come from the method's signature (feature detection, no version
    strings): Triton 3.9 renamed the interpreter's cache arguments and dropped
    one, ``create_masked_load(ptrs, mask, other, cache_policy, is_volatile)`` and
    ``create_masked_store(ptrs, value, mask, cache_policy)``, where 3.5..3.8 have
    ``(ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)`` and
    ``(ptrs, value, mask, cache_modifier, eviction_policy)``.  The class's own
    method is read (an instance attribute may be someone else's wrapper);
    a release without one of the names fails here, at patch time, not with
    wrong records.
    """
    method = getattr(type(builder), hook)
    names = list(inspect.signature(method).parameters)[1:]     # drop self
    found = []
    for accepted in params or _HOOK_PARAMS[hook]:
        name = next((n for n in accepted if n in names), None)
        if name is None:
            raise RuntimeError(f"the race recorder does not support Triton {triton.__version__}: its "
                               f"interpreter's {hook}{tuple(names)} has no parameter named "
                               f"{' or '.join(accepted)}")
        found.append((names.index(name), name))
    found = tuple(found)
    last = max(pos for pos, _ in found)

    def read(args, kwargs):
        if len(args) > last:        # the interpreter's own calls: all positional
            return tuple(args[pos] for pos, _ in found)
        return tuple(args[pos] if len(args) > pos else kwargs.get(name) for pos, name in found)

    return read


# --------------------------------------------------------------------------
# adapter: bytes per element of a pointer handle
# --------------------------------------------------------------------------
# Pointer types are not hashable on some releases, and _get_np_dtype rebuilds a dict per call:
# cache on the scalar type.
_elem_size_cache: dict = {}


def element_size(handle) -> int:
    """Bytes per element addressed by a pointer handle (its dtype is a pointer)."""
    t = handle.dtype
    if isinstance(t, tl.block_type):
        t = t.element_ty
    if isinstance(t, tl.pointer_type):
        t = t.element_ty
    if isinstance(t, tl.pointer_type):     # pointer to pointer: a 64-bit address
        return 8
    try:
        return _elem_size_cache[t]
    except (KeyError, TypeError):
        pass
    try:
        size = int(_interp._get_np_dtype(t).itemsize)
    except Exception:
        size = max(1, int(getattr(t, "primitive_bitwidth", 8)) // 8)
    try:
        _elem_size_cache[t] = size
    except TypeError:
        pass
    return size


# --------------------------------------------------------------------------
# adapter: masks arrive as TensorHandles, or bare numpy on the block-pointer and descriptor paths
# --------------------------------------------------------------------------
_TensorHandle = _interp.TensorHandle


def mask_array(mask):
    """The mask's numpy data, or None for no mask."""
    return mask.data if isinstance(mask, _TensorHandle) else mask


# --------------------------------------------------------------------------
# adapter: the kernel line that issued an access (the first frame outside Triton and this package)
# --------------------------------------------------------------------------
_TRITON_DIR = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MENDS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "interp") + os.sep
_internal_code: dict = {}       # code object -> bool (inside triton / this package)
_line_cache: dict = {}          # (code object, f_lasti) -> line string


def _is_internal(code) -> bool:
    internal = _internal_code.get(code)
    if internal is None:
        path = os.path.abspath(code.co_filename)
        internal = path.startswith((_TRITON_DIR, _PACKAGE_DIR, _MENDS_DIR))
        _internal_code[code] = internal
    return internal


def issuing_line() -> str:
    """'file.py:123: source' of the innermost frame outside Triton, the recorder and the interpreter mends."""
    frame = sys._getframe(1)
    internal = _internal_code
    while frame is not None:
        code = frame.f_code
        inside = internal.get(code)
        if inside is None:
            inside = _is_internal(code)
        if not inside:
            break
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    key = (frame.f_code, frame.f_lasti)
    line = _line_cache.get(key)
    if line is None:
        line = _line_cache[key] = source_line(frame.f_code.co_filename, frame.f_lineno)
    return line


def scalar_access(ptrs, depth: int = 12) -> bool:
    """Whether the handle `ptrs` (one address) is a scalar's in the kernel, not a block of shape (1,):
    the interpreter holds both as shape-(1,) arrays; the language's tensor around the handle, in a
    frame between the kernel and the builder, knows which (False when none is found)."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            break
        for value in frame.f_locals.values():
            if getattr(value, "handle", None) is ptrs:
                kind = getattr(value, "type", None)
                return kind is not None and hasattr(kind, "is_block") and not kind.is_block()
        frame = frame.f_back
    return False


# --------------------------------------------------------------------------
# the hooks
# --------------------------------------------------------------------------
_installed: Optional["InterpreterHooks"] = None     # the hooks patched in now, if any


class InterpreterHooks:
    """Shadow the interpreter's access, barrier and grid methods with calls to `sink`."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self._saved: Optional[dict] = None      # method -> (was an instance attribute, it, bound original)
        self._saved_grid_call = None
        self._running = False                   # a hook is running (re-entrancy guard)

    @property
    def installed(self) -> bool:
        return self._saved is not None

    def install(self) -> None:
        global _installed
        if _installed is not None:
            raise RuntimeError("a race recorder is already recording in this process; recorders do not "
                               "nest (Triton's interpreter has a single builder)")
        builder = _interp.interpreter_builder
        read_load = _param_reader(builder, "create_masked_load")     # before anything is patched
        read_store = _param_reader(builder, "create_masked_store")
        read_value = _param_reader(builder, "create_masked_store", (("value", "val"),))  # same-value stores
        read_rmw = _param_reader(builder, "create_atomic_rmw")
        read_cas = _param_reader(builder, "create_atomic_cas")
        read_idx = _param_reader(builder, "set_grid_idx")
        saved = {name: (name in builder.__dict__, builder.__dict__.get(name), getattr(builder, name))
                 for name in PATCHED}
        hooks = self
        sink = self.sink
        on_access = sink.on_access

        def access_hook(name, op, read, masked, read_stored=None):
            original = saved[name][2]

            def hook(*args, **kwargs):
                if hooks._running or hooks._saved is None:   # nested, or left behind by someone's patch
                    return original(*args, **kwargs)
                hooks._running = True
                try:
                    if masked:
                        ptrs, mask = read(args, kwargs)
                    else:
                        ptrs, mask = read(args, kwargs)[0], None
                    if ptrs is not None:
                        stored = () if read_stored is None else (mask_array(read_stored(args, kwargs)[0]),)
                        data = ptrs.data
                        shape = () if getattr(data, "shape", None) == (1,) and scalar_access(ptrs) else None
                        on_access(op, data, mask_array(mask), element_size(ptrs), issuing_line(), *stored,
                                  shape=shape)
                    return original(*args, **kwargs)
                finally:
                    hooks._running = False

            hook.__name__ = name
            return hook

        def plain_hook(name, before=None, after=None):
            original = saved[name][2]

            def hook(*args, **kwargs):
                if hooks._running or hooks._saved is None:
                    return original(*args, **kwargs)
                hooks._running = True
                try:
                    if before is not None:
                        before(args, kwargs)
                    result = original(*args, **kwargs)
                    if after is not None:
                        after(args, kwargs)
                    return result
                finally:
                    hooks._running = False

            hook.__name__ = name
            return hook

        patches = (
            access_hook("create_masked_load", OP_LOAD, read_load, True),
            access_hook("create_masked_store", OP_STORE, read_store, True, read_value),
            access_hook("create_atomic_rmw", OP_ATOMIC, read_rmw, True),
            access_hook("create_atomic_cas", OP_ATOMIC, read_cas, False),
            plain_hook("create_barrier", before=lambda args, kwargs: sink.on_barrier()),
            plain_hook("set_grid_dim", after=lambda args, kwargs: sink.on_launch()),
            plain_hook("set_grid_idx", after=lambda args, kwargs: sink.on_program(*read_idx(args, kwargs))),
        )

        executor = _interp.GridExecutor
        original_call = executor.__call__

        def grid_call(ex, *args, **kwargs):
            if hooks._saved is not None:
                sink.on_launch_args(list(zip(ex.arg_names, args)) + list(kwargs.items()))
            return original_call(ex, *args, **kwargs)

        self._saved = saved
        self._saved_grid_call = original_call
        for hook in patches:
            setattr(builder, hook.__name__, hook)
        executor.__call__ = grid_call
        adapters_enter()
        _installed = self

    def remove(self) -> None:
        """Put back what install() replaced; a no-op when not installed."""
        global _installed
        saved, self._saved = self._saved, None
        if saved is None:
            return
        _interp.GridExecutor.__call__ = self._saved_grid_call
        builder = _interp.interpreter_builder
        for name, (had, value, _) in saved.items():
            if had:
                setattr(builder, name, value)
            else:
                builder.__dict__.pop(name, None)
        adapters_exit()
        if _installed is self:
            _installed = None

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
also enter :func:`interpreter_adapters` (the engine enters it alone for
unrecorded CPU repetitions): 3.5 and 3.6 then run loops over bounds loaded
from memory as 3.7+ does.

Sink methods, in the order the interpreter calls them::

    on_launch_args(pairs)        # (name, value) of each kernel argument of a launch
    on_launch()                  # after set_grid_dim: a launch begins
    on_program(x, y, z)          # after set_grid_idx: a program begins
    on_access(op, ptr_data, mask, elem_size, line[, value])   # before the access touches memory
                                 # (value: a store's numpy values, broadcastable to ptr_data)
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
from contextlib import contextmanager
from typing import Optional

import numpy as np
import triton
import triton.language as tl
from triton.runtime import interpreter as _interp

from .events import OP_ATOMIC, OP_LOAD, OP_STORE
from .witness import source_line

__all__ = ["InterpreterHooks", "interpreter_adapters"]

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
_internal_code: dict = {}       # code object -> bool (inside triton / this package)
_line_cache: dict = {}          # (code object, f_lasti) -> line string


def _is_internal(code) -> bool:
    internal = _internal_code.get(code)
    if internal is None:
        path = os.path.abspath(code.co_filename)
        internal = path.startswith(_TRITON_DIR) or path.startswith(_PACKAGE_DIR)
        _internal_code[code] = internal
    return internal


def issuing_line() -> str:
    """'file.py:123: source' of the innermost frame outside triton and this package."""
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


# --------------------------------------------------------------------------
# adapter: scalars loaded from memory as loop bounds (Triton 3.5, 3.6)
# --------------------------------------------------------------------------
# The interpreter holds a scalar as a shape-(1,) array.  Its patch of the language, redone at
# every launch (``_patch_lang``), makes ``tensor.__index__`` ``int(data)``, which numpy refuses
# for 1-d arrays, so ``range(0, n, BLOCK)`` over a loaded ``n`` raises TypeError; 3.7+ squeezes
# first.  3.5/3.6 also leave ``tl.condition`` without ``__bool__``, so ``while tl.condition(i <
# n)`` never ends.  The adapter wraps ``_patch_lang`` and, after the interpreter's own patch, mends
# what a probe finds broken, as 3.7+ does.  Where the interpreter returns its patch scope (3.6+)
# the mends go into it, so its restore at the launch's end puts the originals back; 3.5 patches
# for good and returns None, and the adapter's removal undoes its own mends.
class _Scalar:
    """Stands in for a tensor holding one loaded scalar."""

    class handle:
        data = np.zeros(1, dtype=np.int32)


def _index_broken() -> bool:
    index = getattr(tl.core.tensor, "__index__", None)
    try:
        return index is not None and index(_Scalar()) != 0
    except TypeError:
        return True


def _condition_broken() -> bool:
    condition = getattr(tl.core, "condition", None)
    return condition is not None and bool(condition(False))


def _mended_index(interpreters):
    def __index__(self):
        data = self.handle.data
        if data.size == 1 and data.dtype.kind in "biu":   # a scalar: int() of a 1-d array fails
            return int(data.reshape(()))
        return interpreters(self)                           # anything else fails as it did
    return __index__


def _condition_bool(self):
    return bool(self.condition)


_mends = (
    (lambda: tl.core.tensor, "__index__", _index_broken, _mended_index),
    (lambda: tl.core.condition, "__bool__", _condition_broken, lambda _: _condition_bool),
)
_adapter_depth = 0          # interpreter_adapters() entered and not yet left
_adapter_saved = None       # (the interpreter's _patch_lang, {(class, name): what 3.5's patch left})
_MISSING = object()


def _mend(scope, undo: dict) -> None:
    for owner, name, broken, mended in _mends:
        if not broken():
            continue
        cls = owner()
        current = cls.__dict__.get(name, _MISSING)
        value = mended(getattr(cls, name, None))
        value.mambafuzz_mend = True
        if scope is not None and callable(getattr(scope, "set_attr", None)):
            scope.set_attr(cls, name, value)            # restored with the interpreter's own
            continue
        if not getattr(current, "mambafuzz_mend", False):
            undo[(cls, name)] = current
        setattr(cls, name, value)


def _adapters_enter() -> None:
    global _adapter_depth, _adapter_saved
    if _adapter_depth == 0 and callable(getattr(_interp, "_patch_lang", None)):
        original, undo = _interp._patch_lang, {}

        def _patch_lang(*args, **kwargs):
            scope = original(*args, **kwargs)
            _mend(scope, undo)
            return scope

        _adapter_saved = (original, undo)
        _interp._patch_lang = _patch_lang
    _adapter_depth += 1


def _adapters_exit() -> None:
    global _adapter_depth, _adapter_saved
    _adapter_depth -= 1
    if _adapter_depth or _adapter_saved is None:
        return
    (original, undo), _adapter_saved = _adapter_saved, None
    _interp._patch_lang = original
    for (cls, name), value in undo.items():
        if getattr(cls.__dict__.get(name), "mambafuzz_mend", False):
            if value is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value)


@contextmanager
def interpreter_adapters():
    """While inside, kernels run in Triton's interpreter as 3.7+ runs them (see above).

    Nests (the race recorder's hooks enter it too); leaving the outermost
    puts back ``_patch_lang`` and what 3.5's patch had left.
    """
    _adapters_enter()
    try:
        yield
    finally:
        _adapters_exit()


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
                        on_access(op, ptrs.data, mask_array(mask), element_size(ptrs), issuing_line(), *stored)
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
        _adapters_enter()
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
        _adapters_exit()
        if _installed is self:
            _installed = None

"""Triton's interpreter, mended to run kernels the way compiled Triton does.

Everything mambafuzz changes in how the interpreter *computes* lives here;
what it *observes* (every load and store, for the race check) lives in
``racecheck/hooks.py``, which enters these adapters too.  Each mend names
the difference it removes, is applied only where a probe finds the installed
release has it, and is undone when the outermost :func:`adapters` exits, so
a kernel launched outside mambafuzz runs in the interpreter as Triton left it.

The mends are applied to the language patch the interpreter redoes at every
launch (``_patch_lang``): into the scope it returns where it returns one
(3.6+, restored with its own at the launch's end); 3.5 patches for good and
returns None, and leaving the adapters undoes the mends.
"""
from __future__ import annotations

from contextlib import contextmanager

from triton.runtime import interpreter as _interp

from . import loops

__all__ = ["adapters", "adapters_enter", "adapters_exit"]

_depth = 0          # adapters entered and not yet left
_saved = None       # (the interpreter's _patch_lang, {(class, name): what 3.5's patch left})
_MISSING = object()


def _lang_mends():
    return loops.MENDS


def _mend(scope, undo: dict) -> None:
    for owner, name, broken, mended in _lang_mends():
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


def adapters_enter() -> None:
    """Enter the adapters (nests); :func:`adapters` is the context-manager form."""
    global _depth, _saved
    if _depth == 0 and callable(getattr(_interp, "_patch_lang", None)):
        original, undo = _interp._patch_lang, {}

        def _patch_lang(*args, **kwargs):
            scope = original(*args, **kwargs)
            _mend(scope, undo)
            return scope

        _saved = (original, undo)
        _interp._patch_lang = _patch_lang
    _depth += 1


def adapters_exit() -> None:
    """Leave the adapters; the outermost exit puts back everything they changed."""
    global _depth, _saved
    _depth -= 1
    if _depth or _saved is None:
        return
    (original, undo), _saved = _saved, None
    _interp._patch_lang = original
    for (cls, name), value in undo.items():
        if getattr(cls.__dict__.get(name), "mambafuzz_mend", False):
            if value is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value)


@contextmanager
def adapters():
    """While inside, kernels run in Triton's interpreter with the mends of this package.

    Nests (the race recorder's hooks enter it too); leaving the outermost puts
    back ``_patch_lang`` and what 3.5's patch had left.
    """
    adapters_enter()
    try:
        yield
    finally:
        adapters_exit()

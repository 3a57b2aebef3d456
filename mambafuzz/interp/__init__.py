"""Triton's interpreter, mended to run kernels the way compiled Triton does.

Everything mambafuzz changes in how the interpreter *computes* lives here;
what it *observes* (every load and store, for the race check) lives in
``racecheck/hooks.py``, which enters these adapters too.  The mends, each
named after the difference it removes:

- ``loops.py``: loop bounds loaded from memory (3.5, 3.6), patched into the
  language at each launch;
- ``aliases.py``: module-level names bound to Triton builtins (``exp =
  tl.exp``) and libdevice, rebound in the module of each function run;
- ``builder.py``: the builder's numpy arithmetic (int1 comparisons; bf16 and
  fp8 math, casts, dot and reductions; libdevice calls), each applied only
  where a probe finds the installed release computes differently;
- ``rewrite.py``: the interpreter's source rewrite (``range`` loop variables
  that take ``.to()``; ``and``/``or`` over tensors as compiled code does);
- ``tuning.py``: ``triton.autotune`` keeps its first config instead of timing
  each on a GPU that is not there;
- ``cuda_device.py``: a launcher's ``torch.cuda.device(t.device.index)`` on a
  CPU tensor selects nothing, as on a GPU box, instead of raising.

Entering the outermost :func:`adapters` applies them; leaving it puts back
everything they changed, so a kernel launched outside mambafuzz runs in the
interpreter as Triton left it.  The language mends go into the scope the
interpreter's ``_patch_lang`` returns where it returns one (3.6+, restored
with its own at the launch's end); 3.5 patches for good and returns None,
and leaving the adapters undoes them.
"""
from __future__ import annotations

from contextlib import contextmanager

from triton.runtime import interpreter as _interp

from . import aliases, builder, cuda_device, loops, rewrite, tuning

__all__ = ["adapters", "adapters_enter", "adapters_exit", "applied"]

_depth = 0          # adapters entered and not yet left
_saved = None       # (the interpreter's _patch_lang, {(class, name): what 3.5's patch left}, builder undo,
#                     alias undo)
_MISSING = object()
_probed: dict | None = None     # mend name -> the installed release needs it (probed once per process)


def _mend_language(scope, undo: dict) -> None:
    for owner, name, broken, mended in loops.MENDS:
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


def _needed() -> dict:
    """Which builder mends the installed Triton needs, probed on its own methods once."""
    global _probed
    if _probed is None:
        one = _interp.interpreter_builder
        _probed = {name: bool(broken(one)) for name, broken, _ in builder.MENDS}
    return _probed


def applied() -> tuple[str, ...]:
    """The builder mends the installed Triton needs (applied inside :func:`adapters`)."""
    return tuple(name for name, needed in _needed().items() if needed)


def _mend_builder(undo: list) -> None:
    needed = _needed()
    for name, _, methods in builder.MENDS:
        if not needed[name]:
            continue
        for key, value in methods().items():
            owner, attr = key if isinstance(key, tuple) else (_interp.InterpreterBuilder, key)
            undo.append((owner, attr, owner.__dict__.get(attr, _MISSING)))
            setattr(owner, attr, value)


def _unmend_builder(undo: list) -> None:
    while undo:
        owner, attr, value = undo.pop()
        if value is _MISSING:
            delattr(owner, attr)
        else:
            setattr(owner, attr, value)


def adapters_enter() -> None:
    """Enter the adapters (nests); :func:`adapters` is the context-manager form."""
    global _depth, _saved
    if _depth == 0 and callable(getattr(_interp, "_patch_lang", None)):
        original, undo, builder_undo, alias_undo = _interp._patch_lang, {}, [], []

        def _patch_lang(fn, *args, **kwargs):
            scope = original(fn, *args, **kwargs)
            _mend_language(scope, undo)
            aliases.patch_function_globals(fn, alias_undo)
            return scope

        _saved = (original, undo, builder_undo, alias_undo)
        _interp._patch_lang = _patch_lang
        try:
            _mend_builder(builder_undo)
            aliases.patch_language_attributes(alias_undo)
            rewrite.install()
            tuning.install()
            cuda_device.install()
        except BaseException:
            _depth += 1
            adapters_exit()
            raise
    _depth += 1


def adapters_exit() -> None:
    """Leave the adapters; the outermost exit puts back everything they changed."""
    global _depth, _saved
    _depth -= 1
    if _depth or _saved is None:
        return
    (original, undo, builder_undo, alias_undo), _saved = _saved, None
    _interp._patch_lang = original
    rewrite.uninstall()
    tuning.uninstall()
    cuda_device.uninstall()
    aliases.restore(alias_undo)
    _unmend_builder(builder_undo)
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
    back everything the mends changed.
    """
    adapters_enter()
    try:
        yield
    finally:
        adapters_exit()

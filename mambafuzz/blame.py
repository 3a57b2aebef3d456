"""Who an exception raised while running a target is against.

A verdict is only as good as its worst path: an exception is a finding only
when it comes from the kernel or the user's own code.  Three answers:

- ``kernel``: raised by the user's function or the kernel's own logic (a
  ``tl.device_assert``, an exception in an adapter): a finding of kind
  ``exception``, located at the last frame of user code;
- ``interpreter``: raised inside Triton's machinery while it ran the kernel (a
  construct the installed interpreter cannot run, a compile error): nothing
  was checked, the run is *inconclusive*, never a finding;
- ``mambafuzz``: raised by this project's own engine code (oracle,
  materialisation, recorder hooks): an internal error, also inconclusive.

CUDA faults of a compiled kernel are decided by the engine before it asks here.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

KERNEL, INTERPRETER, MAMBAFUZZ = "kernel", "interpreter", "mambafuzz"

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The project's own kernels (the ones under test, zoo included) count as kernel code; the rest of
# the package, and the GPU check-and-restore kernel, is engine: an exception raised there is ours.
_KERNELS = os.path.join(_HERE, "kernels") + os.sep
_OWN_FILES = (os.path.join(_KERNELS, "check.py"),)
# Helpers a user's adapter calls (pointer views): an error there is the adapter's, not ours.
_USER_FILES = (os.path.join(_HERE, "adapters.py"),)
_LIBRARIES = ("triton", "torch", "numpy", "hypothesis")
_ASSERT_FUNCS = {"create_assert": "tl.device_assert", "create_assume": "tl.assume"}


def _library_dir(name: str) -> str | None:
    try:
        module = __import__(name)
    except ImportError:  # pragma: no cover - all four are dependencies
        return None
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


_LIB_DIRS: dict[str, str] | None = None


def _frame_owner(filename: str) -> str:
    """'triton' | 'torch' | 'numpy' | 'hypothesis' | 'stdlib' | 'mambafuzz' | 'user'."""
    global _LIB_DIRS
    if _LIB_DIRS is None:
        _LIB_DIRS = {n: d for n in _LIBRARIES if (d := _library_dir(n))}
    path = os.path.abspath(filename)
    for name, d in _LIB_DIRS.items():
        if path.startswith(d):
            return name
    if path in _OWN_FILES or (path.startswith(_HERE) and not path.startswith(_KERNELS) and path not in _USER_FILES):
        return "mambafuzz"
    if path.startswith(os.path.dirname(os.__file__) + os.sep) or filename.startswith("<"):
        return "stdlib"
    return "user"


def root_cause(exc: BaseException) -> BaseException:
    """Triton's interpreter wraps a kernel's exception in ``InterpreterError(repr(e)) from e``."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


@dataclass(frozen=True)
class Blame:
    who: str            # KERNEL | INTERPRETER | MAMBAFUZZ
    message: str        # one line, names the construct or the exception
    where: str | None   # "file.py:12: source text" of the last user frame, if any
    traceback: str      # the whole traceback text (for an internal-error file)


# Constructs an older interpreter cannot run: (exception type name, message part, source part,
# what to call it, first Triton release whose interpreter runs it).
KNOWN_LIMITS = (
    ("TypeError", "0-dimensional arrays", "range(",
     "a `for` loop over a bound loaded from memory (`range` over a tensor)", "3.7"),
)


def _where(frame) -> str:
    return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"


def classify(exc: BaseException) -> Blame:
    """Decide who `exc` (raised by running a target) is against."""
    import triton

    root = root_cause(exc)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    frames = traceback.extract_tb(root.__traceback__)
    owners = [_frame_owner(f.filename) for f in frames]
    users = [i for i, o in enumerate(owners) if o == "user"]
    last_user = frames[users[-1]] if users else None
    where = _where(last_user) if last_user is not None else None
    what = f"{type(root).__name__}: {str(root).strip().splitlines()[0] if str(root).strip() else ''}".rstrip(": ")
    innermost = owners[-1] if owners else "stdlib"
    in_triton = any(o == "triton" for o in owners) or type(exc).__name__ == "InterpreterError"

    if isinstance(root, AssertionError) and frames and frames[-1].name in _ASSERT_FUNCS:
        return Blame(KERNEL, f"{_ASSERT_FUNCS[frames[-1].name]} failed: {root}", where, text)
    # the last frame that is not a library's decides between user code and ours
    decider = next((o for o in reversed(owners) if o in ("user", "mambafuzz")), None)
    if innermost == "triton" or (in_triton and decider != "mambafuzz" and innermost != "user"):
        version = triton.__version__
        for name, part, source, construct, first in KNOWN_LIMITS:
            if type(root).__name__ == name and part in str(root) and last_user is not None \
                    and source in (last_user.line or ""):
                return Blame(INTERPRETER, f"Triton {version}'s interpreter cannot run {construct} "
                                          f"({where}); Triton {first} and later can: inconclusive, not a "
                                          f"finding", where, text)
        at = f" at {where}" if where else ""
        return Blame(INTERPRETER, f"Triton {version} failed inside its own code running the kernel{at}: "
                                  f"{what}: inconclusive, not a finding", where, text)
    if decider == "mambafuzz" or decider is None:
        inner = frames[-1] if frames else None
        at = f" ({os.path.basename(inner.filename)}:{inner.lineno} in {inner.name})" if inner else ""
        return Blame(MAMBAFUZZ, f"internal error in mambafuzz{at}: {what}", where, text)
    return Blame(KERNEL, f"{what} (raised at {where})", where, text)

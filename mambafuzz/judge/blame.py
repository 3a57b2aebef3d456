"""Who an exception raised while running a target is against.

A verdict is only as good as its worst path: an exception is a finding only
when it comes from the kernel or the user's own code.  Three answers:

- ``kernel``: raised by the user's function or the kernel's own logic (a
  ``tl.device_assert``, an exception in an adapter): a finding of kind
  ``exception``, located at the last frame of user code;
- ``compile``: Triton's compiler rejected the kernel for this input (say an
  integer argument specialised to the constant 1, then ``.to()`` on it): a
  finding of kind ``compile`` against the kernel, naming the kernel line, the
  compiler's message and the specialised arguments (:func:`compile_failure`);
- ``interpreter``: raised inside Triton's machinery while it ran the kernel (a
  construct the installed interpreter cannot run): nothing was checked, the
  run is *inconclusive*, never a finding;
- ``mambafuzz``: raised by this project's own engine code (oracle,
  materialisation, recorder hooks): an internal error, also inconclusive.

CUDA faults of a compiled kernel are decided by the engine before it asks here.
"""
from __future__ import annotations

import linecache
import os
import traceback
from dataclasses import dataclass

from mambafuzz.errors import InterpreterGap

KERNEL, COMPILE, INTERPRETER, MAMBAFUZZ = "kernel", "compile", "interpreter", "mambafuzz"

# the package's folder (this file is in judge/): every frame under it but the kernels is ours
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# The project's own kernels (the ones under test, zoo included) count as kernel code; the rest of
# the package, and the GPU check-and-restore kernel (judge/check.py), is engine: an exception raised there is ours.
_KERNELS = os.path.join(_HERE, "kernels") + os.sep
_OWN_FILES = (os.path.join(_HERE, "judge", "check.py"),)
# Helpers a user's adapter calls (pointer views): an error there is the adapter's, not ours.
_USER_FILES = (os.path.join(_HERE, "adapters.py"),)
_LIBRARIES = ("triton", "torch", "numpy", "hypothesis")
# A recorder hook that makes an op on its caller's behalf: (file, function) -> the hook frame that calls
# it.  An exception out of the op is the caller's (a user's torch call refused by torch), so both frames
# read as torch's; an exception from the hook's own code is still ours.
_FORWARDERS = {(os.path.join(_HERE, "racecheck", "allocations.py"), "forward"): "__torch_dispatch__"}
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


def _owners(frames: list[traceback.FrameSummary]) -> list[str]:
    """Each frame's owner (``_frame_owner``), a forwarded op's frames (``_FORWARDERS``) as torch's."""
    owners = [_frame_owner(f.filename) for f in frames]
    for i, f in enumerate(frames):
        caller = _FORWARDERS.get((os.path.abspath(f.filename), f.name))
        if caller is not None:
            owners[i] = "torch"
            if i and frames[i - 1].name == caller and frames[i - 1].filename == f.filename:
                owners[i - 1] = "torch"
    return owners


def chain_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The whole stack at the point the root cause was raised, outermost first.

    Triton's interpreter wraps an exception twice when a Triton library function (``tl.zeros``,
    ``tl.sum``, ``tl.cdiv``: ``@jit`` functions it runs like the kernel) raises inside a kernel: the
    root's traceback starts in the interpreter's call of that function, and the kernel's own frame (the
    line that called it) is only in the wrapper's.  Each exception's traceback runs from the frame that
    caught it down to where it was raised, so the chain is joined where an outer traceback's last frame
    is the inner one's first."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__
    frames: list = []
    below = None  # the frame object the previous (outer) traceback ended in
    for item in chain:
        tb, entries = item.__traceback__, []
        while tb is not None:
            entries.append((tb.tb_frame, tb))
            tb = tb.tb_next
        if frames and entries and entries[0][0] is below:
            frames.pop()  # the same frame: the inner exception's entry has the line that raised it
        for _, tb in entries:
            frames.append(traceback.extract_tb(tb, limit=1)[0])
        below = entries[-1][0] if entries else None
    return frames


def root_cause(exc: BaseException) -> BaseException:
    """Triton's interpreter wraps a kernel's exception in ``InterpreterError(repr(e)) from e``."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


@dataclass(frozen=True)
class Blame:
    who: str            # KERNEL | COMPILE | INTERPRETER | MAMBAFUZZ
    message: str        # one line, names the construct or the exception
    where: str | None   # "file.py:12: source text" of the last user frame, if any
    traceback: str      # the whole traceback text (for an internal-error file)


# Constructs an interpreter cannot run: (exception type name, message part, source part, what to
# call it, what to do).  mambafuzz mends the loaded loop bound on 3.5/3.6 (mambafuzz.interp); the entry
# stays for a bound it does not mend (not an integer) and for a kernel run outside its adapters.
KNOWN_LIMITS = (
    ("TypeError", "0-dimensional arrays", "range(",
     "a `for` loop over a bound loaded from memory (`range` over a tensor)",
     "Triton 3.7 and later can"),
    ("NotImplementedError", "inline_asm not supported", "inline_asm_elementwise(",
     "inline assembly (`tl.inline_asm_elementwise`)",
     "no release's interpreter can (a --device cuda run checks it)"),
    ("NotImplementedError", "Block pointers have been removed", "make_block_ptr(",
     "block pointers (`tl.make_block_ptr`)",
     "Triton 3.5 to 3.8 can (pip install 'triton<3.9' for the CPU check), or a --device cuda run"),
)


def _where(frame) -> str:
    return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"


def classify(exc: BaseException) -> Blame:
    """Decide who `exc` (raised by running a target) is against."""
    import triton  # deferred: Triton: loaded with the kernels, after the device is chosen

    root = root_cause(exc)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    frames = traceback.extract_tb(root.__traceback__)
    owners = _owners(frames)
    # where: the last user frame of the whole stack, the kernel's line when a Triton library function
    # it called raised (its frame is in the wrapper's traceback, not the root's)
    stack = chain_frames(exc)
    users = [f for f in stack if _frame_owner(f.filename) == "user"]
    last_user = users[-1] if users else None
    where = _where(last_user) if last_user is not None else None
    what = f"{type(root).__name__}: {str(root).strip().splitlines()[0] if str(root).strip() else ''}".rstrip(": ")
    innermost = owners[-1] if owners else "stdlib"
    in_triton = any(o == "triton" for o in owners) or type(exc).__name__ == "InterpreterError"

    if isinstance(root, InterpreterGap):     # a construct the interpreter mends name as out of reach
        at = f" ({where})" if where else ""
        return Blame(INTERPRETER, f"Triton {triton.__version__}'s interpreter cannot run {root}{at}: "
                                  "inconclusive, not a finding", where, text)
    failure = compile_failure(exc)
    if failure is not None:
        return Blame(COMPILE, failure.line(), failure.where, text)
    if isinstance(root, AssertionError) and frames and frames[-1].name in _ASSERT_FUNCS:
        return Blame(KERNEL, f"{_ASSERT_FUNCS[frames[-1].name]} failed: {root}", where, text)
    # the last frame that is not a library's decides between user code and ours
    decider = next((o for o in reversed(owners) if o in ("user", "mambafuzz")), None)
    if innermost == "triton" or (in_triton and decider != "mambafuzz" and innermost != "user"):
        version = triton.__version__
        for name, part, source, construct, advice in KNOWN_LIMITS:
            if type(root).__name__ == name and part in str(root) and last_user is not None \
                    and source in (last_user.line or ""):
                return Blame(INTERPRETER, f"Triton {version}'s interpreter cannot run {construct} "
                                          f"({where}); {advice}: inconclusive, not a finding", where, text)
        at = f" (at {where})" if where else ""
        runner = "'s interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else " (compiled)"
        return Blame(INTERPRETER, f"Triton {version}{runner} failed running the kernel: {what}{at}: "
                                  f"inconclusive, not a finding", where, text)
    if decider == "mambafuzz" or decider is None:
        inner = frames[-1] if frames else None
        at = f" ({os.path.basename(inner.filename)}:{inner.lineno} in {inner.name})" if inner else ""
        return Blame(MAMBAFUZZ, f"internal error in mambafuzz{at}: {what}", where, text)
    return Blame(KERNEL, f"{what} (raised at {where})", where, text)


# --------------------------------------------------------------------------
# compile errors: Triton's compiler rejected the kernel for this input
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileFailure:
    """What a user needs to fix a kernel Triton would not compile for one input."""

    kernel: str               # the @triton.jit function the error is in
    where: str | None         # "file.py:12: source text" of the kernel line the compiler points at
    message: str              # the compiler's own message, one line
    specialised: tuple        # "name=value (why)" of each argument Triton specialised for this launch

    def line(self) -> str:
        spec = f"; specialised: {', '.join(self.specialised)}" if self.specialised else ""
        at = f" at {self.where}" if self.where else ""
        return f"Triton could not compile {self.kernel}{at}: {self.message}{spec}"


def _compilation_error(exc: BaseException):
    """The first triton CompilationError in exc's cause/context chain, or None."""
    try:
        from triton.compiler.errors import CompilationError  # deferred: Triton: loaded with the kernels, after the device is chosen
    except ImportError:  # pragma: no cover - every supported release has it
        return None
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, CompilationError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _frames(exc: BaseException):
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _def_line(jit_fn) -> tuple[str, int] | None:
    """(file, line of ``def``) of a JITFunction: its source starts at the decorators."""
    fn = getattr(jit_fn, "fn", None)
    code = getattr(fn, "__code__", None)
    start = getattr(jit_fn, "starting_line_number", None)
    if code is None or start is None:
        return None
    for i, text in enumerate(getattr(jit_fn, "raw_src", None) or ()):
        if text.strip().startswith("def "):
            return code.co_filename, start + i
    return code.co_filename, start


def _specialised(jit_fn, args, kwargs) -> tuple:
    """The arguments this launch compiled as constants: constexpr parameters and integers equal to 1."""
    params = getattr(jit_fn, "params", None) or ()
    names = [p.name for p in params]
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    out = []
    for p in params:
        if p.name not in values:
            continue
        v = values[p.name]
        if getattr(p, "is_constexpr", False):
            out.append(f"{p.name}={v!r} (constexpr)")
        elif isinstance(v, int) and not isinstance(v, bool) and v == 1 and not getattr(p, "do_not_specialize", False):
            out.append(f"{p.name}=1 (an int equal to 1 is compiled as the constant 1)")
    return tuple(out)


def compile_failure(exc: BaseException) -> CompileFailure | None:
    """Describe a Triton compile error raised by launching a kernel; None for any other exception.

    The compiler's error names a line relative to the function it was compiling
    (``at 3:16``); the frames still hold that function (the code generator's
    ``jit_fn``) and the launch (``JITFunction.run``'s ``self``, args and kwargs).
    """
    err = _compilation_error(exc)
    if err is None:
        return None
    src = getattr(err, "src", None)
    launched, launch_args, launch_kwargs, compiled = None, (), {}, None
    for frame in _frames(err):
        me = frame.f_locals.get("self")
        if frame.f_code.co_name == "run" and hasattr(me, "params") and launched is None:
            launched = me
            launch_args = frame.f_locals.get("args", ())
            launch_kwargs = frame.f_locals.get("kwargs", {})
        jit_fn = getattr(me, "jit_fn", None)
        if jit_fn is not None and getattr(jit_fn, "src", None) == src:
            compiled = jit_fn
    compiled = compiled or launched
    where = None
    node_line = getattr(getattr(err, "node", None), "lineno", None)
    if compiled is not None and node_line is not None and (at := _def_line(compiled)) is not None:
        filename, def_line = at
        line = def_line + node_line - 1
        where = f"{os.path.basename(filename)}:{line}: {linecache.getline(filename, line).strip()}"
    message = err.error_message if getattr(err, "error_message", None) else str(err).strip().splitlines()[-1:]
    if isinstance(message, list):
        message = message[0] if message else type(err).__name__
    message = " ".join(str(message).split())
    name = getattr(getattr(compiled, "fn", None), "__name__", None) or "the kernel"
    spec = _specialised(launched, launch_args, launch_kwargs) if launched is not None else ()
    return CompileFailure(name, where, message, spec)

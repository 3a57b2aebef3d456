"""mambafuzz's one error hierarchy: what went wrong, and so which exit code it is.

- ``UsageError`` (and its kinds): bad input from the user; one line, exit 2.
- ``Inconclusive``: nothing could be checked on a case (an interpreter that
  cannot run the kernel); the target's verdict is inconclusive, exit 3.
- ``InternalError``: mambafuzz's own code failed; never a finding against the
  kernel; its traceback goes to a file; exit 3.
- ``Failure``: ``mambafuzz.check`` found the kernel wrong (a finding); exit 1.
- ``Rejected``: the target declines a case (``mambafuzz.reject``); counted, never a finding.
"""
import traceback


class MambafuzzError(Exception):
    """Base of every error mambafuzz raises on purpose."""


class UsageError(MambafuzzError):
    """Bad input from the user: options, files, targets, devices."""


class CaseError(UsageError):
    """A case that cannot be materialised or checked (impossible geometry, ill-posed batch)."""


class CrashFileError(UsageError):
    """A crash file that is unreadable, malformed, or written by a newer schema."""


class Inconclusive(MambafuzzError):
    """The run could not check the kernel on this case; the message says why in one line."""


class InterpreterGap(Inconclusive, NotImplementedError):
    """A construct Triton's interpreter cannot run and mambafuzz does not mend (raised by ``interp``):
    the message names it and what to do; the run is inconclusive, never a finding."""


class InternalError(MambafuzzError):
    """mambafuzz itself failed; ``traceback`` holds the full text for the error file."""

    def __init__(self, message: str, traceback: str = ""):
        super().__init__(message)
        self.traceback = traceback

    @classmethod
    def of(cls, step: str, exc: BaseException) -> "InternalError":
        """`exc`, raised by mambafuzz's own code while `step`, with its traceback."""

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(f"internal error in mambafuzz while {step}: {type(exc).__name__}: {exc}", text)


class Failure(MambafuzzError, AssertionError):
    """``mambafuzz.check`` found the target wrong: the shrunk case, the verdict, the crash file, how to replay.

    Also an ``AssertionError`` so that test runners count it as a failed test, not an error.
    ``str()`` is the whole report (verdict summary, witness, case, file, replay command).
    Attributes: ``finding`` (``findings.Finding``), ``case``, ``verdict``, ``summary``, ``path``
    (the crash file or None), ``replay`` (a ``mambafuzz replay`` command, or None when the target
    cannot be imported by name), ``rerun`` (how to run the test again, or None), ``replayed``
    (True when a saved crash file still failed before any fuzzing), ``report`` (the TargetReport,
    None for a replayed file).
    """

    def __init__(self, message: str, *, finding=None, replay: str | None = None, rerun: str | None = None,
                 replayed: bool = False, report=None):
        super().__init__(message)
        self.finding, self.replay, self.rerun, self.replayed, self.report = finding, replay, rerun, replayed, report
        self.case = finding.case if finding is not None else None
        self.verdict = finding.verdict if finding is not None else None
        self.summary = finding.verdict.summary() if finding is not None else message
        self.path = finding.path if finding is not None else None


class Rejected(MambafuzzError):
    """The target declines an input it does not support (``mambafuzz.reject(why)``, or raise it).

    Not a finding and not evidence: the example is counted as rejected, with
    its reason, and Hypothesis draws another.  ``reason`` is the target's words
    on one line; ``str()`` says who rejected the case.  Recognised wherever the
    target's call raises it (the adapter, a launcher, the interpreted kernel).
    """

    def __init__(self, reason: str = ""):
        self.reason = " ".join(str(reason).split())[:200] or "no reason given"
        super().__init__(f"the target rejected the case: {self.reason}")


class OverBudget(Rejected):
    """The case needs more memory than this worker may allocate (its share of a GPU several workers
    share, ``control.mps``): declined before anything is allocated, counted as a rejection by this reason,
    never a finding and never a checked example."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.args = (f"the case does not fit this worker's memory: {self.reason}",)

    def __str__(self) -> str:
        return self.args[0]


def rejection(exc: BaseException | None) -> Rejected | None:
    """The ``Rejected`` that `exc` is or was raised from (Triton's interpreter re-raises what a kernel
    raised as ``InterpreterError(...) from e``), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Rejected):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None

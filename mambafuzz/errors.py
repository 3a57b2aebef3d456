"""mambafuzz's one error hierarchy: what went wrong, and so which exit code it is.

- ``UsageError`` (and its kinds): bad input from the user; one line, exit 2.
- ``Inconclusive``: nothing could be checked on a case (an interpreter that
  cannot run the kernel); the target's verdict is inconclusive, exit 3.
- ``InternalError``: mambafuzz's own code failed; never a finding against the
  kernel; its traceback goes to a file; exit 3.
"""


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


class InternalError(MambafuzzError):
    """mambafuzz itself failed; ``traceback`` holds the full text for the error file."""

    def __init__(self, message: str, traceback: str = ""):
        super().__init__(message)
        self.traceback = traceback

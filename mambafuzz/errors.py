"""Errors a user can cause; the CLI turns each into one line and exit code 2."""


class UsageError(Exception):
    """Bad input from the user: options, files, targets, devices."""


class CaseError(UsageError):
    """A case that cannot be materialised or checked (impossible geometry, ill-posed batch)."""


class CrashFileError(UsageError):
    """A crash file that is unreadable, malformed, or written by a newer schema."""

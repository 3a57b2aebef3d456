"""Ctrl-C and SIGTERM stop a run between examples, never in the middle of one.

A signal that raised ``KeyboardInterrupt`` wherever Python happened to be
could land inside Hypothesis' shrinker, a crash-file write or the live view,
and lose what was found.  So the first SIGINT/SIGTERM only sets a flag; the
fuzz loop polls it (``check``) before every example, where stopping is safe,
and the run reports what it has.  A second signal raises ``KeyboardInterrupt``
at once, for a kernel that never returns.

Once the verdict is decided and printed, no signal changes it: ``hold``
ignores both until the process exits (past interpreter shutdown, where
Python's handlers are gone and SIGINT would kill the process with 130).
"""
from __future__ import annotations

import signal
import threading

_requested = threading.Event()
_installed = False
_previous: dict = {}  # the handlers install() replaced, for uninstall()
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(BaseException):
    """Raised at a safe point after a stop signal.  A BaseException so that
    Hypothesis does not take it for a failure of the example."""


def _handler(signum, frame):
    if _requested.is_set():
        raise KeyboardInterrupt
    _requested.set()


def install() -> None:
    """Route SIGINT and SIGTERM to the flag (main thread only; idempotent)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _SIGNALS:
        previous = signal.signal(signum, _handler)
        if previous is not _handler:
            _previous[signum] = previous
    _installed = True


def uninstall() -> None:
    """Put back the handlers install() replaced (main thread only)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_previous.items()):
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _previous.clear()
    _installed = False


def hold() -> None:
    """The verdict is out: ignore SIGINT and SIGTERM from now on, so the exit code stands."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def requested() -> bool:
    return _requested.is_set()


def request() -> None:
    _requested.set()


def reset() -> None:
    _requested.clear()


def check() -> None:
    """Raise StopRequested if a stop was asked for."""
    if _requested.is_set():
        raise StopRequested

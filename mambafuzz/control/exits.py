"""Exit codes: each means one thing, and ``exit_code`` is the one function that picks one.

Every command (fuzz, smoke, zoo, replay, collect, selfcheck, the CLI's errors), every worker process
(a session's, a fleet box's, the CPU witness child) and ``mambafuzz.check`` (what the pytest plugin
runs) say how they ended in words (``STATUS_CODES``: a target's status, a replayed file's, a worker's)
or hand over the exception that ended them (``ERROR_CODES``); ``exit_code`` turns that into the code.
No other module in mambafuzz writes an exit status as a number (tests/unit/test_outcome.py checks).
"""
from __future__ import annotations

import textwrap

from mambafuzz.control.interrupt import StopRequested
from mambafuzz.errors import UsageError

EXIT_CLEAN = 0          # every target clean, with enough valid examples
EXIT_FINDINGS = 1       # at least one finding (wins over everything else)
EXIT_USAGE = 2          # bad usage or input: one line on stderr, nothing run
EXIT_INCONCLUSIVE = 3   # something could not be checked: too few valid examples, an interpreter that
#                         cannot run the kernel, a target not run, an internal error of mambafuzz
EXIT_INTERRUPTED = 130  # stopped by Ctrl-C / SIGTERM with nothing found

# A session worker's own exit status, read by its parent (run/session.py), never a command's exit code:
WORKER_DONE = 0          # it ran its targets (or stopped on a signal) and said so
WORKER_CONTEXT_LOST = 17  # a fault broke its CUDA context; it reported the fault: start a fresh worker
WORKER_NO_DEVICE = 18    # it could not open its GPU (an MPS server still letting its clients go): a false start

TABLE = (
    (EXIT_CLEAN, "clean: every target checked with enough valid examples, nothing found"),
    (EXIT_FINDINGS, "findings (saved under crashes/); a zoo variant escaped; a replayed crash still fails"),
    (EXIT_USAGE, "bad usage or input (one line on stderr)"),
    (EXIT_INCONCLUSIVE, "inconclusive: too few valid examples, all draws rejected, an interpreter that "
                        "cannot run the kernel, a target not run, or an internal error"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGTERM) with nothing found"),
)


def table_text(width: int = 79) -> str:
    """The table for --help, wrapped to fit 80 columns."""

    lines = ["exit codes:"]
    for code, text in TABLE:
        lines += textwrap.wrap(text, width, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
    return "\n".join(lines)


# A status word -> its code.  Targets: finding | clean | inconclusive | interrupted; zoo rows: escaped |
# caught; replayed files: still failing | fixed | could not run | inconclusive; workers: done |
# context lost | no device.  A word not listed is inconclusive (nothing says it was checked).
STATUS_CODES = {
    "finding": EXIT_FINDINGS, "escaped": EXIT_FINDINGS, "still failing": EXIT_FINDINGS,
    "could not run": EXIT_USAGE,
    "interrupted": EXIT_INTERRUPTED,
    "inconclusive": EXIT_INCONCLUSIVE,
    "clean": EXIT_CLEAN, "caught": EXIT_CLEAN, "fixed": EXIT_CLEAN,
    "context lost": WORKER_CONTEXT_LOST, "no device": WORKER_NO_DEVICE, "done": WORKER_DONE,
}
# Which code wins when the words differ: a finding over everything, bad input over what was not run, ...
SEVERITY = (EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED, WORKER_CONTEXT_LOST, WORKER_NO_DEVICE, EXIT_INCONCLUSIVE,
            EXIT_CLEAN)


# The exception that ended a command -> its code: the first class that matches.
ERROR_CODES = (
    (UsageError, EXIT_USAGE),
    (SystemExit, EXIT_USAGE),               # argparse's own error (cli.parser.BadUsage), printed already
    (KeyboardInterrupt, EXIT_INTERRUPTED),  # a second signal: stopped at once
    (StopRequested, EXIT_INTERRUPTED),
    (Exception, EXIT_INCONCLUSIVE),         # a bug of mambafuzz: never 1, which means findings
)


def exit_code(statuses=(), interrupted: bool = False, *, error: BaseException | None = None) -> int:
    """The one exit code: of the exception that ended the run (`error`), else of its status words
    (the most severe wins; none at all is inconclusive: nothing checked is not clean).  `interrupted`:
    a stop signal came, which counts as the word "interrupted"."""
    if error is not None:
        return next((code for kind, code in ERROR_CODES if isinstance(error, kind)), EXIT_INCONCLUSIVE)
    codes = {STATUS_CODES.get(s, EXIT_INCONCLUSIVE) for s in statuses}
    if interrupted:
        codes.add(EXIT_INTERRUPTED)
    return next((code for code in SEVERITY if code in codes), EXIT_INCONCLUSIVE)

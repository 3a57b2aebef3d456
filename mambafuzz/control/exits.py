"""Exit codes: each means one thing; the functions here are the only place that picks one.

``exit_code`` (fuzz, smoke), ``zoo_exit_code`` and ``replay_exit_code`` turn
a command's results into its code; the CLI uses the names below for the rest.
No other module in mambafuzz writes an exit status as a number
(tests/unit/test_outcome.py checks).
"""
from __future__ import annotations

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
    import textwrap

    lines = ["exit codes:"]
    for code, text in TABLE:
        lines += textwrap.wrap(text, width, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
    return "\n".join(lines)


def exit_code(statuses: list[str], interrupted: bool = False) -> int:
    """From target statuses (finding | clean | inconclusive | interrupted) to one exit code."""
    if "finding" in statuses:
        return EXIT_FINDINGS
    if interrupted or "interrupted" in statuses:
        return EXIT_INTERRUPTED
    if not statuses or any(s != "clean" for s in statuses):
        return EXIT_INCONCLUSIVE
    return EXIT_CLEAN


def zoo_exit_code(escaped: bool, all_caught: bool, interrupted: bool = False) -> int:
    """zoo: a variant escaped (ran clean, or was found as a kind its row does not declare) gives 1;
    else one not caught (not checked, not run) gives 130 if interrupted, 3 if not; else 0."""
    if escaped:
        return EXIT_FINDINGS
    if not all_caught:
        return EXIT_INTERRUPTED if interrupted else EXIT_INCONCLUSIVE
    return EXIT_CLEAN


def replay_exit_code(still_failing: bool, could_not_run: bool, inconclusive: bool) -> int:
    """replay: a file still fails gives 1; else one could not run (bad input, or no file) 2; else one
    inconclusive 3; else 0."""
    if still_failing:
        return EXIT_FINDINGS
    if could_not_run:
        return EXIT_USAGE
    return EXIT_INCONCLUSIVE if inconclusive else EXIT_CLEAN

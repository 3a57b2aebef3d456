"""Exit codes: each means one thing, and one function makes them from target statuses."""
from __future__ import annotations

EXIT_CLEAN = 0          # every target clean, with enough valid examples
EXIT_FINDINGS = 1       # at least one finding (wins over everything else)
EXIT_USAGE = 2          # bad usage or input: one line on stderr, nothing run
EXIT_INCONCLUSIVE = 3   # something could not be checked: too few valid examples, an interpreter that
#                         cannot run the kernel, a target not run, an internal error of mambafuzz
EXIT_INTERRUPTED = 130  # stopped by Ctrl-C / SIGTERM with nothing found

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

"""What the command line prints: the consoles (rich, made at first use), tables that fit 80 columns,
the plain lines a user copies (never wrapped by us), the live view, and ``--json``'s one document.

With ``--json`` everything a run prints goes to stderr and the document alone to stdout
(``stdout_to_stderr``, ``emit``).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap

from mambafuzz.control.exits import EXIT_INTERRUPTED


class _Console:
    """A rich Console made at its first use: rich takes longer to import than ``--help`` to run."""

    def __init__(self, **options):
        self.options, self.console = options, None

    def print(self, *args, **kwargs) -> None:
        if self.console is None:
            from rich.console import Console  # deferred: rich takes longer to import than --help to run
            self.console = Console(**self.options)
        self.console.print(*args, **kwargs)


out = _Console(soft_wrap=True)


err = _Console(stderr=True, soft_wrap=True)


def print_coverage(reports, summary: bool = False) -> None:
    """Per target, how many examples drew each feature's buckets; a warning (for a target with no finding)
    about the buckets its contract draws that this run never did.  Lines fit 80 columns.  `summary`
    (smoke without --coverage): one line for the whole run instead."""
    from mambafuzz.search.features import summary_lines  # deferred: the fuzz loop imports Hypothesis, numpy and the engine: only for a run

    if summary:
        from mambafuzz.report.tables import coverage_summary  # deferred: rich, only for a run's output
        print(coverage_summary(reports))
        return
    for r in reports:
        for line in summary_lines(r.target, r.tally, warn=r.finding is None, options=r.options):
            print(line)


def short_share_lines(reports, width: int = 80) -> list[str]:
    """A NOTE (lines within ``width``) naming the targets that --time stopped, with no finding,
    after fewer than twice the examples a verdict needs: too short a share to trust much, and
    the cure (a longer --time) is the user's to choose."""
    short = [r for r in reports if r.finding is None and r.stop == "time" and r.examples < 2 * r.min_examples]
    if not short:
        return []
    names = ", ".join(f"{r.target} ({r.examples})" for r in short)
    text = (f"NOTE --time stopped {len(short)} target(s) with no finding after few examples: {names}. "
            f"A share that short says little; a longer --time gives every target more.")
    return textwrap.wrap(text, width=width, subsequent_indent="      ", break_on_hyphens=False)


def report_table(reports, title: str):
    """Counts only, so it fits 80 columns; details follow as plain lines (``details``)."""
    from mambafuzz.report.tables import report_table as table  # deferred: rich takes longer to import than --help to run

    return table(reports, title)[0]


def details(reports, device: str) -> list[str]:
    """Plain lines (never wrapped by us): each finding with its case, file and replay command; why each
    inconclusive target is so."""
    from mambafuzz.findings import replay_command  # deferred: crash files import the engine (numpy, the contracts)

    lines = []
    for r in reports:
        f = r.finding
        if f is not None:
            kind = f.verdict.kind + (", deterministic" if f.deterministic else "")
            lines.append(f"FINDING {r.target} ({kind}): {f.verdict.summary()}")
            lines.append(f"  case: {f.case.describe()}")
            lines.append(f"  {f.shrink_line()}")
            lines += [f"  {line}" for line in f.gpu_lines()]
            if f.path:
                lines.append(f"  saved: {f.path}{'' if r.written else ' (known already)'}")
                lines.append(f"  replay: {replay_command(f.path, f)}")
        elif r.status in ("inconclusive", "interrupted") and r.why:
            lines.append(f"{r.status.upper()} {r.target}: {r.why}")
        for kernel, why in r.uninstrumented.items():
            lines.append(f"NOTE {r.target}: kernel {kernel} ran without warp delays: {why}")
    return lines


REPORT_SCHEMA = 1  # the JSON reports' shape (README "JSON reports"); bump on an incompatible change


def report_json(command: str, device: str, mode: str | None, interrupted: bool, code: int, **body) -> str:
    """One JSON document for fuzz, smoke, zoo and replay: the same envelope, then "targets" or "files"."""
    return json.dumps({"schema": REPORT_SCHEMA, "command": command, "device": device, "mode": mode,
                       "interrupted": interrupted, "exit_code": code, **body}, indent=2)


class View:
    """A live table on a terminal; in a pipe (a CI log) one plain line per finished target, on stderr."""

    def __init__(self, title: str, quiet: bool):
        self.title = title
        from rich.console import Console  # deferred: rich takes longer to import than --help to run
        from rich.live import Live  # deferred: rich takes longer to import than --help to run

        self.console = Console(stderr=True, quiet=quiet)
        self.live = None
        if self.console.is_terminal and not quiet:
            # transient: the final table is printed once, after the run (``print_reports``)
            self.live = Live(report_table([], title), console=self.console, refresh_per_second=4,
                             transient=True)
        self.said: dict[str, str] = {}
        self.quiet = quiet

    def __enter__(self):
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)
        return False

    def update(self, reports) -> None:
        if self.live is not None:
            self.live.update(report_table(reports, self.title))
            return
        from mambafuzz.report.tables import progress_line  # deferred: rich, only for a run's output

        for r in reports:  # a line when a turn ends, of the numbers the final table shows
            if r.finished and not self.quiet and self.said.get(r.target) != (line := progress_line(r)):
                again = r.target in self.said
                self.said[r.target] = line
                print(progress_line(r, again=again), file=sys.stderr, flush=True)


def print_reports(reports, title: str, device: str) -> None:
    from mambafuzz.report.tables import report_table as table  # deferred: rich, only for a run's output

    rendered, notes = table(reports, title)
    out.print(rendered)
    for line in notes:
        print(line)
    for line in details(reports, device):
        print(line, flush=True)


def option_lines(width: int = 80) -> list[str]:
    """The contract options (what a user's kernel supports), each naming the contracts it applies to,
    wrapped to `width` between words."""
    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

    lines = ["", "contract options (fuzz --flag VALUE; mambafuzz.check(fn, contract, name=VALUE)):"]
    for o in contracts.options():
        default = f" (default {o.default})" if o.default is not None else ""
        text = f"{o.flag} {'|'.join(map(str, o.choices))}{default}: {o.text()}"
        lines += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="    ",
                               break_long_words=False, break_on_hyphens=False)
    return lines


def description_lines(targets, width: int = 80) -> list[str]:
    """Each target's name, its zoo bug kind, its description: wrapped to `width` between words."""
    lines = []
    for t in targets:
        text = f"{t.name}{f' [{t.bug}]' if t.bug else ''}: {t.description}"
        lines += textwrap.wrap(text, width=width, subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False)
    return lines


def zoo_escape_lines(report, kinds: tuple[str, ...], device: str, width: int = 80) -> list[str]:
    """Why a zoo row with a finding still escaped: its kind is not how the bug shows on `device`."""
    verdict = report.finding.verdict
    why = (verdict.summary().splitlines() or [""])[0]
    text = (f"ESCAPED {report.target}: a finding of kind {verdict.kind}, but on {device} this bug "
            f"is caught as {' or '.join(kinds)} ({why})")
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


def replay_table(rows, device: str):
    """Short cells only, a target's name broken between its parts (``report.tables``), and the lines
    naming a name it shortened; each file's path and detail follow as plain lines (``replay_lines``)."""
    from mambafuzz.report.tables import table  # deferred: rich takes longer to import than --help to run

    cells = []
    for i, r in enumerate(rows, 1):
        style = {"still failing": "red", "fixed": "green"}.get(r.status, "yellow")
        cells.append([str(i), r.target, f"[{style}]{r.status}[/]", r.rate()])
    return table(f"replay ({device})", ["#", "target", "status", "k/N"], cells, name_column=1, right=("#",))


def replay_lines(rows, width: int = 80) -> list[str]:
    """Per file, numbered as in the table: its path whole on a line of its own, then its detail
    wrapped to `width` between words (a path or source line in it stays whole)."""
    lines = []
    for i, r in enumerate(rows, 1):
        lines.append(f"{i} {r.path}")
        for text in (r.detail(), r.divergence()):     # the divergence is a fact on a line of its own
            if text:
                lines += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="  ",
                                       break_long_words=False, break_on_hyphens=False)
    return lines


DOCUMENT = [None]  # where --json's one document goes: the process's stdout as it was at the start


EMITTED = [False]  # whether this run's document is out (main adds one for an error only when not)


def emit(text: str) -> None:
    """Write the --json document (or a listing) to the real stdout, whatever the run printed."""
    stream = DOCUMENT[0] or sys.stdout
    stream.write(text + "\n")
    stream.flush()
    EMITTED[0] = True


def error_json(command: str | None, device: str | None, message: str, code: int) -> str:
    """The one document of a --json run that failed before it had one: the error and the exit code."""
    body = {"files": []} if command == "replay" else {"targets": []}
    return report_json(command, device, None, code == EXIT_INTERRUPTED, code, error=message, **body)


@contextlib.contextmanager
def stdout_to_stderr(active: bool):
    """With --json, everything else a run prints (a kernel's print, Triton's compiler dumps, a C
    library writing to fd 1) goes to stderr, so stdout is one JSON document."""
    if not active:
        yield
        return
    old = sys.stdout
    old.flush()
    try:
        on_fd1 = old.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a captured or replaced stream (tests, notebooks)
        on_fd1 = False
    saved = os.dup(1) if on_fd1 else None
    document = os.fdopen(saved, "w", closefd=True) if on_fd1 else old
    if on_fd1:
        os.dup2(2, 1)
    sys.stdout, DOCUMENT[0] = sys.stderr, document
    try:
        yield
    finally:
        sys.stdout.flush()
        if on_fd1:
            os.dup2(saved, 1)
        sys.stdout, DOCUMENT[0] = old, None
        if on_fd1:
            document.close()

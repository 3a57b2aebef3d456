"""The CLI's tables at 80 columns, and the plain lines made of the same numbers.

A target's name (``module:function``, ``zoo.CP-SHORTSTORE``) is what a user
looks for in a table, so it is never cut inside a word: the name column gets
what the other columns leave of ``WIDTH``, and a name wider than that breaks
after a ``:`` ``.`` ``_`` ``-`` or ``/`` only.  A part that alone is wider than
the column is shortened in the middle (``…``), and the table is followed by a
line with the whole name.  The fuzz table's cells (``report_cells``) are also
what the progress lines in a CI log say (``progress_line``), so the two agree.
"""
from __future__ import annotations

import re

WIDTH = 80
BREAK_AFTER = ":._-/"
ELLIPSIS = "…"
SHRINK_LEGEND = "a finding's examples and time: to the first failure + shrinking it"
_PARTS = re.compile(rf"[^{re.escape(BREAK_AFTER)}]*[{re.escape(BREAK_AFTER)}]|[^{re.escape(BREAK_AFTER)}]+$")


def parts(name: str) -> list[str]:
    """`name` split after each boundary character (joined, they are `name`)."""
    return _PARTS.findall(name) or [name]


def wrap_name(name: str, width: int) -> list[str] | None:
    """`name` in lines of at most `width`, broken after boundary characters only; None when one
    part alone is wider than `width`."""
    lines, line = [], ""
    for part in parts(name):
        if len(part) > width:
            return None
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return lines + [line] if line else lines


def shorten(name: str, width: int) -> str:
    """`name` in `width` columns, its middle replaced by an ellipsis (head and tail kept)."""
    if len(name) <= width:
        return name
    keep = max(width - 1, 2)
    head = (keep + 1) // 2
    return name[:head] + ELLIPSIS + name[len(name) - (keep - head):]


def name_cell(name: str, width: int) -> tuple[str, bool]:
    """The name as a table cell at most `width` wide (lines joined by newlines), and whether it
    had to be shortened (the caller prints the whole name after the table)."""
    lines = wrap_name(name, width)
    if lines is not None:
        return "\n".join(lines), False
    return shorten(name, width), True


def _cell_width(cell: str) -> int:
    from rich.text import Text  # deferred: rich takes longer to import than --help to run

    return max((Text.from_markup(line).cell_len for line in cell.split("\n")), default=0)


def table(title: str, headers: list[str], rows: list[list[str]], *, name_column: int = 0,
          right: tuple[str, ...] = (), width: int = WIDTH):
    """A rich Table of `rows` at most `width` columns wide, the name column's names never cut inside
    a word; and the plain lines naming any name it had to shorten."""
    from rich.table import Table  # deferred: rich takes longer to import than --help to run

    others = sum(max([_cell_width(h)] + [_cell_width(r[i]) for r in rows])
                 for i, h in enumerate(headers) if i != name_column)
    room = width - others - (3 * len(headers) + 1)  # heavy-head box: a border and padding per column
    longest = max([len(r[name_column]) for r in rows], default=0)
    column = max(min(longest, room), len(headers[name_column]))
    t = Table(title=title)
    for i, h in enumerate(headers):
        t.add_column(h, no_wrap=True, justify="right" if h in right else "left",
                     **({"min_width": column, "max_width": column} if i == name_column else {}))
    notes = []
    for r in rows:
        cell, short = name_cell(r[name_column], column)
        if short:
            notes.append(f"{cell} = {r[name_column]}")
        t.add_row(*[cell if i == name_column else c for i, c in enumerate(r)])
    return t, notes


# --------------------------------------------------------------------------
# fuzz and smoke: one row per target
# --------------------------------------------------------------------------
STYLES = {"finding": "red", "clean": "green", "inconclusive": "yellow", "interrupted": "yellow"}
REPORT_HEADERS = ["target", "status", "examples", "k/N", "time"]


def report_cells(r) -> dict[str, str]:
    """One target's cells, plain: a target with no finding, its examples and seconds; a finding's are
    split into the first failure's example and seconds + the examples and seconds shrinking it took
    (``SHRINK_LEGEND``: the finding's own "shrunk in N example(s)" line says the same N)."""
    f = r.finding
    if f is None:
        examples, time = str(r.examples), f"{r.seconds:.1f}s"
    else:  # the JSON report's first_failure_example, first_failure_s, shrink_s; the finding's shrink count
        first = r.first_failure()
        examples = f"{first['first_failure_example']}+{f.shrink_examples}"
        time = f"{first['first_failure_s']:.1f}+{first['shrink_s']:.1f}s"
    if f is not None and f.deterministic:
        failed = f.verdict.kind  # a recorded hazard needs no wrong byte and is no rate
    else:
        failed = f"{r.failed_reps}/{r.reps}"
    return {"target": r.target, "status": r.status, "examples": examples, "k/N": failed, "time": time}


def report_table(reports, title: str, width: int = WIDTH):
    """The fuzz/smoke table (counts only; details follow as plain lines) and the lines under it:
    the names it shortened, and what a finding's split cells mean."""
    rows = []
    for r in reports:
        cells = report_cells(r)
        cells["status"] = f"[{STYLES.get(r.status, 'yellow')}]{cells['status']}[/]"
        rows.append([cells[h] for h in REPORT_HEADERS])
    t, notes = table(title, REPORT_HEADERS, rows, right=("examples", "k/N", "time"), width=width)
    if any(r.finding is not None for r in reports):
        notes.append(SHRINK_LEGEND)
    return t, notes


def progress_line(r, again: bool = False) -> str:
    """A target's line in a CI log when a turn of it ends: the cells of its table row, in words
    (`again`: a later turn, whose counts include the earlier ones')."""
    c = report_cells(r)
    split = " (to the first failure + shrinking)" if r.finding is not None else ""
    share = "; its share of --time ran out" if r.stop == "time" and r.finding is None else ""
    return (f"{r.target}{' (another turn)' if again else ''}: {c['status']}, {c['examples']} examples, "
            f"{c['time']}{split}, k/N {c['k/N']}{share}")


def coverage_summary(reports) -> str:
    """smoke's one line about coverage (under 80 columns): the expected buckets never drawn, over the
    targets with no finding (``features.warning_lines``' count), and the flag that lists them."""
    missing = {r.target: sum(len(v) for v in r.tally.never_drawn().values())
               for r in reports if r.finding is None and r.tally.examples}
    never, where = sum(missing.values()), sum(n > 0 for n in missing.values())
    if never:
        return f"coverage: {never} bucket(s) never drawn, in {where} of {len(reports)} targets (--coverage lists them)"
    return f"coverage: every expected bucket drawn in {len(reports)} targets (--coverage lists the counts)"

def list_table(targets, width: int = WIDTH):
    """`mambafuzz list`'s table: the overlap a target supports only where its contract has an
    overlap option, "-" elsewhere (with a line saying so)."""
    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles, only for `list`

    def has_overlap(name: str) -> bool:
        try:
            return any(o.name == "overlap" for o in contracts.get(name).cli_options)
        except Exception:  # noqa: BLE001 - a contract that cannot be looked up has no such option either
            return False

    rows = [[t.name, t.contract, t.kind, t.overlap if has_overlap(t.contract) else "-", ", ".join(t.devices)]
            for t in targets]
    t, notes = table("mambafuzz targets", ["name", "contract", "kind", "overlap", "devices"], rows, width=width)
    if any(r[3] == "-" for r in rows):
        notes.append("overlap (--overlap): full = memmove, left = dst < src only; - = no such option")
    return t, notes

"""`mambafuzz report`: one static HTML page from a saved JSON report, a session or crash files.

``load`` reads and checks the input (``report/load.py``); ``render`` draws the
page (``report/render.py``, plotly: the optional extra ``mambafuzz[report]``).
"""
from __future__ import annotations

from pathlib import Path

from mambafuzz.report.load import Report, load
from mambafuzz.report.render import write


def build(path: Path | str, out: Path | str) -> Report:
    """Load `path`, write the page to `out`; UsageError (one line) for a bad input or output."""
    report = load(path)
    write(report, out)
    return report


__all__ = ["Report", "build", "load"]

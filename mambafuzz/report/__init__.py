"""`mambafuzz report`: one static HTML page from a saved JSON report, a session or crash files.

``load`` reads and checks the input (``report/load.py``); ``render`` draws the
page (``report/render.py``, plotly: the optional extra ``mambafuzz[report]``).
They load on first use: ``--help`` needs neither numpy nor the contracts they read.
"""
from __future__ import annotations

import importlib
from pathlib import Path

__all__ = ["Report", "build", "load"]


def build(path: Path | str, out: Path | str):
    """Load `path`, write the page to `out`; UsageError (one line) for a bad input or output."""
    from mambafuzz.report.load import load  # deferred: the report's loader and plotly page, only for `mambafuzz report`
    from mambafuzz.report.render import write  # deferred: the report's loader and plotly page, only for `mambafuzz report`

    report = load(path)
    write(report, out)
    return report


def __getattr__(name: str):
    if name in ("Report", "load"):
        return getattr(importlib.import_module("mambafuzz.report.load"), name)
    raise AttributeError(f"module 'mambafuzz.report' has no attribute {name!r}")

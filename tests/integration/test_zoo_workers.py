"""The zoo's rows dealt out to a session's workers, run for real on the CPU (issue 44): each row in one
worker, the slowest first, every row caught; a worker done early helps with a row not caught yet."""
import time

import pytest

from mambafuzz.control.clock import Deadline
from mambafuzz.run.session import Session, SessionOptions, plain_options

from common import fuzz_options


def _entries(costs: dict) -> list[dict]:
    return [{"spec": n, "name": n, "contract": c, "overlap": "full", "cost": cost} for n, (c, cost) in costs.items()]


@pytest.mark.matrix  # worker processes: about 25 s
def test_dealt_rows_run_once_each_slowest_first_and_are_caught(tmp_path):
    rows = {"zoo.TAIL-DROP": ("batch_memcpy", 1.0), "zoo.DS-CONTIG": ("state_copy", 3.0),
            "zoo.SS-FREED0": ("state_scatter", 2.0)}
    opts = fuzz_options(tmp_path, max_examples=40, database=None, shrink_budget=1)
    sopts = SessionOptions(device="cpu", options=plain_options(opts), workers=2, state_dir=None, deal=True,
                           deadline=Deadline(120))
    session = Session(_entries(rows), sopts)
    t0 = time.monotonic()
    reports = {r.target: r for r in session.run()}
    assert all(reports[n].finding is not None for n in rows), {n: r.status for n, r in reports.items()}
    assert {n: sorted(session._partials[n]) for n in rows} == {"zoo.DS-CONTIG": [0], "zoo.SS-FREED0": [1],
                                                               "zoo.TAIL-DROP": [1]}  # 3 | 2 + 1
    assert session._ran == {0: {"zoo.DS-CONTIG"}, 1: {"zoo.SS-FREED0", "zoo.TAIL-DROP"}}
    assert time.monotonic() - t0 < 110


@pytest.mark.matrix  # worker processes and a 25 s deadline
def test_a_worker_done_early_helps_with_a_row_still_running(tmp_path):
    """A correct target is never caught: the worker whose zoo row is caught at once runs it too."""
    rows = {"torch.batch_memcpy": ("batch_memcpy", 5.0), "zoo.TAIL-DROP": ("batch_memcpy", 1.0)}
    opts = fuzz_options(tmp_path, max_examples=10_000, database=None, shrink_budget=1)
    sopts = SessionOptions(device="cpu", options=plain_options(opts), workers=2, state_dir=None, deal=True,
                           deadline=Deadline(25))
    session = Session(_entries(rows), sopts)
    reports = {r.target: r for r in session.run()}
    assert reports["zoo.TAIL-DROP"].finding is not None
    assert sorted(session._partials["torch.batch_memcpy"]) == [0, 1]  # its own worker, then the helper
    assert reports["torch.batch_memcpy"].status == "clean"

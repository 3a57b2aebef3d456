"""Dealt rows survive their workers (issue 44 on a GPU): the H100's dealt zoo lost the rows of every worker
that could not open its GPU ("MPS server is not ready", exit 18), and rows with pools past 2 GiB overran
the small workers' memory shares.  The failures are injected on the CPU (``run.inject``): a worker slot that
never starts, one that starts after two false starts, one SIGKILLed between cases; every row still runs
and is caught, and a row no worker can run says why and is not clean.
"""
import pytest

from mambafuzz.control.clock import Deadline
from mambafuzz.control.exits import exit_code
from mambafuzz.run import inject
from mambafuzz.run.session import FALSE_STARTS, Session, SessionOptions, plain_options

from common import fuzz_options

ROWS = {"zoo.TAIL-DROP": ("batch_memcpy", 3.0), "zoo.DS-CONTIG": ("state_copy", 2.0),
        "zoo.NOOP-SKIP": ("postprocess", 1.0)}


def _entries(rows: dict, memory: dict | None = None) -> list[dict]:
    return [{"spec": n, "name": n, "contract": c, "overlap": "full", "cost": cost,
             **({"memory": memory[n]} if memory and n in memory else {})} for n, (c, cost) in rows.items()]


def _session(tmp_path, rows=ROWS, workers=2, deadline=120, memory=None, **kw) -> Session:
    opts = fuzz_options(tmp_path, max_examples=40, database=None, shrink_budget=1)
    sopts = SessionOptions(device="cpu", options=plain_options(opts), workers=workers, state_dir=None, deal=True,
                           deadline=Deadline(deadline), start_backoff=0.05, **kw)
    return Session(_entries(rows, memory), sopts)


def _caught(reports) -> dict:
    return {r.target: r.finding is not None for r in reports}


@pytest.mark.matrix  # worker processes: about 30 s
def test_a_worker_that_never_starts_hands_its_rows_to_the_running_one(tmp_path, monkeypatch):
    monkeypatch.setenv(inject.ENV, "nodevice:1")
    session = _session(tmp_path)
    reports = session.run()
    assert _caught(reports) == {n: True for n in ROWS}, {r.target: r.why for r in reports}
    assert session._spawns[1] == FALSE_STARTS - 1  # tried FALSE_STARTS times (numbered from 0), then given up
    assert set(session._ran[0]) == set(ROWS)  # slot 1's rows went to slot 0 while it ran
    assert exit_code(["caught" for _ in reports]) == 0


@pytest.mark.matrix  # worker processes: about 25 s
def test_a_worker_ready_after_two_false_starts_runs_its_own_rows(tmp_path, monkeypatch):
    monkeypatch.setenv(inject.ENV, "nodevice:1:2")
    session = _session(tmp_path)
    reports = session.run()
    assert _caught(reports) == {n: True for n in ROWS}, {r.target: r.why for r in reports}
    assert session._spawns[1] == 2 and session._ran.get(1)  # its third process started and ran its rows


@pytest.mark.matrix  # worker processes: about 25 s
def test_a_worker_killed_between_cases_is_no_finding_and_its_row_runs_again(tmp_path, monkeypatch):
    """Slot 0 (the costliest row first) is SIGKILLed after its first judged case: the row is no crash
    finding; a fresh worker runs it and catches it by its own kind."""
    monkeypatch.setenv(inject.ENV, "kill:0:1")
    session = _session(tmp_path)
    reports = {r.target: r for r in session.run()}
    assert all(r.finding is not None and r.finding.verdict.kind != "crash" for r in reports.values()), \
        {n: (r.status, r.finding and r.finding.verdict.kind) for n, r in reports.items()}
    assert session._spawns[0] >= 1 and session.restarts >= 1


@pytest.mark.matrix  # worker processes: about 20 s
def test_no_worker_left_the_rows_say_why_and_the_run_is_not_clean(tmp_path, monkeypatch):
    monkeypatch.setenv(inject.ENV, "nodevice:0")
    session = _session(tmp_path, workers=1)
    reports = session.run()
    assert {r.status for r in reports} == {"inconclusive"}
    for r in reports:
        assert r.why.startswith("not run: the worker for GPU None (slot 0) could not open its device"), r.why
        assert "exit code 18" in r.why
    assert exit_code([r.status for r in reports]) == 3


@pytest.mark.matrix  # worker processes: about 40 s
def test_a_row_that_needs_big_pools_goes_to_the_worker_with_room_and_small_ones_reject_them(tmp_path):
    """Budgets of 1 MiB and unbounded: ADDR-I32 (its bug shows only past 2 GiB) goes to the unbounded slot
    though the other is less loaded; the 1 MiB slot declines every case over its budget (the correct
    state_copy draws pools past 2 GiB one case in three) as a rejection, by one reason, never a checked one."""
    rows = {"zoo.ADDR-I32": ("state_copy", 1.0), "triton.state_copy": ("state_copy", 3.0)}
    session = _session(tmp_path, rows=rows, budgets=[1 << 20, None], memory={"zoo.ADDR-I32": 9 << 30})
    reports = {r.target: r for r in session.run()}
    assert session._ran[0] == {"triton.state_copy"}  # by memory, not by cost: slot 0 never had ADDR-I32
    assert "zoo.ADDR-I32" in session._ran[1]  # (slot 1 may help with state_copy once its row is caught)
    assert reports["zoo.ADDR-I32"].finding is not None, reports["zoo.ADDR-I32"].why
    correct = reports["triton.state_copy"]
    reasons = dict(correct.tally.reasons())
    assert reasons.get("over this worker's memory budget (1 MiB)", 0) > 0, reasons
    assert correct.status == "clean"
    assert session._partials["triton.state_copy"][0]["examples"] == 40  # the declined draws not among them


def test_a_row_no_budget_holds_is_not_run_and_says_so(tmp_path):
    session = _session(tmp_path, rows={"zoo.ADDR-I32": ("state_copy", 1.0)}, workers=2, budgets=[1 << 20, 2 << 20],
                       memory={"zoo.ADDR-I32": 9 << 30})
    (rep,) = session.run()  # no worker is started: nothing to deal
    assert rep.status == "inconclusive" and "9.0 GiB of GPU memory" in rep.why and "fewer --workers-per-gpu" in rep.why
    assert session._spawns == {}


def test_orphaned_rows_with_no_worker_running_start_an_idle_slot_with_room(tmp_path, monkeypatch):
    """Slot 1 given up, slot 0 ended (its rows done): slot 0 starts again with the rows it has room for."""
    rows = {"zoo.ADDR-I32": ("state_copy", 1.0), "zoo.TAIL-DROP": ("batch_memcpy", 2.0)}
    session = _session(tmp_path, rows=rows, budgets=[1 << 20, None], memory={"zoo.ADDR-I32": 9 << 30})
    started = []
    monkeypatch.setattr(session, "_start", lambda index, gpu, todo, ctx: started.append((index, todo)) or "live")
    session._slot_gpus, session._ctx, session._given_up = {0: None, 1: None}, "ctx", {1}
    session._orphans = list(session.targets)
    live = []
    session._redeal(live)
    assert started == [(0, [session.targets[1]])] and live == ["live"]  # TAIL-DROP; ADDR-I32 needs 9 GiB
    assert session._orphans == [session.targets[0]]

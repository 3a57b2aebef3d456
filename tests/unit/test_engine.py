"""The engine: verdicts, the fuzz loop, shrinking, crash files, replay."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from mambafuzz.kernels import registry
from mambafuzz import findings
from mambafuzz.judge.engine import run_case
from mambafuzz.control.clock import Deadline
from mambafuzz.search.fuzz import FuzzOptions, fuzz_target
from mambafuzz.judge.materialize import fill_bytes, materialize
from mambafuzz.findings.replay import replay

from common import LEFT_SHIFT, RIGHT_SHIFT  # noqa: E402
from common import forward_bytes as _forward_bytes  # noqa: E402
from common import fuzz_options as _opts  # noqa: E402
from common import python_memmove as _python_memmove  # noqa: E402


def test_materialized_snapshot_and_expectation_from_the_oracle():
    m = materialize(LEFT_SHIFT, "cpu")
    data = fill_bytes(3, 128)
    assert np.array_equal(m.snapshot, data)
    want = data.copy()
    want[8:32] = data[16:40]  # hand-worked: the 24 bytes at 16.. land at 8..
    assert np.array_equal(m.expected, want)


def test_verdicts_on_hand_made_cases():
    assert not run_case(_python_memmove, RIGHT_SHIFT, "cpu").failed
    v = run_case(_forward_bytes, RIGHT_SHIFT, "cpu", reps=3)
    assert v.failed and v.kind == "mismatch" and (v.failures, v.reps) == (3, 3)
    # dst 16.., src 8..: byte 16+8 is read after being overwritten, so the first difference is at 24
    assert v.mismatch.first[0]["offset"] == 24
    assert "row 0 dst byte 8" in v.mismatch.first[0]["where"]
    assert v.mismatch.count == 16


def test_torch_path_and_triton_kernel_pass_where_the_buggy_copy_fails():
    for name in ("triton.batch_memcpy", "torch.batch_memcpy"):
        assert not run_case(registry.get(name).fn, RIGHT_SHIFT, "cpu", mode="race").failed, name


def test_an_exception_from_the_users_function_is_a_finding_at_its_line():
    def boom(src_ptrs, dst_ptrs, sizes, *, arena):
        raise RuntimeError("illegal memory access")

    v = run_case(boom, LEFT_SHIFT, "cpu")
    assert v.kind == "exception" and "RuntimeError: illegal memory access" in v.exception
    assert "test_engine.py" in v.exception and 'raise RuntimeError("illegal memory access")' in v.exception


def test_wild_pointer_is_fenced_on_the_cpu(tmp_path):
    """A kernel told to write far outside the arena is stopped before it touches memory."""
    from mambafuzz.kernels.batch_memcpy import batch_memcpy

    def wild(src_ptrs, dst_ptrs, sizes, *, arena):
        batch_memcpy(src_ptrs, dst_ptrs + (1 << 40), sizes)

    v = run_case(wild, LEFT_SHIFT, "cpu", mode="compare")
    assert v.failed and v.hazards and v.hazards[0].kind == "out-of-bounds"


def test_fuzz_finds_shrinks_saves_and_replays(tmp_path):
    target = registry.Target(name="user.forward", contract="batch_memcpy", kind="user", overlap="full",
                             description="forward byte copy", fn=_forward_bytes)
    report = fuzz_target(target, _opts(tmp_path, mode="compare"))
    f = report.finding
    assert f is not None and report.written
    # shrunk: one row, a right overlap that needs only a few bytes to show
    assert len(f.case.copies) == 1
    src, dst, n = f.case.copies[0]
    assert src < dst < src + n and n <= 16, f.case.copies
    body = json.loads(f.path.read_text())
    assert body["schema"] == findings.CRASH_SCHEMA and body["target"] == "user.forward"
    assert body["verdict"]["mismatch"]["count"] >= 1
    assert body["replay"].startswith("mambafuzz replay ")
    assert f.path.parent == tmp_path / "crashes" / "batch_memcpy" / "user.forward"
    # a second session finds the same case through the example database and does not write it again
    again = fuzz_target(target, _opts(tmp_path, mode="compare", seed=5))
    assert again.finding is not None and not again.written
    assert again.finding.examples_to_first == 1
    assert len(list((tmp_path / "crashes").rglob("*.json"))) == 1


def test_correct_user_kernel_passes_the_same_fuzzing(tmp_path):
    target = registry.Target(name="user.memmove", contract="batch_memcpy", kind="user", overlap="full",
                             description="clone copy", fn=_python_memmove)
    report = fuzz_target(target, _opts(tmp_path, max_examples=40))
    assert report.finding is None and report.examples == 40 and not report.rejected


@pytest.mark.matrix
def test_left_only_kernel_is_only_given_left_overlaps(tmp_path):
    rows = []

    def forward(src_ptrs, dst_ptrs, sizes, *, arena):
        rows.extend(zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()))
        _forward_bytes(src_ptrs, dst_ptrs, sizes, arena=arena)

    target = registry.Target(name="user.left", contract="batch_memcpy", kind="user", overlap="left",
                             description="forward byte copy", fn=forward)
    report = fuzz_target(target, _opts(tmp_path, mode="compare", max_examples=80))
    assert report.finding is None and report.examples == 80 and not report.rejected
    assert not [r for r in rows if r[0] < r[1] < r[0] + r[2]]  # never a right overlap
    assert [r for r in rows if r[1] < r[0] < r[1] + r[2]]  # and left overlaps were drawn


def test_replay_still_failing_then_fixed_against_the_correct_kernel(tmp_path):
    zoo = registry.get("zoo.TAIL-DROP")
    report = fuzz_target(zoo, _opts(tmp_path))
    assert report.finding is not None and report.finding.verdict.kind == "mismatch"
    rows = replay([tmp_path / "crashes"], device="cpu")
    assert [r.status for r in rows] == ["still failing"]
    fixed = replay([tmp_path / "crashes"], device="cpu", against=registry.get("triton.batch_memcpy"))
    assert [r.status for r in fixed] == ["fixed"]


def test_non_reproducing_failure_keeps_the_best_case(tmp_path):
    """A 'race' that shows once and never again: the session keeps that case and its rate."""
    calls = {"n": 0}

    def once(src_ptrs, dst_ptrs, sizes, *, arena):
        calls["n"] += 1
        _python_memmove(src_ptrs, dst_ptrs, sizes, arena=arena)
        if calls["n"] == 3:
            arena[0] ^= 0xFF  # corrupt once

    target = registry.Target(name="user.once", contract="batch_memcpy", kind="user", overlap="full",
                             description="flaky", fn=once)
    report = fuzz_target(target, _opts(tmp_path, mode="compare", database=None))
    assert report.finding is not None
    assert report.finding.verdict.failures == 1 and report.finding.examples_to_first == 3


def test_ctrl_c_keeps_what_was_found(tmp_path):
    calls = {"n": 0}

    def interrupted(src_ptrs, dst_ptrs, sizes, *, arena):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        _forward_bytes(src_ptrs, dst_ptrs, sizes, arena=arena)
        arena[0] ^= 0xFF

    target = registry.Target(name="user.ctrlc", contract="batch_memcpy", kind="user", overlap="full",
                             description="interrupted", fn=interrupted)
    report = fuzz_target(target, _opts(tmp_path, mode="compare", database=None))
    assert report.interrupted and report.finding is not None and report.written
    assert report.finding.path.exists()


def test_time_budget_stops_the_session(tmp_path):
    target = registry.get("torch.batch_memcpy")
    start = time.monotonic()
    report = fuzz_target(target, _opts(tmp_path, max_examples=100_000, deadline=Deadline(2.0), mode="compare"))
    assert report.finding is None and report.examples > 0
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("body, message", [
    ("{not json", "not valid JSON"),
    ('{"schema": 99, "target": "x"}', "crash schema 99"),
    ('{"schema": 1}', "missing"),
    ('[]', "JSON object"),
])
def test_bad_crash_files_are_named(tmp_path, body, message):
    path = tmp_path / "bad.json"
    path.write_text(body)
    with pytest.raises(findings.CrashFileError, match=message):
        findings.load(path)
    rows = replay([path], device="cpu")
    assert rows[0].status == "could not run" and message.split()[0] in rows[0].reason


# Imports once, then per line on stdin forks a writer into that folder, prints its pid, and prints
# "dead" once the test has killed it: each round's kill lands in a writer already writing.
_WRITER = textwrap.dedent("""
    import os
    import sys
    from pathlib import Path
    from mambafuzz.findings import atomic_write_json
    body = {"schema": 1, "payload": "x" * 200000}
    for line in sys.stdin:
        folder = Path(line.strip())
        pid = os.fork()
        if pid == 0:
            i = 0
            while True:
                atomic_write_json(folder / f"c{i % 3}.json", body)
                i += 1
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("dead", flush=True)
""")


def test_kill_9_never_leaves_a_partial_crash_file(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    checked = []
    try:
        for attempt in range(8):
            folder = tmp_path / str(attempt)
            folder.mkdir()
            proc.stdin.write(f"{folder}\n")
            proc.stdin.flush()
            pid = int(proc.stdout.readline())
            end = time.monotonic() + 120
            while not any(folder.glob("*.json")):  # the writer has written a file: it is in its loop
                assert time.monotonic() < end, "the writer never wrote a file"
                time.sleep(0.001)
            time.sleep(0.003 * attempt)  # the kill lands at a different point of the write each round
            os.kill(pid, signal.SIGKILL)
            assert proc.stdout.readline() == "dead\n"
            files = list(folder.glob("*.json"))
            assert files  # a file seen before the kill is never taken away by it
            for path in files:
                assert json.loads(path.read_text())["schema"] == 1  # whole, or not there at all
            checked += files
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert len(checked) >= 8


def test_hypothesis_database_is_keyed_per_target(tmp_path):
    """Two targets with one database do not replay each other's failures: a correct kernel that replayed
    TAIL-DROP's saved failures would pass them, and Hypothesis would delete them from the database."""
    zoo = registry.get("zoo.TAIL-DROP")
    assert fuzz_target(zoo, _opts(tmp_path)).finding is not None
    saved = {p for p in (tmp_path / "db").rglob("*") if p.is_file()}
    assert saved  # the failure and its shrinks, under TAIL-DROP's key
    clean = fuzz_target(registry.get("triton.batch_memcpy"), _opts(tmp_path, max_examples=5))
    assert clean.finding is None and clean.examples == 5
    assert saved <= {p for p in (tmp_path / "db").rglob("*") if p.is_file()}  # none replayed, none deleted
    again = fuzz_target(zoo, _opts(tmp_path, seed=7))
    assert again.finding is not None and again.finding.examples_to_first == 1  # found through the database


def test_a_cuda_fault_or_error_marks_the_context_lost_even_while_shrinking():
    """A fault in a shrink candidate that does not count as the same failure still broke the context."""
    from mambafuzz.judge.engine import Verdict
    from mambafuzz.search.fuzz import TargetReport, _note_fault

    cuda, cpu = FuzzOptions(device="cuda", mode="compare"), FuzzOptions(device="cpu")
    report = TargetReport("t", "batch_memcpy")
    _note_fault(cuda, report, Verdict(reps=3, failures=1, mode="compare"))
    assert not report.context_lost
    _note_fault(cpu, report, Verdict(reps=1, failures=1, mode="compare", fault="Segfault"))
    _note_fault(cpu, report, None)
    assert not report.context_lost  # the CPU has no context to lose
    _note_fault(cuda, report, Verdict(reps=1, failures=1, mode="compare", fault="CUDA error: illegal address"))
    assert report.context_lost
    report = TargetReport("t", "batch_memcpy")
    _note_fault(cuda, report, None)  # an error while running on cuda: start a fresh process
    assert report.context_lost


def test_no_repetition_starts_past_the_end_but_the_first():
    calls = []

    def counted(src_ptrs, dst_ptrs, sizes, *, arena):
        calls.append(1)
        _python_memmove(src_ptrs, dst_ptrs, sizes, arena=arena)

    v = run_case(counted, LEFT_SHIFT, "cpu", reps=5, mode="compare", deadline=Deadline.until(time.monotonic() - 1))
    assert (v.reps, v.failures, len(calls)) == (1, 0, 1)
    v = run_case(counted, LEFT_SHIFT, "cpu", reps=5, mode="compare", deadline=Deadline.until(time.monotonic() + 60))
    assert (v.reps, len(calls)) == (5, 6)


def test_a_slow_kernel_costs_one_repetition_past_the_share_not_the_batch(tmp_path):
    """Each repetition of this target takes 0.5 s and a case asks for 20: a 3 s share used to end only
    after the example's 10 s; now the batch stops launching at the share's end."""
    from mambafuzz.kernels.registry import Target

    def slow(src_ptrs, dst_ptrs, sizes, *, arena):
        time.sleep(0.5)
        _python_memmove(src_ptrs, dst_ptrs, sizes, arena=arena)

    target = Target(name="test.slow", contract="batch_memcpy", kind="user", overlap="full", description="slow",
                    fn=slow)
    t0 = time.monotonic()
    report = fuzz_target(target, _opts(tmp_path, mode="compare", reps=20, deadline=Deadline(3.0), max_examples=1000))
    assert report.finding is None and report.examples >= 1
    assert time.monotonic() - t0 < 5.5

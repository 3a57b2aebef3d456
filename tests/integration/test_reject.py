"""A target declines an input it does not support: ``mambafuzz.reject(why)`` / ``mambafuzz.Rejected``.

A rejected example is neither a finding nor clean evidence: it is counted with
its reason (table, summary line, ``--json``, report page) and Hypothesis draws
another; too few valid examples left is inconclusive (exit 3).  The rejection
is recognised wherever the target's call raises it, on the GPU path's
repetitions too, while shrinking, in replay, the CPU witness and ``check``.
"""
import json
import subprocess
import sys
import textwrap

import pytest
import triton
import triton.language as tl

import mambafuzz
from common import eager_capture, mf
from mambafuzz import cli, findings
from mambafuzz.search import cross
from mambafuzz.judge import engine
from mambafuzz.judge import gpu_reps
from mambafuzz.findings import replay
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.errors import Inconclusive, InternalError, MambafuzzError, Rejected, UsageError, rejection
from mambafuzz.kernels import registry
from mambafuzz.judge.materialize import materialize

THREE_ROWS = BatchCopyCase(arena_size=512, copies=((0, 100, 16), (200, 300, 16), (400, 440, 8)), seed=1)
FAST = dict(database=None, shrink_time=10, seed=5)

USER_MODULE = '''
import mambafuzz
from mambafuzz.kernels import registry


def at_most_two_rows(src_ptrs, dst_ptrs, sizes):
    """A correct copy that supports at most 2 rows."""
    if sizes.numel() > 2:
        mambafuzz.reject("at most 2 rows")
    registry.get("triton.batch_memcpy").fn(src_ptrs, dst_ptrs, sizes)


def never(src_ptrs, dst_ptrs, sizes):
    """Supports nothing."""
    raise mambafuzz.Rejected("not in this build")
'''


def correct(src_ptrs, dst_ptrs, sizes):
    registry.get("triton.batch_memcpy").fn(src_ptrs, dst_ptrs, sizes)


def at_most_two_rows(src_ptrs, dst_ptrs, sizes):
    """A correct copy that supports at most 2 rows."""
    if sizes.numel() > 2:
        mambafuzz.reject("at most 2 rows")
    correct(src_ptrs, dst_ptrs, sizes)


def noguard_two_rows_or_more(src_ptrs, dst_ptrs, sizes):
    """BM-NOGUARD (races on a left overlap), declining single-row batches."""
    if sizes.numel() < 2:
        mambafuzz.reject("needs two rows")
    registry.get("zoo.BM-NOGUARD").fn(src_ptrs, dst_ptrs, sizes)


@triton.jit
def _declining_kernel(x, ROWS: tl.constexpr):
    if ROWS > 2:
        mambafuzz.reject("the kernel takes at most 2 rows")  # the interpreter runs it as Python
    tl.store(x + tl.arange(0, 4), tl.arange(0, 4))


def launcher_rejects_after_a_launch(src_ptrs, dst_ptrs, sizes):
    correct(src_ptrs[:1], dst_ptrs[:1], sizes[:1])
    mambafuzz.reject("the launcher found more rows than it handles")


def rejects_inside_the_kernel(src_ptrs, dst_ptrs, sizes, *, arena):
    _declining_kernel[(1,)](arena[:16].view(dtype=__import__("torch").int32), ROWS=sizes.numel())


def never_here(src_ptrs, dst_ptrs, sizes):
    mambafuzz.reject("nothing today")


def wraps_a_rejection(src_ptrs, dst_ptrs, sizes):
    try:
        mambafuzz.reject("deep in the engine")
    except Rejected as exc:
        raise RuntimeError("engine launch failed") from exc


def test_reject_is_public_and_in_the_one_error_hierarchy():
    assert mambafuzz.Rejected is Rejected and issubclass(Rejected, MambafuzzError)
    assert not issubclass(Rejected, (UsageError, Inconclusive, InternalError, AssertionError))
    with pytest.raises(Rejected) as info:
        mambafuzz.reject("at most\n   8 pairs")
    assert info.value.reason == "at most 8 pairs" and str(info.value) == "the target rejected the case: at most 8 pairs"


@pytest.mark.parametrize("fn, reason", [
    (at_most_two_rows, "at most 2 rows"),
    (launcher_rejects_after_a_launch, "the launcher found more rows than it handles"),
    (rejects_inside_the_kernel, "the kernel takes at most 2 rows"),
    (wraps_a_rejection, "deep in the engine"),
], ids=["adapter", "launcher", "kernel", "wrapped"])
def test_a_rejection_is_recognised_wherever_the_target_raises_it(fn, reason):
    for mode in ("race", "compare"):
        with pytest.raises(Rejected) as info:
            engine.run_case(fn, THREE_ROWS, "cpu", mode=mode)
        assert info.value.reason == reason
    # the GPU path's repetitions judged on the device (gpu_reps; a CPU arena here): through the engine,
    # and a graph capture whose warm-up rejects lets the rejection through (its fallback loop rejects)
    with pytest.raises(Rejected):
        engine.reps_verdict(materialize(THREE_ROWS, "cpu"), fn, 4)
    with pytest.raises(Exception) as info:
        gpu_reps.run_reps(materialize(THREE_ROWS, "cpu"), fn, 40, graph=True, k=4, capture=eager_capture)
    assert rejection(info.value).reason == reason


def test_some_rejections_leave_a_clean_run_with_its_reasons_counted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "limited.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = cli.main(["fuzz", "--target", "limited:at_most_two_rows", "--contract", "batch_memcpy", "--no-isolate",
                     "--max-examples", "20", "--seed", "2", "--database", "none", "--json"])
    text = capsys.readouterr().out
    (t,) = json.loads(text)["targets"]
    assert code == 0 and t["status"] == "clean" and t["examples"] == 20
    assert list(t["rejected_by_target"]) == ["at most 2 rows"] and t["rejected_by_target"]["at most 2 rows"] > 0
    assert set(t["coverage"]["features"]["rows"]) <= {"0", "1", "2-3"} and t["rejected"] == []
    # the report page: under the example count, the reasons on hover
    from mambafuzz.report.load import load
    from mambafuzz.report.render import render

    (tmp_path / "r.json").write_text(text)
    n = t["rejected_by_target"]["at most 2 rows"]
    page = render(load(tmp_path / "r.json"))
    assert f'<span class="muted" title="at most 2 rows: {n}">+{n} rejected by the target</span>' in page


@pytest.mark.slow
@pytest.mark.matrix
def test_a_session_prints_the_rejections_and_a_target_that_rejects_everything_is_inconclusive(tmp_path):
    (tmp_path / "limited.py").write_text(USER_MODULE)
    proc = mf("fuzz", "--target", "limited:at_most_two_rows", "--target", "limited:never", "--contract",
              "batch_memcpy", "--max-examples", "12", "--seed", "2", "--database", "none", cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 3, out + proc.stderr[-2000:]
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("INCONCLUSIVE ")), out
    lines = out.splitlines()
    i = lines.index(next(ln for ln in lines if ln.startswith("rejected by limited:at_most_two_rows (")))
    assert lines[i + 1].startswith("  ") and lines[i + 1].endswith(": at most 2 rows"), lines[i:i + 2]
    never = next(ln for ln in lines if ln.startswith("rejected by limited:never ("))
    n = int(never.split("(")[1].split()[0])
    assert n > 0 and f"  {n}: not in this build" in lines
    assert f"INCONCLUSIVE limited:never: only 0 valid example(s), 10 needed (the target rejected {n}: " \
           f"not in this build ({n}))" in out  # a plain line: never wrapped
    summary = lines[-1]
    assert summary == f"2 target(s), 12 examples ({n + int(lines[i + 1].split(':')[0])} rejected), 0 finding(s), " \
        "1 inconclusive; exit 3", summary
    assert "Traceback" not in proc.stderr and "internal error" not in out


@pytest.mark.matrix
def test_check_counts_rejections_and_too_many_are_inconclusive(tmp_path):
    report = mambafuzz.check(at_most_two_rows, "batch_memcpy", max_examples=15, crashes_dir=tmp_path, **FAST)
    assert report.status == "clean" and report.examples == 15 and report.tally.rejections.get("at most 2 rows")
    with pytest.raises(Inconclusive) as info:
        mambafuzz.check(never_here, "batch_memcpy", max_examples=15, crashes_dir=tmp_path, **FAST)
    text = str(info.value)
    assert "only 0 valid example(s), 10 needed (the target rejected " in text and ": nothing today (" in text
    assert "\n" not in text and not list(tmp_path.rglob("*.json"))


@pytest.mark.matrix
def test_shrinking_passes_over_rejected_candidates(tmp_path):
    with pytest.raises(mambafuzz.Failure) as info:
        mambafuzz.check(noguard_two_rows_or_more, "batch_memcpy", max_examples=100, crashes_dir=tmp_path, **FAST)
    e = info.value
    assert e.verdict.kind == "race" and len(e.case.copies) == 2  # one row would be smaller, but it is declined
    assert e.report.tally.rejections.get("needs two rows")


def test_replay_and_the_corpus_of_a_case_the_target_now_rejects(tmp_path):
    verdict = engine.Verdict(reps=1, failures=1, mode="race", exception="ValueError: an old bug (raised at x.py:1)")
    target = registry.Target(name="limited", contract="batch_memcpy", kind="user", overlap="full",
                             description="d", fn=at_most_two_rows)
    finding = findings.Finding(target="limited", contract="batch_memcpy", device="cpu", mode="race",
                               case=THREE_ROWS, verdict=verdict)
    path, _ = findings.save(finding, tmp_path / "crashes")
    row = replay.replay_one(findings.load(path), device="cpu", reps=None, mode=None, against=target)
    assert row.status == replay.INCONCLUSIVE and row.reason == "the target rejected the case: at most 2 rows"
    # a saved case the target declines now is no failure of check(), and not listed as replayed
    report = mambafuzz.check(at_most_two_rows, "batch_memcpy", max_examples=12, crashes_dir=tmp_path / "crashes",
                             name="limited", **FAST)
    assert report.status == "clean" and report.replayed == []


@pytest.mark.slow
@pytest.mark.matrix
def test_the_cpu_witness_of_a_case_the_target_rejects_on_the_cpu(tmp_path, monkeypatch):
    from mambafuzz.control.targets import user_target

    (tmp_path / "limited.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    target = user_target("limited:at_most_two_rows", "batch_memcpy", target_path=str(tmp_path))
    witness = cross.cpu_witness(target, THREE_ROWS, timeout=120, shrink_seconds=5)
    assert witness.status == cross.UNAVAILABLE and witness.why == "the target rejected the case: at most 2 rows"


@pytest.mark.slow
@pytest.mark.matrix
def test_under_pytest_a_declining_kernel_passes_and_one_that_declines_everything_is_one_line(tmp_path):
    (tmp_path / "limited.py").write_text(USER_MODULE)
    (tmp_path / "test_limited.py").write_text(textwrap.dedent('''
        import mambafuzz
        from limited import at_most_two_rows, never


        def test_limited():
            report = mambafuzz.check(at_most_two_rows, "batch_memcpy", max_examples=12, seed=1)
            assert report.tally.rejections["at most 2 rows"] > 0


        def test_never():
            mambafuzz.check(never, "batch_memcpy", max_examples=12, seed=1)
        '''))
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("TRITON_INTERPRET", "MAMBAFUZZ_DEVICE")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                           "--mambafuzz-device", "cpu", "test_limited.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=400)
    out = proc.stdout
    assert proc.returncode == 1 and "1 failed, 1 passed" in out, out[-3000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("E ")]
    assert "mambafuzz.errors.Inconclusive: only 0 valid example(s)" in line and "; target limited:never" in line
    assert ": not in this build (" in line and "Traceback" not in out


@pytest.mark.gpu
def test_on_a_gpu_a_rejection_passes_the_graph_capture_and_the_run_counts_it(tmp_path):
    for fn in (at_most_two_rows, launcher_rejects_after_a_launch):  # before a launch, and after one
        with pytest.raises(Rejected):  # 100 repetitions: a graph is tried, its warm-up rejects, the loop too
            engine.reps_verdict(materialize(THREE_ROWS, "cuda"), fn, 100)
    report = mambafuzz.check(at_most_two_rows, "batch_memcpy", device="cuda", max_examples=20, crashes_dir=tmp_path,
                             **FAST)
    assert report.status == "clean" and report.examples == 20 and report.tally.rejections["at most 2 rows"] > 0
    with pytest.raises(Inconclusive) as info:
        mambafuzz.check(never_here, "batch_memcpy", device="cuda", max_examples=12, crashes_dir=tmp_path, **FAST)
    assert "the target rejected " in str(info.value) and ": nothing today (" in str(info.value)

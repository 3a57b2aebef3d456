"""Compile ahead (``mambafuzz.run.precompile``): the helpers that build a GPU run's kernels before their turn.

CPU (every run): the compile classes cover every perturbation the strategy
draws, one class per distinct build; the plan puts targets in run order; the
compile-only patch forwards every launch as a warm-up and is undone; the
helper pool works through its tasks, reports a helper's failure as text,
ignores Ctrl-C, prints nothing and is ended by ``stop``; ``warm`` runs a
target's first cases (interpreted here), a kernel's exception staying in its
verdict; the CLI refuses a bad ``--precompile`` in one line.  The GPU half (the cache really is filled) is ``tests/gpu/test_precompile_gpu.py``.
"""
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings

from mambafuzz import strategies
from mambafuzz.run import precompile
from mambafuzz.kernels.perturb import Perturb
from mambafuzz.strategies.perturb import compile_classes, perturbs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, mf, one_line_error  # noqa: E402


def _build(p):
    """What a kernel compiles on for perturbation `p`: its constexprs and warp count (None: the launcher's)."""
    if p is None:
        return ("default",)
    q = Perturb.from_tuple(p)
    return tuple(sorted(q.constexprs().items())) + (q.num_warps,)


CLASSES = compile_classes(strategies.PROFILES["gpu-amp"])


@settings(max_examples=300)
@given(perturbs())
def test_every_drawn_perturbation_needs_a_build_some_class_makes(p):
    assert _build(p) in {_build(c) for c in CLASSES}


def test_classes_are_distinct_builds_each_drawn():
    builds = [_build(c) for c in CLASSES]
    assert len(set(builds)) == len(builds) == 6
    from hypothesis import find
    for c in CLASSES:  # no class is built for nothing: the strategy can draw it
        assert _build(find(perturbs(), lambda p, c=c: _build(p) == _build(c))) == _build(c)


def test_an_unamplified_profile_has_one_class():
    assert compile_classes(strategies.PROFILES["gpu"]) == [None]
    assert compile_classes(strategies.PROFILES["cpu"]) == [None]


def test_plan_builds_the_next_target_first():
    entries = [{"spec": "a", "contract": "batch_memcpy"}, {"spec": "b", "contract": "state_copy"}]
    tasks = precompile.plan(entries, strategies.PROFILES["gpu-amp"])
    assert [t.entry["spec"] for t in tasks] == ["a"] * 6 + ["b"] * 6
    assert tasks[0].perturb is None and [t.perturb for t in tasks[:6]] == CLASSES


def test_compile_only_forwards_every_launch_as_a_warmup_and_is_undone(monkeypatch):
    from triton.runtime.jit import JITFunction

    seen = []

    def spy(self, *args, grid=None, warmup=False, **kwargs):
        seen.append((self, args, grid, warmup, kwargs))
        return "built"

    monkeypatch.setattr(JITFunction, "run", spy)
    with precompile.compile_only():
        assert JITFunction.run("k", 1, 2, grid=(3,), warmup=False, num_warps=8) == "built"
    assert seen == [("k", (1, 2), (3,), True, {"num_warps": 8})]
    assert JITFunction.__dict__["run"] is spy
    with pytest.raises(KeyError), precompile.compile_only():
        raise KeyError("the body's error")
    assert JITFunction.__dict__["run"] is spy


def test_default_processes_only_on_the_gpu(monkeypatch):
    assert precompile.default_processes("cpu") == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert precompile.default_processes("cuda") == 8
    assert precompile.default_processes("cuda", workers=8) == 7
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert precompile.default_processes("cuda") == 0


def _tasks(*specs):
    return [precompile.Task({"spec": s, "contract": "batch_memcpy"}, p) for s in specs for p in (None, (1, 0, 0, 0, 8))]


def test_helpers_work_through_every_task_and_report_failures(tmp_path, capfd):
    tasks = _tasks("a", "boom", "b")
    pre = precompile.Precompiler.start(tasks, {"work": "common:precompile_probe", "dir": str(tmp_path)}, 3)
    assert len(pre.processes) == 3
    pre.stop(grace=120)
    assert not any(p.is_alive() for p in pre.processes)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sorted({n.split("-")[0] + "-" + n.split("-")[1] for n in names}) == \
        ["a-(1, 0, 0, 0, 8)", "a-None", "b-(1, 0, 0, 0, 8)", "b-None"]
    assert pre.summary()["done"] == 6 and pre.summary()["failed"] == 2
    failed = [f for f in pre.finished if f[2]]
    assert {f[0] for f in failed} == {"boom"} and all("RuntimeError: probe failure" in f[2] for f in failed)
    assert "must not reach" not in capfd.readouterr().out


@pytest.mark.matrix
def test_helpers_ignore_ctrl_c_and_stop_ends_them(tmp_path):
    pre = precompile.Precompiler.start(_tasks("a", "b", "c"), {"work": "common:precompile_probe",
                                                               "dir": str(tmp_path), "sleep": 30}, 2)
    time.sleep(3.0)  # spawned and inside their first (30 s) task
    for p in pre.processes:
        os.kill(p.pid, signal.SIGINT)
    time.sleep(0.5)
    assert all(p.is_alive() for p in pre.processes)
    t0 = time.monotonic()
    pre.stop()
    assert time.monotonic() - t0 < 10
    assert not any(p.is_alive() for p in pre.processes)
    assert list(tmp_path.iterdir()) == []  # stopped inside the first task: nothing finished


def test_no_helpers_when_asked_for_none():
    pre = precompile.Precompiler.start(_tasks("a"), {"work": "common:precompile_probe"}, 0)
    assert pre.processes == []
    pre.stop()
    assert pre.summary() == {"tasks": 2, "processes": 0, "done": 0, "failed": 0, "seconds": 0.0}


def test_warm_runs_the_targets_first_cases_and_survives_a_raising_target(tmp_path, monkeypatch):
    job = {"device": "cpu", "profile": "cpu", "reps": 1, "mode": "compare", "contract_options": {}}
    state: dict = {}
    task = precompile.Task({"spec": "triton.batch_memcpy", "contract": "batch_memcpy"}, None)
    assert precompile.warm(task, job, state) is None
    assert len(state[task.entry["spec"]]) == precompile.CASES
    assert state[task.entry["spec"]] == precompile._cases(task, job, {})  # every helper draws the same cases
    (tmp_path / "raising_kernel.py").write_text(
        "def copy(src_ptrs, dst_ptrs, sizes, *, arena):\n    raise ValueError('not today')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    bad = precompile.Task({"spec": "raising_kernel:copy", "contract": "batch_memcpy"}, None)
    assert precompile.warm(bad, job, state) is None  # the kernel's exception is its verdict's, not the helper's
    assert len(state["raising_kernel:copy"]) == precompile.CASES
    from mambafuzz.errors import UsageError
    with pytest.raises(UsageError):  # the helper loop turns this into the task's error text
        precompile.warm(precompile.Task({"spec": "no_such_module:copy", "contract": "batch_memcpy"}, None), job, state)


def test_a_bad_precompile_count_is_one_line(tmp_path):
    proc = mf("fuzz", "--target", "triton.batch_memcpy", "--device", "cpu", "--precompile", "-1", cwd=tmp_path)
    one_line_error(proc, "--precompile", "0 or more")
    proc = mf("fuzz", "--target", "triton.batch_memcpy", "--device", "cpu", "--precompile", "many", cwd=tmp_path)
    one_line_error(proc, "--precompile", "auto")

"""A GPU shared under MPS: a fault reaches every client, so faults are replayed alone before they count.

The parent's side runs on the CPU here: a session whose workers are treated as
sharing one GPU (``_shared``), a target that kills its process once (a fault
that does not recur alone, as a neighbour's fault does not) beside one that
kills it every time.
"""
import os
import textwrap

import pytest

import mambafuzz.judge.engine as engine
from mambafuzz.errors import InternalError
from mambafuzz.run import confirm
from mambafuzz.control import mps
from mambafuzz.run.session import FALSE_STARTS, Session, SessionOptions, plain_options

from common import fuzz_options

TARGETS = textwrap.dedent('''
    import os, signal

    def crash_always(src_ptrs, dst_ptrs, sizes, *, arena):
        os.kill(os.getpid(), signal.SIGSEGV)

    def crash_once(src_ptrs, dst_ptrs, sizes, *, arena):
        """Dies on its first call in the session (the flag file says), then copies right."""
        flag = os.environ["CRASH_ONCE_FLAG"]
        if not os.path.exists(flag):
            open(flag, "w").close()
            os.kill(os.getpid(), signal.SIGSEGV)
        base = arena.data_ptr()
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()
''')


class SharedSession(Session):
    """As if its workers were MPS clients of one GPU."""

    def _shared(self) -> bool:
        return True


@pytest.fixture
def shared_targets(tmp_path, monkeypatch):
    (tmp_path / "sharedk.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("CRASH_ONCE_FLAG", str(tmp_path / "crashed-once"))
    return tmp_path


def _session(tmp_path, names, cls=SharedSession, workers_per_gpu=2):
    opts = fuzz_options(tmp_path, max_examples=15, database=None)
    entries = [{"spec": f"sharedk:{n}", "name": f"sharedk:{n}", "contract": "batch_memcpy", "overlap": "full"}
               for n in names]
    sopts = SessionOptions(device="cpu", options=plain_options(opts), workers_per_gpu=workers_per_gpu,
                           hang_timeout=60, state_dir=None)
    return cls(entries, sopts)


@pytest.mark.matrix
def test_a_fault_that_does_not_recur_alone_is_no_finding_and_one_that_does_is(shared_targets):
    reports = {r.target: r for r in _session(shared_targets, ["crash_once", "crash_always"]).run()}
    once, always = reports["sharedk:crash_once"], reports["sharedk:crash_always"]
    assert always.status == "finding" and always.finding.verdict.kind == "crash"
    assert always.finding.path.exists()
    assert once.status != "finding", once.finding
    assert os.path.exists(os.environ["CRASH_ONCE_FLAG"])  # it did crash once
    files = [p.name for p in (shared_targets / "crashes").rglob("*.json")]
    assert len(files) == 1, files  # the unconfirmed fault's file is gone, the confirmed one kept
    assert once.examples >= 15 and once.status == "clean", (once.status, once.why)


@pytest.mark.matrix
def test_a_fault_the_replay_cannot_judge_stays_a_finding_with_its_file(shared_targets, monkeypatch):
    monkeypatch.setattr(confirm, "confirm_alone", lambda *a, **k: (None, "inconclusive: no GPU to replay on"))
    (once,) = _session(shared_targets, ["crash_once"]).run()
    assert once.status == "finding" and once.finding.verdict.kind == "crash"
    assert once.finding.path.exists()


def test_without_sharing_the_first_crash_is_the_finding(shared_targets):
    reports = {r.target: r for r in _session(shared_targets, ["crash_once"], cls=Session, workers_per_gpu=1).run()}
    assert reports["sharedk:crash_once"].status == "finding"


def test_a_worker_that_cannot_start_is_given_up_not_restarted_forever(tmp_path, capfd):
    opts = fuzz_options(tmp_path, database=None)
    sopts = SessionOptions(device="cuda", options=plain_options(opts), state_dir=None, hang_timeout=60,
                           start_backoff=0.05)
    session = Session([{"spec": "triton.batch_memcpy", "name": "triton.batch_memcpy",
                        "contract": "batch_memcpy", "overlap": "full"}], sopts)
    (rep,) = session.run()  # no GPU here: each worker dies in start-up
    assert rep.status == "inconclusive" and "before it was ready" in rep.why, rep.why
    assert "exit code 18" in rep.why and session.restarts == FALSE_STARTS - 1
    err = capfd.readouterr().err  # each false start says why in one line, no traceback
    assert err.count("could not open its device") == FALSE_STARTS and "Traceback" not in err, err


class AcceleratorError(RuntimeError):
    """Named as torch names a CUDA error."""


def test_a_neighbours_fault_while_the_case_is_built_under_mps_is_a_fault_else_ours(monkeypatch):
    """The real case builder: under MPS a neighbour's fault surfaces at the next CUDA call, often while
    this worker builds its case; that is the session's to replay alone, not an internal error."""
    from hypothesis import find

    import mambafuzz.judge.materialize as materialize
    from mambafuzz import contracts

    case = find(contracts.strategy("batch_memcpy"), lambda c: True)

    def poisoned(*args):
        raise AcceleratorError("CUDA error: unspecified launch failure")

    monkeypatch.setattr(materialize, "fill_bytes", poisoned)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/some-mps-pipe")
    verdict = engine.run_case(None, case, "cuda")
    assert verdict.kind == "fault" and "unspecified launch failure" in verdict.fault
    assert "shared under MPS" in verdict.fault
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    with pytest.raises(InternalError, match="preparing the case"):
        engine.run_case(None, case, "cuda")


def test_a_compiled_triton_launch_that_reports_a_cuda_error_is_a_fault():
    """Triton's launcher raises a CUDA error as RuntimeError("Triton Error [CUDA]: ..."), at the launch
    after the faulting one: on a GPU a fault, not an interpreter's failure (inconclusive)."""
    verdict = engine.Verdict(reps=0, failures=0, mode="compare")
    engine._judge_exception(verdict, RuntimeError("Triton Error [CUDA]: unspecified launch failure"), "cuda")
    assert verdict.kind == "fault" and "Triton Error [CUDA]" in verdict.fault and verdict.failures == 1


def test_the_replay_alone_has_no_mps_pipe_no_share_and_its_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/p")
    monkeypatch.setenv("CUDA_MPS_LOG_DIRECTORY", "/l")
    monkeypatch.setenv("MAMBAFUZZ_GPU_MEMORY_SHARE", "0.5")
    with confirm._alone_on(3):
        assert not mps.under_mps()
        assert "MAMBAFUZZ_GPU_MEMORY_SHARE" not in os.environ and os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    assert mps.under_mps() and os.environ["MAMBAFUZZ_GPU_MEMORY_SHARE"] == "0.5"


def test_one_replay_alone_that_recurs_settles_a_target_every_worker_of_the_gpu_saw_fault(tmp_path, monkeypatch):
    """Under MPS the K workers fuzzing one target all see one worker's fault.  Their files are replayed
    alone in the order they came until one recurs: that one is the finding (not the smaller case some
    other worker reported), the rest are removed unreplayed; a target none of whose faults recur loses
    its finding and goes back to the worker that reported it."""
    import dataclasses
    from types import SimpleNamespace

    from hypothesis import find

    from mambafuzz import findings
    from mambafuzz.search.fuzz import TargetReport
    from mambafuzz import contracts

    case = find(contracts.strategy("batch_memcpy"), lambda c: True)
    session = _session(tmp_path, ["crash_always", "crash_once"])
    paths = {}
    for w, name in enumerate(["sharedk:crash_always"] * 3 + ["sharedk:crash_once"]):
        verdict = engine.Verdict(reps=1, failures=1, mode="compare", fault="illegal memory access")
        f = findings.Finding(target=name, contract="batch_memcpy", device="cuda", mode="compare",
                             case=dataclasses.replace(case, seed=w), verdict=verdict)
        paths[w] = findings.save(f, tmp_path / "crashes")[0]
        session._suspects.append({"target": name, "path": str(paths[w]), "gpu": None, "worker": w})
    for name, w in (("sharedk:crash_always", 2), ("sharedk:crash_once", 3)):  # what the workers reported
        session.reports[name] = TargetReport(name, "batch_memcpy", stop="finding", finished=True)
        session.reports[name].finding = findings.Finding.from_json(
            __import__("json").loads(paths[w].read_text()), path=paths[w])
        session.done.add(name)
    recurs = {str(paths[1])}  # worker 1's case is the culprit; the others' cases pass alone
    calls = []
    monkeypatch.setattr(confirm, "confirm_alone", lambda path, *a: (calls.append(path), (
        path in recurs, "still failing" if path in recurs else "fixed"))[1])
    owner = SimpleNamespace(spec=SimpleNamespace(index=3), remaining=[])
    session._confirm(None, [owner])
    assert calls == [str(paths[0]), str(paths[1]), str(paths[3])]  # worker 2's file never replayed
    always, once = session.reports["sharedk:crash_always"], session.reports["sharedk:crash_once"]
    assert always.finding.path == paths[1] and always.status == "finding" and "sharedk:crash_always" in session.done
    assert [w for w, p in paths.items() if p.exists()] == [1]
    assert once.finding is None and "sharedk:crash_once" not in session.done
    assert [t["name"] for t in owner.remaining] == ["sharedk:crash_once"]

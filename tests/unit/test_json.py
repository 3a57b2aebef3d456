"""One JSON form per record: Verdict, Finding and TargetReport round-trip, a crash has
one kind everywhere, and every command's report shares one envelope."""
import json
import textwrap

import pytest

from mambafuzz import findings
from mambafuzz.judge.engine import Verdict, run_case
from mambafuzz.search.fuzz import TargetReport, fuzz_target
from mambafuzz.kernels import registry

from common import LEFT_SHIFT, RIGHT_SHIFT, mf
from common import forward_bytes as _forward_bytes
from common import fuzz_options as _opts

ENVELOPE = {"schema", "command", "device", "mode", "interrupted", "exit_code"}


def _via_json(body):
    return json.loads(json.dumps(body))  # what a file or a pipe gives back


def _raises(src_ptrs, dst_ptrs, sizes, *, arena):
    raise KeyError("no such row")


def _wild(src_ptrs, dst_ptrs, sizes, *, arena):
    from mambafuzz.kernels.batch_memcpy import batch_memcpy

    batch_memcpy(src_ptrs, dst_ptrs + (1 << 40), sizes)


def _verdicts():
    """Real verdicts of every kind the engine gives on the CPU, and the two the session gives."""
    yield "mismatch", run_case(_forward_bytes, RIGHT_SHIFT, "cpu", mode="compare")
    yield "race", run_case(registry.get("zoo.BM-NOGUARD").fn, LEFT_SHIFT, "cpu", mode="race")
    yield "oob", run_case(_wild, LEFT_SHIFT, "cpu", mode="compare")  # the bounds fence's out-of-bounds hazard
    yield "exception", run_case(_raises, LEFT_SHIFT, "cpu", mode="compare")
    yield "crash", Verdict(reps=1, failures=1, mode="race", fault="worker died (exit code -11)", fault_kind="crash")
    yield "hang", Verdict(reps=1, failures=1, mode="compare", fault="no progress for 4 s", fault_kind="hang")
    yield "fault", Verdict(reps=3, failures=1, mode="compare", fault="AcceleratorError: illegal memory access")
    yield None, run_case(_forward_bytes, LEFT_SHIFT, "cpu", mode="compare")  # forward copy is right here


def test_verdict_round_trips_every_kind():
    kinds = []
    for kind, v in _verdicts():
        assert v.kind == kind, v.summary()
        body = _via_json(v.to_json())
        back = Verdict.from_json(body)
        assert back.to_json() == body and back.kind == kind and back.summary() == v.summary()
        assert back.failed == v.failed and (back.reps, back.failures, back.mode) == (v.reps, v.failures, v.mode)
        assert back.mismatch == v.mismatch
        assert [h.to_json() for h in back.hazards] == [h.to_json() for h in v.hazards]
        assert [h.kind for h in back.hazards] == [h.kind for h in v.hazards]
        kinds.append(kind)
    assert kinds.count("race") == 1 and kinds.count("oob") == 1


def test_verdict_evidence_is_kept():
    _, mismatch = next(_verdicts())
    assert mismatch.mismatch is not None and mismatch.mismatch.count >= 1  # the case really corrupts
    back = Verdict.from_json(_via_json(mismatch.to_json()))
    assert back.mismatch.first == mismatch.mismatch.first and back.mismatch.first[0]["where"].startswith("row 0")
    race = run_case(registry.get("zoo.BM-NOGUARD").fn, LEFT_SHIFT, "cpu", mode="race")
    back = Verdict.from_json(_via_json(race.to_json()))
    assert back.hazards[0].kind == "intra-program" and back.hazards[0].explanation == race.hazards[0].explanation
    assert "intra-program hazard" in back.summary()


@pytest.mark.parametrize("change, needle", [
    ({"kind": "fault"}, "evidence"),          # the kind must be what the evidence says
    ({"kind": "bogus"}, "'kind'"),
    ({"reps": -1}, "'reps'"),
    ({"failures": True}, "'failures'"),
    ({"mode": "fast"}, "'mode'"),
    ({"mismatch": {"count": 1}}, "total"),
])
def test_verdict_from_json_names_what_is_wrong(change, needle):
    _, v = next(_verdicts())
    with pytest.raises(ValueError) as info:
        Verdict.from_json({**v.to_json(), **change})
    assert needle in str(info.value)
    body = v.to_json()
    del body["reps"]
    with pytest.raises(ValueError, match="reps"):
        Verdict.from_json(body)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """A shrunk mismatch finding of a wrong user kernel, saved under crashes/."""
    tmp = tmp_path_factory.mktemp("fuzzed")
    target = registry.Target(name="user.forward", contract="batch_memcpy", kind="user", overlap="full",
                             description="forward byte copy", fn=_forward_bytes)
    report = fuzz_target(target, _opts(tmp, mode="compare", shrink_budget=30))
    assert report.finding is not None and report.finding.path.exists()
    return report


def test_finding_and_report_round_trip(fuzzed):
    f = fuzzed.finding
    body = _via_json(f.to_json())
    assert body["kind"] == "mismatch" == body["verdict"]["kind"] and body["path"] == str(f.path)
    back = findings.Finding.from_json(body)
    assert _via_json(back.to_json()) == body
    assert back.case == f.case and back.verdict.mismatch == f.verdict.mismatch and back.path == f.path
    report = _via_json(fuzzed.to_json())
    assert report["status"] == "finding" and report["finding"] == body
    again = TargetReport.from_json(report)
    assert _via_json(again.to_json()) == report and again.status == "finding" and again.finding.case == f.case


def test_a_report_without_a_finding_round_trips():
    r = TargetReport("t", "batch_memcpy", examples=3, min_examples=10, stop="max-examples",
                     rejected=["a", "b"], seconds=1.23456)
    body = _via_json(r.to_json())
    assert body["status"] == "inconclusive" and "only 3 valid example(s)" in body["why"]
    assert body["detail"] is None and body["finding"] is None and body["seconds"] == 1.235
    assert TargetReport.from_json(body).to_json() == body


def test_the_first_failure_fields_are_the_same_read_back():
    """shrink_s is made of the rounded seconds: 5.12345 - 0.4567 rounds to 4.667, but a report read back
    holds 5.123 and 0.457, whose difference is 4.666."""
    from types import SimpleNamespace

    r = TargetReport("t", "batch_memcpy", seconds=5.12345,
                     finding=SimpleNamespace(examples_to_first=3, seconds_to_first=0.4567))
    assert r.first_failure() == {"first_failure_example": 3, "first_failure_s": 0.457, "shrink_s": 4.666}


def test_crash_file_body_is_the_finding(fuzzed):
    f = fuzzed.finding
    record = findings.load(f.path)
    on_disk = record.finding()
    assert on_disk.path == f.path and on_disk.case == f.case
    assert on_disk.verdict.to_json() == f.verdict.to_json()
    assert record.body["kind"] == record.kind == f.verdict.kind == "mismatch"
    assert record.body["schema"] == findings.CRASH_SCHEMA and record.body["replay"].startswith("mambafuzz replay")
    mine = _via_json(f.to_json())
    assert {k: v for k, v in mine.items() if k != "path"} == {k: v for k, v in record.body.items() if k in mine}
    assert mine["shrink_examples"] > 0 and record.body["minimal"] is mine["minimal"]  # rewritten at the end


def test_older_crash_files_still_load(fuzzed, tmp_path):
    """Files written before Finding.to_json kept the counts under "found" and had no kind at the top."""
    body = json.loads(fuzzed.finding.path.read_text())
    old = {k: v for k, v in body.items() if k not in ("kind", "summary", "examples_to_first", "seconds_to_first",
                                                        "shrink_examples")}
    old["found"] = {"examples_to_first": 7, "seconds_to_first": 0.5, "shrink_examples": 11}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    f = findings.load(path).finding()
    assert (f.examples_to_first, f.seconds_to_first, f.shrink_examples) == (7, 0.5, 11)
    assert f.verdict.kind == "mismatch" and f.case == fuzzed.finding.case


DIES = textwrap.dedent('''
    import os

    def die(src_ptrs, dst_ptrs, sizes, *, arena):
        """Takes its process down, the way a segfaulting kernel does."""
        os._exit(3)
''')


@pytest.mark.matrix
def test_a_crash_has_one_kind_in_the_report_on_disk_and_in_replay(tmp_path):
    (tmp_path / "dies.py").write_text(DIES)
    proc = mf("fuzz", "--target", "dies:die", "--contract", "batch_memcpy", "--isolate", "--max-examples", "5",
              "--database", "none", "--json", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    (row,) = doc["targets"]
    finding = row["finding"]
    assert finding["kind"] == finding["verdict"]["kind"] == "crash"
    assert finding["summary"] == "crash: worker died (exit code 3)"
    body = json.loads((tmp_path / finding["path"]).read_text())
    assert body["kind"] == body["verdict"]["kind"] == "crash"
    assert body["verdict"] == finding["verdict"] and body["case"] == finding["case"]
    replayed = mf("replay", finding["path"], "--timeout", "60", "--json", cwd=tmp_path, timeout=300)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    rdoc = json.loads(replayed.stdout)
    (file_row,) = rdoc["files"]
    assert file_row["status"] == "still failing" and file_row["verdict"]["kind"] == "crash"
    assert "replay process died (exit code 3)" in file_row["verdict"]["summary"]
    # one envelope for both documents
    assert ENVELOPE | {"targets"} == set(doc) and ENVELOPE | {"files"} == set(rdoc)
    assert (doc["schema"], doc["command"], doc["exit_code"]) == (1, "fuzz", 1)
    assert (rdoc["schema"], rdoc["command"], rdoc["exit_code"], rdoc["device"]) == (1, "replay", 1, "cpu")


@pytest.mark.matrix
def test_zoo_and_fuzz_reports_share_one_shape(tmp_path):
    zoo = mf("zoo", "--target", "zoo.TAIL-DROP", "--seed", "1", "--max-examples", "50", "--database", "none",
             "--json", cwd=tmp_path)
    fuzz = mf("fuzz", "--target", "zoo.TAIL-DROP", "--seed", "1", "--max-examples", "50", "--database", "none",
              "--no-isolate", "--json", cwd=tmp_path)
    assert zoo.returncode == 0 and fuzz.returncode == 1, zoo.stderr + fuzz.stderr
    zdoc, fdoc = json.loads(zoo.stdout), json.loads(fuzz.stdout)
    assert set(zdoc) == set(fdoc) == ENVELOPE | {"targets"}
    assert (zdoc["command"], zdoc["mode"], zdoc["exit_code"]) == ("zoo", "race", 0)
    (zrow,), (frow,) = zdoc["targets"], fdoc["targets"]
    assert set(zrow) == set(frow) | {"zoo_id", "bug", "caught", "caught_as"}
    assert zrow["zoo_id"] == "TAIL-DROP" and zrow["caught"] and zrow["bug"] and zrow["caught_as"] == ["mismatch"]
    assert zrow["finding"]["kind"] == frow["finding"]["kind"] == "mismatch"
    assert set(zrow["finding"]) == set(frow["finding"])
    # the zoo's crash file holds the same finding as its report
    body = json.loads((tmp_path / zrow["finding"]["path"]).read_text())
    assert body["verdict"] == zrow["finding"]["verdict"] and body["case"] == zrow["finding"]["case"]

"""GPU finding, CPU witness (mambafuzz.search.cross): the child process, its answers, and the crash file.

The child runs the case under the CPU race recorder in a fresh, interpreted
process; these tests call it from this (interpreted) process the way the fuzz
loop does after a GPU failure.
"""
import json
import types

import pytest

from mambafuzz import findings
from mambafuzz.search import cross
from mambafuzz.contracts import case_from_json
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.judge.engine import Verdict
from mambafuzz.kernels import registry
from mambafuzz.judge.materialize import Mismatch
from racy_cases import batch_rows


def test_a_racy_kernel_is_witnessed_and_shrunk_on_the_cpu():
    case = batch_rows(4, 200, -16).with_perturb((2, 2000, 1, 0, 8))
    w = cross.cpu_witness(registry.TARGETS["zoo.BM-NOGUARD"], case, timeout=180, shrink_seconds=60)
    assert w.status == cross.WITNESSED, w
    assert "hazard" in w.summary
    shrunk = case_from_json(w.cpu_case)
    assert isinstance(shrunk, BatchCopyCase) and shrunk.size < case.size
    assert len(shrunk.copies) == 1  # one row shows the missing guard
    assert list(shrunk.size) == w.cpu_size


@pytest.mark.matrix
def test_a_correct_kernel_is_not_witnessed():
    case = batch_rows(2, 64, -16)
    w = cross.cpu_witness(registry.TARGETS["triton.batch_memcpy"], case, timeout=180)
    assert w.status == cross.NOT_WITNESSED, w
    assert w.cpu_case is None
    assert "witness" not in w.line() or "clean" in w.line()


@pytest.mark.matrix
def test_a_target_the_child_cannot_import_is_unavailable_not_a_verdict():
    target = types.SimpleNamespace(name="no_such_module_xyz:copy", overlap="full")
    w = cross.cpu_witness(target, batch_rows(1, 8, -1), timeout=120)
    assert w.status == cross.UNAVAILABLE
    assert "no_such_module_xyz" in w.why and "\n" not in w.why


def test_a_child_that_outlives_its_time_is_unavailable():
    w = cross.cpu_witness(registry.TARGETS["zoo.BM-NOGUARD"], batch_rows(4, 200, -16), timeout=0.5)
    assert w.status == cross.UNAVAILABLE and "0.5 s" in w.why


def test_the_witness_and_both_rates_survive_the_crash_file(tmp_path):
    case = batch_rows(1, 64, -16)
    verdict = Verdict(reps=200, failures=7, mode="compare", mismatch=Mismatch(3, case.arena_size, []))
    witness = cross.Witness(cross.WITNESSED, summary="intra-program hazard",
                            cpu_case=json.loads(json.dumps(case.to_json())),
                            cpu_summary=case.describe(), cpu_size=list(case.size), gpu_rate=[7, 200],
                            adopted=True)
    f = findings.Finding(target="zoo.BM-NOGUARD", contract="batch_memcpy", device="cuda", mode="compare",
                         case=case, verdict=verdict, found_rate=[3, 50], witness=witness.to_json())
    path, written = findings.save(f, tmp_path)
    assert written
    back = findings.load(path)
    again = findings.Finding.from_json(back.body, path)
    assert again.found_rate == [3, 50]
    assert cross.Witness.from_json(again.witness) == witness
    lines = again.gpu_lines()
    assert lines[0].startswith("rate: 3/50 as found; 7/200 on this case")
    assert "CPU-shrunk case" in lines[1] and "7/200" in lines[1] and "(adopted)" in lines[1]


@pytest.mark.parametrize("field,value", [("found_rate", [5, 2]), ("found_rate", "3/50"),
                                         ("witness", {"status": "maybe"})])
def test_a_bad_witness_or_rate_in_a_crash_file_is_one_line(tmp_path, field, value):
    case = batch_rows(1, 64, -16)
    f = findings.Finding(target="zoo.BM-NOGUARD", contract="batch_memcpy", device="cuda", mode="compare",
                         case=case, verdict=Verdict(reps=10, failures=1, mode="compare",
                                                    mismatch=Mismatch(1, case.arena_size, [])))
    path, _ = findings.save(f, tmp_path)
    body = json.loads(path.read_text())
    body[field] = value
    path.write_text(json.dumps(body))
    with pytest.raises(findings.CrashFileError, match=field):
        findings.load(path)


def test_a_kernel_run_without_warp_delays_is_named_in_the_report():
    """instrument's record rides on the verdict (JSON), the target report keeps each kernel once, and the
    CLI prints one NOTE line per kernel."""
    from mambafuzz import cli
    from mambafuzz.search.fuzz import TargetReport, _note_instrumented

    record = {"perturb": [1, 500, 1, 0, 8],
              "kernels": [{"name": "_copy_kernel", "delays": True, "load_sites": 2, "store_sites": 1,
                           "reason": None},
                          {"name": "_opaque", "delays": False, "reason": "no source (a precompiled binary)"}]}
    v = Verdict(reps=50, failures=0, mode="compare", instrumented=record)
    back = Verdict.from_json(json.loads(json.dumps(v.to_json())))
    assert back.instrumented == record
    report = TargetReport("pkg.mod:copy", "batch_memcpy", examples=20, stop="max-examples")
    for _ in range(3):
        _note_instrumented(report, back)
    assert report.uninstrumented == {"_opaque": "no source (a precompiled binary)"}
    assert TargetReport.from_json(json.loads(json.dumps(report.to_json()))).uninstrumented == report.uninstrumented
    lines = cli.output.details([report], "cuda")
    assert lines == ["NOTE pkg.mod:copy: kernel _opaque ran without warp delays: no source (a precompiled binary)"]


@pytest.mark.matrix
def test_the_witness_says_where_interpreted_values_differ_from_the_gpus():
    """The GPU's evidence travels to the CPU child; its first differing value comes back on its own line."""
    case = BatchCopyCase(arena_size=64, copies=((0, 32, 13),), seed=3)
    gpu = Mismatch(count=1, total=64, first=[{"offset": 44, "expected": 0, "actual": 0xAB, "where": "row 0"}])
    w = cross.cpu_witness(registry.TARGETS["triton.batch_memcpy"], case, timeout=180, compiled=gpu)
    assert w.status == cross.NOT_WITNESSED, w
    assert w.divergence.startswith("interpreted and compiled differ on this case: first at arena+44 (row 0): "
                                   "compiled 0xab, interpreted 0x"), w.divergence
    finding = findings.Finding(target="triton.batch_memcpy", contract="batch_memcpy", device="cuda",
                               mode="compare", case=case, verdict=Verdict(reps=50, failures=50, mode="compare",
                                                                          mismatch=gpu), witness=w.to_json())
    assert finding.gpu_lines()[-1] == w.divergence

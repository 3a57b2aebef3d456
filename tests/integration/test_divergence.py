"""Interpreted against compiled: a GPU crash file replayed on the CPU says where the values differ.

The compiled run's evidence is in the crash file (its first differing bytes,
with the values the GPU wrote).  Replayed on the CPU, the first of those whose
interpreted value is not the GPU's becomes one line of its own: a fact about
Triton's interpreter, never a finding, so the row's status and exit code come
from the CPU verdict alone.  A TAIL-DROP case stands in for a GPU finding: its
CPU run drops the same bytes, so only the value the file says the GPU wrote
decides whether the line appears.
"""
import json

from mambafuzz import findings
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.findings.replay import STILL_FAILING, replay_one
from mambafuzz.judge.engine import run_case
from mambafuzz.cli import replay_lines
from mambafuzz.control.targets import resolve_one

CASE = BatchCopyCase(arena_size=64, copies=((0, 32, 13),), seed=3)


def _gpu_crash_file(tmp_path, change_actual: bool):
    """A TAIL-DROP finding on CASE, its file edited to read as a GPU finding (device cuda)."""
    target = resolve_one("zoo.TAIL-DROP", contract="batch_memcpy")
    verdict = run_case(target.fn, CASE, "cpu")
    assert verdict.kind == "mismatch", verdict.summary()
    finding = findings.Finding(target="zoo.TAIL-DROP", contract="batch_memcpy", device="cpu", mode="compare",
                               case=CASE, verdict=verdict)
    path, _ = findings.save(finding, tmp_path)
    body = json.loads(path.read_text())
    body["device"] = "cuda"
    first = body["verdict"]["mismatch"]["first"][0]
    if change_actual:               # the GPU wrote another value there than the interpreter does
        first["actual"] = (first["actual"] + 0x5A) % 256
    path.write_text(json.dumps(body))
    return path, first


def test_a_gpu_crash_file_replayed_on_the_cpu_names_the_first_value_that_differs(tmp_path):
    path, first = _gpu_crash_file(tmp_path, change_actual=True)
    row = replay_one(findings.load(path), device="cpu", reps=1, mode="compare")
    assert row.status == STILL_FAILING                 # the CPU verdict alone decides the row
    line = row.divergence()
    assert line.startswith(f"interpreted and compiled differ on this case: first at arena+{first['offset']} ("), line
    assert f"compiled 0x{first['actual']:02x}, interpreted 0x" in line
    assert line.endswith("(a fact about Triton's interpreter, not a finding)")
    assert row.to_json()["verdict"]["divergence"] == line
    printed = replay_lines([row], width=80)
    assert any(text.strip().startswith("interpreted and compiled differ") for text in printed), printed


def test_no_line_where_the_interpreter_computes_what_the_gpu_wrote(tmp_path):
    path, _ = _gpu_crash_file(tmp_path, change_actual=False)
    row = replay_one(findings.load(path), device="cpu", reps=1, mode="compare")
    assert row.status == STILL_FAILING and row.divergence() == ""


def test_a_cpu_crash_file_is_never_compared(tmp_path):
    path, _ = _gpu_crash_file(tmp_path, change_actual=True)
    body = json.loads(path.read_text())
    body["device"] = "cpu"
    path.write_text(json.dumps(body))
    row = replay_one(findings.load(path), device="cpu", reps=1, mode="compare")
    assert row.divergence() == ""

"""A kernel Triton cannot compile for one input is a finding of kind ``compile`` (issue 25 item 3).

The compile error is real: Triton's compiler runs on the CPU for an sm_90
target (``style_kernels.compile_check``), the way ``JITFunction.run`` would
on a GPU box.  Expected text comes from the kernel's own source lines.
"""
import json
import linecache
import os

import pytest

from common import ROOT, fuzz_options, mf
from mambafuzz.judge import blame
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.judge.engine import Verdict, run_case
from mambafuzz.search.fuzz import fuzz_target
from mambafuzz.control.targets import user_target
from style_kernels import compile_check

ONE_COPY = BatchCopyCase(arena_size=64, copies=((0, 32, 8),), seed=1)
TWO_COPIES = BatchCopyCase(arena_size=64, copies=((0, 32, 8), (8, 48, 8)), seed=1)


def _kernel_line(text: str) -> int:
    """The line of style_kernels/compile_check.py that holds `text`."""
    path = compile_check.__file__
    return next(i for i in range(1, 200) if text in linecache.getline(path, i))


def _raised(n: int) -> Exception:
    import torch
    ptrs = torch.zeros(4, dtype=torch.int64)
    try:
        compile_check.run(compile_check.copy_rows, ptrs, ptrs, ptrs.to(torch.int32), n, BLOCK=64)
    except Exception as exc:  # noqa: BLE001 - the compiler's own exception, judged below
        return exc
    raise AssertionError("the kernel compiled")


def test_compile_error_is_blamed_on_the_kernel_with_line_message_and_specialisation():
    who = blame.classify(_raised(1))
    assert who.who == blame.COMPILE
    line = _kernel_line("rows = n.to(tl.int64)")
    assert f"compile_check.py:{line}: rows = n.to(tl.int64)" in who.message
    assert "_copy_rows" in who.message
    assert "'int' object has no attribute 'to'" in who.message    # the compiler's message, kept
    assert "n=1 (an int equal to 1 is compiled as the constant 1)" in who.message
    assert "BLOCK=64 (constexpr)" in who.message
    assert "inconclusive" not in who.message
    assert "\n" not in who.message


def test_other_exceptions_are_not_compile_failures():
    assert blame.compile_failure(ValueError("no")) is None
    who = blame.classify(_wrapped_value_error())
    assert who.who != blame.COMPILE


def _wrapped_value_error():
    try:
        raise ValueError("adapter refused")
    except ValueError as exc:
        return exc


def test_engine_verdict_kind_compile_round_trips():
    verdict = run_case(compile_check.widened_count_copy, ONE_COPY, "cpu", mode="race")
    assert verdict.kind == "compile" and verdict.failed
    assert verdict.summary().startswith("compile: Triton could not compile _copy_rows at compile_check.py:")
    back = Verdict.from_json(json.loads(json.dumps(verdict.to_json())))
    assert back.kind == "compile" and back.compile == verdict.compile
    # the same kernel compiles for two copies (n is an i32 argument there) and copies right
    assert not run_case(compile_check.widened_count_copy, TWO_COPIES, "cpu", mode="race").failed


def test_fuzzing_finds_shrinks_and_saves_a_compile_finding(tmp_path):
    target = user_target("style_kernels.compile_check:widened_count_copy", "batch_memcpy")
    report = fuzz_target(target, fuzz_options(tmp_path, max_examples=40))
    finding = report.finding
    assert finding is not None and finding.verdict.kind == "compile"
    assert len(finding.case.copies) == 1             # the input the compiler rejects, and no more
    saved = json.loads(finding.path.read_text())
    assert saved["verdict"]["kind"] == "compile" and "n=1" in saved["verdict"]["compile"]


@pytest.mark.slow
@pytest.mark.matrix
def test_replay_of_a_compile_finding_still_fails(tmp_path):
    target = user_target("style_kernels.compile_check:widened_count_copy", "batch_memcpy")
    finding = fuzz_target(target, fuzz_options(tmp_path, max_examples=40)).finding
    out = mf("replay", finding.path, cwd=tmp_path, pythonpath=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "still failing" in out.stdout and "compile" in out.stdout, out.stdout


def test_the_gpu_adapter_runs_clean_in_the_interpreter():
    """Interpreted, nothing is specialised: the same launch copies right and races nowhere."""
    verdict = run_case(compile_check.widened_count_launch, ONE_COPY, "cpu", mode="race")
    assert not verdict.failed, verdict.summary()
    left = BatchCopyCase(arena_size=1024, copies=((300, 44, 600),), seed=2)   # dst < src, overlapping
    assert not run_case(compile_check.widened_count_launch, left, "cpu", mode="race").failed


@pytest.mark.parametrize("interpret, says", [("1", "Triton {}'s interpreter failed"),
                                             ("0", "Triton {} (compiled) failed")])
def test_a_failure_inside_triton_names_the_interpreter_only_when_one_runs(monkeypatch, interpret, says):
    """Where Triton's own code raises (here `triton.cdiv` on a string), the inconclusive line names the
    interpreter only under TRITON_INTERPRET=1: on a GPU box nothing is interpreted."""
    import triton

    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    try:
        triton.cdiv("a", 2)
    except TypeError as exc:
        who = blame.classify(exc)
    assert who.who == blame.INTERPRETER and who.message.startswith(says.format(triton.__version__)), who.message

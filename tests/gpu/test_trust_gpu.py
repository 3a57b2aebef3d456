"""Issue 25 on a GPU box: what the CPU can only approximate, checked where users meet it.

- A kernel Triton cannot compile for one input (an int argument specialised
  to the constant 1, then ``.to()`` on it) is a ``compile`` finding naming the
  kernel line, the compiler's message and the specialisation; other targets
  of the same run are judged as usual.
- A GPU finding's CPU witness runs engine-style kernels with loop bounds
  loaded from memory on the box's own Triton (3.6 on the H200), where the
  interpreter as shipped cannot.
"""
import json
import linecache

import pytest

pytestmark = pytest.mark.gpu


def _line(module, text: str) -> int:
    return next(i for i in range(1, 400) if text in linecache.getline(module.__file__, i))


def test_a_kernel_that_does_not_compile_for_one_input_is_a_compile_finding(tmp_path):
    from style_kernels import compile_check

    from mambafuzz.cases.batch_memcpy import BatchCopyCase
    from mambafuzz.judge.engine import run_case

    one = BatchCopyCase(arena_size=4096, copies=((0, 2048, 1000),), seed=1)
    verdict = run_case(compile_check.widened_count_launch, one, "cuda", reps=10, mode="compare")
    assert verdict.kind == "compile", verdict.summary()
    line = _line(compile_check, "rows = n.to(tl.int64)")
    assert f"compile_check.py:{line}: rows = n.to(tl.int64)" in verdict.compile
    assert "n=1 (an int equal to 1 is compiled as the constant 1)" in verdict.compile
    two = BatchCopyCase(arena_size=4096, copies=((0, 2048, 1000), (1024, 3072, 900)), seed=1)
    assert not run_case(compile_check.widened_count_launch, two, "cuda", reps=10, mode="compare").failed


def test_the_cli_reports_a_compile_finding_and_still_judges_the_other_target(tmp_path):
    import os

    from common import ROOT, mf

    out = mf("fuzz", "--target", "style_kernels.compile_check:widened_count_launch", "--target",
             "triton.batch_memcpy", "--contract", "batch_memcpy", "--overlap", "left", "--device", "cuda",
             "--reps", "10", "--max-examples", "30", "--seed", "1", "--database", "none", "--json",
             "--crashes-dir", tmp_path / "crashes", cwd=tmp_path,
             pythonpath=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(out.stdout)
    by_name = {t["target"]: t for t in doc["targets"]}
    user = by_name["style_kernels.compile_check:widened_count_launch"]
    assert user["status"] == "finding" and user["finding"]["kind"] == "compile"
    assert len(user["finding"]["case"]["copies"]) == 1
    assert by_name["triton.batch_memcpy"]["status"] == "clean"


def test_the_cpu_witness_runs_loaded_loop_bounds_on_this_boxs_triton():
    from mambafuzz.cases.batch_memcpy import BatchCopyCase
    from mambafuzz.search.cross import WITNESSED, cpu_witness
    from mambafuzz.control.targets import user_target

    target = user_target("style_kernels.batch:left_barrier_before_load", "batch_memcpy", overlap="left")
    case = BatchCopyCase(arena_size=256, copies=((16, 8, 64),), seed=3)
    witness = cpu_witness(target, case, timeout=120, shrink_seconds=20)
    assert witness.status == WITNESSED, witness.line()
    assert "hazard" in witness.summary, witness.summary

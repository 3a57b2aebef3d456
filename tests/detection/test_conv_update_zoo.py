"""conv_update, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to one
row; the correct Triton kernel and the torch path clean under the same fuzzing, with the race check on."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing, zoo_options
from mambafuzz.kernels import registry
from mambafuzz.search.fuzz import fuzz_target

ROWS = [e.id for e in registry.ZOO if e.contract == "conv_update"]




def test_the_rows_are_the_bug_classes_engines_shipped():
    assert set(ROWS) == {"CU-NOCLAMP", "CU-DSTPAD", "CU-PAD0", "CU-NARROW", "CU-COL0", "CU-ROWSTRIDE", "CU-I32"}
    assert registry.get("zoo.CU-NOCLAMP").options == {"min_accepted": "0"}  # nacc = 0 only when it may be issued


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    caught_and_shrunk(zoo_id, tmp_path, lambda case: case.lens)


@pytest.mark.matrix
def test_a_narrow_spec_state_is_caught_quickly(tmp_path):
    report = fuzz_target(registry.get("zoo.CU-NARROW"), zoo_options(tmp_path, max_examples=60, shrink_budget=50))
    assert report.finding is not None and report.finding.verdict.kind == "mismatch"


@pytest.mark.matrix
@pytest.mark.parametrize("name", ["triton.conv_update", "torch.conv_update"])
def test_correct_kernels_pass_the_same_fuzzing(name, tmp_path):
    clean_under_zoo_fuzzing(name, tmp_path, 80)


@pytest.mark.matrix
def test_the_correct_kernel_is_clean_with_nacc_0_and_pad_0(tmp_path):
    clean_under_zoo_fuzzing("triton.conv_update", tmp_path, 40, min_accepted="0", pad="0")

"""delta_update, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to at most
two sequences; the correct Triton kernel and the torch path clean under the same fuzzing, race check on."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing
from mambafuzz.kernels import registry

ROWS = [e.id for e in registry.ZOO if e.contract == "delta_update"]


def test_the_rows_are_the_bug_classes_engines_shipped():
    assert set(ROWS) == {"DU-TRANSPOSE", "DU-STEPS", "DU-PADSTORE"}
    assert registry.zoo_entry("DU-TRANSPOSE").caught_as("cpu") == ("mismatch",)  # a wrong value, never a race


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    caught_and_shrunk(zoo_id, tmp_path, lambda case: case.lens)


@pytest.mark.matrix
def test_a_short_buffer_overrun_is_caught_when_the_next_row_is_live(tmp_path):
    f = caught_and_shrunk("DU-STEPS", tmp_path, lambda case: case.lens)
    assert f.case.inter_rows and f.case.cache_steps < max(f.case.lens)


@pytest.mark.matrix
@pytest.mark.parametrize("name", ["triton.delta_update", "torch.delta_update"])
def test_correct_kernels_pass_the_same_fuzzing(name, tmp_path):
    clean_under_zoo_fuzzing(name, tmp_path, 80)


@pytest.mark.matrix
def test_the_correct_kernel_is_clean_with_nacc_0_and_pad_0(tmp_path):
    clean_under_zoo_fuzzing("triton.delta_update", tmp_path, 40, min_accepted="0", pad="0")

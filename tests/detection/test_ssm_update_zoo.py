"""ssm_update, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to at most
two rows; the correct Triton kernel and the torch path clean under the same fuzzing, with the race check on."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing
from mambafuzz.kernels import registry

ROWS = [e.id for e in registry.ZOO if e.contract == "ssm_update"]


def test_the_rows_are_the_bug_classes_engines_shipped():
    assert set(ROWS) == {"SSM-NOCLAMP", "SSM-DSTPAD", "SSM-TOKSTRIDE", "SSM-I32"}
    assert registry.get("zoo.SSM-NOCLAMP").options == {"min_accepted": "0"}  # nacc = 0 only when it may be issued


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    f = caught_and_shrunk(zoo_id, tmp_path, lambda case: case.lens)
    if zoo_id == "SSM-I32":
        assert f.case.exact and f.case.slots * f.case.slot_stride > 1 << 31, f.case.describe()


@pytest.mark.matrix
@pytest.mark.parametrize("name", ["triton.ssm_update", "torch.ssm_update"])
def test_correct_kernels_pass_the_same_fuzzing(name, tmp_path):
    clean_under_zoo_fuzzing(name, tmp_path, 80)


@pytest.mark.matrix
def test_the_correct_kernel_is_clean_with_nacc_0_and_pad_0(tmp_path):
    clean_under_zoo_fuzzing("triton.ssm_update", tmp_path, 40, min_accepted="0", pad="0")

"""conv_update, both directions: every zoo row caught on the CPU by a kind it declares and shrunk to one
row; the correct Triton kernel and the torch path clean under the same fuzzing, with the race check on."""
import pytest

from common import caught_and_shrunk, clean_under_zoo_fuzzing, zoo_options
from mambafuzz.cases.conv_update import ConvUpdateCase
from mambafuzz.judge.engine import run_case
from mambafuzz.kernels import registry
from mambafuzz.search.fuzz import fuzz_target
from mambafuzz.search.reduce import reduce_case

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


def test_an_unclamped_read_shrinks_to_one_column_and_a_slot_with_a_neighbour():
    """CU-NOCLAMP reads window column nacc - 1 = -1: slot s's column -1 is slot s - 1's last element. From two
    rows, three index columns (only column 0 is used without prefix caching) and a slot past 2^28, the
    smallest case that still differs from the oracle, worked by hand: one row of one token at nacc 0, W 2,
    one channel of one column, a 1-D index naming slot 1 of 2 (slot 0 would read before the pool: oob, a
    different failure), no padding, the arena 2 slots of 4 bytes + 64."""
    target, big = registry.get("zoo.CU-NOCLAMP"), 1 << 28
    start = ConvUpdateCase(arena_size=(big + 1) * 24 + 64, dtype="float32", layout="dim", offset=0, slots=big + 1,
                           dim=2, state_len=3, slot_stride=24, width=3, lens=(2, 2), idx=((big, 7, 3), (5, 2, 9)),
                           idx_2d=True, idx_stride=4, nacc=(0, 1), bias=True, silu=True)

    def still_wrong(case):
        verdict = run_case(target.fn, case, "cpu", mode="race", amplifiable=False)
        return verdict.failed and verdict.mismatch is not None

    assert still_wrong(start)
    minimal, _ = reduce_case(start, still_wrong, lambda: True, options=target.options)
    assert minimal == ConvUpdateCase(arena_size=72, dtype="float32", layout="dim", offset=0, slots=2, dim=1,
                                     state_len=1, slot_stride=4, width=2, lens=(1,), idx=((1,),), bias=False,
                                     silu=False, nacc=(0,)), minimal.describe()

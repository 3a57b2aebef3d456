"""state_scatter, both directions: each zoo row caught on the CPU by a kind it declares and shrunk to at most
two rows; the correct Triton kernel and the torch path clean under the same fuzzing, with the race check on."""
import pytest

from mambafuzz.cases.state_scatter import StateScatterCase
from mambafuzz.judge.engine import run_case
from common import caught_and_shrunk, zoo_options
from mambafuzz.kernels import registry
from mambafuzz.oracle import SlotBuffer
from mambafuzz.search.fuzz import fuzz_target

ROWS = [e.id for e in registry.ZOO if e.contract == "state_scatter"]




def test_the_rows_are_the_scatter_bugs_engines_shipped():
    assert set(ROWS) == {"SS-WW", "SS-FREED0", "SS-I32"}


@pytest.mark.matrix
@pytest.mark.parametrize("zoo_id", ROWS)
def test_every_row_is_caught_and_shrunk(zoo_id, tmp_path):
    caught_and_shrunk(zoo_id, tmp_path, lambda case: case.dst_idx)


def test_a_freed_row_writing_slot_0_is_caught_quickly(tmp_path):
    report = fuzz_target(registry.get("zoo.SS-FREED0"), zoo_options(tmp_path, max_examples=60, shrink_budget=50))
    assert report.finding is not None and report.finding.verdict.kind == "mismatch"
    assert report.finding.case.dst_idx[0] == -1


def test_a_slot_offset_formed_in_32_bits_is_caught_past_2g_elements():
    """A drawn case whose valid row stores a slot past 2^31 elements: the correct kernel is clean, SS-I32's
    wrapped offset lands elsewhere (the fence's oob, or wrong bytes)."""
    from hypothesis import HealthCheck, Phase, given, settings

    from mambafuzz import contracts

    found = []

    def crossing(case) -> bool:  # a valid row's slot offset, in elements, past 2^31
        p = case.pool
        return any(0 <= s < case.steps and 0 <= d < p.slots and r < case.rows
                   and d * (p.slot_stride // p.elem_size) >= 1 << 31
                   for r, (d, s) in enumerate(zip(case.dst_idx, case.step_idx)))

    @settings(database=None, max_examples=300, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy("state_scatter"))
    def look(case):
        if not found and contracts.of(case).features(case)["past_2g_elements"] == "yes" and crossing(case):
            found.append(case)

    look()
    (case,) = found
    assert run_case(registry.get("triton.state_scatter").fn, case, "cpu", mode="race").kind is None
    verdict = run_case(registry.get("zoo.SS-I32").fn, case, "cpu", mode="race")
    assert verdict.kind in registry.zoo_entry("SS-I32").caught_as("cpu"), verdict.summary()


def test_a_skipped_row_on_a_valid_rows_slot_is_a_write_write_race():
    # row 0 is skipped (step -1) on row 1's slot 3; in grid order it stores first, so the bytes come out
    # right: only the race check sees the two stores
    case = StateScatterCase(arena_size=512, pool=SlotBuffer(64, 2, 4, 8, 8, 32, 2), states_offset=256, rows=2,
                            steps=2, dst_idx=(3, 3), step_idx=(-1, 1))
    assert run_case(registry.get("triton.state_scatter").fn, case, "cpu", reps=1, mode="race").kind is None
    verdict = run_case(registry.get("zoo.SS-WW").fn, case, "cpu", reps=1, mode="race")
    assert verdict.kind == "race" and not verdict.failures


@pytest.mark.matrix
@pytest.mark.parametrize("name", ["triton.state_scatter", "torch.state_scatter"])
def test_correct_kernels_pass_the_same_fuzzing(name, tmp_path):
    report = fuzz_target(registry.get(name), zoo_options(tmp_path, max_examples=80))
    assert report.finding is None, report.finding.verdict.summary()
    assert report.examples == 80 and not report.rejected


def test_the_correct_kernel_is_clean_on_conv_windows(tmp_path):
    opts = zoo_options(tmp_path, max_examples=30, contract_options={"scatter": "window"})
    report = fuzz_target(registry.get("triton.state_scatter"), opts)
    assert report.finding is None, report.finding.verdict.summary()
    assert report.examples == 30

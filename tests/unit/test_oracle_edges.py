"""Oracle edges the mutation score found unguarded (bench/mutation_score.py, bench/RESULTS.md): each test
fails when the mutant it names is put back."""
import numpy as np
import pytest

from mambafuzz.contracts.updates import from_float64, to_float64
from mambafuzz.oracle import OracleError, PoolLayout, SlotConflict, check_batch, check_slots, decide
from mambafuzz.oracle._checks import int_array
from mambafuzz.oracle.conv_update import IllPosedUpdate
from mambafuzz.oracle.delta_update import plan_delta_update
from mambafuzz.oracle.ssm_update import expect_ssm_update, plan_ssm_update


def test_ssm_spec_stores_only_the_columns_of_a_rows_tokens():
    """Row 0 has 1 token and 3 index columns: slots 2 and 3 are not its to store (`tok < lens`, not `!=`)."""
    rows, tmax = 2, 2
    one = np.ones((rows, tmax, 1, 1))
    got = expect_ssm_update(np.zeros((7, 1, 1, 1)), one, one, np.zeros((1, 1, 1)), one, one, [1, 2],
                            [[1, 2, 3], [4, 5, 6]], nacc=[1, 1])
    assert np.flatnonzero(got.stored).tolist() == [1, 4, 5]


def test_ssm_three_rows_on_one_slot_name_the_first_two():
    with pytest.raises(IllPosedUpdate, match="rows 0 and 1 both store slot 1"):
        plan_ssm_update(2, [1, 1, 1], [[1], [1], [1]])


def test_delta_live_rows_that_store_nothing_are_not_ill_posed():
    """Both rows' only written column is the pad; row 1 reads slot 0: nobody writes it."""
    plan_delta_update(4, [1, 1], [[-1, 3], [-1, 0]], nacc=[2, 2], pad=-1)


def test_a_negative_pool_field_is_named():
    with pytest.raises(OracleError, match="negative offset -1"):
        PoolLayout("temporal", -1, 2, 64, 1, inner=(8,)).validate()


def test_postprocess_counts_past_int32_and_a_draft_past_the_tokens_are_named():
    with pytest.raises(OracleError, match="num_computed 2147483648 for request 0 does not fit in int32"):
        decide([1 << 31], [1], [0], [1], [0], 16)
    with pytest.raises(OracleError, match="exceeds num_computed \\+ num_scheduled = 2 "):
        decide([1], [1], [3], [1], [0], 16)


def test_unsigned_index_arrays_are_taken_when_they_fit_int64():
    assert int_array("x", np.array([1, 2], dtype=np.uint8)).tolist() == [1, 2]
    assert int_array("x", np.array([5], dtype=np.uint64)).tolist() == [5]
    with pytest.raises(OracleError, match="too large for int64"):
        int_array("x", np.array([1 << 63], dtype=np.uint64))


def test_a_far_copy_that_does_not_overflow_passes_the_overflow_check():
    check_batch([1 << 40], [(1 << 40) + (1 << 31)], [1 << 30], 1 << 42)
    with pytest.raises(OracleError, match="overflows int64"):
        check_batch([(1 << 63) - 5], [0], [10], 1 << 42)


def test_a_slot_conflict_with_no_buffer_to_place_it_has_offset_minus_1():
    with pytest.raises(SlotConflict) as info:
        check_slots([], [0, 1], [2, 2])
    assert info.value.offset == -1


def test_bfloat16_bits_convert_whatever_string_object_names_the_dtype():
    name = "".join(["bfloat", "16"])  # as a case loaded from JSON holds it: not the interned literal
    assert to_float64(np.array([0x3F80], dtype=np.uint16), name).tolist() == [1.0]
    back = from_float64(np.array([1.0]), name)
    assert back.dtype == np.uint16 and back.tolist() == [0x3F80]

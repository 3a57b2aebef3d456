"""state_scatter (docs/contracts.md#state_scatter): the oracle on hand-worked scatters (dense and conv windows), the
valid-row rule, ill-posed naming, and the contract's memory (views of the arena, the sparse image past 2 GiB)."""
import numpy as np
import pytest

from mambafuzz import contracts
from mambafuzz.cases import as_tuples
from mambafuzz.cases.state_scatter import StateScatterCase
from mambafuzz.errors import CaseError
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle import (IllPosedScatter, OracleError, SlotBuffer, StepStates, expect_state_scatter,
                              plan_state_scatter)

ARENA = np.arange(32, dtype=np.uint8)


def test_a_dense_scatter_copies_each_valid_rows_step_into_its_slot():
    pool = SlotBuffer(0, 1, 3, 2, 2, 6, 1)                  # 3 slots of 2 bytes at 0..5
    states = StepStates(8, 1, 2, 2, 2, 1)                    # [1, R 2, T 2, 2 bytes] at 8: (r, t) at 8 + 4r + 2t
    got = expect_state_scatter(ARENA, pool, states, [2, 0], [1, 0])
    # row 0: slot 2 <- states[0, 0, 1] = bytes 10, 11; row 1: slot 0 <- states[0, 1, 0] = bytes 12, 13
    assert got[:6].tolist() == [12, 13, 2, 3, 10, 11] and np.array_equal(got[6:], ARENA[6:])


def test_two_layers_padded_steps_and_a_slot_major_pool():
    # slot-major: slot s of layer l at 4 * l + 10 * s (layers 4 apart inside a slot), 2 bytes each
    pool = SlotBuffer(0, 2, 2, 2, 10, 4, 1)
    # dense states with 1 byte of padding after each step: (l, r, t) at 20 + 6l + 3t (R 1, T 2)
    states = StepStates(20, 2, 1, 2, 2, 1, pad=1)
    got = expect_state_scatter(ARENA, pool, states, [1], [1])
    assert got[10:12].tolist() == [23, 24] and got[14:16].tolist() == [29, 30]
    assert np.array_equal(np.delete(got, [10, 11, 14, 15]), np.delete(ARENA, [10, 11, 14, 15]))


@pytest.mark.parametrize("pad, want", [(0, [17, 18, 20, 21]), (1, [17, 18, 21, 22])])
def test_conv_windows_are_overlapping_runs_of_one_buffer(pad, want):
    # pool [1, 2, dim 2, W - 1 = 2] of bytes; the buffer [1, R 1, dim 2, T + W - 2 = 3 (+ pad)] at 16
    pool = SlotBuffer(0, 1, 2, 4, 4, 8, 1)
    states = StepStates(16, 1, 1, 2, 4, 1, pad=pad, window=3)
    got = expect_state_scatter(ARENA, pool, states, [1], [1])
    # pool[0, 1, d, w] = buf[0, 0, d, 1 + w]: channel 0's columns 1, 2 then channel 1's
    assert got[4:8].tolist() == want and np.array_equal(got[:4], ARENA[:4])


def test_the_valid_row_rule_each_term():
    # S 3, R 5, T 2: step -1, dst -1, dst S, step T, a valid row, a row past R (on the valid row's slot)
    valid = plan_state_scatter(3, 5, 2, [1, -1, 3, 0, 2, 2], [-1, 0, 0, 2, 1, 0])
    assert valid.tolist() == [False, False, False, False, True, False]
    pool = SlotBuffer(0, 1, 3, 2, 2, 6, 1)
    states = StepStates(8, 1, 5, 2, 2, 1)
    got = expect_state_scatter(ARENA, pool, states, [1, -1, 3, 0, 2, 2], [-1, 0, 0, 2, 1, 0])
    assert np.flatnonzero(got != ARENA).tolist() == [4, 5] and got[4:6].tolist() == [8 + 16 + 2, 8 + 16 + 3]


def test_two_valid_rows_on_one_slot_are_ill_posed_and_named():
    with pytest.raises(IllPosedScatter, match="valid rows 0 and 2 both write slot 4") as info:
        plan_state_scatter(6, 3, 2, [4, 1, 4], [0, 1, 1])
    assert (info.value.first, info.value.second, info.value.slot) == (0, 2, 4)
    plan_state_scatter(6, 3, 2, [4, 4, 4], [0, -1, 2])  # skipped rows on a valid row's slot: fine


def test_bad_oracle_geometry_is_named():
    pool = SlotBuffer(0, 1, 2, 4, 4, 8, 1)
    with pytest.raises(OracleError, match="overlap the pool"):
        expect_state_scatter(ARENA, pool, StepStates(4, 1, 1, 1, 4, 1), [0], [0])
    with pytest.raises(OracleError, match="not dim x"):
        expect_state_scatter(ARENA, pool, StepStates(16, 1, 1, 1, 4, 1, window=4), [0], [0])
    with pytest.raises(OracleError, match="pool's layers"):
        expect_state_scatter(ARENA, pool, StepStates(16, 2, 1, 1, 4, 1), [0], [0])
    with pytest.raises(OracleError, match="mismatched array lengths"):
        expect_state_scatter(ARENA, pool, StepStates(16, 1, 1, 1, 4, 1), [0, 1], [0])


# ---------------------------------------------------------------- the contract
def _case(**kw):
    base = dict(arena_size=512, pool=SlotBuffer(64, 2, 4, 12, 16, 80, 4), states_offset=256, rows=3, steps=2,
                dst_idx=(2, -1, 0, 2), step_idx=(1, 0, 0, 0), states_pad=1)
    base.update(kw)
    return StateScatterCase(**base)


@pytest.mark.parametrize("window", [0, 4])
def test_the_target_gets_views_of_the_arena_and_only_valid_slots_change(window):
    case = _case(window=window)
    m = materialize(case, "cpu")
    pool, states = m.args["pool"], m.args["states"]
    base = m.arena.data_ptr()
    assert pool.data_ptr() == base + 64 and states.data_ptr() == base + 256
    if window:   # slot of dim 1 x W - 1 = 3 int32; the buffer [2, 3, 1, T + W - 2 + pad = 5]
        assert pool.shape == (2, 4, 1, 3) and pool.stride() == (20, 4, 3, 1)
        assert states.shape == (2, 3, 2, 1, 3) and states.stride() == (15, 5, 1, 5, 1)
    else:
        assert pool.shape == (2, 4, 3) and pool.stride() == (20, 4, 1)
        assert states.shape == (2, 3, 2, 3) and states.stride() == (24, 8, 4, 1)
    changed = np.flatnonzero(m.expected != m.snapshot)
    where = {contracts.get("state_scatter").locate(case, int(o)).split(" byte")[0] for o in changed}
    assert where == {"pool layer 0 slot 2", "pool layer 1 slot 2", "pool layer 0 slot 0", "pool layer 1 slot 0"}
    assert [o.name for o in m.outputs] == ["dst_indices", "step_indices"]
    from mambafuzz.kernels.state_scatter import contract_fn, torch_fn
    for fn in (contract_fn(None), torch_fn):
        m.restore()
        m.run(fn)
        assert m.compare() is None


def test_locate_names_pool_padding_and_states():
    contract = contracts.get("state_scatter")
    case = _case()
    assert contract.locate(case, 64 + 16 + 12) == "pool layer 0 slot 1 byte 12 (padding; no valid row writes this slot)"
    assert contract.locate(case, 64 + 80 + 2 * 16).endswith("(data; written by row 0 (step 1))")
    assert contract.locate(case, 256 + 96 + 32 + 12) == "states layer 1 row 1 step 0 padding"
    assert contract.locate(case, 20) == "outside the pool and the states"


def test_a_slot_past_2_gib_is_a_sparse_image_and_the_kernel_reaches_it():
    far = (1 << 31) // 16 + 1  # 1-byte elements: its offset is past 2^31 elements
    pool = SlotBuffer(64, 1, far + 1, 12, 16, (far + 1) * 16, 1)
    case = _case(pool=pool, states_offset=0 + 64 + pool.nbytes + 64, arena_size=64 + pool.nbytes + 512,
                 dst_idx=(far, -1, 0, 1), step_idx=(1, 0, 2, 0))
    m = materialize(case, "cpu")
    assert m.positions is not None and m.positions.size < 4096
    changed = m.positions[np.flatnonzero(m.expected != m.snapshot)]
    assert changed.min() == 64 + far * 16 and changed.max() < 64 + far * 16 + 12
    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels.state_scatter import contract_fn
    verdict = run_case(contract_fn(None), case, "cpu", reps=1, mode="race")  # the fence: a wrapped offset is oob
    assert verdict.kind is None, verdict.summary()


def test_bad_geometry_is_one_line():
    with pytest.raises(CaseError, match="overlap the pool"):
        materialize(_case(states_offset=100), "cpu")
    with pytest.raises(CaseError, match="index values must fit int32"):
        materialize(_case(dst_idx=(1 << 31, 0, 1, 2)), "cpu")
    with pytest.raises(CaseError, match="valid rows 0 and 3 both write slot 2"):
        materialize(_case(rows=4), "cpu")
    with pytest.raises(CaseError, match="not dim x"):
        materialize(_case(window=3), "cpu")
    body = _case().to_json()
    body["pool"] = {**body["pool"], "slots": "4"}
    with pytest.raises(CaseError, match="case field 'pool.slots' must be an integer"):
        contracts.case_from_json(body)
    body["pool"] = [1, 2]
    with pytest.raises(CaseError, match="case field 'pool' must be an object"):
        contracts.case_from_json(body)


def test_a_case_goes_to_json_and_back():
    case = _case(window=4, index_dtype="int64")
    back = contracts.case_from_json(case.to_json())
    assert back == case and back.pool == case.pool and as_tuples(case.to_json()["dst_idx"]) == case.dst_idx


def test_every_cut_is_valid_and_strictly_smaller():
    contract = contracts.get("state_scatter")
    case = _case(window=4, step_idx=(0, 0, 0, 0), arena_size=376)  # steps lowest, the arena cut: such cuts are no-ops
    cuts = list(contract.candidates(case))
    assert cuts and all(c.size < case.size for c in cuts)
    kept = [c for c in cuts if contract.valid(c)]
    assert any(len(c.dst_idx) == 3 for c in kept) and any(c.window == 0 for c in kept)


@pytest.mark.parametrize("touch", ["dst_indices", "step_indices", "states"])
def test_a_target_that_changes_an_input_is_caught(touch):
    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels.state_scatter import contract_fn

    correct = contract_fn(None)

    def fn(pool, states, dst_indices, step_indices):
        correct(pool, states, dst_indices, step_indices)
        element = {"dst_indices": dst_indices[0], "step_indices": step_indices[0], "states": states[0, 0, 0, 0]}
        element[touch].add_(1)

    verdict = run_case(fn, _case(), "cpu", reps=1, mode="race")
    assert verdict.kind == "mismatch"
    text = verdict.mismatch.summary()
    assert (f"{touch} (an input) element 0" in text) if touch != "states" else "states layer 0 row 0 step 0" in text

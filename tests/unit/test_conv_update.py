"""conv_update (docs/contracts.md#conv_update): the oracle on hand-worked steps, its ill-posed cases, and the
contract's memory."""
import dataclasses

import numpy as np
import pytest

from mambafuzz import contracts
from mambafuzz.cases.conv_update import ConvUpdateCase
from mambafuzz.contracts.updates import from_float64, to_float64
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle import OracleError
from mambafuzz.oracle.conv_update import IllPosedUpdate, conv_tolerance, expect_conv_update

W2 = np.array([[2.0, 3.0]])      # one channel, taps w0 = 2, w1 = 3
B1 = np.array([0.5])


def _pool(*slots):
    return np.array([[list(s)] for s in slots], dtype=np.float64)  # [S, dim 1, SL]


def test_a_decode_step_convolves_the_window_with_the_tokens_and_keeps_the_last_w_minus_1():
    pool = _pool([9.0], [7.0])                       # slot 1 holds the window [7]
    got = expect_conv_update(pool, [np.array([[1.0, 4.0]])], W2, B1, [[1]])
    # full = [7, 1, 4]: out0 = .5 + 2*7 + 3*1 = 17.5; out1 = .5 + 2*1 + 3*4 = 14.5; new state [4]
    assert got.out[0].tolist() == [[17.5, 14.5]]
    assert got.pool.tolist() == [[[9.0]], [[4.0]]] and got.stored == [1]
    assert got.scale[0].tolist() == [[0.5 + 14 + 3, 0.5 + 2 + 12]]


def test_silu_is_applied_after_the_bias():
    got = expect_conv_update(_pool([0.0], [1.0]), [np.array([[1.0]])], W2, B1, [[1]], silu=True)
    acc = 0.5 + 2 * 1 + 3 * 1
    assert got.out[0][0, 0] == pytest.approx(acc / (1 + np.exp(-acc)))


def test_a_spec_step_reads_at_nacc_minus_1_and_stores_every_draft_window():
    w3 = np.array([[1.0, 10.0, 100.0]])
    pool = _pool([0, 0, 0, 0], [1.0, 2.0, 3.0, 4.0])  # slot 1, SL 4
    got = expect_conv_update(pool, [np.array([[5.0, 6.0]])], w3, None, [[1]], nacc=[2])
    # off = 1: window [2, 3]; full = [2, 3, 5, 6]; out = [2 + 30 + 500, 3 + 50 + 600]
    assert got.out[0].tolist() == [[532.0, 653.0]]
    # new state = [pool[off + 1 : off + 2], x] = [3, 5, 6] from column 0; column 3 untouched
    assert got.pool[1, 0].tolist() == [3.0, 5.0, 6.0, 4.0]


def test_an_accepted_count_of_0_reads_column_0():
    w3 = np.array([[1.0, 10.0, 100.0]])
    got = expect_conv_update(_pool([1.0, 2.0, 3.0, 4.0]), [np.array([[5.0]])], w3, None, [[0]], nacc=[0])
    assert got.out[0].tolist() == [[1 + 20 + 500]]


def test_prefix_caching_reads_one_column_and_stores_another_and_a_pad_destination_stores_nothing():
    pool = _pool([1.0], [2.0], [3.0])
    got = expect_conv_update(pool, [np.array([[1.0]])], W2, None, [[1, 2]], init=[0], last=[1])
    assert got.out[0].tolist() == [[2 * 2 + 3]] and got.pool[:, 0, 0].tolist() == [1.0, 2.0, 1.0]
    kept = expect_conv_update(pool, [np.array([[1.0]])], W2, None, [[1, -1]], init=[0], last=[1])
    assert kept.out[0].tolist() == [[7.0]] and kept.stored == [None] and np.array_equal(kept.pool, pool)


@pytest.mark.parametrize("pad", [-1, 0])
def test_a_pad_row_and_an_empty_row_change_nothing_and_their_outputs_are_anything(pad):
    pool = _pool([1.0], [2.0], [3.0])
    rows = [np.array([[1.0]]), np.zeros((1, 0)), np.array([[1.0]])]
    got = expect_conv_update(pool, rows, W2, None, [[pad], [2], [1]], pad=pad)
    assert got.out[0] is None and got.out[1] is None and got.stored == [None, None, 1]
    assert got.pool[:, 0, 0].tolist() == [1.0, 1.0, 3.0]


def test_ill_posed_steps_are_named():
    pool = _pool([0.0], [1.0], [2.0])
    one = [np.array([[1.0]])] * 2
    with pytest.raises(IllPosedUpdate, match="rows 0 and 1 both store slot 1"):
        expect_conv_update(pool, one, W2, None, [[1, 1], [2, 1]], init=[0, 0], last=[1, 1])
    with pytest.raises(IllPosedUpdate, match="row 0 stores slot 2, which row 1 reads"):
        expect_conv_update(pool, one, W2, None, [[1, 2], [2, 0]], init=[0, 0], last=[1, 1])
    with pytest.raises(IllPosedUpdate, match="not widened for draft tokens"):
        expect_conv_update(_pool([0.0, 0.0]), [np.array([[1.0, 2.0]])], np.ones((1, 3)), None, [[0]], nacc=[1])
    with pytest.raises(OracleError, match="idx\\[0, 0\\] = 5 is neither the pad -1 nor a slot in 0..2"):
        expect_conv_update(pool, one[:1], W2, None, [[5]])
    with pytest.raises(OracleError, match="read column 3 is outside"):
        expect_conv_update(pool, one[:1], W2, None, [[1]], init=[3], last=[0])


def test_the_tolerance_holds_rounding_and_not_a_wrong_column():
    scale = np.array([[4.0]])
    tol = conv_tolerance("bfloat16", scale, np.array([[1.0]]), 4)
    assert 0.03 < tol[0, 0] < 0.05           # bf16: 2^-7 relative of products and result
    assert conv_tolerance("float32", scale, np.array([[1.0]]), 4)[0, 0] < 1e-5


def test_bfloat16_bits_go_to_float64_and_back_exactly():
    raw = np.array([0x3F80, 0xC040, 0x0001, 0x8000], dtype=np.uint16)  # 1, -3, a subnormal, -0
    values = to_float64(raw, "bfloat16")
    assert values[:2].tolist() == [1.0, -3.0]
    assert from_float64(values, "bfloat16").tolist() == raw.tolist()


def _case(**kw):
    base = dict(arena_size=64 + 4 * 48 + 64, dtype="float32", layout="token", offset=64, slots=4, dim=3,
                state_len=4, slot_stride=48, width=3, lens=(2,), idx=((2,),), bias=True, silu=False)
    base.update(kw)
    return ConvUpdateCase(**base)


@pytest.mark.parametrize("layout", ["dim", "token"])
def test_the_contract_stores_the_new_state_where_the_layout_says(layout):
    case = _case(layout=layout)
    m = materialize(case, "cpu")
    expected = m.expected.copy()
    before = m.snapshot.copy()
    pool = contracts.get("conv_update")
    changed = np.flatnonzero(expected != before)
    assert changed.size and all(pool.locate(case, int(o)).startswith("slot 2 ") for o in changed)
    state = m.args["conv_state"]
    assert state.shape == (4, 3, 4)
    assert state.stride() == ((12, 1, 3) if layout == "dim" else (12, 4, 1))
    # the stored columns are the window's last column and the two tokens (W - 1 = 2 columns: the tokens)
    x = m.args["x"][0]  # [dim, L]
    view = np.frombuffer(expected[64 + 2 * 48:64 + 3 * 48].tobytes(), dtype=np.float32)
    grid = view.reshape(4, 3).T if layout == "dim" else view.reshape(3, 4)
    assert np.array_equal(grid[:, :2], x.numpy())
    assert [o.name for o in m.outputs] == ["out", "x", "weight", "bias", "conv_state_indices"]


def test_bad_geometry_is_one_line():
    from mambafuzz.errors import CaseError

    with pytest.raises(CaseError, match="row stride of at least its columns"):
        materialize(_case(idx=((1, 2),), idx_2d=True, idx_stride=1), "cpu")
    with pytest.raises(CaseError, match="past the arena"):
        materialize(_case(arena_size=100), "cpu")
    with pytest.raises(CaseError, match="index values are int32"):
        materialize(_case(idx=((1 << 31,),)), "cpu")


def test_a_huge_draw_puts_its_slot_past_2_31_where_the_step_reads_or_stores():
    """The 32-bit-offset bug (zoo CU-I32) shows only through a slot the step uses: the huge slot is on a
    read or stored entry, never on a column nothing touches (where it once was, most of the time)."""
    from hypothesis import HealthCheck, given, settings

    from mambafuzz import strategies
    from mambafuzz.oracle.conv_update import plan_conv_update

    seen = []

    @settings(max_examples=150, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(contracts.strategy("conv_update", profile=strategies.GPU))
    def check(case):
        top = case.slots - 1
        if top * (case.slot_stride // case.elem) < 1 << 31 and top * case.slot_stride < 1 << 31:
            return
        plan = plan_conv_update(case.slots, case.state_len, case.width, case.lens, case.idx, nacc=case.nacc,
                                init=case.init, last=case.last, pad=case.pad)
        seen.append(any(top in (src, dst) for _, src, dst, _ in plan))

    check()
    assert seen and all(seen), seen


def test_shrinking_cuts_index_columns_no_row_uses_and_renumbers_slots_low():
    """Prefix caching reads column init and stores column last: columns 0 and 2 of four are unused. Slots
    5 and 9 (of 10) renumber to 0 and 1 packed, to 1 and 3 with at most one unnamed slot below each, and
    to 2 and 4 with each gap halved (5 unnamed below slot 5 -> 2, the 3 between 5 and 9 -> 1)."""
    from mambafuzz.search.reduce import candidates

    case = ConvUpdateCase(arena_size=10 * 8 + 64, dtype="float32", layout="dim", offset=0, slots=10, dim=1,
                          state_len=2, slot_stride=8, width=2, lens=(1,), idx=((3, 5, 4, 9),), idx_2d=True,
                          idx_stride=5, init=(1,), last=(3,), bias=False, silu=False)
    cuts = [(c.idx, c.init, c.last, c.idx_stride, c.slots) for c in candidates(case)]
    assert (((5, 9),), (0,), (1,), 3, 10) in cuts                      # both unused columns at once
    assert (((5, 4, 9),), (0,), (2,), 4, 10) in cuts                   # column 0 alone
    assert (((3, 5, 9),), (1,), (2,), 4, 10) in cuts                   # column 2 alone
    renumbered = [c.idx for c in candidates(dataclasses.replace(case, idx=((5, 5, 5, 9),)))
                  if c.init == (1,) and c.idx_stride == 5]
    assert renumbered[-3:] == [((0, 0, 0, 1),), ((1, 1, 1, 3),), ((2, 2, 2, 4),)]

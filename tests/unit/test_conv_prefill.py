"""conv_prefill (docs/contracts.md#conv_prefill): the oracle on hand-worked chunks (a boundary crossed with
W = 3), its ill-posed and out-of-range cases, the columns vLLM derives, and the contract's memory, options
and draws."""
import numpy as np
import pytest
import torch

from mambafuzz import contracts
from mambafuzz.cases.conv_prefill import ConvPrefillCase
from mambafuzz.errors import CaseError, UsageError
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle import OracleError
from mambafuzz.oracle.conv_prefill import (boundary_offsets, derived_columns, expect_conv_prefill,
                                           plan_conv_prefill)
from mambafuzz.oracle.conv_update import IllPosedUpdate

W3 = np.array([[1.0, 10.0, 100.0]])  # one channel, taps w0 = 1, w1 = 10, w2 = 100
B = np.array([0.5])


def _pool(*slots):
    return np.array([[list(s)] for s in slots], dtype=np.float64)  # [S, dim 1, SL]


def _x(*tokens):
    return np.array([list(tokens)], dtype=np.float64)  # [dim 1, L]


def test_the_columns_vllm_derives():
    assert derived_columns(0, 5, 4) == (0, 0, 1, False)       # a first chunk: no initial state
    assert derived_columns(7, 5, 4) == (1, 1, 2, True)        # mid-block: the initial block is the first's
    assert derived_columns(8, 1, 4) == (1, 2, 2, True)        # right after a boundary: init != last
    assert derived_columns(4, 4, 4) == (0, 1, 1, True)        # ends on a boundary: it is the final window's
    assert boundary_offsets(7, 5, 4) == [1] and boundary_offsets(8, 1, 4) == []
    assert boundary_offsets(6, 11, 4) == [2, 6, 10] and boundary_offsets(4, 4, 4) == []


def test_a_chunk_crossing_a_boundary_fewer_than_w_minus_1_tokens_in_stores_a_window_that_spans_the_state():
    """W = 3, blocks of 4, c = 7 computed, 5 tokens: init = first = 1, last = 2; the boundary is 1 token
    in, so its window is the initial state's last column and the first token."""
    pool = _pool([9.0, 9.5, 90.0], [2.0, 3.0, 99.0], [5.0, 6.0, 98.0])  # slot 1: the initial block
    got = expect_conv_prefill(pool, [_x(1.0, 2.0, 3.0, 4.0, 5.0)], W3, B, [[0, 1, 2]], [True],
                              init=[1], first=[1], last=[2], computed=[7], block_size=4)
    # full = [2, 3, 1, 2, 3, 4, 5]; out t = .5 + full[t] + 10 full[t+1] + 100 full[t+2]
    assert got.out[0].tolist() == [[132.5, 213.5, 321.5, 432.5, 543.5]]
    assert got.scale[0].tolist() == [[132.5, 213.5, 321.5, 432.5, 543.5]]  # every term positive
    # the boundary (1 token in) -> idx[0, first] = slot 1, which was also read: [full[1], full[2]] = [3, 1]
    assert got.pool[1, 0].tolist() == [3.0, 1.0, 99.0]                  # column W - 1 untouched
    # the final window [4, 5] -> idx[0, last] = slot 2; slot 0 (a prefix block) untouched
    assert got.pool[2, 0].tolist() == [4.0, 5.0, 98.0] and got.pool[0, 0].tolist() == [9.0, 9.5, 90.0]
    assert got.stored == [(1, 2)]


def test_a_chunk_shorter_than_the_window_after_a_boundary_leaves_the_initial_block_and_stores_its_own():
    """The shape of vLLM #56196: 1 token after a block boundary, W = 3: init 1, last 2."""
    pool = _pool([0.0, 0.0], [2.0, 3.0], [7.0, 7.0])
    got = expect_conv_prefill(pool, [_x(4.0)], W3, None, [[5, 1, 2]], [True], init=[1], first=[2], last=[2],
                              computed=[8], block_size=4, pad=5)
    assert got.out[0].tolist() == [[2.0 + 30.0 + 400.0]]
    assert got.pool[1, 0].tolist() == [2.0, 3.0] and got.pool[2, 0].tolist() == [3.0, 4.0]


def test_without_an_initial_state_the_window_is_zeros_whatever_the_block_holds():
    pool = _pool([2.0, 3.0])
    got = expect_conv_prefill(pool, [_x(1.0)], W3, None, [[0]], [False])
    assert got.out[0].tolist() == [[100.0]] and got.pool[0, 0].tolist() == [0.0, 1.0]
    assert not np.signbit(got.pool[0, 0, 0])  # +0.0, bytes all zero


def test_several_boundaries_each_get_their_window_and_a_pad_destination_stores_nothing():
    w2 = np.array([[1.0, 10.0]])  # W = 2: a window is one column, the token before the boundary
    pool = _pool([0.0], [1.0], [2.0], [3.0])
    x = _x(10.0, 11.0, 12.0, 13.0, 14.0)
    got = expect_conv_prefill(pool, [x], w2, None, [[0, 1, -1, 3]], [True], init=[0], first=[1], last=[3],
                              computed=[2], block_size=2)
    assert boundary_offsets(2, 5, 2) == [2, 4]
    assert got.pool[:, 0, 0].tolist() == [0.0, 11.0, 2.0, 14.0]  # idx[0, 2] is the pad: slot 2 untouched
    assert got.stored == [(1, 3)]


@pytest.mark.parametrize("pad", [-1, 0])
def test_a_pad_row_and_an_empty_row_change_nothing_and_their_outputs_are_anything(pad):
    pool = _pool([1.0, 1.0], [2.0, 2.0], [3.0, 3.0])
    rows = [_x(1.0), np.zeros((1, 0)), _x(1.0)]
    got = expect_conv_prefill(pool, rows, W3, None, [[pad, 1], [2, 1], [1, 2]], [True, True, False],
                              init=[0, 0, 0], first=[1, 1, 1], last=[1, 1, 1], computed=[1, 1, 1],
                              block_size=4, pad=pad)
    assert got.out[0] is None and got.out[1] is None and got.stored == [(), (), (2,)]
    assert got.pool[:, 0, 0].tolist() == [1.0, 2.0, 0.0]


def test_ill_posed_and_out_of_range_prefills_are_named():
    pool = _pool([0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0])
    one = [_x(1.0)]
    apc = dict(init=[0], first=[0], last=[1], computed=[0], block_size=4)
    with pytest.raises(IllPosedUpdate, match="last - first = 1, but its 1 tokens after 0 cross 0 block bound"):
        expect_conv_prefill(pool, one, W3, None, [[0, 1]], [True], **apc)
    with pytest.raises(IllPosedUpdate, match="row 0 stores slot 2 twice"):
        expect_conv_prefill(pool, [_x(1, 2, 3, 4, 5)], W3, None, [[0, 2, 2]], [True], init=[0], first=[1],
                            last=[2], computed=[0], block_size=4)
    two = [_x(1.0), _x(1.0)]
    with pytest.raises(IllPosedUpdate, match="rows 0 and 1 both store slot 2"):
        expect_conv_prefill(pool, two, W3, None, [[0, 2], [1, 2]], [True, True], init=[0, 0], first=[1, 1],
                            last=[1, 1], computed=[1, 1], block_size=4)
    with pytest.raises(IllPosedUpdate, match="row 0 stores slot 1, which row 1 reads"):
        expect_conv_prefill(pool, two, W3, None, [[0, 1], [1, 3]], [True, True], init=[0, 0], first=[1, 1],
                            last=[1, 1], computed=[1, 1], block_size=4)
    # a row without an initial state reads nothing: another may store its initial block
    expect_conv_prefill(pool, two, W3, None, [[0, 1], [1, 3]], [True, False], init=[0, 0], first=[1, 1],
                        last=[1, 1], computed=[1, 1], block_size=4)
    with pytest.raises(OracleError, match="the last column 2 is outside its 2 table column"):
        expect_conv_prefill(pool, one, W3, None, [[0, 1]], [True], init=[0], first=[1], last=[2], computed=[1],
                            block_size=4)
    with pytest.raises(OracleError, match=r"idx\[0, 0\] = 7 is neither the pad -1 nor a slot in 0..3"):
        expect_conv_prefill(pool, one, W3, None, [[7]], [True])
    with pytest.raises(OracleError, match="the pool has 2 columns, a window 3"):
        plan_conv_prefill(4, 2, 4, [1], [[0]], [True])


def _case(**kw):
    base = dict(arena_size=64 + 6 * 48 + 64, dtype="float32", layout="token", offset=64, slots=6, dim=3,
                state_len=4, slot_stride=48, width=3, lens=(5,), idx=((1, 2, 3),), has_init=(True,),
                idx_2d=True, idx_stride=4, apc=True, block_size=4, init=(1,), first=(1,), last=(2,),
                computed=(7,), bias=True, silu=False)
    base.update(kw)
    return ConvPrefillCase(**base)


@pytest.mark.parametrize("layout", ["dim", "token"])
def test_the_contract_stores_the_windows_where_the_layout_says_and_nothing_else(layout):
    case = _case(layout=layout)
    m = materialize(case, "cpu")
    contract = contracts.get("conv_prefill")
    changed = np.flatnonzero(m.expected != m.snapshot)
    where = {contract.locate(case, int(o)).rsplit(" column ", 1)[0].split(" channel ")[0] for o in changed}
    assert where == {"slot 2", "slot 3"}  # the boundary's (also the initial block) and the final one
    assert all(int(contract.locate(case, int(o)).rsplit(" ", 1)[1]) < 2 for o in changed)  # columns :W - 1
    state = m.args["conv_state"]
    assert state.shape == (6, 3, 4) and state.stride() == ((12, 1, 3) if layout == "dim" else (12, 4, 1))
    x = m.args["x"].numpy()  # [T, dim]
    view = np.frombuffer(m.expected[64 + 3 * 48:64 + 4 * 48].tobytes(), dtype=np.float32)
    grid = view.reshape(4, 3).T if layout == "dim" else view.reshape(3, 4)
    assert np.array_equal(grid[:, :2], x[3:5].T)  # the final window: the last two tokens
    boundary = np.frombuffer(m.expected[64 + 2 * 48:64 + 3 * 48].tobytes(), dtype=np.float32)
    before = np.frombuffer(m.snapshot[64 + 2 * 48:64 + 3 * 48].tobytes(), dtype=np.float32)
    grid_b, grid_0 = [(v.reshape(4, 3).T if layout == "dim" else v.reshape(3, 4)) for v in (boundary, before)]
    assert np.array_equal(grid_b[:, 0], grid_0[:, 1]) and np.array_equal(grid_b[:, 1], x[0])  # state | token
    assert [o.name for o in m.outputs] == ["out", "x", "weight", "bias", "cache_indices", "has_initial_state",
                                           "query_start_loc", "initial_state_idx", "block_idx_first_scheduled_token",
                                           "block_idx_last_scheduled_token", "num_computed_tokens"]
    assert m.kwargs == {"activation": None, "pad_slot_id": -1, "block_size": 4}
    assert m.args["has_initial_state"].dtype == torch.bool
    two = materialize(_case(idx=((1, 2, 3), (4, 5, 0)), lens=(5, 1), has_init=(True, False), init=(1, 0),
                            first=(1, 0), last=(2, 0), computed=(7, 0)), "cpu")
    assert two.args["cache_indices"].stride() == (4, 1)  # a 2-D table whose rows are padded


def test_without_prefix_caching_the_columns_are_none_and_a_1d_table_may_be_a_strided_column():
    case = _case(apc=False, block_size=0, init=None, first=None, last=None, computed=None, idx=((2,), (4,)),
                 idx_2d=False, idx_stride=3, lens=(5, 1), has_init=(True, False))
    m = materialize(case, "cpu")
    assert m.args["cache_indices"].shape == (2,) and m.args["cache_indices"].stride() == (3,)
    assert m.args["cache_indices"].tolist() == [2, 4] and m.args["query_start_loc"].tolist() == [0, 5, 6]
    assert all(m.args[k] is None for k in ("initial_state_idx", "block_idx_first_scheduled_token",
                                           "block_idx_last_scheduled_token", "num_computed_tokens"))
    assert m.kwargs["block_size"] == 0


def test_bad_geometry_is_one_line():
    with pytest.raises(CaseError, match="row stride of at least its columns"):
        materialize(_case(idx_stride=2), "cpu")
    with pytest.raises(CaseError, match="several table columns need idx_2d"):
        materialize(_case(idx_2d=False), "cpu")
    with pytest.raises(CaseError, match="go with prefix caching"):
        materialize(_case(apc=False), "cpu")
    with pytest.raises(CaseError, match="cross 1 block boundary"):
        materialize(_case(last=(1,)), "cpu")
    with pytest.raises(CaseError, match="must be a list of true / false"):
        ConvPrefillCase.from_json({**_case().to_json(), "has_init": [1]})


def test_options_are_checked_in_one_line():
    contract = contracts.get("conv_prefill")
    from mambafuzz import strategies
    with pytest.raises(UsageError, match="max_width must be one of"):
        contract.strategy(strategies.CPU, max_width="7")
    with pytest.raises(UsageError, match="cache_mode must be one of"):
        contract.strategy(strategies.CPU, cache_mode="align")


def _drawn(n, profile="cpu", **options):
    from hypothesis import HealthCheck, given, settings

    from mambafuzz import strategies

    cases = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(contracts.strategy("conv_prefill", profile=strategies.PROFILES[profile], **options))
    def collect(case):
        cases.append(case)

    collect()
    return cases


def test_the_draws_hold_the_geometries_the_bugs_hide_in():
    """Each zoo row needs one, in a good share of the cases: a short chunk whose initial and final blocks
    differ, a boundary fewer than W - 1 tokens in, a live row without an initial state, a pad row, a row of
    a 2-D table past the first.  (The shares are about half of what 120 derandomised draws give.)"""
    contract = contracts.get("conv_prefill")
    seen = {"short, init != last": 0, "near boundary": 0, "no initial state": 0, "pad row": 0,
            "2-D row past the first": 0}
    for case in _drawn(120):
        assert contract.valid(case), case.describe()
        found = set()
        for b, (row, length) in enumerate(zip(case.idx, case.lens)):
            init, first, last = (case.init[b], case.first[b], case.last[b]) if case.apc else (0, 0, 0)
            live = row[init] != case.pad and length > 0
            if live and length < case.width - 1 and row[init] != row[last]:
                found.add("short, init != last")
            if live and case.apc and any(o < case.width - 1 for o in boundary_offsets(case.computed[b], length,
                                                                                      case.block_size)):
                found.add("near boundary")
            if live and not case.has_init[b]:
                found.add("no initial state")
            if row[init] == case.pad:
                found.add("pad row")
            if live and b > 0 and (case.cols > 1 or case.idx_stride > 1):
                found.add("2-D row past the first")
        for name in found:
            seen[name] += 1
    least = {"short, init != last": 19, "near boundary": 22, "no initial state": 23, "pad row": 14,
             "2-D row past the first": 35}
    assert all(seen[name] >= n for name, n in least.items()), seen


def test_narrowing_options_narrow_the_draws():
    cases = _drawn(40, max_width="4", conv_layout="dim", block_multiple="8", cache_mode="all", pad="0")
    assert all(c.width <= 4 and c.layout == "dim" and c.apc and c.block_size % 8 == 0 and c.pad == 0
               for c in cases)
    assert not any(c.apc for c in _drawn(20, cache_mode="none"))


def test_a_huge_draw_puts_its_slot_past_2_31_where_the_prefill_reads_or_stores():
    """The 32-bit-offset bug (zoo CP-I32) shows only through a slot the prefill uses."""
    seen = []
    for case in _drawn(90):
        top = case.slots - 1
        if top * (case.slot_stride // case.elem) < 1 << 31 and case.offset + top * case.slot_stride < 1 << 31:
            continue
        plan = plan_conv_prefill(case.slots, case.state_len, case.width, case.lens, case.idx, case.has_init,
                                 init=case.init, first=case.first, last=case.last, computed=case.computed,
                                 block_size=case.block_size, pad=case.pad)
        seen.append(any((p.reads and p.src == top) or top in [s for s, _ in p.stores] for p in plan))
    assert seen and all(seen), seen


@pytest.mark.matrix
def test_the_kernel_and_its_zoo_flags_compile_for_sm90():
    from common import compile_for_sm90

    compile_for_sm90(r'''
from mambafuzz.kernels.conv_prefill import _conv_prefill_kernel, FLAGS
import inspect
names = list(inspect.signature(_conv_prefill_kernel.fn).parameters)
ptrs = {"x_ptr": "*bf16", "state_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16", "idx_ptr": "*i32",
        "has_ptr": "*u8", "qsl_ptr": "*i32", "init_ptr": "*i32", "first_ptr": "*i32", "last_ptr": "*i32",
        "computed_ptr": "*i32", "out_ptr": "*bf16"}
for flag in (None,) + FLAGS:
    for apc, width in ((True, 4), (False, 6), (True, 2)):
        consts = {"W": width, "HAS_BIAS": True, "SILU": True, "APC": apc, "BLOCK": 32,
                  **{f: f == flag for f in FLAGS}}
        sig = {n: ptrs.get(n, "i64" if n == "s_slot" else "i32") for n in names if n not in consts}
        comp(_conv_prefill_kernel, sig, consts)
print("compiled")
''')

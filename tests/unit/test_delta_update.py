"""delta_update (docs/contracts.md#delta_update): the oracle on hand-worked steps, its ill-posed cases, the contract's
tensors, a transposed state caught on K == V and K != V, and the kernel compiled for sm_90."""
import numpy as np
import pytest

from common import compile_for_sm90
from mambafuzz.cases.delta_update import DeltaUpdateCase
from mambafuzz.errors import CaseError
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle import OracleError
from mambafuzz.oracle.conv_update import IllPosedUpdate
from mambafuzz.oracle.delta_update import delta_tolerance, expect_delta_update


def _one_token(pool, q, k, v, g, beta, idx, **kw):
    """One token per row: arrays gain their [T] axis; cu_seqlens 0, 1, .., N."""
    rows = len(idx)
    arrays = [np.asarray(a, dtype=np.float64) for a in (q, k, v, g, beta)]
    return expect_delta_update(np.asarray(pool, dtype=np.float64), *arrays, list(range(rows + 1)), idx, **kw)


def test_a_gdn_step_decays_applies_the_delta_rule_and_stores_the_final_state():
    pool = [[[[1.0, 2.0]]], [[[3.0, 4.0]]]]  # S 2, HV 1, V 1, K 2
    got = _one_token(pool, [[[1.0, 0.0]]], [[[0.0, 1.0]]], [[[5.0]]], [[np.log(0.5)]], [[0.5]], [[1]], scale=2.0)
    # S = [3, 4] * 0.5 = [1.5, 2]; S k = 2; u = 0.5 * (5 - 2) = 1.5; S = [1.5, 2 + 1.5]; o = 2 * S q = 3
    assert got.pool[1, 0, 0].tolist() == [1.5, 3.5] and got.pool[0].tolist() == [[[1.0, 2.0]]]
    assert got.out.tolist() == [[[3.0]]] and got.stored == [1] and got.care.tolist() == [True]
    assert (got.pool_bound[0] == 0).all() and (got.pool_bound[1] > 0).all()


def test_kda_decays_per_k_and_beta_may_be_per_v():
    pool = [[[[1.0, 2.0], [3.0, 4.0]]]]  # V 2 x K 2
    got = _one_token(pool, [[[0.0, 1.0]]], [[[1.0, 0.0]]], [[[1.0, 1.0]]], [[[np.log(0.5), 0.0]]],
                     [[[1.0, 0.5]]], [[0]], scale=1.0)
    # S * exp(g) per K = [[.5, 2], [1.5, 4]]; S k = [.5, 1.5]; u = [1, .5] * (1 - S k) = [.5, -.25]
    assert got.pool[0, 0].tolist() == [[1.0, 2.0], [1.25, 4.0]]
    assert got.out[0, 0].tolist() == [2.0, 4.0]


def test_grouped_heads_share_their_key_head_and_l2norm_normalises_q_and_k():
    pool = np.zeros((1, 2, 1, 2))  # HV 2 on H 1
    got = _one_token(pool, [[[3.0, 4.0]]], [[[0.0, 2.0]]], [[[1.0], [2.0]]], [[0.0, 0.0]], [[1.0, 1.0]], [[0]],
                     scale=1.0, l2norm=True)
    # k -> [0, 1], q -> [.6, .8] (up to the 1e-6 inside the root); S_h = v_h k^T; o_h = v_h * .8
    assert np.allclose(got.pool[0, :, 0], [[0.0, 1.0], [0.0, 2.0]], atol=1e-6)
    assert got.out[0, :, 0].tolist() == pytest.approx([0.8, 1.6], abs=1e-6)


def test_spec_reads_column_nacc_minus_1_and_stores_each_token_unless_its_column_is_pad():
    pool = np.arange(4, dtype=np.float64).reshape(4, 1, 1, 1) + 1.0  # K = V = 1: S = slot + 1
    ones = np.ones((2, 1, 1))
    # one row, 2 tokens, columns [1, 2, 3], nacc 3: read slot 3 (S = 4); k = 1, v = 1, beta = 1: S -> v = 1
    got = expect_delta_update(pool, ones, ones, ones, np.zeros((2, 1)), np.ones((2, 1)), [0, 2], [[1, 2, 3]],
                              scale=1.0, nacc=[3])
    assert got.out[:, 0, 0].tolist() == [1.0, 1.0] and got.stored == [1, 2]
    assert got.pool[:, 0, 0, 0].tolist() == [1.0, 1.0, 1.0, 4.0]
    padded = expect_delta_update(pool, ones, ones, ones, np.zeros((2, 1)), np.ones((2, 1)), [0, 2], [[1, -1, 3]],
                                 scale=1.0, nacc=[3])
    assert padded.stored == [1] and padded.pool[2, 0, 0, 0] == 3.0
    zero = expect_delta_update(pool, ones[:1], ones[:1], 2 * ones[:1], np.zeros((1, 1)), np.full((1, 1), 0.5),
                               [0, 1], [[2, 3]], scale=1.0, nacc=[0])
    # nacc 0 reads column 0 (slot 2, S = 3): u = .5 * (2 - 3) = -.5, S = 2.5
    assert zero.pool[2, 0, 0, 0] == 2.5


@pytest.mark.parametrize("pad", [-1, 0])
def test_a_pad_row_and_an_empty_row_store_nothing_and_their_outputs_are_anything(pad):
    pool = np.ones((3, 1, 1, 1))
    ones = np.ones((2, 1, 1))
    got = expect_delta_update(pool, ones, ones, ones, np.zeros((2, 1)), np.ones((2, 1)), [0, 1, 1, 2],
                              [[pad], [1], [2]], scale=1.0, pad=pad)
    assert got.stored == [2] and got.care.tolist() == [False, True]


def test_the_per_step_buffer_caches_only_its_steps_and_only_for_live_rows():
    pool = np.ones((2, 1, 1, 1))
    buf = np.full((2, 2, 1, 1, 1), 7.0)
    t3 = np.ones((3, 1, 1))
    got = expect_delta_update(pool, t3, t3, 2 * t3, np.zeros((3, 1)), np.full((3, 1), 0.5), [0, 3], [[1]],
                              scale=1.0, buffer=buf, inter_idx=[1], cache_steps=2)
    # S: 1 -> 1.5 -> 1.75 -> 1.875; steps 0 and 1 of row 1 cached, token 2 not (no step 2); row 0 untouched
    assert got.buffer[1, :, 0, 0, 0].tolist() == [1.5, 1.75] and (got.buffer[0] == 7.0).all()
    assert got.pool[1, 0, 0, 0] == 1.875 and (got.buffer_bound[0] == 0).all()
    none = expect_delta_update(pool, t3, t3, t3, np.zeros((3, 1)), np.ones((3, 1)), [0, 3], [[1]], scale=1.0,
                               buffer=buf, inter_idx=[-1], cache_steps=2)
    assert (none.buffer == 7.0).all()


def test_ill_posed_and_out_of_range_steps_are_named():
    pool = np.zeros((4, 1, 1, 1))
    one = np.ones((2, 1, 1))
    z, b = np.zeros((2, 1)), np.ones((2, 1))
    four = np.ones((4, 1, 1))
    with pytest.raises(IllPosedUpdate, match="rows 0 and 1 both store slot 2"):  # two tokens each
        expect_delta_update(pool, four, four, four, np.zeros((4, 1)), np.ones((4, 1)), [0, 2, 4], [[1, 2], [3, 2]],
                            scale=1.0, nacc=[1, 1])
    with pytest.raises(IllPosedUpdate, match="row 0 stores slot 1, which row 1 reads"):
        expect_delta_update(pool, one, one, one, z, b, [0, 1, 2], [[1, 0], [2, 1]], scale=1.0, nacc=[1, 2])
    with pytest.raises(IllPosedUpdate, match="row 0 has 2 tokens, its index row 1 column"):
        expect_delta_update(pool, one, one, one, z, b, [0, 2], [[1]], scale=1.0, nacc=[1])
    with pytest.raises(OracleError, match="idx\\[0, 0\\] = 9 is neither the pad -1 nor a slot in 0..3"):
        expect_delta_update(pool, one, one, one, z, b, [0, 2], [[9]], scale=1.0)
    with pytest.raises(OracleError, match="nacc = 3 is past its 2 index column"):
        expect_delta_update(pool, one, one, one, z, b, [0, 2], [[1, 2]], scale=1.0, nacc=[3])
    buf = np.zeros((2, 2, 1, 1, 1))
    with pytest.raises(IllPosedUpdate, match="buffer row 1"):
        expect_delta_update(pool, one, one, one, z, b, [0, 1, 2], [[1], [2]], scale=1.0, buffer=buf,
                            inter_idx=[1, 1], cache_steps=2)
    with pytest.raises(OracleError, match="past the buffer's 2 row"):
        expect_delta_update(pool, one, one, one, z, b, [0, 2], [[1]], scale=1.0, buffer=buf, inter_idx=[2],
                            cache_steps=2)


def test_the_tolerance_holds_rounding_and_not_a_wrong_slot():
    mag, want = np.array([2.0]), np.array([1.0])
    assert delta_tolerance("float32", mag, want, 2 * 128 + 16)[0] < 1e-4          # fp32 work, K = 128
    assert 0.007 < delta_tolerance("bfloat16", mag, want, 2 * 16 + 16)[0] < 0.01  # bf16: 2^-7 of the result


def _case(**kw):
    base = dict(arena_size=64, dtype="float32", act_dtype="float32", layout="vk", slots=3, heads=1, group=2,
                key_dim=4, value_dim=8, lens=(2,), idx=((1, 2),), idx_2d=True, idx_stride=2, nacc=(1,))
    base.update(kw)
    return DeltaUpdateCase(**base)


@pytest.mark.parametrize("layout", ["vk", "kv"])
def test_the_contract_hands_the_pool_in_its_layout_and_checks_unwritten_slots_exactly(layout):
    m = materialize(_case(layout=layout), "cpu")
    state = m.args["initial_state"]
    assert tuple(state.shape) == ((3, 2, 8, 4) if layout == "vk" else (3, 2, 4, 8))
    pool = {o.name: o for o in m.outputs}["initial_state"]
    bound = np.asarray(pool.atol)
    assert (bound[0] == 0).all() and (bound[1:] > 0).all()          # slot 0 unwritten; 1 and 2 stored
    assert np.array_equal(pool.expected[0], state[0].numpy())       # exactly the snapshot's values
    assert [o.name for o in m.outputs] == ["initial_state", "out", "q", "k", "v", "g", "beta", "cu_seqlens",
                                          "ssm_state_indices", "num_accepted_tokens"]


@pytest.mark.parametrize("value_dim", [4, 8])
def test_a_transposed_state_is_a_wrong_value_with_k_equal_or_unequal_to_v(value_dim):
    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels import registry

    case = _case(value_dim=value_dim, nacc=None, idx=((1,),), idx_2d=False, idx_stride=1)
    assert run_case(registry.get("triton.delta_update").fn, case, "cpu", mode="race").kind is None
    assert run_case(registry.get("zoo.DU-TRANSPOSE").fn, case, "cpu", mode="race").kind == "mismatch"


def test_bad_geometry_is_one_line():
    with pytest.raises(CaseError, match="row stride of at least its columns"):
        materialize(_case(idx_stride=1), "cpu")
    with pytest.raises(CaseError, match="rows, steps and intermediate_state_indices together"):
        materialize(_case(inter_rows=2), "cpu")
    with pytest.raises(CaseError, match="index values are int32"):
        materialize(_case(idx=((1 << 31, 2),)), "cpu")
    with pytest.raises(CaseError, match="nacc has 2 entries for 1 sequences"):
        materialize(_case(nacc=(1, 1)), "cpu")


COMPILE = r'''
from mambafuzz.kernels.delta_update import _delta_update_kernel
SIG = {n: "*fp32" for n in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "state_ptr", "buf_ptr", "out_ptr")}
SIG.update({n: "*i32" for n in ("cu_ptr", "idx_ptr", "nacc_ptr", "inter_ptr")})
SIG.update({"scale": "fp32", **{n: "i32" for n in ("pad", "cache_steps", "H", "HV", "K", "V", "idx_row_stride",
            "idx_col_stride", "s_slot", "s_head", "s_v", "s_k", "sb_row", "sb_step", "sb_head", "sb_v", "sb_k")}})
for on in (False, True):
    consts = {"T_MAX": 8, "BK": 128, "BV": 32, "KDA": on, "BETA_V": on, "L2NORM": on, "SPEC": on, "BUFFER": on,
              "STEPS_UNCHECKED": on, "PAD_STORE": on}
    comp(_delta_update_kernel, dict(SIG, state_ptr="*bf16" if on else "*fp32"), consts)
print("compiled")
'''


@pytest.mark.matrix
def test_the_kernel_compiles_for_sm90_at_gpu_sizes():
    compile_for_sm90(COMPILE)

"""ssm_update (docs/contracts.md#ssm_update): the oracle on hand-worked steps, its ill-posed cases, and the contract's
memory."""
import math

import numpy as np
import pytest

from mambafuzz import contracts
from mambafuzz.cases.ssm_update import SsmUpdateCase
from mambafuzz.errors import CaseError
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle import OracleError
from mambafuzz.oracle.conv_update import IllPosedUpdate
from mambafuzz.oracle.ssm_update import expect_ssm_update

A2 = np.array([[[-2.0, 0.0]]])          # H 1, D 1, N 2


def _tok(*values, width=1):
    """[B = 1, T, H = 1, width] from per-token values."""
    return np.array(values, dtype=np.float64).reshape(1, len(values), 1, width)


def _step(pool, xs, dts, Bs, Cs, src, **kw):
    T = len(xs)
    return expect_ssm_update(pool, _tok(*xs), _tok(*dts), A2, np.array(Bs, float).reshape(1, T, 1, 2),
                             np.array(Cs, float).reshape(1, T, 1, 2), [T], src, **kw)


def test_a_decode_step_decays_adds_the_input_and_reads_out_through_c_and_d():
    pool = np.array([[[[9.0, 9.0]]], [[[1.0, 2.0]]]])          # slot 1 holds [1, 2]
    got = _step(pool, [2.0], [0.5], [[1.0, 3.0]], [[1.0, 1.0]], [[1]], D=np.array([[0.5]]))
    # dt' = 0.5; exp(A dt') = [e^-1, 1]; dt' x B = [1, 3]; st = [e^-1 + 1, 5]; y = st . C + D x = e^-1 + 6 + 1
    assert got.pool[1, 0, 0].tolist() == pytest.approx([math.exp(-1) + 1, 5.0])
    assert got.out[0, 0, 0, 0] == pytest.approx(math.exp(-1) + 7)
    assert got.pool[0].tolist() == [[[9.0, 9.0]]] and got.stored.tolist() == [False, True]
    assert got.pool_tol[0].max() == 0 and 0 < got.pool_tol[1].max() < 1e-5


def test_softplus_dt_bias_and_the_z_gate():
    pool = np.zeros((1, 1, 1, 2))
    got = _step(pool, [1.0], [0.0], [[1.0, 0.0]], [[1.0, 0.0]], [[0]], dt_bias=np.array([[1.0]]), softplus=True,
                z=_tok(2.0))
    dtp = math.log1p(math.e)                                   # softplus(0 + 1)
    assert got.pool[0, 0, 0, 0] == pytest.approx(dtp)
    assert got.out[0, 0, 0, 0] == pytest.approx(dtp * 2.0 / (1 + math.exp(-2.0)))


def test_a_spec_step_reads_column_nacc_minus_1_and_stores_each_token_to_its_column():
    pool = np.array([[[[0.0, 0.0]]], [[[1.0, 1.0]]], [[[4.0, 4.0]]], [[[7.0, 7.0]]]])
    # A = [-2, 0] but dt = 0 for the first token: st unchanged; then dt 1 with x 1, B [0, 1]
    got = _step(pool, [1.0, 1.0], [0.0, 1.0], [[0.0, 0.0], [0.0, 1.0]], [[0.0, 1.0]] * 2, [[3, 2]], nacc=[2])
    # nacc 2 reads src[0, 1] = slot 2 ([4, 4]); token 0 stores [4, 4] to slot 3, token 1 [4 e^-2, 5] to slot 2
    assert got.pool[3, 0, 0].tolist() == [4.0, 4.0]
    assert got.pool[2, 0, 0].tolist() == pytest.approx([4 * math.exp(-2), 5.0])
    assert got.out[0, :, 0, 0].tolist() == pytest.approx([4.0, 5.0])
    assert got.stored.tolist() == [False, False, True, True]


def test_nacc_0_reads_column_0_and_a_pad_destination_stores_nothing():
    pool = np.array([[[[1.0, 1.0]]], [[[2.0, 2.0]]]])
    got = _step(pool, [1.0], [0.0], [[0.0, 0.0]], [[1.0, 0.0]], [[1, 0]], dst=[[-1, 0]], nacc=[0])
    assert got.out[0, 0, 0, 0] == 2.0 and not got.stored.any() and np.array_equal(got.pool, pool)


@pytest.mark.parametrize("pad", [-1, 0])
def test_a_pad_row_and_an_empty_row_change_nothing_and_their_outputs_are_anything(pad):
    pool = np.arange(3 * 2, dtype=float).reshape(3, 1, 1, 2)
    x = np.ones((3, 1, 1, 1))
    got = expect_ssm_update(pool, x, x, A2, np.ones((3, 1, 1, 2)), np.ones((3, 1, 1, 2)), [1, 0, 1],
                            [[pad], [1], [2]], pad=pad)
    assert got.out_care[:, 0].tolist() == [False, False, True]
    assert got.stored.tolist() == [False, False, True]
    assert np.array_equal(got.pool[:2], pool[:2])


def test_heads_share_their_group_of_b_and_c():
    pool = np.zeros((1, 4, 1, 2))                               # H 4, G 2: heads 0, 1 use group 0
    Bm = np.array([[1.0, 0.0], [0.0, 1.0]]).reshape(1, 1, 2, 2)
    one = np.ones((1, 1, 4, 1))
    got = expect_ssm_update(pool, one, one, np.zeros((4, 1, 2)), Bm, Bm, [1], [[0]])
    assert got.pool[0, :, 0].tolist() == [[1, 0], [1, 0], [0, 1], [0, 1]]


def test_ill_posed_steps_are_named():
    pool = np.zeros((4, 1, 1, 2))
    x = np.ones((2, 2, 1, 1))
    BC = np.ones((2, 2, 1, 2))
    def step(src, **kw):
        lens = kw.pop("lens", [1, 1])
        return expect_ssm_update(pool, x, x, A2, BC, BC, lens, src, **kw)
    with pytest.raises(IllPosedUpdate, match="rows 0 and 1 both store slot 3"):
        step([[1], [2]], dst=[[3], [3]])
    with pytest.raises(IllPosedUpdate, match="row 0 stores slot 2, which row 1 reads"):
        step([[1], [2]], dst=[[2], [3]])
    with pytest.raises(IllPosedUpdate, match="non-spec row's destination dst\\[0, 0\\] is the pad"):
        step([[1], [2]], dst=[[-1], [3]])
    with pytest.raises(IllPosedUpdate, match="row 0 has 2 tokens and 1 index column"):
        step([[1], [2]], nacc=[1, 1], lens=[2, 1])
    with pytest.raises(OracleError, match="src\\[1, 0\\] = 7 is neither the pad -1 nor a slot in 0..3"):
        step([[1], [7]])
    with pytest.raises(OracleError, match="read column 2 is outside"):
        step([[1, 2], [3, 0]], nacc=[3, 1])


def test_the_tolerance_holds_rounding_and_not_a_wrong_slot():
    rng = np.random.default_rng(0)
    pool = rng.standard_normal((3, 2, 4, 8))
    x = rng.standard_normal((1, 1, 2, 4))
    dt = np.abs(x) * 0.5
    BC = rng.standard_normal((1, 1, 1, 8))
    A = -np.abs(rng.standard_normal((2, 4, 8)))
    got = expect_ssm_update(pool, x, dt, A, BC, BC, [1], [[1]], dtype="bfloat16", io_dtype="bfloat16")
    wrong = expect_ssm_update(pool, x, dt, A, BC, BC, [1], [[2]], dst=[[1]], dtype="bfloat16")
    tol = got.pool_tol[1]
    assert (tol < 0.1).all() and (np.abs(got.pool[1]) * 2.0 ** -7 <= tol).all()
    assert (np.abs(wrong.pool[1] - got.pool[1]) > tol).mean() > 0.9


def _case(**kw):
    base = dict(arena_size=64, dtype="float32", io_dtype="float32", offset=0, slots=4, heads=2, groups=1, dim=3,
                dstate=4, slot_stride=2 * 3 * 4 * 4, lens=(1,), src=((2,),), has_z=False, softplus=False)
    base.update(kw)
    return SsmUpdateCase(**base)


def test_an_exact_case_keeps_the_pool_in_the_arena_and_stores_exact_bytes():
    case = _case(exact=True, offset=8, slot_stride=2 * 3 * 4 * 4 + 8, arena_size=8 + 4 * 104 + 64)
    m = materialize(case, "cpu")
    contract = contracts.get("ssm_update")
    changed = np.flatnonzero(m.expected != m.snapshot)
    assert changed.size and all(contract.locate(case, int(o)).startswith("slot 2 head") for o in changed)
    state = m.args["state"]
    assert state.shape == (4, 2, 3, 4) and state.stride() == (26, 12, 4, 1)
    assert state.untyped_storage().data_ptr() == m.arena.untyped_storage().data_ptr()
    # A = 0 (exp 1) and no softplus: the new state is the old plus dt' x B, exactly
    x, dt, B = m.args["x"][0], m.args["dt"][0] + m.args["dt_bias"], m.args["B"][0, 0]
    new = np.frombuffer(m.expected[8 + 2 * 104:8 + 2 * 104 + 96].tobytes(), np.float32).reshape(2, 3, 4)
    assert np.array_equal(new, (state[2] + (dt * x)[..., None] * B).numpy())
    assert [o.name for o in m.outputs][:2] == ["out", "x"]


def test_a_float_case_hands_the_pool_over_as_an_output_exact_where_no_row_stores():
    m = materialize(_case(softplus=True), "cpu")
    state_out = next(o for o in m.outputs if o.name == "state")
    tol = np.asarray(state_out.atol)
    assert tol.shape == (4, 2, 3, 4) and (tol[[0, 1, 3]] == 0).all() and (tol[2] > 0).all()
    assert m.args["state"].untyped_storage().data_ptr() != m.arena.untyped_storage().data_ptr()


def test_the_index_views_have_the_cases_strides_and_pad_in_between():
    m = materialize(_case(src=((2, 1),), idx_col_stride=2, idx_row_stride=5), "cpu")
    idx = m.args["state_batch_indices"]
    assert idx.stride() == (5, 2) and idx.tolist() == [[2, 1]]
    assert idx.as_strided((5,), (1,)).tolist() == [2, -1, 1, -1, -1]


def test_bad_geometry_is_one_line():
    with pytest.raises(CaseError, match="multiple of groups"):
        materialize(_case(groups=2, heads=3, slot_stride=3 * 3 * 4 * 4), "cpu")
    with pytest.raises(CaseError, match="index rows must be at least"):
        materialize(_case(src=((1, 2),), idx_col_stride=2, idx_row_stride=2), "cpu")
    with pytest.raises(CaseError, match="no offset and no slot padding"):
        materialize(_case(offset=4), "cpu")
    with pytest.raises(CaseError, match="index values are int32"):
        materialize(_case(src=((1 << 31,),)), "cpu")
    with pytest.raises(CaseError, match="must be one of float32"):
        contracts.case_from_json({**_case().to_json(), "dtype": "int8"})


@pytest.mark.matrix
def test_the_kernel_and_its_zoo_flags_compile_for_sm90():
    from common import compile_for_sm90

    compile_for_sm90(r'''
from mambafuzz.kernels.ssm_update import _ssm_update_kernel, FLAGS
import inspect
names = list(inspect.signature(_ssm_update_kernel.fn).parameters)
ptrs = {"state_ptr": "*bf16", "x_ptr": "*fp16", "dt_ptr": "*fp16", "a_ptr": "*fp32", "b_ptr": "*fp16",
        "c_ptr": "*fp16", "d_ptr": "*fp32", "z_ptr": "*fp16", "bias_ptr": "*fp32", "src_ptr": "*i32",
        "dst_ptr": "*i32", "nacc_ptr": "*i32", "cu_ptr": "*i32", "out_ptr": "*fp16"}
base = {"T_MAX": 4, "BLOCK_D": 16, "BLOCK_N": 128, "HAS_D": True, "HAS_Z": True, "HAS_BIAS": True,
        "SOFTPLUS": True, "SPEC": True, "VARLEN": True}
for flag in (None,) + FLAGS:
    for spec in (True, False):
        consts = {**base, "SPEC": spec, **{f: f == flag for f in FLAGS}}
        sig = {n: ptrs.get(n, "i32") for n in names if n not in consts}
        comp(_ssm_update_kernel, sig, consts)
print("compiled")
''')

"""delta_prefill (docs/contracts.md#delta_prefill): the oracle against a plain token loop (prefix caching, no
initial state, no final state asked for, pads), the bound (chunked rounding inside, a bfloat16 checkpoint
outside), ill-posed tables, the contract's tensors and options, the chunked kernel on chunk edges, and the
kernel compiled for sm_90."""
import numpy as np
import pytest

from common import compile_for_sm90
from mambafuzz import contracts
from mambafuzz.cases.delta_prefill import DeltaPrefillCase
from mambafuzz.errors import CaseError, UsageError
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle.conv_prefill import boundary_offsets
from mambafuzz.oracle.conv_update import IllPosedUpdate
from mambafuzz.oracle.delta_prefill import delta_prefill_tolerance, expect_delta_prefill


def loop_prefill(pool, q, k, v, g, beta, cu, idx, has_init, *, scale, init=None, first=None, last=None,
                 computed=None, block_size=0, pad=-1, final=True):
    """The prefill as plain Python loops over sequences, heads and tokens (the baseline)."""
    new = pool.copy()
    out = np.full(v.shape, np.nan)
    hv_count, heads = pool.shape[1], q.shape[1]
    for n in range(len(cu) - 1):
        lo, hi = cu[n], cu[n + 1]
        c_init, c_first, c_last = (init[n], first[n], last[n]) if init is not None else (0, 0, 0)
        src = idx[n][c_init]
        if src == pad or hi == lo:
            continue
        offsets = boundary_offsets(computed[n], hi - lo, block_size) if init is not None else []
        for hv in range(hv_count):
            h = hv // (hv_count // heads)
            s = pool[src, hv].copy() if has_init[n] else np.zeros(pool.shape[2:])
            for t in range(hi - lo):
                tok = lo + t
                decay = np.exp(g[tok, hv])
                s = s * (decay[None, :] if np.ndim(decay) else decay)
                b = beta[tok, hv]
                u = (b if np.ndim(b) else b) * (v[tok, hv] - s @ k[tok, h])
                s = s + np.outer(u, k[tok, h])
                out[tok, hv] = s @ (q[tok, h] * scale)
                if t + 1 in offsets:
                    dst = idx[n][c_first + offsets.index(t + 1)]
                    if dst != pad:
                        new[dst, hv] = s
            if final and idx[n][c_last] != pad:
                new[idx[n][c_last], hv] = s
    return new, out


def _inputs(rng, tokens, heads, hv, kd, vd, kda=False, beta_v=False):
    q = rng.standard_normal((tokens, heads, kd))
    k = rng.standard_normal((tokens, heads, kd)) / np.sqrt(kd)
    v = rng.standard_normal((tokens, hv, vd))
    g = -rng.uniform(0.02, 1.0, (tokens, hv, kd) if kda else (tokens, hv))
    beta = rng.uniform(0.05, 1.0, (tokens, hv, vd) if beta_v else (tokens, hv))
    return q, k, v, g, beta


@pytest.mark.parametrize("kda, beta_v", [(False, False), (True, True)])
def test_the_oracle_is_the_token_loop_with_boundaries_pads_and_no_initial_state(kda, beta_v):
    rng = np.random.default_rng(3)
    pool = rng.standard_normal((12, 2, 3, 4))
    lens = [7, 0, 5, 9]
    cu = np.concatenate([[0], np.cumsum(lens)])
    q, k, v, g, beta = _inputs(rng, cu[-1], 1, 2, 4, 3, kda, beta_v)
    # Bs 4: row 0 c 2 -> boundaries 2, 6 in (init = first = 0, last 2); row 1 empty; row 2 pad; row 3 c 8 -> 4, 8
    # in (init 1 unread: no initial state; first 2, last 4)
    idx = [[0, 1, 2, -1, -1], [4, 5, 6, 7, -1], [-1, 8, 9, 3, -1], [11, 9, 10, 6, 7]]
    cols = dict(init=[0, 0, 0, 1], first=[0, 0, 0, 2], last=[2, 0, 0, 4], computed=[2, 0, 0, 8], block_size=4)
    has = [True, True, False, False]
    got = expect_delta_prefill(pool, q, k, v, g, beta, cu, idx, has, scale=0.5, **cols)
    want_pool, want_out = loop_prefill(pool, q, k, v, g, beta, cu, idx, has, scale=0.5, **cols)
    assert np.allclose(got.pool, want_pool, rtol=1e-12, atol=1e-12)
    live = np.concatenate([[True] * 7, [False] * 5, [True] * 9])
    assert np.allclose(got.out[live], want_out[live], rtol=1e-12, atol=1e-12)
    assert got.care.tolist() == live.tolist()
    assert got.stored == [0, 1, 2, 6, 7, 10]
    assert (got.pool_bound[[3, 4, 5, 8, 9, 11]] == 0).all()  # read-only, pad-row and unnamed slots: exact


def test_no_final_state_stores_only_the_boundaries():
    rng = np.random.default_rng(1)
    pool = rng.standard_normal((3, 1, 2, 2))
    q, k, v, g, beta = _inputs(rng, 6, 1, 1, 2, 2)
    got = expect_delta_prefill(pool, q, k, v, g, beta, [0, 6], [[0, 1, 2]], [True], scale=1.0, init=[0], first=[0],
                               last=[1], computed=[1], block_size=4, final=False)
    assert got.stored == [0] and np.array_equal(got.pool[1:], pool[1:])
    none = expect_delta_prefill(pool, q, k, v, g, beta, [0, 6], [[0]], [True], scale=1.0, final=False)
    assert none.stored == [] and np.array_equal(none.pool, pool) and not none.pool_bound.any()


def test_the_bound_holds_float32_rounding_and_not_a_bfloat16_checkpoint():
    rng = np.random.default_rng(5)
    pool = rng.standard_normal((2, 1, 16, 16))
    q, k, v, g, beta = _inputs(rng, 40, 1, 1, 16, 16)
    got = expect_delta_prefill(pool, q, k, v, g, beta, [0, 40], [[0, 1]], [True], scale=0.25, init=[0], first=[0],
                               last=[1], computed=[0], block_size=32)
    state = got.pool[1]
    f32 = np.abs(state.astype(np.float32).astype(np.float64) - state)
    assert (f32 <= got.pool_bound[1]).all()
    bf16 = (state.astype(np.float32).view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32).astype(np.float64)
    assert (np.abs(bf16 - state) > got.pool_bound[1]).mean() > 0.5  # most elements far outside
    # a bfloat16 activation's intermediates are allowed; the bound does not grow with the tokens
    wide = delta_prefill_tolerance("float32", "bfloat16", np.ones(1), np.ones(1), 16)
    assert wide[0] > 2 * 2.0 ** -7 and delta_prefill_tolerance("float32", "float32", np.ones(1), np.ones(1), 16)[0] < 1e-4


def test_ill_posed_tables_are_named():
    pool = np.zeros((4, 1, 1, 1))
    ones = np.ones((2, 1, 1))
    args = (ones, ones, ones, np.zeros((2, 1)), np.ones((2, 1)), [0, 1, 2])
    with pytest.raises(IllPosedUpdate, match="both store slot 1"):
        expect_delta_prefill(pool, *args, [[1], [1]], [True, True], scale=1.0)
    with pytest.raises(IllPosedUpdate, match="cross 0 block boundar"):
        expect_delta_prefill(pool, *args, [[0, 1], [2, 3]], [True, True], scale=1.0, init=[0, 0], first=[0, 0],
                             last=[1, 1], computed=[0, 0], block_size=4)


def _case(**kw):
    base = dict(arena_size=64, dtype="float32", act_dtype="float32", layout="vk", slots=4, heads=1, group=2,
                key_dim=4, value_dim=8, lens=(19,), idx=((1, 2),), has_init=(True,), idx_2d=True, idx_stride=2,
                apc=True, block_size=16, init=(0,), first=(0,), last=(1,), computed=(0,))
    base.update(kw)
    return DeltaPrefillCase(**base)


@pytest.mark.parametrize("layout", ["vk", "kv"])
def test_the_contract_hands_the_pool_in_its_layout_and_checks_unwritten_slots_exactly(layout):
    m = materialize(_case(layout=layout), "cpu")
    state = m.args["ssm_state"]
    assert tuple(state.shape) == ((4, 2, 8, 4) if layout == "vk" else (4, 2, 4, 8))
    pool = {o.name: o for o in m.outputs}["ssm_state"]
    bound = np.asarray(pool.atol)
    assert (bound[[0, 3]] == 0).all() and (bound[1:3] > 0).all()   # slot 1 (boundary 16), 2 (final) stored
    assert np.array_equal(pool.expected[0], state[0].numpy())
    assert m.kwargs["block_size"] == 16 and m.kwargs["output_final_state"] is True


def test_the_options_narrow_the_draws_and_a_bad_value_is_one_line():
    contract = contracts.get("delta_prefill")
    assert contract.admits(_case(), {"gate": "gdn", "cache_mode": "all", "block_multiple": "8"})
    assert not contract.admits(_case(), {"cache_mode": "none"})
    assert not contract.admits(_case(kda=True), {"gate": "gdn"})
    assert not contract.admits(_case(block_size=12), {"block_multiple": "8"})
    with pytest.raises(UsageError, match="delta_prefill option gate must be one of"):
        contract.strategy(None, gate="mamba")


def test_bad_geometry_is_one_line():
    with pytest.raises(CaseError, match="one row per sequence"):
        materialize(_case(has_init=(True, False)), "cpu")
    with pytest.raises(CaseError, match="go with prefix caching"):
        materialize(_case(apc=False), "cpu")


@pytest.mark.parametrize("kda", [False, True])
def test_the_chunked_kernel_matches_across_chunk_edges_and_a_wrong_chunk_does_not(kda):
    """19 tokens: a whole 16-token chunk ending on the boundary, then a partial tail chunk."""
    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels import registry

    case = _case(kda=kda, lens=(19, 3), idx=((1, 2), (3, 0)), has_init=(True, False), init=(0, 0), first=(0, 0),
                 last=(1, 0), computed=(0, 32))
    assert run_case(registry.get("triton.delta_prefill").fn, case, "cpu", mode="race").kind is None
    assert run_case(registry.get("zoo.DP-WRONGCHUNK").fn, case, "cpu", mode="race").kind == "mismatch"


COMPILE = r'''
from mambafuzz.kernels.delta_prefill import _delta_prefill_kernel, FLAGS
SIG = {n: "*fp32" for n in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "state_ptr", "out_ptr")}
SIG.update({n: "*i32" for n in ("cu_ptr", "idx_ptr", "init_ptr", "first_ptr", "last_ptr", "computed_ptr")})
SIG.update({"has_ptr": "*i1", "scale": "fp32", **{n: "i32" for n in ("pad", "block_size", "n_tokens", "H", "HV",
            "K", "V", "idx_row_stride", "idx_col_stride", "s_slot", "s_head", "s_v", "s_k", "t_v", "t_k")}})
for on in (False, True):
    consts = {"CH": 16, "N_CHUNKS": 64, "BK": 128, "BV": 32, "KDA": on, "BETA_V": on, "L2NORM": on, "APC": on,
              "FINAL": not on, **{f: on for f in FLAGS}}
    comp(_delta_prefill_kernel, dict(SIG, state_ptr="*bf16" if on else "*fp32", q_ptr="*bf16" if on else "*fp32"),
         consts)
print("compiled")
'''


@pytest.mark.matrix
def test_the_kernel_compiles_for_sm90_at_gpu_sizes():
    compile_for_sm90(COMPILE)


def _huge(**kw):
    """An exact float16 case whose one sequence reads and stores slot 2^27: 2^31 elements in (4 GiB)."""
    far = 1 << 27
    return _case(**{"dtype": "float16", "slots": far + 1, "group": 1, "value_dim": 4, "lens": (5,), "idx": ((far,),),
                    "idx_2d": False, "idx_stride": 1, "apc": False, "block_size": 0, "init": None, "first": None,
                    "last": None, "computed": None, "exact": True, "arena_size": (far + 1) * 32 + 64, **kw})


@pytest.mark.parametrize("layout", ["vk", "kv"])
def test_an_exact_case_keeps_the_pool_in_the_arena_byte_for_byte(layout):
    case = _case(layout=layout, exact=True, offset=8, slot_pad=3, arena_size=8 + 4 * (256 + 12) + 64)
    m = materialize(case, "cpu")
    state = m.args["ssm_state"]
    assert tuple(state.shape) == ((4, 2, 8, 4) if layout == "vk" else (4, 2, 4, 8))
    assert state.stride(0) == 64 + 3 and state.data_ptr() == m.arena.data_ptr() + 8
    assert "ssm_state" not in {o.name for o in m.outputs}  # compared in the arena, not as a tensor
    assert (np.asarray(state[:3].float()) * 4 % 1 == 0).all()  # the held slots hold quarters: sums exact


def test_the_strategy_draws_far_slots_a_live_sequence_reads_or_stores():
    """past_2gib says a named slot is past 2 GiB; it is one a correct prefill reads or stores."""
    from hypothesis import HealthCheck, Phase, given, settings

    from mambafuzz import strategies
    from mambafuzz.oracle.delta_prefill import plan_delta_prefill
    contract, seen = contracts.get("delta_prefill"), []

    @settings(max_examples=300, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contract.strategy(strategies.CPU))
    def collect(case):
        assert contract.valid(case), case.describe()
        if contract.features(case)["past_2gib"] == "yes":
            assert case.exact and not case.l2norm
            plan = plan_delta_prefill(case.slots, case.lens, case.idx, case.has_init, pad=case.pad,
                                      final=True, **{k: v for k, v in contract.columns(case).items()})
            touched = {p.src for p in plan if p.reads} | {s for p in plan for s, _ in p.stores}
            seen.append(case.slots - 1 in touched)

    collect()
    assert len(seen) >= 5 and all(seen), seen


def test_a_slot_past_2_31_elements_is_addressed_in_64_bits():
    """The correct kernel and the torch path store slot 2^27 of a float16 pool (2^31 elements in) right; an
    int32 slot offset (zoo DP-I32) wraps before the arena."""
    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels import registry

    for has in (True, False):
        case = _huge(has_init=(has,))
        assert contracts.get("delta_prefill").features(case)["past_2gib"] == "yes"
        assert run_case(registry.get("triton.delta_prefill").fn, case, "cpu", mode="race").kind is None
        assert run_case(registry.get("torch.delta_prefill").fn, case, "cpu").kind is None
        assert run_case(registry.get("zoo.DP-I32").fn, case, "cpu", mode="race").kind in ("oob", "mismatch")

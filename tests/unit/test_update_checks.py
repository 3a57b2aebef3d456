"""The update contracts' checks bite: every input a step must leave alone is compared, the ssm output bound
is the documented one (a 5% error in a bfloat16 output is caught), a slot a correct step never writes is
compared exactly (DU-PADSTORE on pad 0), and two bad kernels an engine could ship are found by fuzzing
with the contracts' own strategies (a delta step that skips nacc = 0 rows, an ssm step that clamps a pad
read slot to 0).  The bad kernels wrap the torch paths: seconds, not the interpreter's minutes."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from mambafuzz import api
from mambafuzz.contracts.base import host_array
from mambafuzz.cases.delta_update import DeltaUpdateCase
from mambafuzz.errors import Failure
from mambafuzz.judge.engine import run_case
from mambafuzz.judge.materialize import materialize
from mambafuzz.kernels import registry
from mambafuzz.oracle.ssm_update import expect_ssm_update
from mambafuzz import contracts

# the arguments a correct step writes; every other argument of the contract is an input it must not change
WRITTEN = {"conv_update": {"conv_state", "out"}, "ssm_update": {"state", "out"},
           "delta_update": {"initial_state", "intermediate_states_buffer", "out"},
           "state_scatter": {"pool", "states"}}  # states: arena bytes, compared as the arena
# a drawn case where every optional input is a tensor, none empty
FULL = {
    "conv_update": lambda c: c.nacc is not None and c.init is not None and c.varlen and c.bias and min(c.lens),
    "ssm_update": lambda c: (c.nacc is not None and c.dst is not None and c.varlen and c.has_d and c.has_z
                             and c.has_dt_bias and min(c.lens)),
    "delta_update": lambda c: c.nacc is not None and c.inter_rows > 0 and min(c.lens),
    "state_scatter": lambda c: True,
}


class _Found(Exception):
    pass


def first(contract: str, wanted):
    """The first of the contract's seeded draws that is `wanted` (no shrinking: a full case stays full)."""
    @settings(database=None, max_examples=1000, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract))
    def look(case):
        if wanted(case):
            raise _Found(case)
    try:
        look()
    except _Found as found:
        return found.args[0]
    raise AssertionError(f"no {contract} case drawn is as wanted")


def _bump(t: torch.Tensor) -> None:
    """One element of `t` changed (in a broadcast view, its shared memory)."""
    flat = t.reshape(-1) if t.is_contiguous() else t.as_strided((1,), (1,))
    old = flat[0].clone()
    flat[0] = old + 1 if not t.dtype.is_floating_point else old * 2 + 1
    if bool(flat[0] == old):  # -1 is a fixed point of x * 2 + 1 (exact cases draw it)
        flat[0] = old + 1


@pytest.mark.parametrize("contract", sorted(WRITTEN))
def test_a_target_that_changes_any_input_is_caught(contract):
    from mambafuzz import contracts

    case = first(contract, FULL[contract])
    inputs = [a.name for a in contracts.get(contract).arguments if a.name not in WRITTEN[contract]]
    fn = registry.get(f"torch.{contract}").fn
    for name in inputs:
        m = materialize(case, "cpu")
        assert isinstance(m.args[name], torch.Tensor), (name, case.describe())
        m.run(fn)
        assert m.compare() is None, name
        _bump(m.args[name])
        mm = m.compare()
        assert mm is not None and name in {o["argument"] for o in mm.outputs}, (name, mm)


# ---------------------------------------------------------------- the ssm output bound, hand-worked
def test_the_ssm_bounds_are_the_documented_ones():
    """st = 1, A = 0, dt = x = B = C = 1 (no softplus, no D, no z): st -> 2, out = 2.  Per token the error
    grows by K eps32 (|st| exp(A dt) (1 + |A dt|) + |dt x B|) = 8 * 2^-24 * 2 = 2^-20; the output adds
    K eps32 |st| |C| = 2^-20, then its own rounding (bf16: 2^-7 of 2) and 1e-6; the stored state its
    dtype's rounding (fp32: 2^-23 of 2) and 1e-6."""
    one = np.ones((1, 1, 1, 1))
    got = expect_ssm_update(one.copy(), one, one, np.zeros((1, 1, 1)), one, one, [1], [[0]], pad=-1,
                            dtype="float32", io_dtype="bfloat16")
    assert got.out.item() == 2.0 and got.pool.item() == 2.0
    assert got.out_tol.item() == pytest.approx(2 ** -19 + 2 * 2 ** -7 + 1e-6, rel=1e-12)
    assert got.pool_tol.item() == pytest.approx(2 ** -20 + 2 * 2 ** -23 + 1e-6, rel=1e-12)


# a drawn case whose out holds compared, bfloat16 where the contract has it (its widest bound)
WIDE_OUT = {"ssm_update": lambda c: c.io_dtype == "bfloat16" and not c.exact and min(c.lens) > 0,
            "conv_update": lambda c: c.dtype == "bfloat16" and min(c.lens) > 0 and c.idx[0][0] != c.pad,
            "delta_update": lambda c: c.act_dtype == "bfloat16" and min(c.lens) > 0 and c.idx[0][0] != c.pad}


@pytest.mark.parametrize("contract", sorted(WIDE_OUT))
def test_a_bfloat16_output_five_percent_wrong_is_caught(contract):
    case = first(contract, WIDE_OUT[contract])
    m = materialize(case, "cpu")
    m.run(registry.get(f"torch.{contract}").fn)
    assert m.compare() is None
    out = {o.name: o for o in m.outputs}["out"]
    care = torch.from_numpy(host_array(out.care).reshape(m.args["out"].shape))
    assert care.any(), case.describe()
    live = m.args["out"]
    live[care] = (live[care].float() * 1.05 + 0.05).to(live.dtype)  # 5% (and a little) off, where compared
    mm = m.compare()
    assert mm is not None and {o["argument"] for o in mm.outputs} == {"out"}


def test_a_varlen_rows_tokens_are_placed_by_their_offset_in_the_row():
    """Tokens of a row that starts at an odd offset: their place in the row is t - start (an xor agrees only
    when the start's bits are the token's), and a correct step is clean; out's elements are named [T, H, D]."""
    def odd_start(c):
        cuts = np.concatenate([[0], np.cumsum(c.lens)])
        return c.varlen and not c.exact and any((t ^ cuts[b]) != t - cuts[b] for b in range(len(c.lens))
                                                for t in range(cuts[b], cuts[b + 1]))
    case = first("ssm_update", odd_start)
    m = materialize(case, "cpu")
    m.run(registry.get("torch.ssm_update").fn)
    assert m.compare() is None
    assert {o.name: o for o in m.outputs}["out"].what == "flat element {i} of out [T, H, D]"


def test_the_delta_state_outputs_are_named_in_their_layout():
    base = dict(arena_size=64, dtype="float32", act_dtype="float32", slots=3, heads=1, group=1, key_dim=4,
                value_dim=8, lens=(1,), idx=((1,),), inter_rows=1, cache_steps=1, inter_idx=(0,))
    for layout, dims in (("kv", "HV, K, V"), ("vk", "HV, V, K")):
        outs = {o.name: o.what for o in materialize(DeltaUpdateCase(layout=layout, **base), "cpu").outputs}
        assert outs["initial_state"] == f"flat element {{i}} of initial_state [S, {dims}]"
        buffer = f"flat element {{i}} of intermediate_states_buffer [R, steps, {dims}]"
        assert outs["intermediate_states_buffer"] == buffer


# ---------------------------------------------------------------- a slot no correct step writes: exact
def test_a_store_to_the_pad_slot_0_is_caught():
    """DU-PADSTORE stores the final state even when the read slot is the pad: with pad 0, rows [[1], [0]],
    row 1 writes slot 0, which a correct step never writes (its bound is 0: compared exactly)."""
    case = DeltaUpdateCase(arena_size=64, dtype="float32", act_dtype="float32", layout="vk", slots=2, heads=1,
                           group=1, key_dim=4, value_dim=4, lens=(1, 1), idx=((1,), (0,)), pad=0)
    assert run_case(registry.get("torch.delta_update").fn, case, "cpu", mode="compare").kind is None
    verdict = run_case(registry.get("zoo.DU-PADSTORE").fn, case, "cpu", mode="compare")
    assert verdict.kind == "mismatch"
    assert {o["argument"] for o in verdict.mismatch.outputs} == {"initial_state"}
    assert all(o["index"] < 16 for o in verdict.mismatch.outputs)  # slot 0's 16 elements (HV 1, V 4, K 4)


# ---------------------------------------------------------------- bad kernels the strategies must find
def _delta_skipping_nacc_0(q, k, v, g, beta, initial_state, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                           intermediate_states_buffer, intermediate_state_indices, out, *, scale,
                           use_qk_l2norm_in_kernel=False, state_layout="vk", pad_slot_id=-1, cache_steps=0,
                           max_query_len=0):
    """A delta step that treats a sequence with nacc = 0 as nothing to do (it reads no column, stores none)."""
    idx = ssm_state_indices
    if num_accepted_tokens is not None:
        idx = idx.clone()
        idx[num_accepted_tokens == 0] = pad_slot_id
    return registry.get("torch.delta_update").fn(
        q, k, v, g, beta, initial_state, cu_seqlens, idx, num_accepted_tokens, intermediate_states_buffer,
        intermediate_state_indices, out, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        state_layout=state_layout, pad_slot_id=pad_slot_id, cache_steps=cache_steps, max_query_len=max_query_len)


def _ssm_clamping_pad_reads(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, dst_state_batch_indices,
                            num_accepted_tokens, cu_seqlens, out, *, dt_softplus=False, pad_slot_id=-1):
    """An ssm step that clamps a pad read slot to slot 0 (max(idx, 0)): the pad row reads slot 0, and
    updated in place, stores it too."""
    src = state_batch_indices.clone()
    rows = torch.arange(src.shape[0])
    col = (num_accepted_tokens.long() - 1).clamp(min=0) if num_accepted_tokens is not None else rows * 0
    src[rows, col] = src[rows, col].clamp(min=0)
    return registry.get("torch.ssm_update").fn(
        state, x, dt, A, B, C, D, z, dt_bias, src, dst_state_batch_indices, num_accepted_tokens, cu_seqlens, out,
        dt_softplus=dt_softplus, pad_slot_id=pad_slot_id)


@pytest.mark.parametrize("fn, contract, options", [
    (_delta_skipping_nacc_0, "delta_update", {"min_accepted": "0"}),
    (_ssm_clamping_pad_reads, "ssm_update", {}),
], ids=["delta-skips-nacc-0", "ssm-clamps-pad-reads"])
def test_a_bad_kernel_is_found_by_the_contracts_strategy(fn, contract, options):
    with pytest.raises(Failure) as info:
        api.check(fn, contract, device="cpu", max_examples=100, seed=1, crashes_dir=None, database=None,
                  shrink_time=2, **options)
    assert info.value.verdict.kind == "mismatch", info.value.summary

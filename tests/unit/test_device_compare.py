"""The on-device comparison (``Materialized._same_on_device``) agrees with the host's ``compare``.

On a GPU, ``compare`` first asks the device whether the arena and every output match and only
copies to the host when something differs; here the same torch code runs on CPU tensors, against
the host comparison, for clean runs and for runs with one output element or one arena byte wrong.
"""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, find, given, settings
from hypothesis import strategies as st

from mambafuzz.contracts.base import host_array
from mambafuzz.judge.materialize import materialize
from mambafuzz.kernels import registry
from mambafuzz import contracts

# Every contract with a torch path (the correct kernel these tests run), from the registries: a new
# contract is in without an edit here.
CONTRACTS = [c for c in contracts.names() if any(t.name == f"torch.{c}" for t in registry.all_targets())]
WITH_OUT = [c for c in CONTRACTS if "out" in contracts.get(c).positional]  # an `out` argument the kernel writes


def _wrong(t: torch.Tensor, i: int) -> None:
    """Make element `i` of `t` wrong beyond any tolerance: infinite where floats, flipped where bools, one
    more elsewhere (in a broadcast view, every element sharing its memory with it too)."""
    at = tuple(int(j) for j in np.unravel_index(i, tuple(t.shape)))
    t[at] = float("inf") if t.dtype.is_floating_point else ~t[at] if t.dtype == torch.bool else t[at] + 1


@pytest.mark.parametrize("contract", CONTRACTS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_device_and_host_comparisons_agree(contract, data):
    case = data.draw(contracts.strategy(contract))
    m = materialize(case, "cpu")
    fn = registry.get(f"torch.{contract}").fn
    m.run(fn)
    assert m.compare() is None and m._same_on_device()

    for out in m.outputs:  # one element wrong, where the output is compared
        care = np.ones(host_array(out.expected).size, bool) if out.care is None else host_array(out.care).reshape(-1)
        if not care.any():
            continue
        i = int(data.draw(st.sampled_from(np.flatnonzero(care).tolist())))
        _wrong(m.args[out.name], i)
        mm = m.compare()
        assert mm is not None and {o["argument"] for o in mm.outputs} == {out.name}
        assert not m._same_on_device()
        m.restore()
        m.run(fn)

    live = m.arena.numel() if m.device_positions is None else m.device_positions.numel()
    k = data.draw(st.integers(0, live - 1))
    at = k if m.device_positions is None else int(m.device_positions[k])
    m.arena[at] ^= 0xFF  # one arena byte wrong
    assert m.compare() is not None and not m._same_on_device()


def test_a_device_comparison_that_cannot_run_leaves_the_verdict_to_the_host():
    case = find(contracts.strategy("ssm_update"), lambda c: True)
    m = materialize(case, "cpu")
    m.run(registry.get("torch.ssm_update").fn)
    m.arena[0] ^= 0xFF
    m._device_expect = False  # as after an out-of-memory error on the device
    assert not m._same_on_device() and m.compare() is not None


def _noop(src_ptrs, dst_ptrs, sizes, *, arena):
    """A batch copy that copies nothing: wrong on every repetition of a case that moves bytes."""


def test_after_the_first_failing_repetition_only_whether_later_ones_fail_is_asked(monkeypatch):
    from mambafuzz.judge import engine, materialize as mat

    case = find(contracts.strategy("batch_memcpy"), lambda c: engine.run_case(_noop, c, "cpu").failed)
    calls, asked = [], []
    real, real_differs = mat.Materialized.compare, mat.Materialized.differs
    monkeypatch.setattr(mat.Materialized, "compare", lambda self: (calls.append(1), real(self))[1])
    monkeypatch.setattr(mat.Materialized, "differs", lambda self: (asked.append(1), real_differs(self))[1])
    verdict = engine.run_case(_noop, case, "cpu", reps=5)
    assert (verdict.reps, verdict.failures) == (5, 5) and verdict.mismatch is not None
    assert (len(asked), len(calls)) == (4, 5)  # the first where; then whether (on the CPU: by comparing)
    calls.clear()
    m = materialize(case, "cpu")
    m.run(_noop)
    m.device = "cuda"  # as on a GPU: the device answers, the host comparison is not reached
    monkeypatch.setattr(mat, "differing", lambda *a: pytest.fail("the host compared"))
    assert m.differs() and not calls
    m.restore()
    m.run(registry.get("torch.batch_memcpy").fn)
    assert not m.differs()
    m.restore()
    m._device_expect = False  # the device could not compare: the host does
    m.device = "cpu"
    m.run(_noop)
    assert m.differs() and calls


@pytest.mark.parametrize("contract", WITH_OUT)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_an_output_left_nan_differs_on_the_device_as_on_the_host(contract, data):
    """`out` starts as NaN: a kernel that never writes it leaves NaN where a value is expected.  NaN is
    right only where NaN is expected (never, here), on the device as on the host."""
    case = data.draw(contracts.strategy(contract))
    m = materialize(case, "cpu")
    m.run(registry.get(f"torch.{contract}").fn)
    out = {o.name: o for o in m.outputs}["out"]
    care = torch.from_numpy(host_array(out.care).reshape(tuple(m.args["out"].shape))).bool()
    assume(bool(care.any()))
    m.args["out"][care] = float("nan")
    mm = m.compare()
    assert mm is not None and {o["argument"] for o in mm.outputs} == {"out"}
    assert not m._same_on_device()

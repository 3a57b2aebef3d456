"""Every address term past 2 GiB on the CPU too (issue 25 item 5).

A slot's address is BASE + layer * LAYER_STRIDE + slot * SLOT_STRIDE + byte; a
kernel that forms one term in int32 wraps only when that term passes 2 GiB.
The CPU profile used to put only layers there, so a TensorRT-LLM-style copy
with int32 slot indices (``tests/style_kernels/slots.py``) ran clean while
coverage said ``past_2gib: yes``.  Now each term crosses on its own (sparse
images: no 2 GiB is filled, and no copy walks a huge stride), coverage names
it (``past_2gib_by``), and the int32 kernel is found in a smoke-sized run.
"""
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings

from common import fuzz_options
from mambafuzz import contracts, strategies
from mambafuzz.search import features
from mambafuzz.judge.engine import run_case
from mambafuzz.search.fuzz import fuzz_target
from mambafuzz.kernels import registry
from mambafuzz.control.targets import resolve

SMOKE_EXAMPLES = 60  # what `mambafuzz smoke` runs per target
TERMS = {"slot_copy": ("layer", "slot", "element"), "slot_fork": ("layer", "slot", "element"),
         "state_copy": ("block", "element"), "postprocess": ("block", "element")}


def terms(case) -> list[str]:
    return features.labels_of(features.features(case)["past_2gib_by"])


@pytest.mark.parametrize("contract", [
    pytest.param(c, marks=pytest.mark.matrix if c in ("postprocess", "slot_fork") else ()) for c in sorted(TERMS)])
def test_the_cpu_profile_draws_every_term_past_2_gib_with_small_strides(contract):
    seen = Counter()

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy(contract, profile=strategies.CPU))
    def draw(case):
        assert contracts.get(contract).valid(case), case.describe()
        seen.update(terms(case))
        if contract.startswith("slot"):  # a kernel copying whole strides moves kilobytes, not gigabytes
            assert max(b.slot_stride if b.layer_major else b.layer_stride for b in case.buffers) < 1 << 20

    draw()
    assert all(seen[t] >= 5 for t in TERMS[contract]), seen
    assert set(features.expected_features(contract)["past_2gib_by"]) == {"none", *TERMS[contract]}


def _huge_cases(contract, n, **options):
    """`n` drawn CPU cases with some term past 2 GiB, each term among them."""
    out = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy(contract, **options).filter(lambda c: terms(c) != ["none"]))
    def draw(case):
        out.append(case)

    draw()
    assert {t for c in out for t in terms(c)} == set(TERMS[contract])
    return out


def int32_target():
    (t,) = resolve(["tests.style_kernels.slots:int32_slot_copy"], contract="slot_copy", overlap="full")
    return t


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.matrix
def test_an_int32_slot_index_kernel_is_found_in_a_smoke_sized_run(seed, tmp_path):
    opts = fuzz_options(tmp_path, max_examples=SMOKE_EXAMPLES, seed=seed, database=None, shrink_budget=20,
                        contract_options={"chains": "forbidden"})
    report = fuzz_target(int32_target(), opts)
    f = report.finding
    assert f is not None and f.examples_to_first <= SMOKE_EXAMPLES, report.tally.counts.get("past_2gib_by")
    assert "slot" in terms(f.case) and "layer" not in terms(f.case), f.case.describe()
    assert f.verdict.hazards and f.verdict.hazards[0].kind == "out-of-bounds", f.verdict.summary()
    assert "slot" in report.tally.counts["past_2gib_by"]


@pytest.mark.parametrize("contract, names", [
    ("slot_copy", ("triton.slot_copy", "torch.slot_copy", "zoo.SLOT-PAD")),
    ("slot_fork", ("triton.slot_fork", "torch.slot_fork")),
])
@pytest.mark.matrix
def test_correct_slot_kernels_stay_clean_past_2_gib_by_every_term(contract, names):
    """A kernel that copies whole slot strides (SLOT-PAD, wrong on padding) takes no longer: nothing
    walks gigabytes."""
    cases = _huge_cases(contract, 12)
    for name in names:
        fn = registry.get(name).fn
        for case in cases:
            start = time.monotonic()
            verdict = run_case(fn, case, "cpu", mode="race")
            assert time.monotonic() - start < 5, (name, case.describe())
            assert name.startswith("zoo.") or not verdict.failed, (name, case.describe(), verdict.summary())


def test_the_int32_kernel_fails_exactly_where_the_slot_term_crossed():
    fn = int32_target().fn
    for case in _huge_cases("slot_copy", 12, chains="forbidden"):
        verdict = run_case(fn, case, "cpu", mode="race")
        assert verdict.failed == ("slot" in terms(case)), (case.describe(), verdict.summary())

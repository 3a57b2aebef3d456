"""Judging a flaky failure by k/N (mambafuzz.search.flaky) and shrinking with it in the fuzz loop.

The fuzz-loop test runs on the CPU with a Python target that corrupts a
byte at random (a stand-in for a GPU race): with every candidate judged by
one batch, shrinking stalls on big cases; judged by k/N it ends small.
"""
import random

import pytest

from mambafuzz import findings
from mambafuzz.search import flaky
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.judge.engine import Verdict
from mambafuzz.search.fuzz import FuzzOptions, fuzz_target
from mambafuzz.kernels.registry import Target
from mambafuzz.judge.materialize import Mismatch
from mambafuzz.judge.stats import rate_upper_bound
from common import fuzz_options


def _batch(rate: float, reps: int, rng: random.Random):
    """A fake run_case: `reps` repetitions, each failing with probability `rate`."""
    def run() -> Verdict:
        k = sum(rng.random() < rate for _ in range(reps))
        return Verdict(reps=reps, failures=k, mode="compare",
                       mismatch=Mismatch(1, 64, []) if k else None)
    return run


def test_budget_is_enough_repetitions_for_the_threshold_rate():
    # ln 20 / (0.1 * 0.2) = 149.8 -> 3 batches of 50
    assert flaky.budget(10 / 50, 50) == 150
    assert flaky.budget(1.0, 50) == 50                      # a sure failure needs one batch
    assert flaky.budget(1e-9, 50) == flaky.MAX_BATCHES * 50  # capped
    assert flaky.budget(0.0, 10) == 10
    with pytest.raises(ValueError):
        flaky.budget(0.5, 0)


def test_judge_stops_at_the_first_failing_batch_and_counts_every_repetition():
    outcomes = iter([0, 0, 3, 7])
    calls = []

    def run():
        k = next(outcomes)
        calls.append(k)
        return Verdict(reps=10, failures=k, mode="compare", mismatch=Mismatch(k, 8, []) if k else None)

    v = flaky.judge(run, p0=0.01, batch=10)
    assert calls == [0, 0, 3]
    assert (v.failures, v.reps) == (3, 30)
    assert v.mismatch is not None and v.mismatch.count == 3


def test_judge_gives_up_after_the_budget():
    v = flaky.judge(_batch(0.0, 50, random.Random(1)), p0=10 / 50, batch=50)
    assert (v.failures, v.reps) == (0, 150)


def test_judge_stops_when_told():
    n = [0]

    def stop():
        n[0] += 1
        return n[0] >= 2

    v = flaky.judge(_batch(0.0, 10, random.Random(1)), p0=0.001, batch=10, stop=stop)
    assert v.reps == 20


def test_a_candidate_at_the_threshold_rate_is_kept_at_least_95_percent_of_the_time():
    rng = random.Random(7)
    p0 = 2 / 50
    rate = flaky.THRESHOLD * p0
    # exactly: a candidate is dropped only when every repetition it gets passes, and one that never
    # fails gets them all (750: 15 batches of 50)
    reps = flaky.judge(_batch(0.0, 50, rng), p0, 50).reps
    assert 1 - (1 - rate) ** reps >= 0.95, reps
    # sampled: 400 candidates at that rate keep a share consistent with it (at 99%: 0.95 is not ruled out)
    kept = sum(flaky.judge(_batch(rate, 50, rng), p0, 50).failed for _ in range(400))
    assert rate_upper_bound(kept, 400, confidence=0.99) >= 0.95, kept
    # and one batch alone keeps it far less often: why a candidate gets k/N, not one batch
    one = sum(_batch(flaky.THRESHOLD * p0, 50, rng)().failed for _ in range(400))
    expected_one = 1 - (1 - flaky.THRESHOLD * p0) ** 50
    assert abs(one / 400 - expected_one) < 0.1 and one < kept


def test_measure_counts_at_least_the_asked_repetitions():
    v = flaky.measure(_batch(0.25, 30, random.Random(3)), 30, reps=100)
    assert v.reps == 120 and 0 < v.failures < 120


def test_merge_keeps_the_first_evidence():
    a = Verdict(reps=10, failures=0, mode="compare")
    b = Verdict(reps=10, failures=2, mode="compare", mismatch=Mismatch(2, 8, []))
    c = Verdict(reps=10, failures=1, mode="compare", mismatch=Mismatch(1, 8, []))
    v = flaky.merge(flaky.merge(a, b), c)
    assert (v.reps, v.failures) == (30, 3) and v.mismatch.count == 2


# --------------------------------------------------------------------------
# the fuzz loop: a flaky target shrinks to a small case when judged by k/N
# --------------------------------------------------------------------------
_RNG = random.Random(0)
FLAKE = 0.03


def flaky_overlap(src_ptrs, dst_ptrs, sizes, *, arena):
    """A memmove that, on a row whose source and destination overlap, corrupts a byte now and then."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()
        if abs(s - d) < n and _RNG.random() < FLAKE:
            arena[d - base] ^= 0x5A


def _shrunk(tmp_path, monkeypatch, judged_by_rate: bool, seed: int):
    monkeypatch.setattr(FuzzOptions, "flaky", property(lambda self: judged_by_rate))
    _RNG.seed(seed)
    opts = fuzz_options(tmp_path / f"{judged_by_rate}-{seed}", mode="compare", reps=10, max_examples=300,
                        seed=seed, witness=False, shrink_budget=60)
    target = Target(name="flaky_overlap", contract="batch_memcpy", kind="user", fn=flaky_overlap,
                    overlap="full", description="flaky")
    report = fuzz_target(target, opts)
    assert report.finding is not None, report
    return report.finding


@pytest.mark.matrix
def test_a_flaky_failure_shrinks_to_one_small_row_when_judged_by_rate(tmp_path, monkeypatch):
    """A rate-judged reduction ends at one overlapping row of 1-2 bytes; one batch per candidate leaves
    bigger arenas (measured with this target, 3% per overlapping row, 10 repetitions a batch)."""
    by_rate, by_batch = [], []
    for seed in (1, 2, 3):
        f = _shrunk(tmp_path, monkeypatch, True, seed)
        assert f.found_rate is not None and f.found_rate[0] >= 1
        assert len(f.case.copies) == 1 and f.case.copies[0][2] <= 2, f.case.describe()
        assert f.case.arena_size <= 8, f.case.describe()
        assert f.verdict.reps >= flaky.CONFIRM_REPS or f.verdict.failures  # its rate, measured
        by_rate.append(f.case.arena_size)
        by_batch.append(_shrunk(tmp_path, monkeypatch, False, seed).case.arena_size)
    assert sum(by_rate) < sum(by_batch), (by_rate, by_batch)


def _with_witness(tmp_path, monkeypatch, cpu_case):
    """A finding whose shrinking is off, handed a canned CPU witness with `cpu_case`."""
    from mambafuzz.search import cross

    calls = []

    def fake_witness(target, case, **kw):
        calls.append(case)
        return cross.Witness(cross.WITNESSED, summary="intra-program hazard", cpu_case=cpu_case.to_json(),
                             cpu_summary=cpu_case.describe(), cpu_size=list(cpu_case.size))

    monkeypatch.setattr(cross, "cpu_witness", fake_witness)
    monkeypatch.setattr(FuzzOptions, "flaky", property(lambda self: True))
    _RNG.seed(11)
    opts = fuzz_options(tmp_path, mode="compare", reps=10, max_examples=300, seed=4, witness=True,
                        shrink_budget=0.0)
    target = Target(name="flaky_overlap", contract="batch_memcpy", kind="user", fn=flaky_overlap,
                    overlap="full", description="flaky")
    report = fuzz_target(target, opts)
    assert report.finding is not None and len(calls) == 1
    return report.finding


def test_a_smaller_cpu_case_that_fails_on_the_gpu_too_is_adopted(tmp_path, monkeypatch):
    from mambafuzz.contracts import case_from_json
    small = BatchCopyCase(arena_size=3, copies=((1, 0, 2), ), seed=0)  # overlapping: fails at 3% a row
    f = _with_witness(tmp_path, monkeypatch, small)
    assert f.case == small
    assert f.witness["adopted"] is True and f.witness["gpu_rate"][0] >= 1
    assert f.verdict.reps >= flaky.CONFIRM_REPS and f.verdict.failures >= 1
    saved = findings.load(f.path)  # the file holds the adopted case and both rates
    assert case_from_json(saved.body["case"]) == small and saved.body["found_rate"] == f.found_rate


def test_a_smaller_cpu_case_the_gpu_does_not_fail_is_not_adopted(tmp_path, monkeypatch):
    clean = BatchCopyCase(arena_size=16, copies=((0, 8, 4), ), seed=0)  # no overlap: never fails
    f = _with_witness(tmp_path, monkeypatch, clean)
    assert f.case != clean and f.case.size > clean.size
    assert f.witness["adopted"] is False and f.witness["gpu_rate"][0] == 0
    assert f.witness["gpu_rate"][1] >= flaky.budget(f.found_rate[0] / f.found_rate[1], 10)

"""A witness that can change bytes, not a same-value one (issue 25 item 6).

A LightLLM / SGLang-style in-place slot copy (``tests/style_kernels/slots.py``)
under chains: a self-copy stores the bytes already there while another
program reads them (``0->0, 0->1``), which no hardware shows, where a chain
(``2->0, 0->1``) corrupts.  The recorder marks the first ``same_value``, ranks
it below any hazard that can change bytes, and shrinking (the fuzz loop and
the CPU witness child) never trades a hazard that can change bytes for it.
"""
import pytest

from common import fuzz_options
from mambafuzz.search import cross
from mambafuzz.contracts.slot_copy import SlotCopyCase
from mambafuzz.judge.engine import run_case
from mambafuzz.search.fuzz import fuzz_target
from mambafuzz.oracle import SlotBuffer
from mambafuzz.search.reduce import same_value_only
from mambafuzz.control.targets import resolve

KERNELS = "tests.style_kernels.slots"
BUF = SlotBuffer(offset=0, layers=1, slots=3, slot_bytes=16, slot_stride=16, layer_stride=48, elem_size=1)


def slot_case(src, dst):
    return SlotCopyCase(arena_size=64, buffers=(BUF,), src_idx=tuple(src), dst_idx=tuple(dst), seed=1)


def target(fn):
    (t,) = resolve([f"{KERNELS}:{fn}"], contract="slot_copy", overlap="full")
    return t


def verdict(fn, src, dst):
    return run_case(target(fn).fn, slot_case(src, dst), "cpu", mode="race")


def flags(v):
    return [h.to_json()["same_value"] for h in v.hazards]


def test_a_self_copy_read_by_another_program_is_a_same_value_hazard():
    v = verdict("inplace_slot_copy", [0, 0], [0, 1])
    assert v.kind == "race" and v.mismatch is None and flags(v) == [True], v.summary()
    assert "wrote the value already there" in v.hazards[0].explanation
    assert same_value_only(v)


@pytest.mark.parametrize("src, dst", [([2, 0], [0, 1]), ([1, 0], [0, 1])])
def test_a_chain_or_a_swap_can_change_bytes(src, dst):
    v = verdict("inplace_slot_copy", src, dst)
    assert flags(v) == [False] and v.mismatch is not None and not same_value_only(v), v.summary()
    assert "already there" not in v.hazards[0].explanation


def test_the_witness_of_a_line_pair_is_one_that_changes_bytes():
    """Pair 2 (0->0) stores slot 0 unchanged while pair 1 reads it; pair 1 (0->1) overwrites slot 1,
    which pair 0 read first (no wrong bytes in the interpreter's order).  One hazard per line pair:
    the one at slot 1, though slot 0's bytes are lower."""
    v = verdict("ordered_inplace_slot_copy", [1, 0, 0], [2, 1, 0])
    assert v.mismatch is None, v.summary()
    (h,) = v.hazards
    assert not h.to_json()["same_value"] and BUF.locate(h.offset)[1] == 1, v.summary()
    assert h.first.program == (1, 0, 0) and h.second.program == (0, 0, 0)


@pytest.mark.matrix
def test_the_cpu_witness_child_keeps_a_hazard_that_changes_bytes():
    """Dropping pair 0 leaves 0->1, 0->0: a same-value hazard only, smaller but weaker; the child keeps
    1->2, 0->1."""
    w = cross.cpu_witness(target("ordered_inplace_slot_copy"), slot_case([1, 0, 0], [2, 1, 0]), timeout=180,
                          shrink_seconds=60)
    assert w.status == cross.WITNESSED, w
    src, dst = w.cpu_case["src_idx"], w.cpu_case["dst_idx"]
    assert len(src) == 2 and all(s != d for s, d in zip(src, dst)), w.cpu_case


@pytest.mark.parametrize("seed", [1, 10])
@pytest.mark.matrix
def test_fuzzing_under_chains_shrinks_to_a_hazard_that_changes_bytes(seed, tmp_path):
    """Seed 1: the first failure is same-value only and a larger one that can change bytes replaces
    it; seed 10: a pair dropped from the first failure leaves only a same-value hazard (both shrank to
    0->0, 0->1 before).  Every case saved after one that can change bytes can change bytes too."""
    saved = []
    report = fuzz_target(target("ordered_inplace_slot_copy"),
                         fuzz_options(tmp_path, max_examples=60, seed=seed, database=None, shrink_budget=60),
                         on_finding=lambda finding: saved.append(same_value_only(finding.verdict)))
    f = report.finding
    assert f is not None, report.examples
    assert True not in saved[saved.index(False):], saved
    case = f.case
    assert not same_value_only(f.verdict), (case.describe(), f.verdict.summary())
    assert all(s != d for s, d in zip(case.src_idx, case.dst_idx)), case.describe()
    assert not f.verdict.hazards[0].to_json()["same_value"]

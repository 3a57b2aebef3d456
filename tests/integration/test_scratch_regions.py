"""Memory a kernel reaches through pointers, and out-of-bounds as its own kind (issue 25, items 1-2).

The kernel is an engine-style batch copy staged through scratch: each program
copies its row into its own scratch row (a uint64 pointer table is the only way
to it), passes ``tl.debug_barrier()``, then copies the scratch row to the
destination; loop bounds are loaded sizes (int32) walked by ``while``.  The
adapter allocates the scratch with ``torch.empty`` during the call: the race
check must know that memory, and only an access outside every live allocation
is ``oob``.
"""
import json
import re
import weakref
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import mambafuzz
from mambafuzz import adapters, findings
from mambafuzz.search import features
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.judge.engine import KINDS, Verdict, run_case
from mambafuzz.errors import Failure

from common import ROOT, mf

FAST = dict(database=None, shrink_time=10, seed=1)
# two rows, no byte shared: row 0 moves 24 bytes down by 8 (an overlap), row 1 20 bytes apart
TWO_ROWS = BatchCopyCase(arena_size=128, copies=((16, 8, 24), (64, 100, 20)), seed=3)


@triton.jit
def _staged_kernel(src_ptrs, dst_ptrs, tmp_ptrs, sizes, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    src = tl.load(src_ptrs + i).to(tl.pointer_type(tl.uint8))
    dst = tl.load(dst_ptrs + i).to(tl.pointer_type(tl.uint8))
    tmp = tl.load(tmp_ptrs + i).to(tl.pointer_type(tl.uint8))
    n = tl.load(sizes + i)
    lanes = tl.arange(0, BLOCK)
    k = n * 0
    while k < n:
        offs = k + lanes
        m = offs < n
        tl.store(tmp + offs, tl.load(src + offs, mask=m), mask=m)
        k += BLOCK
    tl.debug_barrier()  # every lane's scratch bytes are stored before any lane loads them
    k = n * 0
    while k < n:
        offs = k + lanes
        m = offs < n
        tl.store(dst + offs, tl.load(tmp + offs, mask=m), mask=m)
        k += BLOCK


LAST_SCRATCH = []          # a weak reference to the latest scratch: the recorder must not keep it alive
PREALLOCATED = torch.empty(1 << 16, dtype=torch.uint8)  # a workspace made before any call


def _launch(src_ptrs, dst_ptrs, sizes, scratch, row, *, free_first=False):
    n = sizes.numel()
    table = torch.tensor([scratch.data_ptr() + r * row for r in range(n)], dtype=torch.uint64)
    args = (src_ptrs.to(torch.uint64), dst_ptrs.to(torch.uint64), table, sizes.to(torch.int32))
    LAST_SCRATCH[:] = [weakref.ref(scratch)]
    if free_first:
        del scratch     # the pointer table outlives the memory it points to
    _staged_kernel[(n,)](*args, BLOCK=64)


def _row(sizes):
    return max(int(sizes.max()), 1)


def staged_copy(src_ptrs, dst_ptrs, sizes):
    """Correct: one scratch row per copy."""
    if sizes.numel():
        row = _row(sizes)
        _launch(src_ptrs, dst_ptrs, sizes, torch.empty(sizes.numel() * row, dtype=torch.uint8), row)


def staged_copy_short(src_ptrs, dst_ptrs, sizes):
    """WRONG: the scratch is one row too small, so the last copy overruns it."""
    if sizes.numel():
        row = _row(sizes)
        scratch = torch.empty((sizes.numel() - 1) * row, dtype=torch.uint8)  # SHORT SCRATCH
        _launch(src_ptrs, dst_ptrs, sizes, scratch, row)


def staged_copy_freed(src_ptrs, dst_ptrs, sizes):
    """WRONG: the scratch is freed before the launch that uses it."""
    if sizes.numel():
        row = _row(sizes)
        _launch(src_ptrs, dst_ptrs, sizes, torch.empty(sizes.numel() * row + 4096, dtype=torch.uint8), row,
                free_first=True)


def staged_copy_workspace(src_ptrs, dst_ptrs, sizes, *, declare=True):
    """Stages in a module-level workspace, which no torch op of the call returns: declared with add_region."""
    if sizes.numel():
        if declare:
            adapters.add_region("workspace", PREALLOCATED)
        _launch(src_ptrs, dst_ptrs, sizes, PREALLOCATED, _row(sizes))


def staged_copy_undeclared(src_ptrs, dst_ptrs, sizes):
    staged_copy_workspace(src_ptrs, dst_ptrs, sizes, declare=False)


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if marker in line)


# ---------------------------------------------------------------- memory the target allocates
@pytest.mark.matrix
def test_scratch_reached_through_a_pointer_table_is_clean(tmp_path):
    report = mambafuzz.check(staged_copy, "batch_memcpy", max_examples=25, crashes_dir=tmp_path, **FAST)
    assert report.status == "clean" and report.examples == 25
    verdict = run_case(staged_copy, TWO_ROWS, "cpu", mode="race")
    assert not verdict.failed, verdict.summary()


def test_a_scratch_one_row_short_is_oob_and_names_the_allocation():
    verdict = run_case(staged_copy_short, TWO_ROWS, "cpu", mode="race")
    assert verdict.kind == "oob", verdict.summary()
    (h,) = verdict.hazards
    assert h.kind == "out-of-bounds" and h.first.op == "store" and h.first.program == (1, 0, 0)
    # row is 24 bytes: the scratch holds 24, program 1's first store is the byte right after it
    where = (r"right after the end of alloc#\d+ uint8\[24\] at tests/integration/test_scratch_regions.py:"
             rf"{_line_of('SHORT SCRATCH')} \[")
    assert re.search(where, h.explanation), h.explanation
    assert verdict.summary().startswith("out-of-bounds hazard: program (1,0,0)")
    assert run_case(staged_copy_short, TWO_ROWS, "cpu", mode="compare").kind == "oob"  # the fence runs in both


def test_freed_scratch_is_oob_and_the_recorder_keeps_nothing_alive():
    verdict = run_case(staged_copy_freed, TWO_ROWS, "cpu", mode="race")
    assert verdict.kind == "oob", verdict.summary()
    assert "freed before this launch" in verdict.hazards[0].explanation
    assert re.search(r"inside alloc#\d+ uint8\[4144\] at ", verdict.hazards[0].explanation)
    run_case(staged_copy, TWO_ROWS, "cpu", mode="race")
    assert LAST_SCRATCH[0]() is None  # the scratch of a clean run is freed once the call ends


def test_memory_made_before_the_call_is_handed_over_with_add_region():
    undeclared = run_case(staged_copy_undeclared, TWO_ROWS, "cpu", mode="race")
    assert undeclared.kind == "oob", undeclared.summary()
    declared = run_case(staged_copy_workspace, TWO_ROWS, "cpu", mode="race")
    assert not declared.failed, declared.summary()
    adapters.add_region("workspace", PREALLOCATED)  # outside a recording: a no-op, no error


# ---------------------------------------------------------------- oob everywhere a kind is written
@pytest.mark.matrix
def test_an_oob_finding_is_oob_in_the_failure_the_crash_file_and_replay(tmp_path):
    with pytest.raises(Failure) as info:
        mambafuzz.check(staged_copy_short, "batch_memcpy", max_examples=25, crashes_dir=tmp_path, **FAST)
    e = info.value
    assert e.verdict.kind == "oob" and "breaks the batch_memcpy contract: oob" in str(e)
    body = json.loads(Path(e.path).read_text())
    assert body["kind"] == body["verdict"]["kind"] == "oob"
    assert findings.load(e.path).finding().verdict.kind == "oob"
    proc = mf("replay", e.path, "--device", "cpu", "--json", cwd=tmp_path,
              pythonpath=f"{ROOT}:{ROOT / 'tests'}:{Path(__file__).parent}")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(proc.stdout)["files"]
    assert row["verdict"]["kind"] == "oob", row


def test_oob_is_a_kind_of_its_own_in_json_and_features():
    assert "oob" in KINDS and set(KINDS) <= set(features.BUCKETS["verdict"])
    verdict = run_case(staged_copy_short, TWO_ROWS, "cpu", mode="race")
    body = json.loads(json.dumps(verdict.to_json()))
    back = Verdict.from_json(body)
    assert back.kind == body["kind"] == "oob" and back.summary() == verdict.summary()
    assert features.verdict_features(back)["verdict"] == "oob"
    # a crash file written before oob was a kind says "race" for the same evidence: still read, as oob
    assert Verdict.from_json({**body, "kind": "race"}).kind == "oob"
    with pytest.raises(ValueError, match="evidence"):
        Verdict.from_json({**body, "kind": "mismatch"})


def racy_then_short(src_ptrs, dst_ptrs, sizes):
    """WRONG twice: a racy launch (no barrier on row 0's left overlap), then the scratch overrun."""
    from mambafuzz.kernels import registry

    registry.get("zoo.BM-NOGUARD").fn(src_ptrs, dst_ptrs, sizes)
    staged_copy_short(src_ptrs, dst_ptrs, sizes)


def test_oob_after_a_racy_launch_is_oob_and_keeps_the_race():
    verdict = run_case(racy_then_short, TWO_ROWS, "cpu", mode="race")
    assert verdict.kind == "oob", verdict.summary()
    kinds = [h.kind for h in verdict.hazards]
    assert kinds[0] == "out-of-bounds" and "intra-program" in kinds[1:], kinds
    assert verdict.summary().startswith("out-of-bounds hazard (+")

"""Memory shares bound the case builder (issue 44 on a GPU): a worker's budget in bytes, the cases past it
declined before anything is allocated, the rows that need pools past 2 GiB dealt to a worker with room,
the zoo's worker count from the GPU's memory, that memory read without CUDA (``nvidia-smi``)."""
import os

import pytest

from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.control import gpu, mps
from mambafuzz.errors import OverBudget, Rejected
from mambafuzz.kernels import zoo
from mambafuzz.run import deal, inject

GiB = 1 << 30


def test_past_2gib_holds_the_biggest_sparse_arena():
    assert zoo.PAST_2GIB > MAX_SPARSE_ARENA


def test_budgets_follow_the_shares_and_none_without_memory_or_alone():
    assert mps.budgets(1, 80 * GiB) == [None]
    assert mps.budgets(4, None) == [None] * 4
    b = mps.budgets(4, 80 * GiB)
    assert b[0] == int(0.5 * 80 * GiB * mps.CASE_PART) and b[1] == b[2] == b[3] < b[0]


@pytest.mark.parametrize("gib, k", [(None, 1), (16, 1), (40, 2), (80, 4), (141, 4)])
def test_the_zoo_takes_the_most_workers_whose_every_share_holds_the_biggest_row(gib, k):
    total = None if gib is None else int(gib * GiB * 0.99)  # an "80 GB" card reports a little less
    assert mps.zoo_workers_per_gpu(total, zoo.PAST_2GIB) == k


def _case_of_size(arena_size):
    from hypothesis import find
    from mambafuzz import contracts
    case = find(contracts.strategy("batch_memcpy", profile="cpu"),
                lambda c: c.arena_size >= 64)
    import dataclasses
    return dataclasses.replace(case, arena_size=max(arena_size, case.arena_size))


def test_a_case_past_the_budget_is_declined_before_it_is_allocated(monkeypatch):
    from mambafuzz.judge.materialize import materialize
    case = _case_of_size(4096)
    monkeypatch.setenv(mps.BUDGET_ENV, "1000")
    with pytest.raises(OverBudget) as info:
        materialize(case, "cpu")
    assert isinstance(info.value, Rejected) and info.value.reason == "over this worker's memory budget (0 MiB)"
    from mambafuzz import contracts
    contract = contracts.of(case)
    monkeypatch.setattr(type(contract), "image", lambda self, c: (_ for _ in ()).throw(AssertionError("imaged")))
    with pytest.raises(OverBudget):  # the arena alone is past it: declined before the image is made
        materialize(case, "cpu")
    monkeypatch.undo()
    monkeypatch.setenv(mps.BUDGET_ENV, str(2 * case.arena_size))  # the arena fits; with snapshot and expectation not
    with pytest.raises(OverBudget):
        materialize(case, "cpu")
    monkeypatch.setenv(mps.BUDGET_ENV, str(64 << 20))
    assert materialize(case, "cpu").arena.numel() == case.arena_size  # within it: as before
    monkeypatch.delenv(mps.BUDGET_ENV)
    assert materialize(case, "cpu").arena.numel() == case.arena_size  # no budget: unchanged


def test_the_footprint_counts_a_dense_arena_thrice_and_a_sparse_one_by_its_live_bytes():
    import numpy as np
    from mambafuzz.judge.materialize import footprint
    assert footprint(1000, None) == 3000
    assert footprint(8 * GiB, np.zeros(100, dtype=np.int64)) == 8 * GiB + 1100


def test_deal_puts_a_big_row_only_where_it_fits_and_redeal_onto_loads():
    rows = [{"spec": "big", "cost": 1.0, "memory": 9 * GiB}, {"spec": "a", "cost": 3.0}, {"spec": "b", "cost": 2.0}]
    hands = deal.deal(rows, 2, [GiB, 10 * GiB])
    assert [[e["spec"] for e in h] for h in hands] == [["a"], ["b", "big"]]
    assert deal.homeless(rows, [GiB, GiB]) == [rows[0]] and deal.homeless(rows, [None]) == []
    assert deal.deal(rows, 2) == deal.deal(rows, 2, [None, None])  # no budgets: as before
    assert [[e["spec"] for e in h] for h in deal.redeal(rows[1:], [10.0, 0.0])] == [[], ["a", "b"]]
    assert [e["spec"] for e in deal.help_list(rows, set(), set(), room=GiB)] == ["a", "b"]


def test_nvidia_smi_is_read_for_memory_and_capability(tmp_path, monkeypatch):
    assert gpu.parse("81559, 9.0\n") == gpu.GpuInfo(81559 << 20, 90)
    assert gpu.parse("[N/A], [N/A]") is None and gpu.parse("") is None
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho \"$@\" > " + str(tmp_path / "args") + "\necho '143771, 9.0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert gpu.query(1) == gpu.GpuInfo(143771 << 20, 90)
    assert "--id=5" in (tmp_path / "args").read_text()  # nvidia-smi numbers GPUs physically
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert gpu.query(0) is None


def test_injected_failures_name_a_slot_and_a_count(monkeypatch):
    monkeypatch.setenv(inject.ENV, "nodevice:1:2, nodevice:3, kill:0:5")
    assert [inject.no_device(1, a) for a in range(3)] == [True, True, False]
    assert inject.no_device(3, 9) and not inject.no_device(0, 0)
    monkeypatch.delenv(inject.ENV)
    assert not inject.no_device(1, 0)


def test_the_gpu_zoos_default_workers_come_from_the_gpus_memory_within_the_cores(monkeypatch):
    from mambafuzz.cli import commands
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(gpu, "query", lambda index=0: gpu.GpuInfo(81559 << 20, 90))
    assert commands._zoo_per_gpu(zoo.PAST_2GIB, 1) == 4
    monkeypatch.setattr(gpu, "query", lambda index=0: None)
    assert commands._zoo_per_gpu(zoo.PAST_2GIB, 1) == 1  # memory unknown: one worker, as before
    monkeypatch.setattr(gpu, "query", lambda index=0: gpu.GpuInfo(143771 << 20, 90))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert commands._zoo_per_gpu(zoo.PAST_2GIB, 1) == 2  # 4 cores: 2 workers


class AcceleratorError(RuntimeError):
    """Stands in for torch's CUDA runtime error (its name is what the check reads)."""


@pytest.mark.parametrize("exc, rejected", [
    (lambda torch: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (lambda torch: AcceleratorError("CUDA error: out of memory"), True),
    (lambda torch: AcceleratorError("CUDA error: an illegal memory access was encountered"), False),
    (lambda torch: ValueError("out of memory"), False),
])
def test_a_gpu_out_of_memory_while_building_a_case_is_a_rejection_not_an_internal_error(monkeypatch, exc, rejected):
    """Three runs sharing an H100 ran one out of memory building a delta_prefill case: that target stopped,
    inconclusive, as if mambafuzz were broken.  Memory other processes hold is no bug in the case builder."""
    import torch

    from mambafuzz import contracts
    from mambafuzz.errors import InternalError
    from mambafuzz.judge.materialize import materialize

    case = _case_of_size(64)
    contract = contracts.of(case)

    def prepare(*args, **kwargs):
        raise exc(torch)

    monkeypatch.setattr(contract, "prepare", prepare)
    with pytest.raises(OverBudget if rejected else InternalError) as info:
        materialize(case, "meta")  # not the CPU: what a GPU run takes this path on
    if rejected:
        assert "the GPU ran out of memory building it" in str(info.value)

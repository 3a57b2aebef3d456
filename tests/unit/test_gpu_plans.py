"""What `smoke` and `zoo` plan on `--device cuda`, checked on a CPU (issue 44).

The device is pretended (``device.select`` answers cuda) and the run is caught
where the CLI hands it over (``runner.run_isolated``): the targets, their
order, the options, the time bound and the workers are what the README says.
Without a GPU, `smoke --device cuda` is one line and exit 2.
"""
import json

import pytest

import mambafuzz.cli as cli
from mambafuzz.control import device as device_mod
from mambafuzz.control import mps
from mambafuzz.run import runner

from common import mf, one_line_error


@pytest.fixture
def pretend_cuda(monkeypatch, tmp_path):
    """`--device cuda` selected without a GPU (the kernels stay interpreted); the session caught: its call."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(device_mod, "select", lambda device: "cuda" if device == "cuda" else device)
    monkeypatch.setattr(mps, "default_workers_per_gpu", lambda gpus: 8)  # an H200's 16 cores
    monkeypatch.setattr(cli.commands, "default_workers_per_gpu", lambda gpus: 8)  # the name the CLI holds
    calls = []

    def run_isolated(targets, opts, **kwargs):
        calls.append({"targets": [t.name for t in targets], "opts": opts, **kwargs})
        return []
    monkeypatch.setattr(runner, "run_isolated", run_isolated)
    return calls


def test_smoke_on_cuda_plans_the_correct_targets_amplified_within_the_cpu_bound(pretend_cuda):
    from mambafuzz.kernels import registry

    cli.main(["smoke", "--device", "cuda", "--json", "--database", "none"])
    (call,) = pretend_cuda
    smoke = [t.name for t in registry.all_targets() if t.kind in ("correct", "torch") and "cuda" in t.devices]
    assert sorted(call["targets"]) == sorted(smoke)
    kinds = [name.split(".")[0] for name in call["targets"]]
    assert kinds == sorted(kinds, key=lambda k: k != "torch")  # the quick torch paths first
    opts = call["opts"]
    assert (opts.profile.name, opts.reps, opts.mode, opts.device) == ("gpu-amp", 100, "compare", "cuda")
    assert opts.max_examples == 60 and opts.min_examples == 10
    assert call["deadline"].seconds == cli.SMOKE_TIME  # the same bound as on the CPU, split the same way
    assert call["workers_per_gpu"] == 8 and call["mps"] is True
    assert call["costs"] == {name: 1.0 for name in smoke}  # dealt out: each kernel compiled by one worker


def test_smoke_on_cpu_stays_in_process_with_the_cpu_profile(pretend_cuda, monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "run_in_process", lambda targets, opts, **kw: seen.append(opts) or [])
    cli.main(["smoke", "--device", "cpu", "--time", "1", "--database", "none"])
    assert pretend_cuda == [] and seen[0].profile.name == "cpu"


def test_zoo_on_cuda_runs_one_worker_unless_asked_and_deals_its_rows_to_k_workers_slowest_first(pretend_cuda):
    from mambafuzz.kernels import registry, zoo

    cli.main(["zoo", "--device", "cuda", "--profile", "gpu-amp", "--time", "150", "--json"])
    assert pretend_cuda.pop()["workers_per_gpu"] == 1  # 8 by default overran the memory shares on an H100
    cli.main(["zoo", "--device", "cuda", "--profile", "gpu-amp", "--time", "150", "--json", "--workers-per-gpu", "8"])
    (call,) = pretend_cuda
    rows = [t for t in registry.zoo_targets() if "cuda" in t.devices]
    assert call["targets"] == [t.name for t in zoo.order(rows, "cuda")]
    assert call["targets"][:2] == ["zoo.SSM-TOKSTRIDE", "zoo.DU-STEPS"]
    assert call["costs"] == {t.name: zoo.cost(t.zoo_id, "cuda") for t in rows}
    assert call["workers_per_gpu"] == 8 and call["deadline"].seconds == 150


def test_the_zoo_deals_to_k_from_the_gpus_memory_only_when_asked(pretend_cuda, monkeypatch):
    """The dealt zoo is not yet measured on a GPU: one worker by default, whatever the memory; `auto` asks."""
    from mambafuzz.control import gpu

    monkeypatch.setattr(gpu, "query", lambda i=0: gpu.GpuInfo(total_bytes=141 << 30, capability=90))
    cli.main(["zoo", "--device", "cuda", "--time", "60", "--json"])
    assert pretend_cuda.pop()["workers_per_gpu"] == 1
    cli.main(["zoo", "--device", "cuda", "--time", "60", "--json", "--workers-per-gpu", "auto"])
    assert pretend_cuda.pop()["workers_per_gpu"] > 1


def test_zoo_with_one_worker_a_gpu_still_orders_and_deals(pretend_cuda):
    cli.main(["zoo", "--device", "cuda", "--workers-per-gpu", "1", "--time", "60", "--json"])
    (call,) = pretend_cuda
    assert call["workers_per_gpu"] == 1 and call["costs"] and call["targets"][0] == "zoo.SSM-TOKSTRIDE"


def test_smoke_on_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    one_line_error(mf("smoke", "--device", "cuda", cwd=tmp_path), "cuda", "no CUDA GPU", code=2)
    body = json.loads(mf("smoke", "--device", "cuda", "--json", cwd=tmp_path).stdout)
    assert body["exit_code"] == 2 and body["command"] == "smoke" and "no CUDA GPU" in body["error"]
    assert body["targets"] == []

"""The zoo dealt out to K workers on one GPU under MPS, and the GPU smoke (issue 44; run with
MAMBAFUZZ_DEVICE=cuda pytest -m gpu).  Long runs are bench/gpu_zoo_runs.sh's."""
import json

import pytest

from common import mf

pytestmark = pytest.mark.gpu


def test_a_dealt_zoo_on_two_workers_catches_its_rows(tmp_path):
    proc = mf("zoo", "--device", "cuda", "--profile", "gpu-amp", "--workers-per-gpu", "2", "--time", "60",
              "--target", "zoo.TAIL-DROP", "--target", "zoo.BM-RIGHT", "--target", "zoo.SLOT-FLAT",
              "--database", "none", "--json", cwd=tmp_path, timeout=300)
    body = json.loads(proc.stdout)
    assert body["exit_code"] == proc.returncode == 0, proc.stderr[-3000:]
    assert all(t["caught"] for t in body["targets"]), [(t["target"], t["status"]) for t in body["targets"]]


def test_the_gpu_smoke_is_clean_within_its_bound(tmp_path):
    proc = mf("smoke", "--device", "cuda", "--database", "none", "--json", cwd=tmp_path, timeout=400)
    body = json.loads(proc.stdout)
    assert body["exit_code"] == proc.returncode == 0, [(t["target"], t["status"], t["why"]) for t in body["targets"]]
    assert max(t["seconds"] for t in body["targets"]) <= 45 + 15  # --time 45 s, the whole run's

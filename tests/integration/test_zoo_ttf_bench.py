"""bench/zoo_ttf.py end to end on the CPU (issue 44): one row, two seeds, its table and its JSON."""
import json
import subprocess
import sys

import pytest

from common import ROOT, mf_env


@pytest.mark.matrix  # two worker processes, about 15 s
def test_zoo_ttf_writes_each_rows_time_to_first_failure(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "zoo_ttf.py"), "--device", "cpu", "--seeds", "1", "2",
                           "--cap", "20", "--workers", "2", "--target", "zoo.TAIL-DROP",
                           "--out", str(tmp_path / "t.md"), "--json", str(tmp_path / "t.json")],
                          cwd=tmp_path, env=mf_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = json.loads((tmp_path / "t.json").read_text())
    jobs = body["jobs"]
    assert sorted(j["seed"] for j in jobs) == [1, 2] and body["declared"] == {"zoo.TAIL-DROP": ["mismatch"]}
    for j in jobs:
        assert j["kind"] == "mismatch" and 0 < j["ttf"] < 20 and j["examples_to_first"] >= 1, j
    table = (tmp_path / "t.md").read_text()
    assert "| zoo.TAIL-DROP | 2/2 |" in table

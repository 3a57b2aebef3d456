"""bench/zoo_runs_summary.py: issue 44's five GPU zoo runs in one JSON (median and worst time to first failure)."""
import importlib.util
import json

from common import ROOT

spec = importlib.util.spec_from_file_location("zoo_runs_summary", ROOT / "bench" / "zoo_runs_summary.py")
summary_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary_mod)


def _row(name, ttf=None, status="finding"):
    return {"target": name, "status": status, "caught": ttf is not None, "why": "" if ttf else "not run: x",
            "finding": {"seconds_to_first": ttf, "verdict": {"kind": "mismatch"}} if ttf is not None else None}


def test_each_runs_median_and_worst_and_the_rows_it_missed(tmp_path):
    (tmp_path / "zoo_gpu_amp150_seed1.json").write_text(json.dumps(
        {"exit_code": 0, "targets": [_row("a", 0.5), _row("b", 1.5), _row("c", 9.0)]}))
    (tmp_path / "zoo_gpu_amp150_seed2.json").write_text(json.dumps(
        {"exit_code": 3, "targets": [_row("a", 0.25), _row("b", 2.0), _row("c", None, "inconclusive")]}))
    (tmp_path / "zoo_gpu_amp150_seed3.json").write_text("{")  # cut off mid-document
    body = summary_mod.summary(str(tmp_path), 150, "abc")
    one, two, three = body["runs"]
    assert (one["caught"], one["median_ttf_s"], one["worst_ttf_s"]) == (3, 1.5, 9.0)
    assert (two["caught"], two["median_ttf_s"], two["worst_ttf_s"]) == (2, 1.12, 2.0)
    assert two["not_caught"] == [{"target": "c", "status": "inconclusive", "why": "not run: x", "kind": None}]
    assert "error" in three and three["seed"] == 3
    assert body["every_run_caught_every_row"] is False
    assert body["median_of_medians_s"] == 1.31 and body["worst_of_worsts_s"] == 9.0

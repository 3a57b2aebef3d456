"""`mambafuzz report`: pages from a real (small) zoo run, a synthetic GPU report, crash files and a session's
state, rendered in headless Chromium and checked for their sections and plots; bad inputs; --observe."""
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from common import mf, one_line_error

ZOO = ("zoo.BM-NOGUARD", "zoo.BM-RIGHT", "zoo.SLOT-CHAIN")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium (Debian package 'chromium') is not "
                                                              "installed; .ci/run installs it")
needs_plotly = pytest.mark.skipif(not __import__("importlib").util.find_spec("plotly"),
                                  reason="plotly is not installed (pip install 'mambafuzz[report]')")


def chromium(page: Path, tmp_path: Path, *args: str) -> str:
    """Chromium, headless, on `page` after its scripts ran (virtual time); its stdout."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=20000", *args, page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def dom_of(page: Path, tmp_path: Path) -> str:
    return chromium(page, tmp_path, "--dump-dom")


def screenshot(page: Path, tmp_path: Path, name: str, height: int = 2400) -> Path:
    shot = tmp_path / name
    chromium(page, tmp_path, f"--window-size=1280,{height}", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    return shot


def section(dom: str, name: str) -> str:
    """The <section id=name> (or <header>) element's markup in the dumped DOM."""
    m = re.search(rf'<(section|header) id="{name}"[^>]*>(.*?)</\1>', dom, flags=re.S)
    assert m, f"no section {name!r} in the page"
    return m.group(2)


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    """A seeded zoo run over three variants (about 20 s here): its JSON report and crash folder."""
    work = tmp_path_factory.mktemp("zoo")
    args = ["zoo", "--device", "cpu", "--seed", "1", "--json", "--database", "none",
            "--crashes-dir", work / "crashes"]
    for t in ZOO:
        args += ["--target", t]
    proc = mf(*args, cwd=work, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (work / "z.json").write_text(proc.stdout)
    return work, json.loads(proc.stdout)


@pytest.mark.matrix
def test_the_json_report_carries_coverage_and_examples_over_time(zoo_run):
    _, body = zoo_run
    assert [t["target"] for t in body["targets"]] == list(ZOO)
    for t in body["targets"]:
        cov = t["coverage"]
        assert cov["examples"] == t["examples"] > 0
        assert sum(cov["features"]["verdict"].values()) == t["examples"]
        assert set(cov["features"]["overlap"]) <= {"none", "left", "right", "same"}
        assert "overlap" in cov["expected"]
        assert t["race_map"] is None                       # a CPU run without perturbations bins nothing
        assert t["timeline"][-1][1] == t["examples"]
        assert [p[0] for p in t["timeline"]] == sorted(p[0] for p in t["timeline"])


@needs_chromium
@needs_plotly
@pytest.mark.matrix
def test_the_zoo_page_shows_every_row_its_shrunk_case_and_its_plots_in_chromium(zoo_run, tmp_path):
    work, body = zoo_run
    page = tmp_path / "z.html"
    proc = mf("report", work / "z.json", "-o", page, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {page}" in proc.stdout
    text = page.read_text()
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", text)   # nothing is fetched at view time
    dom = dom_of(page, tmp_path)
    assert "mambafuzz report: bug zoo" in section(dom, "summary")
    targets = section(dom, "targets")
    rows = re.findall(r"<tr>(.*?)</tr>", targets.split("<tbody>")[1], flags=re.S)
    assert len(rows) == len(ZOO)
    for row, t in zip(rows, body["targets"]):
        assert t["target"] in row and ">caught<" in row
        assert html.escape(t["finding"]["case_summary"], quote=False) in row
    findings = section(dom, "findings")
    for t in body["targets"]:
        f = t["finding"]
        article = findings.split(f'id="finding-{t["target"]}"')[1].split("</article>")[0]
        assert html.escape(f["case_summary"], quote=False) in article
        assert "mambafuzz replay " in article and f["case_hash"] in article
        evidence = "witness" if f["kind"] in ("race", "oob") else "first differing bytes"
        assert evidence in article, (t["target"], f["kind"])
    assert "zoo.BM-NOGUARD" in section(dom, "coverage")
    # plotly ran: a bar chart of outcomes, the coverage heatmap, the throughput lines
    assert dom.count('class="plot-container plotly"') == 3
    assert 'class="trace bars"' in section(dom, "targets")
    assert 'class="hm"' in section(dom, "coverage")
    assert dom.count('class="trace scatter') == len(ZOO)
    assert 'id="race-map"' not in dom                                  # CPU, nothing binned
    screenshot(page, tmp_path, "zoo-report.png")


def synthetic_gpu_report() -> dict:
    """A GPU session as the JSON report would hold it: two clean targets with race maps."""
    def cells(failing):
        out = []
        for warps, delay in (("default", "0"), ("8", "0"), ("8", "500"), ("8", "2000")):
            for shift in ("1", "2-3", "8-15"):
                for size in ("8-63", "512-4095"):
                    failed = failing(shift, size, warps, delay)
                    out.append([shift, size, warps, delay, 100, failed])
        return out
    targets = []
    for name, contract, failing in (
            ("zoo.BM-NOGUARD", "batch_memcpy", lambda s, z, w, d: 3 if (s, w, d) == ("1", "8", "2000") else 0),
            ("zoo.SD-SPAN", "state_copy", lambda s, z, w, d: 7 if (z, w) == ("512-4095", "8") else 0)):
        targets.append({
            "target": name, "contract": contract, "status": "clean", "stop": "time", "why": None, "detail": None,
            "examples": 24, "reps": 2400, "failed_reps": 0, "seconds": 30.0, "min_examples": 10,
            "interrupted": False, "written": False, "rejected": [], "finding": None,
            "coverage": {"examples": 24, "features": {"overlap": {"left": 20, "none": 4},
                                                      "num_warps": {"default": 6, "8": 18}},
                         "expected": {"overlap": ["none", "left", "same"]}, "never_drawn": {"overlap": ["same"]}},
            "race_map": {"axes": ["shift", "size", "num_warps", "delay_ns"], "cells": cells(failing)},
            "timeline": [[0.5, 1], [10.0, 8], [20.0, 16], [30.0, 24]]})
    return {"schema": 1, "command": "fuzz", "device": "cuda", "mode": "compare", "interrupted": False,
            "exit_code": 0, "targets": targets}


@needs_chromium
@needs_plotly
def test_a_gpu_report_draws_a_race_map_per_target(tmp_path):
    src = tmp_path / "gpu.json"
    src.write_text(json.dumps(synthetic_gpu_report()))
    page = tmp_path / "gpu.html"
    proc = mf("report", src, "-o", page, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    dom = dom_of(page, tmp_path)
    race = section(dom, "race-map")
    assert race.count('class="plot-container plotly"') == 2          # one figure per target
    assert "Race map: zoo.BM-NOGUARD" in race and "Race map: zoo.SD-SPAN" in race
    # a grid of 2 warp counts x 3 delays; only (default, 0), (8, 0), (8, 500), (8, 2000) hold data and draw
    assert race.count('class="hm"') == 2 * 4
    assert "8 warps, delay 2000 ns" in race and "default warps, delay 0 ns" in race
    assert ">3/100<" in race and ">7/100<" in race                     # the failing cells' k/N
    assert "never" in section(dom, "coverage") and "same" in section(dom, "coverage")
    assert 'class="trace scatter' in section(dom, "throughput")
    screenshot(page, tmp_path, "race-map.png", height=3000)


@needs_plotly
@pytest.mark.matrix
def test_crash_folders_and_session_state_make_pages_too(zoo_run, tmp_path):
    work, body = zoo_run
    page = tmp_path / "crashes.html"
    proc = mf("report", work / "crashes", "-o", page, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and f"({len(ZOO)} row(s), {len(ZOO)} finding(s))" in proc.stdout
    text = page.read_text()
    for t in body["targets"]:
        assert html.escape(t["finding"]["case_summary"], quote=False) in text
    state = tmp_path / "sessions"
    state.mkdir()
    (state / "abc.json").write_text(json.dumps({"key": "abc", "done": list(ZOO),
                                                 "reports": {t["target"]: t for t in body["targets"]}}))
    proc = mf("report", state, "-o", tmp_path / "session.html", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "mambafuzz report: session" in (tmp_path / "session.html").read_text()


@pytest.mark.parametrize("content, needle", [
    (None, "no such file or folder"),
    ("{not json", "not JSON (line 1"),
    ("[1, 2]", "not a mambafuzz report"),
    ('{"targets": []}', "no integer 'schema' field"),
    ('{"schema": 9, "command": "zoo", "targets": []}', "report schema 9"),
    ('{"schema": 1, "command": "dance", "targets": []}', "field 'command' must be one of"),
    ('{"schema": 1, "command": "zoo", "targets": {}}', "field 'targets' must be a list"),
    ('{"schema": 1, "command": "zoo", "targets": [{"target": "t", "examples": "many"}]}',
     "target t: field 'examples' must be an integer"),
    ('{"schema": 1, "command": "zoo", "targets": [{"target": "t", "finding": {"target": "t", "contract": '
     '"batch_memcpy", "device": "cpu", "mode": "race", "case": {"contract": "batch_memcpy"}, "verdict": {}}}]}',
     "target t: the finding's case is not valid"),
    ('{"schema": 1, "command": "zoo", "targets": [{"target": "t", "coverage": {"features": [1]}}]}',
     "target t: 'coverage', 'race_map' or 'timeline' is malformed"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, needle):
    src = tmp_path / "in.json"
    if content is not None:
        src.write_text(content)
    proc = mf("report", src, "-o", tmp_path / "out.html", cwd=tmp_path)
    one_line_error(proc, str(src), needle)
    assert not (tmp_path / "out.html").exists()


def test_an_unwritable_output_and_a_missing_plotly_are_one_line_too(tmp_path):
    src = tmp_path / "gpu.json"
    src.write_text(json.dumps(synthetic_gpu_report()))
    (tmp_path / "file").write_text("")
    if __import__("importlib").util.find_spec("plotly"):
        one_line_error(mf("report", src, "-o", tmp_path / "file" / "x.html", cwd=tmp_path), "cannot write")
    fake = tmp_path / "fake" / "plotly"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no plotly here')\n")
    from common import ROOT
    proc = mf("report", src, "-o", tmp_path / "x.html", cwd=tmp_path,
              pythonpath=f"{tmp_path / 'fake'}:{ROOT}")
    one_line_error(proc, "pip install 'mambafuzz[report]'")


@pytest.mark.matrix
def test_fuzz_observe_writes_tyche_records_and_the_summary_prints_coverage(tmp_path):
    obs = tmp_path / "observed"
    proc = mf("fuzz", "--target", "triton.batch_memcpy", "--max-examples", "12", "--min-examples", "5",
              "--seed", "1", "--database", "none", "--crashes-dir", tmp_path / "crashes", "--observe", obs,
              cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index(next(x for x in lines if x.startswith("coverage of triton.batch_memcpy (")))
    block = lines[start:]
    assert any(x.startswith("  overlap: ") for x in block) and any(x.startswith("  verdict: pass ") for x in block)
    assert all(len(x) <= 80 for x in block), [x for x in block if len(x) > 80]
    (records,) = obs.glob("*_testcases.jsonl")                         # written by the worker process
    cases = [json.loads(x) for x in records.read_text().splitlines()]
    passed = [c for c in cases if c["status"] == "passed"]
    assert len(passed) >= 5
    assert {c["property"] for c in cases} == {"triton.batch_memcpy"}
    assert all({"overlap", "shift", "size", "verdict"} <= set(c["features"]) for c in passed)
    assert sys.executable  # the records are plain JSON lines, one object each (Tyche's format)


def many_targets_report(n: int = 17) -> dict:
    """A CPU fuzz report of `n` clean targets, each with examples over time at its own rate."""
    targets = []
    for i in range(n):
        timeline = [[round(0.5 + j * (0.6 + i / 20), 3), (j + 1) * (3 + i)] for j in range(12)]
        targets.append({"target": f"zoo.TARGET-{i:02d}", "contract": "batch_memcpy", "status": "clean",
                        "stop": "time", "why": None, "examples": timeline[-1][1], "reps": timeline[-1][1],
                        "failed_reps": 0, "seconds": timeline[-1][0], "finding": None, "timeline": timeline})
    return {"schema": 1, "command": "fuzz", "device": "cpu", "mode": "race", "interrupted": False,
            "exit_code": 0, "targets": targets}


@needs_chromium
@needs_plotly
@pytest.mark.matrix
def test_the_throughput_of_17_targets_is_a_chart_each_named_with_no_legend_to_cut_off(tmp_path):
    src = tmp_path / "many.json"
    src.write_text(json.dumps(many_targets_report(17)))
    page = tmp_path / "many.html"
    assert mf("report", src, "-o", page, cwd=tmp_path).returncode == 0
    throughput = section(dom_of(page, tmp_path), "throughput")
    assert throughput.count('class="trace scatter') == 17
    titles = re.findall(r'class="annotation-text"[^>]*data-unformatted="([^"]*)"', throughput)
    assert sorted(t.split(" (")[0] for t in titles) == [f"zoo.TARGET-{i:02d}" for i in range(17)]
    assert "zoo.TARGET-00 (5.07/s)" in titles                          # its mean rate: 36 examples in 7.1 s
    assert 'class="legend"' not in throughput and 'class="scrollbox"' not in throughput
    height = int(re.search(r'<svg class="main-svg"[^>]* height="(\d+)"', throughput)[1])
    assert height >= 6 * 170                                           # 6 rows of 3, none squeezed
    screenshot(page, tmp_path, "throughput-17.png", height=5200)

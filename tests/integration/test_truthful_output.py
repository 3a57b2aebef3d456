"""What fuzz, replay and report say about a finding, as a user meets it (piped at 80 columns, --json, the
crash file, the page): one shrink count everywhere; a recorded hazard shown as a deterministic verdict, not
as k/N; a case whose shrinking was cut short says it may not be minimal."""
import json
import textwrap

import pytest

from common import mf

RACE = "zoo.BM-NOGUARD"  # an intra-program race the CPU recorder sees (no wrong byte on the interpreter)

# A user target that shrinking cannot improve: it drops the last byte of a row only on the first case that
# moves bytes (the same geometry and the same fill), so every smaller case passes.  From that case on it
# counts its calls and, as STUCK_DO says, sleeps, stops the run (SIGINT to itself) or dies (os._exit).
STUCK = '''
import hashlib, os, signal, time

FIRST = None
CALLS = [0]


def act(n):
    what = os.environ.get("STUCK_DO", "")
    if what == "sleep" and n == 3:
        time.sleep(1.0)
    if what == "interrupt" and n == 4:
        os.kill(os.getpid(), signal.SIGINT)
    if what.startswith("die:"):  # die:SLEEP_AT:EXIT_AT
        sleep_at, exit_at = map(int, what.split(":")[1:])
        if n == sleep_at:
            time.sleep(2.5)
        if n == exit_at:
            os._exit(7)


def stuck(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """A memmove, wrong on one case only."""
    global FIRST
    base = arena.data_ptr()
    rows = [(s - base, d - base, n) for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist())]
    key = (tuple(rows), hashlib.sha1(arena.numpy().tobytes()).hexdigest())
    if FIRST is None and any(n for _, _, n in rows):
        FIRST = key
    if FIRST is not None:
        CALLS[0] += 1
        act(CALLS[0])
    for s, d, n in rows:
        arena[d:d + n] = arena[s:s + n].clone()
        if key == FIRST and n:
            arena[d + n - 1] = int(arena[d + n - 1]) ^ 0xFF
'''


def crash_files(folder):
    files = sorted(p for p in folder.rglob("*.json") if not p.name.startswith("."))
    return [json.loads(p.read_text()) for p in files]


def fits(text: str) -> None:
    """Every line of the tables fits 80 columns (the FINDING and replay lines are never wrapped)."""
    for line in text.splitlines():
        if line[:1] in "┏┃┡│└":
            assert len(line) <= 80, line


@pytest.fixture(scope="module")
def race_run(tmp_path_factory):
    """A race finding as `fuzz --json` reports it (in a worker, as fuzz runs by default) and its file."""
    work = tmp_path_factory.mktemp("race")
    proc = mf("fuzz", "--target", RACE, "--seed", "1", "--max-examples", "50", "--database", "none",
              "--crashes-dir", "X", "--json", cwd=work, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    (work / "r.json").write_text(proc.stdout)
    return work, json.loads(proc.stdout)["targets"][0]


@pytest.mark.matrix
def test_the_shrink_count_is_one_number_in_the_json_the_crash_file_and_the_page(race_run, tmp_path):
    work, target = race_run
    finding = target["finding"]
    (body,) = crash_files(work / "X")
    assert finding["shrink_examples"] > 0
    assert body["shrink_examples"] == finding["shrink_examples"]
    assert body["minimal"] is finding["minimal"] is True and "not_minimal" not in body
    page = tmp_path / "p.html"
    proc = mf("report", work / "X", "-o", page, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert f"{finding['shrink_examples']} shrink examples" in page.read_text()


@pytest.mark.matrix
def test_a_race_is_a_deterministic_verdict_in_the_table_json_crash_file_and_page(race_run, tmp_path):
    work, target = race_run
    assert target["finding"]["kind"] == "race" and target["finding"]["deterministic"] is True
    (body,) = crash_files(work / "X")
    assert body["deterministic"] is True
    proc = mf("fuzz", "--target", RACE, "--seed", "1", "--max-examples", "50", "--database", "none",
              "--crashes-dir", tmp_path / "Y", "--no-isolate", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    fits(proc.stdout)
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith(f"│ {RACE} ")]
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[1] == "finding" and cells[3] == "race", row          # k/N: the kind, not "0/1"
    assert f"FINDING {RACE} (race, deterministic): intra-program hazard" in proc.stdout
    assert "  shrunk in " in proc.stdout and "example(s), to the end" in proc.stdout
    page = tmp_path / "p.html"
    assert mf("report", work / "r.json", "-o", page, cwd=work).returncode == 0
    text = page.read_text()
    assert "race (deterministic)" in text and "race at mambafuzz/kernels/copy.py:" in text
    assert "repetitions failed" not in text


@pytest.mark.matrix
def test_replay_of_a_race_says_race_at_its_line_not_k_of_n(race_run):
    work, _ = race_run
    proc = mf("replay", "X", cwd=work)
    assert proc.returncode == 1, proc.stderr
    fits(proc.stdout)
    assert "0/1" not in proc.stdout and "│ race " in proc.stdout
    body = json.loads(mf("replay", "X", "--json", cwd=work).stdout)
    (row,) = body["files"]
    assert row["status"] == "still failing" and row["deterministic"] is True
    assert row["line"].startswith("still failing: race at mambafuzz/kernels/copy.py:")
    assert row["line"].endswith("(load) (deterministic)")
    fixed = mf("replay", "X", "--against", "triton.batch_memcpy", cwd=work)
    assert fixed.returncode == 0, fixed.stderr
    fits(fixed.stdout)
    assert "fixed" in fixed.stdout and "clean" in fixed.stdout
    assert "0/1" not in fixed.stdout and "rate <" not in fixed.stdout
    (row,) = json.loads(mf("replay", "X", "--against", "triton.batch_memcpy", "--json", cwd=work).stdout)["files"]
    assert row["line"] == "fixed: no hazard and no wrong byte (the race recorder is deterministic)"


def stuck_run(tmp_path, what, *args):
    (tmp_path / "stuckk.py").write_text(textwrap.dedent(STUCK))
    return mf("fuzz", "--target", "stuckk:stuck", "--contract", "batch_memcpy", "--seed", "3",
              "--max-examples", "40", "--database", "none", "--crashes-dir", "C", "--no-isolate", *args,
              cwd=tmp_path, env_extra={"STUCK_DO": what}, timeout=300)


@pytest.mark.matrix
def test_a_shrink_cut_by_its_budget_says_maybe_not_minimal_everywhere(tmp_path):
    proc = stuck_run(tmp_path, "sleep", "--shrink-time", "0.5", "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    finding = json.loads(proc.stdout)["targets"][0]["finding"]
    why = "the shrink time (0.5 s) ran out"
    assert finding["minimal"] is False and finding["not_minimal"] == why
    (body,) = crash_files(tmp_path / "C")
    assert body["minimal"] is False and body["not_minimal"] == why
    assert body["shrink_examples"] == finding["shrink_examples"] > 0
    (tmp_path / "r.json").write_text(proc.stdout)
    page = tmp_path / "p.html"
    assert mf("report", tmp_path / "r.json", "-o", page, cwd=tmp_path).returncode == 0
    assert f"(may not be minimal: {why})" in page.read_text()          # in the targets table
    assert f"<b>may not be minimal</b>: {why}" in page.read_text()    # and on the finding


@pytest.mark.matrix
def test_an_interrupted_shrink_says_maybe_not_minimal_in_the_table_and_the_file(tmp_path):
    proc = stuck_run(tmp_path, "interrupt")
    assert proc.returncode == 1, proc.stderr[-3000:]
    fits(proc.stdout)
    lines = proc.stdout.splitlines()
    case = lines.index(next(x for x in lines if x.startswith("  case: ")))
    assert lines[case + 1].startswith("  may not be minimal: shrinking was interrupted ("), lines[case + 1]
    assert len(lines[case + 1]) <= 80
    assert "interrupted: every failure seen so far is saved" in proc.stdout
    (body,) = crash_files(tmp_path / "C")
    assert body["minimal"] is False and body["not_minimal"] == "shrinking was interrupted"


@pytest.mark.matrix
@pytest.mark.parametrize("when", ["die:3:6", "die:12:13"])
def test_a_file_left_by_a_killed_shrink_says_it_was_still_shrinking_with_its_count(tmp_path, when):
    """The process dies mid-shrink: the file was rewritten as the shrink went on (its count moved past the
    first write's 0) and says the case may not be minimal.  With seed 3, calls 2-11 are the first case-level
    reduction and 12-13 Hypothesis's shrinker: the two places that count shrink examples."""
    proc = stuck_run(tmp_path, when)
    assert proc.returncode == 7, proc.stdout + proc.stderr[-3000:]
    (body,) = crash_files(tmp_path / "C")
    assert body["minimal"] is False
    assert body["not_minimal"] == "still shrinking when written"
    assert body["shrink_examples"] >= 2

"""What a user reads, as a CI log shows it (piped, COLUMNS=80): a long ``module:function`` name whole in
the table, a finding's first failure apart from its shrinking in the table, the progress lines and
the JSON report alike; smoke's coverage behind --coverage; a corrupt crash file in one line; what a
resumed session takes over."""
import json
import re
import textwrap

from common import mf

NAME = "myconv_kernels_longname:my_conv_update_nopadstore_with_a_long_name"

WRONG = textwrap.dedent('''
    from mambafuzz import adapters

    def my_conv_update_nopadstore_with_a_long_name(src_ptrs, dst_ptrs, sizes, *, arena):
        """Wrong: every row one byte short."""
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            if n > 1:
                adapters.bytes_at(arena, d, n - 1).copy_(adapters.bytes_at(arena, s, n - 1).clone())
''')


def fuzz(tmp_path, *more):
    (tmp_path / "myconv_kernels_longname.py").write_text(WRONG)
    return mf("fuzz", "--target", NAME, "--contract", "batch_memcpy", "--seed", "1", "--database", "none",
              "--max-examples", "30", "--no-isolate", "--crashes-dir", "crashes", *more, cwd=tmp_path)


def table_rows(stdout: str) -> list[list[str]]:
    """The table's rows, each a list of its cells (a cell's lines joined)."""
    rows = []
    for line in stdout.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[1] or not rows:
            rows.append(cells)
        else:
            rows[-1] = [a + b for a, b in zip(rows[-1], cells)]
    return rows


def test_a_long_user_name_is_whole_and_a_finding_says_when_it_first_failed(tmp_path):
    proc = fuzz(tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table), max(table, key=len)
    (row,) = table_rows(proc.stdout)
    assert row[0] == NAME  # its lines joined: broken after ':' or '_' only
    for line in table:
        if line.startswith("│") and (piece := line.strip("│").split("│")[0].strip()) and piece != NAME:
            assert piece[-1] in ":._-/" or NAME.endswith(piece), piece
    first, shrink = map(int, row[2].split("+"))
    first_s, shrink_s = map(float, row[4].rstrip("s").split("+"))
    assert row[1] == "finding" and first >= 1 and shrink >= 1, row
    assert "a finding's examples and time: to the first failure + shrinking it" in lines
    assert any(line.startswith(f"FINDING {NAME} (mismatch): ") for line in lines)
    assert f"  shrunk in {shrink} example(s)" in proc.stdout  # the finding's own line: the same count
    # the progress line on stderr is made of the same numbers
    (progress,) = [line for line in proc.stderr.splitlines() if line.startswith(NAME)]
    assert progress.startswith(f"{NAME}: finding, {row[2]} examples, {row[4]} (to the first failure + "
                               "shrinking), k/N "), progress

    body = json.loads(_json_run(tmp_path))
    (target,) = body["targets"]
    f = target["finding"]
    assert target["first_failure_example"] == f["examples_to_first"] >= 1
    assert target["first_failure_s"] == f["seconds_to_first"]
    assert abs(target["shrink_s"] - (target["seconds"] - target["first_failure_s"])) < 0.002
    assert first_s >= 0 and shrink_s >= 0


def _json_run(tmp_path) -> str:
    work = tmp_path / "json"
    work.mkdir()
    proc = fuzz(work, "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    return proc.stdout


def test_smoke_prints_one_coverage_line_unless_asked(tmp_path):
    proc = mf("smoke", "--time", "4", "--max-examples", "2", "--min-examples", "1", "--database", "none",
              cwd=tmp_path)
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("coverage of ", "WARNING ", "  overlap: "))], lines
    (summary,) = [line for line in lines if line.startswith("coverage: ")]
    assert re.fullmatch(r"coverage: (every expected bucket drawn in \d+ targets \(--coverage lists the counts\)"
                        r"|\d+ bucket\(s\) never drawn, in \d+ of \d+ targets \(--coverage lists them\))", summary)
    assert len(summary) <= 80
    # the table once, and each progress line agrees with its row
    assert proc.stdout.count("mambafuzz smoke (cpu, race)") == 1
    rows = {r[0]: r for r in table_rows(proc.stdout)}
    last = {}  # a target's last progress line (a second turn prints again, with the counts so far)
    for line in proc.stderr.splitlines():
        name, _, rest = line.partition(": ")
        name = name.removesuffix(" (another turn)")
        if name in rows:
            last[name] = rest
    assert last
    for name, rest in last.items():
        assert rest.startswith(f"{rows[name][1]}, {rows[name][2]} examples, {rows[name][4]}, k/N {rows[name][3]}")


def test_a_corrupt_crash_file_is_one_line_exit_2_and_no_table(tmp_path):
    (tmp_path / "bad.json").write_text('{"schema": 1, "contract": "batch_memcpy",\n "case": {\n')
    proc = mf("replay", "bad.json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    (line,) = [x for x in proc.stderr.splitlines() if x.strip()]
    full = "bad.json: not valid JSON: Expecting property name enclosed in double quotes at line 3, column 1 (char 53)"
    assert line == f"mambafuzz: error: {full}", line
    body = json.loads(mf("replay", "bad.json", "--json", cwd=tmp_path).stdout)
    assert body["exit_code"] == 2 and body["error"] == full
    assert [f["reason"] for f in body["files"]] == [full]


def test_a_resumed_session_says_what_it_takes_over(tmp_path):
    from mambafuzz.run.session import Session, SessionOptions

    entries = [{"spec": n, "name": n, "contract": "batch_memcpy", "overlap": "full"} for n in ("m:a", "m:b", "m:c")]
    sopts = SessionOptions(device="cpu", options={"max_examples": 60}, state_dir=tmp_path)
    assert Session(entries, sopts).resume_line() is None  # nothing saved: a fresh session says nothing
    first = Session(entries, sopts)
    first.state_path.write_text(json.dumps({"key": first.key, "done": ["m:a"], "reports": {
        "m:a": {"target": "m:a", "contract": "batch_memcpy", "examples": 60, "stop": "max-examples"},
        "m:b": {"target": "m:b", "contract": "batch_memcpy", "examples": 7, "stop": "interrupted"}}}))
    line = Session(entries, sopts).resume_line()
    assert line == (f"resuming session {first.key} ({first.state_path}): 1 of 3 target(s) done (m:a: 60 "
                    "example(s), kept); to run: m:b, m:c; --fresh starts over")
    # stopped inside its first target: nothing done, still a resumed session, and it says so
    first.state_path.write_text(json.dumps({"key": first.key, "done": [], "reports": {
        "m:a": {"target": "m:a", "contract": "batch_memcpy", "examples": 7, "stop": "interrupted"}}}))
    assert Session(entries, sopts).resume_line() == (
        f"resuming session {first.key} ({first.state_path}): 0 of 3 target(s) done; to run: m:a, m:b, m:c; "
        "--fresh starts over")
    assert Session(entries, SessionOptions(device="cpu", options={"max_examples": 60}, state_dir=tmp_path,
                                           fresh=True)).resume_line() is None


def test_the_zoo_tables_first_failure_is_the_progress_lines(tmp_path):
    proc = mf("zoo", "--target", "zoo.CP-NOINIT", "--seed", "1", "--database", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = table_rows(proc.stdout)
    seconds, example = re.fullmatch(r"(\d+\.\d)s, ex (\d+)", row[3]).groups()
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("zoo.CP-NOINIT: ")]
    assert line.startswith(f"zoo.CP-NOINIT: finding, {example}+"), line
    assert f" examples, {seconds}+" in line, (row, line)

"""The `mambafuzz` command end to end, in subprocesses as a user runs it."""
import json
import textwrap

import pytest

from common import mf as _mf, one_line_error


def mf(*args, cwd, env_extra=None, timeout=600):
    return _mf(*args, cwd=cwd, env_extra=env_extra, timeout=timeout, columns=200)


def test_list_json(tmp_path):
    proc = mf("list", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    targets = {t["name"]: t for t in json.loads(proc.stdout)}
    assert targets["triton.batch_memcpy"]["kind"] == "correct"
    zoo = [t for t in targets.values() if t["kind"] == "zoo"]
    from mambafuzz.kernels import registry  # every row the zoo declares, listed once, with its bug
    assert sorted(t["name"] for t in zoo) == sorted(f"zoo.{e.id}" for e in registry.ZOO) and all(t["bug"] for t in zoo)


@pytest.mark.parametrize("args, needles", [
    (["fuzz", "--target", "triton.nope"], ["unknown target", "triton.nope"]),
    # these start torch in the child, as the first does: the matrix tier runs them
    pytest.param(["fuzz", "--target", "nosuchmodule:fn", "--contract", "batch_memcpy"],
                 ["cannot import", "nosuchmodule"], marks=pytest.mark.matrix),
    pytest.param(["fuzz", "--target", "json:dumps"], ["--contract"], marks=pytest.mark.matrix),
    (["fuzz", "--target", "zoo.*", "--device", "cpu", "--mode", "race", "--reps", "0"], ["positive"]),
    pytest.param(["fuzz", "--target", "triton.*", "--device", "cuda"], ["cuda"], marks=pytest.mark.matrix),
    (["replay", "missing.json"], ["missing.json"]),
    pytest.param(["fuzz", "--target", "xyz*"], ["matches nothing"], marks=pytest.mark.matrix),
])
def test_bad_usage_is_one_line_and_exit_2(tmp_path, args, needles):
    one_line_error(mf(*args, cwd=tmp_path), *needles)


@pytest.mark.matrix
def test_unwritable_crashes_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    one_line_error(mf("smoke", "--crashes-dir", str(blocker / "sub"), cwd=tmp_path), "not writable")


def test_replay_bad_files_exit_2(tmp_path):
    (tmp_path / "newer.json").write_text(json.dumps({"schema": 99}))
    proc = mf("replay", "newer.json", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "crash schema 99" in json.loads(proc.stdout)["files"][0]["reason"]


@pytest.mark.matrix
def test_zoo_variant_found_saved_replayed_and_fixed(tmp_path):
    proc = mf("zoo", "--target", "zoo.TAIL-DROP", "--seed", "1", "--json", "--crashes-dir", "crashes",
              cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["targets"][0]
    assert row["caught"] and row["finding"]["kind"] == "mismatch"
    path = tmp_path / row["finding"]["path"]
    body = json.loads(path.read_text())
    assert body["case"]["copies"] and len(body["case"]["copies"]) == 1
    replay = mf("replay", "crashes", "--json", cwd=tmp_path)
    assert replay.returncode == 1 and json.loads(replay.stdout)["files"][0]["status"] == "still failing"
    fixed = mf("replay", str(path), "--against", "triton.batch_memcpy", "--json", cwd=tmp_path)
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["files"][0]["status"] == "fixed"
    # the recorded replay command works as written
    cmd = body["replay"].split()
    assert cmd[:2] == ["mambafuzz", "replay"]
    again = mf(*cmd[1:], cwd=tmp_path)
    assert again.returncode == 1 and "still failing" in again.stdout


@pytest.mark.matrix
def test_user_kernel_adapter(tmp_path):
    (tmp_path / "userk.py").write_text(textwrap.dedent('''
        def forward_copy(src_ptrs, dst_ptrs, sizes, *, arena):
            """Byte-wise forward copy: a left-overlap-only kernel."""
            base = arena.data_ptr()
            for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
                for i in range(n):
                    arena[d - base + i] = arena[s - base + i]
    '''))
    ok = mf("fuzz", "--target", "userk:forward_copy", "--contract", "batch_memcpy", "--overlap", "left",
            "--max-examples", "30", "--seed", "2", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    bad = mf("fuzz", "--target", "userk:forward_copy", "--contract", "batch_memcpy", "--overlap", "full",
             "--max-examples", "60", "--seed", "2", "--json", cwd=tmp_path)
    assert bad.returncode == 1, bad.stderr
    finding = json.loads(bad.stdout)["targets"][0]["finding"]
    (src, dst, n), = finding["case"]["copies"]
    assert src < dst < src + n  # a right overlap, shrunk to one row


@pytest.mark.matrix
def test_state_copy_user_adapter_gets_the_documented_arguments(tmp_path):
    (tmp_path / "userstate.py").write_text(textwrap.dedent('''
        from mambafuzz.kernels import registry
        SEEN = []
        def state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles, arena):
            """Delegates to the torch path after checking the documented argument shapes."""
            assert meta.shape[1] == 8 and block_tables.dim() == 3
            assert src_cols.shape == dst_cols.shape == biases.shape
            registry.get("torch.state_copy").fn(meta, block_tables, src_cols, dst_cols, biases,
                                                num_tiles=num_tiles, arena=arena)
    '''))
    proc = mf("fuzz", "--target", "userstate:state_copy", "--contract", "state_copy", "--max-examples", "25",
              "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["targets"][0]["examples"] == 25


@pytest.mark.matrix
def test_smoke_passes_on_the_correct_kernels(tmp_path):
    proc = mf("smoke", "--max-examples", "15", "--seed", "4", "--time", "600", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["mode"] == "race"
    names = {t["target"] for t in body["targets"]}
    assert {"triton.batch_memcpy", "triton.state_copy", "triton.postprocess"} <= names
    assert all(t["status"] == "clean" and t["examples"] == 15 for t in body["targets"])


def test_selfcheck(tmp_path):
    proc = mf("selfcheck", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("ok") == 4


@pytest.mark.matrix
def test_json_stdout_is_one_document_whatever_the_target_prints(tmp_path):
    """A user's adapter that prints (Python print and a raw write to fd 1) cannot break --json."""
    (tmp_path / "noisy_mod.py").write_text(
        "import os\n"
        "def copy(src_ptrs, dst_ptrs, sizes, *, arena):\n"
        "    print('hello from the adapter')\n"
        "    os.write(1, b'raw bytes on fd 1\\n')\n"
        "    base = arena.data_ptr()\n"
        "    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):\n"
        "        arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()\n")
    for isolate in ("--no-isolate", "--isolate"):
        r = mf("fuzz", "--target", "noisy_mod:copy", "--contract", "batch_memcpy", "--max-examples", "12",
               "--seed", "1", "--database", "none", "--crashes-dir", str(tmp_path / "c"), "--json", isolate,
               cwd=tmp_path)
        body = json.loads(r.stdout)  # the whole of stdout is the document
        assert body["exit_code"] == 0 and body["targets"][0]["status"] == "clean", r.stderr[-2000:]
        assert "hello from the adapter" in r.stderr and "raw bytes on fd 1" in r.stderr


@pytest.mark.matrix
def test_a_share_too_short_for_a_verdict_says_so_within_80_columns(tmp_path):
    """--time that leaves a (slow) target a few examples: one NOTE names it, and the cure."""
    (tmp_path / "slowk.py").write_text(textwrap.dedent('''
        import time

        def slow_copy(src_ptrs, dst_ptrs, sizes, *, arena):
            """A correct memmove that takes 0.4 s a call."""
            time.sleep(0.4)
            base = arena.data_ptr()
            for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
                arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()
    '''))
    proc = _mf("fuzz", "--target", "slowk:slow_copy", "--contract", "batch_memcpy", "--device", "cpu",
               "--mode", "compare", "--time", "4", "--database", "none", cwd=tmp_path)
    assert proc.returncode in (0, 3), proc.stderr
    note = proc.stdout[proc.stdout.index("NOTE --time stopped"):].split("\n1 target(s)")[0]
    assert "slowk:slow_copy (" in note and "a longer --time" in note
    assert all(len(line) <= 80 for line in note.splitlines()), note


def test_short_share_lines_only_for_time_stops_without_a_finding():
    from types import SimpleNamespace as R

    from mambafuzz.cli import short_share_lines

    def rep(target, stop="time", examples=5, finding=None):
        return R(target=target, stop=stop, examples=examples, min_examples=10, finding=finding)

    assert short_share_lines([rep("a", examples=20), rep("b", stop="max-examples"), rep("c", finding=object())]) == []
    lines = short_share_lines([rep("zoo.BM-NOGUARD", examples=4), rep("zoo.DS-ROW", examples=13),
                               rep("ok", examples=500)])
    text = " ".join(lines)
    assert "2 target(s)" in text and "zoo.BM-NOGUARD (4)" in text and "zoo.DS-ROW (13)" in text
    assert "ok (" not in text and all(len(line) <= 80 for line in lines)


# ---------------------------------------------------------------- start-up, list, --json, signals
def _loaded_by(*argv, cwd) -> dict:
    """Run ``cli.main(argv)`` in a fresh interpreter: its exit code and which of torch, triton, numpy
    and hypothesis it imported."""
    import subprocess
    import sys

    from common import mf_env

    code = ("import json, sys\nfrom mambafuzz.cli import main\n"
            "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print(json.dumps({'code': code, 'loaded': sorted(m for m in ('torch', 'triton', 'numpy', "
            "'hypothesis') if m in sys.modules)}), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, env=mf_env(cwd), capture_output=True,
                          text=True, timeout=300)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def test_help_and_a_usage_error_import_neither_torch_nor_triton(tmp_path):
    """--help (and argparse's own errors) parse without the contracts, the kernels or Hypothesis."""
    assert _loaded_by("--help", cwd=tmp_path) == {"code": 0, "loaded": []}
    # a command's own arguments need its contracts' options (numpy), still no torch or Triton
    assert _loaded_by("fuzz", "--reps", "0", "--target", "x", cwd=tmp_path) == {"code": 2, "loaded": ["numpy"]}
    assert _loaded_by("replay", "--help", cwd=tmp_path) == {"code": 0, "loaded": ["numpy"]}


@pytest.mark.matrix
def test_list_has_a_devices_column_and_fits_80_columns_in_a_pipe(tmp_path):
    proc = _mf("list", cwd=tmp_path)  # piped, COLUMNS=80
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    header = next(line for line in lines if "name" in line and "contract" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["name", "contract", "kind", "overlap", "devices"]
    row = next(line for line in lines if "triton.batch_memcpy" in line and "│" in line)
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["triton.batch_memcpy", "batch_memcpy", "correct",
                                                              "full", "cpu, cuda"]
    # the prose and each zoo row's bug kind follow as plain lines, split between words only
    text = " ".join(line.strip() for line in lines)
    assert "zoo.TAIL-DROP [wrong]: u64 copy that drops the last size % 8 bytes" in text


@pytest.mark.parametrize("argv", [
    pytest.param(["fuzz", "--target", "triton.nope", "--json"], marks=pytest.mark.matrix),  # the command's own check
    ["fuzz", "--json", "--target", "x", "--reps", "0"],             # argparse's
    pytest.param(["smoke", "--json", "--crashes-dir", "{blocker}/sub"], marks=pytest.mark.matrix),
    pytest.param(["zoo", "--json", "--target", "zoo.NOPE"], marks=pytest.mark.matrix),
    ["list", "--json", "--bogus"],
    ["replay", "--json", "nothere.json"],                           # replay writes its own, only one
])
def test_every_json_run_prints_one_document_a_usage_error_too(tmp_path, argv):
    (tmp_path / "blocker").write_text("")
    argv = [a.replace("{blocker}", str(tmp_path / "blocker")) for a in argv]
    proc = mf(*argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)  # the whole of stdout is one document
    assert body["schema"] == 1 and body["command"] == argv[0] and body["exit_code"] == 2
    assert body["error"] and body["targets" if argv[0] != "replay" else "files"] == []
    assert body["interrupted"] is False
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0] == f"mambafuzz: error: {body['error']}", proc.stderr


WRONG_KERNEL = '''
def drop_last(src_ptrs, dst_ptrs, sizes, *, arena):
    """Drops the last byte of every row: found at once."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        n = max(0, n - 1)
        arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()
'''


@pytest.mark.matrix
def test_a_signal_after_the_summary_line_leaves_the_exit_code(tmp_path):
    """Ctrl-C pressed (again and again) once `... exit 1` is printed, while the process shuts down
    (torch's teardown takes seconds), neither turns exit 1 into 130 nor kills it with SIGINT."""
    import signal
    import time

    from common import mf_popen

    (tmp_path / "wrongk.py").write_text(WRONG_KERNEL)
    proc = mf_popen("fuzz", "--target", "wrongk:drop_last", "--contract", "batch_memcpy", "--database", "none",
                    "--shrink-time", "2", "--crashes-dir", "c", cwd=tmp_path)
    summary = None
    for line in proc.stdout:
        if "; exit " in line:
            summary = line
            break
    assert summary is not None and summary.rstrip().endswith("exit 1"), proc.communicate()
    signals = 0
    while proc.poll() is None and signals < 100:
        proc.send_signal(signal.SIGINT)
        signals += 1
        time.sleep(0.05)
    proc.communicate(timeout=60)
    assert proc.returncode == 1 and signals > 1, (proc.returncode, signals)


def test_smoke_is_a_bounded_job_by_default():
    from mambafuzz.cli import SMOKE_TIME, build_parser

    args = build_parser().parse_args(["smoke"])
    assert args.time == SMOKE_TIME <= 50 and args.max_examples == 60


def test_a_zoo_row_shrinks_briefly_so_its_share_flows_on_and_a_fuzz_finding_long():
    from mambafuzz.cli import ZOO_SHRINK_TIME, build_parser

    assert build_parser().parse_args(["zoo"]).shrink_time == ZOO_SHRINK_TIME <= 10
    assert build_parser().parse_args(["fuzz", "--target", "zoo.TAIL-DROP"]).shrink_time == 60
    assert build_parser().parse_args(["zoo", "--shrink-time", "30"]).shrink_time == 30


@pytest.mark.matrix
def test_a_smoke_too_short_for_its_targets_ends_on_time_and_says_so(tmp_path):
    """--time split over every correct target: the run ends within its time plus start-up, and a
    target that got fewer examples than a verdict needs is inconclusive, saying so (exit 3)."""
    proc = mf("smoke", "--time", "6", "--database", "none", "--json", cwd=tmp_path)
    body = json.loads(proc.stdout)
    rows = body["targets"]
    from mambafuzz.kernels import registry  # smoke runs every correct and torch target, torch paths first
    smoke = [t for t in registry.all_targets() if t.kind in ("correct", "torch")]
    assert len(rows) == len(smoke) and rows[0]["target"].startswith("torch."), [r["target"] for r in rows]
    assert sum(r["seconds"] for r in rows) < 6 + 5, [(r["target"], r["seconds"]) for r in rows]
    short = [r for r in rows if r["examples"] < r["min_examples"]]
    assert short and body["exit_code"] == proc.returncode == 3, proc.stderr[-2000:]
    for r in short:
        assert r["status"] == "inconclusive" and (r["why"].startswith(f"only {r['examples']} valid example(s)")
                                                  or r["why"].startswith("not run: --time (6 s) ran out")), r

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
    assert len(zoo) == 17 and all(t["bug"] for t in zoo)  # SPEC's 12 and the 5 slot rows


@pytest.mark.parametrize("args, needles", [
    (["fuzz", "--target", "triton.nope"], ["unknown target", "triton.nope"]),
    (["fuzz", "--target", "nosuchmodule:fn", "--contract", "batch_memcpy"], ["cannot import", "nosuchmodule"]),
    (["fuzz", "--target", "json:dumps"], ["--contract"]),
    (["fuzz", "--target", "zoo.*", "--device", "cpu", "--mode", "race", "--reps", "0"], ["positive"]),
    (["fuzz", "--target", "triton.*", "--device", "cuda"], ["cuda"]),
    (["replay", "missing.json"], ["missing.json"]),
    (["fuzz", "--target", "xyz*"], ["matches nothing"]),
])
def test_bad_usage_is_one_line_and_exit_2(tmp_path, args, needles):
    one_line_error(mf(*args, cwd=tmp_path), *needles)


def test_unwritable_crashes_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    one_line_error(mf("smoke", "--crashes-dir", str(blocker / "sub"), cwd=tmp_path), "not writable")


def test_replay_bad_files_exit_2(tmp_path):
    (tmp_path / "newer.json").write_text(json.dumps({"schema": 99}))
    proc = mf("replay", "newer.json", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "crash schema 99" in json.loads(proc.stdout)["files"][0]["reason"]


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


def test_smoke_passes_on_the_correct_kernels(tmp_path):
    proc = mf("smoke", "--max-examples", "15", "--seed", "4", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["mode"] == "race"
    names = {t["target"] for t in body["targets"]}
    assert {"triton.batch_memcpy", "triton.state_copy", "triton.postprocess"} <= names
    assert all(t["status"] == "clean" and t["examples"] == 15 for t in body["targets"])


def test_selfcheck(tmp_path):
    proc = mf("selfcheck", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("ok") == 4


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

"""Replay as a user runs it: malformed crash files, --against a user module, stored commands.

One zoo finding (TAIL-DROP, shrunk to one row) is made once per module; the
malformed files are that file with one field broken each, replayed together
in one folder so that one bad file is seen not to stop the others.
"""
import json
import textwrap
from pathlib import Path

import pytest

from mambafuzz import findings
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.contracts import case_from_json
from mambafuzz.errors import CaseError, UsageError
from mambafuzz.search.fuzz import check_database
from mambafuzz.oracle import PoolLayout

from common import ROOT, mf as _mf  # noqa: E402


def mf(*args, cwd, pythonpath=None, timeout=120):
    """`python -m mambafuzz.cli` as a user runs it (PYTHONPATH: the checkout and `cwd` unless given)."""
    return _mf(*args, cwd=cwd, pythonpath=pythonpath, timeout=timeout, columns=200)


# A correct user adapter: the project's Triton kernel behind the documented batch_memcpy contract.
FIXED_MODULE = '''
from mambafuzz.kernels.batch_memcpy import batch_memcpy as _kernel

def fixed(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """The project's batched memmove."""
    _kernel(src_ptrs, dst_ptrs, sizes)
'''

# A buggy one: a forward byte loop is wrong whenever dst overlaps the right of src.
BUGGY_MODULE = '''
def forward(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """Byte-wise forward copy."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        for i in range(n):
            arena[d - base + i] = arena[s - base + i]
'''


@pytest.fixture(scope="module")
def zoo_crash(tmp_path_factory):
    """A TAIL-DROP crash file found on the CPU, and the folder it was made in."""
    work = tmp_path_factory.mktemp("zoo")
    proc = mf("fuzz", "--target", "zoo.TAIL-DROP", "--device", "cpu", "--seed", "1", "--max-examples", "50",
              "--database", "none", "--crashes-dir", "X", "--no-isolate", "--json", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    files = list((work / "X").rglob("*.json"))
    assert len(files) == 1
    return work, files[0]


def _set(path, value):
    """A mutation of the crash body: set `path` (keys joined by '.') to `value`; `...` deletes it."""
    def apply(body):
        *outer, last = path.split(".")
        for key in outer:
            body = body[key]
        if value is ...:
            del body[last]
        else:
            body[last] = value
    return apply


# name -> (mutation of a good crash file, what its one-line error must name)
MALFORMED = {
    "arena_big": (_set("case.arena_size", "big"), "'arena_size'"),
    "arena_zero": (_set("case.arena_size", 0), "'arena_size' must be positive"),
    "target_int": (_set("target", 5), "'target'"),
    "target_empty": (_set("target", ""), "'target'"),
    "reps_str": (_set("reps", "many"), "'reps'"),
    "reps_neg": (_set("reps", -4), "'reps'"),
    "reps_bool": (_set("reps", True), "'reps'"),
    "failures_over": (_set("failures", 9), "'failures'"),
    "mode_bogus": (_set("mode", "bogus"), "'mode'"),
    "device_tpu": (_set("device", "tpu"), "'device'"),
    "contract_nope": (_set("contract", "nope"), "'contract'"),
    "overlap_bad": (_set("overlap", "middle"), "'overlap'"),
    "target_path_int": (_set("target_path", 7), "'target_path'"),
    "schema_str": (_set("schema", "1"), "'schema'"),
    "verdict_list": (_set("verdict", [1]), "'verdict'"),
    "copies_float": (_set("case.copies", [[64, 80, 70.5]]), "'copies[0][2]'"),
    "copies_neg": (_set("case.copies", [[-1, 80, 1]]), "'copies[0][0]'"),
    "copies_short": (_set("case.copies", [[64, 80]]), "'copies[0]'"),
    "seed_bool": (_set("case.seed", True), "'seed'"),
    "perturb_short": (_set("case.perturb", [1, 2, 3]), "'perturb'"),
    "case_extra": (_set("case.bogus", 1), "unknown field(s): bogus"),
    "case_missing": (_set("case", ...), "missing case"),
}


@pytest.fixture(scope="module")
def bad_folder(zoo_crash):
    """The good crash file as good.json next to one broken copy per MALFORMED entry, plus a non-JSON file."""
    work, good = zoo_crash
    folder = work / "B"
    folder.mkdir()
    text = good.read_text()
    (folder / "good.json").write_text(text)
    for name, (mutate, _) in MALFORMED.items():
        body = json.loads(text)
        mutate(body)
        (folder / f"{name}.json").write_text(json.dumps(body))
    (folder / "notjson.json").write_text("{not json")
    return work, folder


@pytest.fixture(scope="module")
def bad_folder_json(bad_folder):
    work, folder = bad_folder
    proc = mf("replay", "B", "--json", cwd=work)
    rows = {Path(r["path"]).stem: r for r in json.loads(proc.stdout)["files"]}  # always JSON
    return proc, rows


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_each_malformed_field_is_one_line_naming_file_and_field(bad_folder, bad_folder_json, name):
    work, folder = bad_folder
    needle = MALFORMED[name][1]
    proc, rows = bad_folder_json
    row = rows[name]
    assert row["status"] == "could not run" and row["verdict"] is None
    assert needle in row["reason"] and f"{name}.json" in row["reason"] and "\n" not in row["reason"]
    # on stderr: exactly one line for this file, naming the field
    lines = [line for line in proc.stderr.splitlines() if f"{name}.json" in line]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    # and findings.load says the same, as a CrashFileError (a usage error, exit 2 on its own)
    with pytest.raises(findings.CrashFileError) as info:
        findings.load(folder / f"{name}.json")
    assert needle in str(info.value)


def test_bad_files_do_not_stop_the_good_one(bad_folder_json):
    proc, rows = bad_folder_json
    assert "Traceback" not in proc.stderr
    assert len(rows) == len(MALFORMED) + 2
    good = rows["good"]
    assert good["status"] == "still failing" and good["target"] == "zoo.TAIL-DROP"
    assert good["verdict"]["kind"] == "mismatch" and good["verdict"]["failures"] == 1
    assert "not valid JSON" in rows["notjson"]["reason"]
    assert proc.returncode == 1  # something still fails: that outranks the invalid files


@pytest.mark.matrix
def test_table_output_and_exit_2_when_nothing_fails(bad_folder):
    """Against a fixed kernel the good file is fixed; the invalid files alone make it exit 2."""
    work, folder = bad_folder
    proc = mf("replay", "B", "--against", "triton.batch_memcpy", cwd=work)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "fixed" in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == len(MALFORMED) + 1 and all(line.startswith("mambafuzz: error: ") for line in errors)


@pytest.mark.parametrize("field, value, needle", [
    ("arena_size", "big", "'arena_size'"),
    ("arena_size", True, "'arena_size'"),
    ("num_tiles", 0, "'num_tiles'"),
    ("src_cols", [True], "'src_cols[0]'"),
    ("biases", [1.5], "'biases[0]'"),
    ("block_tables", [[[0, 5.0]]], "'block_tables[0][0][1]'"),
    ("block_tables", [[0, 5]], "'block_tables[0][0]'"),
    ("pools", {"kind": "conv_sd"}, "'pools'"),
    ("pools", [{"kind": "conv_sd", "offset": 0}], "'pools[0]' is missing num_blocks"),
    ("pools", [{"kind": 3, "offset": 0, "num_blocks": 1, "block_stride": 8, "elem_size": 1}], "'pools[0].kind'"),
    ("pools", [{"kind": "conv_sd", "offset": "0", "num_blocks": 1, "block_stride": 8, "elem_size": 1}],
     "'pools[0].offset'"),
    ("pools", [{"kind": "temporal", "offset": 0, "num_blocks": 1, "block_stride": 8, "elem_size": 1,
                "inner": [2, False]}], "'pools[0].inner[1]'"),
])
def test_pool_case_fields_are_type_checked(field, value, needle):
    case = StateCopyCase(arena_size=64, pools=(PoolLayout("conv_sd", 0, 1, 8, 1, 4, 2),),
                         block_tables=(((0, 0),),), src_cols=(0,), dst_cols=(1,), biases=(0,))
    body = json.loads(json.dumps(case.to_json()))
    assert case_from_json(body) == case  # the unbroken case loads
    with pytest.raises(CaseError) as info:
        case_from_json({**body, field: value})
    assert needle in str(info.value)


@pytest.mark.matrix
def test_against_a_user_module_takes_contract_from_the_crash_file(zoo_crash, tmp_path):
    work, crash = zoo_crash
    (tmp_path / "mykernel.py").write_text(textwrap.dedent(FIXED_MODULE))
    proc = mf("replay", str(crash), "--against", "mykernel:fixed", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(proc.stdout)["files"]
    assert row["status"] == "fixed" and row["target"] == "mykernel:fixed"
    assert row["verdict"]["reps"] == 1 and row["verdict"]["failures"] == 0
    # --contract overrides the file's: a state_copy adapter cannot run a batch_memcpy case
    wrong = mf("replay", str(crash), "--against", "mykernel:fixed", "--contract", "state_copy", "--json",
               cwd=tmp_path)
    assert wrong.returncode == 2
    assert "state_copy != crash contract batch_memcpy" in json.loads(wrong.stdout)["files"][0]["reason"]


def test_against_a_missing_module_is_still_json(zoo_crash):
    work, crash = zoo_crash
    proc = mf("replay", str(crash), "--against", "nosuchmodule:fn", "--json", cwd=work)
    assert proc.returncode == 2
    (row,) = json.loads(proc.stdout)["files"]
    assert row["status"] == "could not run" and "nosuchmodule" in row["reason"]
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.matrix
def test_stored_replay_command_of_a_user_target_runs_from_anywhere(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "userbug.py").write_text(textwrap.dedent(BUGGY_MODULE))
    found = mf("fuzz", "--target", "userbug:forward", "--contract", "batch_memcpy", "--device", "cpu",
               "--seed", "1", "--max-examples", "60", "--database", "none", "--no-isolate", "--json", cwd=project)
    assert found.returncode == 1, found.stdout + found.stderr
    (crash,) = (project / "crashes").rglob("*.json")
    body = json.loads(crash.read_text())
    assert body["target"] == "userbug:forward" and body["overlap"] == "full"
    assert Path(body["target_path"]) == project.resolve()
    cmd = body["replay"].split()
    assert cmd[:2] == ["mambafuzz", "replay"] and Path(cmd[2]).is_absolute()
    # run as printed, from a folder that does not hold the module, with only the checkout on the path
    again = mf(*cmd[1:], "--json", cwd=elsewhere, pythonpath=str(ROOT))
    assert again.returncode == 1, again.stdout + again.stderr
    (row,) = json.loads(again.stdout)["files"]
    assert row["status"] == "still failing" and row["target"] == "userbug:forward"
    assert row["verdict"]["kind"] == "mismatch"


def test_check_database(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for bad, needle in [("/proc/x", "/proc"), ("/sys/kernel/x", "/sys"), (str(blocker), "is a file"),
                        (str(blocker / "sub"), "not a writable folder")]:
        with pytest.raises(UsageError) as info:
            check_database(bad)
        assert str(bad) in str(info.value) and needle in str(info.value) and "\n" not in str(info.value)
    check_database(str(tmp_path / "db" / "sub"))  # creatable: fine, and made
    assert (tmp_path / "db" / "sub").is_dir() and not list((tmp_path / "db" / "sub").iterdir())
    for fine in (None, "none", "NONE", "redis://localhost:1"):
        check_database(fine)


@pytest.mark.matrix
def test_replay_keeps_paths_and_names_whole_at_80_columns_in_a_pipe(zoo_crash, tmp_path):
    """The table holds short cells; each file's path is whole on its own line (it was folded inside
    a table cell, `crashes/batch_me│mcpy/...`), its detail wrapped between words."""
    work, crash = zoo_crash
    twin = tmp_path / "a_second_folder_with_a_rather_long_name" / crash.name
    twin.parent.mkdir()
    twin.write_text(crash.read_text())
    (tmp_path / "my_fixed_kernels.py").write_text(textwrap.dedent(FIXED_MODULE))
    for against, status in ((["--against", "my_fixed_kernels:fixed"], "fixed"), ([], "still failing")):
        proc = _mf("replay", str(crash), str(twin), *against, cwd=tmp_path)  # piped, COLUMNS=80
        assert proc.returncode == (0 if against else 1), proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        target = "my_fixed_kernels:fixed" if against else "zoo.TAIL-DROP"
        for i, path in ((1, crash), (2, twin)):
            assert f"{i} {path}" in lines, proc.stdout
            row = next(line for line in lines if line.startswith(f"│ {i} │"))
            assert [c.strip() for c in row.strip("│ ").split("│")][:3] == [str(i), target, status], row
        assert all(len(line) <= 80 for line in lines if not line[:1].isdigit()), proc.stdout
        if not against:  # the detail: the first differing bytes, after the path, split between words
            after = lines[lines.index(f"1 {crash}") + 1:lines.index(f"2 {twin}")]
            assert after and "bytes differ" in " ".join(x.strip() for x in after), after


def _loaded_by(*argv, cwd) -> dict:
    """``cli.main(argv)`` in a fresh interpreter: its exit code and which of torch and triton it imported."""
    import subprocess
    import sys

    from common import mf_env

    code = ("import json, sys\nfrom mambafuzz.cli import main\ncode = main(sys.argv[1:])\n"
            "print(json.dumps({'code': code, 'loaded': sorted(m for m in ('torch', 'triton') if m in sys.modules)}),"
            " file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=cwd, env=mf_env(cwd),
                          capture_output=True, text=True, timeout=300)
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.matrix
def test_report_never_imports_torch_or_triton_and_replay_not_before_a_kernel_runs(bad_folder, tmp_path):
    work, folder = bad_folder
    page = tmp_path / "page.html"
    assert _loaded_by("report", folder / "good.json", "-o", page, cwd=work) == {"code": 0, "loaded": []}
    assert page.stat().st_size > 0
    # invalid files, an unknown --against: rows and exit 2, nothing of torch's or Triton's loaded
    bad = _loaded_by("replay", folder / "notjson.json", folder / "reps_neg.json", cwd=work)
    assert bad == {"code": 2, "loaded": []}
    assert _loaded_by("replay", folder / "good.json", "--against", "nosuchmodule:fn", "--json",
                      cwd=work) == {"code": 2, "loaded": []}
    # the saved case run: the kernel and its interpreter load then
    assert _loaded_by("replay", folder / "good.json", cwd=work) == {"code": 1, "loaded": ["torch", "triton"]}

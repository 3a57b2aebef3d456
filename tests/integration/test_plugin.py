"""The pytest plugin: on by install, its options, and what a wrong adapter shows in pytest's output.

Each wrong variant of the examples/ adapters runs in a fresh pytest (a copy of the example and its
conftest in a temp folder): it must fail with the witness or first differing bytes, the crash file,
a `mambafuzz replay` command that replays it, and the test's rerun line; a second run must replay
the saved case before fuzzing.  A user's own kernel, defined when its test module is imported, shows
what the options in effect decide: the rerun line repeats them and reproduces from another folder, a
saved crash that cannot run without them is one line with the hint, and mambafuzz's frames stay hidden.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mambafuzz
import mambafuzz.pytest_plugin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _env() -> dict:
    """The parent's environment less what this test session set: the child chooses its own device."""
    return {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MAMBAFUZZ_DEVICE", "PYTEST_ADDOPTS")}


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=400)


def _failure_report(out: str) -> list[str]:
    """The lines of pytest's FAILURES section: its header and summary are longer under CI=true."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if "FAILURES" in ln)
    end = next(i for i, ln in enumerate(lines) if "short test summary" in ln)
    return lines[start:end]


def test_the_plugin_is_registered_by_the_entry_point(pytestconfig, request):
    assert pytestconfig.pluginmanager.get_plugin("mambafuzz") is mambafuzz.pytest_plugin
    assert request.getfixturevalue("mambafuzz_check") is mambafuzz.check
    assert pytestconfig.getoption("mambafuzz_examples") is None  # no option given: nothing overridden


WRONG = [  # example module, wrong adapter, contract, its options, verdict kind, evidence in the output
    ("test_example_batch_copy", "batch_copy_without_barrier", "batch_memcpy", "", "race",
     "witness: store: test_example_batch_copy.py:"),
    ("test_example_state_copy", "state_copy_without_temporal_bias", "state_copy", ", **ENGINE", "mismatch",
     "(temporal) block"),
    ("test_example_slot_copy", "slot_copy_one_by_one", "slot_copy", "", "mismatch", "first at arena+"),
]


@pytest.mark.slow
@pytest.mark.parametrize("module, fn, contract, options, kind, evidence", WRONG, ids=[w[2] for w in WRONG])
@pytest.mark.matrix
def test_a_wrong_adapter_fails_with_its_witness_and_replay_command(tmp_path, module, fn, contract, options, kind,
                                                                   evidence):
    shutil.copy(EXAMPLES / "conftest.py", tmp_path)
    shutil.copy(EXAMPLES / f"{module}.py", tmp_path)
    (tmp_path / "test_wrong.py").write_text(
        f"from {module} import *\n\n\n"
        f"def test_wrong(mambafuzz_check):\n"
        f"    mambafuzz_check({fn}, {contract!r}, max_examples=100, seed=3, shrink_time=5{options})\n")
    first = _pytest(tmp_path, "test_wrong.py", "--mambafuzz-crashes", "saved")
    out = first.stdout
    assert first.returncode == 1, out[-3000:] + first.stderr[-2000:]
    assert f"{module}:{fn} breaks the {contract} contract: {kind}" in out, out[-3000:]
    assert evidence in out, out[-3000:]
    (saved,) = (tmp_path / "saved").rglob("*.json")
    assert f"saved: {saved}" in out
    replay = re.search(r"replay: (mambafuzz replay .*)$", out, re.M)
    assert replay and str(saved) in replay.group(1), out[-3000:]
    assert f"rerun: pytest {tmp_path / 'test_wrong.py'}::test_wrong" in out

    second = _pytest(tmp_path, "test_wrong.py", "--mambafuzz-crashes", "saved")
    assert second.returncode == 1, second.stdout[-3000:]
    assert "replayed before fuzzing, still fails" in second.stdout and f"saved: {saved}" in second.stdout
    assert list((tmp_path / "saved").rglob("*.json")) == [saved]

    if contract == "batch_memcpy":  # the printed command replays the file from anywhere
        proc = subprocess.run(shlex.split(replay.group(1)) + ["--json"], cwd="/", env=_env(), capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 1 and '"status": "still failing"' in proc.stdout, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.matrix
def test_command_line_options_win_and_the_device_is_chosen_before_collection(tmp_path):
    (tmp_path / "test_opts.py").write_text(
        "import os\n"
        "INTERPRETED_AT_IMPORT = os.environ.get('TRITON_INTERPRET')\n\n\n"
        "def test_opts(mambafuzz_check):\n"
        "    from mambafuzz.kernels import registry\n"
        "    report = mambafuzz_check(registry.get('triton.batch_memcpy').fn, 'batch_memcpy', max_examples=50,\n"
        "                             min_examples=3)\n"
        "    print('RESULT', INTERPRETED_AT_IMPORT, report.status, report.examples)\n")
    proc = _pytest(tmp_path, "-s", "test_opts.py", "--mambafuzz-device", "cpu", "--mambafuzz-examples", "6")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "RESULT 1 clean 6" in proc.stdout


# A user's test file whose own kernel is defined when the module is imported (so the device option decides
# compiled or interpreted): one program per row, one block of 64 bytes, so a longer row loses its tail.
USER_TEST = '''
import triton
import triton.language as tl

import mambafuzz


@triton.jit
def _copy(src_ptrs, dst_ptrs, sizes, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    src = tl.load(src_ptrs + i).to(tl.pointer_type(tl.uint8))
    dst = tl.load(dst_ptrs + i).to(tl.pointer_type(tl.uint8))
    n = tl.load(sizes + i)
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n)
    tl.debug_barrier()  # the whole block is loaded before any store: no race, only the lost tail
    tl.store(dst + offs, x, mask=offs < n)


def tail_drop(src_ptrs, dst_ptrs, sizes):
    if sizes.numel():
        _copy[(sizes.numel(),)](src_ptrs, dst_ptrs, sizes, BLOCK=64)


def test_tail_drop():
    mambafuzz.check(tail_drop, "batch_memcpy", max_examples=100, seed=1, shrink_time=3)
'''


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A folder with the user's test and the crash file its first run (device cpu) saved under crashes/."""
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "test_user.py").write_text(USER_TEST)
    first = _pytest(folder, "test_user.py", "--mambafuzz-device", "cpu", "--mambafuzz-examples", "40",
                    "--mambafuzz-crashes", "crashes")
    assert first.returncode == 1 and "breaks the batch_memcpy contract: mismatch" in first.stdout, \
        first.stdout[-3000:] + first.stderr[-2000:]
    (saved,) = (folder / "crashes").rglob("*.json")
    return folder, first, saved


@pytest.fixture(scope="module")
def rerun(corpus):
    """The printed rerun command, run as printed from another folder (pytest as `python -m pytest`)."""
    folder, first, _ = corpus
    # CI=true makes pytest repeat the failure's message, untruncated, in its short summary: one line twice
    (line,) = {ln.split("rerun: ", 1)[1].strip() for ln in first.stdout.splitlines() if "rerun: " in ln}
    words = shlex.split(line)
    assert words[0] == "pytest"
    return line, subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *words[1:]], cwd="/",
                                env=_env(), capture_output=True, text=True, timeout=400)


@pytest.mark.slow
@pytest.mark.matrix
def test_the_rerun_line_names_every_option_in_effect_and_reproduces(corpus, rerun):
    folder, _, saved = corpus
    line, proc = rerun
    assert line == (f"pytest {folder / 'test_user.py'}::test_tail_drop --mambafuzz-device cpu "
                    f"--mambafuzz-examples 40 --mambafuzz-crashes {folder / 'crashes'}")
    assert proc.returncode == 1 and "(a saved crash file, replayed before fuzzing, still fails)" in proc.stdout, \
        proc.stdout[-3000:]
    assert f"saved: {saved}" in proc.stdout


@pytest.mark.slow
@pytest.mark.matrix
def test_a_saved_crash_that_still_fails_shows_the_test_line_not_mambafuzz_frames(rerun):
    out = rerun[1].stdout
    assert "still fails" in out, out[-3000:]
    assert "_replay_saved" not in out and "mambafuzz/api.py" not in out and "def check(" not in out, out
    assert ">       mambafuzz.check(tail_drop" in out, out  # the test's own line
    assert len(_failure_report(out)) < 25, out


@pytest.mark.slow
@pytest.mark.matrix
def test_a_saved_crash_run_without_a_device_option_gives_one_line_with_the_hint(corpus):
    folder, _, saved = corpus
    proc = _pytest(folder, "test_user.py")  # the kernel is defined compiled; this CPU run cannot launch it
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("E ") and "could not be checked" in ln]
    assert f"saved case {saved} could not be checked" in line
    assert line.endswith("; your kernels were defined compiled: set TRITON_INTERPRET=1 "
                         "(or pytest --mambafuzz-device cpu) before they are imported"), line
    assert "The above exception was the direct cause" not in out and "_replay_saved" not in out, out
    assert len(_failure_report(out)) < 20, out

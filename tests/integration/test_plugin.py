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


NO_GPU = "import mambafuzz.pytest_plugin\nmambafuzz.pytest_plugin.GPU_DRIVER_FILES = ()  # this machine: no GPU\n"


@pytest.mark.slow
@pytest.mark.matrix
def test_without_a_gpu_a_plain_run_picks_the_cpu_and_replays_the_saved_crash(corpus, tmp_path):
    """No device option, no GPU: the plugin chooses the CPU before the test module defines its kernel, so
    the saved crash replays and still fails, and the header says why the run is on the CPU."""
    folder, _, saved = corpus
    run = tmp_path / "plain"
    shutil.copytree(folder, run)
    (run / "conftest.py").write_text(NO_GPU)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_user.py"], cwd=run,
                          env=_env(), capture_output=True, text=True, timeout=400)  # not -q: the header
    out = proc.stdout
    assert "mambafuzz: no GPU found: device cpu (Triton's interpreter, race check)" in out, out[:2000]
    assert proc.returncode == 1 and "(a saved crash file, replayed before fuzzing, still fails)" in out, \
        out[-3000:] + proc.stderr[-2000:]
    assert f"rerun: pytest {run / 'test_user.py'}::test_tail_drop --mambafuzz-device cpu" in out


@pytest.mark.slow
@pytest.mark.matrix
def test_kernels_defined_compiled_in_a_cpu_check_say_so_first_in_one_line(corpus):
    """Without the plugin (nothing chooses the device before the module defines its kernel) the check runs on
    the CPU and cannot launch it: inconclusive, the reason and what to set first, then the saved case."""
    folder, _, saved = corpus
    proc = _pytest(folder, "test_user.py", "-p", "no:mambafuzz")
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("E ") and "Inconclusive" in ln]
    message = line.split("mambafuzz.errors.Inconclusive: ", 1)[1]
    assert message.startswith("your kernels were defined compiled but this run is on the CPU: set "
                              "TRITON_INTERPRET=1"), message
    assert f"target test_user:tail_drop, saved case {saved.relative_to(folder)}: " in message, message
    assert "TRITON_INTERPRET=1" in message[:100], message
    assert "The above exception was the direct cause" not in out and "_replay_saved" not in out, out
    assert len(_failure_report(out)) < 20, out


HEADER_TEST = """
import os

AT_IMPORT = os.environ.get("TRITON_INTERPRET")


def test_device():
    print("AT_IMPORT", AT_IMPORT)
"""


@pytest.mark.parametrize("gpu, header, interpret", [
    (False, "mambafuzz: no GPU found: device cpu (Triton's interpreter, race check)", "1"),
    (True, "mambafuzz: device per check (default cpu); --mambafuzz-device sets it", "None"),
])
def test_the_header_says_which_device_a_plain_run_uses(tmp_path, gpu, header, interpret):
    """No GPU: the CPU is chosen before collection (TRITON_INTERPRET=1 when the test module is imported).
    A GPU driver present: nothing is chosen (each check's own device), and the header says how to."""
    (tmp_path / "conftest.py").write_text(NO_GPU if not gpu else
                                          "import mambafuzz.pytest_plugin\n"
                                          "mambafuzz.pytest_plugin.GPU_DRIVER_FILES = ('/',)  # a driver\n")
    (tmp_path / "test_header.py").write_text(HEADER_TEST)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "test_header.py"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)  # not -q: the header
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("mambafuzz: ")]
    assert line == header and len(line) <= 80
    assert f"AT_IMPORT {interpret}" in proc.stdout


def test_an_inconclusive_check_says_why_in_its_first_100_characters():
    from mambafuzz.api import inconclusive_text

    target = "engine.tests.ops.test_mamba_state_updates:selective_state_update_with_spec_decode_adapter"
    why = "only 3 valid example(s), 10 needed (the target rejected 57: no varlen batches (57))"
    assert inconclusive_text(target, why, "cpu").startswith("only 3 valid example(s), 10 needed")
    saved = "/very/long/path/" + "x" * 120 + "/crashes/ssm_update/abc.json"
    text = inconclusive_text(target, "internal error in mambafuzz (oracle.py:12 in f): KeyError: 3", "cpu",
                             saved=saved)
    assert "internal error" in text[:100] and text.endswith(f"; target {target}, saved case {saved}")
    compiled = inconclusive_text(target, "Triton 3.9.0's interpreter failed running the kernel: RuntimeError: "
                                         "0 active drivers ([]). There should only be one.", "cpu")
    assert "defined compiled but this run is on the CPU: set TRITON_INTERPRET=1" in compiled[:100]
    assert "\n" not in text + compiled

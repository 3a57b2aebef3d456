"""Verdicts a user can trust: who an exception is against, exit codes, signals, time, environment.

Most of these run the CLI in a subprocess the way a user does (real signals,
real environment); the classification tests raise real exceptions through the
engine.
"""
import json
import os
import signal
import textwrap
import time

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from common import mf, mf_popen, one_line_error
from mambafuzz.kernels import registry
from mambafuzz import cli
from mambafuzz.judge import blame
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.findings import load
from mambafuzz.judge.engine import run_case
from mambafuzz.errors import Inconclusive, InternalError
from mambafuzz.control.exits import exit_code

CASE = BatchCopyCase(arena_size=64, copies=((8, 0, 16),), seed=3)


# --------------------------------------------------------------------------- who an exception is against
def test_users_exception_is_a_finding_at_the_users_line():
    def adapter(src_ptrs, dst_ptrs, sizes, *, arena):
        return {}["no such key"]

    v = run_case(adapter, CASE, "cpu")
    assert v.kind == "exception" and v.failures == 1
    assert "KeyError" in v.exception and "test_verdicts.py" in v.exception and '{}["no such key"]' in v.exception


@triton.jit
def _asserting_kernel(p):
    x = tl.load(p)
    tl.device_assert(x != x, "the kernel's own check")


def test_device_assert_is_the_kernels_own_finding(monkeypatch):
    from triton.runtime import interpreter

    # the interpreter runs device_assert only with its debug option on (TRITON_DEBUG on a GPU)
    import dataclasses

    builder = interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, debug=True))

    def adapter(src_ptrs, dst_ptrs, sizes, *, arena):
        _asserting_kernel[(1,)](arena)

    v = run_case(adapter, CASE, "cpu")
    assert v.kind == "exception" and "tl.device_assert failed" in v.exception, v.exception


@triton.jit
def _bad_typing_kernel(p):
    q = p.to(tl.pointer_type(tl.uint8))
    if q > p:  # comparing pointers: Triton refuses this
        tl.store(p, 1)


def test_an_error_inside_triton_is_inconclusive_naming_the_kernel_line():
    def adapter(src_ptrs, dst_ptrs, sizes, *, arena):
        _bad_typing_kernel[(1,)](arena)

    with pytest.raises(Inconclusive) as info:
        run_case(adapter, CASE, "cpu")
    message = str(info.value)
    assert f"Triton {triton.__version__}" in message and "not a finding" in message
    assert "if q > p" in message and "\n" not in message


@triton.jit
def _library_call_kernel(p, BLOCK: tl.constexpr, ZERO: tl.constexpr, SHAPE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if ZERO == 0:
        n = tl.cdiv(BLOCK, ZERO)  # raises inside tl.cdiv, a Triton @jit function the interpreter runs
    else:
        n = offs + tl.zeros((SHAPE,), tl.int32)  # raises inside tl.zeros: 3 is no power of two
    tl.store(p + offs, n)


@pytest.mark.parametrize("zero, shape, expression, reason", [
    (0, 4, "n = tl.cdiv(BLOCK, ZERO)", "ZeroDivisionError"),
    (1, 3, "n = offs + tl.zeros((SHAPE,), tl.int32)", "ValueError: Shape element 0"),
])
def test_an_error_inside_a_triton_library_call_names_the_kernels_line(zero, shape, expression, reason):
    """The interpreter runs tl.cdiv and tl.zeros like the kernel and wraps their exception twice: the kernel's
    frame is only in the outer traceback, and the launch line is the last user frame of the root's."""
    def adapter(src_ptrs, dst_ptrs, sizes, *, arena):
        _library_call_kernel[(1,)](arena, BLOCK=4, ZERO=zero, SHAPE=shape)

    with pytest.raises(Inconclusive) as info:
        run_case(adapter, CASE, "cpu")
    message = str(info.value)
    line = next(i for i, text in enumerate(open(__file__), 1) if text.split("#")[0].strip() == expression)
    assert f"test_verdicts.py:{line}: {expression}" in message, message
    assert reason in message[:100] and "\n" not in message, message
    assert "_library_call_kernel[(1,)]" not in message, message  # not the launch


def test_an_error_in_mambafuzz_itself_is_internal(monkeypatch):
    from mambafuzz.racecheck import events

    class NoNumpy:  # every numpy call the recorder makes now fails inside racecheck.py
        def __getattr__(self, name):
            raise ZeroDivisionError(f"recorder bug at np.{name}")

    monkeypatch.setattr(events, "np", NoNumpy())
    with pytest.raises(InternalError) as info:
        run_case(registry.get("triton.batch_memcpy").fn, CASE, "cpu")
    assert "internal error in mambafuzz" in str(info.value) and "ZeroDivisionError" in str(info.value)
    assert "racecheck/events.py" in info.value.traceback


@pytest.mark.parametrize("mode", ["race", "compare"])
def test_a_torch_call_the_users_code_gets_wrong_is_the_users_finding(mode):
    """Under the race recorder every torch op passes through its allocation hook; torch refusing the
    user's call (a slot offset that wrapped in int32 made negative) is the user's finding, named at the
    user's line, not an internal error of the hook it passed through."""
    def adapter(src_ptrs, dst_ptrs, sizes, *, arena):
        offset = int(torch.tensor(2 ** 30, dtype=torch.int32) * torch.tensor(2, dtype=torch.int32))
        torch.as_strided(arena, (4,), (1,), offset)

    v = run_case(adapter, CASE, "cpu", mode=mode)
    assert v.kind == "exception" and "invalid storage offset" in v.exception, v
    assert "test_verdicts.py" in v.exception and "torch.as_strided(arena" in v.exception


def test_an_error_in_the_recorders_own_allocation_hook_is_internal(monkeypatch):
    from mambafuzz.racecheck import allocations

    monkeypatch.setattr(allocations, "StorageWeakRef", None)  # the hook now fails in its own code

    def adapter(src_ptrs, dst_ptrs, sizes, *, arena):
        from mambafuzz.adapters import add_region
        add_region("arena", arena)          # a fence: the hook now names each new storage
        torch.empty(64, dtype=torch.uint8)  # where it was made: the broken part

    with pytest.raises(InternalError) as info:
        run_case(adapter, CASE, "cpu", mode="race")
    assert "internal error in mambafuzz (allocations.py" in str(info.value), str(info.value)
    assert "'NoneType' object is not callable" in str(info.value)


def test_classify_known_limit_names_the_construct_and_the_first_release():
    """A synthetic traceback shaped like 3.6's: TypeError inside triton, called from a kernel's `range`."""
    exc = None
    try:
        _raise_like_old_interpreter()
    except TypeError as e:
        exc = e
    who = blame.classify(exc)
    assert who.who == blame.INTERPRETER
    assert "`for` loop over a bound loaded from memory" in who.message and "3.7 and later" in who.message
    assert "for i in range(" in who.where


def _raise_like_old_interpreter():
    size = torch.tensor([4])
    for i in range(0, _triton_int(size), 1):  # noqa: B007 - the line the message must name
        pass


# a function whose frame's file is inside triton's package, as the real interpreter's is
_FAKE = {}
exec(compile("def to_int(t):\n    raise TypeError('only 0-dimensional arrays can be converted to Python scalars')\n",
             os.path.join(os.path.dirname(triton.__file__), "runtime", "interpreter.py"), "exec"), _FAKE)
_triton_int = _FAKE["to_int"]


# --------------------------------------------------------------------------- exit codes
def test_exit_code_table():
    assert exit_code(["clean", "clean"]) == 0
    assert exit_code(["clean", "finding", "inconclusive"], interrupted=True) == 1
    assert exit_code(["clean", "inconclusive"]) == 3
    assert exit_code([]) == 3
    assert exit_code(["clean"], interrupted=True) == 130
    assert exit_code(["interrupted", "clean"]) == 130


def test_a_run_that_rejected_every_draw_is_inconclusive(tmp_path, monkeypatch, capsys):
    from mambafuzz.search import fuzz
    from mambafuzz.errors import CaseError

    def reject(*args, **kwargs):
        raise CaseError("the oracle refused it")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fuzz, "run_case", reject)
    code = cli.main(["fuzz", "--target", "torch.batch_memcpy", "--no-isolate", "--max-examples", "20",
                     "--database", "none", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 3 and body["exit_code"] == 3
    (t,) = body["targets"]
    assert t["status"] == "inconclusive" and t["examples"] == 0 and "rejected" in t["why"]


def test_an_internal_error_is_not_a_finding_and_other_targets_go_on(tmp_path, monkeypatch, capsys):
    from mambafuzz.judge import engine

    real = engine.materialize

    def flaky_materialize(case, device):
        if case.contract == "state_copy":
            raise IndexError("materialise bug")
        return real(case, device)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(engine, "materialize", flaky_materialize)
    code = cli.main(["fuzz", "--target", "torch.state_copy", "--target", "torch.batch_memcpy", "--no-isolate",
                     "--max-examples", "15", "--database", "none", "--json"])
    body = json.loads(capsys.readouterr().out)
    states = {t["target"]: t for t in body["targets"]}
    assert code == 3
    bad = states["torch.state_copy"]
    assert bad["status"] == "inconclusive" and bad["stop"] == "internal-error" and bad["finding"] is None
    assert "IndexError: materialise bug" in bad["detail"]
    error_file = bad["detail"].rsplit("traceback: ", 1)[1].rstrip(")")
    assert "Traceback" in (tmp_path / error_file).read_text()
    assert states["torch.batch_memcpy"]["status"] == "clean" and states["torch.batch_memcpy"]["examples"] == 15
    assert not (tmp_path / "crashes").exists() or not list((tmp_path / "crashes").rglob("*.json"))


def test_an_oracle_error_is_internal_never_a_rejection_nor_clean(tmp_path, monkeypatch, capsys):
    """numpy's own errors (a broadcast that does not fit) raised by the oracle on every fifth case: the
    run ends on an internal error, exit 3, the case saved with the traceback; no case is 'rejected'."""
    from mambafuzz.contracts import case_from_json
    from mambafuzz.contracts import conv_update

    real, calls = conv_update.expect_conv_update, []

    def planted(*args, **kwargs):
        calls.append(1)
        if len(calls) % 5 == 0:
            np.zeros(3) + np.zeros(4)  # ValueError: operands could not be broadcast together
        return real(*args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(conv_update, "expect_conv_update", planted)
    code = cli.main(["fuzz", "--target", "torch.conv_update", "--no-isolate", "--max-examples", "20",
                     "--database", "none", "--json"])
    body = json.loads(capsys.readouterr().out)
    (t,) = body["targets"]
    assert code == 3 and body["exit_code"] == 3
    assert t["status"] == "inconclusive" and t["stop"] == "internal-error" and t["finding"] is None
    assert t["rejected"] == [] and t["examples"] == 4, t  # cases 1-4 judged, the fifth stopped the run
    assert "internal error in mambafuzz while preparing the case" in t["detail"] and "broadcast" in t["detail"]
    assert "\n" not in t["detail"]
    text = (tmp_path / t["detail"].rsplit("traceback: ", 1)[1].rstrip(")")).read_text()
    assert "Traceback" in text and "target: torch.conv_update" in text
    case = case_from_json(json.loads(text.rstrip().splitlines()[-1]))  # the case, for a bug report
    assert case.contract == "conv_update"


def test_a_compare_error_is_internal(monkeypatch):
    from mambafuzz.judge import materialize as mat

    monkeypatch.setattr(mat.Materialized, "compare", lambda self: np.zeros(2) @ np.zeros(3))
    with pytest.raises(InternalError, match="internal error in mambafuzz while running the case: ValueError"):
        run_case(registry.get("torch.batch_memcpy").fn, CASE, "cpu")


@pytest.mark.parametrize("field, value, message", [
    ("lens", [1 << 40], "case field 'lens[0]' must be at most 1048576"),
    ("nacc", [1 << 31], "case field 'nacc[0]' must be at most 2147483647"),
    ("seed", 1 << 64, "case field 'seed' must be at most 9223372036854775807"),
])
def test_a_hand_edited_number_too_large_is_one_line_naming_its_field(field, value, message):
    from mambafuzz.contracts import case_from_json
    from mambafuzz.cases.conv_update import ConvUpdateCase
    from mambafuzz.errors import CaseError

    body = ConvUpdateCase(arena_size=4096, dtype="float32", layout="dim", offset=0, slots=2, dim=4, state_len=4,
                          slot_stride=64, width=2, lens=(1,), idx=((1,),), nacc=(1,)).to_json()
    with pytest.raises(CaseError, match=message.replace("[", "\\[").replace("]", "\\]")):
        case_from_json({**body, field: value})


def test_a_case_too_big_for_memory_is_a_case_error_not_ours(monkeypatch):
    from mambafuzz.contracts import conv_update
    from mambafuzz.errors import CaseError
    from mambafuzz.judge.materialize import materialize

    def hungry(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(conv_update, "expect_conv_update", hungry)
    case = conv_update.ConvUpdateCase(arena_size=4096, dtype="float32", layout="dim", offset=0, slots=2, dim=4,
                                      state_len=4, slot_stride=64, width=2, lens=(1,), idx=((1,),))
    with pytest.raises(CaseError, match="more memory than this machine has"):
        materialize(case, "cpu")


@pytest.mark.matrix
def test_a_signature_that_does_not_fit_is_bad_usage(tmp_path):
    (tmp_path / "mine.py").write_text("def copy(src, dst):\n    pass\n")
    proc = mf("fuzz", "--target", "mine:copy", "--contract", "batch_memcpy", "--max-examples", "5",
              cwd=tmp_path)
    one_line_error(proc, "mine:copy", "does not fit the batch_memcpy contract",
                   "fn(src_ptrs, dst_ptrs, sizes, *, arena=None)")


@pytest.mark.matrix
def test_arena_is_passed_only_to_functions_that_take_it(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent('''
        def copy(src, dst, n):
            """No arena: the contract's arguments come positionally, whatever their names."""
            import ctypes
            for s, d, k in zip(src.tolist(), dst.tolist(), n.tolist()):
                ctypes.memmove(d, s, k)
    '''))
    proc = mf("fuzz", "--target", "mine:copy", "--contract", "batch_memcpy", "--max-examples", "20",
              "--no-isolate", "--database", "none", "--seed", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_inherited_triton_interpret_that_contradicts_the_device_is_an_error(tmp_path):
    proc = mf("smoke", "--max-examples", "3", cwd=tmp_path, env_extra={"TRITON_INTERPRET": "0"})
    one_line_error(proc, "TRITON_INTERPRET=0", "contradicts device 'cpu'")


def test_device_guard_asks_the_kernels_themselves():
    from mambafuzz.control import device

    assert device.kernels_loaded_interpreted() is True  # this test process runs interpreted
    assert device.select("cpu") == "cpu" and device.select("cpu") == "cpu"


# --------------------------------------------------------------------------- signals and time
SLOW_WRONG = '''
import time

def copy(src_ptrs, dst_ptrs, sizes, *, arena):
    """Forward byte copy (wrong on right overlaps), slow, so that shrinking takes a while."""
    base = arena.data_ptr()
    time.sleep(0.05)
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        for i in range(n):
            arena[d - base + i] = arena[s - base + i]
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
@pytest.mark.parametrize("isolate", ["--no-isolate", "--isolate"])
@pytest.mark.matrix
def test_a_signal_while_shrinking_leaves_a_replayable_crash_file(tmp_path, sig, isolate):
    (tmp_path / "slow.py").write_text(SLOW_WRONG)
    proc = mf_popen("fuzz", "--target", "slow:copy", "--contract", "batch_memcpy", isolate, "--seed", "3",
                    "--database", "none", "--json", cwd=tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "crashes").rglob("*.json")):
        time.sleep(0.05)  # the failure is on disk before it is shrunk
    assert list((tmp_path / "crashes").rglob("*.json")), "no crash file before shrinking"
    time.sleep(0.5)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    files = list((tmp_path / "crashes").rglob("*.json"))
    assert len(files) == 1, files  # one best case; the bigger ones it replaced are gone
    record = load(files[0])
    assert record.target == "slow:copy"
    if sig != signal.SIGKILL:
        assert proc.returncode == 1, (proc.returncode, err)
        body = json.loads(out)
        assert body["interrupted"] and body["targets"][0]["status"] == "finding"
        assert body["targets"][0]["finding"]["path"] == str(files[0].relative_to(tmp_path))
    replay = mf("replay", files[0], "--json", cwd=tmp_path)
    assert replay.returncode == 1 and json.loads(replay.stdout)["files"][0]["status"] == "still failing"


@pytest.mark.matrix
def test_interrupted_with_nothing_found_is_130_and_says_so(tmp_path):
    proc = mf_popen("fuzz", "--target", "torch.batch_memcpy", "--no-isolate", "--max-examples", "100000",
                    "--database", "none", "--json", cwd=tmp_path)
    time.sleep(6)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    body = json.loads(out)
    assert proc.returncode == 130 and body["interrupted"] is True and body["exit_code"] == 130
    assert body["targets"][0]["status"] == "interrupted"


@pytest.mark.matrix
def test_time_is_honoured_and_every_target_gets_its_share(tmp_path):
    start = time.monotonic()
    proc = mf("fuzz", "--target", "triton.*", "--no-isolate", "--time", "9", "--min-examples", "1",
              "--database", "none", "--json", cwd=tmp_path)
    from mambafuzz.kernels import registry  # every project kernel, one per contract
    kernels = [name for name in registry.TARGETS if name.startswith("triton.")]
    wall = time.monotonic() - start
    body = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    targets = body["targets"]
    assert len(targets) == len(kernels) and all(t["examples"] > 0 and t["stop"] == "time" for t in targets), targets
    fuzzing = sum(t["seconds"] for t in targets)
    assert 8.0 <= fuzzing <= 9.9, fuzzing
    assert wall < 9.9 + 15  # start-up (torch, triton imports) is not part of the budget


@pytest.mark.matrix
def test_output_at_80_columns_keeps_commands_and_paths_whole(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_WRONG.replace("time.sleep(0.05)", "pass"))
    proc = mf("fuzz", "--target", "slow:copy", "--contract", "batch_memcpy", "--no-isolate", "--seed", "3",
              "--database", "none", "--crashes-dir", "a-rather-long-folder-name-for-crash-files-of-this-run",
              "--shrink-time", "5", cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    replay = [line for line in lines if line.strip().startswith("replay: ")]
    assert len(replay) == 1
    command = replay[0].split("replay: ", 1)[1]
    assert command.startswith("mambafuzz replay /") and command.endswith("--mode race")
    saved = [line for line in lines if line.strip().startswith("saved: ")][0].split("saved: ", 1)[1]
    assert (tmp_path / saved).exists()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table)
    assert proc.stdout.endswith("\n")


def test_help_shows_defaults_and_the_exit_codes_within_80_columns(tmp_path):
    proc = mf("fuzz", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    assert "(default: 1000)" in proc.stdout and "exit codes:" in proc.stdout and "130" in proc.stdout
    assert all(len(line) <= 80 for line in proc.stdout.splitlines()), max(proc.stdout.splitlines(), key=len)

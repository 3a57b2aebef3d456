"""pytest plugin (registered as the ``mambafuzz`` pytest11 entry point: on by install).

- ``--mambafuzz-device cpu|cuda|auto``: the device of every ``mambafuzz.check``
  in the run, chosen when pytest starts, before test modules are imported, so
  that your own ``@triton.jit`` kernels are defined interpreted on ``cpu``;
- ``--mambafuzz-examples N``, ``--mambafuzz-reps N``: win over the
  arguments of each check (a nightly job can run deeper than the test says);
- ``--mambafuzz-crashes DIR``: the crash files (default ``<rootdir>/crashes``);
  a test's saved crash files are replayed first on its next run and it fails
  at once if one still fails (a regression corpus);
- ``--mambafuzz-option NAME=VALUE`` (repeatable): a contract option for every
  check whose contract declares NAME, over the test's own (``--help`` lists
  them, each with the contracts it applies to).

On a machine without a GPU (no NVIDIA or AMD driver) and with no device asked
for (option, ``MAMBAFUZZ_DEVICE``, ``TRITON_INTERPRET``), the plugin chooses
the CPU before collection, so a plain ``pytest`` defines your kernels
interpreted; the header says which device the run uses and why.

A ``mambafuzz.Failure`` shows the verdict, the witness, the crash file, the
``mambafuzz replay`` command and a ``rerun:`` line (the test's own pytest
command, with the ``--mambafuzz-*`` options in effect); mambafuzz's frames
are hidden from the traceback.  The ``mambafuzz_check`` fixture is
``mambafuzz.check`` for tests that prefer a fixture to an import.  Without any option the plugin only sets
relative crash and example folders to the rootdir's, adds the rerun line and,
without a GPU, chooses the CPU (a GPU machine's run that did not ask keeps
each check's own device).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

import pytest

from mambafuzz import api
from mambafuzz.errors import UsageError

_RERUN_OPTIONS = pytest.StashKey[tuple]()  # (environment prefix, options) of the rerun line
_HEADER = pytest.StashKey[str]()          # the header line: the device of the run and why
# A GPU driver's files: their absence on Linux means no GPU, without importing torch (seconds) to ask.
GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def gpu_present() -> bool:
    """Whether this machine may have a GPU mambafuzz can use: a driver's files on Linux; elsewhere torch's
    word (imported only there)."""
    if sys.platform.startswith("linux"):
        return any(os.path.exists(f) for f in GPU_DRIVER_FILES)
    try:
        import torch  # deferred: torch takes seconds to import
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


class _OptionsHelp(str):
    """The help of --mambafuzz-option, written when argparse formats it (``help % params``): it lists
    every contract's options, which imports the contracts, and a pytest run that shows no help must not
    pay for that."""

    def __mod__(self, params):
        try:
            from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

            listed = "; ".join(f"{o.name}={'|'.join(map(str, o.choices))} ({', '.join(o.contracts)})"
                               for o in contracts.options())
        except Exception as exc:  # noqa: BLE001 - help must show whatever a user contract does
            listed = f"(cannot list them: {type(exc).__name__}: {exc})"
        return str(self) + " Options: " + listed


def _option_pair(text: str) -> tuple[str, str]:

    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (a contract option), got {text!r}")
    return name.strip().replace("-", "_"), value.strip()


def _positive_int(text: str) -> int:

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def pytest_addoption(parser):
    group = parser.getgroup("mambafuzz", "mambafuzz: fuzz state-moving kernels from tests")
    group.addoption("--mambafuzz-device", choices=("cpu", "cuda", "auto"), default=None,
                    help="device of every mambafuzz.check (cpu: Triton's interpreter with the race check); "
                         "default: cpu on a machine without a GPU, else each check's own, MAMBAFUZZ_DEVICE, "
                         "or cpu")
    group.addoption("--mambafuzz-examples", type=_positive_int, default=None, metavar="N",
                    help="examples per mambafuzz.check (wins over max_examples=)")
    group.addoption("--mambafuzz-reps", type=_positive_int, default=None, metavar="N",
                    help="repetitions per case (wins over reps=)")
    group.addoption("--mambafuzz-crashes", default=None, metavar="DIR",
                    help="crash files: saved there, replayed first next run (default <rootdir>/crashes)")
    group.addoption("--mambafuzz-option", type=_option_pair, action="append", default=None, metavar="NAME=VALUE",
                    help=_OptionsHelp("a contract option (what the kernel supports) for every mambafuzz.check "
                                      "whose contract declares NAME, over the test's own; repeatable."))


def pytest_configure(config):
    ctx = {"rootdir": str(config.rootpath)}
    chosen = config.getoption("mambafuzz_device", None)
    header = None
    if not chosen and not os.environ.get("MAMBAFUZZ_DEVICE") and os.environ.get("TRITON_INTERPRET") is None \
            and not gpu_present():  # without a GPU every compiled kernel fails: interpret them (race check)
        chosen, header = "cpu", "mambafuzz: no GPU found: device cpu (Triton's interpreter, race check)"
    if chosen:  # mambafuzz.control.device is imported only then: it notes the TRITON_INTERPRET the run started with
        from mambafuzz.control import device  # deferred: it notes TRITON_INTERPRET as the process had it when first imported

        try:
            ctx["device"] = device.select(chosen)  # before test modules define their kernels
        except UsageError as exc:
            raise pytest.UsageError(f"--mambafuzz-device {chosen}: {exc}") from None
    config.stash[_HEADER] = header or _header_line(ctx.get("device"))
    given = config.getoption("mambafuzz_option", None)
    if given:
        ctx["options"] = _checked_options(dict(given))
    for option, key in (("mambafuzz_examples", "max_examples"), ("mambafuzz_reps", "reps")):
        if config.getoption(option, None):
            ctx[key] = config.getoption(option)
    crashes = config.getoption("mambafuzz_crashes", None)
    if crashes:
        ctx["crashes_dir"] = str(Path(crashes).absolute())
    config.stash[_RERUN_OPTIONS] = _rerun_options(ctx)
    api.PYTEST_CONTEXT.clear()
    api.PYTEST_CONTEXT.update(ctx)


def _checked_options(given: dict) -> dict:
    """--mambafuzz-option's names, each one some contract declares (values: each check checks its own)."""
    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

    try:
        known = {o.name for o in contracts.options()}
    except UsageError as exc:  # a user contract's entry point that cannot load
        raise pytest.UsageError(f"--mambafuzz-option: {exc}") from None
    unknown = sorted(set(given) - known)
    if unknown:
        raise pytest.UsageError(f"--mambafuzz-option: no contract declares {', '.join(unknown)} "
                                f"(known: {', '.join(sorted(known))})")
    return given


def _header_line(device: str | None) -> str:
    """Which device this run's checks use, and who said so (pytest's header, one line)."""
    if device:
        return f"mambafuzz: device {device} (--mambafuzz-device)"
    if os.environ.get("MAMBAFUZZ_DEVICE"):
        return f"mambafuzz: device {os.environ['MAMBAFUZZ_DEVICE']} (MAMBAFUZZ_DEVICE)"
    interpret = os.environ.get("TRITON_INTERPRET")
    if interpret in ("0", "1"):
        return f"mambafuzz: device {'cpu' if interpret == '1' else 'cuda'} (TRITON_INTERPRET={interpret})"
    return "mambafuzz: device per check (default cpu); --mambafuzz-device sets it"


def pytest_report_header(config):
    line = config.stash.get(_HEADER, None)
    return [line] if line else None


def _rerun_options(ctx: dict) -> tuple[str, str]:
    """The mambafuzz options in effect, as the rerun line must give them again: the device as chosen
    (MAMBAFUZZ_DEVICE when no option chose it), the counts, the crash folder absolute."""

    words = []
    if ctx.get("device"):
        words += ["--mambafuzz-device", ctx["device"]]
    for key, option in (("max_examples", "--mambafuzz-examples"), ("reps", "--mambafuzz-reps"),
                        ("crashes_dir", "--mambafuzz-crashes")):
        if ctx.get(key):
            words += [option, str(ctx[key])]
    for name, value in (ctx.get("options") or {}).items():
        words += ["--mambafuzz-option", f"{name}={value}"]
    env = os.environ.get("MAMBAFUZZ_DEVICE")
    prefix = f"MAMBAFUZZ_DEVICE={shlex.quote(env)} " if env and not ctx.get("device") else ""
    return prefix, " ".join(shlex.quote(w) for w in words)


def pytest_unconfigure(config):
    api.PYTEST_CONTEXT.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A failing check names the command that runs this test again (it replays the saved case first)."""
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    prefix, options = item.config.stash.get(_RERUN_OPTIONS, ("", ""))
    api.PYTEST_CONTEXT["rerun"] = " ".join(filter(None, (f"{prefix}pytest", shlex.quote(f"{item.path}::{rest}"), options)))
    try:
        yield
    finally:
        api.PYTEST_CONTEXT.pop("rerun", None)


@pytest.fixture
def mambafuzz_check():
    """``mambafuzz.check`` with this run's ``--mambafuzz-*`` options applied."""
    return api.check

"""mambafuzz as a library: ``check(fn, contract=...)`` from your own tests.

``check`` runs the engine the CLI runs (``fuzz.fuzz_target`` through
``runner.run_in_process``) on one function and either returns the target's
report or raises exactly one of:

- ``mambafuzz.Failure`` (also an ``AssertionError``): the function is wrong.
  It carries the shrunk case, the verdict summary (first differing bytes, or
  the race witness), the crash file and the command that replays it;
- ``mambafuzz.Inconclusive``: nothing conclusive was checked (too few valid
  examples, an interpreter that cannot run the kernel, an internal error):
  never a silent pass;
- ``mambafuzz.UsageError``: bad arguments (an unknown contract or option, a
  function that does not fit the contract), one line.

``reject(why)``, called inside the function, declines an input it does not
support: counted with its reason, neither a finding nor a valid example.

Saved crash files are a regression corpus: before fuzzing, ``check`` replays
every crash file under ``<crashes_dir>/<contract>/<target>/`` and fails at
once if one still fails (like Hypothesis' example database, but readable and
replayable from the CLI).

Device first: Triton decides compiled-or-interpreted when ``@triton.jit``
runs, so ``check`` calls ``device.select`` before it imports anything that
imports kernels; this module imports neither torch nor triton.  Your own
``@triton.jit`` kernels are defined when your module is imported: on the CPU
set ``TRITON_INTERPRET=1`` (or pass ``--mambafuzz-device cpu`` to pytest)
before that.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mambafuzz.control import exits
from mambafuzz.control.clock import Deadline
from mambafuzz.errors import Failure, Inconclusive, InternalError, Rejected, UsageError
from mambafuzz.judge.signature import check as check_signature

__all__ = ["check", "reject", "Failure", "Inconclusive", "Rejected", "UsageError"]

# Set by the pytest plugin: command-line options that win over check()'s arguments
# ("device", "max_examples", "reps", "crashes_dir", "database", "options": contract options by name),
# and "rerun" for the running test.
PYTEST_CONTEXT: dict[str, Any] = {}


def reject(why: str = ""):
    """Decline this input from inside the target (an adapter, a launcher): raises ``Rejected(why)``.

    For a kernel that supports only part of its contract (at most 8 pairs, one
    dtype): the example counts as rejected, with `why`, never as a finding nor
    as clean evidence; too few valid examples left is inconclusive.
    """
    raise Rejected(why)


def _spec_of(fn) -> str | None:
    """``module:function`` when `fn` can be imported by that name again (what ``mambafuzz replay`` needs)."""
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qual or module == "__main__" or "." in qual or "<" in qual:
        return None
    return f"{module}:{qual}" if getattr(sys.modules.get(module), qual, None) is fn else None


def _target(fn, contract: str, name: str | None, overlap: str):
    """A user Target for `fn`; a replayable name (module:function) when there is one."""
    from mambafuzz.kernels import registry  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)

    from mambafuzz.control.targets import user_target  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    spec = _spec_of(fn)
    if name is None:
        name = spec or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
    if name == spec:
        return user_target(spec, contract, overlap), True  # records where to import it from, for replay
    doc = (getattr(fn, "__doc__", None) or "").strip() or "user kernel"
    return registry.Target(name=name, contract=contract, kind="user", overlap=overlap,
                           description=doc.splitlines()[0], fn=fn), False


def _device_from_triton() -> str | None:
    """The device the process's Triton mode already implies (TRITON_INTERPRET set by a select or by hand)."""
    return {"1": "cpu", "0": "cuda"}.get(os.environ.get("TRITON_INTERPRET", ""))


def _under_root(path):
    """Under pytest a relative folder is the rootdir's, whatever the working directory."""
    root = PYTEST_CONTEXT.get("rootdir")
    if path is None or root is None or "://" in str(path) or Path(path).is_absolute():
        return path
    return Path(root) / path


def _check_options(contract, options: dict, profile) -> None:
    """Unknown options and bad values are usage errors, before anything runs."""
    known = {o.name: o for o in contract.cli_options}
    unknown = sorted(set(options) - set(known))
    if unknown:
        listed = ", ".join(known) or "none"
        raise UsageError(f"unknown option(s) {', '.join(unknown)} for contract {contract.name} "
                         f"(its options: {listed})")
    for name, value in options.items():
        choices = known[name].choices
        if isinstance(value, bool) and set(choices) == {"no", "yes"}:
            continue
        if isinstance(value, bool) or not (value in choices or str(value) in choices):
            shown = ", ".join(map(str, choices))
            raise UsageError(f"{contract.name} option {name} must be one of {shown}, got {value!r}")
    contract.strategy(profile, **options)  # each contract checks its own values (UsageError)


def witness_lines(verdict) -> list[str]:
    """The race witness: the source line of each access of the first hazard ('store: file.py:40: ...')."""
    if not verdict.hazards:
        return []
    body = verdict.hazards[0].to_json()
    return [f"{access.get('op', '?')}: {access['line']}" for access in (body.get("first"), body.get("second"))
            if isinstance(access, dict) and access.get("line")]


def failure_message(finding, *, replay: str | None, rerun: str | None, replayed: bool) -> str:
    """What a Failure says: the verdict, the witness, the case, the file and how to run it again."""
    verdict = finding.verdict
    how = " (a saved crash file, replayed before fuzzing, still fails)" if replayed else ""
    lines = [f"{finding.target} breaks the {finding.contract} contract: {verdict.kind}{how}",
             f"  {verdict.summary()}"]
    lines += [f"  {'witness:' if i == 0 else '        '} {line}" for i, line in enumerate(witness_lines(verdict))]
    lines.append(f"  case: {finding.case.describe()}")
    lines += [f"  {line}" for line in finding.gpu_lines()]
    if finding.path is not None:
        lines.append(f"  saved: {finding.path}")
    if replay:
        lines.append(f"  replay: {replay}")
    if rerun:
        lines.append(f"  rerun: {rerun}")
    return "\n".join(lines)


def _failure(finding, replayable: bool, replayed: bool, report=None) -> Failure:
    from mambafuzz.findings import replay_command  # deferred: crash files import the engine (numpy, the contracts)

    replay = replay_command(finding.path, finding) if replayable and finding.path is not None else None
    rerun = PYTEST_CONTEXT.get("rerun")
    return Failure(failure_message(finding, replay=replay, rerun=rerun, replayed=replayed), finding=finding,
                   replay=replay, rerun=rerun, replayed=replayed, report=report)


COMPILED_HINT = ("your kernels were defined compiled but this run is on the CPU: set TRITON_INTERPRET=1 "
                 "(or pytest --mambafuzz-device cpu) before they are imported")


def inconclusive_text(target: str, why: str, device: str, saved: Path | str | None = None) -> str:
    """An Inconclusive's one line, its reason first (pytest's summary line shows about 100 characters):
    the hint when the user's kernels were defined compiled in a CPU run, else `why`; then the target and,
    for a saved crash file replayed first, the file."""
    compiled = device == "cpu" and any(t in why for t in ("cpu tensor?", "active drivers"))
    where = f"target {target}" + (f", saved case {saved}" if saved is not None else "")
    if compiled:
        return f"{COMPILED_HINT}; {where}: {why}"
    return f"{'a saved case could not be checked: ' if saved is not None else ''}{why}; {where}"


def _replay_saved(target, opts, replayable: bool) -> list[Path]:
    """Replay this target's saved crash files; raise Failure on the first that still fails."""
    __tracebackhide__ = True  # pytest shows the test's line, not this loop
    from mambafuzz import findings  # deferred: crash files import the engine (numpy, the contracts)
    from mambafuzz.judge.engine import run_case  # deferred: the engine imports numpy and the contracts: only for a run

    if opts.crashes_dir is None:
        return []
    folder = Path(opts.crashes_dir) / target.contract / findings.safe_name(target.name)
    paths = sorted(p for p in folder.glob("*.json") if not p.name.startswith(".")) if folder.is_dir() else []
    for path in paths:
        record = findings.load(path)  # a corrupt file in the corpus is a CrashFileError (a UsageError)
        try:
            verdict = run_case(target.fn, record.case, opts.device, reps=opts.reps, mode=opts.mode)
        except Rejected:  # the target declines this case now (mambafuzz.reject): no failure, not replayed
            paths = [p for p in paths if p != path]
            continue
        except Inconclusive as exc:  # one line, the hint first; the kernel's traceback says no more
            raise Inconclusive(inconclusive_text(target.name, str(exc), opts.device, saved=path)) from None
        except InternalError as exc:  # mambafuzz's own: its traceback is worth keeping
            raise Inconclusive(inconclusive_text(target.name, str(exc), opts.device, saved=path)) from exc
        if verdict.failed:
            finding = findings.Finding(target=target.name, contract=target.contract, device=opts.device,
                                       mode=opts.mode, case=record.case, verdict=verdict, path=path)
            raise _failure(finding, replayable, replayed=True)
    return paths


def check(fn, contract: str, *, device: str | None = None, max_examples: int = 100, min_examples: int = 10,
          reps: int | None = None, seed: int | None = None, crashes_dir: str | Path | None = "crashes",
          name: str | None = None, time: float | None = None, shrink_time: float = 30.0,
          mode: str | None = None, profile: str | None = None, database: str | None = ".mambafuzz/examples",
          **options):
    """Fuzz `fn` against `contract`; return the report (status clean) or raise Failure / Inconclusive.

    `fn` is called as the contract says (README "Arguments per contract").
    `options` are the contract's own options (README "Arguments per
    contract", the option table).  `device`: cpu (Triton's interpreter with the race check),
    cuda or auto; None reads ``MAMBAFUZZ_DEVICE``, else the mode
    ``TRITON_INTERPRET`` already says, else cpu.  `reps`: None is 1 on cpu,
    100 on cuda.  `crashes_dir` None saves nothing and replays nothing; `name` names the
    target (its crash folder; default ``module:function``, which ``mambafuzz
    replay`` can import again).  `time` bounds the whole run, shrinking
    (`shrink_time`) included.  Under pytest, ``--mambafuzz-*`` options win
    over these arguments.  The report also lists ``replayed``: the crash
    files replayed first that passed.
    """
    __tracebackhide__ = True  # pytest shows the test's line, not mambafuzz's frames
    ctx = PYTEST_CONTEXT
    device = ctx.get("device") or device or os.environ.get("MAMBAFUZZ_DEVICE") or _device_from_triton() or "cpu"
    max_examples = ctx.get("max_examples") or max_examples
    given = ctx.get("options") or {}  # --mambafuzz-option NAME=VALUE: over the test's own, where it applies
    reps = ctx.get("reps") or reps
    crashes_dir = _under_root(ctx.get("crashes_dir", crashes_dir))
    database = _under_root(ctx.get("database", database))
    for label, value in (("max_examples", max_examples), ("min_examples", min_examples), ("reps", reps or 1),
                         ("shrink_time", shrink_time), ("time", time or 1)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UsageError(f"check(): {label} must be a positive number, got {value!r}")
    from mambafuzz.control import device as device_mod  # deferred: it notes TRITON_INTERPRET as the process had it when first imported

    device = device_mod.select(device)  # before anything below imports the kernels

    from mambafuzz import strategies  # deferred: Hypothesis loads with the first strategy, not with the parser

    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without
    from mambafuzz.run import runner  # deferred: the runner imports the fuzz loop (Hypothesis, numpy): only for a run
    from mambafuzz.search.fuzz import FuzzOptions, check_database  # deferred: the fuzz loop imports Hypothesis, numpy and the engine: only for a run

    spec = contracts.get(contract)
    options = {**options, **{k: v for k, v in given.items() if k in {o.name for o in spec.cli_options}}}
    mode = mode or ("race" if device == "cpu" else "compare")
    if mode not in ("race", "compare") or (mode == "race" and device != "cpu"):
        raise UsageError(f"check(): mode {mode!r} is not available on {device} (race needs cpu)")
    if profile is not None and profile not in strategies.PROFILES:
        raise UsageError(f"check(): unknown profile {profile!r} (known: {', '.join(strategies.PROFILES)})")
    chosen = strategies.PROFILES[profile or ("cpu" if device == "cpu" else "gpu")]
    _check_options(spec, options, chosen)
    if not callable(fn):
        raise UsageError(f"check(): fn must be callable, got {type(fn).__name__}")
    target, replayable = _target(fn, spec.name, name, options.get("overlap", "full"))
    check_signature(target.fn, spec.name, target.name)
    if database is not None:
        check_database(database)
    opts = FuzzOptions(device=device, mode=mode, reps=reps or (1 if device == "cpu" else 100),
                       max_examples=int(max_examples), min_examples=int(min_examples), shrink_budget=shrink_time,
                       seed=seed, database=None if database is None else str(database),
                       crashes_dir=None if crashes_dir is None else Path(crashes_dir), profile=chosen,
                       contract_options=dict(options))
    replayed = _replay_saved(target, opts, replayable)
    report = runner.run_in_process([target], opts, deadline=Deadline(time))[0]  # the run's one clock
    report.replayed = replayed
    code = exits.exit_code([report.status])  # what the CLI would exit with, as pytest's outcome
    if code == exits.EXIT_FINDINGS:
        raise _failure(report.finding, replayable, replayed=False, report=report)
    if code == exits.EXIT_INTERRUPTED:
        raise KeyboardInterrupt(f"mambafuzz: {target.name} interrupted")
    if code != exits.EXIT_CLEAN:
        exc = Inconclusive(inconclusive_text(target.name, report.why, device))
        exc.report = report
        raise exc
    return report

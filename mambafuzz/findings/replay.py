"""Replay saved crash files: does each still fail, and how often (k/N)?

Each file gets one row, whatever happens to the others:

- ``still failing`` / ``fixed``: the target ran on the saved case (a recorded
  hazard, race or oob, and a clean race check are deterministic: shown as the
  kind and its kernel lines, never as k/N);
- ``could not run``: bad input -- the file is invalid (the reason names the
  file and the field), its target cannot be imported, or the contracts differ;
- ``inconclusive``: nothing could be checked (Triton's interpreter cannot run
  the kernel) or mambafuzz itself failed.

The rows' statuses are the command's exit code (``control.exits.exit_code``):
1 if any file still fails; else 2 if any could not run (or there was no file);
else 3 if any was inconclusive; else 0.

A file of kind ``fault``, ``crash`` or ``hang`` (and every file on ``cuda``)
replays in a child process that sends its row back as JSON; a child that dies
or stalls is still failing, with a verdict of kind ``crash`` or ``hang``.

The target is the recorded one (a user ``module:function`` is imported from
the file's ``target_path``), or ``--against``: a registry name, or
``module:function`` taking its contract and overlap from each crash file
unless ``contract`` / ``overlap`` override them.
"""
from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from pathlib import Path

from mambafuzz import findings
from mambafuzz.judge.engine import FAULT_KINDS, Verdict, run_case
from mambafuzz.errors import Inconclusive, InternalError, Rejected, UsageError
from mambafuzz.judge.signature import check as check_signature

STILL_FAILING, FIXED, COULD_NOT_RUN, INCONCLUSIVE = "still failing", "fixed", "could not run", "inconclusive"


@dataclass
class ReplayRow:
    path: Path
    target: str
    status: str  # one of the four above
    verdict: Verdict | None = None
    reason: str = ""

    def to_json(self) -> dict:
        """deterministic and line are derived, for readers."""
        return {"path": str(self.path), "target": self.target, "status": self.status,
                "verdict": self.verdict.to_json() if self.verdict else None, "reason": self.reason,
                "deterministic": self.deterministic, "line": self.line()}

    @property
    def deterministic(self) -> bool:
        """A recorded hazard, or a clean run under the CPU race recorder: a verdict, not a rate."""
        return self.verdict is not None and findings.deterministic(self.verdict)

    def rate(self) -> str:
        """The k/N cell: a recorded hazard's kind (race, oob), 'clean' for a clean race check."""
        if self.verdict is None:
            return ""
        if self.deterministic:
            return self.verdict.kind or "clean"
        return f"{self.verdict.failures}/{self.verdict.reps}"

    def detail(self) -> str:
        """Why it could not run, or the verdict's evidence (a clean race check says it is no rate)."""
        if self.reason or self.verdict is None:
            return self.reason
        return self.verdict.summary() if self.verdict.failed else findings.rate_line(self.verdict)

    def divergence(self) -> str:
        """A GPU crash file replayed on the CPU: where the interpreted values differ from the GPU's."""
        return (self.verdict.divergence or "") if self.verdict is not None else ""

    def line(self) -> str:
        """The row's verdict in one line: 'still failing: race at copy.py:214 (store) and ... (deterministic)',
        'fixed: 0/100 (rate < 0.03 at 95%)'."""
        if self.verdict is None:
            return f"{self.status}: {self.reason}"
        return f"{self.status}: {findings.rate_line(self.verdict)}"

    @classmethod
    def from_json(cls, body: dict) -> "ReplayRow":
        verdict = body.get("verdict")
        return cls(Path(body["path"]), body["target"], body["status"],
                   Verdict.from_json(verdict) if verdict else None, body.get("reason", ""))


@dataclass(frozen=True)
class Against:
    """`--against`: a target to run instead of the recorded one (picklable, for the child process)."""

    spec: str
    contract: str | None = None
    overlap: str | None = None


def _as_against(against) -> Against | None:
    if against is None or isinstance(against, Against):
        return against
    if isinstance(against, str):
        return Against(against)
    return Against(against.name, against.contract, against.overlap)  # a registry Target


def _target_for(record: findings.CrashRecord, against: Against | None):
    from mambafuzz.control.targets import resolve_one  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    contract = record.case.contract
    if against is None:
        target = resolve_one(record.target, contract=contract, overlap=record.overlap,
                             target_path=record.target_path)
    else:
        target = resolve_one(against.spec, contract=against.contract or contract,
                             overlap=against.overlap or record.overlap)
    if target.kind == "user" and target.contract == contract:
        check_signature(target.fn, target.contract, target.name)  # a misfit is bad input, not a finding
    return target


def replay_one(record: findings.CrashRecord, *, device: str, reps: int | None, mode: str | None,
               against=None) -> ReplayRow:
    """Run one loaded crash file; never raises for what the file or the target does.

    `against` is None, an ``Against``, a spec string, or a Target object (used as it is).
    """
    given = against if hasattr(against, "fn") else None
    against = _as_against(against)
    name = against.spec if against is not None else record.target
    try:
        target = given or _target_for(record, against)
        if target.contract != record.case.contract:
            return ReplayRow(record.path, name, COULD_NOT_RUN,
                             reason=f"target contract {target.contract} != crash contract {record.case.contract}")
        compiled = None
        if device == "cpu" and record.body.get("device") == "cuda" and against is None:
            compiled = Verdict.from_json(record.body["verdict"]).mismatch   # what the GPU recorded
        verdict = run_case(target.fn, record.case, device, reps=reps or record.body.get("reps") or 1,
                           mode=mode or record.body["mode"], compiled=compiled)
    except UsageError as exc:  # CaseError too: geometry the oracle rejects
        return ReplayRow(record.path, name, COULD_NOT_RUN, reason=str(exc))
    except (Inconclusive, InternalError, Rejected) as exc:  # Rejected: the target declines the case now
        return ReplayRow(record.path, name, INCONCLUSIVE, reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - one file's failure must not lose the others' results
        return ReplayRow(record.path, name, INCONCLUSIVE,
                         reason=f"internal error in mambafuzz: {type(exc).__name__}: {exc}")
    return ReplayRow(record.path, name, STILL_FAILING if verdict.failed else FIXED, verdict)


def _child(path, device, reps, mode, against, conn) -> None:
    from mambafuzz.control import device as device_mod  # deferred: it notes TRITON_INTERPRET as the process had it when first imported

    try:
        device_mod.select(device)
        row = replay_one(findings.load(path), device=device, reps=reps, mode=mode, against=against)
    except Exception as exc:  # noqa: BLE001 - answer with a row; dying would read as a crash finding
        row = ReplayRow(path, "?", COULD_NOT_RUN if isinstance(exc, UsageError) else INCONCLUSIVE, reason=str(exc))
    conn.send(row.to_json())


def replay_isolated(record: findings.CrashRecord, *, device: str, reps: int | None, mode: str | None,
                    against=None, timeout: float = 120.0) -> ReplayRow:
    """A crash or hang finding is replayed in a child process: it may kill or stall its process again."""

    against = _as_against(against)
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    name = against.spec if against is not None else record.target
    proc = ctx.Process(target=_child, args=(record.path, device, reps, mode, against, send), daemon=True)
    proc.start()
    send.close()
    finished = recv.poll(timeout)
    if finished:
        try:
            row = ReplayRow.from_json(recv.recv())
            proc.join(10)
            if row.status in (COULD_NOT_RUN, INCONCLUSIVE):
                row.target = name
            row.path = record.path
            return row
        except EOFError:  # the child died before it could answer
            proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join(10)
    kind, why = (("crash", f"replay process died (exit code {proc.exitcode})") if finished
                 else ("hang", f"no result within {timeout:g} s"))
    verdict = Verdict(reps=1, failures=1, mode=mode or record.body["mode"], fault=why, fault_kind=kind)
    return ReplayRow(record.path, name, STILL_FAILING, verdict)


def replay(paths: list[Path], *, device: str, reps: int | None = None, mode: str | None = None,
           against=None, timeout: float = 120.0) -> list[ReplayRow]:
    """One row per crash file under `paths`; an invalid file is a row, and the others still run."""
    if mode is None and device != "cpu":
        mode = "compare"  # the race recorder is the interpreter's
    rows = []
    for path in findings.crash_files(paths):
        try:
            record = findings.load(path)
        except findings.CrashFileError as exc:
            rows.append(ReplayRow(path, "?", COULD_NOT_RUN, reason=str(exc)))
            continue
        if record.kind in FAULT_KINDS or device == "cuda":
            rows.append(replay_isolated(record, device=device, reps=reps, mode=mode, against=against,
                                        timeout=timeout))
        else:
            rows.append(replay_one(record, device=device, reps=reps, mode=mode, against=against))
    return rows


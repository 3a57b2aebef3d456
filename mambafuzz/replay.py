"""Replay saved crash files: does each still fail, and how often (k/N)?"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import crashes
from .engine import Verdict, run_case
from .errors import CaseError, UsageError


@dataclass
class ReplayRow:
    path: Path
    target: str
    status: str  # "still failing" | "fixed" | "could not run"
    verdict: Verdict | None = None
    reason: str = ""

    def to_json(self) -> dict:
        return {"path": str(self.path), "target": self.target, "status": self.status,
                "verdict": self.verdict.to_json() if self.verdict else None, "reason": self.reason}


def replay_one(record: crashes.CrashRecord, *, device: str, reps: int | None, mode: str | None,
               against=None) -> ReplayRow:
    from .targets import resolve

    name = against.name if against is not None else record.target
    try:
        target = against if against is not None else resolve([record.target])[0]
        if target.contract != record.case.contract:
            return ReplayRow(record.path, name, "could not run",
                             reason=f"target contract {target.contract} != crash contract {record.case.contract}")
        verdict = run_case(target.fn, record.case, device, reps=reps or int(record.body.get("reps") or 1),
                           mode=mode or record.body["mode"])
    except (UsageError, CaseError) as exc:
        return ReplayRow(record.path, name, "could not run", reason=str(exc))
    status = "still failing" if verdict.failed else "fixed"
    return ReplayRow(record.path, name, status, verdict)


def replay(paths: list[Path], *, device: str, reps: int | None = None, mode: str | None = None,
           against=None) -> list[ReplayRow]:
    rows = []
    for path in crashes.crash_files(paths):
        try:
            record = crashes.load(path)
        except crashes.CrashFileError as exc:
            rows.append(ReplayRow(path, "?", "could not run", reason=str(exc)))
            continue
        rows.append(replay_one(record, device=device, reps=reps, mode=mode, against=against))
    return rows

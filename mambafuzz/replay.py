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
        target = against if against is not None else resolve([record.target], contract=record.case.contract)[0]
        if target.contract != record.case.contract:
            return ReplayRow(record.path, name, "could not run",
                             reason=f"target contract {target.contract} != crash contract {record.case.contract}")
        verdict = run_case(target.fn, record.case, device, reps=reps or int(record.body.get("reps") or 1),
                           mode=mode or record.body["mode"])
    except (UsageError, CaseError) as exc:
        return ReplayRow(record.path, name, "could not run", reason=str(exc))
    status = "still failing" if verdict.failed else "fixed"
    return ReplayRow(record.path, name, status, verdict)


def _child(path, device, reps, mode, against_spec, conn) -> None:
    from . import device as device_mod
    from .targets import resolve

    device_mod.select(device)
    against = resolve([against_spec])[0] if against_spec else None
    row = replay_one(crashes.load(path), device=device, reps=reps, mode=mode, against=against)
    v = row.verdict
    conn.send((row.target, row.status, row.reason,
               None if v is None else (v.kind, v.summary(), v.failures, v.reps)))


def replay_isolated(record: crashes.CrashRecord, *, device: str, reps: int | None, mode: str | None,
                    against=None, timeout: float = 120.0) -> ReplayRow:
    """A crash or hang finding is replayed in a child process: it may kill or stall its process again."""
    import multiprocessing as mp

    from .session import VerdictInfo

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    name = against.name if against is not None else record.target
    proc = ctx.Process(target=_child, args=(record.path, device, reps, mode,
                                            against.name if against is not None else None, send), daemon=True)
    proc.start()
    send.close()
    finished = recv.poll(timeout)
    if finished:
        try:
            target, status, reason, v = recv.recv()
            proc.join(10)
            return ReplayRow(record.path, target, status, VerdictInfo(*v) if v else None, reason)
        except EOFError:  # the child died before it could answer
            proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join(10)
    why = (f"crash: replay process died (exit code {proc.exitcode})" if finished
           else f"hang: no result within {timeout:g} s")
    return ReplayRow(record.path, name, "still failing", VerdictInfo("fault", why, 1, 1))


def replay(paths: list[Path], *, device: str, reps: int | None = None, mode: str | None = None,
           against=None, timeout: float = 120.0) -> list[ReplayRow]:
    rows = []
    for path in crashes.crash_files(paths):
        try:
            record = crashes.load(path)
        except crashes.CrashFileError as exc:
            rows.append(ReplayRow(path, "?", "could not run", reason=str(exc)))
            continue
        if record.body["verdict"].get("kind") == "fault" or device == "cuda":
            rows.append(replay_isolated(record, device=device, reps=reps, mode=mode, against=against,
                                        timeout=timeout))
        else:
            rows.append(replay_one(record, device=device, reps=reps, mode=mode, against=against))
    return rows

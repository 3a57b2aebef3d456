"""Reading what a report page is made from: a saved ``--json`` report, a session's state, crash files,
a collected campaign (``mambafuzz collect``'s folder: its crash files and ``CAMPAIGN_SUMMARY``).

Everything is checked here, so that rendering never meets a surprise: a bad
input is one ``UsageError`` line naming the file and what is wrong with it.
The result is plain data (``Report``, ``TargetRow``, ``FindingView``) with
everything the page shows already worked out (k/N and its 95% bound, the
replay command, the shrunk case's text).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mambafuzz.errors import CaseError, UsageError
from mambafuzz.search.features import Tally
from mambafuzz.judge.stats import rate_upper_bound

REPORT_SCHEMA = 1  # the JSON reports' shape this reads (cli.REPORT_SCHEMA)
CAMPAIGN_SUMMARY = ".campaign.json"  # what `collect` writes beside a campaign's crash files (fleet/collect.py)
CAMPAIGN_SCHEMA = 1
COMMANDS = ("fuzz", "smoke", "zoo", "replay")


@dataclass
class FindingView:
    kind: str
    device: str
    summary: str
    case_summary: str
    case_json: str                  # the shrunk case, pretty JSON
    case_hash: str
    failures: int
    reps: int
    rate_upper95: float
    first_bytes: list[dict]         # the first differing bytes: offset, where, expected, actual
    mismatch: str | None            # the mismatch's one line
    hazards: list[dict]             # the race recorder's witnesses: kind, explanation, first, second
    fault: str | None
    exception: str | None
    compile: str | None
    gpu_lines: list[str]            # rates as found / on this case, the CPU's witness
    path: str | None
    replay: str | None
    examples_to_first: int
    seconds_to_first: float
    shrink_examples: int
    deterministic: bool = False     # a recorded hazard (race, oob): a verdict, not a rate
    rate_line: str = ""             # k/N and its bound, or the hazard's kind and kernel lines
    not_minimal: str | None = None  # why shrinking stopped before its end (None: it ran to the end)
    shrink_line: str = ""           # how much shrinking the case had, and whether it ran to its end


@dataclass
class TargetRow:
    target: str
    contract: str
    status: str
    stop: str
    why: str | None
    examples: int
    reps: int
    failed_reps: int
    seconds: float
    finding: FindingView | None
    tally: Tally
    zoo_id: str | None = None
    bug: str | None = None
    caught: bool | None = None
    options: dict = field(default_factory=dict)  # the contract options that narrowed its draws

    @property
    def rate_upper95(self) -> float:
        return rate_upper_bound(self.failed_reps, self.reps) if self.reps else 1.0


@dataclass
class Report:
    source: str
    kind: str                       # fuzz | smoke | zoo | replay | session | crashes | campaign
    device: str | None
    mode: str | None
    exit_code: int | None
    interrupted: bool
    targets: list[TargetRow] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)  # replay rows as written
    campaign: dict | None = None    # a collected campaign's summary: boxes, buckets, workers

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda" or any(t.tally.cells for t in self.targets)


# ---------------------------------------------------------------- entry point
def load(path: Path | str) -> Report:
    """The report behind `path`: a JSON report file, a session state file or folder, a crash file or folder."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if path.is_dir():
        return _load_folder(path)
    body = _read_json(path)
    if isinstance(body, dict) and "targets" in body or isinstance(body, dict) and "files" in body:
        return _from_json_report(path, body)
    if isinstance(body, dict) and "reports" in body and "key" in body:
        return _from_session(path, body)
    if isinstance(body, dict) and "case" in body and "verdict" in body:
        return _from_crashes(path, [path])
    raise UsageError(f"{path}: not a mambafuzz report (no 'targets' or 'files'), session state (no 'reports') "
                     f"or crash file (no 'case')")


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a mambafuzz report (JSON nested too deeply)") from None


def _load_folder(path: Path) -> Report:
    """A collected campaign, a session state folder (the newest state in it) or a crash folder (every crash
    file under it)."""
    if (path / CAMPAIGN_SUMMARY).is_file():
        return _from_campaign(path, _read_json(path / CAMPAIGN_SUMMARY))
    files = sorted((q for q in path.rglob("*.json") if not q.name.startswith(".")),
                   key=lambda q: q.stat().st_mtime, reverse=True)
    if not files:
        raise UsageError(f"{path}: no JSON files (expected crash files or a session's state)")
    states = []
    for q in files:
        try:
            body = json.loads(q.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            continue
        if isinstance(body, dict) and "reports" in body and "key" in body:
            states.append((q, body))
    if states:
        return _from_session(*states[0])
    return _from_crashes(path, list(reversed(files)))


# ---------------------------------------------------------------- shapes
def _need(path: Path, where: str, body: dict, name: str, kind, what: str):
    value = body.get(name)
    ok = isinstance(value, kind) and not (kind in (int, (int, float)) and isinstance(value, bool))
    if not ok:
        raise UsageError(f"{path}: {where}field {name!r} must be {what}, got {_show(value)}")
    return value


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _from_json_report(path: Path, body: dict) -> Report:
    from mambafuzz.findings import schema_problem  # deferred: the CLI's start-up imports report/, findings the engine

    problem = schema_problem(body, REPORT_SCHEMA, "report")
    if problem:
        raise UsageError(f"{path}: {problem}")
    command = body.get("command")
    if command not in COMMANDS:
        raise UsageError(f"{path}: field 'command' must be one of {', '.join(COMMANDS)}, got {_show(command)}")
    report = Report(str(path), command, body.get("device"), body.get("mode"), body.get("exit_code"),
                    bool(body.get("interrupted")))
    if command == "replay":
        files = _need(path, "", body, "files", list, "a list")
        for i, row in enumerate(files):
            if not isinstance(row, dict) or not isinstance(row.get("path"), str):
                raise UsageError(f"{path}: files[{i}] must be an object with a 'path' string")
        report.files = files
        return report
    targets = _need(path, "", body, "targets", list, "a list of target objects")
    report.targets = [_target(path, f"targets[{i}] ", t) for i, t in enumerate(targets)]
    return report


def _target(path: Path, where: str, body) -> TargetRow:
    if not isinstance(body, dict):
        raise UsageError(f"{path}: {where.strip()} must be an object, got {_show(body)}")
    name = _need(path, where, body, "target", str, "a string")
    where = f"target {name}: "
    counts = {k: _need(path, where, body, k, int, "an integer") if k in body else 0
              for k in ("examples", "reps", "failed_reps")}
    seconds = body.get("seconds", 0.0)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise UsageError(f"{path}: {where}field 'seconds' must be a number, got {_show(seconds)}")
    finding = body.get("finding")
    if finding is not None and not isinstance(finding, dict):
        raise UsageError(f"{path}: {where}field 'finding' must be an object or null, got {_show(finding)}")
    try:
        tally = Tally.from_json(body)
    except (TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path}: {where}'coverage', 'race_map' or 'timeline' is malformed ({exc})") from None
    return TargetRow(target=name, contract=str(body.get("contract", "?")),
                     status=str(body.get("status", "finding" if finding else "?")),
                     stop=str(body.get("stop", "?")), why=body.get("why"), seconds=float(seconds),
                     finding=_finding(path, where, finding) if finding else None, tally=tally,
                     zoo_id=body.get("zoo_id"), bug=body.get("bug"), caught=body.get("caught"),
                     options={str(k): str(v) for k, v in (body.get("options") or {}).items()}
                     if isinstance(body.get("options"), dict) else {}, **counts)


def _finding(path: Path, where: str, body: dict, file: Path | None = None) -> FindingView:
    from mambafuzz.findings import Finding, rate_line, replay_command  # deferred: crash files import the engine (numpy, the contracts)

    try:
        f = Finding.from_json(body, path=file)
    except CaseError as exc:
        raise UsageError(f"{path}: {where}the finding's case is not valid: {exc}") from None
    except KeyError as exc:
        raise UsageError(f"{path}: {where}the finding has no field {exc}") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: {where}the finding's verdict is not valid: {exc}") from None
    v = f.verdict
    replay = body.get("replay") or (replay_command(f.path, f) if f.path else None)
    return FindingView(
        kind=v.kind or "?", device=f.device, summary=v.summary(), case_summary=f.case.describe(),
        case_json=json.dumps(f.case.to_json(), indent=1), case_hash=f.case.content_hash(),
        failures=v.failures, reps=v.reps, rate_upper95=v.rate_upper95,
        first_bytes=list(v.mismatch.first) if v.mismatch else [],
        mismatch=v.mismatch.summary() if v.mismatch else None,
        hazards=[_hazard(h.to_json()) for h in v.hazards], fault=v.fault, exception=v.exception, compile=v.compile,
        gpu_lines=f.gpu_lines(), path=str(f.path) if f.path else None, replay=replay,
        examples_to_first=f.examples_to_first, seconds_to_first=f.seconds_to_first,
        shrink_examples=f.shrink_examples, deterministic=f.deterministic, rate_line=rate_line(v),
        not_minimal=f.not_minimal, shrink_line=f.shrink_line())


def _hazard(body: dict) -> dict:
    def line(access):
        return access.get("line") if isinstance(access, dict) else None
    return {"kind": body.get("kind", "?"), "explanation": body.get("explanation", ""),
            "first": line(body.get("first")), "second": line(body.get("second"))}


def _from_session(path: Path, body: dict) -> Report:
    reports = body.get("reports")
    if not isinstance(reports, dict):
        raise UsageError(f"{path}: field 'reports' must be an object of target reports")
    targets = [_target(path, f"reports[{name!r}] ", r) for name, r in reports.items()]
    return Report(str(path), "session", _device(targets, race=any(t.tally.race for t in targets)), None, None,
                  False, targets)


def _device(targets: list[TargetRow], race: bool = False) -> str | None:
    """The device the findings ran on, when they agree (a session or crash folder does not say)."""
    devices = {t.finding.device for t in targets if t.finding}
    return "cuda" if race else devices.pop() if len(devices) == 1 else None


def _from_crashes(path: Path, files: list[Path]) -> Report:
    from mambafuzz.findings import load as load_crash  # deferred: crash files import the engine (numpy, the contracts)

    targets = []
    for file in files:
        try:
            record = load_crash(file)
        except UsageError as exc:
            raise UsageError(str(exc)) from None
        b = record.body
        view = _finding(file, "", b, file=file)
        targets.append(TargetRow(target=b["target"], contract=b["contract"], status="finding", stop="finding",
                                 why=None, examples=int(b.get("examples_to_first", 0) or 0), reps=view.reps,
                                 failed_reps=view.failures, seconds=float(b.get("seconds_to_first", 0.0) or 0.0),
                                 finding=view, tally=Tally()))
    return Report(str(path), "crashes", _device(targets), None, None, False, targets)


def _from_campaign(path: Path, body) -> Report:
    """A campaign collected into `path`: a row per target (its examples over every box, its first confirmed
    bucket as its finding), the summary kept whole for the campaign section."""
    from mambafuzz.findings import schema_problem  # deferred: crash files import the engine (numpy, the contracts)

    where = path / CAMPAIGN_SUMMARY
    if not isinstance(body, dict):
        raise UsageError(f"{where}: a campaign summary holds a JSON object")
    problem = schema_problem(body, CAMPAIGN_SCHEMA, "campaign")
    if problem:
        raise UsageError(f"{where}: {problem}")
    targets = _need(where, "", body, "targets", list, "a list of target objects")
    rows_by_key = {b.get("key"): b for b in _need(where, "", body, "buckets", list, "a list of buckets")
                   if isinstance(b, dict)}
    rows = []
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or not isinstance(t.get("target"), str):
            raise UsageError(f"{where}: targets[{i}] must be an object with a 'target' string")
        finding = None
        for key in t.get("buckets") or []:
            file = (rows_by_key.get(key) or {}).get("file")
            if file and (path / file).is_file():
                finding = _from_crashes(path, [path / file]).targets[0].finding
                break
        done = t.get("done") or {}
        rows.append(TargetRow(target=t["target"], contract=str(t.get("contract", "?")),
                              status=str(t.get("status", "?")), stop=str(done.get("stop", "open")),
                              why=done.get("why") or None, examples=int(t.get("examples", 0) or 0), reps=0,
                              failed_reps=0, seconds=float(t.get("seconds", 0.0) or 0.0), finding=finding,
                              tally=Tally()))
    device = (body.get("options") or {}).get("device")
    return Report(str(path), "campaign", device, (body.get("options") or {}).get("mode"), body.get("exit_code"),
                  False, rows, campaign=body)

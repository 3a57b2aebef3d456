"""Crash files: one small, human-readable JSON per shrunk finding.

Layout: ``<root>/<contract>/<target>/<case hash>.json``.  Files are written to a
temporary name in the same folder, fsynced and renamed into place, so a killed
writer never leaves a partial file.  A file this run wrote is rewritten as its
shrink goes on and at its end (``shrink_examples``, ``not_minimal``); one known
from before the run is never rewritten.

A file records the target's ``overlap`` and, for a user target
(``module:function``), ``target_path``: the folder its module was imported
from, which replay puts on sys.path, so that the stored ``replay`` command
(with the file's absolute path) runs as written from any directory.
``load`` checks every field's type and range and names the file and the field.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mambafuzz import contracts
from mambafuzz.contracts import case_from_json
from mambafuzz.cases import Case
from mambafuzz.judge.engine import Verdict
from mambafuzz.errors import CaseError, CrashFileError, UsageError
from mambafuzz.findings.witness import Witness

CRASH_SCHEMA = 1
_REQUIRED = ("schema", "target", "contract", "device", "mode", "case", "verdict")
# A recorded hazard: the CPU recorder sees every load and store, so it sees it on every run of the case;
# a compile error: Triton compiles the same input the same way every time.
DETERMINISTIC_KINDS = ("race", "oob", "compile")
SHRINKING = "still shrinking when written"  # not_minimal of a file (or a message) written while it shrinks
NOT_SHRUNK = "never shrunk (the case as first seen)"  # a finding made outside the fuzz loop (a worker's crash)


def deterministic(verdict: Verdict) -> bool:
    """Whether `verdict` is not a rate: a recorded hazard, or a clean run under the CPU race recorder."""
    return verdict.kind in DETERMINISTIC_KINDS or (not verdict.failed and verdict.mode == "race")


def hazard_at(verdict: Verdict) -> str:
    """Where the first hazard is, as the kernel lines of its accesses ('copy.py:214 (store) and ...')."""
    if not verdict.hazards:
        return "?"
    body = verdict.hazards[0].to_json()
    places = []
    for access in (body.get("first"), body.get("second")):
        if isinstance(access, dict) and isinstance(access.get("line"), str):
            m = re.match(r"(.*?:\d+)(:|$)", access["line"])
            places.append(f"{m.group(1) if m else access['line']} ({access.get('op', '?')})")
    return " and ".join(places) or "?"


def rate_line(verdict: Verdict) -> str:
    """How it fails, in one line: a recorded hazard by where it is, anything else as k/N."""
    if verdict.kind == "compile":
        return "does not compile for this input (deterministic)"
    if verdict.kind in DETERMINISTIC_KINDS:
        return f"{verdict.kind} at {hazard_at(verdict)} (deterministic)"
    if deterministic(verdict):
        return "no hazard and no wrong byte (the race recorder is deterministic)"
    bound = "<" if not verdict.failures else "<="
    return f"{verdict.failures}/{verdict.reps} (rate {bound} {verdict.rate_upper95:.2g} at 95%)"


@dataclass
class Finding:
    """A failing case for a target, after shrinking, with how it was found.

    ``to_json`` is the one serialisation: worker messages, resume state, the
    CLI's JSON reports and the body of a crash file (which adds its own fields,
    see ``to_record``) all hold it.
    """

    target: str
    contract: str
    device: str
    mode: str
    case: Case
    verdict: Verdict
    examples_to_first: int = 0
    seconds_to_first: float = 0.0
    shrink_examples: int = 0
    path: Path | None = None
    found_rate: list[int] | None = None   # [k, n] of the first failing case (a GPU race: before shrinking)
    witness: dict[str, Any] | None = None  # cross.Witness JSON: the CPU's word on a GPU finding
    not_minimal: str | None = NOT_SHRUNK  # why the case may not be minimal (None: shrinking ran to its end)

    @property
    def deterministic(self) -> bool:
        return self.verdict.kind in DETERMINISTIC_KINDS

    def to_json(self) -> dict[str, Any]:
        """kind, summary, case_hash, case_summary, reps, failures, deterministic and minimal are derived,
        for readers."""
        return {"target": self.target, "contract": self.contract, "device": self.device, "mode": self.mode,
                "kind": self.verdict.kind, "summary": self.verdict.summary(),
                "case_hash": self.case.content_hash(), "case_summary": self.case.describe(),
                "case": self.case.to_json(), "reps": self.verdict.reps, "failures": self.verdict.failures,
                "verdict": self.verdict.to_json(), "examples_to_first": self.examples_to_first,
                "seconds_to_first": round(self.seconds_to_first, 3), "shrink_examples": self.shrink_examples,
                "deterministic": self.deterministic, "minimal": self.not_minimal is None,
                **({"not_minimal": self.not_minimal} if self.not_minimal else {}),
                "path": str(self.path) if self.path else None,
                **({"found_rate": list(self.found_rate)} if self.found_rate else {}),
                **({"witness": self.witness} if self.witness else {})}

    def shrink_line(self) -> str:
        """How much shrinking the case had, and whether it ran to its end."""
        if self.not_minimal:
            return f"may not be minimal: {self.not_minimal} ({self.shrink_examples} shrink examples)"
        return f"shrunk in {self.shrink_examples} example(s), to the end"

    def gpu_lines(self) -> list[str]:
        """A GPU race's two rates (as found, as handed over) and the CPU's witness, one line each."""
        lines = []
        if self.found_rate and self.device == "cuda":
            k, n = self.found_rate
            lines.append(f"rate: {k}/{n} as found; {self.verdict.failures}/{self.verdict.reps} on this case "
                         f"(< {self.verdict.rate_upper95:.2g} at 95%)")
        if self.witness:
            try:
                witness = Witness.from_json(self.witness)
            except (ValueError, TypeError):
                return lines
            lines.append(witness.line())
            if witness.divergence:
                lines.append(witness.divergence)
        return lines

    @classmethod
    def from_json(cls, body: dict[str, Any], path: Path | None = None) -> "Finding":
        """The inverse of to_json; also reads a crash file (older files keep the counts under "found").

        Raises CaseError for a bad case, ValueError for a bad verdict, KeyError for a missing field.
        """
        found = {**body.get("found", {}), **{k: body[k] for k in _FOUND if k in body}}
        where = body.get("path")
        return cls(target=body["target"], contract=body["contract"], device=body["device"], mode=body["mode"],
                   case=case_from_json(body["case"]), verdict=Verdict.from_json(body["verdict"]),
                   examples_to_first=found.get("examples_to_first", 0),
                   seconds_to_first=found.get("seconds_to_first", 0.0),
                   shrink_examples=found.get("shrink_examples", 0),
                   path=path if path is not None else Path(where) if where else None,
                   found_rate=body.get("found_rate"), witness=body.get("witness"),
                   not_minimal=body.get("not_minimal") or (None if body.get("minimal", True)
                                                           else "shrinking stopped before its end"))


_FOUND = ("examples_to_first", "seconds_to_first", "shrink_examples")


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("numpy", "torch", "triton", "hypothesis"):
        try:
            env[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing package is simply not reported
            env[name] = None
    try:
        import torch  # deferred: torch takes seconds to import
        env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        env["gpu"] = None
    return env


def safe_name(target: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", target)


def crash_path(root: Path, finding: Finding) -> Path:
    return Path(root) / finding.contract / safe_name(finding.target) / f"{finding.case.content_hash()}.json"


def replay_command(path: Path, finding: Finding) -> str:
    """The command that replays `path`; absolute, so it runs from any directory."""
    cmd = f"mambafuzz replay {shlex.quote(str(Path(path).absolute()))} --device {finding.device}"
    return cmd + (" --mode race" if finding.mode == "race" else "")


def to_record(finding: Finding, path: Path) -> dict[str, Any]:
    """A crash file's body: the finding's JSON (less its path: the file is where it is) and how to replay it."""
    from mambafuzz.control.targets import user_info  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    info = user_info(finding.target) or {}
    body = {k: v for k, v in finding.to_json().items() if k != "path"}
    return {
        "schema": CRASH_SCHEMA,
        **body,
        "overlap": info.get("overlap", "full"),
        **({"target_path": info["target_path"]} if info.get("target_path") else {}),
        **({"contract_origin": origin} if (origin := contracts.get(finding.contract).origin_record()) else {}),
        "environment": environment(),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "replay": replay_command(path, finding),
    }


def atomic_write_json(path: Path, body: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(body, fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save(finding: Finding, root: Path, *, replace: bool = False) -> tuple[Path, bool]:
    """Write the finding; returns (path, written) where written is False for a known crash.

    `replace`: the caller wrote this file itself (its shrink counts have moved on): write it again.
    """
    path = crash_path(Path(root), finding)
    finding.path = path
    if path.exists() and not replace:
        return path, False
    try:
        atomic_write_json(path, to_record(finding, path))
    except OSError as exc:
        raise UsageError(f"cannot write crash file under {root}: {exc.strerror or exc}") from None
    return path, True


@dataclass
class CrashRecord:
    path: Path
    body: dict[str, Any]
    case: Case

    @property
    def target(self) -> str:
        return self.body["target"]

    @property
    def overlap(self) -> str:
        return self.body.get("overlap", "full")

    @property
    def target_path(self) -> str | None:
        return self.body.get("target_path")

    @property
    def kind(self) -> str | None:
        return self.body["verdict"].get("kind")

    def finding(self) -> Finding:
        return Finding.from_json(self.body, path=self.path)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _one_of(*choices):
    return (lambda v: isinstance(v, str) and v in choices), f"one of {', '.join(choices)}"


def _optional(check, what):
    return (lambda v: v is None or check(v)), f"{what} or null"


_STR = (lambda v: isinstance(v, str)), "a string"
_SECONDS = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0), "a non-negative number"
_OBJECT = (lambda v: isinstance(v, dict)), "an object"
_FIELDS: dict[str, tuple] = {  # field -> (check, what it must be); "case" and "schema" are checked apart
    "target": ((lambda v: isinstance(v, str) and v.strip() != ""), "a non-empty string"),
    "contract": ((lambda v: isinstance(v, str) and v.isidentifier()), "a contract name"),
    "device": _one_of("cpu", "cuda"),
    "mode": _one_of("compare", "race"),
    "reps": (_count, "a non-negative integer"),
    "failures": (_count, "a non-negative integer"),
    "verdict": _OBJECT,
    "overlap": _one_of("left", "full"),
    "target_path": _optional(*_STR),
    "case_hash": _STR,
    "case_summary": _STR,
    "replay": _STR,
    "time": _STR,
    "found": _OBJECT,
    "examples_to_first": (_count, "a non-negative integer"),
    "shrink_examples": (_count, "a non-negative integer"),
    "seconds_to_first": _SECONDS,
    "minimal": ((lambda v: isinstance(v, bool)), "true or false"),
    "not_minimal": _optional(*_STR),
    "environment": _OBJECT,
    "found_rate": ((lambda v: isinstance(v, list) and len(v) == 2 and all(_count(x) for x in v) and v[0] <= v[1]),
                   "[failures, repetitions]"),
    "witness": ((lambda v: isinstance(v, dict) and v.get("status") in ("witnessed", "not-witnessed",
                                                                       "unavailable")), "a CPU witness object"),
}


def _check_fields(path: Path, body: dict[str, Any]) -> None:
    for name, (ok, what) in _FIELDS.items():
        if name in body and not ok(body[name]):
            raise CrashFileError(f"{path}: field {name!r} must be {what}, got {_show(body[name])}")
    try:
        Verdict.from_json(body["verdict"])
    except ValueError as exc:
        raise CrashFileError(f"{path}: field 'verdict' is not a verdict: {exc}") from None
    if "reps" in body and "failures" in body and body["failures"] > body["reps"]:
        raise CrashFileError(f"{path}: field 'failures' ({body['failures']}) is more than 'reps' ({body['reps']})")


def schema_problem(body: dict, latest: int, what: str) -> str | None:
    """Why `body`'s ``schema`` field cannot be read (`what`: "crash" or "report"), or None."""
    schema = body.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        return f"no integer 'schema' field; not a mambafuzz {what} file"
    if schema > latest:
        return f"written with {what} schema {schema}; this mambafuzz reads up to {latest} (upgrade mambafuzz)"
    if schema < 1:
        return f"field 'schema' must be 1..{latest}, got {schema}"
    return None


def load(path: Path) -> CrashRecord:
    """Read and validate one crash file; CrashFileError names the file and the field."""
    path = Path(path)
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise CrashFileError(f"{path}: no such crash file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CrashFileError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CrashFileError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
                             f"(char {exc.pos})") from None
    except RecursionError:
        raise CrashFileError(f"{path}: not a crash file (JSON nested too deeply)") from None
    if not isinstance(body, dict):
        raise CrashFileError(f"{path}: a crash file holds a JSON object")
    problem = schema_problem(body, CRASH_SCHEMA, "crash")
    if problem:
        raise CrashFileError(f"{path}: {problem}")
    missing = [k for k in _REQUIRED if k not in body]
    if missing:
        raise CrashFileError(f"{path}: malformed crash file, missing {', '.join(missing)}")
    _check_fields(path, body)
    try:
        contracts.import_origin(body.get("contract_origin"))  # a user's contract registers on import
        if body["contract"] not in contracts.names():
            raise CaseError(f"field 'contract': unknown contract {body['contract']!r} "
                            f"(known: {', '.join(contracts.names())})")
        case = case_from_json(body["case"])
    except CaseError as exc:
        raise CrashFileError(f"{path}: {exc}") from None
    if case.contract != body["contract"]:
        raise CrashFileError(f"{path}: contract {body['contract']!r} does not match its case ({case.contract!r})")
    return CrashRecord(path, body, case)


def crash_files(paths: list[Path]) -> list[Path]:
    """Expand files and folders into the crash files they hold (sorted)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*.json") if not q.name.startswith(".")))
        elif p.exists():
            found.append(p)
        else:
            raise CrashFileError(f"{p}: no such file or folder")
    return found

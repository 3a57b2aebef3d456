"""`mambafuzz collect`: a campaign as one crash file per confirmed bucket and a summary.

The crash files are the hub's records as the boxes wrote them (so ``replay`` and
``report`` read them as any other), with a ``fleet`` field added (the bucket,
its count, the boxes and their GPUs, drivers and versions) and their ``replay``
command pointing at the new file.  Beside them: ``campaign.txt`` (what
``collect`` printed) and ``.campaign.json`` (what ``mambafuzz report DIR``
reads: targets, examples per target per box, buckets, time to first finding).
A second ``collect`` into the same folder removes the files the first wrote and
the hub no longer names (a bucket whose case shrank since).

``--from DIR`` first sends a box's waiting findings (its ``.fleet-outbox``),
for a box that ended while the hub was down.  The exit code is the campaign's:
1 when a bucket is confirmed, 0 when every target was fuzzed clean, 3 while a
target is not done with enough examples or a bucket waits for its replay.
"""
from __future__ import annotations

import datetime as _dt
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from mambafuzz import findings
from mambafuzz.errors import UsageError
from mambafuzz.fleet import buckets, hub
from mambafuzz.fleet.hub import Keys
from mambafuzz.fleet.outbox import Outbox
from mambafuzz.control import exits
from mambafuzz.report.load import CAMPAIGN_SCHEMA as SCHEMA, CAMPAIGN_SUMMARY as SUMMARY

TEXT = "campaign.txt"


@dataclass
class Collected:
    """What ``collect`` wrote and found: the summary (``.campaign.json``'s body) and the exit code."""

    folder: Path
    summary: dict
    code: int
    sent: int = 0                                 # findings sent from --from folders
    files: list[Path] = field(default_factory=list)


def campaign_of(client, url: str, name: str | None) -> str:
    """The campaign to collect: `name` (which must be on the hub), or the only one there."""
    names = hub.campaigns(client)
    if name is not None:
        hub.check_name(name)
        if name not in names:
            raise UsageError(f"no campaign {name!r} on {url} (there: {', '.join(names) or 'none'})")
        return name
    if len(names) != 1:
        raise UsageError(f"{url} holds {len(names)} campaigns ({', '.join(names) or 'none'}): name one with --campaign")
    return names[0]


def send_from(client, folders: list[Path]) -> int:
    """Every waiting finding of these crash folders sent to the hub (their boxes are done)."""
    sent = 0
    for folder in folders:
        if not Path(folder).is_dir():
            raise UsageError(f"--from {folder}: no such folder")
        n, left = Outbox(folder).flush(lambda campaign, item: buckets.push(client, Keys(campaign), item),
                                       everyone=True)
        sent += n
        if left:
            raise hub.HubDown(f"{left} finding(s) of {folder} could not be sent")
    return sent


def _status(row: dict, counted: bool, waiting: bool, min_examples: int) -> str:
    """A target's outcome over the whole campaign (``exits.exit_code``'s words)."""
    if counted:
        return "finding"
    done = row.get("done") or {}
    if waiting or done.get("stop") in ("inconclusive", "internal-error", "finding"):
        return "inconclusive"  # a finding still to be replayed, or one that did not reproduce
    return "clean" if row["examples"] >= min_examples else "inconclusive"


def summary(client, keys: Keys, url: str) -> tuple[dict, list[buckets.Bucket]]:
    """The campaign as plain data, and its buckets."""
    meta = hub.meta(client, keys)
    if meta is None:
        raise UsageError(f"no campaign {keys.campaign!r} on {url}")
    spec, created = meta["spec"], meta["created"]
    now = hub.now_ms(client)
    alive = hub.call(client.zcount, keys.alive, now, "+inf")
    workers = {w: json.loads(v) for w, v in hub.call(client.hgetall, keys.workers).items()}
    done = {t: json.loads(v) for t, v in hub.call(client.hgetall, keys.done).items()}
    found = buckets.read(client, keys)
    min_examples = int(spec.get("options", {}).get("min_examples", 1))
    targets = []
    for entry in spec.get("targets", []):
        name = entry["name"]
        examples = {b: int(v) for b, v in hub.call(client.hgetall, keys.examples(name)).items()}
        seconds = {b: float(v) for b, v in hub.call(client.hgetall, keys.seconds(name)).items()}
        mine = [b for b in found if b.fields.get("target") == name]
        counted = [b for b in mine if b.counts]
        firsts = [b.first_found - created for b in counted]
        row = {"target": name, "contract": entry.get("contract"), "done": done.get(name),
               "examples": sum(examples.values()), "seconds": round(sum(seconds.values()), 3),
               "boxes": {b: {"examples": examples.get(b, 0), "seconds": round(seconds.get(b, 0.0), 3)}
                         for b in sorted(set(examples) | set(seconds))},
               "buckets": [b.key for b in mine],
               "first_finding_s": round(max(0.0, min(firsts)), 3) if firsts else None}
        row["status"] = _status(row, bool(counted), any(b.state == buckets.PENDING for b in mine), min_examples)
        targets.append(row)
    every_done = all(t["target"] in done for t in targets)
    body = {"schema": SCHEMA, "campaign": keys.campaign, "hub": url, "created": created,
            "collected": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "state": "complete" if every_done else ("running" if alive else "stopped"),
            "workers_alive": alive, "options": spec.get("options", {}), "targets": targets,
            "buckets": [_bucket_row(b, created) for b in found],
            "workers": [{"worker": w, **info} for w, info in sorted(workers.items())]}
    return body, found


def _bucket_row(b: buckets.Bucket, created: float) -> dict:
    record = b.confirmed or b.best or {}
    f = b.fields
    return {"key": b.key, "target": f.get("target"), "contract": f.get("contract"), "kind": f.get("kind"),
            "device": f.get("device"), "signature": f.get("signature"), "versions": f.get("versions"),
            "state": b.state, "counts": b.counts, "count": b.count, "boxes": b.boxes,
            "first_found_s": round(max(0.0, b.first_found - created), 3),
            "case_summary": record.get("case_summary"), "summary": record.get("summary"),
            "confirm_line": f.get("confirm_line"), "confirm_by": f.get("confirm_by"), "file": None,
            "seen": [{"box": row.get("box"), "found_at": float(row.get("found_at") or 0.0),
                      **{k: row["where"].get(k) for k in ("worker", "gpu", "driver", "torch", "triton", "mambafuzz",
                                                          "hypothesis", "kind")}} for row in b.lineages]}


def _crash_file(folder: Path, record: dict, bucket: dict, taken: set[Path]) -> Path:
    """Write one bucket's record as a crash file under `folder` (the usual layout); its path."""
    finding = findings.Finding.from_json(record)
    path = findings.crash_path(folder, finding)
    if path in taken:  # the same case in two buckets (made under two versions): keep both
        path = path.with_name(f"{path.stem}-{bucket['key'][:8]}.json")
    taken.add(path)
    fleet = {k: bucket[k] for k in ("key", "signature", "state", "count", "boxes", "first_found_s", "versions",
                                    "seen", "confirm_line")}
    body = {**record, "replay": findings.replay_command(path, finding), "fleet": {"campaign": None, **fleet}}
    findings.atomic_write_json(path, body)
    return path


def collect(url: str, out: Path | None, *, campaign: str | None = None, from_dirs: list[Path] = (),
            include_unconfirmed: bool = False) -> Collected:
    """Send what --from folders hold, then write the campaign's crash files and summary into `out`
    (None: ``campaign-<name>``)."""
    client = hub.reach(url)
    try:
        sent = send_from(client, list(from_dirs))
        name = campaign_of(client, url, campaign)
        keys = Keys(name)
        body, found = summary(client, keys, url)
    except hub.HubDown as exc:
        raise UsageError(f"the hub {url} stopped answering: {exc}") from None
    out = Path(out) if out is not None else Path(f"campaign-{name}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        previous = _previous_files(out)
        taken: set[Path] = set()
        for row, b in zip(body["buckets"], found):
            record = b.confirmed or (b.best if include_unconfirmed else None)
            if record is None:
                continue
            path = _crash_file(out, record, {**row, "key": b.key}, taken)
            row["file"] = str(path.relative_to(out))
        for stale in previous - {p.resolve() for p in taken}:
            stale.unlink(missing_ok=True)
        for row in body["buckets"]:
            if row["file"]:
                path = out / row["file"]
                written = json.loads(path.read_text())
                written["fleet"]["campaign"] = name
                findings.atomic_write_json(path, written)
        body["files"] = [row["file"] for row in body["buckets"] if row["file"]]
        body["exit_code"] = code = exits.exit_code([t["status"] for t in body["targets"]])
        findings.atomic_write_json(out / SUMMARY, body)
        (out / TEXT).write_text("\n".join(lines(body, out)) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write the campaign under {out}: {exc.strerror or exc}") from None
    return Collected(out, body, code, sent, [out / f for f in body["files"]])


def _previous_files(out: Path) -> set[Path]:
    try:
        body = json.loads((out / SUMMARY).read_text())
        return {(out / f).resolve() for f in body.get("files", []) if isinstance(f, str)}
    except (OSError, ValueError, AttributeError):
        return set()


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def lines(body: dict, out: Path | None = None, width: int = 80) -> list[str]:
    """The campaign in plain lines (what collect prints and campaign.txt holds): paths whole."""

    targets, rows = body["targets"], body["buckets"]
    counted = [b for b in rows if b["counts"]]
    head = (f"campaign {body['campaign']} ({body['state']}, {body['workers_alive']} worker(s) alive): "
            f"{len(targets)} target(s), {sum(t['examples'] for t in targets)} examples, "
            f"{len(counted)} confirmed bucket(s) of {len(rows)}")
    out_lines = textwrap.wrap(head, width=width, subsequent_indent="  ")
    for t in targets:
        per_box = ", ".join(f"{b} {v['examples']}" for b, v in t["boxes"].items()) or "no box yet"
        first = f"; first finding after {_ago(t['first_finding_s'])}" if t["first_finding_s"] is not None else ""
        done = (t["done"] or {}).get("stop", "open")
        text = f"{t['target']}: {t['status']} ({done}), {t['examples']} examples ({per_box}){first}"
        out_lines += textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)
    for b in rows:
        state = b["state"] if not b["counts"] or b["state"] == buckets.CONFIRMED else f"{b['state']}, confirmed before"
        text = (f"bucket {b['key']} {b['target']} {b['kind']}: {b['signature']}; seen {b['count']} time(s) on "
                f"{', '.join(b['boxes'])}; {state}; first after {_ago(b['first_found_s'])}")
        out_lines += textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)
        if b["file"]:
            out_lines.append(f"  {(out / b['file']) if out else b['file']}")
    return out_lines

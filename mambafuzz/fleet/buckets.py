"""Deduplication: findings grouped into buckets by what failed; the smallest case kept per bucket.

A bucket is keyed by the contract, the target, the verdict's kind, the device,
what failed (``signature``) and the versions and target digest the finding was
made under (``box.corpus_key``).  What failed:

- race: the hazard's kind and its pair of kernel lines, in either order;
- oob: the access the bounds fence stopped (its kernel line);
- mismatch: the tensors that differ (``arena`` and any in-place output) and the
  region of the first difference, its numbers dropped ('row # dst byte #');
- fault, crash, hang: the faulting access the CPU witness saw, when it saw one,
  else the message with its numbers and addresses dropped;
- exception, compile: the message with its numbers dropped, kernel lines kept.

A finding is a lineage: one worker's turn on one target, pushed as it is first
seen and again each time its case shrinks (``seq`` orders them; an older one
is ignored).  A lineage may move to another bucket as it shrinks (the region
of an unshrunk case); the bucket it leaves forgets it.  A bucket's count is
its lineages, its boxes theirs; its best is the smallest case among them.
A bucket counts only once a replay confirmed its best (``confirm``): a new
best sends it back to ``pending``, the last confirmed record kept meanwhile;
a new finding in a bucket whose replay said no (or could not tell) asks again.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field

from mambafuzz.fleet import hub
from mambafuzz.fleet.hub import Keys

_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+")
_LINE = re.compile(r"([^\s:/\\]+\.py):(\d+)")
PENDING, CONFIRMED, NOT_REPRODUCED, UNCONFIRMED = "pending", "confirmed", "not reproduced", "unconfirmed"
CONFIRM_TRIES = 3  # replays that could not tell before a bucket is left unconfirmed


def _plain(text) -> str:
    """Numbers and addresses out, kernel lines (file.py:123) kept, whitespace folded."""
    lines = {m.group(0): f"@{i}@" for i, m in enumerate(_LINE.finditer(str(text or "")))}
    body = str(text or "")
    for line, mark in lines.items():
        body = body.replace(line, mark)
    body = _NUMBER.sub("#", body)
    for line, mark in lines.items():
        body = body.replace(mark, line)
    return " ".join(body.split())[:200]


def _access(hazard: dict) -> str:
    """'copy.py:214 (store)' of one side of a recorded hazard."""
    if not isinstance(hazard, dict):
        return "?"
    m = _LINE.search(str(hazard.get("line") or ""))
    return f"{m.group(1) + ':' + m.group(2) if m else '?'} ({hazard.get('op', '?')})"


def _hazard_signature(hazard: dict, kind: str) -> str:
    if kind == "oob":
        return f"out-of-bounds at {_access(hazard.get('first'))}"
    pair = sorted(_access(hazard.get(side)) for side in ("first", "second") if isinstance(hazard.get(side), dict))
    return f"{hazard.get('kind', '?')}: {' and '.join(pair)}"


def signature(record: dict) -> str:
    """What failed, in one line that two boxes seeing the same bug agree on."""
    verdict = record.get("verdict") or {}
    kind = verdict.get("kind") or record.get("kind") or "?"
    hazards = [h for h in verdict.get("hazards") or [] if isinstance(h, dict)]
    if kind in ("race", "oob"):
        pick = [h for h in hazards if (h.get("kind") == "out-of-bounds") == (kind == "oob")] or hazards
        return _hazard_signature(pick[0], kind) if pick else kind
    if kind == "mismatch":
        m = verdict.get("mismatch") or {}
        tensors = (["arena"] if m.get("count") else []) + sorted({o.get("argument", "?") for o in m.get("outputs") or []})
        first = (m.get("first") or [{}])[0] if m.get("count") else (m.get("outputs") or [{}])[0]
        return f"{', '.join(tensors) or '?'} differ; first in {_plain(first.get('where', '?'))}"
    if kind in ("fault", "crash", "hang"):
        witness = ((record.get("witness") or {}).get("verdict") or {}).get("hazards") or []
        fence = [h for h in witness if isinstance(h, dict) and h.get("kind") == "out-of-bounds"]
        if fence:
            return f"{kind}: {_hazard_signature(fence[0], 'oob')}"
        return f"{kind}: {_plain(verdict.get('fault'))}"
    return f"{kind}: {_plain(verdict.get(kind) or verdict.get('summary'))}"


def bucket_key(record: dict, corpus_key: str) -> tuple[str, dict]:
    """(the bucket's key, the fields it is made of) for a crash record made under `corpus_key`."""
    parts = {"contract": record.get("contract"), "target": record.get("target"),
             "kind": (record.get("verdict") or {}).get("kind"), "device": record.get("device"),
             "signature": signature(record), "versions": corpus_key}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    return key, parts


def size_of(record: dict) -> list:
    """The case's size (``Case.size``: smaller is simpler), comparable within one contract."""
    from mambafuzz.contracts import case_from_json  # deferred: the contracts import numpy and the oracles: --help and the parser do without

    try:
        return list(case_from_json(record["case"]).size)
    except Exception:  # noqa: BLE001 - a case this box cannot read sorts last
        return [float("inf")]


@dataclass
class Pushed:
    """One push of a lineage: its record and where it was seen."""

    lineage: str
    seq: int
    record: dict
    where: dict                  # box.info of the worker, with worker and kind
    corpus_key: str              # versions and target digest
    found_at: float              # the lineage's first failure (wall clock)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"lineage": self.lineage, "seq": self.seq, "record": self.record, "where": self.where,
                "corpus_key": self.corpus_key, "found_at": self.found_at, **self.extra}

    @classmethod
    def from_json(cls, body: dict) -> "Pushed":
        return cls(body["lineage"], int(body["seq"]), body["record"], dict(body.get("where") or {}),
                   str(body.get("corpus_key", "")), float(body.get("found_at", 0.0)))


def push(client, keys: Keys, item: Pushed) -> str:
    """Put one lineage's latest record into its bucket (a transaction, retried on a concurrent change);
    the bucket's key.  An item older than what the hub has for the lineage changes nothing."""
    return hub.call(_push, client, keys, item)


def _push(client, keys: Keys, item: Pushed) -> str:
    import redis  # deferred: redis is optional (a Redis database or --fleet only)

    key, parts = bucket_key(item.record, item.corpus_key)
    size = size_of(item.record)
    for _ in range(50):
        with client.pipeline() as pipe:
            try:
                pipe.watch(keys.lineage(item.lineage), keys.bucket(key))
                old = pipe.hgetall(keys.lineage(item.lineage))
                if old and int(old.get("seq", -1)) >= item.seq:
                    pipe.unwatch()
                    return old.get("bucket", key)
                bucket = pipe.hgetall(keys.bucket(key))
                moved_from = old.get("bucket") if old and old.get("bucket") != key else None
                leaving = _next_best(pipe, keys, moved_from, item.lineage) if moved_from else None
                pipe.multi()
                pipe.hset(keys.lineage(item.lineage), mapping={
                    "bucket": key, "seq": item.seq, "size": json.dumps(size), "box": item.where.get("box", "?"),
                    "found_at": item.found_at, "where": json.dumps(item.where), "pushed_at": time.time()})
                pipe.set(keys.record(item.lineage), json.dumps(item.record))
                pipe.sadd(keys.buckets, key)
                pipe.sadd(keys.members(key), item.lineage)
                fields = {"key": key, **{k: "" if v is None else v for k, v in parts.items()}}
                if not bucket:
                    fields["first_found"] = item.found_at
                elif item.found_at < float(bucket.get("first_found") or item.found_at):
                    fields["first_found"] = item.found_at
                best_size = json.loads(bucket.get("best_size") or "[]")
                again = bucket.get("state") in (NOT_REPRODUCED, UNCONFIRMED) and (not old or moved_from)
                if not bucket.get("best") or bucket.get("best") == item.lineage or size < best_size or (
                        again and size <= best_size):
                    fields.update(best=item.lineage, best_size=json.dumps(size),
                                  confirm_kind=item.where.get("kind", "?"), state=PENDING, tries=0)
                    pipe.sadd(keys.pending, key)
                elif again:  # seen again after a replay said no: its best is replayed once more
                    fields.update(state=PENDING, tries=0)
                    pipe.sadd(keys.pending, key)
                pipe.hset(keys.bucket(key), mapping=fields)
                if moved_from:
                    pipe.srem(keys.members(moved_from), item.lineage)
                    if leaving is not None:
                        pipe.hset(keys.bucket(moved_from), mapping=leaving)
                        if leaving.get("state") == PENDING:
                            pipe.sadd(keys.pending, moved_from)
                pipe.execute()
                return key
            except redis.exceptions.WatchError:
                continue
    raise hub.HubDown("the bucket kept changing under us (50 tries)")


def _next_best(pipe, keys: Keys, bucket: str, leaving: str) -> dict | None:
    """The fields of `bucket` once lineage `leaving` has left it: its best passes to the smallest of the
    others (pending again), or nothing changes when `leaving` was not its best."""
    fields = pipe.hgetall(keys.bucket(bucket))
    if fields.get("best") != leaving:
        return None
    others = [m for m in pipe.smembers(keys.members(bucket)) if m != leaving]
    best = None
    for lineage in others:
        row = pipe.hgetall(keys.lineage(lineage))
        size = json.loads(row.get("size") or "[]")
        if row and (best is None or size < best[1]):
            best = (lineage, size, json.loads(row.get("where") or "{}").get("kind", "?"))
    if best is None:
        return {"best": "", "best_size": "[]", "state": PENDING}
    return {"best": best[0], "best_size": json.dumps(best[1]), "confirm_kind": best[2], "state": PENDING,
            "tries": 0}


@dataclass
class Bucket:
    """A bucket as read back: its fields, best record, lineages and boxes."""

    key: str
    fields: dict
    best: dict | None            # the best lineage's record (crash file body)
    confirmed: dict | None       # the record a replay confirmed (the best, or an earlier best)
    lineages: list[dict]         # each lineage's row: box, found_at, where, seq

    @property
    def state(self) -> str:
        return self.fields.get("state", PENDING)

    @property
    def count(self) -> int:
        return len(self.lineages)

    @property
    def boxes(self) -> list[str]:
        return sorted({row.get("box", "?") for row in self.lineages})

    @property
    def counts(self) -> bool:
        """A replay on a box of its kind confirmed it (now or for an earlier best)."""
        return self.confirmed is not None

    @property
    def first_found(self) -> float:
        return float(self.fields.get("first_found") or 0.0)


def read(client, keys: Keys) -> list[Bucket]:
    """Every bucket of the campaign with at least one lineage, first found first."""
    out = []
    for key in sorted(hub.call(client.smembers, keys.buckets)):
        members = sorted(hub.call(client.smembers, keys.members(key)))
        if not members:
            continue
        fields = hub.call(client.hgetall, keys.bucket(key))
        rows = []
        for lineage in members:
            row = hub.call(client.hgetall, keys.lineage(lineage))
            rows.append({"lineage": lineage, **row, "where": json.loads(row.get("where") or "{}")})
        best = hub.call(client.get, keys.record(fields["best"])) if fields.get("best") else None
        confirmed = fields.get("confirmed_record")
        out.append(Bucket(key, fields, json.loads(best) if best else None,
                          json.loads(confirmed) if confirmed else None, rows))
    return sorted(out, key=lambda b: (b.first_found, b.key))


def record_confirmation(client, keys: Keys, key: str, lineage: str, state: str, line: str, by: str) -> None:
    """A replay's word on bucket `key`'s best (`lineage`): confirmed (its record kept as the one that
    counts), not reproduced, or could not tell (tried again, until CONFIRM_TRIES)."""
    fields = hub.call(client.hgetall, keys.bucket(key))
    if fields.get("best") != lineage:
        return  # a smaller case arrived meanwhile: it is the one to replay
    pipe = client.pipeline()
    note = {"confirm_line": line, "confirm_by": by, "confirm_at": time.time()}
    if state == CONFIRMED:
        record = hub.call(client.get, keys.record(lineage))
        pipe.hset(keys.bucket(key), mapping={**note, "state": CONFIRMED, "confirmed_record": record or "",
                                               "confirmed_lineage": lineage})
        pipe.srem(keys.pending, key)
    elif state == NOT_REPRODUCED:
        pipe.hset(keys.bucket(key), mapping={**note, "state": NOT_REPRODUCED})
        pipe.srem(keys.pending, key)
    else:
        tries = int(fields.get("tries") or 0) + 1
        pipe.hset(keys.bucket(key), mapping={**note, "tries": tries,
                                               "state": UNCONFIRMED if tries >= CONFIRM_TRIES else PENDING})
        if tries >= CONFIRM_TRIES:
            pipe.srem(keys.pending, key)
    hub.call(pipe.execute)


def cases_of(client, keys: Keys, target: str, corpus_key: str, limit: int = 4) -> list[dict]:
    """The best cases (JSON) of `target`'s buckets made under `corpus_key`, smallest first: what a worker
    taking the target up tries before it draws (a box that died mid-shrink found them; the corpus may
    not have them yet)."""
    found = []
    for key in hub.call(client.smembers, keys.buckets):
        fields = hub.call(client.hgetall, keys.bucket(key))
        if fields.get("target") != target or fields.get("versions") != corpus_key or not fields.get("best"):
            continue
        if not hub.call(client.scard, keys.members(key)):
            continue
        body = hub.call(client.get, keys.record(fields["best"]))
        if body:
            record = json.loads(body)
            found.append((size_of(record), record["case"]))
    return [case for _, case in sorted(found, key=lambda pair: pair[0])[:limit]]

"""A bucket counts only once a replay on a box of the same kind says its best case still fails.

Between turns a worker replays the pending buckets of its own kind (device and
GPU model, ``box.kind``) made under its own versions and target digest: on the
CPU in its own process (the recorder is deterministic), a fault, crash or hang
and anything on a GPU in a child process outside any MPS server
(``run.confirm.confirm_alone``, as a session confirms a fault seen under MPS).
A replay that could not tell (the target would not import, the child died
before it answered) is tried again later, up to ``buckets.CONFIRM_TRIES``.
One worker replays a bucket at a time (``confirming:<key>``, with a time to live).
A target done for a finding that no replay upholds is open again (``reopen_if_unfounded``).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable

from mambafuzz import findings
from mambafuzz.fleet import buckets, hub
from mambafuzz.fleet.hub import Keys
from mambafuzz.judge.engine import FAULT_KINDS


def replay_record(record: dict, device: str, timeout: float) -> tuple[str, str]:
    """(confirmed | not reproduced | could not tell, the replay's line) for one crash record."""
    from mambafuzz.findings.replay import FIXED, STILL_FAILING, replay_one  # deferred: crash files import the engine (numpy, the contracts)
    from mambafuzz.run.confirm import confirm_alone  # deferred: the runner imports the fuzz loop (Hypothesis, numpy): only for a run

    with tempfile.TemporaryDirectory(prefix="mambafuzz-confirm-") as folder:
        path = Path(folder) / "case.json"
        path.write_text(json.dumps(record))
        try:
            loaded = findings.load(path)
        except findings.CrashFileError as exc:
            return buckets.UNCONFIRMED, str(exc)
        if device == "cpu" and loaded.kind not in FAULT_KINDS:
            row = replay_one(loaded, device=device, reps=None, mode=None)
            state = {STILL_FAILING: True, FIXED: False}.get(row.status)
            line = row.line()
        else:
            state, line = confirm_alone(path, None, timeout, device)
    word = {True: buckets.CONFIRMED, False: buckets.NOT_REPRODUCED}.get(state, buckets.UNCONFIRMED)
    return word, line


def confirm_pending(client, keys: Keys, *, kind: str, corpus_key: Callable[[str], str | None], device: str,
                    worker: str, timeout: float, limit: int = 3) -> list[tuple[str, str, str]]:
    """Replay up to `limit` pending buckets this worker can speak for: (bucket, its new state, the line)."""
    done = []
    for key in sorted(hub.call(client.smembers, keys.pending)):
        if len(done) >= limit:
            break
        fields = hub.call(client.hgetall, keys.bucket(key))
        lineage = fields.get("best")
        if not lineage or fields.get("confirm_kind") != kind or fields.get("state") != buckets.PENDING:
            continue
        if corpus_key(fields.get("target", "")) != fields.get("versions"):
            continue  # made under other versions or another source of the target: not ours to say
        if not hub.call(client.set, keys.confirming(key), worker, nx=True, px=int((timeout + 30) * 1000)):
            continue  # another worker is on it
        try:
            body = hub.call(client.get, keys.record(lineage))
            if body is None:
                continue
            state, line = replay_record(json.loads(body), device, timeout)
            buckets.record_confirmation(client, keys, key, lineage, state, line, worker)
            if state == buckets.NOT_REPRODUCED:
                reopen_if_unfounded(client, keys, fields.get("target", ""))
            done.append((key, state, line))
        finally:
            hub.call(client.delete, keys.confirming(key))
    return done


def reopen_if_unfounded(client, keys: Keys, target: str) -> bool:
    """A target done for a finding none of whose buckets stands (each replay said it did not reproduce: a
    neighbour's fault on a shared GPU, a race too rare to show again) is open again; whether it was."""
    done = hub.call(client.hget, keys.done, target)
    if not done or json.loads(done).get("stop") != "finding":
        return False
    for key in hub.call(client.smembers, keys.buckets):
        fields = hub.call(client.hgetall, keys.bucket(key))
        if fields.get("target") == target and hub.call(client.scard, keys.members(key)) and (
                fields.get("confirmed_record") or fields.get("state") == buckets.PENDING):
            return False
    hub.call(client.hdel, keys.done, target)
    return True

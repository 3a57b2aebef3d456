"""The hub: one Redis database that holds a campaign's record, leases, counts and findings.

Every key of campaign C starts with ``mambafuzz:fleet:C:`` (``Keys`` names
them all; the README's "Key layout" lists them), and ``mambafuzz:fleet:campaigns``
is the set of campaign names, so ``collect`` can say which are there.  The
shared Hypothesis corpus lives in the same database under Hypothesis' own
keys, each target's keyed by the versions and its source digest
(``box.corpus_key``).

A network failure is ``HubDown``: a worker carries on fuzzing and tries
again (its findings wait in the outbox); only the first contact, at start,
turns a hub that does not answer into one line and exit 2.  Times that
several boxes compare (lease expiry) are the hub's own clock (``TIME``).
"""
from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any

from mambafuzz.errors import UsageError

ROOT = "mambafuzz:fleet:"
CAMPAIGNS = ROOT + "campaigns"
SCHEMA = 1  # the campaign record's shape (meta "schema"); bump on an incompatible change
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TIMEOUT = 5.0  # seconds: a socket that waits longer is a hub down


class HubDown(Exception):
    """The hub did not answer (refused, reset, timed out).  Callers keep what they meant to send."""


def check_url(url: str) -> str:
    """`url` if redis-py can read it (redis://, rediss://, unix://), else a one-line UsageError."""
    try:
        from redis.connection import parse_url  # deferred: redis is optional (a Redis database or --fleet only)
    except ImportError:
        raise UsageError("--fleet needs the 'redis' package (pip install 'mambafuzz[redis]')") from None
    try:
        parse_url(str(url))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"not a Redis URL: {url!r} ({exc}); write redis://HOST:PORT/DB") from None
    return str(url)


def check_name(name: str) -> str:
    """A campaign name: letters, digits, '.', '_', '-', at most 64, not starting with a sign."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UsageError(f"campaign name {name!r}: use 1-64 letters, digits, '.', '_' or '-' "
                         f"(starting with a letter or digit)")
    return name


def connect(url: str, timeout: float = TIMEOUT):
    """A client (no traffic yet); every call through ``call`` turns a network failure into HubDown."""
    import redis  # deferred: redis is optional (a Redis database or --fleet only)

    return redis.Redis.from_url(check_url(url), socket_connect_timeout=timeout, socket_timeout=timeout,
                                decode_responses=True)


def call(fn, *args, **kwargs):
    """`fn(*args)`, with redis' connection and timeout errors as HubDown."""
    import redis  # deferred: redis is optional (a Redis database or --fleet only)

    try:
        return fn(*args, **kwargs)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise HubDown(str(exc) or type(exc).__name__) from None


def reach(url: str, timeout: float = 3.0):
    """A client that has answered a PING, or a one-line UsageError naming the hub."""
    client = connect(url, timeout)
    try:
        call(client.ping)
    except HubDown as exc:
        raise UsageError(f"the hub {url} does not answer: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - auth, protocol: the same answer for the user
        raise UsageError(f"the hub {url} refused us: {type(exc).__name__}: {exc}") from None
    return client


def now_ms(client) -> int:
    """The hub's clock in milliseconds (every box compares lease expiries against it)."""
    seconds, micros = call(client.time)
    return int(seconds) * 1000 + int(micros) // 1000


class Keys:
    """The names of one campaign's keys (all under ``mambafuzz:fleet:<campaign>:``)."""

    def __init__(self, campaign: str):
        self.campaign = check_name(campaign)
        self.prefix = p = f"{ROOT}{campaign}:"
        self.meta = p + "meta"          # hash: schema, spec (targets and options, JSON), digest, created, epoch
        self.alive = p + "alive"        # zset: worker id -> heartbeat expiry (hub ms)
        self.workers = p + "workers"    # hash: worker id -> its box, GPU, versions (JSON)
        self.done = p + "done"          # hash: target -> why it is done, by whom (JSON)
        self.fuzzed = p + "fuzzed"      # hash: target -> seconds fuzzed by every box (who needs it most)
        self.buckets = p + "buckets"    # set: bucket keys
        self.pending = p + "pending"    # set: bucket keys waiting for a confirming replay

    def lease(self, target: str) -> str:
        return f"{self.prefix}lease:{target}"

    def examples(self, target: str) -> str:
        return f"{self.prefix}examples:{target}"

    def seconds(self, target: str) -> str:
        return f"{self.prefix}seconds:{target}"

    def lineage(self, lineage: str) -> str:
        return f"{self.prefix}lineage:{lineage}"

    def record(self, lineage: str) -> str:
        return f"{self.prefix}record:{lineage}"

    def bucket(self, key: str) -> str:
        return f"{self.prefix}bucket:{key}"

    def members(self, key: str) -> str:
        return f"{self.prefix}bucket:{key}:lineages"

    def confirming(self, key: str) -> str:
        return f"{self.prefix}confirming:{key}"


def spec_digest(spec: dict) -> str:
    """What makes two boxes' commands one campaign: their targets and options (not --time, not the box)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:12]


def join(client, keys: Keys, spec: dict) -> dict:
    """Create the campaign's record, or check that this box's targets and options are the campaign's;
    the record (HubDown when the hub fails, UsageError when the campaign is another one)."""
    digest = spec_digest(spec)
    body = {"schema": str(SCHEMA), "spec": json.dumps(spec, sort_keys=True), "digest": digest,
            "created": f"{now_ms(client) / 1000:.3f}", "epoch": secrets.token_hex(6)}
    for field, value in body.items():
        call(client.hsetnx, keys.meta, field, value)
    call(client.sadd, CAMPAIGNS, keys.campaign)
    meta = call(client.hgetall, keys.meta)
    if meta.get("schema") != str(SCHEMA):
        raise UsageError(f"campaign {keys.campaign} on the hub was written by another mambafuzz "
                         f"(campaign schema {meta.get('schema')}, this one reads {SCHEMA}); give another --campaign")
    if meta.get("digest") != digest:
        theirs = json.loads(meta.get("spec") or "{}")
        raise UsageError(f"campaign {keys.campaign} on the hub runs other {_difference(theirs, spec)}; "
                         f"run the same targets and options, or give another --campaign")
    return meta


def _difference(theirs: dict, mine: dict) -> str:
    """What differs between two campaign specs, in a few words."""
    if [t.get("name") for t in theirs.get("targets", [])] != [t.get("name") for t in mine.get("targets", [])]:
        names = [t.get("name") for t in theirs.get("targets", [])]
        return f"targets ({', '.join(map(str, names[:4]))}{', ...' if len(names) > 4 else ''})"
    options = sorted(k for k in set(theirs.get("options", {})) | set(mine.get("options", {}))
                     if theirs.get("options", {}).get(k) != mine.get("options", {}).get(k))
    return f"options ({', '.join(options) or 'its record differs'})"


def meta(client, keys: Keys) -> dict[str, Any] | None:
    """The campaign's record with its spec read, or None when the hub has no such campaign."""
    body = call(client.hgetall, keys.meta)
    if not body:
        return None
    return {**body, "spec": json.loads(body.get("spec") or "{}"), "created": float(body.get("created") or 0)}


def campaigns(client) -> list[str]:
    return sorted(call(client.smembers, CAMPAIGNS))

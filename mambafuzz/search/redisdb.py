"""The shared corpus in Redis, for a fuzz loop that must outlive a Redis that goes away.

Hypothesis' ``RedisExampleDatabase`` raises when Redis does not answer, and the
error left the Hypothesis run as mambafuzz's own (an internal error for the
target).  A hub restarted mid-campaign is no reason to stop fuzzing: while it
does not answer, nothing is read from the corpus and what would be saved is
dropped (a failure is in its crash file and the fleet's outbox anyway).
Sockets time out after a few seconds, so a hub that hangs costs an example a
few seconds, not the run.
"""
from __future__ import annotations

import functools

from hypothesis.database import ExampleDatabase

TIMEOUT = 3.0


class HubDatabase(ExampleDatabase):
    """``RedisExampleDatabase`` at `url`, quiet while Redis does not answer."""

    def __init__(self, url: str):
        super().__init__()
        import redis  # deferred: redis is optional (a Redis database or --fleet only)
        from hypothesis.extra.redis import RedisExampleDatabase  # deferred: Hypothesis loads with the first strategy, not with the parser

        self.url = url
        self.inner = RedisExampleDatabase(redis.Redis.from_url(url, socket_connect_timeout=TIMEOUT,
                                                               socket_timeout=TIMEOUT))
        self._errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)

    def __repr__(self) -> str:
        return f"HubDatabase({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HubDatabase) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def fetch(self, key: bytes):
        try:
            return list(self.inner.fetch(key))
        except self._errors:
            return []

    def save(self, key: bytes, value: bytes) -> None:
        try:
            self.inner.save(key, value)
        except self._errors:
            pass

    def delete(self, key: bytes, value: bytes) -> None:
        try:
            self.inner.delete(key, value)
        except self._errors:
            pass

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        try:
            self.inner.move(src, dest, value)
        except self._errors:
            pass


@functools.lru_cache(maxsize=8)
def database(url: str) -> HubDatabase:
    """One client (and connection pool) per URL and process: the fuzz loop asks once per chunk."""
    return HubDatabase(url)

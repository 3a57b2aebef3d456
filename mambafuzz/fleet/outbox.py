"""A finding on its way to the hub, kept on disk beside the crash folder until the hub has it.

Every finding is a crash file first (``findings.save``, as without a hub).
Then its record goes into ``<crashes-dir>/.fleet-outbox/<lineage>.pending``
(one file a lineage, replaced as its case shrinks, written atomically), and
the file is removed only once the hub has that version.  So a hub that is
down, restarted or unreachable loses nothing: the worker's keeper thread
sends what waits whenever the hub answers, the box's last act sends what its
workers left, and ``mambafuzz collect URL --from DIR`` sends a box's folder
later.  A ``.pending`` file is neither a crash file nor JSON by name, so
``replay`` and ``report`` pass it by.

An entry belongs to the process that wrote it (its host and pid); another
process on the same host sends it only once that one is gone, and ``collect
--from`` sends every entry (the box is done by then).
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
from pathlib import Path
from typing import Callable

from mambafuzz.findings import atomic_write_json
from mambafuzz.fleet.buckets import Pushed
from mambafuzz.fleet.hub import HubDown

FOLDER = ".fleet-outbox"
SUFFIX = ".pending"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Outbox:
    """The pending findings of one crash folder; `owner` is this process ('host:pid')."""

    def __init__(self, crashes_dir: Path | str, campaign: str | None = None, owner: str | None = None):
        self.folder = Path(crashes_dir) / FOLDER
        self.campaign = campaign
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.lock = threading.Lock()
        self.sent = 0      # versions this process got to the hub

    def path(self, lineage: str) -> Path:
        return self.folder / (re.sub(r"[^A-Za-z0-9._-]", "_", lineage) + SUFFIX)

    def put(self, item: Pushed) -> None:
        """Keep `item` (the newest version of its lineage) until the hub has it."""
        body = {"campaign": self.campaign, "owner": self.owner, **item.to_json()}
        with self.lock:
            atomic_write_json(self.path(item.lineage), body)

    def entries(self, everyone: bool = False) -> list[tuple[Path, dict]]:
        """(file, body) of what waits: this process's, and those of gone processes of this host (or, with
        `everyone`, all of them); unreadable files are skipped (a write in progress is a temporary name)."""
        host = self.owner.rpartition(":")[0]
        out = []
        for path in sorted(self.folder.glob(f"*{SUFFIX}")) if self.folder.is_dir() else []:
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            owner = str(body.get("owner", ""))
            their_host, _, pid = owner.rpartition(":")
            mine = owner == self.owner
            orphan = their_host == host and pid.isdigit() and not _alive(int(pid))
            if everyone or mine or orphan:
                out.append((path, body))
        return out

    def flush(self, push: Callable[[str, Pushed], None], everyone: bool = False) -> tuple[int, int]:
        """Send what waits through `push(campaign, item)`: (sent, left).  Stops at the first HubDown."""
        sent = 0
        waiting = self.entries(everyone)
        for i, (path, body) in enumerate(waiting):
            try:
                item = Pushed.from_json(body)
            except (KeyError, TypeError, ValueError):
                continue  # not an entry this mambafuzz wrote: left for a person to look at
            try:
                push(body.get("campaign") or self.campaign, item)
            except HubDown:
                return sent, len(waiting) - i
            with self.lock:  # gone only if no newer version of the lineage was put meanwhile
                try:
                    if json.loads(path.read_text()).get("seq") == item.seq:
                        path.unlink()
                except (OSError, ValueError):
                    pass
            sent += 1
            self.sent += 1
        return sent, 0

    def waiting(self, everyone: bool = True) -> int:
        return len(self.entries(everyone))

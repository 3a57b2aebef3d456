"""Failures injected into a session's workers, for tests on a machine without a GPU.

A GPU box's workers fail in ways a CPU box never sees: a worker that cannot
open its GPU (an MPS server still letting a faulted client go answers "MPS
server is not ready"), one the kernel's host or the OOM killer ends between
cases.  ``ENV`` (inherited by the spawned workers) names the failures, comma
separated:

* ``nodevice:SLOT[:TIMES]``: worker slot SLOT's first TIMES processes (every
  one without TIMES) exit as a worker that could not open its device does
  (``control.exits.WORKER_NO_DEVICE``), before they say hello;
* ``kill:SLOT:CASES``: worker slot SLOT's first process SIGKILLs itself once
  CASES cases have been judged, between two cases (no case in flight).

Nothing reads it but ``run/session.py``'s worker; unset, nothing happens.
"""
from __future__ import annotations

import os
import signal

ENV = "MAMBAFUZZ_INJECT_WORKER_FAULT"


def _rules(event: str, slot: int) -> list[list[str]]:
    rules = [part.strip().split(":") for part in os.environ.get(ENV, "").split(",") if part.strip()]
    return [r[2:] for r in rules if len(r) >= 2 and r[0] == event and r[1] == str(slot)]


def no_device(slot: int, attempt: int) -> bool:
    """Whether worker slot `slot`'s process number `attempt` (0: the first) is to fail as if its GPU did not open."""
    return any(not rest or attempt < int(rest[0]) for rest in _rules("nodevice", slot))


def after_case(slot: int, attempt: int, judged: int) -> None:
    """Called after each judged case (`judged` so far): SIGKILL this process where a rule says so."""
    if attempt == 0 and any(rest and judged == int(rest[0]) for rest in _rules("kill", slot)):
        os.kill(os.getpid(), signal.SIGKILL)

"""A fault seen on a GPU shared under MPS is replayed alone before it counts.

Under MPS the workers of one GPU share one server, and a fatal fault in any of
them (an illegal address) is raised in every client on that GPU: each worker's
case in flight then reads as a fault, the correct kernels' too, and the server
takes no new client until they have all gone.  So the session stops the GPU's
workers and replays each fault its workers reported in a fresh process of its
own, outside the MPS server, with the GPU to itself: a fault that recurs there
is the kernel's; one that does not was a neighbour's and is no finding.
"""
from __future__ import annotations

from pathlib import Path

from mambafuzz import findings
from mambafuzz.control.mps import LOG_ENV, PIPE_ENV, SHARE_ENV, environ


def _alone_on(gpu: int | None):
    """os.environ for a child that owns `gpu`: no MPS pipe, no memory share (a spawned child copies it)."""
    changes = {k: None for k in (PIPE_ENV, LOG_ENV, SHARE_ENV)}
    if gpu is not None:
        changes["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return environ(changes)


def confirm_alone(path: str | Path, gpu: int | None, timeout: float, device: str = "cuda") -> tuple[bool | None, str]:
    """(True: the fault recurs alone, False: it does not, None: the replay could not tell; the replay's line)."""
    from mambafuzz.findings.replay import FIXED, STILL_FAILING, replay_isolated  # deferred: crash files import the engine (numpy, the contracts)

    try:
        record = findings.load(Path(path))
    except findings.CrashFileError as exc:
        return None, str(exc)
    with _alone_on(gpu):
        row = replay_isolated(record, device=device, reps=None, mode=None, timeout=timeout)
    verdict = {STILL_FAILING: True, FIXED: False}.get(row.status)
    return verdict, row.line()

"""Helpers shared by the contract benches (the update and prefill judge and oracle benches): the commit a
result names, the device selected before any kernel import, the oracle moved to the host as a baseline arm, one example timed as the engine judges it,
and the CPU zoo run of a contract's rows.

Nothing here imports torch or the contracts at import time: a bench selects its device first.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """``MF_COMMIT`` (a GPU box's copy has no git), else the checkout's short HEAD."""
    return os.environ.get("MF_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                                         capture_output=True, text=True, cwd=ROOT).stdout.strip()


def on_device(device: str):
    """Select `device` (before anything imports a kernel), then torch, a synchronise for timing (nothing to
    wait for on the CPU) and the device's name, as a bench's header says it."""
    from mambafuzz.control import device as run_device

    run_device.select(device)
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return torch, sync, torch.cuda.get_device_name(0) if device == "cuda" else "cpu"


def host_arm(*modules):
    """The baseline arm: `modules`' (contract modules') oracle inputs made numpy on the host.  Returns
    ``switch(host)``: True to the host, False back to the case's device."""
    from mambafuzz.contracts import updates

    device_input = updates.oracle_input

    def on_host(values, device):
        if hasattr(values, "detach"):
            values = values.detach().cpu()
        return device_input(values, "cpu")

    def switch(host: bool):
        for module in modules:
            module.oracle_input = on_host if host else device_input
    return switch


class OracleTimer:
    """`module`.`name` (a contract module's oracle function) wrapped to time its calls, synchronised:
    ``last`` the seconds of the latest call (the oracle's part of ``materialize``)."""

    def __init__(self, module, name: str, sync):
        self.last = 0.0
        inner = getattr(module, name)

        def timed(*args, **kwargs):
            sync()
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                sync()
                self.last = time.perf_counter() - t0
        setattr(module, name, timed)


def measure(case, fn, device, reps, repeat, sync, split: bool = False, oracle: OracleTimer | None = None) -> dict:
    """Best of `repeat`: ``materialize`` plus one ``compare`` (``judge_s``; `split`: ``materialize_s`` and
    ``compare_s``), one launch of `fn` (``kernel_s``), the whole example at `reps` repetitions as a fuzz run
    judges it (``example_s``); with `oracle`, the oracle's part of materialize (``oracle_s``).  Every run
    must be judged correct."""
    from mambafuzz.judge.engine import run_case
    from mambafuzz.judge.materialize import materialize

    keys = ("materialize_s", "compare_s") if split else ("judge_s",)
    keys += ("oracle_s",) if oracle else ()
    best = dict.fromkeys(keys + ("kernel_s", "example_s"), float("inf"))
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        m = materialize(case, device)
        sync()
        made = time.perf_counter() - t0
        t0 = time.perf_counter()
        m.run(fn)
        sync()
        ran = time.perf_counter() - t0
        t0 = time.perf_counter()
        mismatch = m.compare()
        compared = time.perf_counter() - t0
        assert mismatch is None, mismatch.summary()
        del m
        t0 = time.perf_counter()
        verdict = run_case(fn, case, device, reps=reps)
        sync()
        example = time.perf_counter() - t0
        assert verdict.kind is None, verdict
        judged = (made, compared) if split else (made + compared,)
        judged += (oracle.last,) if oracle else ()
        for key, value in zip(keys + ("kernel_s", "example_s"), judged + (ran, example)):
            best[key] = min(best[key], value)
    return best


def zoo_run(pattern: str, crashes_dir: str) -> tuple[float, list[dict]]:
    """``mambafuzz zoo --device cpu --seed 1`` on the rows `pattern` names, from /tmp: its seconds and its
    JSON document's targets."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mambafuzz", "zoo", "--device", "cpu", "--seed", "1", "--target",
                           pattern, "--database", "none", "--crashes-dir", crashes_dir, "--json"],
                          capture_output=True, text=True, env=env, cwd="/tmp")
    seconds = time.perf_counter() - t0
    return seconds, json.loads(proc.stdout)["targets"]

"""Several workers on one GPU at once: a private CUDA MPS daemon for the session's workers.

Without it, the GPU time-slices separate processes' contexts: on an H200, 8
workers of small cases ran 1.5x one worker's examples a second, under MPS 3.9x
(bench/RESULTS.md, issue 29).  The daemon is the session's own (its pipe and
log folders are a fresh temporary folder, so it neither joins nor stops one the
box already runs) and is stopped when the session ends.  Where the box has no
``nvidia-cuda-mps-control``, or it will not start (a GPU in exclusive mode, a
container without the IPC it needs), the workers time-slice and the session
says so.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from typing import Iterator

CONTROL = "nvidia-cuda-mps-control"
MAX_PER_GPU = 8
# The first worker of a GPU may take half its memory (a large case runs there); the others share the rest.
FIRST_SHARE = 0.5


def default_workers_per_gpu(gpus: int) -> int:
    """One worker for every 2 cores a GPU has (the others draw cases and compile), at most MAX_PER_GPU."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_PER_GPU, cores // max(1, gpus) // 2))


def memory_share(position: int, k: int) -> float:
    """The fraction of its GPU's memory the `position`-th of `k` workers on it may allocate."""
    if k <= 1:
        return 1.0
    return FIRST_SHARE if position == 0 else (1.0 - FIRST_SHARE) / (k - 1)


def bound_memory(share: float, budget: int | None = None) -> int:
    """Make torch's allocator refuse past `share` of the GPU (an out-of-memory then declines the case),
    and the case builder refuse a case past `budget` bytes (None: what the share leaves, ``budget_of``).
    The budget in bytes."""
    import torch  # deferred: torch takes seconds to import

    torch.cuda.set_per_process_memory_fraction(share)
    os.environ[SHARE_ENV] = f"{share:.4f}"
    if budget is None:
        budget = budget_of(share, torch.cuda.get_device_properties(0).total_memory)
    set_budget(budget)
    return budget


SHARE_ENV = "MAMBAFUZZ_GPU_MEMORY_SHARE"
# What one case may allocate in this process (bytes), set for a worker sharing its GPU (or by a test): the case
# builder declines a case past it (judge.materialize) instead of running out of memory half-way through it.
BUDGET_ENV = "MAMBAFUZZ_MEMORY_BUDGET"
# Of a worker's share, what its cases may take: the rest is its CUDA context, Triton's modules, torch's cache.
CASE_PART = 0.85
# Workers a GPU for the zoo at most: each worker draws its cases and runs the oracles on its own core, and the
# compile-ahead helpers want the cores left (at 8 the H100's 16 cores were the limit: bench/RESULTS.md).
ZOO_MAX_PER_GPU = 4


def budget_of(share: float, total_bytes: int) -> int:
    """The bytes a worker with `share` of a GPU of `total_bytes` lets one case allocate."""
    return int(share * total_bytes * CASE_PART)


def budgets(k: int, total_bytes: int | None) -> list[int | None]:
    """Each of `k` workers' case budget on a GPU of `total_bytes` (None each: memory not known, or one worker
    alone, which is bounded by nothing but the GPU)."""
    if total_bytes is None or k <= 1:
        return [None] * max(1, k)
    return [budget_of(memory_share(i, k), total_bytes) for i in range(k)]


def zoo_workers_per_gpu(total_bytes: int | None, need: int, cores_cap: int = ZOO_MAX_PER_GPU) -> int:
    """The zoo's workers a GPU: the most (up to `cores_cap` and ZOO_MAX_PER_GPU) whose every share still holds
    the biggest case a row needs (`need` bytes), so that any worker can take any row (a worker that fails
    to start hands its rows to any other); 1 when the GPU's memory is unknown."""
    if total_bytes is None:
        return 1
    best = 1
    for k in range(2, max(1, min(cores_cap, ZOO_MAX_PER_GPU)) + 1):
        if min(b for b in budgets(k, total_bytes) if b is not None) >= need:
            best = k
    return best


def set_budget(nbytes: int | None) -> None:
    """This process's case budget (None: none, the default)."""
    if nbytes is None:
        os.environ.pop(BUDGET_ENV, None)
    else:
        os.environ[BUDGET_ENV] = str(int(nbytes))


def budget() -> int | None:
    """This process's case budget in bytes (None: none was set: nothing bounds a case but the machine)."""
    value = os.environ.get(BUDGET_ENV)
    try:
        return int(value) if value else None
    except ValueError:
        return None
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"  # an MPS client's daemon folders


def under_mps() -> bool:
    """Whether this process's CUDA context is an MPS client (a fault elsewhere on the GPU can reach it)."""
    return bool(os.environ.get(PIPE_ENV))


@contextlib.contextmanager
def environ(changes: dict[str, str | None]) -> Iterator[None]:
    """`changes` in os.environ for the span (None removes a variable); children started inside inherit it."""
    saved = {k: os.environ.get(k) for k in changes}
    for k, v in changes.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def daemon(wanted: bool) -> Iterator[tuple[dict[str, str], str | None]]:
    """(environment for the workers, why there is no daemon or None) for the session's span.

    The environment is empty without a daemon; with one it names its pipe and
    log folders, which the workers must have before they create a CUDA context."""
    if not wanted:
        yield {}, "one worker per GPU"
        return
    if under_mps():
        yield {}, None  # the user runs one and pointed us at it
        return
    control = shutil.which(CONTROL)
    if control is None:
        yield {}, f"{CONTROL} not found: the workers time-slice the GPU"
        return
    folder = tempfile.mkdtemp(prefix="mambafuzz-mps-")
    env = {PIPE_ENV: os.path.join(folder, "pipe"), LOG_ENV: os.path.join(folder, "log")}
    for path in env.values():
        os.makedirs(path)
    full = {**os.environ, **env}
    try:
        started = subprocess.run([control, "-d"], env=full, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        yield {}, f"{CONTROL} -d failed ({exc}): the workers time-slice the GPU"
        return
    if started.returncode:  # the daemon did not start
        shutil.rmtree(folder, ignore_errors=True)
        why = (started.stderr or started.stdout).strip().splitlines()[-1:] or [f"exit {started.returncode}"]
        yield {}, f"{CONTROL} -d: {why[0]}: the workers time-slice the GPU"
        return
    try:
        yield env, None
    finally:
        _quit(control, full)
        shutil.rmtree(folder, ignore_errors=True)


def _quit(control: str, env: dict[str, str]) -> None:
    """Stop the daemon (and its server); wait a little for it to go."""
    try:
        subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return
    pipe = env[PIPE_ENV]
    for _ in range(50):
        if not os.path.exists(os.path.join(pipe, "control")):
            return
        time.sleep(0.1)

"""Compile ahead: a GPU run's first examples of each target wait on Triton's compiler.

Triton compiles a kernel once per constexpr set, warp count and argument
specialisation, 1-2 s each on the H200's host, the first time a process
launches it.  An amplified target needs about six of them (no delay, a delay
before the load, a delay between load and store; at 4 and 8 warps), so in a
150 s zoo run a row's 9 s share went mostly to compiling: 1-1.5 s an example
until every variant was built, then 60 examples a second (bench/RESULTS.md).

Triton keeps what it builds in its on-disk cache, where any process finds
it.  So while the run fuzzes, helper processes on the spare cores launch each
target ahead of its turn in compile-only mode (``JITFunction.run`` with
``warmup=True``: built and cached, never run): a few small cases of the
target's own strategy, once per compiled class of perturbation
(``strategies.perturb.compile_classes``), targets in run order.  The fuzzing
process then loads each variant from the cache instead of building it.

Nothing here touches a verdict.  A helper that fails or falls behind costs
only the time it would have saved; its output goes nowhere; it ignores Ctrl-C
(the run stops it); it reads and writes no example database and no crash file.

A helper holds no GPU memory and is no MPS client: it starts with every GPU
hidden (``CUDA_VISIBLE_DEVICES`` empty, no MPS pipe), materialises its cases in
host memory and compiles for the GPU's compute capability, which the parent
read with ``nvidia-smi`` (``control.gpu``), through a Triton driver that names
that target and opens nothing (``HostDriver``).  On the H100 seven helpers that
opened the GPU took 5-12 GiB each beside the workers (a worker's case builder
ran out of memory), and under MPS a server that lost a client to a fault takes
no new one while any old one lives: a helper holding a context kept the
workers from starting again.  Where the capability cannot be read, no helper
starts.
"""
from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import queue
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

MAX_PROCESSES = 8      # helpers at most: six variants of the next target build at once
SPARE_CORES = 2        # left to the fuzzing process and the run's own bookkeeping
CASES = 3              # small cases drawn per target: the argument specialisations fuzzing meets first
WORK = "mambafuzz.run.precompile:warm"   # what a helper does with one task (tests name their own)


def default_processes(device: str, workers: int = 1) -> int:
    """Helpers worth starting: none off the GPU (nothing compiles), else the cores nobody fuzzes on."""
    if device != "cuda":
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(0, min(MAX_PROCESSES, cores - SPARE_CORES - max(0, workers - 1)))


@contextlib.contextmanager
def compile_only() -> Iterator[None]:
    """Every compiled Triton launch inside builds (or loads) its kernel and returns without running.

    The patch sits on ``JITFunction.run``, which ``kernel[grid](...)``, the
    autotuner and ``mambafuzz.instrument``'s variants all go through; it is
    undone on the way out.  Interpreted launches do not go through it.
    """
    from triton.runtime.jit import JITFunction  # deferred: Triton: loaded with the kernels, after the device is chosen

    original = JITFunction.__dict__["run"]

    def run(self, *args, grid=None, warmup=False, **kwargs):
        return original(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = run
    try:
        yield
    finally:
        JITFunction.run = original


@dataclass(frozen=True)
class Task:
    """One helper's job: target `entry` (a session entry: spec, contract, overlap) under `perturb`."""

    entry: dict
    perturb: tuple | None


def plan(entries: list[dict], profile) -> list[Task]:
    """Every target's compile classes, targets in run order: the next target is built first."""
    from mambafuzz.strategies.perturb import compile_classes  # deferred: Hypothesis loads with the first strategy, not with the parser

    classes = compile_classes(profile)
    return [Task(dict(e), p) for e in entries for p in classes]


# ------------------------------------------------------------------ helper side
def _quiet() -> None:
    """A helper prints nothing: a --json document or a CI log must not carry Triton's warnings."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    except OSError:  # pragma: no cover
        pass


HIDDEN = {"CUDA_VISIBLE_DEVICES": "", "CUDA_MPS_PIPE_DIRECTORY": None, "CUDA_MPS_LOG_DIRECTORY": None}
# what a helper's environment says (control.mps's names): no GPU; set by ``Precompiler.start`` around the spawn,
# so that it holds from the helper's first import on


def _helper_main(job: dict, tasks, done) -> None:
    """A helper process: take tasks until the queue's end marker, report each one's outcome."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the run stops us
    _quiet()
    module, _, name = job["work"].partition(":")
    work = getattr(importlib.import_module(module), name)
    state: dict = {}
    while True:
        task = tasks.get()
        if task is None:
            return
        started = time.monotonic()
        try:
            error = work(task, job, state)
        except Exception as exc:  # noqa: BLE001 - a helper's failure only costs the time it would save
            error = f"{type(exc).__name__}: {exc}"
        done.put((task.entry.get("spec"), task.perturb, error, time.monotonic() - started))


def _cases(task: Task, job: dict, state: dict) -> list:
    """The target's first `CASES` cases of its own strategy, the same in every helper (derandomised)."""
    from hypothesis import HealthCheck, Phase, given, settings  # deferred: Hypothesis loads with the first strategy, not with the parser

    from mambafuzz import contracts, strategies  # deferred: Hypothesis loads with the first strategy, not with the parser

    key = task.entry["spec"]
    if key not in state:
        profile = strategies.PROFILES[job["profile"]]
        strategy = contracts.strategy(task.entry["contract"], profile=profile,
                                           **{**job.get("contract_options", {}),
                                              "overlap": task.entry.get("overlap", "full"),
                                              **task.entry.get("options", {})})
        drawn: list = []
        collect = settings(max_examples=CASES, database=None, derandomize=True, deadline=None,
                           phases=[Phase.generate], suppress_health_check=list(HealthCheck))(
            given(strategy)(lambda case: drawn.append(case)))
        collect()
        state[key] = drawn[:CASES]
    return state[key]


class HostDriver:
    """Triton's active driver as a compile-only launch needs it, opening no GPU: the target (compute
    capability `arch`, as ``nvidia-smi`` read it), device 0, stream 0.  ``JITFunction.run`` asks these
    before it compiles; a warm-up launch returns before it would load or launch anything."""

    def __init__(self, arch: int):
        from triton.backends.compiler import GPUTarget  # deferred: Triton: loaded with the kernels, after the device is chosen

        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def is_active(self) -> bool:
        return True


def _on_host(task: Task, job: dict, state: dict, target) -> str | None:
    """The target's first cases in host memory, launched compile-only for ``job["arch"]`` (no CUDA)."""
    from mambafuzz.judge.materialize import materialize  # deferred: the engine imports numpy and the contracts: only for a run
    from triton.runtime.driver import driver  # deferred: Triton: loaded with the kernels, after the device is chosen

    if "driver" not in state:
        state["driver"] = HostDriver(int(job["arch"]))
        driver.set_active(state["driver"])
    errors = []
    for case in _cases(task, job, state):
        try:
            m = materialize(case.with_perturb(task.perturb), "cpu")
            with compile_only():
                m.run(target.fn)
        except Exception as exc:  # noqa: BLE001 - a case that does not build here is built when fuzzed
            errors.append(f"{type(exc).__name__}: {exc}")
    return "; ".join(errors) or None


def warm(task: Task, job: dict, state: dict) -> str | None:
    """Run the target's first cases under `task.perturb` in compile-only mode; None, or what went wrong.
    For a GPU run (``job["device"]`` cuda) on the host, compiled for ``job["arch"]`` (``_on_host``)."""
    from mambafuzz.control import device  # deferred: it notes TRITON_INTERPRET as the process had it when first imported
    from mambafuzz.judge.engine import run_case  # deferred: the engine imports numpy and the contracts: only for a run
    from mambafuzz.control.targets import resolve  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    if "device" not in state:
        state["device"] = device.select(job["device"], probe=job["device"] != "cuda")
    targets = state.setdefault("targets", {})
    spec = task.entry["spec"]
    if spec not in targets:
        targets[spec] = resolve([spec], contract=task.entry.get("contract"),
                                overlap=task.entry.get("overlap", "full"))[0]
    if state["device"] == "cuda":
        return _on_host(task, job, state, targets[spec])
    errors = []
    for case in _cases(task, job, state):
        try:
            with compile_only():
                run_case(targets[spec].fn, case.with_perturb(task.perturb), state["device"],
                         reps=job["reps"], mode=job["mode"])
        except Exception as exc:  # noqa: BLE001 - a case that does not build here is built when fuzzed
            errors.append(f"{type(exc).__name__}: {exc}")
    return "; ".join(errors) or None


# ------------------------------------------------------------------ parent side
@dataclass
class Precompiler:
    """Helper processes working through a run's tasks; ``stop`` ends them wherever they are."""

    tasks: list[Task]
    processes: list = field(default_factory=list)
    finished: list[tuple] = field(default_factory=list)   # (spec, perturb, error or None, seconds)
    _todo: Any = None     # kept: a queue collected before the helpers unpickle it takes its lock with it
    _done: Any = None
    started: float = 0.0
    seconds: float = 0.0

    @classmethod
    def start(cls, tasks: list[Task], job: dict, processes: int) -> "Precompiler":
        """`processes` helpers (at most one a task) started with every GPU hidden (``HIDDEN``)."""
        from mambafuzz.control.mps import environ  # deferred: one helper of control's, only when helpers start

        pre = cls(tasks)
        if not tasks or processes <= 0:
            return pre
        ctx = mp.get_context("spawn")
        todo = pre._todo = ctx.Queue()
        pre._done = ctx.Queue()
        for task in tasks:
            todo.put(task)
        n = min(processes, len(tasks))
        for _ in range(n):
            todo.put(None)
        pre.started = time.monotonic()
        with environ(HIDDEN):  # the spawned helper inherits it before it imports anything
            for i in range(n):
                p = ctx.Process(target=_helper_main, args=({"work": WORK, **job}, todo, pre._done), daemon=True,
                                name=f"mambafuzz-precompile-{i}")
                p.start()
                pre.processes.append(p)
        return pre

    def _drain(self) -> None:
        while self._done is not None:
            try:
                self.finished.append(self._done.get_nowait())
            except (queue.Empty, OSError, EOFError, ValueError):
                return

    def stop(self, grace: float = 0.0) -> None:
        """Wait up to `grace` seconds for the helpers to finish, then end them."""
        until = time.monotonic() + grace
        for p in self.processes:
            p.join(max(0.0, until - time.monotonic()))
        self._drain()
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        for p in self.processes:
            p.join(2)
            if p.is_alive():  # pragma: no cover - a helper stuck in the driver
                p.kill()
                p.join(1)
        self._drain()
        if self.started:
            self.seconds = time.monotonic() - self.started

    def summary(self) -> dict:
        """Counts for a report: tasks, helpers, done, failed, seconds."""
        return {"tasks": len(self.tasks), "processes": len(self.processes), "done": len(self.finished),
                "failed": sum(1 for f in self.finished if f[2]), "seconds": round(self.seconds, 3)}


def arch(device: str, gpus: list[int] | None = None) -> int | None:
    """The compute capability the helpers build for (the run's first GPU's, from ``nvidia-smi``); None off
    the GPU or where it cannot be read without CUDA (then no helper starts)."""
    if device != "cuda":
        return None
    from mambafuzz.control import gpu  # deferred: nvidia-smi, only for a GPU run's helpers

    info = gpu.query(gpus[0] if gpus else 0)
    return info.capability if info is not None else None


@contextlib.contextmanager
def ahead(targets: list, opts, processes: int, gpus: list[int] | None = None) -> Iterator[Precompiler]:
    """Helpers building `targets`' kernels while the body fuzzes them; stopped when it ends.  They build
    for the first GPU's compute capability (every GPU of a box is alike) and hold no GPU memory."""
    entries = [{"spec": t.name, "contract": t.contract, "overlap": getattr(t, "overlap", "full"),
                "options": dict(getattr(t, "options", {}))}
               for t in targets]
    target_arch = arch(opts.device, gpus) if processes > 0 else None
    job = {"device": opts.device, "profile": opts.profile.name, "reps": opts.reps, "mode": opts.mode,
           "contract_options": dict(opts.contract_options), "arch": target_arch}
    pre = Precompiler.start(plan(entries, opts.profile), job, processes if target_arch is not None else 0)
    try:
        yield pre
    finally:
        pre.stop()

"""Where one GPU example's time goes: a fuzz loop's wall clock split by job (GPU only).

Runs the real loop (``search.fuzz.fuzz_target``, as a worker does) on one
target for `--seconds`, with timers wrapped around the engine's own steps,
and splits the wall clock per example into:

* ``draw``: Hypothesis outside the example (generating the case, its data tree, the database);
* ``materialise``: building the arena, the snapshot and the expected image (``judge.materialize``);
* ``capture``: capturing the CUDA graph of the repetition batch (``gpu_reps.cuda_capture``);
* ``batch``: the rest of the repetition batch (launches, replays, the one sync; ``gpu_reps.run_reps``);
* ``launch host``: within capture and batch, the host's time in ``Materialized.run`` (Triton's
  launcher: the compile-cache lookup, argument binding), reported on its own line;
* ``judge``: the failing repetition's rerun and the verdict (``reps_verdict`` minus ``run_reps``);
* ``other engine``: the rest of ``run_case`` (the host-loop path, instrumentation notes);
* ``bookkeeping``: the example's body minus ``run_case`` (coverage features, progress, counts).

Each example is filed as small or large by its arena (1 MiB).  GPU busy is
the fraction of the wall clock ``nvidia-smi`` saw a kernel running (sampled
every 100 ms), when it is present.

    TRITON_INTERPRET=0 python bench/example_split.py --target triton.batch_memcpy \\
        --target style_kernels.batch:memmove@batch_memcpy --profile gpu --profile gpu-amp --seconds 20 --out FILE
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, require_compiled_gpu  # noqa: E402

PHASES = ("draw", "materialise", "capture", "batch", "judge", "other engine", "bookkeeping")
LARGE = 1 << 20


class Timers:
    """Seconds per phase, per size class, of the example being run (filed when it ends)."""

    def __init__(self):
        self.current: dict[str, float] = defaultdict(float)
        self.size = "small"
        self.done: dict[str, dict[str, float]] = {"small": defaultdict(float), "large": defaultdict(float)}
        self.count = {"small": 0, "large": 0}

    def add(self, phase: str, seconds: float) -> None:
        self.current[phase] += seconds

    def file(self) -> None:
        self.count[self.size] += 1
        for k, v in self.current.items():
            self.done[self.size][k] += v
        self.current = defaultdict(float)
        self.size = "small"


def timed(timers: Timers, phase: str, fn, sync=None):
    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            if sync is not None:
                sync()
            timers.add(phase, time.perf_counter() - t0)
    return wrapper


def instrument(timers: Timers, torch):
    """Wrap the engine's steps with timers; returns the undo function."""
    from mambafuzz.judge import engine, gpu_reps, materialize
    from mambafuzz.search import fuzz

    saved = [(fuzz, "run_case", fuzz.run_case), (engine, "materialize", engine.materialize),
             (gpu_reps, "cuda_capture", gpu_reps.cuda_capture), (gpu_reps, "run_reps", gpu_reps.run_reps),
             (gpu_reps, "failing_mismatch", gpu_reps.failing_mismatch),
             (materialize.Materialized, "run", materialize.Materialized.run)]
    orig_mat = engine.materialize

    def mat(case, device):
        t0 = time.perf_counter()
        m = orig_mat(case, device)
        if device == "cuda":
            torch.cuda.synchronize()
        timers.add("materialise", time.perf_counter() - t0)
        timers.size = "large" if m.arena.numel() >= LARGE else "small"
        return m

    engine.materialize = mat
    fuzz.run_case = timed(timers, "run_case", fuzz.run_case)
    gpu_reps.cuda_capture = timed(timers, "capture", gpu_reps.cuda_capture,
                                  torch.cuda.synchronize if torch.cuda.is_available() else None)
    gpu_reps.run_reps = timed(timers, "run_reps", gpu_reps.run_reps)
    gpu_reps.failing_mismatch = timed(timers, "mismatch", gpu_reps.failing_mismatch)
    materialize.Materialized.run = timed(timers, "launch host", materialize.Materialized.run)

    def undo():
        for owner, name, value in saved:
            setattr(owner, name, value)
    return undo


class BusySampler:
    """nvidia-smi's utilization.gpu every 100 ms (the percent of time a kernel ran), in the background."""

    def __init__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                          "-i", "0", "-lms", "100"], stdout=subprocess.PIPE, text=True)
        except OSError:
            self.proc = None

    def stop(self) -> float | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        values = [float(x) for x in out.split() if x.strip().replace(".", "", 1).isdigit()]
        return sum(values) / len(values) / 100 if values else None


def split_of(timers: Timers, size: str, body: float, draw: float) -> dict:
    """Per-example seconds of each phase for one size class (`draw`: the loop's, per example)."""
    d, n = timers.done[size], max(timers.count[size], 1)
    run_case = d["run_case"]
    capture, run_reps, mismatch = d["capture"], d["run_reps"], d["mismatch"]
    row = {
        "examples": timers.count[size],
        "draw": draw,
        "materialise": d["materialise"] / n,
        "capture": capture / n,
        "batch": (run_reps - capture) / n,
        "judge": mismatch / n,
        "other engine": (run_case - d["materialise"] - run_reps - mismatch) / n,
        "bookkeeping": (body - run_case) / n,
        "launch host": d["launch host"] / n,
    }
    return row


def measure(target_name: str, profile: str, reps: int, seconds: float, torch, device: str, scratch: Path) -> dict:
    from mambafuzz import strategies
    from mambafuzz.control.targets import resolve
    from mambafuzz.control.clock import Deadline
    from mambafuzz.search import fuzz

    spec, _, contract = target_name.partition("@")  # a user kernel names its contract: module:fn@contract
    target = resolve([spec], contract=contract or None)[0]
    timers = Timers()
    body_time = {"small": 0.0, "large": 0.0}
    opts = fuzz.FuzzOptions(device=device, mode="compare" if device == "cuda" else "race",
                            profile=strategies.PROFILES[profile], reps=reps, max_examples=10**9, database=None,
                            seed=1, deadline=Deadline(seconds), crashes_dir=scratch / "crashes",
                            errors_dir=scratch / "errors", witness=False)
    # warm: the kernels compile once for the shapes this profile draws (not an example's cost)
    fuzz.fuzz_target(target, fuzz.FuzzOptions(**{**opts.__dict__, "deadline": Deadline(min(10.0, seconds))}))
    undo = instrument(timers, torch)
    orig_body_run = fuzz._run
    marks = {}

    def run(*a, **kw):  # the example's body starts just before its verdict is asked for
        marks.setdefault("t", time.perf_counter())
        return orig_body_run(*a, **kw)

    fuzz._run = run
    last = [None]

    def progress(report):
        now = time.perf_counter()
        start = marks.pop("t", now)
        body_time[timers.size] += now - start
        timers.file()
        last[0] = report

    sampler = BusySampler()
    t0 = time.perf_counter()
    try:
        report = fuzz.fuzz_target(target, opts, progress)
    finally:
        wall = time.perf_counter() - t0
        busy = sampler.stop()
        undo()
        fuzz._run = orig_body_run
    n = max(report.examples, 1)
    body_all = sum(body_time.values())
    draw = (wall - body_all) / n  # Hypothesis's side is the loop's, whatever the size drawn
    rows = {size: split_of(timers, size, body_time[size], draw) for size in ("small", "large") if timers.count[size]}
    return {"target": target_name, "profile": profile, "device": device, "reps": reps, "seconds": wall, "examples": report.examples,
            "examples_per_s": report.examples / wall, "gpu_busy": busy, "status": report.status,
            "body_s": body_all, "split_ms": {k: {p: round(v * 1e3, 3) if isinstance(v, float) else v
                                                 for p, v in r.items()} for k, r in rows.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", default=None)
    ap.add_argument("--profile", action="append", default=None)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: the interpreter's loop (checks this script; no capture, no batch)")
    args = ap.parse_args()
    if args.device == "cuda":
        torch = require_compiled_gpu("example_split", force_compiled=True)
    else:
        import torch
    from mambafuzz.control import device

    device.select(args.device)
    scratch = Path(tempfile.mkdtemp(prefix="example_split-"))
    rep = Report("example_split")
    if args.device == "cuda":
        rep.header("where one GPU example's time goes", None)
    else:
        rep("# example_split --device cpu (a check of the script, not a measurement)")
    results = []
    for target in args.target or ["triton.batch_memcpy", "style_kernels.batch:memmove@batch_memcpy"]:
        for profile in args.profile or ["gpu", "gpu-amp"]:
            r = measure(target, profile, args.reps, args.seconds, torch, args.device, scratch)
            results.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    cols = ["target", "profile", "size", "examples", "ex/s", "GPU busy", *PHASES, "launch host"]
    rows = []
    for r in results:
        for size, split in r["split_ms"].items():
            rows.append([r["target"], r["profile"], size, str(split["examples"]), f"{r['examples_per_s']:.1f}",
                         "-" if r["gpu_busy"] is None else f"{r['gpu_busy']:.0%}",
                         *[f"{split[p]:.2f}" for p in PHASES], f"{split['launch host']:.2f}"])
    rep(f"{args.reps} reps per example, {args.seconds:g} s per row; milliseconds per example")
    rep()
    rep.table(None, cols, "lll" + "r" * (len(cols) - 3))
    for row in rows:
        rep("| " + " | ".join(row) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    rep.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

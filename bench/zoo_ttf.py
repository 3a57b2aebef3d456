"""Time to first failure of every zoo row, from a fresh start, under several seeds (issue 44).

Each job is one zoo row under one seed: ``fuzz_target`` with no example
database, a per-row cap (``--cap``) and a short shrink (``--shrink-time``),
in a worker process that runs job after job (imports and the device once; a
fresh worker after a CUDA fault).  A job records the row's time to first
failure (``Finding.seconds_to_first``: search time from the row's start, not
shrink; it includes the first example's compile and set-up, reported on its
own as ``first_example_s``), the examples to it, the verdict kind and whether
that kind is one the row declares.  Rows are handed out slowest first
(``kernels.zoo.cost``), one job at a time to whichever worker is free.

On cuda ``--workers K`` run under a private MPS daemon (``run.mps``), each
with its memory share, as ``fuzz --workers-per-gpu K`` does.  A fault there
reaches every worker of the GPU: a fault result that follows another worker's
fault within ``--fault-window`` seconds is suspect and run again (at most
twice; then kept, marked ``suspect``).

Outputs: a markdown table (per row: caught k/N, median and worst time to
first failure, median and worst examples, the first example's median time)
and a JSON document of every job.  A row not caught within the cap counts
its cap as its time (``>cap`` in the table).

CPU (interpreter and race check; a subset, a minute or two on 2 cores):

    python3 bench/zoo_ttf.py --device cpu --seeds 1 2 3 --cap 30 --workers 2 \\
        --target 'zoo.DU-*' --target zoo.SSM-TOKSTRIDE --out /tmp/ttf_cpu.md --json /tmp/ttf_cpu.json

H200 (every row, 5 seeds, 8 workers under MPS, ~7 minutes; bench/gpu_zoo_runs.sh):

    TRITON_INTERPRET=0 python3 bench/zoo_ttf.py --device cuda --profile gpu-amp --seeds 1 2 3 4 5 \\
        --cap 30 --workers 8 --time 420 --out $OUT/ttf_h200.md --json $OUT/ttf_h200.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TAG = "TTF-JOB "  # a worker's result line on stdout (anything else a kernel prints is ignored)


# ------------------------------------------------------------------ worker
def worker(device: str, share: float | None) -> None:
    """Read jobs (JSON lines) from stdin, write one TAG line per result; exit after a lost CUDA context."""
    from mambafuzz.control import device as device_mod

    device_mod.select(device)
    if share is not None:
        from mambafuzz.control.mps import bound_memory
        bound_memory(share)
    from mambafuzz import strategies
    from mambafuzz.control.targets import resolve
    from mambafuzz.control.clock import Deadline
    from mambafuzz.search.fuzz import FuzzOptions, fuzz_target

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # a kernel's prints go to stderr: stdout carries results only
    print(TAG + json.dumps({"ready": True}), file=out, flush=True)
    crashes = tempfile.mkdtemp(prefix="ttf-crashes-")
    for line in sys.stdin:
        job = json.loads(line)
        target = resolve([job["row"]])[0]
        mode = "race" if device == "cpu" else "compare"
        opts = FuzzOptions(device=device, mode=mode, reps=job["reps"], max_examples=10 ** 9, min_examples=1,
                           shrink_budget=job["shrink"], seed=job["seed"], database=None,
                           crashes_dir=Path(crashes), profile=strategies.PROFILES[job["profile"]], witness=False,
                           deadline=Deadline(job["cap"]))
        began = time.time()
        report = fuzz_target(target, opts)
        f = report.finding
        points = report.tally.points()
        result = {**job, "began": began, "ended": time.time(), "examples": report.examples,
                  "seconds": round(report.seconds, 3), "stop": report.stop, "detail": report.detail,
                  "first_example_s": round(points[0][0], 3) if points else None,
                  "context_lost": report.context_lost,
                  "kind": f.verdict.kind if f else None,
                  "ttf": round(f.seconds_to_first, 3) if f else None,
                  "examples_to_first": f.examples_to_first if f else None,
                  "case": f.case.describe() if f else None}
        print(TAG + json.dumps(result), file=out, flush=True)
        if report.context_lost:
            out.close()
            os._exit(0)  # a broken CUDA context: the parent starts a fresh worker


# ------------------------------------------------------------------ parent
class Slot:
    def __init__(self, index: int, args, share: float | None, log):
        self.index, self.args, self.share, self.log = index, args, share, log
        self.proc: subprocess.Popen | None = None
        self.job: dict | None = None
        self.started_at = 0.0
        self.ready = False

    def start(self) -> None:
        cmd = [sys.executable, __file__, "--worker", "--device", self.args.device]
        if self.share is not None:
            cmd += ["--share", f"{self.share:.4f}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1, env=env)
        self.ready, self.job = False, None

    def give(self, job: dict) -> None:
        self.job, self.started_at = job, time.time()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()


def declared(rows: list[str], device: str) -> dict[str, tuple[str, ...]]:
    from mambafuzz.kernels import registry

    return {r: registry.zoo_entry(r.split(".", 1)[1]).caught_as(device) for r in rows}


def rows_by_cost(patterns: list[str] | None, device: str) -> list[str]:
    """The zoo targets (all, or those `patterns` name), slowest first (``kernels.zoo.order``)."""
    from mambafuzz.kernels import registry, zoo

    os.environ.setdefault("TRITON_INTERPRET", "1" if device == "cpu" else "0")
    targets = [t for t in registry.zoo_targets() if device in t.devices]
    if patterns:
        from mambafuzz.control.targets import resolve
        names = {t.name for t in resolve(patterns)}
        targets = [t for t in targets if t.name in names]
    return [t.name for t in zoo.order(targets, device)]


def run_jobs(args, jobs: list[dict], log) -> list[dict]:
    import selectors

    from mambafuzz.control import mps

    k = max(1, args.workers)
    shares = [mps.memory_share(i, k) if args.device == "cuda" and k > 1 else None for i in range(k)]
    results: list[dict] = []
    faults: list[tuple[float, int]] = []  # (when, slot) of fault results and worker deaths
    tries: dict[tuple[str, int], int] = {}
    queue = list(jobs)
    end = time.time() + args.time if args.time else None
    with mps.daemon(args.device == "cuda" and k > 1 and args.mps) as (env, why):
        if why and args.device == "cuda":
            print(f"zoo_ttf: {why}", file=sys.stderr)
        with mps.environ(env):
            slots = [Slot(i, args, shares[i], log) for i in range(k)]
            for s in slots:
                s.start()
            sel = selectors.DefaultSelector()
            for s in slots:
                sel.register(s.proc.stdout, selectors.EVENT_READ, s)
            while any(s.proc is not None for s in slots):
                for s in slots:  # hand out work
                    if s.proc is not None and s.ready and s.job is None:
                        if queue and (end is None or time.time() < end):
                            s.give(queue.pop(0))
                        else:
                            s.proc.stdin.close()
                            s.ready = False
                for key, _ in sel.select(timeout=0.5):
                    s = key.data
                    line = s.proc.stdout.readline()
                    if line.startswith(TAG):
                        body = json.loads(line[len(TAG):])
                        if body.get("ready"):
                            s.ready = True
                            continue
                        s.job = None
                        suspect = False
                        if body["kind"] in ("fault", "crash") or body["context_lost"]:
                            # another worker's fault shortly before: it broke this context too (a worker that
                            # was idle then faults on its next job's first launch)
                            suspect = any(slot != s.index and body["ended"] - args.fault_window <= when
                                          <= body["ended"] + 0.5 for when, slot in faults)
                            faults.append((body["ended"], s.index))
                        key2 = (body["row"], body["seed"])
                        if suspect and tries.get(key2, 0) < 2:
                            tries[key2] = tries.get(key2, 0) + 1
                            queue.insert(0, {x: body[x] for x in ("row", "seed", "cap", "shrink", "reps", "profile")})
                        else:
                            results.append({**body, "suspect": suspect})
                            print(f"{body['row']} seed {body['seed']}: {body['kind'] or 'none'} "
                                  f"ttf {body['ttf']} ex {body['examples_to_first']} ({body['examples']} examples)",
                                  file=sys.stderr, flush=True)
                    elif line == "":  # the worker exited
                        sel.unregister(s.proc.stdout)
                        s.proc.wait()
                        if s.job is not None:  # it died mid-job: a crash, run again once
                            faults.append((time.time(), s.index))
                            key2 = (s.job["row"], s.job["seed"])
                            if tries.get(key2, 0) < 2:
                                tries[key2] = tries.get(key2, 0) + 1
                                queue.insert(0, s.job)
                            else:
                                results.append({**s.job, "kind": "crash", "ttf": None, "examples_to_first": None,
                                                "examples": 0, "stop": "crash", "suspect": True})
                        alive = queue and (end is None or time.time() < end)
                        s.proc = None
                        if alive:
                            time.sleep(1.0)  # an MPS server still letting its last clients go
                            s.start()
                            sel.register(s.proc.stdout, selectors.EVENT_READ, s)
    for job in queue:
        results.append({**job, "kind": None, "ttf": None, "examples_to_first": None, "examples": 0,
                        "stop": "not-run", "suspect": False})
    return results


def table(results: list[dict], rows: list[str], kinds: dict, args) -> str:
    lines = [f"Zoo time to first failure: device {args.device}, profile {args.profile}, reps {args.reps}, "
             f"seeds {' '.join(map(str, args.seeds))}, cap {args.cap:g} s per job, {args.workers} worker(s). "
             f"Times are search time from the row's start (first example's compile included), not shrink; "
             f"a row not caught counts its cap.", "",
             "| row | caught | ttf median s | ttf worst s | examples median | examples worst | 1st example s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        mine = [r for r in results if r["row"] == row]
        ok = [r for r in mine if r.get("kind") in kinds[row]]
        ran = [r for r in mine if r.get("stop") != "not-run"]
        times = [r["ttf"] if r in ok else args.cap for r in ran]
        exs = [r["examples_to_first"] if r in ok else r.get("examples", 0) for r in ran]
        firsts = [r["first_example_s"] for r in ran if r.get("first_example_s") is not None]
        other = sorted({r["kind"] for r in mine if r.get("kind") and r not in ok})
        worst = max(times) if times else None
        fmt = (lambda v: "-" if v is None else f"{v:.2f}")
        lines.append(f"| {row} | {len(ok)}/{len(mine)}{' (also ' + ', '.join(other) + ')' if other else ''} | "
                     f"{fmt(statistics.median(times) if times else None)} | "
                     f"{('>' if len(ok) < len(ran) else '') + fmt(worst)} | "
                     f"{statistics.median(exs) if exs else '-'} | {max(exs) if exs else '-'} | "
                     f"{fmt(statistics.median(firsts) if firsts else None)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--share", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--profile", choices=("cpu", "gpu", "gpu-amp"), default=None)
    p.add_argument("--reps", type=int, default=None, help="None: 1 on cpu, 100 on cuda (the zoo's default)")
    p.add_argument("--target", action="append", default=None, help="zoo rows (names or globs); default all")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--cap", type=float, default=30.0, help="seconds a row may search under one seed")
    p.add_argument("--shrink-time", type=float, default=0.5)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--no-mps", dest="mps", action="store_false")
    p.add_argument("--time", type=float, default=None, help="no job starts after this many seconds")
    p.add_argument("--fault-window", type=float, default=10.0)
    p.add_argument("--out", type=Path, default=None, help="markdown table")
    p.add_argument("--json", type=Path, default=None, help="every job's result")
    p.add_argument("--log", type=Path, default=None, help="the workers' stderr (default: a temporary file)")
    args = p.parse_args()
    if args.worker:
        worker(args.device, args.share)
        return 0
    args.profile = args.profile or ("cpu" if args.device == "cpu" else "gpu")
    args.reps = args.reps or (1 if args.device == "cpu" else 100)
    rows = rows_by_cost(args.target, args.device)
    kinds = declared(rows, args.device)
    jobs = [{"row": r, "seed": s, "cap": args.cap, "shrink": args.shrink_time, "reps": args.reps,
             "profile": args.profile} for s in args.seeds for r in rows]
    log_path = args.log or Path(tempfile.mkstemp(prefix="zoo_ttf_", suffix=".log")[1])
    t0 = time.time()
    with open(log_path, "w") as log:
        results = run_jobs(args, jobs, log)
    wall = time.time() - t0
    text = table(results, rows, kinds, args) + f"\n{len(results)} jobs in {wall:.0f} s wall; workers' log {log_path}\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": args.device, "profile": args.profile, "reps": args.reps,
                                         "seeds": args.seeds, "cap": args.cap, "workers": args.workers,
                                         "wall_s": round(wall, 1), "declared": {r: list(k) for r, k in kinds.items()},
                                         "jobs": results}, indent=1))
    caught_all = all(any(r["row"] == row and r.get("kind") in kinds[row] for r in results) for row in rows)
    return 0 if caught_all else 1


if __name__ == "__main__":
    sys.exit(main())

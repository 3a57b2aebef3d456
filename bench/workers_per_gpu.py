"""Workers per GPU: examples a second and GPU busy for K = 1, 2, 4, 8, 12, side by side (GPU only).

Each row is one ``mambafuzz fuzz`` session, as a user runs it (``--isolate``,
``--workers-per-gpu K``, the same target, profile, seed and time budget, a
warm Triton cache): examples/s is every worker's examples over the session's
fuzzing seconds; GPU busy is the mean of ``nvidia-smi``'s utilization.gpu
sampled every 100 ms during the session; the verdict must not change with K.
A ``--no-mps`` row at the largest K shows what time-slicing alone gives.

    TRITON_INTERPRET=0 python bench/workers_per_gpu.py --target style_kernels.batch:memmove@batch_memcpy \\
        --ks 1 2 4 8 12 --seconds 30 --out FILE
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, require_compiled_gpu  # noqa: E402
from example_split import BusySampler  # noqa: E402


def session(target: str, k: int, mps: bool, args, workdir: Path) -> dict:
    spec, _, contract = target.partition("@")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "TRITON_INTERPRET": "0"}
    cmd = [sys.executable, "-m", "mambafuzz.cli", "fuzz", "--target", spec, *(["--contract", contract] if contract
                                                                           else []),
           "--device", "cuda", "--profile", args.profile, "--reps", str(args.reps), "--time", str(args.seconds),
           "--isolate", "--workers-per-gpu", str(k), "--mps" if mps else "--no-mps", "--max-examples", "100000000",
           "--database", "none", "--seed", "1", "--json", "--fresh", "--crashes-dir", str(workdir / "crashes")]
    sampler = BusySampler()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=args.seconds * 3 + 240)
    wall = time.monotonic() - start
    busy = sampler.stop()
    try:
        body = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"k": k, "mps": mps, "error": f"exit {proc.returncode}: {proc.stderr[-600:]}"}
    row = body["targets"][0]
    return {"k": k, "mps": mps, "examples": row["examples"], "seconds": row["seconds"], "wall": wall,
            "examples_per_s": row["examples"] / max(row["seconds"], 1e-9), "gpu_busy": busy,
            "status": row["status"], "exit": proc.returncode, "reps": row.get("reps")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", default=None)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8, 12])
    ap.add_argument("--profile", default="gpu-amp")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--no-mps-row", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    require_compiled_gpu("workers_per_gpu", force_compiled=True)
    rep = Report("workers_per_gpu")
    rep.header("examples a second with K workers on one GPU", None)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.target or ["style_kernels.batch:memmove@batch_memcpy"]:
            session(target, 1, True, argparse.Namespace(**{**vars(args), "seconds": 10.0}), Path(tmp))  # warm
            rows = [(k, True) for k in args.ks] + ([(max(args.ks), False)] if args.no_mps_row else [])
            base = None
            for k, mps in rows:
                r = session(target, k, mps, args, Path(tmp))
                r["target"] = target
                base = base or r.get("examples_per_s")
                r["speedup"] = (r.get("examples_per_s") or 0) / base if base else None
                results.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    rep(f"profile {args.profile}, {args.reps} reps, {args.seconds:g} s a session, seed 1")
    rep()
    rep.table(None, ["target", "K", "MPS", "examples", "examples/s", "x K=1", "GPU busy", "verdict"], "lrlrrrrl")
    for r in results:
        if "error" in r:
            rep(f"| {r['target']} | {r['k']} | {r['mps']} | error: {r['error'][:120]} | | | | |")
            continue
        rep(f"| {r['target']} | {r['k']} | {'yes' if r['mps'] else 'no'} | {r['examples']} | "
            f"{r['examples_per_s']:.1f} | {r['speedup']:.2f} | "
            f"{'-' if r['gpu_busy'] is None else format(r['gpu_busy'], '.0%')} | {r['status']} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    rep.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

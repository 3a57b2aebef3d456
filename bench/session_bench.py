"""Worker sessions on GPUs: examples per second with 1 and 2 GPUs, and a faulting target mid-session.

Each measurement is one `mambafuzz fuzz` session (worker processes, one per
GPU) with the same targets, options and time budget; examples/s counts the
examples all workers finished divided by the session's fuzzing time (worker
start-up excluded: it is reported separately).

    python bench/session_bench.py --seconds 60 --out bench/results/session_bench.md
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


def fuzz(args: list[str], workdir: Path, timeout: float) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mambafuzz.cli", "fuzz", *args, "--json", "--fresh"],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - start
    if not proc.stdout.strip():
        raise SystemExit(f"session failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget of each session")
    ap.add_argument("--target", default="triton.state_copy")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("session_bench: needs CUDA GPUs", file=sys.stderr)
        return 2
    n_gpus = torch.cuda.device_count()
    lines = [f"# session_bench ({torch.cuda.get_device_name(0)} x {n_gpus}, torch {torch.__version__})", "",
             f"target {args.target}, {args.reps} reps per case, {args.seconds:g} s budget per session", "",
             "| GPUs | examples | fuzzing s | examples/s | session wall s | speed-up |", "| --- | --- | --- | --- | --- | --- |"]
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in [g for g in (1, 2) if g <= n_gpus]:
            body, wall = fuzz(["--target", args.target, "--device", "cuda", "--gpus", str(gpus), "--reps",
                               str(args.reps), "--time", str(args.seconds), "--max-examples", "1000000",
                               "--database", "none", "--seed", "1"], Path(tmp), args.seconds * 3 + 300)
            row = body["targets"][0]
            rate = row["examples"] / max(row["seconds"], 1e-9)
            base = base or rate
            lines.append(f"| {gpus} | {row['examples']} | {row['seconds']:.1f} | {rate:.1f} | {wall:.1f} | "
                         f"{rate / base:.2f}x |")
            print(lines[-1], flush=True)
        # a faulting target and a hanging-free correct target in one session on every GPU
        body, wall = fuzz(["--target", "zoo.MISALIGN", "--target", "zoo.ADDR-I32", "--target", "triton.batch_memcpy",
                           "--device", "cuda", "--gpus", str(min(2, n_gpus)), "--reps", "20", "--time",
                           str(args.seconds), "--max-examples", "1000000", "--database", "none", "--seed", "2",
                           "--crashes-dir", str(Path(tmp) / "crashes")], Path(tmp), args.seconds * 3 + 300)
    lines += ["", f"Faulting targets mid-session ({min(2, n_gpus)} GPU workers, {args.seconds:g} s, wall {wall:.1f} s):",
              "", "| target | status | examples | finding |", "| --- | --- | --- | --- |"]
    for row in body["targets"]:
        finding = row.get("finding") or {}
        lines.append(f"| {row['target']} | {row['status']} | {row['examples']} | "
                     f"{finding.get('kind', '')}: {finding.get('summary', '')[:100]} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

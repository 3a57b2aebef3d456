"""Compile ahead, side by side: what a short share of an amplified GPU run gets with and without helpers.

Each row runs ``mambafuzz fuzz --target LEAD --target T --device cuda
--profile gpu-amp`` for twice ``--time`` seconds (a 150 s zoo run gives a
row about 9) in a fresh process with a fresh, empty Triton cache, twice in a
row: ``--precompile 0`` (the baseline: every variant is built when fuzzing
first needs it) and ``--precompile N`` (helpers build each target's variants
ahead, ``mambafuzz.run.precompile``).  The lead target (``triton.slot_copy``, a
kernel of its own) stands for the rows before T in a zoo run: it is what the
helpers work ahead of.  The table is T's: the examples it ran in its share,
the seconds to its 10th example, its verdict and seconds to the first
failure, and the kernels built into the cache over the whole run.

    python bench/precompile_bench.py --out bench/results/precompile_h200.md
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
sys.path.insert(0, str(ROOT / "bench"))
from _gpu_common import Report, commit  # noqa: E402  (imports neither torch nor triton)

TARGETS = ["zoo.BM-NOGUARD", "zoo.DS-ROW", "zoo.PP-INPLACE", "zoo.SD-SPAN"]
LEAD = "triton.slot_copy"


def _built(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.cubin"))


def _run(target: str, helpers: str, seconds: float, reps: int, seed: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "triton-cache"
        cache.mkdir()
        env["TRITON_CACHE_DIR"] = str(cache)
        cmd = [sys.executable, "-m", "mambafuzz", "fuzz", "--target", LEAD, "--target", target, "--device", "cuda",
               "--profile", "gpu-amp", "--reps", str(reps), "--time", str(2 * seconds), "--seed", str(seed),
               "--database", "none", "--crashes-dir", f"{tmp}/crashes", "--max-examples", "100000",
               "--json", "--no-isolate", "--no-cpu-witness", "--precompile", helpers]
        start = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        wall = time.monotonic() - start
        built = _built(cache)
    try:
        t = json.loads(r.stdout)["targets"][1]
    except (json.JSONDecodeError, KeyError, IndexError):
        return {"target": target, "helpers": helpers, "exit": r.returncode,
                "error": (r.stderr.strip().splitlines() or ["no output"])[-1]}
    tenth = next((s for s, n in t.get("timeline", []) if n >= 10), None)
    f = t.get("finding") or {}
    return {"target": target, "helpers": helpers, "exit": r.returncode, "wall": round(wall, 1),
            "status": t["status"], "examples": t["examples"], "tenth": tenth,
            "first": f.get("seconds_to_first"), "built": built}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=float, default=9.0, help="seconds per target (default 9: a 150 s zoo row)")
    ap.add_argument("--helpers", default="auto", help="--precompile for the second run (default auto)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=None, help="only targets containing this text")
    ap.add_argument("--out", type=Path, default=None, help="the markdown report")
    args = ap.parse_args(argv)
    out = Report("precompile_bench")
    out("# compile ahead: a short amplified share with and without helpers")
    out()
    out(f"- command: python bench/precompile_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    out(f"- commit {commit()}; each run a fresh process and an empty Triton cache, {LEAD} first; "
        f"--time {2 * args.time:g} s for the two, --reps {args.reps}, --seed {args.seed}")
    out()
    out("| target | --precompile | verdict | examples | s to 10th | s to 1st failure | kernels built |")
    out("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for target in TARGETS:
        if args.only and args.only not in target:
            continue
        for helpers in ("0", args.helpers):
            row = _run(target, helpers, args.time, args.reps, args.seed)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if "error" in row:
                out(f"| {target} | {helpers} | error (exit {row['exit']}): {row['error']} |||||")
                continue
            out(f"| {target} | {helpers} | {row['status']} | {row['examples']} | {row['tenth'] or ''} "
                f"| {row['first'] if row['first'] is not None else ''} | {row['built']} |")
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

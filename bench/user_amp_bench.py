"""Races in the user's own kernels: plain repetition vs amplified vs the CPU witness, side by side.

Runs ``mambafuzz fuzz --target module:function`` (the CLI, as a user does, one
process per row) on engine-style kernels this project only knows as a user's
(``tests/style_kernels``: loaded loop bounds, Python ``and``, int64/uint64
pointer arrays, int32 sizes) and tabulates, per kernel and profile: the
verdict, examples and seconds to the first failure, the rate it was found at,
the shrunk case and its rate, and the CPU witness.

* ``--device cuda``: each kernel under ``--profile gpu`` (plain repetitions)
  and ``--profile gpu-amp`` (the kernel's launches instrumented with warp
  delays, ``mambafuzz.instrument``); correct kernels must stay clean.
* ``--device cpu``: the race recorder (Triton's interpreter, race mode): the
  reference shrunk sizes the GPU's are compared with (``--cpu-json``).

    python bench/user_amp_bench.py --device cpu --out bench/results/user_amp_cpu.json
    python bench/user_amp_bench.py --device cuda --cpu-json bench/results/user_amp_cpu.json \\
        --out bench/results/user_amp_h200.json --md bench/results/user_amp_h200.md
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
from _gpu_common import commit  # noqa: E402  (imports neither torch nor triton)

# (target, overlap, expected, bug shape)
KERNELS = [
    ("style_kernels.batch:left_barrier_before_load", "left", "race", "barrier before the load"),
    ("style_kernels.batch:left_guard_misses_short", "left", "race", "guard misses overlaps < 1 block"),
    ("style_kernels.batch:forward_on_right_overlap", "full", "mismatch", "forward walk on right overlap"),
    ("style_kernels.batch:memmove", "full", "clean", "none (uint64 pointers)"),
    ("style_kernels.batch:memmove_left", "left", "clean", "none (int64 pointers)"),
]


def _run(target: str, overlap: str, device: str, profile: str, seconds: float, shrink: float,
         reps: int, seed: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.pop("TRITON_INTERPRET", None)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mambafuzz", "fuzz", "--target", target, "--contract", "batch_memcpy",
               "--overlap", overlap, "--device", device, "--profile", profile, "--time", str(seconds),
               "--shrink-time", str(shrink), "--seed", str(seed), "--database", "none",
               "--crashes-dir", f"{tmp}/crashes", "--max-examples", "100000", "--json", "--no-isolate"]
        if device == "cuda":
            cmd += ["--reps", str(reps)]
        start = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        wall = time.monotonic() - start
    try:
        body = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"target": target, "profile": profile, "exit": r.returncode, "wall": wall,
                "error": (r.stderr.strip().splitlines() or ["no output"])[-1]}
    t = body["targets"][0]
    f = t.get("finding") or {}
    case = f.get("case") or {}
    copies = case.get("copies") or []
    return {"target": target, "profile": profile, "exit": r.returncode, "wall": round(wall, 1),
            "status": t["status"], "examples": t["examples"], "reps": t["reps"], "why": t.get("why"),
            "kind": f.get("kind"), "examples_to_first": f.get("examples_to_first"),
            "seconds_to_first": f.get("seconds_to_first"), "found_rate": f.get("found_rate"),
            "rate": [f.get("failures"), f.get("reps")] if f else None, "case": f.get("case_summary"),
            "rows": len(copies), "bytes": sum(c[2] for c in copies), "arena": case.get("arena_size"),
            "witness": (f.get("witness") or {}).get("status"),
            "witness_line": (f.get("witness") or {}).get("why") or (f.get("witness") or {}).get("summary")}


def _md(rows: list[dict], cpu: dict[str, dict], header: list[str]) -> str:
    out = header + ["", "| kernel | bug | profile | verdict | ex to 1st | s to 1st | rate found | shrunk case "
                        "| rate shrunk | arena vs CPU | CPU witness |",
                    "| --- | --- | --- | --- | ---: | ---: | --- | --- | --- | ---: | --- |"]
    bugs = {k[0]: k[3] for k in KERNELS}
    for r in rows:
        if "error" in r:
            out.append(f"| {r['target'].split(':')[1]} | | {r['profile']} | error: {r['error']} |||||||")
            continue
        ref = cpu.get(r["target"]) or {}
        ratio = (f"{r['arena'] / ref['arena']:.1f}x" if r.get("arena") and ref.get("arena") else "")
        fr = "/".join(map(str, r["found_rate"])) if r.get("found_rate") else ""
        rs = "/".join(map(str, r["rate"])) if r.get("rate") else ""
        verdict = r["status"] if r["status"] != "finding" else r["kind"]
        out.append(f"| {r['target'].split(':')[1]} | {bugs.get(r['target'], '')} | {r['profile']} | {verdict} "
                   f"| {r.get('examples_to_first') if r.get('examples_to_first') is not None else r['examples']} "
                   f"| {r.get('seconds_to_first') if r.get('seconds_to_first') is not None else ''} | {fr} "
                   f"| {r.get('case') or ''} | {rs} | {ratio} | {r.get('witness') or ''} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--time", type=float, default=60.0, help="seconds per racy kernel and profile (default 60)")
    ap.add_argument("--clean-time", type=float, default=30.0, help="seconds per correct kernel (default 30)")
    ap.add_argument("--plain-time", type=float, default=None,
                    help="seconds per racy kernel under plain repetition (default --time)")
    ap.add_argument("--shrink-time", type=float, default=40.0)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu-json", type=Path, help="the CPU run's --out, for the shrunk-size ratio")
    ap.add_argument("--out", type=Path, required=True, help="JSON rows")
    ap.add_argument("--md", type=Path, help="also a markdown table here")
    ap.add_argument("--only", default=None, help="only targets containing this text")
    args = ap.parse_args(argv)
    profiles = ["cpu"] if args.device == "cpu" else ["gpu", "gpu-amp"]
    rows = []
    for target, overlap, expected, _bug in KERNELS:
        if args.only and args.only not in target:
            continue
        for profile in profiles:
            if expected != "race" and profile == "gpu":
                continue  # correct kernels under every perturbation (gpu-amp draws them all); plain is for races
            seconds = args.clean_time if expected == "clean" else args.time
            if profile == "gpu" and args.plain_time:
                seconds = args.plain_time
            row = _run(target, overlap, args.device, profile, seconds, args.shrink_time, args.reps, args.seed)
            row["expected"] = expected
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    if args.md:
        cpu = {}
        if args.cpu_json and args.cpu_json.exists():
            cpu = {r["target"]: r for r in json.loads(args.cpu_json.read_text())}
        import platform
        header = [f"# user-kernel amplification ({args.device})", "",
                  f"- command: python bench/user_amp_bench.py {' '.join(argv or sys.argv[1:])}",
                  f"- python {platform.python_version()}; commit {commit()}"]
        args.md.write_text(_md(rows, cpu, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())

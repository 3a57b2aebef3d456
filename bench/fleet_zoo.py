"""A campaign over the amplified zoo: worker processes standing in for boxes, one hub, one set of buckets.

Starts a redis-server (append-only, in the work folder; or uses --hub), runs
--workers ``mambafuzz fuzz --fleet`` processes over every zoo row (each its own
box and crash folder; worker i on GPU i modulo the GPUs present, so one H200
is split into two boxes and a 2-GPU box gives each its own), then ``mambafuzz
collect``, and says per row: its confirmed buckets (one expected, of a kind the
row declares for the device), the boxes that saw it, the time from the
campaign's start to its first finding, and the examples each box ran.  The
integrator's command (an H200, 2 workers, 300 s each; the box needs
``redis-server`` and the ``redis`` package):

    TRITON_INTERPRET=0 python3 bench/fleet_zoo.py --device cuda --workers 2 --time 300 \\
        --out bench/results/fleet_zoo_h200.md --json bench/results/fleet_zoo_h200.json

A CPU rehearsal of the script itself (four rows, a minute):

    python3 bench/fleet_zoo.py --device cpu --workers 2 --time 40 --target zoo.TAIL-DROP \\
        --target zoo.BM-NOGUARD --target zoo.SLOT-FLAT --target zoo.NOOP-SKIP --out /tmp/fleet_zoo_cpu.md

Exit 0 when every row is found once, as one confirmed bucket of a declared kind; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hub(binary: str, folder: Path) -> tuple[subprocess.Popen, str]:
    import redis

    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, f"redis://127.0.0.1:{port}/0"
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"redis-server on port {port} did not start")


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=20, check=True)
        return len([line for line in out.stdout.splitlines() if line.strip()])
    except (OSError, subprocess.SubprocessError):
        return 0


def zoo_kinds(device: str) -> dict[str, tuple[str, ...]]:
    """Each zoo row's target -> the verdict kinds that catch it on `device` (read with the interpreter on)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    code = ("import json; from mambafuzz.kernels import registry; print(json.dumps({f'zoo.{e.id}': "
            f"list(e.caught_as({device!r})) for e in registry.ZOO}}))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT),
                                                            "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=300, check=True)
    return {k: tuple(v) for k, v in json.loads(out.stdout).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--workers", type=int, default=2, help="fuzz processes, each a box of the campaign")
    ap.add_argument("--time", type=float, default=300.0, help="each box's --time")
    ap.add_argument("--target", action="append", default=None, help="rows (default: every zoo row)")
    ap.add_argument("--reps", type=int, default=None, help="--reps (None: 50 on cuda, 1 on cpu)")
    ap.add_argument("--profile", default=None, help="--profile (None: gpu-amp on cuda, cpu on cpu)")
    ap.add_argument("--hub", default=None, help="an existing hub (None: a redis-server started here)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server"), help="the redis-server to start")
    ap.add_argument("--workdir", type=Path, default=None, help="crash folders and the collected campaign")
    ap.add_argument("--out", type=Path, default=None, help="a markdown table")
    ap.add_argument("--json", type=Path, default=None, help="the collected summary and the per-row verdicts")
    args = ap.parse_args()
    try:
        import redis  # noqa: F401
    except ImportError:
        sys.exit("the hub needs the 'redis' package (pip install redis, or put a copy on PYTHONPATH)")
    if args.hub is None and not args.redis_server:
        sys.exit("no redis-server here (apt-get install redis-server), and no --hub redis://HOST:PORT/DB given")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fleet-zoo-"))
    work.mkdir(parents=True, exist_ok=True)
    kinds = zoo_kinds(args.device)
    targets = args.target or sorted(kinds)
    gpus = gpu_count() if args.device == "cuda" else 0
    hub_proc, url = (None, args.hub) if args.hub else start_hub(args.redis_server, work)
    campaign = f"zoo-{int(time.time())}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="triton-cache-")}
    if args.device == "cuda":
        env["TRITON_INTERPRET"] = "0"
    else:
        env.pop("TRITON_INTERPRET", None)
    reps = args.reps or (50 if args.device == "cuda" else 1)
    profile = args.profile or ("gpu-amp" if args.device == "cuda" else "cpu")
    commands, procs = [], []
    start = time.monotonic()
    try:
        for i in range(args.workers):
            cmd = [sys.executable, "-m", "mambafuzz.cli", "fuzz", *[a for t in targets for a in ("--target", t)],
                   "--device", args.device, "--profile", profile, "--reps", str(reps), "--time", str(args.time),
                   "--fleet", url, "--campaign", campaign, "--box", f"box{i}", "--crashes-dir", str(work / f"box{i}"),
                   "--shrink-time", "2", "--no-cpu-witness", "--workers-per-gpu", "1", "--json"]
            box_env = {**env, **({"CUDA_VISIBLE_DEVICES": str(i % gpus)} if gpus else {})}
            commands.append(("CUDA_VISIBLE_DEVICES=" + box_env["CUDA_VISIBLE_DEVICES"] + " " if gpus else "")
                            + " ".join(cmd[1:]))
            procs.append(subprocess.Popen(cmd, cwd=work, env=box_env, stdout=open(work / f"box{i}.json", "w"),
                                          stderr=open(work / f"box{i}.err", "w")))
        codes = [p.wait(timeout=args.time * 2 + 600) for p in procs]
        wall = time.monotonic() - start
        got = subprocess.run([sys.executable, "-m", "mambafuzz.cli", "collect", url, "--campaign", campaign,
                              "-o", str(work / "campaign"), "--json"], cwd=work, env=env, capture_output=True,
                             text=True, timeout=600)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if hub_proc is not None:
            hub_proc.terminate()
            hub_proc.wait(10)
    try:
        summary = json.loads(got.stdout)
    except json.JSONDecodeError:
        sys.exit(f"collect failed (exit {got.returncode}): {got.stderr[-2000:]}")
    rows, all_once = [], True
    for t in summary["targets"]:
        mine = [b for b in summary["buckets"] if b["target"] == t["target"]]
        counted = [b for b in mine if b["counts"]]
        declared = kinds.get(t["target"], ())
        once = len(counted) == 1 and len(mine) == 1 and (not declared or counted[0]["kind"] in declared)
        all_once &= once
        rows.append({"target": t["target"], "once": once, "buckets": len(mine), "confirmed": len(counted),
                     "kinds": [b["kind"] for b in counted], "declared": list(declared),
                     "boxes": sorted({x for b in mine for x in b["boxes"]}), "seen": sum(b["count"] for b in mine),
                     "first_finding_s": t["first_finding_s"], "examples": t["examples"],
                     "per_box": {b: v["examples"] for b, v in t["boxes"].items()}, "status": t["status"]})
    lines = [f"# A campaign over the zoo: {args.workers} boxes on {args.device} ({gpus or 'no'} GPU(s) present)", "",
             f"Commands (each box), wall {wall:.0f} s, box exits {codes}, collect exit {got.returncode}:", ""]
    lines += [f"    {c}" for c in commands]
    lines += ["", f"**{sum(r['once'] for r in rows)} of {len(rows)} rows found once, as one confirmed bucket of a "
              f"declared kind.**", "",
              "| row | once | buckets (confirmed) | kind | boxes (findings) | first finding after | examples per box |",
              "| --- | --- | --- | --- | --- | ---: | --- |"]
    for r in rows:
        first = "-" if r["first_finding_s"] is None else f"{r['first_finding_s']:.1f} s"
        per_box = ", ".join(f"{b} {n}" for b, n in r["per_box"].items())
        lines.append(f"| {r['target']} | {'yes' if r['once'] else 'NO'} | {r['buckets']} ({r['confirmed']}) | "
                     f"{', '.join(r['kinds']) or '-'} | {', '.join(r['boxes']) or '-'} ({r['seen']}) | {first} | "
                     f"{per_box} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"commands": commands, "wall": wall, "box_exits": codes, "rows": rows,
                                         "summary": summary}, indent=1))
    return 0 if all_once else 1


if __name__ == "__main__":
    sys.exit(main())

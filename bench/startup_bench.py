"""Wall and CPU seconds of `mambafuzz --help`, `list` and `smoke`: a tree before against one after.

Each command runs as a user runs it (``python -m mambafuzz ...`` in a scratch
folder, the tree on ``PYTHONPATH``, stdout piped), the two trees
alternating run by run so that a busy machine weighs on both alike.  Before is
the commit at HEAD (``git archive HEAD``, unless ``--before DIR``), after this
checkout as it is.  Smoke runs with ``--database none``, so every run does the
same work; each tree's --help and list run once untimed first (warm caches).

    python bench/startup_bench.py                    # 5 x --help, 3 x list, 1 x smoke per tree
    python bench/startup_bench.py --smoke-runs 0     # start-up only
    python bench/startup_bench.py --append           # also a section at the end of bench/RESULTS.md
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from _gpu_common import commit  # noqa: E402

COMMANDS = {"--help": ["--help"], "list": ["list"], "smoke": ["smoke", "--database", "none"]}


def run(tree: Path, argv: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """(wall s, CPU s, exit code, its summary line) of `python -m mambafuzz ARGV`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "80"}
    env.pop("TRITON_INTERPRET", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mambafuzz", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, timeout=1800)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.splitlines()
    first = [i for i, line in enumerate(lines) if re.match(r"\d+ target\(s\), ", line)]
    summary = " ".join(line.strip() for line in lines[first[-1]:]) if first else ""
    return wall, cpu, proc.returncode, summary


def versions() -> str:
    code = ("import platform, numpy, torch, triton, hypothesis; print(f'Python {platform.python_version()}, "
            "torch {torch.__version__}, triton {triton.__version__}, hypothesis {hypothesis.__version__}, "
            "numpy {numpy.__version__}')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="the tree before (default: git archive HEAD)")
    ap.add_argument("--help-runs", type=int, default=5)
    ap.add_argument("--list-runs", type=int, default=3)
    ap.add_argument("--smoke-runs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/startup_cpu.md", help="the raw output")
    ap.add_argument("--append", action="store_true", help="append the section to bench/RESULTS.md")
    args = ap.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="startup_bench."))
    before = args.before
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "unknown"
    if before is None:
        before = scratch / "before"
        before.mkdir()
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
    trees = {"before": before.resolve(), "after": ROOT}
    runs = {"--help": args.help_runs, "list": args.list_runs, "smoke": args.smoke_runs}
    load = [os.getloadavg()[0]]
    for tree in trees.values():  # warm the caches (bytecode, page cache) of both trees alike
        for name in ("--help", "list"):
            run(tree, COMMANDS[name], scratch)
    got: dict[tuple[str, str], list[tuple[float, float, int, str]]] = {}
    for name, n in runs.items():
        for i in range(n):
            order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
            for label, tree in order:
                work = scratch / f"{label}-{name.strip('-')}-{i}"
                work.mkdir()
                got.setdefault((name, label), []).append(run(tree, COMMANDS[name], work))
                print(f"{name} {label} run {i + 1}: {got[(name, label)][-1][:3]}", file=sys.stderr, flush=True)
    load.append(os.getloadavg()[0])

    after_commit = commit()
    command = " ".join(["python3 bench/startup_bench.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [f"## Start-up: `--help`, `list` and `smoke` before and after (CPU box, {time.strftime('%Y-%m-%d')})",
             "",
             f"`{command}` (`bench/results/{args.out.name}`): before is {head} ({'`git archive HEAD`' if args.before is None else args.before}), "
             "after the checkout "
             f"({after_commit}); `python -m mambafuzz` with the tree on `PYTHONPATH`, stdout piped, "
             "the trees alternating run by run, median of the runs; CPU is the process's user + system "
             "seconds.",
             "",
             f"- device: CPU box, {os.cpu_count()} cores, no GPU; load average "
             f"{load[0]:.1f} at the start, {load[1]:.1f} at the end (other jobs share the cores)",
             f"- versions: {versions()}",
             "",
             "| command | runs | before wall s | after wall s | before CPU s | after CPU s | exit before / after |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, n in runs.items():
        if not n:
            continue
        cells = []
        for label in trees:
            rows = got[(name, label)]
            cells.append((statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows),
                          "/".join(sorted({str(r[2]) for r in rows}))))
        (bw, bc, bx), (aw, ac, ax) = cells
        lines.append(f"| `mambafuzz {' '.join(COMMANDS[name])}` | {n} | {bw:.2f} | {aw:.2f} | {bc:.2f} | "
                     f"{ac:.2f} | {bx} / {ax} |")
    lines += [""] if runs["smoke"] else []
    for label in trees:
        for r in got.get(("smoke", label), []):
            lines.append(f"- smoke {label}: {r[3] or '(no summary line)'}")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n" + "\n".join(f"{name} {label}: {rows}" for (name, label), rows in got.items())
                        + "\n")
    if args.append:
        with (ROOT / "bench/RESULTS.md").open("a") as results:
            results.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

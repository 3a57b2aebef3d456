"""Does race amplification make the racy zoo variants show on a GPU?  (GPU only)

For every racy zoo variant (BM-NOGUARD, BM-RIGHT, SD-SPAN, DS-ROW, PP-INPLACE)
on the geometries of ``bench/gpu_racy.py`` (plus one DS geometry with long rows,
since the gpu_racy DS rows are 6-8 bytes wide and sit inside one warp), this
measures the detection rate per repetition (k/N) and the time to the first
detection, without amplification and under a small grid of perturbations
(position x schedule x delay x num_warps, ``kernels.perturb.Perturb``).  The
correct kernels run on the same geometries under the same grid and must never
fail (exit 1 if one does).

Each repetition: restore the snapshot, launch, compare the whole arena with
the oracle's expectation on the GPU (``torch.equal``; the accepted counts too
for postprocess).  The first launch of each (kernel, perturbation) compiles;
the compiles are done first, in parallel worker processes that launch each
kernel once on a tiny case (they fill Triton's on-disk cache), so the timed
repetitions never include a compile.

    python bench/amplify_bench.py --out bench/results/amplify_h200.md          # ~2-3 min on an H200
    python bench/amplify_bench.py --quick                                       # smaller grid, 20 reps
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))  # racy_cases: the GPU geometries the tests share
# --cpu-smoke (hidden): the same loop through the interpreter on tiny cases, to check the script
# itself on a machine without a GPU (no delays happen there: the perturbation compiles to nothing).
SMOKE = "--cpu-smoke" in sys.argv
DEVICE = "cpu" if SMOKE else "cuda"

import racy_cases as gpu_racy  # noqa: E402  (the shared GPU geometries; imports no kernels)

os.environ["TRITON_INTERPRET"] = "1" if SMOKE else "0"  # before any kernels module is imported

RACY = ("zoo.BM-NOGUARD", "zoo.BM-RIGHT", "zoo.SD-SPAN", "zoo.DS-ROW", "zoo.PP-INPLACE")
CORRECT = ("triton.batch_memcpy", "triton.state_copy", "triton.postprocess")
# zoo variants that launch the very same kernel as a correct target (warm-up dedup)
SAME_KERNEL = {"zoo.PP-INPLACE": "triton.postprocess"}

GEOMETRIES = {label: spec for label, spec in gpu_racy.GEOMETRIES.items()
              if not label.startswith("temporal pool past")}
GEOMETRIES["DS same block, 64 req, 16 rows x 1024 fp16 tokens, bias 4"] = (
    "state_copy", lambda: gpu_racy.same_block_conv("conv_ds", 64, 1024, 16, 2, 4))

# (position, delay_ns, schedule, seed, num_warps); None = plain repetition, 4 warps
BASELINES = [None, (1, 0, 0, 0, 8)]
GRID = BASELINES + [(pos, 2000, sched, 12345 if sched == 3 else 0, warps)
                    for pos in (1, 2) for sched in (1, 2, 3) for warps in (4, 8)] + [
    (1, 500, 1, 0, 4), (1, 8000, 1, 0, 4)]
QUICK_GRID = BASELINES + [(1, 2000, 1, 0, 4), (1, 2000, 1, 0, 8), (1, 2000, 2, 0, 4),
                          (1, 2000, 3, 12345, 4), (2, 2000, 1, 0, 4)]

TINY = {  # one launch each, to compile a (kernel, perturbation) pair
    "batch_memcpy": lambda: gpu_racy.batch_rows(2, 64, -8),
    "state_copy": lambda: gpu_racy.same_block_conv("conv_sd", 2, 4, 8, 2, 1),
    "postprocess": lambda: gpu_racy.self_copy_postprocess(2, 1, 1),
}


def pname(p) -> str:
    if p is None:
        return "none (4 warps)"
    from mambafuzz.kernels.perturb import Perturb
    return Perturb.from_tuple(p).describe()


def targets_for(contract: str, names) -> list[str]:
    from mambafuzz.kernels import registry
    return [n for n in names if registry.get(n).contract == contract]


def warm_pairs(grid, names) -> list[tuple[str, object]]:
    """Every (target, perturbation) pair the measurement launches, one per distinct kernel."""
    names = [SAME_KERNEL.get(n, n) for n in names]
    names = [n for i, n in enumerate(names) if n not in names[:i]]
    return [(n, p) for n in names for p in grid]


def warm(shard: int, jobs: int, grid, names) -> int:
    """Worker: launch every `jobs`-th pair once on a tiny case (fills the on-disk cache)."""
    from mambafuzz.kernels import registry
    from mambafuzz.judge.materialize import materialize

    for i, (name, p) in enumerate(warm_pairs(grid, names)):
        if i % jobs != shard:
            continue
        target = registry.get(name)
        m = materialize(TINY[target.contract]().with_perturb(p), DEVICE)
        m.run(target.fn)
    sync()
    return 0


def warm_all(grid, names, jobs: int, quick: bool) -> float:
    t0 = time.perf_counter()
    extra = (["--quick"] if quick else []) + (["--cpu-smoke"] if SMOKE else []) + [
        a for n in names for a in ("--only", n)]
    procs = [subprocess.Popen([sys.executable, __file__, "--warm-shard", str(i), "--jobs", str(jobs)] + extra,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(jobs)]
    for i, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=300)
            if proc.returncode:
                print(f"warm-up shard {i} exited {proc.returncode} (compiles then happen in the timed "
                      f"loop): {err.strip()[-300:]}", file=sys.stderr)
        except subprocess.TimeoutExpired:
            proc.kill()
            print(f"warm-up shard {i} timed out", file=sys.stderr)
    return time.perf_counter() - t0


class Cell:
    """One target on one geometry: the materialised case and a GPU-side check."""

    def __init__(self, name: str, label: str, make):
        import torch

        from mambafuzz.kernels import registry
        from mambafuzz.judge.materialize import materialize

        self.name, self.label = name, label
        self.target = registry.get(name)
        self.m = materialize(make(), DEVICE)
        assert self.m.positions is None, "bench geometries are dense"
        self.expected = torch.from_numpy(self.m.expected.copy()).to(DEVICE)
        self.expected_outputs = {o.name: torch.from_numpy(o.expected.copy()).to(DEVICE) for o in self.m.outputs}

    def ok(self) -> bool:
        good = torch_equal(self.m.arena, self.expected)
        for name, want in self.expected_outputs.items():
            good = good and torch_equal(self.m.args[name], want.to(self.m.args[name].dtype))
        return good

    def measure(self, p, reps: int) -> dict:
        from mambafuzz.kernels.perturb import Perturb

        self.m.perturb = Perturb.from_tuple(p) if p is not None else None
        self.m.restore()
        self.m.run(self.target.fn)  # first launch: a compile (or a cache load), not timed
        sync()
        fails, first, t_first = 0, None, None
        t0 = time.perf_counter()
        for rep in range(reps):
            self.m.restore()
            self.m.run(self.target.fn)
            if not self.ok():  # torch.equal synchronises
                fails += 1
                if first is None:
                    first, t_first = rep + 1, time.perf_counter() - t0
        elapsed = time.perf_counter() - t0
        return {"target": self.name, "geometry": self.label, "perturb": p, "fails": fails, "reps": reps,
                "first": first, "ms_to_first": None if t_first is None else 1e3 * t_first,
                "ms_per_rep": 1e3 * elapsed / max(reps, 1)}


def torch_equal(a, b) -> bool:
    import torch
    return bool(torch.equal(a, b))


def sync() -> None:
    import torch
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def fmt_rate(r) -> str:
    return f"{r['fails']}/{r['reps']}"


def fmt_first(r) -> str:
    if r["first"] is None:
        return "-"
    return f"rep {r['first']}, {r['ms_to_first']:.1f} ms"


def report(rows, grid, reps, meta) -> tuple[list[str], list[str]]:
    """Markdown lines, and the correct-kernel failures (must be none)."""
    lines = [meta, "", "Detection rate = corrupted repetitions / repetitions; time to first = wall time from "
             "the first timed repetition (restore + launch + compare on the GPU) to the first corrupted one.",
             "", "## Racy variants: plain repetition vs. the best perturbation", "",
             "| target | geometry | plain (4 warps) | first | best perturbation | rate | first |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    by_cell: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_cell.setdefault((r["target"], r["geometry"]), []).append(r)
    for (name, label), rs in by_cell.items():
        if name not in RACY:
            continue
        plain = next((r for r in rs if r["perturb"] is None), None)
        best = max(rs, key=lambda r: (r["fails"], -(r["ms_to_first"] or 1e18)))
        lines.append(f"| {name} | {label} | {fmt_rate(plain) if plain else '?'} | "
                     f"{fmt_first(plain) if plain else '?'} | {pname(best['perturb'])} | {fmt_rate(best)} | "
                     f"{fmt_first(best)} |")
    lines += ["", "## Correct kernels under the same grid (must be 0)", "",
              "| target | geometry | cells | corrupted reps |", "| --- | --- | --- | --- |"]
    bad = []
    for (name, label), rs in by_cell.items():
        if name not in CORRECT:
            continue
        total = sum(r["fails"] for r in rs)
        lines.append(f"| {name} | {label} | {len(rs)} | {total}/{sum(r['reps'] for r in rs)} |")
        bad += [f"{name} / {label} / {pname(r['perturb'])}: {fmt_rate(r)}" for r in rs if r["fails"]]
    lines += ["", "## Every cell", "",
              "| target | geometry | perturbation | rate | first detection | ms/rep |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['target']} | {r['geometry']} | {pname(r['perturb'])} | {fmt_rate(r)} | "
                     f"{fmt_first(r)} | {r['ms_per_rep']:.2f} |")
    return lines, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=None, help="repetitions per cell (default 100; 20 with --quick)")
    ap.add_argument("--quick", action="store_true", help="the small grid and 20 repetitions")
    ap.add_argument("--out", type=Path, default=None, help="write a markdown report here")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="parallel compile workers before measuring (0: compile in the loop)")
    ap.add_argument("--budget-s", type=float, default=210.0,
                    help="stop starting new cells after this many seconds (default 210)")
    ap.add_argument("--only", action="append", default=None, help="a target to measure (repeatable)")
    ap.add_argument("--warm-shard", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cpu-smoke", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    if not SMOKE and not torch.cuda.is_available():
        print("amplify_bench: needs a CUDA GPU (torch sees none); nothing measured", file=sys.stderr)
        return 2
    grid = QUICK_GRID if args.quick else GRID
    known = CORRECT + RACY
    if args.only and set(args.only) - set(known):
        print(f"amplify_bench: --only takes {', '.join(known)}", file=sys.stderr)
        return 2
    names = [n for n in known if not args.only or n in args.only]
    if args.warm_shard is not None:
        return warm(args.warm_shard, max(1, args.jobs), grid, names)
    if SMOKE:
        GEOMETRIES.clear()
        GEOMETRIES.update({f"tiny {c}": (c, make) for c, make in TINY.items()})
    reps = args.reps or (20 if args.quick else 100)
    t_start = time.perf_counter()
    warm_s = warm_all(grid, names, args.jobs, args.quick) if args.jobs > 0 else 0.0
    print(f"compiled {len(warm_pairs(grid, names))} (kernel, perturbation) pairs with {args.jobs} workers "
          f"in {warm_s:.1f} s", flush=True)

    rows, skipped = [], []
    for name in names:
        from mambafuzz.kernels import registry
        contract = registry.get(name).contract
        for label, (c, make) in GEOMETRIES.items():
            if c != contract:
                continue
            if time.perf_counter() - t_start > args.budget_s:
                skipped.append(f"{name} / {label}")
                continue
            cell = Cell(name, label, make)
            for p in grid:
                try:
                    r = cell.measure(p, reps)
                except Exception as exc:  # noqa: BLE001 - a fault poisons the context: report, stop
                    print(f"{name:20s} {label:58s} {pname(p):45s} error: {type(exc).__name__}: {exc}",
                          flush=True)
                    raise
                rows.append(r)
                print(f"{name:20s} {label:58s} {pname(p):45s} {fmt_rate(r):>8s}  {fmt_first(r)}", flush=True)
            del cell
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    total = time.perf_counter() - t_start
    import triton
    gpu = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "none (--cpu-smoke, interpreter)"
    meta = (f"GPU: {gpu}; torch {torch.__version__}; triton {triton.__version__}; "
            f"{reps} reps per cell; grid of {len(grid)} ({'quick' if args.quick else 'full'}); "
            f"compile warm-up {warm_s:.0f} s, total {total:.0f} s")
    lines, bad = report(rows, grid, reps, meta)
    if skipped:
        lines += ["", f"Skipped for the time budget ({args.budget_s:.0f} s): " + "; ".join(skipped)]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    print(f"total {total:.0f} s", flush=True)
    if skipped:
        print(f"skipped for the time budget: {len(skipped)} cell(s)", flush=True)
    if bad:
        print("CORRECT KERNEL FAILED under perturbation:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    print("correct kernels: 0 corrupted repetitions under every perturbation", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

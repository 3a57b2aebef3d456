"""Repetitions per second on a GPU: the plain loop vs device-side judging (loop, CUDA graph).

Three ways to run N repetitions of one case, side by side in one process:

* ``plain``: what the engine did before ``gpu_reps``: per repetition
  ``m.restore()`` (a ``copy_``), the target, ``torch.cuda.synchronize()`` and
  ``m.compare()`` on the host (device-to-host copy + numpy compare);
* ``loop``: ``gpu_reps.run_reps(graph=False)``: per repetition the target and
  the device judge, one sync per batch;
* ``graph``: ``gpu_reps.run_reps(graph=True)``: the same launches captured K
  repetitions at a time in a CUDA graph and replayed (the capture and its
  warm-up are inside the timed call: this is what a fuzzer pays per case);
* large cases also ``graph-full``: the graph with the whole-arena judge
  (``judge="full"``, ``CheckRestore``), to compare with the chunks judge the
  engine picks for them (``gpu_reps.choose_judge``).

The methods are timed alternately (plain, loop, graph, ...), ``--pairs``
rounds, each sample one call of N repetitions (wall clock, synchronised at
both ends); the tables give the median repetitions per second.  Every call
starts as the engine's batch does, right after ``materialize``: from the
snapshot, restored before the clock starts (the engine never restores a
fresh arena; without this, each call paid for the state the method before
it left behind, a whole-arena ``copy_`` on the large cases).  Small cases:
the ratio to ``plain``.  Large cases: the target's own useful traffic, 2 x
copied bytes per repetition (every copied byte read once and written once),
times repetitions per second, as a fraction of a measured device-to-device
``copy_`` (read + write bytes, as in kernel_bench).  Nothing else counts as
useful: the judge's reads and restores, the graph's capture, the host's work
are all overhead inside that fraction.

    TRITON_INTERPRET=0 python bench/gpu_bench.py --out bench/results/gpu_bench_h200.md
    TRITON_INTERPRET=0 python bench/gpu_bench.py --quick     # a smoke run, not a measurement
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench", ROOT / "tests"):  # tests: racy_cases, the GPU geometries the tests share
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, reference_copy, require_compiled_gpu, warm_median_us  # noqa: E402


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    ap.add_argument("--pairs", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--reps-small", type=int, default=2000, help="repetitions per call, small cases (default 2000)")
    ap.add_argument("--reps-large", type=int, default=50, help="repetitions per call, large cases (default 50)")
    ap.add_argument("--reps-large-plain", type=int, default=5,
                    help="repetitions per plain call, large cases (default 5: each one copies the arena to "
                         "the host and compares it there)")
    ap.add_argument("--k", type=int, default=None, help="repetitions per captured graph (default gpu_reps.DEFAULT_K)")
    ap.add_argument("--ref-mib", type=int, default=1024, help="device-to-device reference copy, MiB (default 1024)")
    ap.add_argument("--quick", action="store_true", help="few repetitions, small 'large' cases: a smoke run")
    return ap.parse_args(argv)


def disjoint_rows(rows: int, size: int, gap: int = 256):
    """`rows` copies of `size` bytes from one region to another (no byte both read and written):
    an idempotent batch, each long row split over programs by the project's kernel."""
    from mambafuzz.cases.batch_memcpy import BatchCopyCase
    stride = size + gap
    copies = tuple((256 + i * stride, 256 + (rows + i) * stride, size) for i in range(rows))
    return BatchCopyCase(arena_size=256 + 2 * rows * stride + 256, copies=copies, seed=1)


def _cases(quick: bool):
    """(label, target, case builder, large?) rows."""
    import racy_cases as r
    rows = [
        ("batch 1 row x 4 KiB, left shift 16", "triton.batch_memcpy", lambda: r.batch_rows(1, 4096, -16), False),
        ("state_copy SD same block, 4 req x 256 B tokens", "triton.state_copy",
         lambda: r.same_block_conv("conv_sd", 4, 4, 128, 2, 1), False),
        ("postprocess self-copy, 4 req, 2 states, 2 tiles", "triton.postprocess",
         lambda: r.self_copy_postprocess(4, 2, 2), False),
        ("torch path, 1 row x 4 KiB (no graph: it syncs)", "torch.batch_memcpy",
         lambda: r.batch_rows(1, 4096, -16), False),
    ]
    if quick:
        rows += [
            ("batch 8 rows x 4 MiB, region to region (64 MiB arena)", "triton.batch_memcpy",
             lambda: disjoint_rows(8, 4 << 20), True),
            ("batch 8 rows x 4 MiB, left shift 256 (32 MiB)", "triton.batch_memcpy",
             lambda: r.batch_rows(8, 4 << 20, -256), True),
        ]
    else:
        rows += [
            ("sparse: temporal pool past 2 GiB (3 GiB arena)", "triton.state_copy", r.huge_pool, False),
            ("batch 64 rows x 4 MiB, region to region (512 MiB arena)", "triton.batch_memcpy",
             lambda: disjoint_rows(64, 4 << 20), True),
            ("batch 256 rows x 1 MiB, region to region (512 MiB arena)", "triton.batch_memcpy",
             lambda: disjoint_rows(256, 1 << 20), True),
            ("batch 64 rows x 4 MiB, left shift 256 (256 MiB; each row overlaps itself)", "triton.batch_memcpy",
             lambda: r.batch_rows(64, 4 << 20, -256), True),
            ("batch 256 rows x 1 MiB, left shift 8 (256 MiB; each row overlaps itself)", "triton.batch_memcpy",
             lambda: r.batch_rows(256, 1 << 20, -8), True),
        ]
    return rows


def main(argv=None) -> int:
    args = _args(argv)
    torch = require_compiled_gpu("gpu_bench", force_compiled=True)

    from mambafuzz import kernels
    from mambafuzz.kernels import registry
    from mambafuzz.judge import gpu_reps
    from mambafuzz.cases.batch_memcpy import BatchCopyCase
    from mambafuzz.judge.materialize import materialize

    assert not kernels.INTERPRETED
    if args.quick:
        args.pairs = min(args.pairs, 2)
        args.reps_small = min(args.reps_small, 200)
        args.reps_large = min(args.reps_large, 3)
        args.reps_large_plain = min(args.reps_large_plain, 2)
        args.ref_mib = min(args.ref_mib, 256)
    k = args.k or gpu_reps.DEFAULT_K
    out = Report("gpu_bench")

    # ---------------------------------------------------------------- reference
    _, ref_bw = reference_copy(args.ref_mib, warm_median_us)  # bytes/s, read + write

    out.header("repetitions per second", argv)
    out(f"- method: plain / loop / graph (+ graph-full on large cases) alternated, {args.pairs} rounds, median; "
        f"one sample = one call of N repetitions (N = {args.reps_small} small, {args.reps_large} large, "
        f"{args.reps_large_plain} for plain on large); graph K <= {k}")
    out(f"- reference: torch copy_ of {args.ref_mib} MiB device-to-device, median of 15 after 20 untimed: "
        f"{ref_bw / 1e9:.0f} GB/s (read + write)")
    out("- plain = restore copy_, launch, synchronize, m.compare() on the host, per repetition; "
        "loop/graph = gpu_reps.run_reps (target + device judge per repetition, one sync per call)")
    out()

    def plain(m, fn, n):
        fails = 0
        for _ in range(n):
            m.restore()
            m.run(fn)
            torch.cuda.synchronize()
            fails += m.compare() is not None
        return fails

    def target_alone(m, fn, n):
        """The target's launches with no judge at all: the ceiling any judge is measured against."""
        for _ in range(n):
            m.run(fn)
        return 0

    small_rows, large_rows = [], []
    for label, name, make, large in _cases(args.quick):
        fn = registry.get(name).fn
        n = args.reps_large if large else args.reps_small
        try:
            case = make()
            m = materialize(case, "cuda")
        except Exception as exc:  # noqa: BLE001 - report and go on
            (large_rows if large else small_rows).append(f"| {label} | {name} | {n} | error: "
                                                         f"{type(exc).__name__}: {exc} |")
            continue

        def reps(graph, judge=None, m=m, fn=fn, n=n):
            r = gpu_reps.run_reps(m, fn, n, graph=graph, k=k, judge=judge)
            return r.failures, r

        n_of = {"plain": min(n, args.reps_large_plain) if large else n}
        methods = {"plain": lambda m=m, fn=fn, n=n_of["plain"]: (plain(m, fn, n), None),
                   "loop": lambda: reps(False), "graph": lambda: reps(True)}
        if large:
            methods["graph-full"] = lambda: reps(True, "full")
            methods["target alone"] = lambda m=m, fn=fn, n=n: (target_alone(m, fn, n), None)
        for f in methods.values():  # compile, cache the device buffers (and the chunk plan), warm up
            f()
        torch.cuda.synchronize()
        rates = {name_: [] for name_ in methods}
        fails = {name_: 0 for name_ in methods}
        graph_note, judge = "", ""
        for _ in range(args.pairs):
            for mname, f in methods.items():
                m.restore()  # untimed: the engine's batch starts from a fresh materialize
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                nf, res = f()
                torch.cuda.synchronize()
                rates[mname].append(n_of.get(mname, n) / (time.perf_counter() - t0))
                fails[mname] += nf
                if mname == "graph":
                    graph_note = "yes" if res.used_graph else f"no ({res.fallback_reason})".replace("|", "/")
                    judge = res.judge
        med = {mname: statistics.median(v) for mname, v in rates.items()}
        failures = "/".join(str(fails[x]) for x in methods)
        dense = m.arena.numel() if m.positions is None else 0
        auto = "graph" if gpu_reps.use_graph(n, None, True, dense)[0] else "loop"  # what the engine runs
        if large:
            copied = sum(c[2] for c in case.copies) if isinstance(case, BatchCopyCase) else 0
            useful = {x: 2 * copied * med[x] / ref_bw for x in methods}
            bufs = m.__dict__.get("_gpu_reps_buffers", {})
            plan = next((b.plan for b in bufs.values() if b.plan is not None), None)
            shape = (f"{plan.n_check}/{len(plan.order)} chunks judged, "
                     f"{'none' if plan.idempotent else plan.n_restore} restored" if plan else "")
            large_rows.append(
                f"| {label} | {n} | {copied / 2**20:.0f} MiB | "
                + " | ".join(f"{med[x]:.0f}" for x in methods) + " | "
                + " | ".join(f"**{useful[x]:.0%}**" if x == auto else f"{useful[x]:.0%}" for x in methods)
                + f" | {auto} | {judge}: {shape} | {failures} | {graph_note} |")
        else:
            small_rows.append(
                f"| {label} | {name} | {n} | {med['plain']:.0f} | {med['loop']:.0f} | {med['graph']:.0f} | "
                f"{med['loop'] / med['plain']:.1f}x | {med['graph'] / med['plain']:.1f}x | {auto} | {failures} | "
                f"{judge} | {graph_note} |")
        del m
        torch.cuda.empty_cache()

    out("## small cases: repetitions per second against the plain loop")
    out()
    out("| case | target | N | plain reps/s | loop reps/s | graph reps/s | loop/plain | graph/plain | engine runs | "
        "failures p/l/g | judge | graph used |")
    out("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in small_rows:
        out(line)
    out()
    out("## large cases: the target's useful traffic (2 x copied bytes per repetition), % of copy_")
    out()
    out("| case | N | copied | plain reps/s | loop reps/s | graph reps/s | graph-full reps/s | target alone reps/s | "
        "plain | loop | graph | graph-full | target alone | engine runs (bold) | judge | failures p/l/g/gf/t | "
        "graph used |")
    out("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in large_rows:
        out(line)
    out()
    out("engine runs: what run_reps(graph=None) picks for the case (gpu_reps.use_graph).  failures: failing "
        "repetitions over all timed rounds (correct targets: expect all 0).  A row that overlaps itself runs "
        "in one program (memmove order), so its copy alone stays far from copy_ bandwidth, and since every "
        "repetition changes bytes the next one reads, the judge also restores them (2 x copied bytes more, "
        "after reading them once): at most 40% for such a case, 50% even with a free judge.")
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

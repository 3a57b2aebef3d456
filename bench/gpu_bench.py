"""Repetitions per second on a GPU: the plain loop vs device-side judging (loop, CUDA graph).

Three ways to run N repetitions of one case, side by side in one process:

* ``plain``: what the engine did before ``gpu_reps``: per repetition
  ``m.restore()`` (a ``copy_``), the target, ``torch.cuda.synchronize()`` and
  ``m.compare()`` on the host (device-to-host copy + numpy compare);
* ``loop``: ``gpu_reps.run_reps(graph=False)``: per repetition the target and
  ``kernels.check.check_restore`` (two launches), one sync per batch;
* ``graph``: ``gpu_reps.run_reps(graph=True)``: the same two launches per
  repetition captured K at a time in a CUDA graph and replayed (the capture
  and its warm-up are inside the timed call: this is what a fuzzer pays per case).

The methods are timed alternately (plain, loop, graph, plain, ...), ``--pairs``
rounds, each sample one call of N repetitions (wall clock, synchronised at
both ends); the table gives the median repetitions per second and the ratio
to ``plain``.  For the large cases it also gives device memory traffic per
second as a fraction of a measured device-to-device ``copy_`` (read + write
bytes, as in kernel_bench):

* target: 2 x copied bytes; check_restore: 4 x arena bytes (arena, expected,
  snapshot read; arena written);
* plain: target + 2 x arena bytes (restore) on the device, and the arena
  again over PCIe to the host (not counted in the fraction, shown apart).

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
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, device_line, median_us, reference_copy, require_compiled_gpu  # noqa: E402


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    ap.add_argument("--pairs", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--reps-small", type=int, default=2000, help="repetitions per call, small cases (default 2000)")
    ap.add_argument("--reps-large", type=int, default=10, help="repetitions per call, large cases (default 10)")
    ap.add_argument("--k", type=int, default=None, help="repetitions per captured graph (default gpu_reps.DEFAULT_K)")
    ap.add_argument("--ref-mib", type=int, default=1024, help="device-to-device reference copy, MiB (default 1024)")
    ap.add_argument("--quick", action="store_true", help="few repetitions, small 'large' cases: a smoke run")
    return ap.parse_args(argv)


def _cases(quick: bool):
    """(label, target, case builder, large?) rows."""
    from mambafuzz import racy_cases as r
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
        rows.append(("batch 8 rows x 4 MiB, left shift 256 (32 MiB)", "triton.batch_memcpy",
                     lambda: r.batch_rows(8, 4 << 20, -256), True))
    else:
        rows += [
            ("sparse: temporal pool past 2 GiB (3 GiB arena)", "triton.state_copy", r.huge_pool, False),
            ("batch 64 rows x 4 MiB, left shift 256 (256 MiB)", "triton.batch_memcpy",
             lambda: r.batch_rows(64, 4 << 20, -256), True),
            ("batch 256 rows x 1 MiB, left shift 8 (256 MiB)", "triton.batch_memcpy",
             lambda: r.batch_rows(256, 1 << 20, -8), True),
        ]
    return rows


def main(argv=None) -> int:
    args = _args(argv)
    torch = require_compiled_gpu("gpu_bench", force_compiled=True)

    from mambafuzz import kernels
    from mambafuzz.kernels import registry
    from mambafuzz import gpu_reps
    from mambafuzz.contracts import BatchCopyCase
    from mambafuzz.materialize import materialize

    assert not kernels.INTERPRETED
    if args.quick:
        args.pairs = min(args.pairs, 2)
        args.reps_small = min(args.reps_small, 200)
        args.reps_large = min(args.reps_large, 3)
        args.ref_mib = min(args.ref_mib, 256)
    k = args.k or gpu_reps.DEFAULT_K
    out = Report("gpu_bench")

    # ---------------------------------------------------------------- reference
    def time_copy(copy):
        copy()  # warm up
        return median_us(copy, reps=1, samples=5)

    _, ref_bw = reference_copy(args.ref_mib, time_copy)  # bytes/s, read + write

    out("# gpu_bench: repetitions per second")
    out()
    out(device_line())
    out(f"- method: plain / loop / graph alternated, {args.pairs} rounds, median; one sample = one call of "
        f"N repetitions (N = {args.reps_small} small, {args.reps_large} large); graph K <= {k}")
    out(f"- reference: torch copy_ of {args.ref_mib} MiB device-to-device: {ref_bw / 1e9:.0f} GB/s (read + write)")
    out("- plain = restore copy_, launch, synchronize, m.compare() on the host, per repetition; "
        "loop/graph = gpu_reps.run_reps (target + check_restore per repetition, one sync per call)")
    out()
    out("| case | target | N | plain reps/s | loop reps/s | graph reps/s | loop/plain | graph/plain | "
        "failures p/l/g | graph used | device traffic, % of copy_ (plain / loop / graph) |")
    out("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def plain(m, fn, n):
        fails = 0
        for _ in range(n):
            m.restore()
            m.run(fn)
            torch.cuda.synchronize()
            fails += m.compare() is not None
        return fails

    for label, name, make, large in _cases(args.quick):
        fn = registry.get(name).fn
        n = args.reps_large if large else args.reps_small
        try:
            case = make()
            m = materialize(case, "cuda")
        except Exception as exc:  # noqa: BLE001 - report and go on
            out(f"| {label} | {name} | {n} | error: {type(exc).__name__}: {exc} |  |  |  |  |  |  |  |")
            continue
        def reps(graph, m=m, fn=fn, n=n):
            r = gpu_reps.run_reps(m, fn, n, graph=graph, k=k)
            return r.failures, r

        methods = {"plain": lambda m=m, fn=fn, n=n: (plain(m, fn, n), None),
                   "loop": lambda: reps(False), "graph": lambda: reps(True)}
        for f in methods.values():  # compile, cache the device buffers, warm up
            f()
        torch.cuda.synchronize()
        rates = {name_: [] for name_ in methods}
        fails = {name_: 0 for name_ in methods}
        graph_note = ""
        for _ in range(args.pairs):
            for mname, f in methods.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                nf, res = f()
                torch.cuda.synchronize()
                rates[mname].append(n / (time.perf_counter() - t0))
                fails[mname] += nf
                if mname == "graph":
                    graph_note = "yes" if res.used_graph else f"no ({res.fallback_reason})".replace("|", "/")
        med = {mname: statistics.median(v) for mname, v in rates.items()}
        arena_bytes = m.arena.numel() if m.positions is None else int((m.positions >= 0).sum())
        if isinstance(case, BatchCopyCase):
            copied = sum(c[2] for c in case.copies)
        else:
            copied = arena_bytes  # an upper bound: pools' live bytes
        traffic = ""
        if large:
            per = {"plain": 2 * copied + 2 * arena_bytes, "loop": 2 * copied + 4 * arena_bytes,
                   "graph": 2 * copied + 4 * arena_bytes}
            traffic = " / ".join(f"{per[x] * med[x] / ref_bw:.0%}" for x in ("plain", "loop", "graph"))
            traffic += f" (plain also moves {arena_bytes * med['plain'] / 1e9:.2f} GB/s to the host)"
        out(f"| {label} | {name} | {n} | {med['plain']:.0f} | {med['loop']:.0f} | {med['graph']:.0f} | "
            f"{med['loop'] / med['plain']:.1f}x | {med['graph'] / med['plain']:.1f}x | "
            f"{fails['plain']}/{fails['loop']}/{fails['graph']} | {graph_note} | {traffic} |")
        del m
        torch.cuda.empty_cache()
    out()
    out("failures p/l/g: failing repetitions over all timed rounds (correct targets: expect 0/0/0).")
    out()
    out(f"_written {time.strftime('%Y-%m-%d %H:%M:%S')}_")
    out.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

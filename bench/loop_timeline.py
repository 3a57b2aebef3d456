"""Where a large case's repetition batch spends its time on the GPU (a diagnostic, GPU only).

One ``gpu_reps.run_reps(graph=False)`` batch of the 64 x 4 MiB region-to-region
case (``gpu_bench``'s), under ``torch.profiler``: the GPU's busy time per
kernel, the idle gaps between kernels (the host not keeping up), and when the
first kernel starts.  The profiler slows the host, so the wall clock and the
gaps are upper bounds; the kernels' own times are not affected.  Then,
unprofiled, the host's side alone: how long it takes to issue a
repetition's launches (the target through ``Materialized.run`` and the
judge, as ``run_reps`` issues them), against the batch's wall clock.  Last,
the batch's head and tail, unprofiled: a CUDA event before the batch and one
at every target launch say when the GPU reached each repetition, against
when the host issued it, for ``run_reps`` and for the target's launches
alone.

    TRITON_INTERPRET=0 python bench/loop_timeline.py [--reps 50 100] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, require_compiled_gpu  # noqa: E402


def probe(torch, m, batch) -> dict:
    """One call of `batch()` with a CUDA event before it and at each ``m.run``: us from the start,
    host and GPU, of the first target launch and of the last, and of the end."""
    marks, start, end = [], torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    method = m.run

    def run(*a, **kw):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append((time.perf_counter(), e))
        method(*a, **kw)

    m.restore()
    torch.cuda.synchronize()
    m.run = run
    try:
        start.record()
        t0 = time.perf_counter()
        batch()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
    finally:
        del m.run
    us = lambda t: (t - t0) * 1e6  # noqa: E731
    gpu = [start.elapsed_time(e) * 1e3 for _, e in marks]
    steps = [b - a for a, b in zip(gpu, gpu[1:])]
    return dict(host_first=us(marks[0][0]), gpu_first=gpu[0], host_last=us(marks[-1][0]), gpu_last=gpu[-1],
                wall=us(t1), gpu_end=start.elapsed_time(end) * 1e3, step=sorted(steps)[len(steps) // 2],
                first=tuple(steps[:3]))


def head_section(out, torch, m, fn, reps_list) -> None:
    from mambafuzz.judge import gpu_reps
    out.table("the batch's head and tail, unprofiled (CUDA events; median of 5; us from the call)",
              ["batch", "N", "host: first target launch", "GPU: first target starts", "host: last launch",
               "GPU: last target starts", "wall", "GPU: after the call", "GPU: a repetition (median step)",
               "GPU: first three steps"], "lrrrrrrrrl")
    for n in reps_list:
        def alone(n=n):
            for _ in range(n):
                m.run(fn)
            torch.cuda.synchronize()
        for label, batch in (("run_reps", lambda n=n: gpu_reps.run_reps(m, fn, n, graph=False)),
                             ("target alone", alone)):
            rows = [probe(torch, m, batch) for _ in range(5)]
            med = {k: sorted(r[k] for r in rows)[2] for k in rows[0]}
            out(f"| {label} | {n} | {med['host_first']:.0f} | {med['gpu_first']:.0f} | {med['host_last']:.0f} | "
                f"{med['gpu_last']:.0f} | {med['wall']:.0f} | {med['gpu_end']:.0f} | {med['step']:.1f} | "
                + "/".join(f"{x:.0f}" for x in rows[2]['first']) + " |")
    out()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, nargs="+", default=[50, 100], help="batch lengths (default 50 100)")
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    args = ap.parse_args(argv)
    torch = require_compiled_gpu("loop_timeline", force_compiled=True)
    from torch.profiler import ProfilerActivity, profile

    from gpu_bench import disjoint_rows
    from mambafuzz.judge import gpu_reps
    from mambafuzz.kernels import registry
    from mambafuzz.judge.materialize import materialize

    out = Report("loop_timeline")
    out.header("one large batch's GPU timeline", argv)
    out("- case: 64 rows x 4 MiB, region to region (512 MiB arena), triton.batch_memcpy, run_reps(graph=False)")
    out()
    m = materialize(disjoint_rows(64, 4 << 20), "cuda")
    fn = registry.get("triton.batch_memcpy").fn
    gpu = torch.autograd.DeviceType.CUDA
    for n in args.reps:
        gpu_reps.run_reps(m, fn, n, graph=False)  # compile, cache the judge's buffers
        m.restore()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            gpu_reps.run_reps(m, fn, n, graph=False)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e6
        events = prof.events()
        kernels = sorted((e for e in events if e.device_type == gpu), key=lambda e: e.time_range.start)
        busy = sum(e.time_range.end - e.time_range.start for e in kernels)
        gaps, last_end = [], kernels[0].time_range.end
        for e in kernels[1:]:
            gaps.append(e.time_range.start - last_end)
            last_end = max(last_end, e.time_range.end)
        idle = [g for g in gaps if g > 5]
        first_cpu = min(e.time_range.start for e in events if e.device_type != gpu)
        out(f"## {n} repetitions")
        out()
        out(f"- wall (profiled) {wall:.0f} us, {wall / n:.1f} us a repetition; GPU busy {busy:.0f} us, "
            f"{busy / n:.1f} us a repetition")
        out(f"- gaps over 5 us between kernels: {len(idle)}, {sum(idle):.0f} us in all (largest "
            f"{', '.join(f'{g:.0f}' for g in sorted(idle)[-3:])} us); first kernel "
            f"{kernels[0].time_range.start - first_cpu:.0f} us after the batch's first host operation")
        out()
        out.table(None, ["kernel", "launches", "us in all", "us each"], "lrrr")
        by: dict[str, list] = {}
        for e in kernels:
            row = by.setdefault(e.name[:48], [0, 0.0])
            row[0] += 1
            row[1] += e.time_range.end - e.time_range.start
        for name, (count, total) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            out(f"| {name} | {count} | {total:.0f} | {total / count:.1f} |")
        out()
    bufs = gpu_reps._Buffers.of(m, gpu_reps.choose_judge(m), None, gpu_reps.FULL_EVERY)
    out.table("the host's side, unprofiled (median of 5)",
              ["repetitions", "host: issuing a repetition's launches, us", "run_reps wall, us a repetition"], "rrr")
    for n in args.reps:
        counter = torch.zeros(n, dtype=torch.int64, device=m.arena.device)
        base = torch.zeros(1, dtype=torch.int64, device=m.arena.device)
        issue, wall = [], []
        for _ in range(5):
            m.restore()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(n):  # the launches run_reps issues for slot i, without its bookkeeping
                m.run(fn)
                bufs.plain(counter, i, base, n - 1)
            issue.append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
            m.restore()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            gpu_reps.run_reps(m, fn, n, graph=False)
            wall.append((time.perf_counter() - t0) / n * 1e6)
        out(f"| {n} | {sorted(issue)[2]:.1f} | {sorted(wall)[2]:.1f} |")
    out()
    head_section(out, torch, m, fn, args.reps)
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where a small case's repetition goes in a CUDA graph (GPU only): the target, the judge, and the judge's shape.

A small case's repetition is two launches (the target's and
``kernels.check.CheckRestore``'s) replayed from a CUDA graph, so its cost is
what each kernel node takes on the GPU.  For ``gpu_bench``'s small cases,
this captures 16 repetitions of: the target alone, the judge alone (the
engine's shape and others: bytes a program for the sparse judge, u64 words a
program for the dense one, warps), and both as ``gpu_reps.run_reps`` runs
them, and gives microseconds a repetition (CUDA events around ``--reps``
replays, median of ``--samples``).

    TRITON_INTERPRET=0 python bench/small_reps.py [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, median_us, require_compiled_gpu  # noqa: E402

K = 16  # repetitions a graph, gpu_reps.DEFAULT_K


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="graph replays a sample (default 20)")
    ap.add_argument("--samples", type=int, default=7, help="samples, median (default 7)")
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    args = ap.parse_args(argv)
    torch = require_compiled_gpu("small_reps", force_compiled=True)
    from gpu_bench import _cases
    from mambafuzz.judge import gpu_reps
    from mambafuzz.kernels import check, registry
    from mambafuzz.judge.materialize import materialize

    out = Report("small_reps")
    out.header("a small case's repetition in a CUDA graph", argv)
    out(f"- us a repetition: CUDA events around {args.reps} replays of a {K}-repetition graph, median of "
        f"{args.samples}")
    out()
    out.table(None, ["case", "what", "us a repetition"], "llr")
    counter = torch.zeros(K, dtype=torch.int64, device="cuda")

    def per_rep(body) -> float:
        body()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(K):
                body(i)
        g.replay()
        torch.cuda.synchronize()
        return median_us(g.replay, reps=args.reps, samples=args.samples) / K

    for label, name, make, large in _cases(quick=False):
        if large or name.startswith("torch"):
            continue
        fn = registry.get(name).fn
        m = materialize(make(), "cuda")
        bufs = gpu_reps._Buffers.of(m, "full")
        engine = bufs.check
        c = engine
        aux = dict(aux=c._aux[0], aux_expected=c._aux[1], aux_snapshot=c._aux[2]) if c._has_aux else {}
        shapes = {"engine's judge": engine}
        if c.positions is not None:
            for nb in (2048, 1024, 512, 256):
                for w in (4, 1):
                    shapes[f"sparse judge, {nb} B a program, {w} warps"] = check.CheckRestore(
                        m.arena, c.expected, c.snapshot, c.n, positions=c.positions, nbytes_per_program=nb,
                        num_warps=w, **aux)
        else:
            for words in (256, 64):
                for w in (4, 1):
                    shapes[f"dense judge, {words} words a program, {w} warps"] = check.CheckRestore(
                        m.arena, c.expected, c.snapshot, c.n, words=words, num_warps=w, **aux)
        grid = f"grid {engine.grid[0]}, {engine.n} bytes"
        try:
            out(f"| {label} | target alone | {per_rep(lambda i=0, m=m: m.run(fn)):.2f} |")
            for what, judge in shapes.items():
                out(f"| {label} | {what} ({grid if judge is engine else f'grid {judge.grid[0]}'}) alone | "
                    f"{per_rep(lambda i=0, j=judge: j(counter, i)):.2f} |")
            for what, judge in shapes.items():
                def both(i=0, j=judge, m=m):
                    m.run(fn)
                    j(counter, i)
                out(f"| {label} | target + {what} | {per_rep(both):.2f} |")
        except Exception:  # noqa: BLE001 - show it, go on
            out.traceback()
        m.restore()
        del m, bufs, shapes, engine, c
        torch.cuda.empty_cache()
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

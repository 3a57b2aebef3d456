"""Large-case tuning sweep (GPU only): the batch copy's split shape and the chunk judge's shape.

What a large repetition costs is the target's copy plus the judge's read of
every changed chunk (``judge.check.ChunkCheck``); this script measures each
alone over a grid of their tuning knobs, then the two together as
``gpu_reps`` runs them, so the defaults in ``kernels/batch_memcpy.py`` and
``kernels/check.py`` / ``gpu_reps.py`` rest on numbers:

* copy: ``batch_memcpy(split_min=, parts=, split_block=, num_warps=,
  interleave=, unroll=, part_major=)`` on region-to-region batches (64 x 4
  MiB, 256 x 1 MiB), as a fraction of a device-to-device ``copy_`` (read +
  write bytes);
* idle: what a grid's idle parts cost small batches in a CUDA graph;
* ceilings: a flat Triton copy and ``copy_`` of the same bytes;
* judge: ``ChunkCheck(words=, num_warps=)`` on the 256 MiB of changed chunks
  of a 512 MiB arena, as read GB/s, next to read ceilings (a plain sum of the
  same chunks, the same sum with the judge's mixing, torch's ``sum``);
* together: target + judge per repetition (``FULL_EVERY`` and the last
  repetition full, as ``gpu_reps.run_reps``), defaults against the best
  knobs found above, as the target's useful traffic (2 x copied bytes) in %
  of ``copy_``.

Timing: CUDA events around ``--reps`` back-to-back calls, median of
``--samples``; every configuration's output is checked once before timing.

    TRITON_INTERPRET=0 python bench/tune_large.py [--sections copy,together] --out bench/results/tune_large_h200.md
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, median_us, reference_copy, require_compiled_gpu, warm_median_us  # noqa: E402
from gpu_bench import disjoint_rows  # noqa: E402

MiB = 1 << 20
SECTIONS = ("copy", "idle", "ceilings", "judge", "together")
IDLE_PARTS = (64, 128, 256, 512, 1024)


def _knobs(kw, rows):
    """The batch copy's knobs in ``kw`` (defaults where absent) as table cells."""
    from mambafuzz.kernels import batch_memcpy as bm
    g = {"split_min": bm.SPLIT_MIN, "parts": None, "split_block": bm.SPLIT_BLOCK, "num_warps": 4,
         "interleave": bm.INTERLEAVE, "unroll": bm.UNROLL, "part_major": bm.PART_MAJOR, **kw}
    parts = f"{bm.parts_cap(rows)} (default)" if g["parts"] is None else str(g["parts"])
    return (f"{g['split_min']} | {parts} | {g['split_block']} | {g['num_warps']} | "
            f"{'yes' if g['interleave'] else 'no'}, {g['unroll']} | {'part-major' if g['part_major'] else 'row-major'}")


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    ap.add_argument("--reps", type=int, default=10, help="calls per sample (default 10)")
    ap.add_argument("--samples", type=int, default=5, help="samples per configuration, median (default 5)")
    ap.add_argument("--together-reps", type=int, default=50, help="repetitions per combined sample (default 50)")
    ap.add_argument("--ref-mib", type=int, default=1024, help="reference copy_, MiB (default 1024)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated, of {', '.join(SECTIONS)} (default all)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    sections = set(args.sections.split(","))
    if sections - set(SECTIONS):
        raise SystemExit(f"tune_large: unknown sections {sorted(sections - set(SECTIONS))}; "
                         f"choose from {', '.join(SECTIONS)}")
    torch = require_compiled_gpu("tune_large", force_compiled=True)
    from _tune_kernels import read_sum
    from mambafuzz.judge import gpu_reps
    from mambafuzz.kernels import batch_memcpy as bm
    from mambafuzz.kernels import check

    out = Report("tune_large")
    dev = torch.device("cuda")
    _, ref_bw = reference_copy(args.ref_mib, warm_median_us)
    out.header("the batch copy's split and the chunk judge's shape", argv)
    out(f"- reference: torch copy_ of {args.ref_mib} MiB device-to-device: {ref_bw / 1e9:.0f} GB/s (read + write)")
    out(f"- timing: CUDA events around {args.reps} calls, median of {args.samples} samples")
    out()

    def us_of(fn):
        fn()
        torch.cuda.synchronize()
        return median_us(fn, reps=args.reps, samples=args.samples)

    def region(rows, size, gap=256):
        """gpu_bench's region-to-region batch on a random arena: (arena, src, dst, sizes, spans)."""
        case = disjoint_rows(rows, size, gap)
        arena = torch.randint(0, 256, (case.arena_size,), dtype=torch.uint8, device=dev)
        base = arena.data_ptr()
        src = torch.tensor([base + s_ for s_, _, _ in case.copies], dtype=torch.int64, device=dev)
        dst = torch.tensor([base + d_ for _, d_, _ in case.copies], dtype=torch.int64, device=dev)
        sizes = torch.tensor([n_ for _, _, n_ in case.copies], dtype=torch.int64, device=dev)
        return arena, src, dst, sizes, [(s_, d_) for s_, d_, _ in case.copies]

    def copied_right(arena, spans, size):
        return all(torch.equal(arena[s:s + size], arena[d:d + size]) for s, d in spans[:: max(1, len(spans) // 16)])

    def section(name, title, columns, aligns, body):
        """One section, when chosen: its table's header, ``body()`` (a failure is shown, the run goes on)."""
        if name not in sections:
            return
        out.table(title, columns, aligns)
        try:
            body()
        except Exception:  # noqa: BLE001
            out.traceback()
        torch.cuda.empty_cache()
        out()

    # ------------------------------------------------------------------ copy sweep
    best_copy, best = {}, {"judge": None}
    if "copy" in sections:
        out("## batch copy alone, region to region (% of copy_)")
        out()
        out("Bytes a part holds at least (`split_min`) and the parts a row is split over set each "
            "program's work; `parts` is what the row needs at that `split_min` (or the default grid).")
        out()
        out.table(None, ["rows x size", "split_min", "parts per row at most", "split_block", "num_warps",
                         "interleave, unroll", "grid", "us", "% of copy_"], "lrrrrllrr")
    for rows, size in ((64, 4 * MiB), (256, 1 * MiB)) if "copy" in sections else ():
        try:
            arena, src, dst, sizes, spans = region(rows, size)
        except Exception as exc:  # noqa: BLE001
            out(f"| {rows} x {size // MiB} MiB | error {type(exc).__name__}: {exc} |")
            continue
        results = []
        # the default first, then each part's work (split_min) x blocks in flight (unroll) x grid order
        shapes = [dict()] + [dict(split_min=sm, parts=size // sm, split_block=4096, unroll=un, interleave=il,
                                  part_major=pm, num_warps=w)
                             for sm in (8 << 10, 16 << 10, 32 << 10) for un in (2, 4) if sm >= 4096 * un
                             for il in (True, False) for pm in (False, True) for w in (4, 8)]
        for kw in shapes:
            knobs = _knobs(kw, rows)
            try:
                arena[spans[0][1]:].zero_()
                fn = lambda kw=kw: bm.batch_memcpy(src, dst, sizes, **kw)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                if not copied_right(arena, spans, size):
                    out(f"| {rows} x {size // MiB} MiB | {knobs} | WRONG BYTES | |")
                    continue
                us = us_of(fn)
            except Exception as exc:  # noqa: BLE001
                out(f"| {rows} x {size // MiB} MiB | {knobs} | error {type(exc).__name__} | |")
                continue
            pct = 2 * rows * size / (us * 1e-6) / ref_bw
            results.append((pct, kw))
            out(f"| {rows} x {size // MiB} MiB | {knobs} | {us:.1f} | {pct:.0%} |")
        if results:
            best_copy[rows] = max(results, key=lambda r: r[0])
        del arena
        torch.cuda.empty_cache()
    if "copy" in sections:
        out()
        for rows, (pct, kw) in best_copy.items():
            out(f"- best for {rows} rows: {', '.join(f'{k} {v}' for k, v in kw.items()) or 'the defaults'}: {pct:.0%}")
        out()

    # ------------------------------------------------------------------ idle programs in a graph
    def idle():
        for label, rows, size, shift in (("1 x 4096 B, region to region", 1, 4096, None),
                                         ("1 x 4096 B, left shift 16", 1, 4096, 16),
                                         ("16 x 64 KiB, region to region", 16, 64 << 10, None),
                                         ("4096 x 1024 B, region to region", 4096, 1024, None)):
            try:
                arena, src, dst, sizes, spans = region(rows, size, gap=64)
                if shift is not None:
                    src = dst + shift
                cells = []
                for parts in IDLE_PARTS:
                    fn = lambda parts=parts: bm.batch_memcpy(src, dst, sizes, parts=parts)  # noqa: E731
                    fn()
                    torch.cuda.synchronize()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        for _ in range(16):
                            fn()
                    g.replay()
                    torch.cuda.synchronize()
                    cells.append(median_us(g.replay, reps=args.reps, samples=args.samples) / 16)
                out(f"| {label} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
            except Exception as exc:  # noqa: BLE001
                out(f"| {label} | error {type(exc).__name__}: {exc} |")

    section("idle", "small batches in a CUDA graph: what the grid's idle parts cost (us a launch, 16 a graph)",
            ["batch"] + [f"{p} parts" for p in IDLE_PARTS], "l" + "r" * len(IDLE_PARTS), idle)

    # ------------------------------------------------------------------ copy ceilings
    def ceilings():
        from _tune_kernels import flat_copy
        a = torch.randint(0, 256, (256 * MiB,), dtype=torch.uint8, device=dev)
        b = torch.empty_like(a)
        us = us_of(lambda: b.copy_(a))
        out(f"| torch copy_ of 256 MiB | {us:.1f} | {2 * 256 * MiB / (us * 1e-6) / ref_bw:.0%} |")
        for bw in (512, 1024, 2048):
            for unroll in (1, 2, 4):
                for evict in (False, True):
                    for w in (4, 8):
                        grid = (256 * MiB // 8 // (bw * unroll),)
                        fn = (lambda bw=bw, unroll=unroll, evict=evict, w=w, grid=grid: flat_copy[grid](
                            a, b, 256 * MiB // 8, BLOCK_WORDS=bw, UNROLL=unroll, EVICT=evict, num_warps=w,
                            num_stages=1))
                        b.zero_()
                        fn()
                        ok = torch.equal(a, b)
                        us = us_of(fn)
                        out(f"| Triton flat copy: {bw * 8} B x {unroll} per program, {w} warps"
                            f"{', evict-first loads' if evict else ''}{'' if ok else ' WRONG BYTES'} | {us:.1f} | "
                            f"{2 * 256 * MiB / (us * 1e-6) / ref_bw:.0%} |")

    section("ceilings", "copy ceilings: 256 MiB from one region to another (% of the 1 GiB copy_)",
            ["copy", "us", "% of copy_"], "lrr", ceilings)

    # ------------------------------------------------------------------ judge sweep
    def judge():
        half = 256 * MiB
        snapshot = torch.randint(0, 256, (2 * half,), dtype=torch.uint8, device=dev)
        expected = snapshot.clone()
        expected[half:] = snapshot[:half]
        arena = expected.clone()
        for words in (512, 1024, 2048, 4096):
            chunk = 8 * words
            n_chunks = 2 * half // chunk
            order = torch.cat([torch.arange(n_chunks // 2, n_chunks), torch.arange(0, n_chunks // 2)]).to(dev)
            sums = torch.empty(n_chunks // 2, dtype=torch.int64, device=dev)
            for mix in (0, 1):
                for w in (4, 8):
                    fn = (lambda words=words, mix=mix, w=w: read_sum[(n_chunks // 2,)](
                        arena, order, sums, WORDS=words, MIX=mix, num_warps=w, num_stages=1))
                    us = us_of(fn)
                    out(f"| ceiling: {'mixed' if mix else 'plain'} sum | {words} | {w} | {us:.1f} | "
                        f"{half / us / 1e3:.0f} | {half / (us * 1e-6) / ref_bw:.0%} |")
            for w in (2, 4, 8):
                cc = check.ChunkCheck(arena, expected, snapshot, order, n_chunks // 2, 0, full_every=1 << 30,
                                      words=words, num_warps=w)
                counter = torch.zeros(4, dtype=torch.int64, device=dev)
                fn = lambda cc=cc, counter=counter: cc(counter, 0)  # noqa: E731
                us = us_of(fn)
                ok = int(counter.sum()) == 0
                gbs = half / us / 1e3
                if ok and (best["judge"] is None or gbs > best["judge"][0]):
                    best["judge"] = (gbs, words, w)
                out(f"| ChunkCheck{'' if ok else ' (COUNTED BYTES ON A CORRECT ARENA)'} | {words} | {w} | "
                    f"{us:.1f} | {gbs:.0f} | {half / (us * 1e-6) / ref_bw:.0%} |")
        x = arena[half:].view(torch.int64)
        us = us_of(lambda: x.sum())
        out(f"| ceiling: torch sum (int64) | | | {us:.1f} | {half / us / 1e3:.0f} | "
            f"{half / (us * 1e-6) / ref_bw:.0%} |")
        # the judge still sees a wrong byte (and restores the whole arena after it)
        if best["judge"]:
            _, words, w = best["judge"]
            chunk = 8 * words
            n_chunks = 2 * half // chunk
            order = torch.cat([torch.arange(n_chunks // 2, n_chunks), torch.arange(0, n_chunks // 2)]).to(dev)
            cc = check.ChunkCheck(arena, expected, snapshot, order, n_chunks // 2, 0, full_every=1 << 30,
                                  words=words, num_warps=w)
            counter = torch.zeros(2, dtype=torch.int64, device=dev)
            arena[half + 12345] ^= 1
            cc(counter, 0)
            torch.cuda.synchronize()
            c = (half + 12345) // chunk
            out()
            out(f"- best judge (words {words}, num_warps {w}): one flipped byte counted {int(counter[0])} "
                f"(expect 1); its chunk restored to the snapshot: "
                f"{torch.equal(arena[c * chunk:(c + 1) * chunk], snapshot[c * chunk:(c + 1) * chunk])}")

    section("judge", "chunk judge alone: 256 MiB of changed chunks in a 512 MiB arena (read GB/s)",
            ["judge", "words per chunk", "num_warps", "us", "read GB/s", "% of copy_ traffic rate"], "lrrrrr", judge)

    # ------------------------------------------------------------------ together
    if "together" in sections:
        out.table("together: target + judge per repetition, as gpu_reps.run_reps runs a large idempotent case",
                  ["case", "copy (knobs other than the defaults)", "judge (words, warps)", "us per repetition",
                   "useful % of copy_"], "lllrr")
        n = args.together_reps
        for rows, size in ((64, 4 * MiB), (256, 1 * MiB)):
            try:
                arena, src, dst, sizes, spans = region(rows, size)
                snapshot = arena.clone()
                bm.batch_memcpy(src, dst, sizes)
                torch.cuda.synchronize()
                expected = arena.clone()
                changed = torch.ne(expected, snapshot)
                copies = [("default", dict())]
                if rows in best_copy:
                    kw = best_copy[rows][1]
                    if kw:
                        copies.append((", ".join(f"{k} {v}" for k, v in kw.items()), kw))
                default = (check.CHUNK_WORDS, check.CHUNK_WARPS)
                judges = [(f"{words}, {w}" + (" (default)" if (words, w) == default else ""), words, w)
                          for words, w in dict.fromkeys([default, (512, 4), (2048, 4)])]
                for jlabel, words, w in judges:
                    chunk = 8 * words
                    n_chunks = -(-arena.numel() // chunk)
                    pad = torch.zeros(n_chunks * chunk, dtype=torch.bool, device=dev)
                    pad[:arena.numel()] = changed
                    hot = pad.view(n_chunks, chunk).any(dim=1)
                    order = torch.cat([torch.nonzero(hot).flatten(), torch.nonzero(~hot).flatten()])
                    cc = check.ChunkCheck(arena, expected, snapshot, order, int(hot.sum()), 0,
                                          full_every=gpu_reps.FULL_EVERY, words=words, num_warps=w)
                    for clabel, kw in copies:
                        counter = torch.zeros(n, dtype=torch.int64, device=dev)

                        def reps(kw=kw, cc=cc, counter=counter):
                            arena.copy_(snapshot)
                            for i in range(n):
                                bm.batch_memcpy(src, dst, sizes, **kw)
                                cc(counter, i, last_slot=n - 1)
                        reps()
                        torch.cuda.synchronize()
                        fails = int(torch.count_nonzero(counter))
                        us = median_us(reps, reps=1, samples=args.samples) / n
                        useful = 2 * rows * size / (us * 1e-6) / ref_bw
                        out(f"| {rows} x {size // MiB} MiB | {clabel} | {jlabel} | {us:.1f} | **{useful:.0%}**"
                            f"{'' if fails == 0 else f' ({fails} FAILING REPETITIONS)'} |")
                del arena, snapshot, expected, changed
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                out.traceback()
        out()
        out("Breakdown of one repetition (us): the copy alone, the judge's two launches alone (a passing, "
            "partial repetition), the walk launch alone (exits at once), and the start's restore (once per "
            f"{n} repetitions).")
        out()
        out.table(None, ["case", "copy", "judge", "walk only", "restore of the whole arena"], "lrrrr")
        for rows, size in ((64, 4 * MiB),):
            try:
                arena, src, dst, sizes, spans = region(rows, size)
                snapshot = arena.clone()
                bm.batch_memcpy(src, dst, sizes)
                expected = arena.clone()
                words = best["judge"][1] if best["judge"] else check.CHUNK_WORDS
                w = best["judge"][2] if best["judge"] else 4
                chunk = 8 * words
                n_chunks = -(-arena.numel() // chunk)
                hot = torch.zeros(n_chunks, dtype=torch.bool, device=dev)
                hot[spans[0][1] // chunk:(spans[-1][1] + size - 1) // chunk + 1] = True
                order = torch.cat([torch.nonzero(hot).flatten(), torch.nonzero(~hot).flatten()])
                cc = check.ChunkCheck(arena, expected, snapshot, order, int(hot.sum()), 0,
                                      full_every=1 << 30, words=words, num_warps=w)
                counter = torch.zeros(1, dtype=torch.int64, device=dev)
                kw = best_copy[rows][1] if rows in best_copy else {}
                walk = (lambda: check._walk_chunks[(cc._walk_grid,)](
                    arena, expected, snapshot, cc.sums, cc.order, counter, counter, 0, cc.n, cc.n_chunks, cc.n_check,
                    1 << 30, -1, WORDS=words, HAS_BASE=False, ALIGNED16=True, num_warps=w, num_stages=1))
                t = [us_of(lambda: bm.batch_memcpy(src, dst, sizes, **kw)), us_of(lambda: cc(counter, 0)), us_of(walk),
                     us_of(lambda: arena.copy_(snapshot))]
                out(f"| {rows} x {size // MiB} MiB | " + " | ".join(f"{x:.1f}" for x in t) + " |")
                del arena, snapshot, expected
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                out.traceback()
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kernel benchmark (GPU only): what do the memmove guards cost?

* guarded ``triton.batch_memcpy`` vs ``zoo.BM-NOGUARD`` (no barrier on left
  overlap) on a non-overlapping batch (both should be identical: the guard
  executes no barrier there) and on overlapping (left-shift) batches;
* the fused ``triton.state_copy`` vs ``torch.state_copy`` (one
  ``dst.copy_(src.clone())`` per copy) on SD/DS conv + temporal pools, with the
  conv shift inside one physical block and across blocks.

Method: the two sides of a comparison are timed alternately (A B A B ...),
``--pairs`` pairs, each sample the mean of ``--reps`` back-to-back launches
between two CUDA events; the table shows the median per side.  Bandwidth
counts bytes read + bytes written and is given as a fraction of a measured
device-to-device copy (``torch`` ``copy_`` of a large buffer).

    TRITON_INTERPRET=0 python bench/kernel_bench.py --out bench/results.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import Report, reference_copy, require_compiled_gpu, timed_us  # noqa: E402


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the results as markdown here")
    ap.add_argument("--pairs", type=int, default=11, help="alternating A/B sample pairs (default 11)")
    ap.add_argument("--reps", type=int, default=20, help="launches per sample (default 20)")
    ap.add_argument("--layers", type=int, default=8, help="layers in the state-copy model (default 8)")
    ap.add_argument("--ref-mib", type=int, default=1024,
                    help="size of the device-to-device reference copy in MiB (default 1024)")
    ap.add_argument("--num-warps", type=int, default=4, help="num_warps for the Triton kernels")
    ap.add_argument("--quick", action="store_true",
                    help="small geometries and few requests (a smoke run, not a measurement)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    torch = require_compiled_gpu("kernel_bench")
    import numpy as np

    from mambafuzz import kernels
    from mambafuzz import oracle
    from mambafuzz.kernels.batch_memcpy import batch_memcpy
    from mambafuzz.kernels.state_copy import state_copy
    from mambafuzz.kernels.torch_path import state_copy as torch_state_copy

    assert not kernels.INTERPRETED
    dev = torch.device("cuda")
    nw = args.num_warps
    out = Report("kernel_bench")

    def ab(fa, fb, reps=args.reps, pairs=args.pairs):
        fa(), fb()  # compile / warm up
        torch.cuda.synchronize()
        ta, tb = [], []
        for _ in range(pairs):
            ta.append(timed_us(fa, reps))
            tb.append(timed_us(fb, reps))
        return statistics.median(ta), statistics.median(tb)

    # ---------------------------------------------------------------- reference
    ref_us, ref_bw = reference_copy(args.ref_mib, lambda copy: ab(copy, copy, reps=5)[0])  # bytes/s

    out.header("the project's kernels against their baselines", argv)
    out(f"- method: A/B alternated, {args.pairs} pairs x {args.reps} launches, median; "
        f"num_warps {nw}")
    out(f"- reference: torch copy_ of {args.ref_mib} MiB device-to-device: {ref_us:.1f} us, "
        f"{ref_bw / 1e9:.0f} GB/s (read + write)")
    out()

    def bw(nbytes, us):
        b_s = 2 * nbytes / (us * 1e-6)
        return f"{b_s / 1e9:.0f} GB/s ({b_s / ref_bw:.0%})"

    # ------------------------------------------------------------ batch memcpy
    out("## batch_memcpy: guarded vs BM-NOGUARD")
    out()
    out("| batch | bytes | guarded us | BM-NOGUARD us | guarded/noguard | guarded bw | noguard bw |")
    out("| --- | --- | --- | --- | --- | --- | --- |")
    batches = [
        ("128 x 32 KiB, disjoint", 128, 32 << 10, None),
        ("4096 x 1 KiB, disjoint", 4096, 1 << 10, None),
        ("128 x 32 KiB, left shift 16", 128, 32 << 10, 16),
        ("128 x 32 KiB, left shift 256", 128, 32 << 10, 256),
        ("4096 x 1 KiB, left shift 8", 4096, 1 << 10, 8),
    ]
    if args.quick:
        batches = [("8 x 4 KiB, disjoint", 8, 4 << 10, None),
                   ("8 x 4 KiB, left shift 16", 8, 4 << 10, 16)]
    for name, rows, row_bytes, shift in batches:
        arena = torch.empty(2 * rows * row_bytes, dtype=torch.uint8, device=dev)
        arena.copy_(torch.randint(0, 256, arena.shape, dtype=torch.uint8, device=dev))
        base = arena.data_ptr()
        starts = torch.arange(rows, dtype=torch.int64, device=dev) * row_bytes + base
        if shift is None:
            src, dst = starts, starts + rows * row_bytes
            size = row_bytes
        else:
            src, dst = starts + shift, starts
            size = row_bytes - shift
        sizes = torch.full((rows,), size, dtype=torch.int64, device=dev)
        # one correctness check against the oracle before timing
        snap = arena.cpu().numpy().copy()
        batch_memcpy(src, dst, sizes, num_warps=nw)
        torch.cuda.synchronize()
        exp = oracle.expect_batch(snap, (src - base).cpu().numpy(), (dst - base).cpu().numpy(),
                                  sizes.cpu().numpy())
        ok = np.array_equal(arena.cpu().numpy(), exp)
        tg, tn = ab(lambda: batch_memcpy(src, dst, sizes, num_warps=nw),
                    lambda: batch_memcpy(src, dst, sizes, variant="BM-NOGUARD", num_warps=nw))
        nbytes = rows * size
        out(f"| {name}{'' if ok else ' (WRONG BYTES)'} | {nbytes} | {tg:.1f} | {tn:.1f} | "
            f"{tg / tn:.3f} | {bw(nbytes, tg)} | {bw(nbytes, tn)} |")
        del arena
    out()

    # -------------------------------------------------------------- state copy
    out("## state_copy: fused Triton vs torch path (dst.copy_(src.clone()) per copy)")
    out()
    geoms = {
        # conv state_len 3 x dim 4096 bf16 (24 KiB), temporal 16 x 128 x 128 fp32 (1 MiB)
        "conv": dict(state_len=3, dim=4096, elem=2),
        "temporal": dict(inner=16 * 128 * 128, elem=4),
    }
    req_counts = (1, 8, 64)
    if args.quick:
        geoms = {"conv": dict(state_len=3, dim=64, elem=2), "temporal": dict(inner=1000, elem=4)}
        req_counts = (1, 2)
    out(f"- model: {args.layers} layers, each one conv state (len {geoms['conv']['state_len']}, "
        f"dim {geoms['conv']['dim']}, {geoms['conv']['elem']}-byte) and one temporal state "
        f"({geoms['temporal']['inner']} x {geoms['temporal']['elem']}-byte); num_tiles 16")
    out()
    out("| case | requests | layout | bytes | fused us | torch us | torch/fused | fused bw |")
    out("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for layout in ("SD", "DS"):
        for n_req in req_counts:
            for same_block in (True, False):
                blocks = 3 * n_req
                cg, tg_ = geoms["conv"], geoms["temporal"]
                conv_bytes = cg["state_len"] * cg["dim"] * cg["elem"]
                temp_bytes = tg_["inner"] * tg_["elem"]
                pool_bytes = blocks * (conv_bytes + temp_bytes) * args.layers
                arena = torch.empty(pool_bytes + 4096, dtype=torch.uint8, device=dev)
                base = arena.data_ptr()
                meta, off = [], 0
                for _ in range(args.layers):
                    ds = layout == "DS"
                    meta.append([base + off, conv_bytes, cg["elem"], cg["dim"], cg["state_len"], 0,
                                 cg["dim"] if ds else 0, cg["state_len"] * cg["elem"] if ds else 0])
                    off += blocks * conv_bytes
                    meta.append([base + off, temp_bytes, tg_["elem"], tg_["inner"], 0, 0, 0, 0])
                    off += blocks * temp_bytes
                meta_t = torch.tensor(meta, dtype=torch.int64, device=dev)
                # request r owns blocks 3r..3r+2; src_col 0, dst_col 2, bias 1: the conv
                # state moves bt[0] -> bt[2] (the same block when same_block), the
                # temporal state bt[0 + 1] -> bt[2]
                bt = np.zeros((1, n_req, 3), dtype=np.int32)
                for r in range(n_req):
                    bt[0, r] = (3 * r, 3 * r + 1, 3 * r if same_block else 3 * r + 2)
                bt_t = torch.from_numpy(bt).to(dev)
                src = torch.zeros(n_req, dtype=torch.int32, device=dev)
                dst = torch.full((n_req,), 2, dtype=torch.int32, device=dev)
                bias = torch.ones(n_req, dtype=torch.int32, device=dev)
                tf, tt = ab(lambda: state_copy(meta_t, bt_t, src, dst, bias, num_tiles=16,
                                               num_warps=nw),
                            lambda arena=arena: torch_state_copy(meta_t, bt_t, src, dst, bias,
                                                                 num_tiles=16, arena=arena),
                            reps=max(1, args.reps // 4))
                moved = n_req * args.layers * ((cg["state_len"] - 1) * cg["dim"] * cg["elem"]
                                               + temp_bytes)
                shape = "same block" if same_block else "distinct blocks"
                out(f"| conv shift {shape} + temporal | {n_req} | {layout} | {moved} | {tf:.1f} | "
                    f"{tt:.1f} | {tt / tf:.1f} | {bw(moved, tf)} |")
                del arena
                torch.cuda.empty_cache()
    out.finish(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

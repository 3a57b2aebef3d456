"""The conformance corpus (tests/conformance) compiled on a GPU against Triton's interpreter, same inputs.

For every entry: its seeded inputs are built once and written (wire form, see
``tests/conformance/numerics.py``) to a temporary folder; a child process with
``TRITON_INTERPRET=1`` and no visible GPU runs the entry in the interpreter
inside ``mambafuzz.interp.adapters()`` (as the CPU tests do) and writes its
outputs back as ``.npz``; meanwhile this process runs the same entry compiled
on ``cuda``.  Per entry it reports the compiled outputs against the
interpreted ones (elements equal bit for bit / total, largest absolute
difference, largest difference in units in the last place of the output
dtype, whether within the entry's bound) and each arm against the entry's
numpy expectation.  An entry whose interpreter arm the release cannot run
(``Entry.unrunnable``) is inconclusive there when mambafuzz's blame says so.

Command (from the repository root, on a CUDA box; the integrator's: H200,
Triton 3.6, torch 2.11, python 3.12):

    PYTHONPATH=. python bench/conformance_gpu.py --out bench/results/conformance

``--only NAME`` (repeatable) picks entries by substring.  Writes
``conformance.json`` and ``conformance.md`` under ``--out``, prints the
table, exits 1 if any entry is outside its bound or an arm failed (2: no
GPU).  Pass ``MF_COMMIT=$(git rev-parse --short HEAD)`` where the device's
copy of the tree may carry an older git HEAD.

``--compile-only`` needs no GPU: it compiles every entry's kernels for an
sm_90 target with Triton's real compiler (a stand-in driver, nothing is
launched) and says which compile.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tests", ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

PROG = "conformance_gpu"


def _pick(cases, only):
    return [c for c in cases if not only or any(o in c.name for o in only)]


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# --------------------------------------------------------------------------
# the interpreted arm (child process)
# --------------------------------------------------------------------------
def child(folder: str) -> int:
    """Run every entry listed in `folder`/manifest.json without an output file yet, interpreted."""
    import numpy as np
    import triton

    import conformance
    from conformance import numerics as nx
    from mambafuzz.interp import adapters
    from mambafuzz.judge import blame

    work = Path(folder)
    manifest = json.loads((work / "manifest.json").read_text())
    for name, dtypes in manifest["inputs"].items():
        if (work / f"{name}.out.json").exists():
            continue
        entry = conformance.by_name(name)
        with np.load(work / f"{name}.in.npz") as z:
            inputs = {k: nx.unwire(z[k], dtypes[k], "cpu") for k in dtypes}
        record = {"triton": triton.__version__, "error": None}
        start = time.perf_counter()
        try:
            with adapters():
                outputs = entry.launch(inputs)
            np.savez(work / f"{name}.out.npz", **{k: nx.wire(v) for k, v in outputs.items()})
            record["dtypes"] = {k: nx.dtype_name(v.dtype) for k, v in outputs.items()}
        except Exception as exc:  # noqa: BLE001 - reported, judged by blame
            who = blame.classify(exc)
            record["error"] = {"who": who.who, "message": who.message,
                               "unrunnable": entry.unrunnable_on(triton.__version__)}
        record["seconds"] = round(time.perf_counter() - start, 3)
        (work / f"{name}.out.json").write_text(json.dumps(record))
    return 0


def _start_child(work: Path):
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    log = open(work / "child.log", "ab")
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(work)],
                            env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT), log


def _interpreted(work: Path, names: list, timeout: float, proc=None) -> dict:
    """Wait for the child (restarting it after a crash while it makes progress); the records by name."""
    deadline = time.monotonic() + timeout
    done = lambda: [n for n in names if (work / f"{n}.out.json").exists()]  # noqa: E731
    attempts = 0
    while True:
        if proc is None:
            proc, log = _start_child(work)
        else:
            log = None
        before = len(done())
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not None:
            log.close()
        proc = None
        attempts += 1
        left = [n for n in names if n not in done()]
        if not left or time.monotonic() >= deadline or (len(done()) == before and attempts > 1) or attempts > 5:
            break
        # a crash takes the entry it was running: mark it and go on with the rest
        crashed = left[0]
        (work / f"{crashed}.out.json").write_text(json.dumps(
            {"error": {"who": "crash", "message": "the interpreted child process died running this entry "
                                                   "(see child.log)", "unrunnable": None}}))
    tail = (work / "child.log").read_text(errors="replace")[-2000:] if (work / "child.log").exists() else ""
    out = {}
    for n in names:
        p = work / f"{n}.out.json"
        out[n] = json.loads(p.read_text()) if p.exists() else {
            "error": {"who": "missing", "message": "no result from the interpreted child: " + _one_line(tail),
                      "unrunnable": None}}
    return out


# --------------------------------------------------------------------------
# the compiled arm and the comparison
# --------------------------------------------------------------------------
def _compare_entry(entry, expected, compiled, compiled_dtypes, interp, interp_rec):
    from conformance import numerics as nx

    outputs = {}
    for name in expected:
        dtype = compiled_dtypes.get(name) if compiled is not None else (interp_rec.get("dtypes") or {}).get(name)
        bound = entry.bound_for(name)
        row = {"dtype": dtype, "bound": bound.describe()}
        for key, a, b in (("compiled_vs_interpreted", compiled, interp), ("compiled_vs_numpy", compiled, expected),
                          ("interpreted_vs_numpy", interp, expected)):
            if a is None or b is None or dtype is None:
                row[key] = None
                continue
            try:
                c = nx.compare(a[name], b[name], dtype, bound)
                row[key] = {"equal": c.equal, "total": c.total, "max_abs": c.max_abs, "max_ulps": c.max_ulps,
                            "ok": c.ok, "first_bad": c.first_bad}
            except AssertionError as exc:           # shape or dtype differs
                row[key] = {"equal": 0, "total": int(getattr(b[name], "size", 0)), "max_abs": float("inf"),
                            "max_ulps": float("inf"), "ok": False, "first_bad": _one_line(exc)}
        outputs[name] = row
    return outputs


def _verdict(rec) -> str:
    errs = rec["errors"]
    compiled_err = errs.get("compiled")
    if compiled_err:
        if compiled_err.get("unrunnable"):
            return "inconclusive: " + compiled_err["unrunnable"] + " (compiled)"
        return "compiled arm failed"
    outs = rec["outputs"].values()
    if any(o["compiled_vs_numpy"] and not o["compiled_vs_numpy"]["ok"] for o in outs):
        return "compiled outside its bound from numpy"
    interp_err = errs.get("interpreted")
    if interp_err:
        if interp_err.get("unrunnable") and interp_err.get("who") == "interpreter":
            return "inconclusive: " + interp_err["unrunnable"]
        return "interpreted arm failed"
    if any(not o["compiled_vs_interpreted"]["ok"] for o in outs):
        return "compiled outside its bound from interpreted"
    if any(not o["interpreted_vs_numpy"]["ok"] for o in outs):
        return "interpreted outside its bound from numpy"
    return "ok"


def _aggregate(rec, key):
    parts = [o[key] for o in rec["outputs"].values() if o[key] is not None]
    if not parts:
        return None
    return {"equal": sum(p["equal"] for p in parts), "total": sum(p["total"] for p in parts),
            "max_abs": max(p["max_abs"] for p in parts), "max_ulps": max(p["max_ulps"] for p in parts),
            "ok": all(p["ok"] for p in parts)}


def _cell_vs_numpy(agg, err):
    if err:
        return "error"
    if agg is None:
        return "-"
    return f"{'ok' if agg['ok'] else 'OUTSIDE'} ({agg['equal']}/{agg['total']} bitwise)"


def markdown(report) -> str:
    lines = [f"- device: {report['device']}", f"- commit: {report['commit']}", f"- command: `{report['command']}`",
             "",
             "| entry | bound | compiled = interpreted (bitwise) | max abs diff | max ulp | within bound "
             "| compiled vs numpy | interpreted vs numpy | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rec in report["entries"]:
        ci = _aggregate(rec, "compiled_vs_interpreted")
        bounds = sorted({o["bound"] for o in rec["outputs"].values()})
        eq = f"{ci['equal']}/{ci['total']}" if ci else "-"
        mabs = f"{ci['max_abs']:.3g}" if ci else "-"
        mulp = f"{ci['max_ulps']:g}" if ci else "-"
        within = ("yes" if ci["ok"] else "NO") if ci else "-"
        lines.append(f"| {rec['name']} | {'; '.join(bounds)} | {eq} | {mabs} | {mulp} | {within} | "
                     f"{_cell_vs_numpy(_aggregate(rec, 'compiled_vs_numpy'), rec['errors'].get('compiled'))} | "
                     f"{_cell_vs_numpy(_aggregate(rec, 'interpreted_vs_numpy'), rec['errors'].get('interpreted'))} | "
                     f"{rec['verdict']} |")
    notes = [(r["name"], k, e["message"] if isinstance(e, dict) else e)
             for r in report["entries"] for k, e in r["errors"].items() if e]
    if notes:
        lines += ["", "Arms that raised:", ""]
        lines += [f"- {n} ({k}): {_one_line(m, 400)}" for n, k, m in notes]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    if os.environ.get("MF_COMMIT"):
        return os.environ["MF_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def gpu(args) -> int:
    from _gpu_common import device_line, require_compiled_gpu

    if args.cpu_selftest:                   # both arms interpreted: the plumbing, not the numbers
        os.environ["TRITON_INTERPRET"] = "1"
        import torch
        device = "cpu"
        device_line = lambda: "- device: cpu self-test (both arms interpreted)"  # noqa: E731
    else:
        torch = require_compiled_gpu(PROG)
        device = "cuda"
    import contextlib

    import numpy as np
    import triton

    import conformance
    from conformance import numerics as nx
    from mambafuzz.interp import adapters
    from mambafuzz.judge import blame

    cases = _pick(conformance.CASES, args.only)
    if not cases:
        print(f"{PROG}: no entry matches {args.only}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        work = Path(tmp)
        manifest, inputs_wire, expected = {"inputs": {}}, {}, {}
        for entry in cases:
            inputs = entry.inputs("cpu")
            wired = {k: nx.wire(v) for k, v in inputs.items()}
            inputs_wire[entry.name] = (wired, {k: nx.dtype_name(v.dtype) for k, v in inputs.items()})
            np.savez(work / f"{entry.name}.in.npz", **wired)
            manifest["inputs"][entry.name] = inputs_wire[entry.name][1]
            expected[entry.name] = entry.expect(wired)
        (work / "manifest.json").write_text(json.dumps(manifest))
        proc, _log = _start_child(work)             # the interpreter works while the GPU does

        compiled, compiled_dtypes, compiled_err, seconds = {}, {}, {}, {}
        for entry in cases:
            wired, dtypes = inputs_wire[entry.name]
            start = time.perf_counter()
            try:
                dev_inputs = {k: nx.unwire(wired[k], dtypes[k], device) for k in wired}
                with (adapters() if args.cpu_selftest else contextlib.nullcontext()):
                    outs = entry.launch(dev_inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                compiled[entry.name] = {k: nx.wire(v) for k, v in outs.items()}
                compiled_dtypes[entry.name] = {k: nx.dtype_name(v.dtype) for k, v in outs.items()}
            except Exception as exc:  # noqa: BLE001 - reported
                who = blame.classify(exc)
                compiled_err[entry.name] = {"who": who.who, "message": who.message,
                                            "unrunnable": entry.unrunnable_on(triton.__version__)}
                if args.verbose:
                    traceback.print_exc()
            seconds[entry.name] = round(time.perf_counter() - start, 3)

        interp_recs = _interpreted(work, [c.name for c in cases], args.child_timeout, proc)
        entries = []
        for entry in cases:
            irec = interp_recs[entry.name]
            interp = None
            if not irec.get("error") and (work / f"{entry.name}.out.npz").exists():
                with np.load(work / f"{entry.name}.out.npz") as z:
                    interp = {k: z[k].copy() for k in z.files}
            rec = {"name": entry.name, "idioms": entry.idioms, "model": entry.model,
                   "reasons": {k: entry.bound_for(k).reason for k in expected[entry.name]
                               if not entry.bound_for(k).exact},
                   "errors": {"compiled": compiled_err.get(entry.name), "interpreted": irec.get("error")},
                   "seconds": {"compiled": seconds[entry.name], "interpreted": irec.get("seconds")},
                   "outputs": _compare_entry(entry, expected[entry.name], compiled.get(entry.name),
                                             compiled_dtypes.get(entry.name, {}), interp, irec)}
            rec["verdict"] = _verdict(rec)
            entries.append(rec)
        interp_triton = next((r.get("triton") for r in interp_recs.values() if r.get("triton")), None)

    command = "PYTHONPATH=. python bench/conformance_gpu.py " + " ".join(sys.argv[1:])
    report = {"device": device_line().removeprefix("- device: "), "commit": _commit(), "command": command,
              "triton": triton.__version__, "interpreted_triton": interp_triton, "torch": torch.__version__,
              "python": platform.python_version(), "entries": entries}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "conformance.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
    table = markdown(report)
    (out / "conformance.md").write_text(table)
    print(table)
    bad = [r["name"] for r in entries if r["verdict"] != "ok" and not r["verdict"].startswith("inconclusive")]
    print(f"{len(entries) - len(bad)}/{len(entries)} entries within their bounds"
          + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


# --------------------------------------------------------------------------
# --compile-only: Triton's compiler for sm_90 without a GPU
# --------------------------------------------------------------------------
def compile_only(args) -> int:
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print(f"{PROG}: --compile-only compiles; unset TRITON_INTERPRET", file=sys.stderr)
        return 2
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    class _SM90:
        """Stands in for the CUDA driver: a target to compile for, nothing to launch on."""

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_active_torch_device(self):
            import torch
            return torch.device("cpu")

    driver.set_active(_SM90())
    run = JITFunction.run
    built = []

    def compile_run(self, *a, grid, warmup, **kw):
        kernel = run(self, *a, grid=grid, warmup=True, **kw)
        built.append(self.fn.__name__)
        return kernel

    def bench_config(self, *a, config, **meta):
        self.fn.run(*a, **meta, **config.all_kwargs())
        return [0.0, 0.0, 0.0]

    JITFunction.run = compile_run
    Autotuner._bench = bench_config
    import conformance

    failed = 0
    for entry in _pick(conformance.CASES, args.only):
        before = len(built)
        try:
            entry.launch(entry.inputs("cpu"))
            print(f"{entry.name}: compiled {', '.join(sorted(set(built[before:])))} for sm_90")
        except Exception as exc:  # noqa: BLE001 - reported
            declared = entry.unrunnable_on(triton.__version__)
            note = f" (declared: Triton {triton.__version__} cannot run {declared})" if declared else ""
            failed += 0 if declared else 1
            print(f"{entry.name}: does not compile on Triton {triton.__version__}{note}: "
                  f"{_one_line(type(exc).__name__ + ': ' + str(exc), 300)}")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "conformance"),
                    help="folder for conformance.json and conformance.md")
    ap.add_argument("--only", action="append", default=[], help="entries whose name contains this (repeatable)")
    ap.add_argument("--child-timeout", type=float, default=600.0, help="seconds for the interpreted arm")
    ap.add_argument("--compile-only", action="store_true", help="compile every entry for sm_90; no GPU needed")
    ap.add_argument("--verbose", action="store_true", help="print the compiled arm's tracebacks")
    ap.add_argument("--cpu-selftest", action="store_true",
                    help="no GPU: run the 'compiled' arm interpreted on the CPU too (checks the plumbing only)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.compile_only:
        return compile_only(args)
    return gpu(args)


if __name__ == "__main__":
    sys.exit(main())

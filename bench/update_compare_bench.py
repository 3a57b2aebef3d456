"""An update contract's GPU example judged on the device against judged on the host, side by side.

The update contracts' outputs carry tolerances, so the GPU judge's byte-compare kernel cannot
take them: the engine's host loop restores, runs and compares every repetition.  ``compare`` first
asks the device whether the arena and every output match (one sync, nothing copied) and only
copies to the host to report a difference; the baseline here is the same process with that
device step switched off (every repetition's arena and outputs copied to the host and compared
there, as before).  Cases: `--cases` drawn from each contract's `--profile` strategy
(derandomized, so both arms see the same ones); per case, a warm-up run (compiles), then
``engine.run_case`` at `--reps` with each arm, the order alternating by case.

    TRITON_INTERPRET=0 python bench/update_compare_bench.py --out bench/results/update_compare.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _gpu_common import device_line, require_compiled_gpu  # noqa: E402

CONTRACTS = ("ssm_update", "delta_update", "conv_update")


def draw_cases(contract: str, profile: str, n: int) -> list:
    from hypothesis import HealthCheck, given, settings

    from mambafuzz import contracts, strategies

    cases = []

    @settings(max_examples=n, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract, profile=strategies.PROFILES[profile]))
    def collect(case):
        cases.append(case)

    collect()
    return cases[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contract", action="append", default=None, choices=CONTRACTS)
    ap.add_argument("--profile", default="gpu-amp")
    ap.add_argument("--cases", type=int, default=25)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run of this script (compare never takes the device step there)")
    ap.add_argument("--kind", choices=("triton", "torch"), default=None,
                    help="the reference target (None: triton on cuda, torch on cpu)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch = require_compiled_gpu("update_compare_bench") if args.device == "cuda" else __import__("torch")

    from mambafuzz.errors import CaseError, Rejected
    from mambafuzz.judge import materialize
    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels import registry

    device_step = materialize.Materialized._same_on_device
    arms = {"device compare": device_step, "host compare (baseline)": lambda self: False}
    results = {}
    for contract in args.contract or CONTRACTS:
        fn = registry.get(f"{args.kind or ('triton' if args.device == 'cuda' else 'torch')}.{contract}").fn
        seconds = {arm: [] for arm in arms}
        verdicts_agree, skipped = 0, 0
        for k, case in enumerate(draw_cases(contract, args.profile, args.cases)):
            try:
                run_case(fn, case, args.device, reps=1)  # compiles, and says whether the case can run
            except (CaseError, Rejected):
                skipped += 1
                continue
            order = list(arms) if k % 2 == 0 else list(reversed(arms))
            failures = {}
            for arm in order:
                materialize.Materialized._same_on_device = arms[arm]
                try:
                    if args.device == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    v = run_case(fn, case, args.device, reps=args.reps)
                    seconds[arm].append(time.perf_counter() - t0)
                    failures[arm] = v.failures
                finally:
                    materialize.Materialized._same_on_device = device_step
            verdicts_agree += len(set(failures.values())) == 1
        row = {arm: {"mean_ms": 1e3 * statistics.fmean(s), "median_ms": 1e3 * statistics.median(s)}
               for arm, s in seconds.items() if s}
        n = len(seconds["device compare"])
        row.update(cases=n, skipped=skipped, verdicts_agree=verdicts_agree)
        if n:
            row["speedup"] = row["host compare (baseline)"]["mean_ms"] / row["device compare"]["mean_ms"]
        results[contract] = row
        print(f"{contract}: {n} cases, device {row.get('device compare', {}).get('mean_ms', 0):.1f} ms, "
              f"host {row.get('host compare (baseline)', {}).get('mean_ms', 0):.1f} ms an example at "
              f"{args.reps} reps ({row.get('speedup', 0):.2f}x); verdicts agree on {verdicts_agree}", flush=True)
    doc = {"what": __doc__.splitlines()[0], "device": device_line() if args.device == "cuda" else "cpu",
           "profile": args.profile, "reps": args.reps, "date": time.strftime("%Y-%m-%d"),
           "command": " ".join(sys.argv), "results": results}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

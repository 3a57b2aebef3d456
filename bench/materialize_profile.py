"""Where materialize spends its time for the prefill judge benches' shapes: cProfile over `--runs` calls.

The judge benches time materialize as a whole; this says which functions make it up (drawing the values
on the host, moving them, the oracle, building tensors).  On a GPU each call ends in a synchronise, so
time a launch queued is charged to where it is waited for (the oracle's ``.any()``/``.item()`` and the
synchronise).  Prints the top functions by own time per contract and writes them as JSON.

    python bench/materialize_profile.py --device cuda --out bench/results/materialize_profile_h200.json
"""
from __future__ import annotations

import argparse
import cProfile

import json
import platform
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _contract_bench import commit as head, on_device  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch, sync, name = on_device(args.device)

    import delta_prefill_judge_bench as delta
    import ssm_prefill_judge_bench as ssm
    from mambafuzz.judge.materialize import materialize
    from ssm_prefill_tolerance import make_case

    groups = {"ssm_prefill": [make_case(*shape) for shape in ssm.SHAPES],
              "delta_prefill": [delta.case_for(*shape) for shape in delta.SHAPES]}
    report = {"what": __doc__.splitlines()[0], "device": name, "torch": torch.__version__,
              "python": platform.python_version(), "commit": head(), "runs": args.runs, "contracts": {}}
    for contract, cases in groups.items():
        for case in cases:  # warm: compile caches, the allocator
            materialize(case, args.device)
        sync()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.runs):
            for case in cases:
                materialize(case, args.device)
                sync()
        prof.disable()
        stats = pstats.Stats(prof)
        calls = len(cases) * args.runs
        rows = sorted(((v[2], v[3], v[1], f"{Path(k[0]).name}:{k[1]}({k[2]})") for k, v in stats.stats.items()),
                      reverse=True)
        total = max(r[1] for r in rows)
        print(f"\n{contract} on {name}: {1e3 * total / calls:.1f} ms a materialize ({calls} calls)")
        print(f"{'own ms':>8} {'with callees ms':>15} {'calls':>6}  function")
        for own, cum, n, where in rows[:args.top]:
            print(f"{1e3 * own / calls:8.2f} {1e3 * cum / calls:15.2f} {n / calls:6.1f}  {where}")
        report["contracts"][contract] = {
            "ms_per_materialize": 1e3 * total / calls,
            "top": [{"function": where, "own_ms": 1e3 * own / calls, "cum_ms": 1e3 * cum / calls}
                    for own, cum, n, where in rows[:args.top]]}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

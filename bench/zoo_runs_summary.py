"""Issue 44's five amplified zoo runs in one JSON: per run (``zoo --json`` files under a folder) the rows caught,
the median and worst seconds to first failure over the rows caught, the rows not caught and why; over the runs
the median of the medians and the worst of the worsts, and whether every run caught every row.

    python3 bench/zoo_runs_summary.py OUT [--time 150] [--commit SHA] [--json OUT/zoo_ttf_runs.json]
"""
import argparse
import glob
import json
import os
import re
import statistics


def run_summary(d: dict) -> dict:
    """One ``zoo --json`` document: its exit code, rows, rows caught, the median and worst seconds to the
    first failure over the rows caught, and each row not caught with why."""
    rows = d["targets"]
    ttf = sorted(r["finding"]["seconds_to_first"] for r in rows if r.get("caught"))
    return {"exit_code": d["exit_code"], "rows": len(rows), "caught": len(ttf),
            "median_ttf_s": round(statistics.median(ttf), 2) if ttf else None,
            "worst_ttf_s": round(max(ttf), 2) if ttf else None,
            "not_caught": [{"target": r["target"], "status": r["status"], "why": r.get("why") or "",
                            "kind": ((r.get("finding") or {}).get("verdict") or {}).get("kind")}
                           for r in rows if not r.get("caught")]}


def summary(folder: str, time: int, commit: str) -> dict:
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, f"zoo_gpu_amp{time}_seed*.json"))):
        seed = int(re.search(r"seed(\d+)\.json$", path).group(1))
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as exc:  # a run cut off before its document: said, not skipped
            runs.append({"file": os.path.basename(path), "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
            continue
        runs.append({"file": os.path.basename(path), "seed": seed} | run_summary(d))
    ok = [r for r in runs if r.get("median_ttf_s") is not None]
    return {"commit": commit, "time": time, "runs": runs,
            "every_run_caught_every_row": bool(runs) and all(r.get("caught") == r.get("rows") for r in runs),
            "median_of_medians_s": round(statistics.median(r["median_ttf_s"] for r in ok), 2) if ok else None,
            "worst_of_worsts_s": max((r["worst_ttf_s"] for r in ok), default=None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--time", type=int, default=150)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--json", help="write the summary here")
    a = p.parse_args()
    body = summary(a.folder, a.time, a.commit)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(body, f, indent=2)
    print(json.dumps({k: v for k, v in body.items() if k != "runs"}))
    for r in body["runs"]:
        print(" ", r["file"], r.get("error") or f"{r['caught']} of {r['rows']} caught, median {r['median_ttf_s']} s, "
              f"worst {r['worst_ttf_s']} s, exit {r['exit_code']}; not caught: "
              f"{', '.join(x['target'] for x in r['not_caught']) or 'none'}")


if __name__ == "__main__":
    main()

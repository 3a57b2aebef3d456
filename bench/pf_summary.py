"""Issue 43's GPU session in one JSON: the clean prefill fuzzes (``pfstart``/``pfcollect``: one ``fuzz --json``
a target under the pf folder) and the amplified SP-/DP- rows (``pfzoo``'s ``zoo --json`` files, alone or
beside the fuzzes): per fuzz its status, examples, repetitions, seconds and rejections; per zoo run the rows
caught, the median and worst seconds to first failure, and each row not caught with why.

    python3 bench/pf_summary.py --pf W/pf --zoo alone=W/pfzoo.json --commit SHA --command "..." --out F.json
"""
import argparse
import glob
import json
import os

from zoo_runs_summary import run_summary


def fuzzes(folder: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "fuzz_*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as exc:  # a fuzz cut off before its document: said, not skipped
            out.append({"file": os.path.basename(path), "error": f"{type(exc).__name__}: {exc}"})
            continue
        for t in d["targets"]:
            out.append({"target": t["target"], "status": t["status"], "examples": t["examples"], "reps": t["reps"],
                        "seconds": round(t["seconds"], 1), "rejected": t.get("rejected") or [],
                        "exit_code": d["exit_code"]})
    return out


def zoo(path: str) -> dict:
    """``run_summary`` of one pfzoo run, and every row's verdict."""
    with open(path) as f:
        d = json.load(f)
    return run_summary(d) | {"per_row": [
        {"target": r["target"], "caught": r["caught"], "status": r["status"], "kind": (r.get("finding") or {}).get("kind"),
         "examples": r["examples"], "seconds_to_first": (r.get("finding") or {}).get("seconds_to_first"),
         "why": r.get("why") or ""} for r in d["targets"]]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pf", help="the pf folder pfcollect brought back")
    p.add_argument("--zoo", action="append", default=[], metavar="NAME=FILE", help="a pfzoo run's JSON")
    p.add_argument("--info", help="gpu_session.sh's info.txt (card, driver, versions)")
    p.add_argument("--commit", required=True)
    p.add_argument("--date", required=True)
    p.add_argument("--command", required=True, help="the device calls, as run")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    doc = {"what": "issue 43 on a GPU: clean prefill fuzzes and the amplified SP-/DP- rows", "commit": a.commit,
           "date": a.date, "command": a.command}
    if a.info:
        with open(a.info) as f:
            doc["device"] = f.read().strip().splitlines()[1:]
    if a.pf:
        doc["fuzz"] = fuzzes(a.pf)
    doc["zoo"] = {name: zoo(path) for name, path in (z.split("=", 1) for z in a.zoo)}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for z, r in doc["zoo"].items():
        print(f"zoo {z}: {r['caught']} of {r['rows']} caught, median {r['median_ttf_s']} s, worst {r['worst_ttf_s']} s")
    for r in doc.get("fuzz", []):
        print(r.get("target", r.get("file")), r.get("status", r.get("error")), r.get("examples"), r.get("seconds"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

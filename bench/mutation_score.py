"""The standing mutation score: do the tests notice a plausible bug in the oracles, the compares, the
unchanged-input lists and the strategies' draws of the hazard features?

cosmic-ray (https://cosmic-ray.readthedocs.io) makes the mutants; this script picks which, runs each
against the tests that cover its module, inside a time budget, and writes the score and every survivor.
Not in CI: a run is tens of minutes on 2 cores.  Install cosmic-ray in a venv of its own over the
project's packages and run with that venv's Python (the tree's tests run with the same interpreter):

    python3 -m venv --system-site-packages /tmp/mutvenv && /tmp/mutvenv/bin/pip install cosmic-ray==8.7.0
    nice -n 19 /tmp/mutvenv/bin/python bench/mutation_score.py --budget 2400 --per-target 12 --out /tmp/mut

Why cosmic-ray, not mutmut: mutmut 3 mutates only undecorated function bodies (its trampolines), so the
strategies (``@st.composite``) and the module-level lists of unchanged inputs -- half of what is checked
here -- would never be mutated; cosmic-ray mutates any expression of the module, each mutant run in a
fresh process (slower: a pytest start per mutant, hence the sample).

Which mutants: every operator cosmic-ray has, on the lines of the definitions a target names (all of its
module when it names none); one mutant per (line, operator, original operand) -- ``a + b`` is one
plausible slip, whichever operator replaces ``+`` -- and of those a seeded sample of ``--per-target``.
The same tree and seed give the same sample.  Each target gets an equal share of the budget left when its
turn comes (what it leaves goes to the next); a mutant that would start past its share is "not run"
(the first of each target always runs; with ``--again`` a survivor not run again still counts as one).
Each target's tests run once unmutated first: a target whose
tests fail unmutated is reported, not scored.  A mutant is killed when its tests fail, crash or outrun
``timeout`` (cosmic-ray's own: the baseline's time times 4, at least 60 s); incompetent mutants (the module
no longer imports) count as killed, as cosmic-ray counts them.

``--again`` re-runs the survivors of an earlier ``--out`` (after tests were added), on a fresh copy of the
tree; the targets' sources must be unchanged (their hashes are checked), so the mutants are the same.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = (sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not matrix")


@dataclass(frozen=True)
class Target:
    """One module (``path``), the definitions in it that are mutated (functions, methods, classes or
    module-level names; empty: the whole module) and the test files that cover them."""

    path: str
    defs: tuple[str, ...]
    tests: tuple[str, ...]


EDGES = "tests/unit/test_oracle_edges.py"
CHECKS = "tests/unit/test_update_checks.py"
UPDATE_TESTS = ("tests/unit/test_conv_update.py", "tests/unit/test_ssm_update.py", "tests/unit/test_delta_update.py",
                "tests/unit/test_state_scatter.py", CHECKS, EDGES)
STRATEGY_TESTS = ("tests/unit/test_expected_features.py", "tests/unit/test_cases_strategies.py")
COMPARE_TESTS = ("tests/unit/test_device_compare.py", "tests/unit/test_outputs.py", CHECKS)
ORACLE = ("tests/unit/test_oracle.py", EDGES)

TARGETS = (
    # the update contracts' oracles
    Target("mambafuzz/oracle/conv_update.py", (), ("tests/unit/test_conv_update.py", CHECKS)),
    Target("mambafuzz/oracle/ssm_update.py", (), ("tests/unit/test_ssm_update.py", "tests/unit/test_oracle_tensors.py",
                                                  CHECKS, EDGES)),
    Target("mambafuzz/oracle/delta_update.py", (), ("tests/unit/test_delta_update.py",
                                                    "tests/unit/test_oracle_tensors.py", CHECKS, EDGES)),
    Target("mambafuzz/oracle/state_scatter.py", (), ("tests/unit/test_state_scatter.py",)),
    Target("mambafuzz/oracle/_xp.py", (), ("tests/unit/test_oracle_tensors.py",)),
    # the copy contracts' oracles
    Target("mambafuzz/oracle/memmove.py", (), ORACLE),
    Target("mambafuzz/oracle/state_copy.py", (), ("tests/unit/test_oracle.py",)),
    Target("mambafuzz/oracle/pools.py", (), ORACLE),
    Target("mambafuzz/oracle/align.py", (), ORACLE),
    Target("mambafuzz/oracle/_checks.py", (), ORACLE + ("tests/unit/test_delta_update.py",)),
    Target("mambafuzz/oracle/_intervals.py", (), ("tests/unit/test_oracle.py",)),
    Target("mambafuzz/oracle/slots.py", (), ("tests/detection/test_slots.py", EDGES)),
    # the compares: the engine's (every contract's arena and outputs; the copy contracts have no other),
    # the update contracts' outputs and unchanged inputs
    Target("mambafuzz/judge/materialize.py", ("host_values", "differing", "compare", "differs", "_same_on_device",
                                              "_device_match", "_device_output"), COMPARE_TESTS),
    Target("mambafuzz/contracts/updates.py", ("to_float64", "from_float64", "as_stored", "unchanged_inputs",
                                              "_store", "state_output"), UPDATE_TESTS),
    Target("mambafuzz/contracts/conv_update.py", ("UNCHANGED", "_out"),
           ("tests/unit/test_conv_update.py", CHECKS)),
    Target("mambafuzz/contracts/ssm_update.py", ("UNCHANGED", "_out"), ("tests/unit/test_ssm_update.py", CHECKS)),
    Target("mambafuzz/contracts/delta_update.py", ("UNCHANGED",),
           ("tests/unit/test_delta_update.py", CHECKS)),
    # the strategies' draws of the hazard features
    Target("mambafuzz/strategies/conv_update.py", ("conv_update_cases",), STRATEGY_TESTS),
    Target("mambafuzz/strategies/ssm_update.py", ("ssm_update_cases",), STRATEGY_TESTS),
    Target("mambafuzz/strategies/delta_update.py", ("delta_update_cases",), STRATEGY_TESTS),
    Target("mambafuzz/strategies/state_scatter.py", (), STRATEGY_TESTS),
    Target("mambafuzz/strategies/batch.py", (), STRATEGY_TESTS),
    Target("mambafuzz/strategies/pools.py", (), STRATEGY_TESTS),
    Target("mambafuzz/strategies/slots.py", (), STRATEGY_TESTS + ("tests/detection/test_slots.py",)),
)


def def_lines(source: str, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """The (first, last) lines of every definition or module-level assignment named in `names`."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            spans.append((node.lineno, node.end_lineno))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                spans.append((node.lineno, node.end_lineno))
    return spans


def check_targets(root: Path = ROOT) -> list[str]:
    """What is wrong with TARGETS in the tree at `root` (a quick-tier test keeps this empty)."""
    problems = []
    for t in TARGETS:
        src = root / t.path
        if not src.is_file():
            problems.append(f"{t.path}: no such module")
            continue
        found = {n for n in t.defs if def_lines(src.read_text(), (n,))}
        problems += [f"{t.path}: no definition {n}" for n in t.defs if n not in found]
        problems += [f"{t.path}: no test file {f}" for f in t.tests if not (root / f).is_file()]
    return problems


def _family(spec) -> tuple:
    """One plausible slip: the line, the operator kind and the original operand (not its replacement)."""
    name = spec.operator_name
    for kind in ("ReplaceBinaryOperator_", "ReplaceComparisonOperator_", "ReplaceUnaryOperator_"):
        if kind in name:
            name = name.split(kind)[0] + kind + name.split(kind)[1].split("_")[0]
    return spec.start_pos[0], name, spec.start_pos[1]


def _key(item) -> tuple:
    spec = item.mutations[0]
    return spec.start_pos[0], spec.operator_name, spec.occurrence


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _copy_tree(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    skip = shutil.ignore_patterns(".git", "__pycache__", ".hypothesis", ".mambafuzz", "crashes", "*.sqlite", "results")
    shutil.copytree(ROOT, dest, ignore=skip)


def _run(cmd, cwd: Path, timeout: float) -> tuple[bool, float]:
    import subprocess

    start = time.monotonic()
    try:
        ok = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    return ok, time.monotonic() - start


def sample(target: Target, work: Path, db_path: Path, per_target: int, seed: int) -> tuple[list, int, int]:
    """cosmic-ray's mutants of `target` in the copy at `work`, deduplicated and sampled (see module doc)."""
    from cosmic_ray.commands.init import init
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(db_path), WorkDB.Mode.create) as db:
        init([Path(target.path)], db, {})  # every operator that takes no arguments
        items = list(db.work_items)
    source = (work / target.path).read_text()
    spans = def_lines(source, target.defs) if target.defs else [(1, len(source.splitlines()) + 1)]
    inside = [w for w in items if any(a <= w.mutations[0].start_pos[0] <= b for a, b in spans)]
    rng = random.Random(f"{seed}:{target.path}")
    groups: dict[tuple, list] = {}
    for w in sorted(inside, key=lambda w: (w.mutations[0].start_pos, w.mutations[0].operator_name)):
        groups.setdefault(_family(w.mutations[0]), []).append(w)
    picked = [rng.choice(g) for _, g in sorted(groups.items())]
    rng.shuffle(picked)
    return picked[:per_target], len(inside), len(groups)


def run(args) -> dict:
    from cosmic_ray.mutating import mutate_and_test

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "tree"
    earlier = json.loads((out / "results.json").read_text()) if args.again else None
    _copy_tree(work)
    os.environ["PYTHONPATH"] = str(work)
    os.environ.pop("TRITON_INTERPRET", None)
    os.chdir(work)
    deadline = time.monotonic() + args.budget
    chosen = [t for t in TARGETS if not args.only or any(o in t.path for o in args.only)]
    report = {"seed": args.seed, "per_target": args.per_target, "budget_s": args.budget, "targets": []}
    for i, target in enumerate(chosen):
        share_end = time.monotonic() + (deadline - time.monotonic()) / (len(chosen) - i)  # what is left, shared
        row = {"path": target.path, "defs": list(target.defs), "tests": list(target.tests),
               "sha": _sha(work / target.path), "killed": 0, "survived": [], "not_run": 0}
        report["targets"].append(row)
        before = next((r for r in earlier["targets"] if r["path"] == target.path), None) if earlier else None
        if before is not None and before["sha"] != row["sha"]:
            row["error"] = "the module changed since the earlier run: its mutants are not the same ones"
            continue
        items, row["mutants"], row["families"] = sample(target, work, out / f"{i:02d}.sqlite", args.per_target,
                                                        args.seed)
        row["sampled"] = len(items)
        earlier_survivors = {}
        if before is not None:  # only what survived before runs again; the rest stays killed
            earlier_survivors = {(s["line"], s["operator"], s["occurrence"]): s for s in before["survived"]}
            row["killed"] = before["killed"]
            items = [w for w in items if _key(w) in earlier_survivors]
        command = shlex.join(list(PYTEST) + list(target.tests))  # one string, as cosmic-ray runs it
        ok, base = _run(shlex.split(command), work, 900)  # the baseline runs the very command the mutants do
        row["baseline_s"] = round(base, 1)
        if not ok:
            row["error"] = "the tests fail on the unmutated tree"
            continue
        timeout = max(60.0, 4 * base)
        for n, w in enumerate(items):
            if n and time.monotonic() + base > share_end:  # the first always runs: every target is scored
                row["not_run"] += 1
                if _key(w) in earlier_survivors:  # it survived when it last ran, and still counts so
                    row["survived"].append({**earlier_survivors[_key(w)], "rerun": False})
                continue
            spec = w.mutations[0]
            result = mutate_and_test(w.mutations, command, timeout)
            if result.is_killed:
                row["killed"] += 1
            else:
                row["survived"].append({"line": spec.start_pos[0], "operator": spec.operator_name,
                                        "occurrence": spec.occurrence, "diff": result.diff})
        print(f"{target.path}: {row['killed']} killed, {len(row['survived'])} survived, {row['not_run']} not run "
              f"(of {row['sampled']} sampled from {row['families']} slips, {row['mutants']} mutants)", flush=True)
    done = [r for r in report["targets"] if "error" not in r]
    killed = sum(r["killed"] for r in done)
    survived = sum(len(r["survived"]) for r in done)
    report["killed"], report["survived"] = killed, survived
    report["score"] = killed / (killed + survived) if killed + survived else None
    (out / "results.json").write_text(json.dumps(report, indent=1))
    return report


def markdown(report: dict) -> str:
    lines = ["| module | definitions | sampled | killed | survived | not run |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in report["targets"]:
        if "error" in r:
            lines.append(f"| `{r['path']}` | | | | | {r['error']} |")
            continue
        defs = ", ".join(r["defs"]) or "all"
        lines.append(f"| `{r['path']}` | {defs} | {r['sampled']} of {r['families']} | {r['killed']} | "
                     f"{len(r['survived'])} | {r['not_run']} |")
    score = report["score"]
    lines.append(f"\nscore: {report['killed']} killed of {report['killed'] + report['survived']} run"
                 + (f" ({100 * score:.1f}%)" if score is not None else ""))
    for r in report["targets"]:
        for s in r.get("survived", []):
            lines.append(f"\nsurvivor `{r['path']}:{s['line']}` ({s['operator']}):\n```diff\n{s['diff'].strip()}\n```")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/mambafuzz-mutation", help="a folder for the copy, sessions, results")
    parser.add_argument("--budget", type=float, default=2400, help="seconds for the whole run")
    parser.add_argument("--per-target", type=int, default=12, help="mutants sampled per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="targets whose path holds one of these")
    parser.add_argument("--again", action="store_true", help="re-run the survivors of the earlier run in --out")
    parser.add_argument("--check", action="store_true", help="only check the target table against the tree")
    args = parser.parse_args(argv)
    problems = check_targets()
    if problems or args.check:
        print("\n".join(problems) or "targets ok")
        return 1 if problems else 0
    try:
        os.nice(19)
    except OSError:
        pass
    print(markdown(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

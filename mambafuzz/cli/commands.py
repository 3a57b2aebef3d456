"""The commands: each turns its parsed arguments into a run (``run/``), a replay, a page or a
campaign's summary, prints it (``output``) and returns the exit code ``control.exits.exit_code`` made.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from mambafuzz.cli.output import (View, description_lines, emit, err, option_lines, out, print_coverage,
                                  print_reports, replay_lines, replay_table, report_json, short_share_lines,
                                  zoo_escape_lines)
from mambafuzz.cli.parser import DEFAULT_DATABASE
from mambafuzz.control import device as device_mod
from mambafuzz.control import exits
from mambafuzz.control import gpu
from mambafuzz.control import interrupt
from mambafuzz.control.clock import Deadline
from mambafuzz.control.mps import default_workers_per_gpu, zoo_workers_per_gpu
from mambafuzz.errors import UsageError
from mambafuzz.judge.signature import check as check_signature


def fuzz_options(args, device: str):
    from mambafuzz import strategies  # deferred: Hypothesis loads with the first strategy, not with the parser

    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without
    from mambafuzz.search.fuzz import FuzzOptions, check_database, check_redis  # deferred: the fuzz loop imports Hypothesis, numpy and the engine: only for a run

    mode = args.mode or ("race" if device == "cpu" else "compare")
    if mode == "race" and device != "cpu":
        raise UsageError("--mode race needs --device cpu (it records the interpreter's loads and stores)")
    reps = args.reps or (1 if device == "cpu" else 100)
    # smoke on a GPU: the correct kernels under warp delays (gpu-amp), where a race in them would show
    profile = strategies.PROFILES[args.profile or ("cpu" if device == "cpu" else
                                                   "gpu-amp" if args.command == "smoke" else "gpu")]
    database = None if str(args.database).lower() == "none" else args.database
    if database is not None:
        (check_redis if str(database).startswith("redis://") else check_database)(database)
    crashes_dir = args.crashes_dir
    _check_writable(crashes_dir)
    return FuzzOptions(device=device, mode=mode, reps=reps, max_examples=args.max_examples,
                       min_examples=args.min_examples, shrink_budget=args.shrink_time,
                       seed=args.seed, database=database, crashes_dir=crashes_dir, profile=profile,
                       observe=_observe_dir(args.observe),
                       witness=args.cpu_witness if args.cpu_witness is not None else args.command == "fuzz",
                       contract_options={o.name: getattr(args, o.name) for o in contracts.options()
                                         if getattr(args, o.name, None) is not None})


def _observe_dir(folder: Path | None) -> str | None:
    """--observe's folder, absolute (workers run elsewhere), checked writable now."""
    if folder is None:
        return None
    _check_writable(folder, f"--observe {folder} is not a writable folder")
    return str(folder.absolute())


def _check_writable(folder: Path, what: str | None = None) -> None:
    """Make `folder` and write a probe in it now; UsageError (`what`: its message) when that fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".mambafuzz-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{what or f'crashes folder {folder} is not writable'}: {exc.strerror or exc}") from None


def _gpu_list(spec: str | None, device: str) -> list[int] | None:
    if spec is None:
        return None
    if device != "cuda":
        raise UsageError("--gpus needs --device cuda")
    import torch  # deferred: torch takes seconds to import
    present = torch.cuda.device_count()
    want = present if spec == "all" else None
    if want is None:
        try:
            want = int(spec)
        except ValueError:
            raise UsageError(f"--gpus takes 'all' or a count, got {spec!r}") from None
    if not 1 <= want <= present:
        raise UsageError(f"--gpus {spec}: this machine has {present} GPU(s)")
    return list(range(want))


def _run_targets(targets, opts, *, json_out: bool, title: str, args, device: str, isolate: bool,
                 auto_per_gpu=True, turns=None, costs=None, needs=None):
    """`auto_per_gpu`: True, the default workers a GPU (``--workers-per-gpu auto``); a function of the GPUs'
    count, the zoo's own; False, one."""
    """Run the targets under a view; Ctrl-C / SIGTERM stop cleanly, keeping what was found."""
    from mambafuzz.run import runner  # deferred: the runner imports the fuzz loop (Hypothesis, numpy): only for a run

    from mambafuzz.run import precompile  # deferred: the runner imports the fuzz loop (Hypothesis, numpy): only for a run

    deadline = Deadline(args.time)  # --time: the run's one clock, started when fuzzing can

    gpus = _gpu_list(args.gpus, device)
    per_gpu = 1
    if device == "cuda" and (isolate or args.gpus):
        if args.workers_per_gpu != "auto":
            per_gpu = args.workers_per_gpu
        elif callable(auto_per_gpu):
            per_gpu = auto_per_gpu(len(gpus) if gpus else 1)
        elif auto_per_gpu:
            per_gpu = default_workers_per_gpu(len(gpus) if gpus else 1)
    helpers = args.precompile
    if helpers == "auto":
        helpers = precompile.default_processes(device, (len(gpus) if gpus else 1) * per_gpu)
    with View(title, quiet=json_out) as view:
        if isolate or args.gpus:
            return runner.run_isolated(
                targets, opts, deadline=deadline, workers=args.workers, gpus=gpus, workers_per_gpu=per_gpu,
                mps=args.mps,
                hang_timeout=args.hang_timeout, fresh=args.fresh, on_update=view.update,
                on_resume=lambda line: err.print(line, highlight=False, markup=False),
                precompile_processes=helpers, turns=turns, costs=costs, needs=needs)
        return runner.run_in_process(targets, opts, deadline=deadline, on_update=view.update,
                                     precompile_processes=helpers, turns=turns)


def cmd_list(args) -> int:
    from mambafuzz.kernels import registry  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)

    targets = registry.all_targets()
    if args.json:
        emit(json.dumps([{"name": t.name, "contract": t.contract, "kind": t.kind, "overlap": t.overlap,
                           "bug": t.bug, "devices": list(t.devices), "description": t.description}
                          for t in targets], indent=2))
        return exits.exit_code(["done"])
    from mambafuzz.report.tables import list_table  # deferred: rich takes longer to import than --help to run

    table, notes = list_table(targets)
    out.print(table)
    for line in notes:
        print(line)
    for line in description_lines(targets):  # prose as plain lines: a table column of it is unreadable
        print(line)
    for line in option_lines():
        print(line)
    return exits.exit_code(["done"])


def _check_signatures(targets) -> None:

    for t in targets:
        check_signature(t.fn, t.contract, t.name)


def cmd_fuzz(args, *, smoke: bool = False) -> int:
    device = device_mod.select(args.device)
    from mambafuzz.kernels import registry  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)
    from mambafuzz.control.targets import resolve  # deferred: the contracts (numpy), and a user's module, only when a target is resolved

    if smoke:  # the quick torch paths first: the time they leave of --time goes to the kernels after them
        targets = sorted((t for t in registry.all_targets() if t.kind in ("correct", "torch") and device in t.devices),
                         key=lambda t: t.kind != "torch")
    else:
        targets = resolve(args.target, contract=args.contract, overlap=args.overlap)
    _check_signatures(targets)
    opts = fuzz_options(args, device)
    fleet = None
    if getattr(args, "fleet", None):  # one worker of a campaign (mambafuzz/fleet)
        from mambafuzz.fleet import command as fleet_command  # deferred: the campaign's modules (redis) only with --fleet or collect
        fleet, opts = fleet_command.setup(args, targets, opts, DEFAULT_DATABASE)
    isolate = args.isolate if args.isolate is not None else not smoke or device == "cuda"  # K workers a GPU
    title = f"mambafuzz {args.command} ({device}, {opts.mode})"
    reports = _run_targets(targets, opts, json_out=args.json, title=title, args=args, device=device,
                           isolate=isolate, turns=fleet,  # smoke on cuda: each target in one worker, compiled once
                           costs={t.name: 1.0 for t in targets} if smoke and device == "cuda" else None)
    statuses, campaign = [r.status for r in reports], {}
    if fleet is not None:  # the targets this box fuzzed, and a word on the campaign
        reports, fleet_lines, campaign = fleet_command.after(fleet, reports)
        statuses = fleet_command.statuses(reports, campaign)
    interrupted = interrupt.requested() or any(r.interrupted for r in reports)
    code = exits.exit_code(statuses, interrupted)
    interrupt.hold()  # the verdict is decided: no signal changes it now
    if args.json:
        emit(report_json(args.command, device, opts.mode, interrupted, code,
                           targets=[r.to_json() for r in reports], **({"fleet": campaign} if fleet else {})))
        return code
    print_reports(reports, title, device)
    print_coverage(reports, summary=smoke and not args.coverage)
    for line in short_share_lines(reports):
        print(line)
    for line in fleet_lines if fleet is not None else ():
        print(line)
    if interrupted:
        print("interrupted: every failure seen so far is saved")
    counts = {s: sum(r.status == s for r in reports) for s in ("finding", "inconclusive")}
    declined = sum(r.tally.rejected for r in reports)  # cases the targets rejected (mambafuzz.reject)
    summary = (f"{len(reports)} target(s), {sum(r.examples for r in reports)} examples"
               + (f" ({declined} rejected)" if declined else "")
               + f", {counts['finding']} finding(s), {counts['inconclusive']} inconclusive; exit {code}")
    print("\n".join(textwrap.wrap(summary, width=80, subsequent_indent="  ")))
    return code


def _zoo_caught(report, kinds: tuple[str, ...] | None) -> bool:
    """A finding of one of `kinds` (None: of any kind)."""
    f = report.finding
    return f is not None and (kinds is None or f.verdict.kind in kinds)


def _zoo_per_gpu(need: int, gpus: int) -> int:
    """The zoo's workers a GPU by default: what the GPU's memory allows for rows needing `need` bytes
    (``control.mps.zoo_workers_per_gpu``, ``nvidia-smi``'s total), within the cores (``default_workers_per_gpu``)."""
    info = gpu.query(0)
    return zoo_workers_per_gpu(info.total_bytes if info else None, need, default_workers_per_gpu(gpus))


def cmd_zoo(args) -> int:
    """Every zoo variant must be caught, by a kind its row declares: exit 1 if one escapes (ran clean,
    or its finding is of another kind), 3 if one could not be checked."""
    device = device_mod.select(args.device)
    from mambafuzz.kernels import registry  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)
    from mambafuzz.control.targets import resolve  # deferred: the contracts (numpy), and a user's module, only when a target is resolved
    from mambafuzz.kernels import zoo  # deferred: the kernels, after control.device.select

    targets = resolve(args.target) if args.target else [t for t in registry.zoo_targets() if device in t.devices]
    opts = fuzz_options(args, device)
    title = f"mambafuzz zoo ({device}, {opts.mode})"
    # the slowest rows first; on cuda in worker processes (a fault cannot take the run down), dealt out by
    # cost to K workers a GPU under MPS (run.deal): K from the GPU's memory, as many as leave every worker
    # room for the rows whose bugs need pools past 2 GiB (control.mps.zoo_workers_per_gpu; 4 on 80-141 GiB),
    # those rows dealt only to workers with room; --workers-per-gpu K overrides
    isolate = args.isolate if args.isolate is not None else device == "cuda"
    needs = {t.name: registry.zoo_entry(t.zoo_id).memory for t in targets if t.zoo_id}
    reports = _run_targets(zoo.order(targets, device), opts, json_out=args.json, title=title, args=args,
                           device=device, isolate=isolate,
                           auto_per_gpu=lambda n: _zoo_per_gpu(max(needs.values(), default=0), n),
                           costs={t.name: zoo.cost(t.zoo_id, device) for t in targets if t.zoo_id}, needs=needs)
    reports.sort(key=lambda r: next((i for i, t in enumerate(targets) if t.name == r.target), len(targets)))
    by_name = {t.name: t for t in targets}
    rows, expected = [], {}
    for r in reports:
        t = by_name.get(r.target)
        # a zoo row is caught only by the kinds it declares for this device; any finding for another target
        expected[r.target] = registry.zoo_entry(t.zoo_id).caught_as(device) if t and t.zoo_id else None
        rows.append({**r.to_json(), "zoo_id": t.zoo_id if t else None, "bug": t.bug if t else None,
                     "caught": _zoo_caught(r, expected[r.target]),
                     "caught_as": list(expected[r.target]) if expected[r.target] else None})
    escaped = [r.target for r, row in zip(reports, rows) if r.status == "clean"
               or (r.finding is not None and not row["caught"])]
    unchecked = [r.target for r in reports if r.status == "inconclusive"]
    interrupted = interrupt.requested() or any(r.interrupted for r in reports)
    # each row in words: escaped, caught, or not checked (so for a signal: interrupted); a row never run too
    unchecked_word = "interrupted" if interrupted else "inconclusive"
    code = exits.exit_code(["escaped" if r.target in escaped else "caught" if row["caught"] else unchecked_word
                            for r, row in zip(reports, rows)] + [unchecked_word] * (len(targets) - len(rows)))
    if args.json:
        emit(report_json("zoo", device, opts.mode, interrupted, code, targets=rows))
        return code
    from mambafuzz.report.tables import table as names_table  # deferred: rich takes longer to import than --help to run

    cells = []
    for r, row in zip(reports, rows):
        f = r.finding
        caught = ("[green]caught[/]" if row["caught"] else "[red]ESCAPED[/]" if r.target in escaped
                  else f"[yellow]{r.status}[/]")
        by = f.verdict.kind if f else ""
        if f and not row["caught"]:
            by += f", not {' or '.join(expected[r.target])}"
        first = f"{f.seconds_to_first:.1f}s, ex {f.examples_to_first}" if f else ""  # as the progress lines
        cells.append([r.target, caught, by, first])
    table, notes = names_table("bug zoo", ["variant", "caught", "by", "1st failure"], cells)
    out.print(table)
    for line in notes:
        print(line)
    for r, row in zip(reports, rows):
        if r.finding and not row["caught"]:
            for line in zoo_escape_lines(r, expected[r.target], device):
                print(line)
        elif r.finding:
            text = (f"{r.target}: {r.finding.case.describe()}"
                    + (f" (may not be minimal: {r.finding.not_minimal})" if r.finding.not_minimal else ""))
            for line in textwrap.wrap(text, width=80, subsequent_indent="  ", break_on_hyphens=False):
                print(line)
        elif r.why:
            print(f"{r.target}: {r.status}: {r.why}")
    print_coverage([r for r in reports if r.finding is None])  # what an escaped variant was tried on
    for line in short_share_lines(reports):
        print(line)
    named = [f"{r.target} ({r.finding.verdict.kind})" if r.finding else r.target
             for r in reports if r.target in escaped]
    print(f"{sum(row['caught'] for row in rows)} of {len(targets)} zoo variants caught"
          + (f"; escaped: {', '.join(named)}" if escaped else "")
          + (f"; not checked: {', '.join(unchecked)}" if unchecked else "") + f"; exit {code}")
    return code


def cmd_replay(args) -> int:
    """Replay crash files; one row each, and a bad file never stops the others.

    Exit code: 1 if any file still fails; else 2 if any could not run (an
    invalid file -- one line on stderr naming the file and the field -- a
    target that cannot be imported, a contract mismatch); else 3 if any was
    inconclusive; else 0.  With --json stdout is always one JSON report with a
    row per file under "files", also when the whole command fails (then each
    file's row says why).
    """
    from mambafuzz import findings  # deferred: crash files import the engine (numpy, the contracts)
    from mambafuzz.findings.replay import COULD_NOT_RUN, Against, ReplayRow, replay  # deferred: crash files import the engine (numpy, the contracts)

    files: list[Path] = []
    try:
        files = findings.crash_files(args.paths)  # validates paths before choosing a device
        if not files:
            raise UsageError(f"no crash files under {', '.join(map(str, args.paths))}")
        if (args.contract or args.overlap) and ":" not in (args.against or ""):
            raise UsageError("--contract and --overlap go with --against module:function")
        device = device_mod.select(args.device)  # before any import of the kernels, a user's module too
        against = None
        if args.against:
            from mambafuzz.control.targets import load_user_fn, resolve_one  # deferred: the contracts (numpy), and a user's module, only when a target is resolved
            if ":" in args.against:
                load_user_fn(args.against)  # a missing module is one error, not one per file
                against = Against(args.against, args.contract, args.overlap)
            else:
                against = Against(resolve_one(args.against, contract="").name)
    except UsageError as exc:
        if args.json:  # still JSON: every file found could not run, for this one reason
            emit(report_json("replay", args.device, args.mode, False, exits.exit_code(error=exc), error=str(exc),
                               files=[ReplayRow(f, args.against or "?", COULD_NOT_RUN, reason=str(exc)).to_json()
                                      for f in files]))
        raise
    rows = replay(files, device=device, reps=args.reps, mode=args.mode, against=against, timeout=args.timeout)
    for r in rows:
        if r.status == COULD_NOT_RUN:
            reason = r.reason if str(r.path) in r.reason else f"{r.path}: {r.reason}"
            err.print(f"mambafuzz: error: {reason}", highlight=False, markup=False)
    code = exits.exit_code([r.status for r in rows] or [COULD_NOT_RUN])  # no file at all is bad input
    interrupt.hold()  # the verdict is decided: no signal changes it now
    if args.json:
        mode = args.mode or (None if device == "cpu" else "compare")  # None: each file's recorded mode
        none_ran = {"error": "; ".join(r.reason for r in rows)} if all(r.status == COULD_NOT_RUN for r in rows) else {}
        emit(report_json("replay", device, mode, interrupt.requested(), code, **none_ran,
                         files=[r.to_json() for r in rows]))
    elif any(r.status != COULD_NOT_RUN for r in rows):  # a file that could not run had its line on stderr
        table, notes = replay_table(rows, device)
        out.print(table)
        for line in notes + replay_lines(rows):
            print(line)
    return code


def cmd_report(args) -> int:
    """Write the page; a bad input or output is one line and exit 2."""
    from mambafuzz.report import build  # deferred: the report's loader and plotly page, only for `mambafuzz report`

    report = build(args.path, args.output)
    found = sum(t.finding is not None for t in report.targets)
    print(f"wrote {args.output} ({len(report.targets) or len(report.files)} row(s), {found} finding(s))")
    return exits.exit_code(["done"])


def cmd_collect(args) -> int:
    """A campaign's confirmed buckets as crash files and its summary (``fleet.collect``)."""
    from mambafuzz.fleet.collect import collect, lines  # deferred: the campaign's modules (redis) only with --fleet or collect

    got = collect(args.hub, args.output, campaign=args.campaign, from_dirs=args.from_dirs,
                  include_unconfirmed=args.unconfirmed)
    if args.json:
        emit(json.dumps({**got.summary, "sent": got.sent, "folder": str(got.folder)}, indent=2))
        return got.code
    if got.sent:
        print(f"sent {got.sent} waiting finding(s) from {', '.join(map(str, args.from_dirs))}")
    for line in lines(got.summary, got.folder):
        print(line)
    print(f"wrote {len(got.files)} crash file(s) and {got.folder / 'campaign.txt'}; exit {got.code}")
    return got.code


def cmd_selfcheck(args) -> int:
    from mambafuzz.oracle.selfcheck import run_selfcheck  # deferred: numpy, only for the command that needs it

    failures = run_selfcheck()
    for name, ok, detail in failures:
        out.print(f"{'[green]ok[/]' if ok else '[red]FAIL[/]'} {name}{': ' + detail if detail else ''}")
    return exits.exit_code(["clean" if ok else "finding" for _, ok, _ in failures])


COMMANDS = {"list": cmd_list, "fuzz": cmd_fuzz, "smoke": lambda a: cmd_fuzz(a, smoke=True), "zoo": cmd_zoo,
            "replay": cmd_replay, "selfcheck": cmd_selfcheck, "report": cmd_report, "collect": cmd_collect}

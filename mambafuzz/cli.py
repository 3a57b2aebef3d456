"""`mambafuzz` command line: list, fuzz, smoke, zoo, replay, selfcheck.

Exit codes: 0 clean, 1 findings (or a zoo variant that escaped, or a crash that
still fails on replay), 2 bad usage or input (one line on stderr, no traceback).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from . import device as device_mod
from .errors import UsageError

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
out = Console()
err = Console(stderr=True, soft_wrap=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        err.print(f"mambafuzz: error: {message}", highlight=False)
        sys.exit(EXIT_USAGE)


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def _add_run_options(p, *, max_examples: int, time_default: float | None):
    p.add_argument("--device", default="cpu", choices=device_mod.DEVICES,
                   help="cpu runs Triton's interpreter with the race check; cuda runs compiled kernels")
    p.add_argument("--mode", choices=("compare", "race"), default=None,
                   help="race (CPU default) records every load and store; compare checks bytes only")
    p.add_argument("--reps", type=_positive(int), default=None,
                   help="repetitions per case (default 1 on cpu, 100 on cuda)")
    p.add_argument("--max-examples", type=_positive(int), default=max_examples)
    p.add_argument("--time", type=_positive(float), default=time_default, metavar="SECONDS",
                   help="time budget for the whole run")
    p.add_argument("--shrink-time", type=_positive(float), default=60.0, metavar="SECONDS",
                   help="time budget for shrinking one finding")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--crashes-dir", type=Path, default=Path("crashes"))
    p.add_argument("--database", default=".mambafuzz/examples",
                   help="Hypothesis example database: a directory, redis://HOST:PORT, or 'none'")
    p.add_argument("--profile", choices=("cpu", "gpu", "gpu-amp"), default=None,
                   help="case sizes (default: cpu on cpu, gpu on cuda); gpu-amp also draws warp delays "
                        "that make GPU races show")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run targets in worker processes that a fault or hang cannot take down "
                        "(default: on for fuzz, off for smoke and zoo)")
    p.add_argument("--gpus", default=None, metavar="all|N",
                   help="one worker per GPU (implies --isolate and --device cuda)")
    p.add_argument("--workers", type=_positive(int), default=1, help="CPU worker processes (with --isolate)")
    p.add_argument("--hang-timeout", type=_positive(float), default=120.0, metavar="SECONDS",
                   help="a worker silent this long in one case is a hang finding")
    p.add_argument("--fresh", action="store_true", help="ignore a saved, interrupted session with these options")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mambafuzz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list targets")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("fuzz", help="fuzz chosen targets (long sessions on a GPU box)")
    p.add_argument("--target", action="append", required=True,
                   help="name, glob, or module:function (with --contract); repeatable")
    p.add_argument("--contract", choices=("batch_memcpy", "state_copy", "postprocess"))
    p.add_argument("--overlap", choices=("left", "full"), default="full",
                   help="for a user batch_memcpy: which overlaps it supports")
    _add_run_options(p, max_examples=1000, time_default=None)

    p = sub.add_parser("smoke", help="bounded CI run over the correct targets (CPU by default)")
    _add_run_options(p, max_examples=60, time_default=600.0)

    p = sub.add_parser("zoo", help="fuzz every bug-zoo variant; fails if any escapes")
    p.add_argument("--target", action="append", default=None, help="only these zoo targets (names or globs)")
    _add_run_options(p, max_examples=200, time_default=None)
    p.set_defaults(crashes_dir=Path(".mambafuzz/zoo-crashes"))

    p = sub.add_parser("replay", help="re-run saved crash files")
    p.add_argument("paths", nargs="*", type=Path, default=[Path("crashes")])
    p.add_argument("--against", default=None, help="run this target instead of the one recorded")
    p.add_argument("--device", default="cpu", choices=device_mod.DEVICES)
    p.add_argument("--mode", choices=("compare", "race"), default=None)
    p.add_argument("--reps", type=_positive(int), default=None)
    p.add_argument("--timeout", type=_positive(float), default=120.0, metavar="SECONDS",
                   help="a replayed crash or hang finding runs in a child process stopped after this long")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("selfcheck", help="check the oracle against hand-worked examples")
    return parser


def _fuzz_options(args, device: str):
    import strategies
    from .fuzz import FuzzOptions

    mode = args.mode or ("race" if device == "cpu" else "compare")
    if mode == "race" and device != "cpu":
        raise UsageError("--mode race needs --device cpu (it records the interpreter's loads and stores)")
    reps = args.reps or (1 if device == "cpu" else 100)
    profile = strategies.PROFILES[args.profile or ("cpu" if device == "cpu" else "gpu")]
    database = None if str(args.database).lower() == "none" else args.database
    if database is not None and str(database).startswith("redis://"):
        from .fuzz import check_redis
        check_redis(database)
    crashes_dir = args.crashes_dir
    _check_writable(crashes_dir)
    return FuzzOptions(device=device, mode=mode, reps=reps, max_examples=args.max_examples,
                       time_budget=args.time, shrink_budget=args.shrink_time, seed=args.seed,
                       database=database, crashes_dir=crashes_dir, profile=profile)


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".mambafuzz-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"crashes folder {folder} is not writable: {exc.strerror or exc}") from None


def _report_table(reports, title: str) -> Table:
    table = Table(title=title)
    for col in ("target", "status", "examples", "reps", "failed reps", "time", "finding"):
        table.add_column(col, overflow="fold")
    for r in reports:
        finding = ""
        if r.finding:
            finding = f"{r.finding.verdict.kind}: {r.finding.case.describe()}"
            if r.finding.path:
                finding += f"\n-> {r.finding.path}{'' if r.written else ' (known)'}"
        elif r.error:
            finding = r.error
        style = {"finding": "red", "error": "red", "clean": "green"}.get(r.status, "yellow")
        table.add_row(r.target, f"[{style}]{r.status}[/]", str(r.examples), str(r.reps), str(r.failed_reps),
                      f"{r.seconds:.1f}s", finding)
    return table


def _report_json(r) -> dict:
    body = {"target": r.target, "contract": r.contract, "status": r.status, "examples": r.examples,
            "reps": r.reps, "failed_reps": r.failed_reps, "seconds": round(r.seconds, 3), "error": r.error,
            "rejected": r.rejected[:5]}
    if r.finding:
        f = r.finding
        body["finding"] = {"kind": f.verdict.kind, "summary": f.verdict.summary(), "case": f.case.to_json(),
                           "case_size": f.case.size, "path": str(f.path) if f.path else None,
                           "examples_to_first": f.examples_to_first,
                           "seconds_to_first": round(f.seconds_to_first, 3), "shrink_examples": f.shrink_examples}
    return body


def _gpu_list(spec: str | None, device: str) -> list[int] | None:
    if spec is None:
        return None
    if device != "cuda":
        raise UsageError("--gpus needs --device cuda")
    import torch
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


def _run_isolated(targets, opts, args, device: str, *, json_out: bool, title: str):
    """Targets in worker processes (one per GPU with --gpus), resumable, live view on stderr."""
    from .session import Session, SessionOptions, plain_options

    gpus = _gpu_list(args.gpus, device)
    per_target = opts.time_budget / len(targets) if opts.time_budget and targets else None
    entries = [{"spec": t.name, "name": t.name, "contract": t.contract, "overlap": t.overlap,
                "time_budget": per_target} for t in targets]
    sopts = SessionOptions(device=device, options={**plain_options(opts), "time_budget": None},
                           workers=args.workers, gpus=gpus, hang_timeout=args.hang_timeout, fresh=args.fresh)
    live_console = Console(stderr=True, quiet=json_out)
    with Live(_report_table([], title), console=live_console, refresh_per_second=4) as live:
        session = Session(entries, sopts, on_update=lambda reps: live.update(_report_table(list(reps.values()),
                                                                                        title)))
        if session.resumed():
            err.print(f"resuming a saved session: {len(session.resumed())} target(s) already done "
                      f"({', '.join(session.resumed())}); --fresh starts over")
        reports = session.run()
        live.update(_report_table(reports, title))
    return reports


def _run_targets(targets, opts, *, json_out: bool, title: str, args=None, device: str = "cpu",
                 isolate: bool = False):
    """Fuzz each target in turn under a live view; Ctrl-C stops cleanly, keeping what was found."""
    from .fuzz import TargetReport, fuzz_target

    if isolate or (args is not None and args.gpus):
        return _run_isolated(targets, opts, args, device, json_out=json_out, title=title)

    reports: list[TargetReport] = []
    start = time.monotonic()
    total_budget = opts.time_budget
    live_console = Console(stderr=True, quiet=json_out)
    last_draw = [0.0]

    def render(current=None):
        shown = reports + ([current] if current is not None else [])
        return _report_table(shown, title)

    with Live(render(), console=live_console, refresh_per_second=4, transient=False) as live:
        def progress(report):
            now = time.monotonic()
            if now - last_draw[0] > 0.25:
                last_draw[0] = now
                live.update(render(report))

        for target in targets:
            if total_budget is not None:
                left = total_budget - (time.monotonic() - start)
                if left <= 0:
                    break
                per_target = left / max(1, len(targets) - len(reports))
                opts.time_budget = per_target
            report = fuzz_target(target, opts, progress)
            reports.append(report)
            live.update(render())
            if report.interrupted:
                break
            if report.context_lost:
                live_console.print("[red]the CUDA context is broken by a fault; the remaining targets need a "
                                   "new process (use --isolate)[/]")
                break
    return reports


def cmd_list(args) -> int:
    from kernels import registry

    targets = registry.all_targets()
    if args.json:
        print(json.dumps([{"name": t.name, "contract": t.contract, "kind": t.kind, "overlap": t.overlap,
                           "bug": t.bug, "devices": list(t.devices), "description": t.description}
                          for t in targets], indent=2))
        return EXIT_CLEAN
    table = Table(title="mambafuzz targets")
    for col in ("name", "contract", "kind", "overlap", "bug", "devices", "description"):
        table.add_column(col, overflow="fold")
    for t in targets:
        table.add_row(t.name, t.contract, t.kind, t.overlap, t.bug or "", ",".join(t.devices), t.description)
    out.print(table)
    return EXIT_CLEAN


def cmd_fuzz(args, *, smoke: bool = False) -> int:
    device = device_mod.select(args.device)
    from kernels import registry
    from .targets import resolve

    if smoke:
        targets = [t for t in registry.all_targets() if t.kind in ("correct", "torch") and device in t.devices]
    else:
        targets = resolve(args.target, contract=args.contract, overlap=args.overlap)
    opts = _fuzz_options(args, device)
    isolate = args.isolate if args.isolate is not None else not smoke
    reports = _run_targets(targets, opts, json_out=args.json, title=f"mambafuzz {args.command} ({device}, {opts.mode})",
                           args=args, device=device, isolate=isolate)
    findings = [r for r in reports if r.finding]
    interrupted = any(r.interrupted for r in reports)
    if args.json:
        print(json.dumps({"command": args.command, "device": device, "mode": opts.mode,
                          "interrupted": interrupted, "targets": [_report_json(r) for r in reports]}, indent=2))
    else:
        for r in findings:
            out.print(f"[red]FINDING[/] {r.target}: {r.finding.verdict.summary()}", highlight=False)
            out.print(f"  replay: mambafuzz replay {r.finding.path} --device {device}", highlight=False)
        if interrupted:
            out.print("[yellow]interrupted: what was found so far is saved[/]")
        out.print(f"\n{len(reports)} target(s), {sum(r.examples for r in reports)} examples, "
                  f"{len(findings)} finding(s)")
    rejected = [msg for r in reports for msg in r.rejected]
    if rejected:
        err.print(f"warning: {len(rejected)} drawn case(s) were rejected by the oracle; first: {rejected[0]}",
                  highlight=False)
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def cmd_zoo(args) -> int:
    device = device_mod.select(args.device)
    from kernels import registry
    from .targets import resolve

    targets = resolve(args.target) if args.target else [t for t in registry.zoo_targets() if device in t.devices]
    opts = _fuzz_options(args, device)
    reports = _run_targets(targets, opts, json_out=args.json, title=f"mambafuzz zoo ({device}, {opts.mode})",
                           args=args, device=device, isolate=bool(args.isolate))
    rows = []
    for t, r in zip(targets, reports):
        f = r.finding
        rows.append({"target": t.name, "zoo_id": t.zoo_id, "bug": t.bug, "caught": f is not None,
                     "kind": f.verdict.kind if f else None,
                     "seconds_to_first": round(f.seconds_to_first, 2) if f else None,
                     "examples_to_first": f.examples_to_first if f else None,
                     "case_size": f.case.size if f else None,
                     "case": f.case.describe() if f else None,
                     "path": str(f.path) if f and f.path else None})
    escaped = [row["target"] for row in rows if not row["caught"]] + [t.name for t in targets[len(reports):]]
    if args.json:
        print(json.dumps({"device": device, "mode": opts.mode, "variants": rows, "escaped": escaped}, indent=2))
    else:
        table = Table(title="bug zoo")
        for col in ("variant", "bug", "caught", "by", "1st failure", "shrunk case"):
            table.add_column(col, overflow="fold")
        for row in rows:
            caught = "[green]caught[/]" if row["caught"] else "[red]ESCAPED[/]"
            first = f"{row['seconds_to_first']}s / ex {row['examples_to_first']}" if row["caught"] else ""
            table.add_row(row["target"], row["bug"] or "", caught, row["kind"] or "", first, row["case"] or "")
        out.print(table)
        out.print(f"{len(rows) - len(escaped)} of {len(targets)} zoo variants caught"
                  + (f"; escaped: {', '.join(escaped)}" if escaped else ""))
    return EXIT_FINDINGS if escaped else EXIT_CLEAN


def cmd_replay(args) -> int:
    from . import crashes
    from .replay import replay

    files = crashes.crash_files(args.paths)  # validates paths before choosing a device
    if not files:
        raise UsageError(f"no crash files under {', '.join(map(str, args.paths))}")
    device = device_mod.select(args.device)
    against = None
    if args.against:
        from .targets import resolve
        against = resolve([args.against])[0]
    mode = args.mode
    if mode is None and device != "cpu":
        mode = "compare"
    rows = replay(files, device=device, reps=args.reps, mode=mode, against=against, timeout=args.timeout)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        table = Table(title=f"replay ({device})")
        for col in ("crash file", "target", "status", "k/N", "detail"):
            table.add_column(col, overflow="fold")
        for r in rows:
            style = {"still failing": "red", "fixed": "green"}.get(r.status, "yellow")
            kn = f"{r.verdict.failures}/{r.verdict.reps}" if r.verdict else ""
            detail = r.reason or (r.verdict.summary() if r.verdict else "")
            table.add_row(str(r.path), r.target, f"[{style}]{r.status}[/]", kn, detail)
        out.print(table)
    if any(r.status == "could not run" for r in rows) and not any(r.status == "still failing" for r in rows):
        return EXIT_USAGE
    return EXIT_FINDINGS if any(r.status == "still failing" for r in rows) else EXIT_CLEAN


def cmd_selfcheck(args) -> int:
    from .selfcheck import run_selfcheck

    failures = run_selfcheck()
    for name, ok, detail in failures:
        out.print(f"{'[green]ok[/]' if ok else '[red]FAIL[/]'} {name}{': ' + detail if detail else ''}")
    return EXIT_CLEAN if all(ok for _, ok, _ in failures) else EXIT_FINDINGS


COMMANDS = {"list": cmd_list, "fuzz": cmd_fuzz, "smoke": lambda a: cmd_fuzz(a, smoke=True), "zoo": cmd_zoo,
            "replay": cmd_replay, "selfcheck": cmd_selfcheck}


def _sigterm(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops a session like Ctrl-C: what was found is kept, state is saved


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        err.print(f"mambafuzz: error: {exc}", highlight=False)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.print("mambafuzz: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())

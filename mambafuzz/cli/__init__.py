"""`mambafuzz` command line: list, fuzz, smoke, zoo, replay, report, collect, selfcheck.

The CLI parses and prints; running targets is ``runner``'s job.  Output is
made for CI logs too: tables fit 80 columns, and every command and path a user
may copy is printed on a plain line of its own, never wrapped.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import textwrap
from pathlib import Path

from mambafuzz.run import interrupt
from mambafuzz.report import outcome
from mambafuzz.run import device as device_mod
from mambafuzz.errors import UsageError
from mambafuzz.report.outcome import EXIT_CLEAN, EXIT_FINDINGS, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_USAGE


class _Console:
    """A rich Console made at its first use: rich takes longer to import than ``--help`` to run."""

    def __init__(self, **options):
        self.options, self.console = options, None

    def print(self, *args, **kwargs) -> None:
        if self.console is None:
            from rich.console import Console
            self.console = Console(**self.options)
        self.console.print(*args, **kwargs)


out = _Console(soft_wrap=True)
err = _Console(stderr=True, soft_wrap=True)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every default and keeps the exit-code table as written."""


class BadUsage(SystemExit):
    """argparse's own error, already printed as one line: exit 2, with the message (for --json)."""

    def __init__(self, message: str):
        super().__init__(EXIT_USAGE)
        self.message = message


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, fill=None, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("epilog", outcome.table_text())
        super().__init__(*args, **kwargs)
        self.fill = fill  # adds this command's arguments on first use (build_parser)

    def filled(self) -> "_Parser":
        if self.fill is not None:
            fill, self.fill = self.fill, None
            fill(self)
        return self

    def parse_known_args(self, args=None, namespace=None):
        return super(_Parser, self.filled()).parse_known_args(args, namespace)

    def format_help(self):
        return super(_Parser, self.filled()).format_help()

    def format_usage(self):
        return super(_Parser, self.filled()).format_usage()

    def error(self, message):  # argparse's own errors: one line, exit 2
        err.print(f"mambafuzz: error: {message}", highlight=False)
        raise BadUsage(message)


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


def _processes(text):
    """'auto' or a count of processes, 0 included."""
    if text == "auto":
        return text
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"expected 'auto' or a number of processes (0 or more), got {text!r}")


def _add_run_options(p, *, max_examples: int, time_default: float | None):
    p.add_argument("--device", default="cpu", choices=device_mod.DEVICES,
                   help="cpu runs Triton's interpreter with the race check; cuda runs compiled kernels")
    p.add_argument("--mode", choices=("compare", "race"), default=None,
                   help="race (CPU default) records every load and store; compare checks bytes only")
    p.add_argument("--reps", type=_positive(int), default=None,
                   help="repetitions per case (None: 1 on cpu, 100 on cuda)")
    p.add_argument("--max-examples", type=_positive(int), default=max_examples, help="examples per target at most")
    p.add_argument("--min-examples", type=_positive(int), default=10,
                   help="a target with fewer valid examples is inconclusive (exit 3), not clean")
    p.add_argument("--time", type=_positive(float), default=time_default, metavar="SECONDS",
                   help="time budget for the whole run, shrinking included; targets share it")
    p.add_argument("--shrink-time", type=_positive(float), default=60.0, metavar="SECONDS",
                   help="at most this long shrinking one finding (within --time; zoo: 2 by default, so "
                        "that a caught row leaves the rest of its share of --time to the rows after it)")
    p.add_argument("--seed", type=int, default=None, help="seed the draws (the example database still replays)")
    p.add_argument("--crashes-dir", type=Path, default=Path("crashes"), help="where crash files are written")
    p.add_argument("--database", default=DEFAULT_DATABASE,
                   help="Hypothesis example database: a directory, redis://HOST:PORT, or 'none'")
    p.add_argument("--profile", choices=("cpu", "gpu", "gpu-amp"), default=None,
                   help="case sizes (None: cpu on cpu, gpu on cuda, gpu-amp for smoke on cuda); gpu-amp also "
                        "draws warp delays that make GPU races show")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run targets in worker processes that a fault or hang cannot take down "
                        "(None: on for fuzz and on cuda, off for smoke and zoo on cpu)")
    p.add_argument("--gpus", default=None, metavar="all|N",
                   help="one worker per GPU (implies --isolate and --device cuda)")
    p.add_argument("--workers", type=_positive(int), default=1, help="CPU worker processes (with --isolate)")
    p.add_argument("--workers-per-gpu", type=_processes, default="auto", metavar="auto|K",
                   help="on cuda with --isolate, K workers fuzz each GPU at once, under a CUDA MPS daemon of "
                        "the session's own (auto: 1 core in 2 per GPU, at most 8; 1: one worker); fuzz runs "
                        "every target in every worker, zoo deals its rows out to the workers, slowest first")
    p.add_argument("--mps", action=argparse.BooleanOptionalAction, default=True,
                   help="with more than one worker per GPU, start a private CUDA MPS daemon so that their "
                        "kernels run side by side instead of time-slicing (--no-mps: time-slice)")
    p.add_argument("--precompile", type=_processes, default="auto", metavar="auto|N",
                   help="on cuda, N helper processes build each target's Triton kernels ahead of its turn "
                        "(auto: the spare cores, at most 8; 0: off)")
    p.add_argument("--hang-timeout", type=_positive(float), default=120.0, metavar="SECONDS",
                   help="a worker silent this long in one case is a hang finding")
    p.add_argument("--fresh", action="store_true", help="ignore a saved, interrupted session with these options")
    p.add_argument("--observe", type=Path, default=None, metavar="DIR",
                   help="write Hypothesis observability records (JSON lines, what Tyche reads) under DIR")
    p.add_argument("--cpu-witness", action=argparse.BooleanOptionalAction, default=None,
                   help="run a GPU finding again under the CPU race recorder in a child process, shrink it "
                        "there and confirm the smaller case on the GPU (None: on for fuzz, off for zoo and "
                        "smoke, whose short time shares it would eat)")


def _add_contract_options(p, *, with_defaults: bool) -> None:
    """Each contract's own options (what a user's kernel supports), e.g. a contract's --overlap, each
    naming every contract that declares it (``contracts.options``)."""
    from mambafuzz import contracts

    group = p.add_argument_group("contract options", "what your kernel supports, for the contracts each "
                                                     "names\n(a default draws everything)")
    for option in contracts.options():
        group.add_argument(option.flag, choices=option.choices,
                           default=option.default if with_defaults else None,
                           help=option.text() + ("" if with_defaults else " (None: the crash file's)"))


DEFAULT_DATABASE = ".mambafuzz/examples"  # --database (with --fleet, left as it is: the hub's corpus)
SMOKE_TIME = 45.0  # smoke's default --time: a bounded CI job whatever the number of targets
ZOO_SHRINK_TIME = 2.0  # zoo's default --shrink-time: a caught row gives the rest of its share to the rows after it


def build_parser() -> argparse.ArgumentParser:
    """The whole command line.  A command's own arguments are added when that command is parsed
    or its help shown (``_Parser.fill``): the contracts' options import numpy and the oracle,
    which ``mambafuzz --help`` and a usage error do without."""
    parser = _Parser(prog="mambafuzz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def fill_list(p):
        p.add_argument("--json", action="store_true")

    def fill_fuzz(p):
        from mambafuzz import contracts

        p.add_argument("--target", action="append", required=True,
                       help="name, glob, or module:function (with --contract); repeatable")
        p.add_argument("--contract", metavar="CONTRACT",
                       help=f"the contract of a module:function target: {', '.join(contracts.names())}, or one "
                            "the target's module registers (mambafuzz.contracts.register)")
        _add_contract_options(p, with_defaults=True)
        _add_run_options(p, max_examples=1000, time_default=None)
        from mambafuzz.fleet.command import add_fuzz_arguments
        add_fuzz_arguments(p)

    def fill_smoke(p):
        _add_run_options(p, max_examples=60, time_default=SMOKE_TIME)

    def fill_zoo(p):
        p.add_argument("--target", action="append", default=None, help="only these zoo targets (names or globs)")
        _add_run_options(p, max_examples=200, time_default=None)
        # a zoo row is there to be caught, not handed over: its shrink is short (--shrink-time)
        p.set_defaults(crashes_dir=Path(".mambafuzz/zoo-crashes"), shrink_time=ZOO_SHRINK_TIME)

    def fill_replay(p):
        from mambafuzz import contracts

        p.add_argument("paths", nargs="*", type=Path, default=[Path("crashes")])
        p.add_argument("--against", default=None,
                       help="run this target instead of the one recorded: a name, or module:function "
                            "(contract and overlap from each crash file)")
        p.add_argument("--contract", default=None, metavar="CONTRACT",
                       help=f"with --against module:function: its contract, {', '.join(contracts.names())} "
                            "(None: the crash file's)")
        _add_contract_options(p, with_defaults=False)
        p.add_argument("--device", default="cpu", choices=device_mod.DEVICES)
        p.add_argument("--mode", choices=("compare", "race"), default=None)
        p.add_argument("--reps", type=_positive(int), default=None)
        p.add_argument("--timeout", type=_positive(float), default=120.0, metavar="SECONDS",
                       help="a replayed crash or hang finding runs in a child process stopped after this long")
        p.add_argument("--json", action="store_true")

    def fill_report(p):
        p.add_argument("path", type=Path, help="a saved --json report (fuzz, smoke, zoo, replay), a session's "
                                               "state file or folder (.mambafuzz/sessions), a crash file or folder")
        p.add_argument("-o", "--output", type=Path, default=Path("report.html"), help="the page to write")

    sub.add_parser("list", help="list targets", fill=fill_list)
    sub.add_parser("fuzz", help="fuzz chosen targets (long sessions on a GPU box)", fill=fill_fuzz)
    sub.add_parser("smoke", help=f"bounded CI run over the correct targets (CPU by default, {SMOKE_TIME:g} s)",
                   fill=fill_smoke)
    sub.add_parser("zoo", help="fuzz every bug-zoo variant; fails if any escapes", fill=fill_zoo)
    sub.add_parser("replay", help="re-run saved crash files", fill=fill_replay)
    sub.add_parser("report", help="one static HTML page from a --json report, a session or crash files",
                   fill=fill_report)

    def fill_collect(p):
        from mambafuzz.fleet.command import add_collect_arguments
        add_collect_arguments(p)

    sub.add_parser("collect", help="a --fleet campaign's confirmed findings as crash files, and its summary",
                   fill=fill_collect)
    sub.add_parser("selfcheck", help="check the oracle against hand-worked examples")
    return parser


def _fuzz_options(args, device: str):
    from mambafuzz import strategies

    from mambafuzz import contracts
    from mambafuzz.search.fuzz import FuzzOptions, check_database, check_redis

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


def _print_coverage(reports) -> None:
    """Per target, how many examples drew each feature's buckets; a warning (for a target with no finding)
    about the buckets its contract draws that this run never did.  Lines fit 80 columns."""
    from mambafuzz.search.features import summary_lines

    for r in reports:
        for line in summary_lines(r.target, r.tally, warn=r.finding is None, options=r.options):
            print(line)


def short_share_lines(reports, width: int = 80) -> list[str]:
    """A NOTE (lines within ``width``) naming the targets that --time stopped, with no finding,
    after fewer than twice the examples a verdict needs: too short a share to trust much, and
    the cure (a longer --time) is the user's to choose."""
    short = [r for r in reports if r.finding is None and r.stop == "time" and r.examples < 2 * r.min_examples]
    if not short:
        return []
    names = ", ".join(f"{r.target} ({r.examples})" for r in short)
    text = (f"NOTE --time stopped {len(short)} target(s) with no finding after few examples: {names}. "
            f"A share that short says little; a longer --time gives every target more.")
    return textwrap.wrap(text, width=width, subsequent_indent="      ", break_on_hyphens=False)


def _check_writable(folder: Path, what: str | None = None) -> None:
    """Make `folder` and write a probe in it now; UsageError (`what`: its message) when that fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".mambafuzz-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{what or f'crashes folder {folder} is not writable'}: {exc.strerror or exc}") from None


_STYLES = {"finding": "red", "clean": "green", "inconclusive": "yellow", "interrupted": "yellow"}


def _report_table(reports, title: str):
    """Counts only, so it fits 80 columns; details follow as plain lines (``_details``)."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("target", "status", "examples", "reps", "failed", "time"):
        table.add_column(col, overflow="fold", justify="left" if col in ("target", "status") else "right")
    for r in reports:
        table.add_row(r.target, f"[{_STYLES.get(r.status, 'yellow')}]{r.status}[/]", str(r.examples), str(r.reps),
                      _failed_cell(r), f"{r.seconds:.1f}s")
    return table


def _failed_cell(r) -> str:
    """Failing repetitions; a recorded hazard (race, oob) needs no wrong byte and is no rate: its kind."""
    if r.finding is None or not r.finding.deterministic:
        return str(r.failed_reps)
    return r.finding.verdict.kind


def _details(reports, device: str) -> list[str]:
    """Plain lines (never wrapped by us): each finding with its case, file and replay command; why each
    inconclusive target is so."""
    from mambafuzz.findings import replay_command

    lines = []
    for r in reports:
        f = r.finding
        if f is not None:
            kind = f.verdict.kind + (", deterministic" if f.deterministic else "")
            lines.append(f"FINDING {r.target} ({kind}): {f.verdict.summary()}")
            lines.append(f"  case: {f.case.describe()}")
            lines.append(f"  {f.shrink_line()}")
            lines += [f"  {line}" for line in f.gpu_lines()]
            if f.path:
                lines.append(f"  saved: {f.path}{'' if r.written else ' (known already)'}")
                lines.append(f"  replay: {replay_command(f.path, f)}")
        elif r.status in ("inconclusive", "interrupted") and r.why:
            lines.append(f"{r.status.upper()} {r.target}: {r.why}")
        for kernel, why in r.uninstrumented.items():
            lines.append(f"NOTE {r.target}: kernel {kernel} ran without warp delays: {why}")
    return lines


REPORT_SCHEMA = 1  # the JSON reports' shape (README "JSON reports"); bump on an incompatible change


def _report_json(command: str, device: str, mode: str | None, interrupted: bool, code: int, **body) -> str:
    """One JSON document for fuzz, smoke, zoo and replay: the same envelope, then "targets" or "files"."""
    return json.dumps({"schema": REPORT_SCHEMA, "command": command, "device": device, "mode": mode,
                       "interrupted": interrupted, "exit_code": code, **body}, indent=2)


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


class _View:
    """A live table on a terminal; in a pipe (a CI log) one plain line per finished target, on stderr."""

    def __init__(self, title: str, quiet: bool):
        self.title = title
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True, quiet=quiet)
        self.live = None
        if self.console.is_terminal and not quiet:
            self.live = Live(_report_table([], title), console=self.console, refresh_per_second=4)
        self.said: set[str] = set()
        self.quiet = quiet

    def __enter__(self):
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)
            self.console.print()  # the table ends with a newline, whatever follows
        return False

    def update(self, reports) -> None:
        if self.live is not None:
            self.live.update(_report_table(reports, self.title))
            return
        for r in reports:
            if r.finished and r.target not in self.said and not self.quiet:
                self.said.add(r.target)
                print(f"{r.target}: {r.status}, {r.examples} examples, {r.seconds:.1f}s", file=sys.stderr,
                      flush=True)


def _run_targets(targets, opts, *, json_out: bool, title: str, args, device: str, isolate: bool,
                 auto_per_gpu: bool = True, turns=None, costs=None):
    """Run the targets under a view; Ctrl-C / SIGTERM stop cleanly, keeping what was found."""
    from mambafuzz.run import runner

    from mambafuzz.run import precompile
    from mambafuzz.run.clock import Deadline

    deadline = Deadline(args.time)  # --time: the run's one clock, started when fuzzing can

    gpus = _gpu_list(args.gpus, device)
    per_gpu = 1
    if device == "cuda" and (isolate or args.gpus):
        from mambafuzz.run.mps import default_workers_per_gpu
        if args.workers_per_gpu != "auto":
            per_gpu = args.workers_per_gpu
        elif auto_per_gpu:
            per_gpu = default_workers_per_gpu(len(gpus) if gpus else 1)
    helpers = args.precompile
    if helpers == "auto":
        helpers = precompile.default_processes(device, (len(gpus) if gpus else 1) * per_gpu)
    with _View(title, quiet=json_out) as view:
        if isolate or args.gpus:
            return runner.run_isolated(
                targets, opts, deadline=deadline, workers=args.workers, gpus=gpus, workers_per_gpu=per_gpu,
                mps=args.mps,
                hang_timeout=args.hang_timeout, fresh=args.fresh, on_update=view.update,
                on_resume=lambda done: err.print(f"resuming a saved session: {len(done)} target(s) already done "
                                                 f"({', '.join(done)}); --fresh starts over", highlight=False),
                precompile_processes=helpers, turns=turns, costs=costs)
        return runner.run_in_process(targets, opts, deadline=deadline, on_update=view.update,
                                     precompile_processes=helpers, turns=turns)


def _print_reports(reports, title: str, device: str) -> None:
    out.print(_report_table(reports, title))
    for line in _details(reports, device):
        print(line, flush=True)


def cmd_list(args) -> int:
    from mambafuzz.kernels import registry

    targets = registry.all_targets()
    if args.json:
        _emit(json.dumps([{"name": t.name, "contract": t.contract, "kind": t.kind, "overlap": t.overlap,
                           "bug": t.bug, "devices": list(t.devices), "description": t.description}
                          for t in targets], indent=2))
        return EXIT_CLEAN
    from rich.table import Table

    table = Table(title="mambafuzz targets")
    for col in ("name", "contract", "kind", "overlap", "devices"):
        table.add_column(col, no_wrap=True, overflow="fold")
    for t in targets:
        table.add_row(t.name, t.contract, t.kind, t.overlap, ", ".join(t.devices))
    out.print(table)
    for line in description_lines(targets):  # prose as plain lines: a table column of it is unreadable
        print(line)
    for line in option_lines():
        print(line)
    return EXIT_CLEAN


def option_lines(width: int = 80) -> list[str]:
    """The contract options (what a user's kernel supports), each naming the contracts it applies to,
    wrapped to `width` between words."""
    from mambafuzz import contracts

    lines = ["", "contract options (fuzz --flag VALUE; mambafuzz.check(fn, contract, name=VALUE)):"]
    for o in contracts.options():
        default = f" (default {o.default})" if o.default is not None else ""
        text = f"{o.flag} {'|'.join(map(str, o.choices))}{default}: {o.text()}"
        lines += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="    ",
                               break_long_words=False, break_on_hyphens=False)
    return lines


def description_lines(targets, width: int = 80) -> list[str]:
    """Each target's name, its zoo bug kind, its description: wrapped to `width` between words."""
    lines = []
    for t in targets:
        text = f"{t.name}{f' [{t.bug}]' if t.bug else ''}: {t.description}"
        lines += textwrap.wrap(text, width=width, subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False)
    return lines


def _check_signatures(targets) -> None:
    from mambafuzz.judge.signature import check

    for t in targets:
        check(t.fn, t.contract, t.name)


def cmd_fuzz(args, *, smoke: bool = False) -> int:
    device = device_mod.select(args.device)
    from mambafuzz.kernels import registry
    from mambafuzz.cli.targets import resolve

    if smoke:  # the quick torch paths first: the time they leave of --time goes to the kernels after them
        targets = sorted((t for t in registry.all_targets() if t.kind in ("correct", "torch") and device in t.devices),
                         key=lambda t: t.kind != "torch")
    else:
        targets = resolve(args.target, contract=args.contract, overlap=args.overlap)
    _check_signatures(targets)
    opts = _fuzz_options(args, device)
    fleet = None
    if getattr(args, "fleet", None):  # one worker of a campaign (mambafuzz/fleet)
        from mambafuzz.fleet import command as fleet_command
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
    code = outcome.exit_code(statuses, interrupted)
    interrupt.hold()  # the verdict is decided: no signal changes it now
    if args.json:
        _emit(_report_json(args.command, device, opts.mode, interrupted, code,
                           targets=[r.to_json() for r in reports], **({"fleet": campaign} if fleet else {})))
        return code
    _print_reports(reports, title, device)
    _print_coverage(reports)
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


def _zoo_escape_lines(report, kinds: tuple[str, ...], device: str, width: int = 80) -> list[str]:
    """Why a zoo row with a finding still escaped: its kind is not how the bug shows on `device`."""
    verdict = report.finding.verdict
    why = (verdict.summary().splitlines() or [""])[0]
    text = (f"ESCAPED {report.target}: a finding of kind {verdict.kind}, but on {device} this bug "
            f"is caught as {' or '.join(kinds)} ({why})")
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


def cmd_zoo(args) -> int:
    """Every zoo variant must be caught, by a kind its row declares: exit 1 if one escapes (ran clean,
    or its finding is of another kind), 3 if one could not be checked."""
    device = device_mod.select(args.device)
    from mambafuzz.kernels import registry
    from mambafuzz.cli.targets import resolve

    from mambafuzz.kernels import zoo

    targets = resolve(args.target) if args.target else [t for t in registry.zoo_targets() if device in t.devices]
    opts = _fuzz_options(args, device)
    title = f"mambafuzz zoo ({device}, {opts.mode})"
    # the slowest rows first; on cuda in workers (K a GPU under MPS), the rows dealt out to them by cost
    isolate = args.isolate if args.isolate is not None else device == "cuda"
    reports = _run_targets(zoo.order(targets, device), opts, json_out=args.json, title=title, args=args,
                           device=device, isolate=isolate,
                           costs={t.name: zoo.cost(t.zoo_id, device) for t in targets if t.zoo_id})
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
    all_caught = all(row["caught"] for row in rows) and len(rows) == len(targets)
    code = outcome.zoo_exit_code(bool(escaped), all_caught, interrupted)
    if args.json:
        _emit(_report_json("zoo", device, opts.mode, interrupted, code, targets=rows))
        return code
    from rich.table import Table

    table = Table(title="bug zoo")
    for col in ("variant", "caught", "by", "1st failure"):
        table.add_column(col, overflow="fold")
    for r, row in zip(reports, rows):
        f = r.finding
        caught = ("[green]caught[/]" if row["caught"] else "[red]ESCAPED[/]" if r.target in escaped
                  else f"[yellow]{r.status}[/]")
        by = f.verdict.kind if f else ""
        if f and not row["caught"]:
            by += f", not {' or '.join(expected[r.target])}"
        first = f"{round(f.seconds_to_first, 2)}s, ex {f.examples_to_first}" if f else ""
        table.add_row(r.target, caught, by, first)
    out.print(table)
    for r, row in zip(reports, rows):
        if r.finding and not row["caught"]:
            for line in _zoo_escape_lines(r, expected[r.target], device):
                print(line)
        elif r.finding:
            text = (f"{r.target}: {r.finding.case.describe()}"
                    + (f" (may not be minimal: {r.finding.not_minimal})" if r.finding.not_minimal else ""))
            for line in textwrap.wrap(text, width=80, subsequent_indent="  ", break_on_hyphens=False):
                print(line)
        elif r.why:
            print(f"{r.target}: {r.status}: {r.why}")
    _print_coverage([r for r in reports if r.finding is None])  # what an escaped variant was tried on
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
    from mambafuzz import findings
    from mambafuzz.findings.replay import COULD_NOT_RUN, Against, ReplayRow, exit_code, replay

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
            from mambafuzz.cli.targets import load_user_fn, resolve_one
            if ":" in args.against:
                load_user_fn(args.against)  # a missing module is one error, not one per file
                against = Against(args.against, args.contract, args.overlap)
            else:
                against = Against(resolve_one(args.against, contract="").name)
    except UsageError as exc:
        if args.json:  # still JSON: every file found could not run, for this one reason
            _emit(_report_json("replay", args.device, args.mode, False, EXIT_USAGE, error=str(exc),
                               files=[ReplayRow(f, args.against or "?", COULD_NOT_RUN, reason=str(exc)).to_json()
                                      for f in files]))
        raise
    rows = replay(files, device=device, reps=args.reps, mode=args.mode, against=against, timeout=args.timeout)
    for r in rows:
        if r.status == COULD_NOT_RUN:
            reason = r.reason if str(r.path) in r.reason else f"{r.path}: {r.reason}"
            err.print(f"mambafuzz: error: {reason}", highlight=False)
    code = exit_code(rows)
    interrupt.hold()  # the verdict is decided: no signal changes it now
    if args.json:
        mode = args.mode or (None if device == "cpu" else "compare")  # None: each file's recorded mode
        _emit(_report_json("replay", device, mode, interrupt.requested(), code, files=[r.to_json() for r in rows]))
    else:
        out.print(_replay_table(rows, device))
        for line in replay_lines(rows):
            print(line)
    return code


def _replay_table(rows, device: str):
    """Short cells only, kept whole (a target name folds only when it alone is wider than the
    table); each file's path and detail follow as plain lines (``replay_lines``)."""
    from rich.table import Table

    table = Table(title=f"replay ({device})")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("target", no_wrap=True, overflow="fold")
    for col in ("status", "k/N"):
        table.add_column(col, no_wrap=True)
    for i, r in enumerate(rows, 1):
        style = {"still failing": "red", "fixed": "green"}.get(r.status, "yellow")
        table.add_row(str(i), r.target, f"[{style}]{r.status}[/]", r.rate())
    return table


def replay_lines(rows, width: int = 80) -> list[str]:
    """Per file, numbered as in the table: its path whole on a line of its own, then its detail
    wrapped to `width` between words (a path or source line in it stays whole)."""
    lines = []
    for i, r in enumerate(rows, 1):
        lines.append(f"{i} {r.path}")
        for text in (r.detail(), r.divergence()):     # the divergence is a fact on a line of its own
            if text:
                lines += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="  ",
                                       break_long_words=False, break_on_hyphens=False)
    return lines


def cmd_report(args) -> int:
    """Write the page; a bad input or output is one line and exit 2."""
    from mambafuzz.report import build

    report = build(args.path, args.output)
    found = sum(t.finding is not None for t in report.targets)
    print(f"wrote {args.output} ({len(report.targets) or len(report.files)} row(s), {found} finding(s))")
    return EXIT_CLEAN


def cmd_collect(args) -> int:
    """A campaign's confirmed buckets as crash files and its summary (``fleet.collect``)."""
    from mambafuzz.fleet.collect import collect, lines

    got = collect(args.hub, args.output, campaign=args.campaign, from_dirs=args.from_dirs,
                  include_unconfirmed=args.unconfirmed)
    if args.json:
        _emit(json.dumps({**got.summary, "sent": got.sent, "folder": str(got.folder)}, indent=2))
        return got.code
    if got.sent:
        print(f"sent {got.sent} waiting finding(s) from {', '.join(map(str, args.from_dirs))}")
    for line in lines(got.summary, got.folder):
        print(line)
    print(f"wrote {len(got.files)} crash file(s) and {got.folder / 'campaign.txt'}; exit {got.code}")
    return got.code


def cmd_selfcheck(args) -> int:
    from mambafuzz.oracle.selfcheck import run_selfcheck

    failures = run_selfcheck()
    for name, ok, detail in failures:
        out.print(f"{'[green]ok[/]' if ok else '[red]FAIL[/]'} {name}{': ' + detail if detail else ''}")
    return EXIT_CLEAN if all(ok for _, ok, _ in failures) else EXIT_FINDINGS


COMMANDS = {"list": cmd_list, "fuzz": cmd_fuzz, "smoke": lambda a: cmd_fuzz(a, smoke=True), "zoo": cmd_zoo,
            "replay": cmd_replay, "selfcheck": cmd_selfcheck, "report": cmd_report, "collect": cmd_collect}


_DOCUMENT = [None]  # where --json's one document goes: the process's stdout as it was at the start
_EMITTED = [False]  # whether this run's document is out (main adds one for an error only when not)


def _emit(text: str) -> None:
    """Write the --json document (or a listing) to the real stdout, whatever the run printed."""
    stream = _DOCUMENT[0] or sys.stdout
    stream.write(text + "\n")
    stream.flush()
    _EMITTED[0] = True


def _error_json(command: str | None, device: str | None, message: str, code: int) -> str:
    """The one document of a --json run that failed before it had one: the error and the exit code."""
    body = {"files": []} if command == "replay" else {"targets": []}
    return _report_json(command, device, None, code == EXIT_INTERRUPTED, code, error=message, **body)


@contextlib.contextmanager
def _stdout_to_stderr(active: bool):
    """With --json, everything else a run prints (a kernel's print, Triton's compiler dumps, a C
    library writing to fd 1) goes to stderr, so stdout is one JSON document."""
    if not active:
        yield
        return
    old = sys.stdout
    old.flush()
    try:
        on_fd1 = old.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a captured or replaced stream (tests, notebooks)
        on_fd1 = False
    saved = os.dup(1) if on_fd1 else None
    document = os.fdopen(saved, "w", closefd=True) if on_fd1 else old
    if on_fd1:
        os.dup2(2, 1)
    sys.stdout, _DOCUMENT[0] = sys.stderr, document
    try:
        yield
    finally:
        sys.stdout.flush()
        if on_fd1:
            os.dup2(saved, 1)
        sys.stdout, _DOCUMENT[0] = old, None
        if on_fd1:
            document.close()


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code.  With --json stdout is one document, an error's too.

    Run as the program (`argv` None), the exit code stands once the verdict is
    out: SIGINT and SIGTERM are ignored from then until the process exits
    (``interrupt.hold``).  Called with `argv` (tests, scripts), the caller's
    signal handlers are back when it returns.
    """
    program = argv is None
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    options = argv[:argv.index("--")] if "--" in argv else argv
    json_out = "--json" in options
    command = options[0] if options and options[0] in COMMANDS else None
    _EMITTED[0] = False
    interrupt.reset()
    interrupt.install()  # SIGINT/SIGTERM: finish the current example, report, keep what was found
    args = message = None
    try:
        args = build_parser().parse_args(argv)
        with _stdout_to_stderr(json_out):
            code = COMMANDS[args.command](args)
    except BadUsage as exc:  # argparse's: printed already
        code, message = EXIT_USAGE, exc.message
    except UsageError as exc:
        err.print(f"mambafuzz: error: {exc}", highlight=False, markup=False)  # "mambafuzz[report]" is no tag
        code, message = EXIT_USAGE, str(exc)
    except KeyboardInterrupt:  # a second signal: stop now
        err.print("mambafuzz: interrupted", highlight=False)
        code, message = EXIT_INTERRUPTED, "interrupted: a second signal stopped the run at once"
    except Exception as exc:  # noqa: BLE001 - a bug of mambafuzz: never exit 1, which means findings
        if os.environ.get("MAMBAFUZZ_DEBUG"):
            import traceback
            traceback.print_exc()
        message = f"internal error in mambafuzz: {type(exc).__name__}: {exc} (MAMBAFUZZ_DEBUG=1 shows where)"
        err.print(f"mambafuzz: {message}", highlight=False, markup=False)
        code = EXIT_INCONCLUSIVE
    finally:
        if program:
            interrupt.hold()
        else:
            interrupt.uninstall()
    if json_out and message is not None and not _EMITTED[0]:
        _emit(_error_json(command, getattr(args, "device", None), message, code))
    return code


if __name__ == "__main__":
    sys.exit(main())

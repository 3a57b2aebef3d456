"""The command line's grammar: every command, its arguments, their defaults and help (``build_parser``).

A command's own arguments are added when that command is parsed or its help shown, so ``--help`` and a
usage error load neither numpy nor the contracts.  argparse's own errors are one line and exit 2
(``BadUsage``, printed by ``output.err``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from mambafuzz.cli.output import err
from mambafuzz.control import device as device_mod
from mambafuzz.control import exits
from mambafuzz.control.exits import EXIT_USAGE

DESCRIPTION = "`mambafuzz` command line: list, fuzz, smoke, zoo, replay, report, collect, selfcheck."  # --help's first line


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every default and keeps the exit-code table as written."""


class BadUsage(SystemExit):
    """argparse's own error, already printed as one line: exit 2, with the message (for --json)."""

    def __init__(self, message: str):
        super().__init__(EXIT_USAGE)
        self.message = message


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, fill=None, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("epilog", exits.table_text())
        super().__init__(*args, **kwargs)
        self.fill = fill  # adds this command's arguments on first use (build_parser)

    def filled(self) -> "Parser":
        if self.fill is not None:
            fill, self.fill = self.fill, None
            fill(self)
        return self

    def parse_known_args(self, args=None, namespace=None):
        return super(Parser, self.filled()).parse_known_args(args, namespace)

    def format_help(self):
        return super(Parser, self.filled()).format_help()

    def format_usage(self):
        return super(Parser, self.filled()).format_usage()

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
                        "the session's own (auto: for fuzz 1 core in 2 per GPU, at most 8; for zoo as many as leave each "
                        "worker's memory share room for the rows needing pools past 2 GiB, at most 4; 1: one "
                        "worker, zoo's default); fuzz runs every target in every worker, zoo deals its rows out to "
                        "the workers, slowest first")
    p.add_argument("--mps", action=argparse.BooleanOptionalAction, default=True,
                   help="with more than one worker per GPU, start a private CUDA MPS daemon so that their "
                        "kernels run side by side instead of time-slicing (--no-mps: time-slice)")
    p.add_argument("--precompile", type=_processes, default="auto", metavar="auto|N",
                   help="on cuda, N helper processes build each target's Triton kernels ahead of its turn "
                        "(auto: the spare cores, at most 8; 0: off)")
    p.add_argument("--hang-timeout", type=_positive(float), default=120.0, metavar="SECONDS",
                   help="a case in which no repetition finishes for this long is a hang finding")
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
    from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

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
    or its help shown (``Parser.fill``): the contracts' options import numpy and the oracle,
    which ``mambafuzz --help`` and a usage error do without."""
    parser = Parser(prog="mambafuzz", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def fill_list(p):
        p.add_argument("--json", action="store_true")

    def fill_fuzz(p):
        from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

        p.add_argument("--target", action="append", required=True,
                       help="name, glob, or module:function (with --contract); repeatable")
        p.add_argument("--contract", metavar="CONTRACT",
                       help=f"the contract of a module:function target: {', '.join(contracts.names())}, or one "
                            "the target's module registers (mambafuzz.contracts.register)")
        _add_contract_options(p, with_defaults=True)
        _add_run_options(p, max_examples=1000, time_default=None)
        from mambafuzz.fleet.command import add_fuzz_arguments  # deferred: the campaign's modules (redis) only with --fleet or collect
        add_fuzz_arguments(p)

    def fill_smoke(p):
        _add_run_options(p, max_examples=60, time_default=SMOKE_TIME)
        p.add_argument("--coverage", action="store_true",
                       help="print each target's coverage counts (without it: one summary line)")

    def fill_zoo(p):
        p.add_argument("--target", action="append", default=None, help="only these zoo targets (names or globs)")
        _add_run_options(p, max_examples=200, time_default=None)
        # a zoo row is there to be caught, not handed over: its shrink is short (--shrink-time)
        # one worker a GPU unless asked: the dealt zoo (auto, K) is built but not yet measured on a GPU
        p.set_defaults(crashes_dir=Path(".mambafuzz/zoo-crashes"), shrink_time=ZOO_SHRINK_TIME, workers_per_gpu=1)

    def fill_replay(p):
        from mambafuzz import contracts  # deferred: the contracts import numpy and the oracles: --help and the parser do without

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
        from mambafuzz.fleet.command import add_collect_arguments  # deferred: the campaign's modules (redis) only with --fleet or collect
        add_collect_arguments(p)

    sub.add_parser("collect", help="a --fleet campaign's confirmed findings as crash files, and its summary",
                   fill=fill_collect)
    sub.add_parser("selfcheck", help="check the oracle against hand-worked examples")
    return parser

"""`mambafuzz` command line: list, fuzz, smoke, zoo, replay, report, collect, selfcheck.

The CLI parses (``parser.py``), runs a command (``commands.py``: running targets is ``run/``'s job)
and prints (``output.py``).  Output is made for CI logs too: tables fit 80 columns, and every command
and path a user may copy is printed on a plain line of its own, never wrapped.  ``main`` is the one
entry: it maps whatever ended the command to its exit code (``control.exits.exit_code``).
"""
from __future__ import annotations

import os
import sys
import traceback

from mambafuzz.cli.commands import COMMANDS
from mambafuzz.cli.output import EMITTED, emit, err, error_json, option_lines, replay_lines, short_share_lines, stdout_to_stderr
from mambafuzz.cli.parser import SMOKE_TIME, ZOO_SHRINK_TIME, BadUsage, build_parser
from mambafuzz.control import exits
from mambafuzz.control import interrupt
from mambafuzz.errors import UsageError

# what scripts and tests import from mambafuzz.cli, as before the split
__all__ = ["COMMANDS", "SMOKE_TIME", "ZOO_SHRINK_TIME", "build_parser", "main", "option_lines", "replay_lines",
           "short_share_lines"]


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
    EMITTED[0] = False
    interrupt.reset()
    interrupt.install()  # SIGINT/SIGTERM: finish the current example, report, keep what was found
    args = message = None
    try:
        args = build_parser().parse_args(argv)
        with stdout_to_stderr(json_out):
            code = COMMANDS[args.command](args)
    except BadUsage as exc:  # argparse's: printed already
        code, message = exits.exit_code(error=exc), exc.message
    except UsageError as exc:
        err.print(f"mambafuzz: error: {exc}", highlight=False, markup=False)  # "mambafuzz[report]" is no tag
        code, message = exits.exit_code(error=exc), str(exc)
    except KeyboardInterrupt as exc:  # a second signal: stop now
        err.print("mambafuzz: interrupted", highlight=False)
        code, message = exits.exit_code(error=exc), "interrupted: a second signal stopped the run at once"
    except Exception as exc:  # noqa: BLE001 - a bug of mambafuzz: never exit 1, which means findings
        if os.environ.get("MAMBAFUZZ_DEBUG"):
            traceback.print_exc()
        message = f"internal error in mambafuzz: {type(exc).__name__}: {exc} (MAMBAFUZZ_DEBUG=1 shows where)"
        err.print(f"mambafuzz: {message}", highlight=False, markup=False)
        code = exits.exit_code(error=exc)
    finally:
        if program:
            interrupt.hold()
        else:
            interrupt.uninstall()
    if json_out and message is not None and not EMITTED[0]:
        emit(error_json(command, getattr(args, "device", None), message, code))
    return code


if __name__ == "__main__":
    sys.exit(main())

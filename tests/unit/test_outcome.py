"""Exit codes: one function in control/exits.py that every command and worker goes through, and no exit status written as a number
anywhere else in mambafuzz/ (an AST walk, so comments, strings and unrelated returns never trip it)."""
import ast
from pathlib import Path

import pytest

from mambafuzz.control import exits
from mambafuzz.control.exits import EXIT_CLEAN, EXIT_FINDINGS, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_USAGE
from mambafuzz.control.interrupt import StopRequested
from mambafuzz.errors import UsageError
from mambafuzz.findings.replay import COULD_NOT_RUN, FIXED, INCONCLUSIVE, STILL_FAILING, ReplayRow

PACKAGE = Path(exits.__file__).resolve().parents[1]


@pytest.mark.parametrize("statuses, interrupted, code", [
    (["clean", "clean"], False, EXIT_CLEAN),
    (["clean", "finding", "inconclusive"], True, EXIT_FINDINGS),   # a finding wins over everything
    (["clean", "interrupted", "inconclusive"], False, EXIT_INTERRUPTED),
    (["clean"], True, EXIT_INTERRUPTED),
    (["clean", "inconclusive"], False, EXIT_INCONCLUSIVE),
    ([], False, EXIT_INCONCLUSIVE),                                # nothing checked is not clean
])
def test_fuzz_and_smoke(statuses, interrupted, code):
    assert exits.exit_code(statuses, interrupted) == code


@pytest.mark.parametrize("words, code", [
    (["caught", "escaped", "interrupted"], EXIT_FINDINGS),   # an escape wins, interrupted or not
    (["caught", "inconclusive"], EXIT_INCONCLUSIVE),
    (["caught", "interrupted"], EXIT_INTERRUPTED),
    (["caught", "caught"], EXIT_CLEAN),                     # every variant caught (before a signal too): clean
])
def test_zoo_rows(words, code):
    assert exits.exit_code(words) == code


@pytest.mark.parametrize("statuses, code", [
    ([STILL_FAILING, COULD_NOT_RUN, INCONCLUSIVE, FIXED], EXIT_FINDINGS),
    ([COULD_NOT_RUN, INCONCLUSIVE, FIXED], EXIT_USAGE),
    ([INCONCLUSIVE, FIXED], EXIT_INCONCLUSIVE),
    ([FIXED, FIXED], EXIT_CLEAN),
])
def test_replay(statuses, code):
    rows = [ReplayRow(Path(f"crashes/{i}.json"), "t", s) for i, s in enumerate(statuses)]
    assert exits.exit_code([r.status for r in rows]) == code


@pytest.mark.parametrize("error, code", [
    (UsageError("bad"), EXIT_USAGE),
    (SystemExit(EXIT_USAGE), EXIT_USAGE),        # argparse's one-line error
    (KeyboardInterrupt(), EXIT_INTERRUPTED),
    (StopRequested(), EXIT_INTERRUPTED),
    (RuntimeError("ours"), EXIT_INCONCLUSIVE),   # a bug of mambafuzz is never 1
])
def test_the_exception_that_ended_a_command(error, code):
    assert exits.exit_code(error=error) == code


def test_worker_words_are_never_a_commands_code():
    assert exits.exit_code(["no device"]) == exits.WORKER_NO_DEVICE
    assert exits.exit_code(["done", "context lost"]) == exits.WORKER_CONTEXT_LOST
    assert exits.exit_code(["done"]) == exits.WORKER_DONE


def test_every_code_means_one_thing_and_the_help_table_lists_each_once():
    codes = [code for code, _ in exits.TABLE]
    assert sorted(codes) == sorted({EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED})
    workers = {exits.WORKER_DONE, exits.WORKER_CONTEXT_LOST}
    assert len(workers) == 2 and exits.WORKER_CONTEXT_LOST not in codes  # never a command's exit code
    text = exits.table_text()
    assert all(f"  {code:<4} " in text for code in codes) and max(map(len, text.splitlines())) <= 80


# ------------------------------------------------------------------ no literal exit status outside control/exits.py
EXITS = {"exit", "_exit", "SystemExit", "quit"}       # sys.exit, os._exit, raise SystemExit, parser.exit
STATUS_ATTRS = {"exitcode", "returncode"}            # a child process's status, compared
ENTRY = ("main", "cmd_")                             # functions whose int return is an exit status (and
#                                                      any named *exit_code*)
CODE_NAMES = {"code", "exit_code", "rc"}             # a variable, keyword or JSON key holding one
KNOWN: set = set()  # (file, function): a literal exit status not yet replaced (none left)


def _is_int(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _name(node) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _literal_status(node, function: str) -> str | None:
    """What `node` is if it writes an exit status as an int literal (inside `function`), else None."""
    if isinstance(node, ast.Call) and _name(node.func) in EXITS and any(map(_is_int, node.args)):
        return f"{_name(node.func)}(<int>)"
    if isinstance(node, ast.Return) and node.value is not None and _is_int(node.value) and (
            function.startswith(ENTRY) or "exit_code" in function):
        return "return <int> from a command"
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _is_int(node.value):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(_name(t) in CODE_NAMES for t in targets):
            return "code = <int>"
        if any(_name(t).isupper() and ("EXIT" in _name(t) or _name(t).startswith("WORKER_")) for t in targets):
            return "an exit code named outside control/exits.py"
    if isinstance(node, ast.keyword) and node.arg in CODE_NAMES and _is_int(node.value):
        return "code=<int>"
    if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value in CODE_NAMES and _is_int(v)
                                          for k, v in zip(node.keys, node.values)):
        return '{"exit_code": <int>}'
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(_name(side) in STATUS_ATTRS for side in sides) and any(map(_is_int, sides)):
            return "a process status compared with <int>"
    return None


def literal_exit_statuses(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(function, line, what) for each exit status written as an int literal in `tree`."""
    found = []

    def walk(node, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            what = _literal_status(child, function)
            if what is not None:
                found.append((function, getattr(child, "lineno", None) or child.value.lineno, what))
            walk(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)

    walk(tree, "")
    return found


def test_the_check_sees_each_way_an_exit_status_is_written():
    source = """
import os, sys
def cmd_fuzz(args):
    if args.x:
        return 2
    return code
def main():
    sys.exit(3)
def helper():
    return 1            # not a command: a count, a flag
EXIT_LOST = 17
def worker():
    os._exit(17)
    raise SystemExit(-1)
def parent(p):
    return p.exitcode != 0
def exit_code(rows):
    if rows:
        code = 2
        return 1
    emit(report(code=3), {"exit_code": 0})
"""
    assert [what for _, _, what in literal_exit_statuses(ast.parse(source))] == [
        "return <int> from a command", "exit(<int>)", "an exit code named outside control/exits.py", "_exit(<int>)",
        "SystemExit(<int>)",
        "a process status compared with <int>", "code = <int>", "return <int> from a command", "code=<int>",
        '{"exit_code": <int>}']


def test_no_exit_status_is_a_number_outside_control_exits_py():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "control/exits.py":
            continue
        for function, line, what in literal_exit_statuses(ast.parse(path.read_text(), str(path))):
            if (rel, function) not in KNOWN:
                bad.append(f"mambafuzz/{rel}:{line} in {function or '<module>'}: {what}")
    assert not bad, "exit statuses belong in control/exits.py:\n" + "\n".join(bad)


def _picked_by_name(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) where a named exit code is returned or exited with, bypassing ``exit_code``."""
    found = []
    for node in ast.walk(tree):
        value = node.value if isinstance(node, ast.Return) else None
        if isinstance(node, ast.Call) and _name(node.func) in EXITS and node.args:
            value = node.args[0]
        name = _name(value) if value is not None else ""
        if name.startswith(("EXIT_", "WORKER_")):
            found.append((node.lineno, name))
    return found


def test_every_command_and_worker_goes_through_exit_code():
    """A command returns, and a worker exits with, what ``exits.exit_code`` made of its words or its
    error: a named code returned or exited with directly is a second mapping."""
    assert _picked_by_name(ast.parse("def cmd_x():\n    return EXIT_CLEAN\ndef w():\n    os._exit(WORKER_DONE)\n"))
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel != "control/exits.py":
            bad += [f"mambafuzz/{rel}:{line}: {name}" for line, name in _picked_by_name(ast.parse(path.read_text()))]
    assert not bad, "exit codes picked outside control/exits.exit_code:\n" + "\n".join(bad)


def test_the_readme_table_lists_each_command_code_once():
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("### Verdicts and exit codes", 1)[1].split("\n### ", 1)[0]
    rows = [int(line.split("|")[1]) for line in section.splitlines() if line.startswith("| ") and
            line.split("|")[1].strip().isdigit()]
    assert sorted(rows) == sorted(code for code, _ in exits.TABLE)
    for word, code in exits.STATUS_CODES.items():  # the precedence the README states
        assert code in exits.SEVERITY, word
    assert [c for c in exits.SEVERITY if c in dict(exits.TABLE)] == [1, 2, 130, 3, 0]

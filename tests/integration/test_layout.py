"""The house: one import name, dependency rules, no folder that shadows a module, a small root, no
import circle (between modules, and between folders), no private name across modules, and contract
names only where contracts live.

The source checks parse the package with ``ast`` (nothing is imported): an import anywhere in a
module, inside a function too, is an edge to the module it names (``from p import name`` names
``p.name`` when that is a module, else ``p``); a package's ``__init__`` is a module of its own.
"""
import ast
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mambafuzz"
MAX_ROOT_MODULES = 8
CONTRACT_ROOMS = ("cases", "contracts", "oracle", "strategies", "kernels")  # where a contract's name may appear


def _run(code: str, **env_extra) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", **env_extra}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imports(name: str, modules: dict[str, Path]):
    """The module's tree and its imports of mambafuzz: (line, module imported, the name taken from it
    or None when a module is taken, the local name bound, the module that name is)."""
    path = modules[name]
    tree = ast.parse(path.read_text(), str(path))
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None, a.asname or "mambafuzz", a.name if a.asname else "mambafuzz")
                      for a in node.names if a.name.partition(".")[0] == "mambafuzz"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[:len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.partition(".")[0] != "mambafuzz":
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                is_module = sub in modules or (PACKAGE.parent / sub.replace(".", "/")).is_dir()
                found.append((node.lineno, sub, None, a.asname or a.name, sub) if is_module
                             else (node.lineno, source, a.name, a.asname or a.name, None))
    return tree, found


def _graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line}, over every import (in functions too)."""
    modules = _modules()
    graph = {}
    for name in modules:
        _, found = _imports(name, modules)
        edges = graph[name] = {}
        for line, mod, *_ in found:
            if mod in modules and mod != name:
                edges.setdefault(mod, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan), as a closed path."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for group in groups:  # the shortest way from the group's first module back to it
        start = min(group)
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            nxt = [w for w in sorted(graph[path[-1]]) if w in group]
            if start in nxt:
                cycles.append(path + [start])
                break
            for w in nxt:
                if w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
    return cycles


def _private_uses() -> list[str]:
    """``from m import _x`` and ``m._x`` reaching into another mambafuzz module, as ``file:line: what``.

    A private module (``oracle/_checks.py``) may be imported by the modules of its own package."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        tree, found = _imports(name, modules)
        where = path.relative_to(ROOT)

        def outside(mod: str) -> str | None:
            """The first private part of module path `mod` that `name` is not inside of."""
            parts = mod.split(".")
            for i, part in enumerate(parts):
                if _private(part) and not name.startswith(".".join(parts[:i]) + "."):
                    return part
            return None

        bound = {}  # local name -> the mambafuzz module it is
        for line, mod, taken, local, module in found:
            if taken is not None and _private(taken) and mod != name:
                bad.append(f"{where}:{line}: from {mod} import {taken}")
            elif taken is None and outside(mod):
                bad.append(f"{where}:{line}: import of private module {mod}")
            if module is not None:
                bound[local] = module
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or id(node) in inner:  # the whole a.b.c once
                continue
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if not isinstance(base, ast.Name) or base.id not in bound:
                continue
            mod = bound[base.id]
            for attr in chain:
                sub = f"{mod}.{attr}"
                if sub in modules or (PACKAGE.parent / sub.replace(".", "/")).is_dir():
                    mod = sub
                    if outside(mod):
                        bad.append(f"{where}:{node.lineno}: {base.id}.{'.'.join(chain)} (private module {mod})")
                        break
                    continue
                if _private(attr) and mod != name:
                    bad.append(f"{where}:{node.lineno}: {mod}.{attr}")
                break
    return sorted(set(bad))


def test_the_package_root_holds_at_most_8_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    if len(root) > MAX_ROOT_MODULES:
        pytest.fail(f"mambafuzz/ holds {len(root)} modules (at most {MAX_ROOT_MODULES}): {', '.join(root)}; "
                    f"move one into the folder of its job", pytrace=False)


def test_no_import_circle_between_modules_of_the_package():
    graph = _graph()
    circles = [" -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(c, c[1:])) + f" -> {c[-1]}"
               for c in _cycles(graph)]
    if circles:
        pytest.fail("import circle(s) between modules of mambafuzz (line: where a module imports the next):\n" + "\n".join(circles), pytrace=False)


def _folder(module: str) -> str:
    """A module's room at the top: its folder under mambafuzz/ (``cli``, ``run``, ...); a root module
    is a room of its own (``api``, ``errors``; the package's ``__init__`` is ``mambafuzz``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _folder_graph(graph: dict[str, dict[str, int]]) -> tuple[dict[str, dict[str, int]], dict]:
    """folder -> {folder it imports: 1}, and (folder, folder) -> the module imports that make the arrow."""
    folders, why = {}, {}
    for module, edges in graph.items():
        a = _folder(module)
        folders.setdefault(a, {})
        for imported, line in edges.items():
            b = _folder(imported)
            folders.setdefault(b, {})
            if a != b:
                folders[a][b] = 1
                why.setdefault((a, b), []).append(f"{module} (line {line}) -> {imported}")
    return folders, why


# Circles between folders still to take apart, each with its plan; the test fails when one is gone too
# (then delete it here).  None left: keep it that way.
KNOWN_FOLDER_CIRCLES: set[frozenset] = set()


def test_no_import_circle_between_folders():
    """Every import counts, inside a function too: a folder imported only lazily is still a folder the
    importer needs, and a circle between folders is one job split across two places."""
    folders, why = _folder_graph(_graph())
    circles = _cycles(folders)
    found = {frozenset(c) for c in circles}
    text = []
    for c in circles:
        if frozenset(c) in KNOWN_FOLDER_CIRCLES:
            continue
        text.append(" -> ".join(c))
        for a, b in zip(c, c[1:]):
            text += [f"    {a} -> {b}: {edge}" for edge in why[(a, b)][:3]]
    gone = [" <-> ".join(sorted(k)) for k in KNOWN_FOLDER_CIRCLES if k not in found]
    if text or gone:
        pytest.fail(("import circle(s) between folders of mambafuzz (module (line) -> what it imports):\n"
                     + "\n".join(text) if text else "")
                    + (f"\nno longer a circle, delete it from KNOWN_FOLDER_CIRCLES: {', '.join(gone)}" if gone else ""),
                    pytrace=False)


def test_the_folder_circle_check_sees_an_import_inside_a_function():
    graph = {"mambafuzz.a.x": {"mambafuzz.b.y": 3}, "mambafuzz.b.y": {"mambafuzz.api": 7},
             "mambafuzz.api": {"mambafuzz.a.z": 9}, "mambafuzz.a.z": {}}
    folders, why = _folder_graph(graph)
    assert _cycles(folders) == [["a", "b", "api", "a"]] and why[("b", "api")] == ["mambafuzz.b.y (line 7) -> mambafuzz.api"]
    tree, found = _imports("mambafuzz.judge.engine", _modules())  # an import in a function is an edge too
    lazy = {n.lineno for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
            for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    assert lazy and lazy & {line for line, mod, *_ in found}


def _inner_imports(tree: ast.AST, lines: list[str]) -> list[tuple[int, str]]:
    """(line, text) of each import inside a function whose line gives no ``# deferred: <reason>``."""
    bad = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and "# deferred: " not in lines[node.lineno - 1]:
                    bad.add((node.lineno, lines[node.lineno - 1].strip()))
    return sorted(bad)


def test_an_import_inside_a_function_says_why_it_is_deferred():
    """An import belongs at the top of its module; inside a function only to defer a heavy dependency
    (torch, Triton, numpy through the contracts, Hypothesis) or an optional one (redis, plotly), or one
    whose import order matters (the kernels after the device is chosen), and its line says which."""
    probe = "def f():\n    import torch  # deferred: seconds\n    import json\n"
    assert _inner_imports(ast.parse(probe), probe.splitlines()) == [(3, "import json")]
    bad = []
    for name, path in _modules().items():
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)}:{line}: {code}" for line, code in _inner_imports(ast.parse(text), text.splitlines())]
    if bad:
        pytest.fail("imports inside functions without '# deferred: <reason>' (move them to the top, or say why "
                    "they wait):\n" + "\n".join(bad), pytrace=False)


def test_no_private_name_is_used_across_modules():
    """What another module needs is public in its own: no ``from m import _x``, no ``m._x``."""
    bad = _private_uses()
    if bad:
        pytest.fail("private names used from another module (make them public there):\n" + "\n".join(bad),
                    pytrace=False)


def test_a_contracts_name_appears_only_where_contracts_live():
    """A contract is one room: its name and its case type's (as a word, in code, strings or comments)
    appear under mambafuzz/ only in contracts/, oracle/, strategies/ and kernels/."""
    from mambafuzz import contracts

    names = [m.rpartition(".")[2] for m in contracts.BUILTIN]
    names += sorted({contracts.get(n).case_type.__name__ for n in names})  # and each contract's case type
    word = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9_])")
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in CONTRACT_ROOMS or "__pycache__" in rel.parts:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for m in word.finditer(line):
                bad.append(f"mambafuzz/{rel}:{i}: {m.group(1)}")
    files = sorted({b.split(":")[0] for b in bad})
    if bad:
        rooms = ", ".join(f"{r}/" for r in CONTRACT_ROOMS)
        pytest.fail(f"contract names outside {rooms}: still to fix in {', '.join(files)}\n"
                    + "\n".join(bad), pytrace=False)


# the registries that must stay generic: a contract's kernels, cases and case code are found through its own
# modules' declarations (kernels: CONTRACT and friends; contracts: the BUILTIN line), never listed there
GENERIC_REGISTRIES = ("kernels/registry.py",)


@pytest.mark.parametrize("rel", GENERIC_REGISTRIES)
def test_the_generic_registries_name_no_contract(rel):
    """Adding a contract touches its own modules and its BUILTIN line only: the target registry holds no
    contract's name (no hand-written list of contracts, their launchers or their zoo rows)."""
    from mambafuzz import contracts

    names = [m.rpartition(".")[2] for m in contracts.BUILTIN]
    word = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9_])")
    bad = [f"mambafuzz/{rel}:{i}: {m.group(1)}" for i, line in enumerate((PACKAGE / rel).read_text().splitlines(), 1)
           for m in word.finditer(line)]
    assert not bad, "contract names in a generic registry (declare them in the contract's own module):\n" + \
        "\n".join(bad)


@pytest.mark.matrix
def test_a_built_wheel_holds_only_the_mambafuzz_package(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("mambafuzz-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"mambafuzz", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, top
    for part in ("oracle", "kernels", "strategies", "contracts"):
        assert f"mambafuzz/{part}/__init__.py" in names


def test_no_top_level_folder_shares_a_name_with_a_module_of_the_package():
    """With the clone's parent on PYTHONPATH the clone itself can be imported as `mambafuzz`; then a
    top-level `crashes/` would stand in for `mambafuzz.crashes` (it did)."""
    package = ROOT / "mambafuzz"
    modules = {p.stem for p in package.glob("*.py")} | {p.name for p in package.iterdir() if p.is_dir()}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert not (modules & folders), modules & folders


@pytest.mark.matrix
def test_the_cli_runs_with_the_clones_parent_on_pythonpath(tmp_path):
    (tmp_path / "mambafuzz").symlink_to(ROOT)
    proc = subprocess.run([sys.executable, "-m", "mambafuzz.cli", "list", "--json"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and '"triton.batch_memcpy"' in proc.stdout, proc.stderr[-2000:]


def test_strategies_know_cases_not_kernels():
    proc = _run("import sys; from mambafuzz import contracts, strategies; "
                "[s.example() for s in (strategies.batch_copies(), strategies.state_copies(), "
                "strategies.postprocesses(), strategies.slot_copies(), strategies.slot_forks())]; "
                "[contracts.strategy(c).example() for c in contracts.names()]; "
                "bad = [m for m in sys.modules if m.startswith('mambafuzz.kernels')]; assert not bad, bad")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_engine_does_not_load_kernels_before_the_device_is_chosen():
    """Triton decides compiled or interpreted when a kernel module is imported (ARCHITECTURE gotchas)."""
    proc = _run("import sys; import mambafuzz.judge.engine, mambafuzz.search.fuzz, mambafuzz.judge.materialize, mambafuzz.cli; "
                "bad = [m for m in sys.modules if m.startswith('mambafuzz.kernels.') "
                "and m != 'mambafuzz.kernels.perturb']; assert not bad, bad")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_meta_table_layout_is_the_one_the_kernels_read():
    from mambafuzz import kernels
    from mambafuzz.contracts.pools import META_COLUMNS

    assert kernels.META_COLS == len(META_COLUMNS)
    for i, name in enumerate(META_COLUMNS):
        assert getattr(kernels, f"META_{name}") == i, name


@pytest.mark.parametrize("name", ["batch_memcpy", "state_copy", "postprocess", "slot_copy", "slot_fork"])
def test_each_contract_is_defined_in_its_own_module(name):
    from mambafuzz import contracts

    contract = contracts.get(name)
    assert contract.case_type.__module__ == f"mambafuzz.cases.{name}"
    assert type(contract).__module__ == f"mambafuzz.contracts.{name}"
    assert contract.positional and all(a.dtype for a in contract.arguments)

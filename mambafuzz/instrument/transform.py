"""The source transform: a delay call before every statement that loads or stores.

Pure ``ast`` work, no Triton: the caller says what a call is (``classify``),
because only it can resolve names in the kernel's globals.  The result is the
source of a new function with the same name and four extra trailing
parameters (three constexprs and a runtime seed word, all defaulting to 0, so
every existing call still binds).

* A simple statement (assignment, expression, return...) that contains a load
  gets ``delay(1, ...)`` before it; one that contains a store gets
  ``delay(2, ...)`` before it.  A store statement that also loads
  (``tl.store(d, tl.load(s))``) is split: the loading arguments go into
  temporaries first (delay 1 before them), then delay 2, then the store, so
  "between load and store" really is between them.
* ``for`` / ``while`` / ``if`` / ``with`` bodies are instrumented the same way,
  at any depth; a load in a loop's header (``for i in range(0, tl.load(n))``,
  ``while tl.load(flag) == 0``) gets its delay before the loop (once, not per
  test of a ``while``).
* A call of a helper the caller has instrumented is redirected to the helper's
  variant and handed the four extra parameters by keyword.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

PREFIX = "_mambafuzz_"
DELAY = PREFIX + "delay"                       # the jitted delay helper (kernels.copy.warp_delay)
CONSTEXPRS = (PREFIX + "DELAY_POS", PREFIX + "DELAY_NS", PREFIX + "SCHEDULE")
SEED = PREFIX + "seed"
EXTRA = CONSTEXPRS + (SEED,)

# classify(call) -> "load" | "store" | ("helper", name of the variant to call instead) | None
Classify = Callable[[ast.Call], object]


class NotInstrumentable(Exception):
    """The kernel runs unperturbed; ``str(exc)`` says why (one line, for the report)."""


@dataclass
class Transformed:
    source: str
    name: str
    load_sites: int = 0
    store_sites: int = 0
    helper_calls: int = 0
    temps: list[str] = field(default_factory=list)

    @property
    def sites(self) -> int:
        return self.load_sites + self.store_sites


def _delay_stmt(position: int) -> ast.stmt:
    args = [ast.Constant(position)] + [ast.Name(n, ast.Load()) for n in EXTRA]
    return ast.Expr(ast.Call(ast.Name(DELAY, ast.Load()), args, []))


class _Kinds(ast.NodeVisitor):
    """Which of load/store an expression or simple statement contains (not looking into lambdas)."""

    def __init__(self, classify: Classify):
        self.classify = classify
        self.found: set[str] = set()

    def visit_Call(self, node: ast.Call):
        kind = self.classify(node)
        if kind in ("load", "store"):
            self.found.add(kind)
        self.generic_visit(node)

    def visit_Lambda(self, node):  # not Triton, and not run where it stands
        pass


class _Helpers(ast.NodeTransformer):
    """Calls of instrumented helpers go to their variants, with the delay parameters."""

    def __init__(self, classify: Classify):
        self.classify = classify
        self.count = 0

    def visit_Call(self, node: ast.Call):
        kind = self.classify(node)
        self.generic_visit(node)
        if isinstance(kind, tuple) and kind[0] == "helper":
            node.func = ast.Name(kind[1], ast.Load())
            node.keywords = list(node.keywords) + [ast.keyword(n, ast.Name(n, ast.Load())) for n in EXTRA]
            self.count += 1
        return node


class _Sites:
    def __init__(self, classify: Classify, out: Transformed):
        self.classify = classify
        self.out = out

    def kinds(self, nodes) -> set[str]:
        v = _Kinds(self.classify)
        for n in nodes:
            if n is not None:
                v.visit(n)
        return v.found

    def delay(self, position: int) -> ast.stmt:
        if position == 1:
            self.out.load_sites += 1
        else:
            self.out.store_sites += 1
        return _delay_stmt(position)

    def body(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        new: list[ast.stmt] = []
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                new.append(s)
                continue
            if isinstance(s, (ast.For, ast.While, ast.If, ast.With)):
                if isinstance(s, ast.For):
                    header = [s.iter]
                elif isinstance(s, ast.With):
                    header = [i.context_expr for i in s.items]
                else:
                    header = [s.test]
                found = self.kinds(header)
                if "load" in found:
                    new.append(self.delay(1))
                if "store" in found:
                    new.append(self.delay(2))
                s.body = self.body(s.body)
                if getattr(s, "orelse", None):
                    s.orelse = self.body(s.orelse)
                new.append(s)
                continue
            found = self.kinds([s])
            if found == {"load", "store"} and self._store_call(s):
                new.extend(self._split_store(s))
                continue
            if "load" in found:
                new.append(self.delay(1))
            if "store" in found:
                new.append(self.delay(2))
            new.append(s)
        return new

    def _store_call(self, s: ast.stmt) -> bool:
        return (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                and self.classify(s.value) == "store"
                and "load" not in self.kinds([s.value.func]))

    def _split_store(self, s: ast.Expr) -> list[ast.stmt]:
        """``tl.store(p, tl.load(q))`` -> ``t = tl.load(q); delay 1 first; delay 2; tl.store(p, t)``."""
        call = s.value
        hoisted: list[ast.stmt] = []

        def hoist(expr):
            if "load" not in self.kinds([expr]):
                return expr
            name = f"{PREFIX}v{len(self.out.temps)}"  # unique: a name bound in one branch only stays local
            self.out.temps.append(name)
            hoisted.append(ast.Assign([ast.Name(name, ast.Store())], expr))
            return ast.Name(name, ast.Load())

        call.args = [hoist(a) for a in call.args]
        for kw in call.keywords:
            kw.value = hoist(kw.value)
        return [self.delay(1), *hoisted, self.delay(2), s]


def transform(src: str, classify: Classify) -> Transformed:
    """Instrument the one function defined by ``src`` (see the module docstring).

    Raises NotInstrumentable when the source does not parse, is not one plain
    function, takes ``*args`` / ``**kwargs`` / keyword-only parameters, already
    uses the ``_mambafuzz_`` names, or has nothing to delay.
    """
    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise NotInstrumentable(f"its source does not parse ({exc.msg}, line {exc.lineno})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise NotInstrumentable("its source is not one plain function definition")
    fn = tree.body[0]
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise NotInstrumentable("it takes *args, **kwargs, positional-only or keyword-only parameters")
    if any(n.startswith(PREFIX) for n in {x.id for x in ast.walk(fn) if isinstance(x, ast.Name)}
           | {x.arg for x in a.args}):
        raise NotInstrumentable(f"it already uses names starting with {PREFIX}")
    fn.decorator_list = []
    out = Transformed(source="", name=fn.name)
    helpers = _Helpers(classify)
    fn.body = [helpers.visit(s) for s in fn.body]
    out.helper_calls = helpers.count
    fn.body = _Sites(classify, out).body(fn.body)
    if not out.sites and not out.helper_calls:
        raise NotInstrumentable("no tl.load or tl.store found in it (nor in a helper it calls)")
    # trailing parameters with defaults: every existing positional or keyword call still binds
    for n in CONSTEXPRS:
        a.args.append(ast.arg(n, ast.Constant("constexpr")))
    a.args.append(ast.arg(SEED, None))
    a.defaults = list(a.defaults) + [ast.Constant(0)] * len(EXTRA)
    out.source = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    return out

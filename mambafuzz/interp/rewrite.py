"""Mends in the source rewrite the interpreter applies to every jit function before running it.

Compiled Triton gives a ``range`` loop's variable a tensor type (int32, or
int64 when a bound is); the interpreter runs the loop in Python, so the
variable is a plain ``int`` and FLA's ``i_t.to(tl.int64)`` raises
"'int' object has no attribute 'to'".  And compiled Triton evaluates
``a and b`` over tensors as an elementwise ``logical_and`` of every operand
(short-circuiting only on compile-time constants), where Python's ``and``
returns ``b`` whenever a block ``a`` is non-empty.

The interpreter rewrites a jit function's AST (``FunctionRewriter``) and
caches the result per function.  Inside the adapters its transformer is a
subclass that also rewrites ``for x in range(...)`` / ``tl.range(...)`` to
yield ``LoopIndex`` values (ints that answer any tensor attribute through a
scalar tensor of the loop's type) and ``a and b`` / ``a or b`` to compiled
Triton's rule; the rewritten functions are cached apart from the
interpreter's own, so leaving the adapters leaves its cache as it was.
"""
from __future__ import annotations

import ast

import numpy as np
import triton.language as tl
from triton.runtime import interpreter as _interp

__all__ = ["LoopIndex", "install", "uninstall"]

LOOP, BOOLOP = "_mambafuzz_loop", "_mambafuzz_boolop"
_INT32 = (-(1 << 31), (1 << 31) - 1)


class LoopIndex(int):
    """A ``range`` loop variable: an int that also behaves as a scalar tensor of the loop's type."""

    def __new__(cls, value: int, dtype):
        out = super().__new__(cls, value)
        out._dtype = dtype
        return out

    def tensor(self):
        dtype = self._dtype
        handle = _interp.TensorHandle(np.array([int(self)], dtype=_interp._get_np_dtype(dtype)), dtype)
        return tl.core.tensor(handle, dtype)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.tensor(), name)


def _int_type(value):
    if isinstance(value, tl.core.tensor):
        return value.dtype.scalar if hasattr(value.dtype, "scalar") else value.dtype
    if isinstance(value, tl.core.constexpr):
        value = value.value
    if isinstance(value, int) and not (_INT32[0] <= value <= _INT32[1]):
        return tl.int64
    return tl.int32


def loop(range_fn, *args, **kwargs):
    """``range_fn(*args)`` with each value a `LoopIndex` of the type compiled Triton gives the loop."""
    wide = any(getattr(_int_type(a), "primitive_bitwidth", 32) > 32 for a in args)
    dtype = tl.int64 if wide else tl.int32
    for value in range_fn(*args, **kwargs):
        yield LoopIndex(value, dtype)


def _dynamic(value) -> bool:
    return isinstance(value, tl.core.tensor)


def boolop(is_and: bool, *thunks):
    """Compiled Triton's ``and``/``or``: constants short-circuit, tensors combine elementwise."""
    tensors, value = [], None
    for thunk in thunks:
        value = thunk()
        if isinstance(value, LoopIndex):
            value = int(value)
        if not _dynamic(value):
            truth = bool(value.value if isinstance(value, tl.core.constexpr) else value)
            if truth is not is_and:      # False in an `and`, True in an `or`: the answer
                return value
            continue
        tensors.append(value)
    if not tensors:
        return value
    result = tensors[-1]
    for lhs in reversed(tensors[:-1]):
        result = lhs.logical_and(result) if is_and else lhs.logical_or(result)
    return result


def _is_range_call(node) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "range") or \
        (isinstance(func, ast.Attribute) and func.attr == "range")


class _Mends(ast.NodeTransformer):
    """The two rewrites, run over the whole tree before the interpreter's own transformer."""

    def visit_For(self, node):
        node = self.generic_visit(node)
        if _is_range_call(node.iter):
            call = node.iter
            node.iter = ast.copy_location(ast.Call(func=ast.Name(id=LOOP, ctx=ast.Load()),
                                                   args=[call.func, *call.args], keywords=call.keywords), call)
        return node

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        thunks = [ast.Lambda(args=no_args, body=value) for value in node.values]
        flag = ast.Constant(value=isinstance(node.op, ast.And))
        return ast.copy_location(ast.Call(func=ast.Name(id=BOOLOP, ctx=ast.Load()), args=[flag, *thunks],
                                          keywords=[]), node)


class _Transformer:
    """Stands in for the interpreter's transformer: ours first, then its own (the rewriter calls visit)."""

    def __init__(self, own) -> None:
        self.own = own

    def visit(self, tree):
        return self.own.visit(_Mends().visit(tree))


_cache: dict = {}       # jit function -> its rewritten, mended function (kept across adapter sessions)
_saved = None           # what install() replaced


def install() -> None:
    """Mend the rewrite (idempotent until `uninstall`)."""
    global _saved
    rewriter = getattr(_interp, "FunctionRewriter", None)
    function = getattr(_interp, "InterpretedFunction", None)
    if _saved is not None or rewriter is None or function is None or not hasattr(function, "rewritten_fn"):
        return
    transformer = rewriter.ast_transformer
    _saved = (transformer, function.rewritten_fn, {n: getattr(_interp, n, None) for n in (LOOP, BOOLOP)})
    rewriter.ast_transformer = _Transformer(transformer)
    function.rewritten_fn = _cache
    setattr(_interp, LOOP, loop)        # the rewriter copies the interpreter's globals into the function's
    setattr(_interp, BOOLOP, boolop)


def uninstall() -> None:
    global _saved
    if _saved is None:
        return
    transformer, cache, names = _saved
    _saved = None
    _interp.FunctionRewriter.ast_transformer = transformer
    _interp.InterpretedFunction.rewritten_fn = cache
    for name, value in names.items():
        if value is None:
            _interp.__dict__.pop(name, None)
        else:
            setattr(_interp, name, value)

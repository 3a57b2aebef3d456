"""Module-level aliases in the way FLA's ``op.py`` (as vLLM and SGLang ship it) defines them.

The kernels in ``fla_style.py`` import these names and call them in their jit
bodies: a plain alias of a Triton builtin (``exp = tl.exp``), a jit function
under another name (``div = div_normal``), and a jit helper that itself calls
the alias (``safe_exp``).
"""
import triton
import triton.language as tl


@triton.jit
def div_normal(x, y):
    return x / y


div = div_normal
exp = tl.exp
log = tl.log


@triton.jit
def safe_exp(x):
    return exp(tl.where(x <= 0, x, float("-inf")))

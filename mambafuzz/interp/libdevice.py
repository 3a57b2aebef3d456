"""numpy twins of CUDA libdevice's ``__nv_*`` functions, for kernels run in the interpreter.

Compiled Triton calls libdevice through ``extern_elementwise``; no release's
interpreter implements it, and the ``triton.language.extra.libdevice`` stubs
return None there.  Each twin computes in float64 and is cast to the
argument's precision: the correctly rounded value, where libdevice's own
functions are within 1-2 ulp of it (its ``fast_`` ones within their
documented approximation).  Symbols without a twin are refused by name.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["numpy_twin"]


def _f64(fn):
    def twin(*args):
        dtype = np.result_type(*[np.asarray(a).dtype for a in args])
        out = fn(*[np.asarray(a, dtype=np.float64) for a in args])
        return np.asarray(out).astype(dtype if dtype.kind == "f" else np.float64)
    return twin


_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
_tgamma = np.vectorize(math.gamma, otypes=[np.float64])


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# float functions by base name: __nv_<base>f is fp32, __nv_<base> fp64 (both computed in float64)
_FLOAT = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt, "rcbrt": lambda x: 1.0 / np.cbrt(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sinpi": lambda x: np.sin(np.pi * x), "cospi": lambda x: np.cos(np.pi * x),
    "erf": _erf, "erfc": _erfc, "lgamma": _lgamma, "tgamma": _tgamma,
    "atan2": np.arctan2, "pow": np.power, "hypot": np.hypot, "fmod": np.fmod, "remainder": np.remainder,
    "fdim": lambda x, y: np.maximum(x - y, 0.0), "copysign": np.copysign, "nextafter": np.nextafter,
    "fmin": np.fmin, "fmax": np.fmax, "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": _round_half_away, "rint": np.rint, "nearbyint": np.rint, "fma": lambda x, y, z: x * y + z,
    "saturate": lambda x: np.clip(x, 0.0, 1.0),
}
# fp32-only names (no fp64 sibling spelled the same way)
_FLOAT32 = {
    "__nv_fast_expf": np.exp, "__nv_fast_exp10f": lambda x: np.power(10.0, x), "__nv_fast_logf": np.log,
    "__nv_fast_log2f": np.log2, "__nv_fast_log10f": np.log10, "__nv_fast_powf": np.power,
    "__nv_fast_sinf": np.sin, "__nv_fast_cosf": np.cos, "__nv_fast_tanf": np.tan,
    "__nv_fast_fdividef": np.divide, "__nv_saturatef": lambda x: np.clip(x, 0.0, 1.0),
    "__nv_frsqrt_rn": lambda x: 1.0 / np.sqrt(x), "__nv_fmaf_rn": lambda x, y, z: x * y + z,
    "__nv_fdiv_rn": np.divide, "__nv_fsqrt_rn": np.sqrt, "__nv_frcp_rn": lambda x: 1.0 / x,
    "__nv_fadd_rn": np.add, "__nv_fsub_rn": np.subtract, "__nv_fmul_rn": np.multiply,
    "__nv_dadd_rn": np.add, "__nv_dsub_rn": np.subtract, "__nv_dmul_rn": np.multiply,
    "__nv_ddiv_rn": np.divide, "__nv_dsqrt_rn": np.sqrt, "__nv_drcp_rn": lambda x: 1.0 / x,
    "__nv_fma_rn": lambda x, y, z: x * y + z,
}
# predicates: an int32 0/1 per element
_PREDICATES = {
    "__nv_isnanf": np.isnan, "__nv_isnand": np.isnan, "__nv_isinff": np.isinf, "__nv_isinfd": np.isinf,
    "__nv_finitef": np.isfinite, "__nv_isfinited": np.isfinite, "__nv_signbitf": np.signbit,
    "__nv_signbitd": np.signbit,
}


def _table() -> dict:
    table = {}
    for base, fn in _FLOAT.items():
        table[f"__nv_{base}f"] = _f64(fn)
        table[f"__nv_{base}"] = _f64(fn)
    table.update({name: _f64(fn) for name, fn in _FLOAT32.items()})
    table.update({name: (lambda fn: lambda x: fn(np.asarray(x)).astype(np.int32))(fn)
                  for name, fn in _PREDICATES.items()})
    table["__nv_abs"] = table["__nv_llabs"] = np.abs
    table["__nv_popc"] = lambda x: np.array([bin(int(v) & 0xFFFFFFFF).count("1") for v in np.ravel(x)],
                                            dtype=np.int32).reshape(np.shape(x))
    return table


_TWINS = _table()


def numpy_twin(symbol: str):
    """The numpy function for a libdevice symbol, or None."""
    return _TWINS.get(symbol)

"""Mends of the interpreter's builder: the numpy arithmetic behind every Triton op.

Each mend is a method of ``InterpreterBuilder`` (or of its reduce/scan ops)
wrapped so that its result is what compiled Triton computes, and each comes
with a probe that runs the installed release's own method on a tiny input:
a mend is applied only where its probe finds the difference.

- Comparisons: the interpreter types a comparison's result like its operands
  (int32 for ``idx != pad``), so a scalar comparison splatted into a block
  mask becomes int32 data (Triton 3.9: "mask has unsupported dtype"; older
  releases index with it).  Compiled Triton yields int1; so does the mend,
  and float comparisons honour ordered/unordered predicates around NaN.
- bf16 and fp8 values are bit patterns in the interpreter (``lowp``): add,
  sub, mul, fma, min, max, clamp, comparisons, casts, ``tl.dot`` and the
  sum/min/max reductions and scans decode them to float64, compute, and
  round once, as compiled code does (bf16 dot: products exact, accumulated
  in fp32 as float64 rounded once; compiled tensor cores accumulate in fp32
  in their own order, within the corpus's documented bound).
- Integer to pointer: a Python int argument in [2^31, 2^32) is a uint32 in
  the interpreter, and its ``.to(tl.pointer_type(...))`` views 4 bytes as 8
  (numpy raises).  Host addresses land there where the heap is low (a
  non-PIE Python); compiled code zero-extends, and so does the mend.
- ``libdevice`` calls (``create_extern_elementwise``, unsupported in every
  release's interpreter) run the numpy twin of each ``__nv_*`` symbol
  (``libdevice.py``); a symbol without one raises a NotImplementedError
  naming it (an inconclusive run, never a wrong value).
"""
from __future__ import annotations

import numpy as np
import triton.language as tl
from triton.runtime import interpreter as _interp

from mambafuzz.errors import InterpreterGap

from . import libdevice, lowp

__all__ = ["MENDS", "coded_format"]

TensorHandle = _interp.TensorHandle
Builder = _interp.InterpreterBuilder


def coded_format(dtype) -> lowp.Format | None:
    """The bit-coded float format of a Triton dtype (bf16, fp8), or None."""
    scalar = getattr(dtype, "scalar", dtype)
    return lowp.FORMATS.get(getattr(scalar, "name", None))


def _scalar(handle):
    return handle.dtype.scalar


def _float64(handle) -> np.ndarray:
    fmt = coded_format(handle.dtype)
    return lowp.decode(handle.data, fmt) if fmt is not None else handle.data.astype(np.float64)


def _coded(values, dtype) -> TensorHandle:
    """float64 `values` as a handle of float `dtype` (bit-coded or numpy), rounded once."""
    fmt = coded_format(dtype)
    scalar = dtype.scalar
    if fmt is not None:
        return TensorHandle(lowp.encode(values, fmt), scalar)
    return TensorHandle(np.asarray(values).astype(_interp._get_np_dtype(scalar)), scalar)


def _handle(data, dtype) -> TensorHandle:
    return TensorHandle(np.asarray(data, dtype=_interp._get_np_dtype(dtype)), dtype)


# --------------------------------------------------------------------------
# comparisons: int1 results, ordered/unordered around NaN, bit-coded operands decoded
# --------------------------------------------------------------------------
_ICMP = {"SLE": np.less_equal, "SLT": np.less, "SGE": np.greater_equal, "SGT": np.greater,
         "ULE": np.less_equal, "ULT": np.less, "UGE": np.greater_equal, "UGT": np.greater,
         "EQ": np.equal, "NE": np.not_equal}
_FCMP = {"LT": np.less, "GT": np.greater, "LE": np.less_equal, "GE": np.greater_equal,
         "EQ": np.equal, "NE": np.not_equal}


def _icmp(original):
    def create_icmp(self, lhs, rhs):
        out = original(self, lhs, rhs)
        return TensorHandle(np.asarray(out.data).astype(bool), tl.int1)
    return create_icmp


def _fcmp(op, ordered: bool):
    def create_fcmp(self, lhs, rhs):
        a, b = _float64(lhs), _float64(rhs)
        nan = np.isnan(a) | np.isnan(b)
        with np.errstate(invalid="ignore"):
            result = op(a, b)
        result = (result & ~nan) if ordered else (result | nan)
        return TensorHandle(np.asarray(result, dtype=bool), tl.int1)
    return create_fcmp


def _comparisons():
    out = {f"create_icmp{k}": _icmp(getattr(Builder, f"create_icmp{k}")) for k in _ICMP
           if hasattr(Builder, f"create_icmp{k}")}
    for k, op in _FCMP.items():
        for prefix, ordered in (("O", True), ("U", False)):
            name = f"create_fcmp{prefix}{k}"
            if hasattr(Builder, name):
                out[name] = _fcmp(op, ordered)
    return out


def _comparisons_broken(builder) -> bool:
    one = TensorHandle(np.array([1], dtype=np.int32), tl.int32)
    nan = TensorHandle(np.array([np.nan], dtype=np.float32), tl.float32)
    eq = Builder.create_icmpEQ(builder, one, one)
    one_ne = Builder.create_fcmpONE(builder, nan, nan)
    return eq.dtype != tl.int1 or eq.data.dtype != np.bool_ or bool(np.asarray(one_ne.data).any())


# --------------------------------------------------------------------------
# arithmetic on bit-coded floats
# --------------------------------------------------------------------------
def _binary(original, op):
    def binary(self, lhs, rhs):
        if coded_format(lhs.dtype) is None and coded_format(rhs.dtype) is None:
            return original(self, lhs, rhs)
        with np.errstate(all="ignore"):
            return _coded(op(_float64(lhs), _float64(rhs)), lhs.dtype)
    return binary


_BINARY = {"create_fadd": np.add, "create_fsub": np.subtract, "create_fmul": np.multiply,
           "create_fdiv": np.divide, "create_frem": np.fmod, "create_precise_divf": np.divide,
           "create_approx_divf": np.divide, "create_minimumf": np.minimum, "create_maximumf": np.maximum,
           "create_minnumf": np.fmin, "create_maxnumf": np.fmax}


def _fneg(original):
    def create_fneg(self, arg):
        fmt = coded_format(arg.dtype)
        if fmt is None:
            return original(self, arg)
        return TensorHandle((arg.data ^ fmt.storage.type(fmt.sign)).astype(fmt.storage), _scalar(arg))
    return create_fneg


def _fma(original):
    def create_fma(self, x, y, z):
        if all(coded_format(h.dtype) is None for h in (x, y, z)):
            return original(self, x, y, z)
        with np.errstate(all="ignore"):
            return _coded(_float64(x) * _float64(y) + _float64(z), z.dtype)
    return create_fma


def _clampf(original):
    def create_clampf(self, arg, lo, hi, propagate_nans):
        if coded_format(arg.dtype) is None:
            return original(self, arg, lo, hi, propagate_nans)
        a, low, high = _float64(arg), _float64(lo), _float64(hi)
        with np.errstate(all="ignore"):
            if propagate_nans == _interp._ir.PROPAGATE_NAN.NONE:
                out = np.fmin(np.fmax(a, low), high)
            else:
                out = np.clip(a, low, high)
        return _coded(out, arg.dtype)
    return create_clampf


def _arithmetic():
    out = {name: _binary(getattr(Builder, name), op) for name, op in _BINARY.items() if hasattr(Builder, name)}
    for name, mend in (("create_fneg", _fneg), ("create_fma", _fma), ("create_clampf", _clampf)):
        if hasattr(Builder, name):          # 3.5/3.6 negate as 0 - x, through create_fsub
            out[name] = mend(getattr(Builder, name))
    return out


def _bf16(builder, *values) -> list:
    return [TensorHandle(lowp.encode(np.array([v]), lowp.FORMATS["bf16"]), tl.bfloat16) for v in values]


def _arithmetic_broken(builder) -> bool:
    a, b = _bf16(builder, 1.5, 2.0)
    got = Builder.create_fmul(builder, a, b)
    return lowp.decode(got.data, lowp.FORMATS["bf16"])[0] != 3.0


# --------------------------------------------------------------------------
# casts: every conversion into or out of a bit-coded float, rounded once
# --------------------------------------------------------------------------
def _convert(src, dst_type, rounding):
    dst = dst_type.scalar
    value = _float64(src) if (coded_format(src.dtype) or src.dtype.scalar.is_floating()) else src.data
    fmt = coded_format(dst)
    if fmt is not None:
        return TensorHandle(lowp.encode(value, fmt, rounding), dst)
    target = _interp._get_np_dtype(dst)
    if dst.is_floating():
        return TensorHandle(np.asarray(value, dtype=np.float64).astype(target), dst)
    if dst.is_int():                      # float -> int truncates toward zero (out of range: clipped)
        info = np.iinfo(target) if target != np.bool_ else None
        truncated = np.trunc(np.nan_to_num(np.asarray(value, dtype=np.float64)))
        if info is not None:
            truncated = np.clip(truncated, info.min, info.max)
        return TensorHandle(truncated.astype(target), dst)
    raise TypeError(f"cannot convert {src.dtype} to {dst}")


def _coded_cast(src, dst_type) -> bool:
    return coded_format(src.dtype) is not None or coded_format(dst_type) is not None


def _cast_impl(original):
    def cast_impl(self, src, dst_type):
        if not _coded_cast(src, dst_type):
            return original(self, src, dst_type)
        return _convert(src, dst_type, lowp.RTNE)
    return cast_impl


def _fp_to_fp(original):
    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if not _coded_cast(src, dst_type):
            return original(self, src, dst_type, rounding_mode)
        rtz = rounding_mode is not None and "RTZ" in str(rounding_mode).upper()
        return _convert(src, dst_type, lowp.RTZ if rtz else lowp.RTNE)
    return create_fp_to_fp


def _casts():
    return {"cast_impl": _cast_impl(Builder.cast_impl), "create_fp_to_fp": _fp_to_fp(Builder.create_fp_to_fp)}


def _casts_broken(builder) -> bool:
    # 1 + 2**-8 + 2**-9 lies past the midpoint between two bf16 values: compiled code rounds up
    x = TensorHandle(np.array([1.0 + 2 ** -8 + 2 ** -9], dtype=np.float32), tl.float32)
    got = Builder.cast_impl(builder, x, tl.bfloat16)
    return lowp.decode(got.data, lowp.FORMATS["bf16"])[0] != 1.0 + 2 ** -7


# --------------------------------------------------------------------------
# tl.dot with bit-coded operands
# --------------------------------------------------------------------------
def _dot(original):
    def create_dot(self, a, b, d, *rest):
        if coded_format(a.dtype) is None and coded_format(b.dtype) is None:
            return original(self, a, b, d, *rest)
        product = np.matmul(_float64(a), _float64(b)) + _float64(d)
        return _coded(product, d.dtype)
    return create_dot


def _dot_broken(builder) -> bool:
    a = _bf16(builder, 1.5)[0]
    a = TensorHandle(np.full((16, 16), a.data[0], dtype=np.uint16), tl.bfloat16)
    d = TensorHandle(np.zeros((16, 16), dtype=np.float32), tl.float32)
    try:
        got = Builder.create_dot(builder, a, a, d, None, 0)
    except Exception:                     # noqa: BLE001 - any failure on bf16 is the gap mended here
        return True
    return float(got.data[0, 0]) != 16 * 2.25


# --------------------------------------------------------------------------
# reductions and scans over bit-coded floats
# --------------------------------------------------------------------------
def _reduce_sum(original):
    def sum(self, input):
        fmt = coded_format(input.dtype)
        if fmt is None:
            return original(self, input)
        total = np.sum(lowp.decode(input.handle.data, fmt), axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(_as_array(total, fmt), input.dtype)
    return sum


def _as_array(values, fmt):
    encoded = lowp.encode(np.asarray(values), fmt)
    return encoded if np.ndim(values) else encoded.reshape(()).item()


def _reduce_min_max(original):
    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        value = input[0] if isinstance(input, tuple) else input
        fmt = coded_format(value.dtype)
        if fmt is None:
            return original(self, input, val_reduce_op, idx_reduce_op)
        decoded = lowp.decode(value.handle.data, fmt)
        val = idx = None
        if val_reduce_op:
            val = self.to_tensor(_as_array(val_reduce_op(decoded, axis=self.axis, keepdims=self.keep_dims), fmt),
                                 value.dtype)
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(decoded, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx
    return min_max


def _scan(original, op):
    def scan(self, input):
        fmt = coded_format(input.dtype)
        if fmt is None:
            return original(self, input)
        return [self.to_tensor(lowp.encode(op(lowp.decode(input.handle.data, fmt), axis=self.axis), fmt),
                               dtype=input.dtype)]
    return scan


def _reductions():
    out = {}
    reduce_ops = getattr(_interp, "ReduceOps", None)
    scan_ops = getattr(_interp, "ScanOps", None)
    if reduce_ops is not None:
        if hasattr(reduce_ops, "sum"):
            out[(reduce_ops, "sum")] = _reduce_sum(reduce_ops.sum)
        if hasattr(reduce_ops, "min_max"):
            out[(reduce_ops, "min_max")] = _reduce_min_max(reduce_ops.min_max)
    if scan_ops is not None:
        for name, op in (("cumsum", np.cumsum), ("cumprod", np.cumprod)):
            if hasattr(scan_ops, name):
                out[(scan_ops, name)] = _scan(getattr(scan_ops, name), op)
    return out


# --------------------------------------------------------------------------
# libdevice: the __nv_* symbols of extern_elementwise
# --------------------------------------------------------------------------
def _extern(original):
    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        fn = libdevice.numpy_twin(symbol)
        if fn is None:
            raise InterpreterGap(f"libdevice's {symbol} (mambafuzz models the float functions of libdevice, "
                                 "not this one; a --device cuda run checks it)")
        scalar = getattr(retType, "scalar", retType)
        args = [h.data for h in argList]
        with np.errstate(all="ignore"):
            result = fn(*args)
        return TensorHandle(np.asarray(result).astype(_interp._get_np_dtype(scalar)), scalar)
    return create_extern_elementwise


def _extern_broken(builder) -> bool:
    x = TensorHandle(np.array([0.5], dtype=np.float32), tl.float32)
    try:
        Builder.create_extern_elementwise(builder, "", "", "__nv_expf", [x], tl.float32, True)
    except NotImplementedError:
        return True
    return False


# --------------------------------------------------------------------------
# a 32-bit integer cast to a pointer
# --------------------------------------------------------------------------
def _int_to_ptr(original):
    def create_int_to_ptr(self, val, dst_type):
        data = np.asarray(val.data)
        if data.dtype.itemsize >= 8:
            return original(self, val, dst_type)
        wide = data.view(np.dtype(f"u{data.dtype.itemsize}")).astype(np.uint64)  # zero-extended, as inttoptr
        return TensorHandle(wide, dst_type.scalar)
    return create_int_to_ptr


def _int_to_ptr_broken(builder) -> bool:
    low = TensorHandle(np.array([2**31 + 8], dtype=np.uint32), tl.uint32)
    try:
        out = Builder.create_int_to_ptr(builder, low, tl.pointer_type(tl.int32))
    except ValueError:
        return True
    return int(np.asarray(out.data).astype(np.uint64)[0]) != 2**31 + 8


# (what it mends, probe: does the installed release have the difference, {method: mended}) -- the
# methods are InterpreterBuilder's unless keyed by (class, name)
MENDS = (
    ("int1 comparisons", _comparisons_broken, _comparisons),
    ("bf16/fp8 arithmetic", _arithmetic_broken, _arithmetic),
    ("bf16/fp8 casts", _casts_broken, _casts),
    ("bf16/fp8 tl.dot", _dot_broken, lambda: {"create_dot": _dot(Builder.create_dot)}),
    ("bf16/fp8 reductions", _arithmetic_broken, _reductions),
    ("32-bit int to pointer", _int_to_ptr_broken,
     lambda: {"create_int_to_ptr": _int_to_ptr(Builder.create_int_to_ptr)}),
    ("libdevice", _extern_broken,
     lambda: {"create_extern_elementwise": _extern(Builder.create_extern_elementwise)}),
)

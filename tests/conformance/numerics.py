"""Floating-point formats in numpy: the values the corpus compares and the rounding it models.

numpy has no bfloat16 and no float8, so every tensor crosses to numpy in its
*wire* form: the dtypes numpy has as themselves, bfloat16 as its uint16 bit
patterns, the float8 formats as their uint8 bit patterns (:func:`wire`,
:func:`unwire`).  An expectation computes in float64 and rounds once into the
output format with :func:`round_to` (round to nearest, ties to even: what
compiled Triton's ``cvt.rn`` and its 16-bit ``mul.rn``/``add.rn`` do).  For a
product or a sum of two 8/11-bit-mantissa values, float64 holds the exact
result, so one rounding of it is the rounding of the exact value.

:func:`compare` measures an output against an expectation under a
:class:`Bound`: bit-for-bit, or within a number of units in the last place of
the output format and/or an absolute/relative tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Bound", "Comparison", "EXACT", "FORMATS", "Format", "close", "compare", "decode",
           "round_to", "ulps", "unwire", "wire", "wire_dtype"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: sign, `ebits` exponent bits, `mbits` stored mantissa bits."""

    name: str
    ebits: int
    mbits: int
    finite_only: bool = False     # e4m3fn: no infinities, S.1111.111 is NaN, exponent 1111 holds normals

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_finite(self) -> float:
        if self.finite_only:        # top exponent field, mantissa all ones but the last bit
            top = (1 << self.ebits) - 1 - self.bias
            return float((2.0 - 2.0 ** (1 - self.mbits)) * 2.0 ** top)
        top = (1 << self.ebits) - 2 - self.bias
        return float((2.0 - 2.0 ** -self.mbits) * 2.0 ** top)

    @property
    def uint(self):
        return {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[self.bits]


FORMATS = {
    "float64": Format("float64", 11, 52),
    "float32": Format("float32", 8, 23),
    "float16": Format("float16", 5, 10),
    "bfloat16": Format("bfloat16", 8, 7),
    "float8_e5m2": Format("float8_e5m2", 5, 2),
    "float8_e4m3fn": Format("float8_e4m3fn", 4, 3, finite_only=True),
}
BF16, F16, F32 = FORMATS["bfloat16"], FORMATS["float16"], FORMATS["float32"]
E4M3, E5M2 = FORMATS["float8_e4m3fn"], FORMATS["float8_e5m2"]


# --------------------------------------------------------------------------
# torch <-> numpy
# --------------------------------------------------------------------------
def dtype_name(dtype) -> str:
    """'bfloat16' for torch.bfloat16 (a numpy dtype gives its own name)."""
    return str(dtype).replace("torch.", "")


def wire(t) -> np.ndarray:
    """A torch tensor (any device) as numpy: bfloat16 as uint16 bits, float8 as uint8 bits."""
    import torch

    t = t.detach().to("cpu").contiguous()
    name = dtype_name(t.dtype)
    if name == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    if name.startswith("float8"):
        return t.view(torch.uint8).numpy().copy()
    if name == "uint64":
        return t.view(torch.int64).numpy().view(np.uint64).copy()
    return t.numpy().copy()


def wire_dtype(name: str):
    """The numpy dtype of a torch dtype's wire form."""
    if name == "bfloat16":
        return np.dtype(np.uint16)
    if name.startswith("float8"):
        return np.dtype(np.uint8)
    return np.dtype(name if name != "bool" else np.bool_)


def unwire(a: np.ndarray, name: str, device="cpu"):
    """The inverse of :func:`wire`: a torch tensor of dtype `name` on `device`."""
    import torch

    a = np.ascontiguousarray(a)
    if name == "bfloat16":
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    elif name.startswith("float8"):
        t = torch.from_numpy(a.astype(np.uint8).copy()).view(getattr(torch, name))
    elif name == "uint64":
        t = torch.from_numpy(a.view(np.int64).copy()).view(torch.uint64)
    else:
        t = torch.from_numpy(a.copy())
    return t.to(device)


# --------------------------------------------------------------------------
# decoding and rounding
# --------------------------------------------------------------------------
def decode(bits: np.ndarray, fmt: Format) -> np.ndarray:
    """Bit patterns of `fmt` -> float64 values (exact)."""
    b = np.asarray(bits).astype(np.uint64)
    sign = np.where((b >> np.uint64(fmt.bits - 1)) & np.uint64(1), -1.0, 1.0)
    e = ((b >> np.uint64(fmt.mbits)) & np.uint64((1 << fmt.ebits) - 1)).astype(np.int64)
    m = (b & np.uint64((1 << fmt.mbits) - 1)).astype(np.float64)
    scale = 2.0 ** -fmt.mbits
    normal = (1.0 + m * scale) * np.exp2((e - fmt.bias).astype(np.float64))
    sub = m * scale * 2.0 ** fmt.emin
    out = sign * np.where(e == 0, sub, normal)
    top = e == (1 << fmt.ebits) - 1
    if fmt.finite_only:
        out = np.where(top & (m == (1 << fmt.mbits) - 1), np.nan, out)
    else:
        out = np.where(top, np.where(m == 0, sign * np.inf, np.nan), out)
    return out


def round_to(x, fmt: Format, saturate: bool = False) -> np.ndarray:
    """float64 values -> bit patterns of `fmt`, rounded to nearest, ties to even.

    The value is rounded once: `x` must hold the exact result (a float64
    product or sum of two 16-bit floats does).  Past the largest finite value
    the result is infinity (NaN for e4m3fn, which has none), or the largest
    finite value with `saturate` (PTX ``satfinite``).
    """
    x = np.asarray(x, dtype=np.float64)
    mag = np.abs(x)
    neg = np.signbit(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _, exp = np.frexp(np.where(mag > 0, mag, 1.0))        # mag = f * 2**exp, f in [0.5, 1)
        e = np.maximum(exp.astype(np.int64) - 1, fmt.emin)     # the binade, subnormals share emin's
        quantum = np.exp2((e - fmt.mbits).astype(np.float64))
        r = np.round(mag / quantum) * quantum                  # numpy rounds half to even
    overflow = r > fmt.max_finite
    # encode r
    with np.errstate(divide="ignore", invalid="ignore"):
        _, exp2 = np.frexp(np.where(r > 0, r, 1.0))
        er = exp2.astype(np.int64) - 1
        is_normal = r >= 2.0 ** fmt.emin
        ef = np.where(is_normal, er + fmt.bias, 0)
        mant = np.where(is_normal, r / np.exp2((er - fmt.mbits).astype(np.float64)) - (1 << fmt.mbits),
                        r / 2.0 ** (fmt.emin - fmt.mbits))
    mant = np.where(np.isfinite(mant), mant, 0).astype(np.uint64)
    bits = (ef.astype(np.uint64) << np.uint64(fmt.mbits)) | mant
    all_ones_e = np.uint64(((1 << fmt.ebits) - 1) << fmt.mbits)
    if saturate:
        big = round_to(np.array([fmt.max_finite]), fmt)[0].astype(np.uint64)
        bits = np.where(overflow, big, bits)
    elif fmt.finite_only:
        bits = np.where(overflow, all_ones_e | np.uint64((1 << fmt.mbits) - 1), bits)
    else:
        bits = np.where(overflow, all_ones_e, bits)
    nan = np.isnan(x)
    bits = np.where(nan, all_ones_e | np.uint64((1 << fmt.mbits) - 1), bits)
    inf = np.isinf(x)
    if not fmt.finite_only:
        bits = np.where(inf, all_ones_e, bits)
    bits = np.where(neg & ~nan, bits | np.uint64(1 << (fmt.bits - 1)), bits)
    return bits.astype(fmt.uint)


def to_bf16(x) -> np.ndarray:
    """float64 (exact) values -> bfloat16 bits, round to nearest even."""
    return round_to(x, BF16)


def bf16(bits) -> np.ndarray:
    """bfloat16 bits -> float64."""
    return decode(bits, BF16)


# --------------------------------------------------------------------------
# bounds and comparison
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Bound:
    """How far an output may be from its expectation.

    Exact (the default): bit for bit.  Otherwise an element passes when its
    distance in units in the last place of the output format is at most
    `ulps`, or when ``|actual - expected| <= atol + rtol * |expected|``;
    `reason` says in one line why compiled code may differ.
    """

    ulps: int = 0
    atol: float = 0.0
    rtol: float = 0.0
    reason: str = ""

    @property
    def exact(self) -> bool:
        return self.ulps == 0 and self.atol == 0 and self.rtol == 0

    def describe(self) -> str:
        if self.exact:
            return "exact"
        parts = [f"{self.ulps} ulp"] if self.ulps else []
        if self.atol or self.rtol:
            parts.append(f"atol {self.atol:g} rtol {self.rtol:g}")
        return " or ".join(parts)


EXACT = Bound()


def ulps(n: int, reason: str, atol: float = 0.0) -> Bound:
    return Bound(ulps=n, atol=atol, reason=reason)


def close(atol: float, rtol: float, reason: str) -> Bound:
    return Bound(atol=atol, rtol=rtol, reason=reason)


@dataclass(frozen=True)
class Comparison:
    equal: int              # elements equal bit for bit
    total: int
    max_abs: float          # largest |actual - expected| (values decoded to float64)
    max_ulps: float         # largest distance in units in the last place of the dtype (ints: plain)
    ok: bool                # every element within the bound
    first_bad: str = ""     # index, actual, expected of the first element outside it

    def line(self) -> str:
        return (f"{self.equal}/{self.total} bitwise equal, max |diff| {self.max_abs:.3g}, "
                f"max {self.max_ulps:g} ulp" + ("" if self.ok else f"; outside the bound at {self.first_bad}"))


def _ordered(bits: np.ndarray, nbits: int) -> np.ndarray:
    """Bit patterns of a sign-magnitude float -> integers ordered like the values."""
    b = bits.astype(np.uint64)
    sign = (b >> np.uint64(nbits - 1)) & np.uint64(1)
    mag = (b & np.uint64((1 << (nbits - 1)) - 1)).astype(np.int64)
    return np.where(sign == 1, -mag, mag)


def compare(actual: np.ndarray, expected: np.ndarray, dtype: str, bound: Bound = EXACT) -> Comparison:
    """`actual` and `expected` in the wire form of torch dtype `dtype`, judged under `bound`."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    want = wire_dtype(dtype)
    if actual.dtype != want or expected.dtype != want:
        raise AssertionError(f"wire dtypes {actual.dtype}/{expected.dtype}, want {want} for {dtype}")
    a, e = actual.reshape(-1), expected.reshape(-1)
    total = a.size
    if dtype == "bool":
        same = a == e
        dist = (a != e).astype(np.float64)
        va, ve = a.astype(np.float64), e.astype(np.float64)
    elif dtype in FORMATS:
        fmt = FORMATS[dtype]
        ba, be = a.view(fmt.uint), e.view(fmt.uint)
        same = ba == be
        va, ve = decode(ba, fmt), decode(be, fmt)
        dist = np.abs(_ordered(ba, fmt.bits) - _ordered(be, fmt.bits)).astype(np.float64)
        both_nan = np.isnan(va) & np.isnan(ve)
        dist = np.where(both_nan, 0.0, np.where(np.isnan(va) | np.isnan(ve), np.inf, dist))
    else:                                   # integers
        same = a == e
        va, ve = a.astype(np.float64), e.astype(np.float64)
        dist = np.abs(a.astype(object) - e.astype(object)).astype(np.float64) if total else np.zeros(0)
    with np.errstate(invalid="ignore"):
        diff = np.abs(va - ve)
        diff = np.where(same, 0.0, diff)
        if bound.exact:
            good = same
        else:
            good = same | (dist <= bound.ulps)
            if bound.atol or bound.rtol:
                good |= diff <= bound.atol + bound.rtol * np.abs(ve)
    bad = np.flatnonzero(~good)
    first = ""
    if bad.size:
        i = int(bad[0])
        idx = np.unravel_index(i, actual.shape)
        first = f"{tuple(int(j) for j in idx)}: got {va[i]!r}, expected {ve[i]!r}"
    finite = diff[np.isfinite(diff)]
    return Comparison(equal=int(same.sum()), total=int(total),
                      max_abs=float(finite.max()) if finite.size else (0.0 if not diff.size else float("inf")),
                      max_ulps=float(dist.max()) if dist.size else 0.0,
                      ok=not bad.size, first_bad=first)

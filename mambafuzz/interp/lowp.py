"""Floats the interpreter keeps as raw bits (bf16, the fp8 formats): exact decoding, correct rounding.

Triton's interpreter stores a bf16 or fp8 value as its unsigned-integer bit
pattern and hands those integers to numpy, so a bf16 product multiplies two
16-bit patterns (``1.5 * 2.0`` gives ``0.0``) and an fp32 -> bf16 cast
truncates.  Compiled Triton on NVIDIA computes bf16 add, sub, mul, fma, min
and max as the exact result rounded once to bf16 (round to nearest, ties to
even), and converts to bf16 and fp8 the same way, fp8 saturating to its
largest finite value (``cvt.rn.satfinite``).  This module is the numpy half of
that: ``decode`` bits to float64 (exact for every format here), ``encode``
float64 to bits with one rounding.  float64 holds every sum and product of
two such values exactly (or, where an exponent gap exceeds 40 bits, so close
that rounding to 8 bits of mantissa cannot tell), so "compute in float64,
encode once" is compiled Triton's single rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FORMATS", "Format", "decode", "encode"]

RTNE, RTZ = "rtne", "rtz"


@dataclass(frozen=True)
class Format:
    """A binary float format: its widths, bias and what its top exponent and sign bit mean."""

    name: str            # Triton's dtype name
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    style: str           # "ieee": top exponent is inf/NaN; "fn": only S.1111.111 is NaN, no inf;
    #                      "fnuz": no inf, 0x80 is the one NaN, no negative zero; "finite": every pattern finite
    saturates: bool      # compiled conversions into it clamp to the largest finite value

    @property
    def storage(self) -> np.dtype:
        return np.dtype(np.uint16 if self.bits == 16 else np.uint8)

    @property
    def sign(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_finite(self) -> float:
        top = (1 << self.exp_bits) - 1
        if self.style == "ieee":
            return (2.0 - 2.0 ** -self.man_bits) * 2.0 ** (top - 1 - self.bias)
        if self.style == "fn":      # the all-ones mantissa at the top exponent is NaN
            return (2.0 - 2.0 ** (1 - self.man_bits)) * 2.0 ** (top - self.bias)
        return (2.0 - 2.0 ** -self.man_bits) * 2.0 ** (top - self.bias)

    @property
    def nan(self) -> int:
        if self.style == "ieee":
            return (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))
        if self.style == "fn":
            return (1 << (self.bits - 1)) - 1
        if self.style == "fnuz":
            return self.sign
        return (1 << (self.bits - 1)) - 1     # "finite": no NaN; the largest value stands in

    @property
    def inf(self) -> int | None:
        return ((1 << self.exp_bits) - 1) << self.man_bits if self.style == "ieee" else None


FORMATS = {f.name: f for f in (
    Format("bf16", 16, 8, 7, 127, "ieee", False),
    Format("fp8e5", 8, 5, 2, 15, "ieee", True),
    Format("fp8e4nv", 8, 4, 3, 7, "fn", True),
    Format("fp8e4b15", 8, 4, 3, 15, "finite", True),
    Format("fp8e5b16", 8, 5, 2, 16, "fnuz", True),
    Format("fp8e4b8", 8, 4, 3, 8, "fnuz", True),
)}


def decode(bits, fmt: Format) -> np.ndarray:
    """The float64 value of each bit pattern (exact)."""
    b = np.asarray(bits).astype(np.int64) & ((1 << fmt.bits) - 1)
    negative = (b & fmt.sign) != 0
    exp = (b >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = (b & ((1 << fmt.man_bits) - 1)).astype(np.float64)
    top = (1 << fmt.exp_bits) - 1
    normal = np.ldexp(1.0 + man / (1 << fmt.man_bits), (exp - fmt.bias).astype(np.int32))
    sub = np.ldexp(man, fmt.emin - fmt.man_bits)
    value = np.where(exp == 0, sub, normal)
    value = np.where(negative, -value, value)
    if fmt.style == "ieee":
        value = np.where((exp == top) & (man == 0), np.where(negative, -np.inf, np.inf), value)
        value = np.where((exp == top) & (man != 0), np.nan, value)
    elif fmt.style == "fn":
        value = np.where((exp == top) & (man == (1 << fmt.man_bits) - 1), np.nan, value)
    elif fmt.style == "fnuz":
        value = np.where(b == fmt.sign, np.nan, value)
    return value


def encode(values, fmt: Format, rounding: str = RTNE, saturate: bool | None = None) -> np.ndarray:
    """Bit patterns of `fmt` for float64 `values`, rounded once (ties to even, or toward zero).

    Past the largest finite value: infinity for IEEE formats, or the largest
    finite value where `saturate` (default: what compiled conversions into the
    format do) or where rounding toward zero; NaN in formats without infinity.
    """
    x = np.asarray(values, dtype=np.float64)
    saturate = fmt.saturates if saturate is None else saturate
    negative = np.signbit(x)
    a = np.abs(x)
    finite = np.isfinite(a)
    safe = np.where(finite, a, 0.0)
    _, e2 = np.frexp(safe)
    e = np.maximum(e2.astype(np.int64) - 1, fmt.emin)                 # exponent of the leading bit
    quantum_exp = (e - fmt.man_bits).astype(np.int32)
    scaled = np.ldexp(safe, -quantum_exp)                              # exact: a power-of-two scaling
    n = np.rint(scaled) if rounding == RTNE else np.trunc(scaled)
    rounded = np.ldexp(n, quantum_exp)
    too_big = rounded > fmt.max_finite
    # the field values of a representable magnitude
    _, r2 = np.frexp(rounded)
    re = np.maximum(r2.astype(np.int64) - 1, fmt.emin)
    subnormal = rounded < 2.0 ** fmt.emin
    mant = np.ldexp(rounded, (fmt.man_bits - re).astype(np.int32))
    mant = np.where(subnormal, mant, mant - (1 << fmt.man_bits))
    field_exp = np.where(subnormal, 0, re + fmt.bias)
    bits = (field_exp.astype(np.int64) << fmt.man_bits) | np.rint(mant).astype(np.int64)
    max_bits = _max_finite_bits(fmt)
    if fmt.inf is not None and not saturate:
        overflow = fmt.inf if rounding == RTNE else max_bits
    elif saturate or rounding == RTZ:
        overflow = max_bits
    else:
        overflow = fmt.nan
    bits = np.where(too_big, overflow, bits)
    infinite = ~finite & ~np.isnan(x)
    if fmt.inf is not None and not saturate:
        bits = np.where(infinite, fmt.inf, bits)
    else:
        bits = np.where(infinite, max_bits if saturate else fmt.nan, bits)
    signed = np.where(negative, bits | fmt.sign, bits)
    if fmt.style == "fnuz":           # no negative zero: -0 is +0, and the sign alone is NaN
        signed = np.where((bits == 0), 0, signed)
    signed = np.where(np.isnan(x), fmt.nan, signed)
    return signed.astype(fmt.storage)


def _max_finite_bits(fmt: Format) -> int:
    top = (1 << fmt.exp_bits) - 1
    full = (1 << fmt.man_bits) - 1
    if fmt.style == "ieee":
        return ((top - 1) << fmt.man_bits) | full
    if fmt.style == "fn":
        return (top << fmt.man_bits) | (full - 1)
    return (top << fmt.man_bits) | full

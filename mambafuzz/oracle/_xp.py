"""One array vocabulary for the float64 update oracles: numpy arrays, or torch tensors on any device.

The update oracles carry a per-element error bound over whole pools ([rows, heads, dims]) token by
token: seconds of numpy on a host, milliseconds on the GPU the case runs on.  So they are written once
against the few operations below, and take either kind of array.  Tensors are driven through their own
methods (``exp``, ``where``, ``new_zeros``...), so this package still imports no torch.  What the
oracles plan (which row reads and stores which slot) stays numpy: small arrays, checked on the host.
"""
from __future__ import annotations

from operator import methodcaller

import numpy as np


class _Numpy:
    def index(self, values):
        return np.asarray(values)

    def array(self, values):
        return np.asarray(values, dtype=np.float64)

    def zeros(self, shape, f32: bool = False):
        return np.zeros(shape, dtype=np.float32 if f32 else np.float64)

    copy, f32 = staticmethod(methodcaller("copy")), staticmethod(methodcaller("astype", np.float32))
    exp, sqrt, where = staticmethod(np.exp), staticmethod(np.sqrt), staticmethod(np.where)

    @staticmethod
    def abs_(a):
        return np.abs(a, out=a)

    @staticmethod
    def softplus(v):
        return np.logaddexp(0.0, v)

    @staticmethod
    def sum(a, axis, keepdims=False):
        return a.sum(axis, keepdims=keepdims)


class _Tensors:
    """torch tensors on `like`'s device: every new array made there, with `like`'s methods."""

    copy, f32, exp, sqrt, abs_ = (staticmethod(methodcaller(m)) for m in ("clone", "float", "exp", "sqrt", "abs_"))

    def __init__(self, like):
        self.like = like
        empty = like.new_empty(0)
        self._f32, self._f64 = empty.float().dtype, empty.double().dtype
        self._long, self._bool = empty.long().dtype, empty.bool().dtype

    def index(self, values):
        """A numpy index (ints or bools) on the device."""
        values = np.asarray(values)
        return self.like.new_tensor(values, dtype=self._bool if values.dtype == bool else self._long)

    def array(self, values):
        """Numpy floats on the device, as float64."""
        return self.like.new_tensor(np.asarray(values, dtype=np.float64), dtype=self._f64)

    def zeros(self, shape, f32: bool = False):
        return self.like.new_zeros(tuple(shape), dtype=self._f32 if f32 else self._f64)

    def where(self, cond, a, b):
        cond = cond if not isinstance(cond, np.ndarray) else self.index(cond)
        return a.where(cond, b)

    @staticmethod
    def softplus(v):
        return v.logaddexp(v.new_zeros(()))

    @staticmethod
    def sum(a, axis, keepdims=False):
        return a.sum(axis, keepdim=keepdims)


NUMPY = _Numpy()


def of(array):
    """The vocabulary of `array`'s kind: numpy's for an ndarray, else a torch tensor's."""
    return NUMPY if isinstance(array, np.ndarray) else _Tensors(array)

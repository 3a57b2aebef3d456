"""Input validation shared by the oracle modules (private).

Every helper raises :class:`OracleError` naming the argument and the offending
value; none lets a numpy ``IndexError``/``ValueError``/``TypeError`` escape.
"""
from __future__ import annotations

import operator

import numpy as np

from .errors import OracleError

_INT64_MAX = np.iinfo(np.int64).max


def int_scalar(name: str, value) -> int:
    """``value`` as a Python int; bools, floats and non-integers are refused."""
    if isinstance(value, (bool, np.bool_)):
        raise OracleError(f"{name} must be an integer, got bool {value!r}")
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise OracleError(f"{name} must be a scalar integer, got an array of shape {value.shape}")
        value = value[()]
        if isinstance(value, np.bool_):
            raise OracleError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise OracleError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def int_array(name: str, value, ndim: int = 1) -> np.ndarray:
    """``value`` as an int64 array with ``ndim`` dimensions (a new array or a view).

    Integer dtypes are accepted (uint64 only if every value fits in int64);
    empty sequences of any numeric dtype are accepted; bool, float, object and
    anything else are refused.
    """
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise OracleError(f"{name} must be an integer array: {exc}") from None
    if arr.ndim != ndim:
        raise OracleError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    kind = arr.dtype.kind
    if arr.size == 0 and kind in "iuf":
        return arr.astype(np.int64)
    if kind == "b" or kind not in "iu":
        raise OracleError(f"{name} must have an integer dtype, got {arr.dtype}")
    if kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > _INT64_MAX:
        raise OracleError(f"{name} has a value too large for int64: {int(arr.max())}")
    return arr.astype(np.int64, copy=False)


def int_arrays(**named) -> list[np.ndarray]:
    """Several 1-D int64 arrays that must have one length (in the order given)."""
    arrs = [int_array(name, value) for name, value in named.items()]
    if len({a.size for a in arrs}) > 1:
        raise OracleError("mismatched array lengths: " + ", ".join(f"{n} has {a.size}" for n, a in zip(named, arrs)))
    return arrs


def arena(name: str, value) -> np.ndarray:
    """A 1-D, C-contiguous ``np.uint8`` array (returned unchanged)."""
    if not isinstance(value, np.ndarray):
        raise OracleError(f"{name} must be a numpy uint8 array, got {type(value).__name__}")
    if value.dtype != np.uint8:
        raise OracleError(f"{name} must have dtype uint8, got {value.dtype}")
    if value.ndim != 1:
        raise OracleError(f"{name} must be 1-D, got shape {value.shape}")
    if not value.flags.c_contiguous:
        raise OracleError(f"{name} must be C-contiguous (byte stride 1), got strides {value.strides}")
    return value


def out_arena(out, snapshot: np.ndarray) -> np.ndarray:
    """``out``: a writable arena the size of ``snapshot`` that does not overlap it."""
    arena("out", out)
    if out.size != snapshot.size:
        raise OracleError(f"out has {out.size} bytes but the snapshot has {snapshot.size}")
    if not out.flags.writeable:
        raise OracleError("out is read-only")
    if np.may_share_memory(out, snapshot):
        raise OracleError("out shares memory with the snapshot; expectations must be built in a separate array")
    return out


def first_bad(mask: np.ndarray) -> int:
    """Index of the first True in a 1-D bool mask."""
    return int(np.flatnonzero(mask)[0])

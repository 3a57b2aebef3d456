"""Loop bounds loaded from memory (Triton 3.5, 3.6).

The interpreter holds a scalar as a shape-(1,) array.  Its patch of the
language, redone at every launch (``_patch_lang``), makes
``tensor.__index__`` ``int(data)``, which numpy refuses for 1-d arrays, so
``range(0, n, BLOCK)`` over a loaded ``n`` raises TypeError; 3.7+ squeezes
first.  3.5/3.6 also leave ``tl.condition`` without ``__bool__``, so
``while tl.condition(i < n)`` never ends.  Each mend here is applied only
where a probe finds the installed release broken.
"""
from __future__ import annotations

import numpy as np
import triton.language as tl

__all__ = ["MENDS"]


class _Scalar:
    """Stands in for a tensor holding one loaded scalar."""

    class handle:
        data = np.zeros(1, dtype=np.int32)


def _index_broken() -> bool:
    index = getattr(tl.core.tensor, "__index__", None)
    try:
        return index is not None and index(_Scalar()) != 0
    except TypeError:
        return True


def _condition_broken() -> bool:
    condition = getattr(tl.core, "condition", None)
    return condition is not None and bool(condition(False))


def _mended_index(interpreters):
    def __index__(self):
        data = self.handle.data
        if data.size == 1 and data.dtype.kind in "biu":   # a scalar: int() of a 1-d array fails
            return int(data.reshape(()))
        return interpreters(self)                           # anything else fails as it did
    return __index__


def _condition_bool(self):
    return bool(self.condition)


# (the class, the attribute, a probe: is the release broken, the mend given what is there now)
MENDS = (
    (lambda: tl.core.tensor, "__index__", _index_broken, _mended_index),
    (lambda: tl.core.condition, "__bool__", _condition_broken, lambda _: _condition_bool),
)

"""Exceptions raised by the oracle.

Every bad input raises :class:`OracleError` (a ``ValueError``) whose message
names the problem and the offending value.  A batch that is well-formed but
ill-posed (two copies touch the same byte and one of them writes it) raises
:class:`IllPosedBatch`: that is a finding about the caller, not a kernel bug.
"""
from __future__ import annotations

__all__ = ["OracleError", "IllPosedBatch"]


class OracleError(ValueError):
    """Bad input to the oracle."""


class IllPosedBatch(OracleError):
    """A byte written by one copy is read or written by another copy.

    Attributes:
        first: the copy that writes the byte (an int for batch copies, a
            ``(request, state)`` tuple for state copies).
        second: the other copy, which reads or writes the same byte.
        offset: the first (lowest) conflicting byte offset in the arena.
        access: ``"reads"`` or ``"writes"``: what ``second`` does to the byte.
    """

    def __init__(self, first, second, offset: int, access: str = "reads"):
        self.first = first
        self.second = second
        self.offset = int(offset)
        self.access = access
        super().__init__(
            f"ill-posed batch: copy {_fmt(first)} writes byte {self.offset} "
            f"that copy {_fmt(second)} {access}"
        )

    def __reduce__(self):
        return (type(self), (self.first, self.second, self.offset, self.access))


def _fmt(ident) -> str:
    if isinstance(ident, tuple):
        return "(request " + ", state ".join(str(int(v)) for v in ident) + ")"
    return str(ident)

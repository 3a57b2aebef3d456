"""What the race recorder reports: witnesses of a hazard and the sentence that explains it.

An :class:`Access` is one lane's access (program, lane, epoch, source line,
address); a :class:`Hazard` names the byte and one or two accesses that
break a rule (docs/contracts.md#races).  The text is meant to be read without the kernel
open: it says which lanes or programs, which lines, and why the pair races.
"""
from __future__ import annotations

import linecache
import os
from dataclasses import asdict, dataclass
from typing import Optional

__all__ = ["Access", "Hazard", "OutOfBoundsAccess", "SAME_VALUE_NOTE", "source_line", "explain_out_of_bounds",
           "explain_misaligned", "explain_intra_program", "explain_cross_program"]

VERBS = {"load": "loads", "store": "stores", "atomic": "atomically updates"}


@dataclass(frozen=True)
class Access:
    """One lane's access, as a witness of a hazard."""
    op: str                     # 'load' | 'store' | 'atomic'
    program: tuple              # (x, y, z)
    lane: int                   # flat element index within lane_shape
    lane_shape: tuple           # shape of the block op (() for scalars)
    epoch: int                  # barriers seen so far in this program
    line: str                   # "file.py:123: <source text>"
    elem_size: int              # bytes per element
    address: int                # start address of this lane's element

    def to_json(self) -> dict:
        d = asdict(self)
        d["program"] = [int(v) for v in self.program]
        d["lane_shape"] = [int(v) for v in self.lane_shape]
        return d


@dataclass(frozen=True)
class Hazard:
    kind: str                   # 'intra-program' | 'cross-program' | 'misaligned' | 'out-of-bounds'
    address: int                # byte address
    region: Optional[str]       # registered region containing it (None if none)
    offset: Optional[int]       # byte offset within that region
    first: Access
    second: Optional[Access]
    explanation: str
    # every store to the byte left it as it was (it stored the value already there): no reader can
    # see a change; ranked below hazards that can change bytes
    same_value: bool = False

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "address": int(self.address),
            "region": self.region,
            "offset": None if self.offset is None else int(self.offset),
            "first": self.first.to_json(),
            "second": None if self.second is None else self.second.to_json(),
            "explanation": self.explanation,
            "same_value": self.same_value,
        }


class OutOfBoundsAccess(Exception):
    """A masked-on lane would touch bytes outside every registered region."""

    def __init__(self, hazard: Hazard):
        super().__init__(hazard.explanation)
        self.hazard = hazard


# --------------------------------------------------------------------------
# source lines
# --------------------------------------------------------------------------
# the checkout's root (above mambafuzz/): kernel files are shown relative to it
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def display_path(filename: str) -> str:
    """`filename` relative to the checkout or the working directory, '/'-separated; else as given."""
    path = os.path.abspath(filename)
    for base in (_ROOT, os.getcwd() + os.sep):
        if path.startswith(base):
            return path[len(base):].replace(os.sep, "/")
    return filename


def source_line(filename: str, lineno: int) -> str:
    """'file.py:123: source text', the form of :attr:`Access.line`."""
    text = linecache.getline(filename, lineno).strip()
    return f"{display_path(filename)}:{lineno}: {text}"


def site(access: Access) -> str:
    """'file.py:123' of an access (its line without the source text)."""
    return access.line.split(": ", 1)[0]


def program_text(program) -> str:
    return "(" + ",".join(str(int(v)) for v in program) + ")"


# --------------------------------------------------------------------------
# explanations; `where` is the byte as 'region+offset' (or hex when in no region)
# --------------------------------------------------------------------------
def explain_out_of_bounds(access: Access, where: str, live: int) -> str:
    """`where`: the bytes beside or inside the nearest region (``Regions.outside_text``); `live`: regions known."""
    return (f"program {program_text(access.program)}: lane {access.lane} {VERBS[access.op]} "
            f"{access.elem_size} byte(s) at {hex(access.address)} ({site(access)}), {where}; outside "
            f"every live region ({live} known); blocked before it touched memory")


def explain_misaligned(access: Access, where: str) -> str:
    return (f"program {program_text(access.program)}: lane {access.lane} {VERBS[access.op]} "
            f"{access.elem_size} bytes at {where} ({site(access)}); "
            f"the address is not a multiple of the element size {access.elem_size}")


def _second_verb(second: Access) -> str:
    return "stores it too" if second.op == "store" else "loads it"


def explain_intra_program(store: Access, other: Access, where: str) -> str:
    """Shapes are named only when they differ: lane 0 of () and lane 0 of (4,) are different lanes."""
    same_shape = store.lane_shape == other.lane_shape
    first = f"lane {store.lane}" + ("" if same_shape else f" of shape {store.lane_shape}")
    second = f"lane {other.lane}" + ("" if same_shape else f" of shape {other.lane_shape}")
    return (f"program {program_text(store.program)}: {first} stores byte {where} ({site(store)}) "
            f"and {second} {_second_verb(other)} ({site(other)}) in the same barrier epoch "
            f"{store.epoch}; no ordering between lanes without tl.debug_barrier()")


SAME_VALUE_NOTE = ("; every store to that byte wrote the value already there, so no reader could see "
                   "a change (a hazard that can change bytes ranks above it)")


def explain_cross_program(store: Access, other: Access, where: str) -> str:
    return (f"program {program_text(store.program)} (lane {store.lane}) stores byte {where} "
            f"({site(store)}) and program {program_text(other.program)} (lane {other.lane}) "
            f"{_second_verb(other)} ({site(other)}) in the same launch; programs of one launch are "
            f"not ordered (only atomics may share bytes)")

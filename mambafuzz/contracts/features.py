"""The bucket primitives a contract's coverage features are made of (``Contract.features``).

A feature is a name and a bucket label; a contract declares its features'
buckets in display order (``Contract.buckets``) and labels one case with
them.  A feature whose case touches several rows, requests or buffers gets
every label it saw, joined by SEP in bucket order (``joined``).  The race map
needs one (shift, size) per case: ``shift_size`` gives it, under RACE_SHIFT /
RACE_SIZE, next to the "shift" and "size" features.
"""
from __future__ import annotations

SEP = ","
HUGE = 1 << 31  # a byte at or past 2 GiB: where 32-bit address arithmetic wraps

SHIFT_EDGES = ((0, "0"), (1, "1"), (2, "2-3"), (4, "4-7"), (8, "8-15"), (16, "16-63"), (64, "64-255"),
               (256, "256-1023"), (1024, ">=1K"))
SIZE_EDGES = ((0, "0"), (1, "1-7"), (8, "8-63"), (64, "64-511"), (512, "512-4095"), (4096, "4K-32K"),
              (32768, ">=32K"))
COUNT_EDGES = ((0, "0"), (1, "1"), (2, "2-3"), (4, "4-15"), (16, ">=16"))

# bucket lists shared by several contracts (labels never hold SEP)
SHIFTS = ("none",) + tuple(label for _, label in SHIFT_EDGES)
SIZES = tuple(label for _, label in SIZE_EDGES)
COUNTS = tuple(label for _, label in COUNT_EDGES)
ALIGNS = ("1", "2", "4", "8", ">=16")
ELEMS = ("1", "2", "4", "8")
NO_YES = ("no", "yes")

# the race map's (shift, size) of a case ride along with its features under these names (not counted,
# not sent to Hypothesis)
RACE_SHIFT, RACE_SIZE = "_race_shift", "_race_size"


def bucket(value: int, edges) -> str:
    """The label of the last edge at or below `value`."""
    label = edges[0][1]
    for low, name in edges:
        if value >= low:
            label = name
    return label


def align_label(offset: int) -> str:
    """The largest power of two dividing an arena offset (the arena itself is 64-byte aligned), 16 and up as one."""
    for a, label in ((16, ">=16"), (8, "8"), (4, "4"), (2, "2")):
        if offset % a == 0:
            return label
    return "1"


def joined(labels, order) -> str:
    """Several labels of one feature as one: those in `order` (its buckets) in that order, then the rest sorted."""
    seen = set(labels)
    known = [label for label in order if label in seen]
    return SEP.join(known + sorted(seen - set(order)))


def labels_of(value: str) -> list[str]:
    """The labels a (joined) feature value holds."""
    return value.split(SEP) if value else []


def shift_size(pieces) -> dict[str, str]:
    """The "shift" and "size" features of every piece (a row, a state of a request, a slot), and the
    race map's one (shift, size): the tightest overlap's (a self-copy only when nothing else overlaps),
    or "none" and the largest piece when nothing overlaps.  `pieces` are (overlaps, shift bytes, bytes)."""
    shifts = [bucket(shift, SHIFT_EDGES) if over else "none" for over, shift, _ in pieces]
    sizes = [bucket(size, SIZE_EDGES) for _, _, size in pieces]
    overlapping = sorted((shift == 0, shift, -size) for over, shift, size in pieces if over)
    if overlapping:
        _, shift, size = overlapping[0]
        race = (bucket(shift, SHIFT_EDGES), bucket(-size, SIZE_EDGES))
    else:
        race = ("none", bucket(max((size for _, _, size in pieces), default=0), SIZE_EDGES))
    return {"shift": joined(shifts or ["none"], SHIFTS), "size": joined(sizes or ["0"], SIZES),
            RACE_SHIFT: race[0], RACE_SIZE: race[1]}

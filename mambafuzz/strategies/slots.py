"""Slot buffers and index arrays for `slot_copy` and `slot_fork`, drawn the way snapshot bugs hide.

Index bugs hide where a destination slot is another pair's source: chains,
swaps, longer cycles, a pair copying a slot onto itself, a fork child that is
another pair's parent.  Addressing bugs hide in padded slot and layer strides,
slot-major buffers, odd element sizes and slots past 2 GiB.  So pairs are
drawn as a small graph first (each pair's source is fresh, shared with an
earlier pair, one of the destinations, or its own destination), then the
graph's labels are spread over the slots by a permutation.

``chains="forbidden"`` draws no slot that is both a destination and a source
(no chains, swaps, cycles or self-copies).  ``ill_posed=True`` adds a pair
that writes an already written slot from another source.  One case in three
(CPU; eight on a GPU) puts bytes of the first buffer past 2 GiB (a sparse
image, cheap on the CPU too), one address term at a time, where a 32-bit
product or sum wraps (``HUGE_TERMS``): the layer offset (layers 1.. past
2 GiB), the slot offset (the highest named slot past 2 GiB: on the CPU by a
slot number near 2^31 / slot stride, so no copy walks a huge stride; on the
GPU by a huge stride) or the element offset (two layers and a slot each
below 2 GiB whose sum is past it).
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.slot_copy import SlotCopyCase
from mambafuzz.cases.slot_fork import SlotForkCase
from mambafuzz.oracle import SlotBuffer

from .perturb import maybe_perturb
from .profiles import Profile, draw_wide

ELEM_SIZES = (2, 1, 4, 8)
# where a pair's source slot comes from (another pair's destination twice as often as the others)
SOURCE_KINDS = ("fresh", "destination", "shared", "destination", "own")
MAX_FANOUT = 8
HUGE_OFFSET = 1 << 31           # a slot at or past 2 GiB: where 32-bit offsets wrap
HUGE_LIMIT = 7 << 30            # keep a huge buffer inside the sparse arena limit (8 GiB)
GAP = 64                        # bytes between buffers
# the address terms a huge case puts past 2 GiB (features.py names the same ones)
HUGE_TERMS = ("slot", "layer", "element")


def _limits(profile: Profile) -> dict:
    """Pairs, destinations, layers and buffers per case: few on the CPU interpreter (every program is
    interpreted), more on a GPU (races need many programs); one case in `huge_one_in` past 2 GiB."""
    if profile.max_rows <= 16:  # the CPU profile
        return {"pairs": 6, "children": 8, "layers": 3, "buffers": 2, "huge_slots": False, "huge_one_in": 3}
    return {"pairs": 48, "children": 256, "layers": 8, "buffers": 3, "huge_slots": True, "huge_one_in": 8}


@st.composite
def pair_graph(draw, pairs: int, fanout: int, chains: str = "allowed", ill_posed: bool = False):
    """(sources [P], destinations [P][N]) as labels 0..K-1 (spread over slots later).

    Destination (i, n) is label ``i * N + n``: all distinct.  A source is a
    fresh label, an earlier pair's source (read twice), some pair's
    destination (a chain; a swap or cycle when those pairs read back), or one
    of its own destinations (a self-copy).
    """
    kinds = SOURCE_KINDS if chains == "allowed" else ("fresh", "shared")
    # (forbidden: a shared source is an earlier pair's, itself fresh; no destination is ever read)
    children = [[i * fanout + n for n in range(fanout)] for i in range(pairs)]
    fresh = pairs * fanout
    sources = []
    for i in range(pairs):
        kind = draw(st.sampled_from(kinds))
        if kind == "destination" and pairs > 1:  # another pair's: a chain, or a swap / cycle when it reads back
            j = (i + draw(st.integers(1, pairs - 1))) % pairs
            sources.append(children[j][draw(st.integers(0, fanout - 1))])
        elif kind in ("own", "destination"):
            sources.append(children[i][draw(st.integers(0, fanout - 1))])
        elif kind == "shared" and i > 0:
            sources.append(sources[draw(st.integers(0, i - 1))])
        else:
            sources.append(fresh)
            fresh += 1
    if ill_posed:  # one more pair, from a fresh source, onto a slot some pair already writes
        victim = children[draw(st.integers(0, pairs - 1))][draw(st.integers(0, fanout - 1))]
        sources.append(fresh)
        children.append([victim] + list(range(fresh + 1, fresh + fanout)))
    return sources, children


def _spread(draw, sources, children, extra_slots: int):
    """Labels onto slot numbers by a permutation of range(labels + extra): (src, dst, slots)."""
    labels = sorted(set(sources) | {c for row in children for c in row})
    slots = len(labels) + extra_slots
    perm = draw(st.permutations(range(slots)))
    where = {label: perm[k] for k, label in enumerate(labels)}
    return [where[s] for s in sources], [[where[c] for c in row] for row in children], slots


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def draw_slot_bytes(draw, profile: Profile, elem: int) -> int:
    """Inside a composite strategy: one slot's data bytes, now and then wide (over several 1 KiB chunks of
    the kernels), else a product of one or two small extents."""
    if draw_wide(draw, profile):
        return draw(st.integers(1024 // elem + 1, max(1024 // elem + 1, profile.wide_bytes // elem))) * elem
    slot_bytes = elem
    for d in draw(st.lists(st.integers(1, profile.max_inner), min_size=1, max_size=2)):
        slot_bytes *= d
    return slot_bytes


@st.composite
def slot_shape(draw, profile: Profile, layers_max: int) -> dict:
    """One buffer's element size, slot bytes, layer count, order and padding (strides come with the slot count)."""
    elem = draw(st.sampled_from(ELEM_SIZES))
    return {"elem": elem, "slot_bytes": draw_slot_bytes(draw, profile, elem), "layers": draw(st.integers(1, layers_max)),
            "slot_major": draw(st.integers(0, 5)) == 5,
            "slot_pad": draw(st.sampled_from([0, 1, 3, 8])) * elem,
            "layer_pad": draw(st.sampled_from([0, 0, 1, 5])) * elem}


def _strides(shape: dict, slots: int) -> tuple[int, int]:
    sb, layers = shape["slot_bytes"], shape["layers"]
    if shape["slot_major"]:
        layer_stride = sb + shape["slot_pad"]
        return layers * layer_stride + shape["layer_pad"], layer_stride
    slot_stride = sb + shape["slot_pad"]
    return slot_stride, slots * slot_stride + shape["layer_pad"]


def _huge(draw, shape: dict, slots: int, top: int, by_slot: bool) -> tuple[int, int, int]:
    """(slot stride, layer stride, layers) of a layer-major buffer with bytes past 2 GiB.

    By layer: layer 1 (and 2) start past 2 GiB, slots stay small.  By slot
    (GPU profiles only): slot `top` starts past 2 GiB, so each slot's stride
    is a fraction of 2 GiB; a kernel that copies whole strides (SLOT-PAD) then
    moves gigabytes, which the interpreter cannot do in useful time (the CPU
    gets there by slot number instead: ``_far_slot``).
    """
    if not by_slot:
        slot_stride, _ = _strides({**shape, "slot_major": False}, slots)
        layer_stride = _align_up(max(HUGE_OFFSET, slots * slot_stride), 64) + draw(st.sampled_from([0, 64, 4096]))
        return slot_stride, layer_stride, max(2, min(shape["layers"], HUGE_LIMIT // layer_stride))
    slot_stride = max(_align_up(-(-HUGE_OFFSET // top), 64), _align_up(shape["slot_bytes"], 64))
    layer_stride = slots * slot_stride + shape["layer_pad"]
    layers = max(1, min(shape["layers"], HUGE_LIMIT // layer_stride))
    return slot_stride, layer_stride, layers


def _far_slot(draw, term: str, shapes: list[dict]) -> int | None:
    """The slot number that the highest named slot becomes, with `shapes[0]` set up for `term`.

    slot: its offset in buffer 0 is past 2 GiB (``slot * slot_stride``); element:
    buffer 0 has two layers, the slot's offset is about 1 GiB and the layer
    stride just above it, so each term is below 2 GiB and their sum past it.
    The strides stay small: a kernel copying whole strides moves kilobytes.
    None when buffer 0's slot stride is 1 byte (the slot number would not
    fit an int32 index).
    """
    if term == "element":
        shapes[0].update(slot_major=False, layers=2)
    slot_stride = _strides(shapes[0], 1)[0]
    if slot_stride < 2:
        return None
    reach = HUGE_OFFSET if term == "slot" else HUGE_OFFSET // 2
    return -(-reach // slot_stride) + draw(st.integers(0, 2))


def _fit(shapes: list[dict], slots: int, room: int) -> list[dict]:
    """The shapes whose buffers fit in `room` bytes together, layer-major ones with layers cut to fit
    (the first always kept: it is the huge one)."""
    kept = []
    for b, shape in enumerate(shapes):
        slot_stride, layer_stride = _strides(shape, slots)
        if shape["slot_major"]:
            need = slots * slot_stride + GAP
        else:
            layers = max(1, min(shape["layers"], room // layer_stride))
            shape = {**shape, "layers": layers}
            need = layers * layer_stride + GAP
        if b and need > room:
            continue
        kept.append(shape)
        room -= need
    return kept


@st.composite
def slot_cases(draw, profile: Profile, forked: bool = False, chains: str = "allowed", ill_posed: bool = False):
    """A SlotCopyCase (or SlotForkCase with ``forked``) for ``profile``."""
    lim = _limits(profile)
    pairs = draw(st.integers(1, lim["pairs"]))
    fanout = draw(st.integers(1, max(1, min(MAX_FANOUT, lim["children"] // pairs)))) if forked else 1
    sources, children = draw(pair_graph(pairs, fanout, chains, ill_posed))
    src, dst, slots = _spread(draw, sources, children, draw(st.sampled_from([0, 1, 3])))
    top = max(src + [d for row in dst for d in row])
    huge = draw(st.integers(0, lim["huge_one_in"] - 1)) == lim["huge_one_in"] - 1
    term = draw(st.sampled_from(HUGE_TERMS)) if huge else None
    if term == "slot" and lim["huge_slots"] and top == 0:
        term = "layer"  # a huge stride needs a slot above 0
    n_buffers = draw(st.integers(1, lim["buffers"]))
    shapes = [draw(slot_shape(profile, lim["layers"])) for _ in range(n_buffers)]
    if term == "element" or (term == "slot" and not lim["huge_slots"]):
        far = _far_slot(draw, term, shapes)
        if far is None:
            term = "layer"
        else:  # the highest named slot renumbered; the slots above it stay above it
            src, dst = [far if s == top else s for s in src], [[far if d == top else d for d in row] for row in dst]
            slots, top = slots - top + far, far
            shapes = _fit(shapes, slots, HUGE_LIMIT)
    stretch = term == "layer" or (term == "slot" and lim["huge_slots"])  # buffer 0's strides
    cursor = GAP
    buffers = []
    for b, shape in enumerate(shapes):
        if b == 0 and stretch:
            slot_stride, layer_stride, layers = _huge(draw, shape, slots, top, term == "slot")
        else:
            (slot_stride, layer_stride), layers = _strides(shape, slots), shape["layers"]
        elem = shape["elem"]
        offset = _align_up(cursor, 8) + draw(st.integers(0, 7 // elem)) * elem
        buf = SlotBuffer(offset, layers, slots, shape["slot_bytes"], slot_stride, layer_stride, elem)
        buffers.append(buf)
        cursor = offset + buf.nbytes + GAP
    common = dict(arena_size=_align_up(cursor, 64), buffers=tuple(buffers), src_idx=tuple(src),
                  index_dtype=draw(st.sampled_from(["int32", "int64"])), seed=draw(st.integers(0, 2**32 - 1)),
                  perturb=maybe_perturb(draw, profile))
    if forked:
        return SlotForkCase(dst_idx=tuple(tuple(row) for row in dst), **common)
    return SlotCopyCase(dst_idx=tuple(row[0] for row in dst), **common)

"""State scatters after verification (`state_scatter`), drawn where the engines' mask bugs hide.

Index rows are valid (distinct slots), or skipped by each term of the rule:
a step of -1, a step past T, a dst of -1 (a freed row), a dst past S, a row
past R (N drawn above and below R).  A skipped row with a slot in range
shares a valid row's slot half the time (a kernel that drops a term of the
mask then writes one slot twice); slot 0 is live half the time (a freed row
defaulting to 0 clobbers it).  Pools are layer- or slot-major with padded
strides; dense states have padding after each step, window states after each
channel's run.  One case in ``huge_one_in`` renumbers the highest named slot
past 2^31 elements (1- and 2-byte elements) or 2 GiB by its slot number (the
strides stay small: a sparse image).
``ill_posed=True`` gives two valid rows one slot.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.state_scatter import INDEX_DTYPES, StateScatterCase
from mambafuzz.oracle import SlotBuffer, StepStates

from .perturb import maybe_perturb
from .profiles import Profile
from .slots import draw_slot_bytes

ELEM_SIZES = (2, 1, 4, 8)
# what a row of the indices is; a row at r >= R is "row>=R" whatever it holds
KINDS = ("valid", "valid", "step-1", "valid", "step>=T", "dst-1", "dst>=S")
HUGE_OFFSET = 1 << 31
HUGE_LIMIT = 7 << 30   # inside the sparse arena limit (8 GiB)
GAP = 64


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "steps": 4, "layers": 3, "dim": 9, "huge_one_in": 3}
    return {"rows": 48, "steps": 8, "layers": 8, "dim": 256, "huge_one_in": 8}


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _strides(slot_bytes: int, layers: int, slots: int, slot_major: bool, slot_pad: int, layer_pad: int):
    if slot_major:
        layer_stride = slot_bytes + slot_pad
        return layers * layer_stride + layer_pad, layer_stride
    slot_stride = slot_bytes + slot_pad
    return slot_stride, slots * slot_stride + layer_pad


@st.composite
def state_scatter_cases(draw, profile: Profile, scatter: str = "both", ill_posed: bool = False):
    lim = _limits(profile)
    elem = draw(st.sampled_from(ELEM_SIZES))
    if scatter == "window" or (scatter == "both" and draw(st.integers(0, 2)) == 2):
        window = draw(st.integers(2, 6))
        slot_bytes = draw(st.integers(1, lim["dim"])) * (window - 1) * elem
    else:
        window = 0
        slot_bytes = draw_slot_bytes(draw, profile, elem)
    layers = draw(st.integers(1, lim["layers"]))
    rows = draw(st.integers(1, lim["rows"]))
    steps = draw(st.integers(1, lim["steps"]))
    n = max(1, rows + draw(st.sampled_from([0, 0, 1, -1, 2, -2])))
    kinds = [draw(st.sampled_from(KINDS)) if r < rows else "row>=R" for r in range(n)]
    if ill_posed:
        rows, n = max(rows, 2), max(n, 2)
        kinds = ["valid", "valid"] + [k if r < rows else "row>=R" for r, k in enumerate(kinds[2:], 2)]

    # slots as labels first: each valid row its own, a skipped row in range a valid row's or its own
    labels, valid_labels, steps_of = [], [], []
    fresh = 0
    for r, kind in enumerate(kinds):
        if kind == "valid" and not (ill_posed and r == 1):
            labels.append(fresh)
            valid_labels.append(fresh)
            fresh += 1
        elif kind == "valid":
            labels.append(labels[0])  # ill-posed: row 1 writes row 0's slot
        elif kind in ("dst-1", "dst>=S"):
            labels.append(kind)
        elif valid_labels and draw(st.booleans()):
            labels.append(draw(st.sampled_from(valid_labels)))
        else:
            labels.append(fresh)
            fresh += 1
        if kind == "step-1" or (kind == "row>=R" and draw(st.integers(0, 2)) == 0):
            steps_of.append(-1)
        elif kind == "step>=T":
            steps_of.append(steps + draw(st.integers(0, 2)))
        else:
            steps_of.append(draw(st.integers(0, steps - 1)))
    slots = fresh + draw(st.sampled_from([0, 1, 3]))
    slots = max(slots, 1)
    perm = list(draw(st.permutations(range(slots))))
    if valid_labels and draw(st.booleans()):  # slot 0 live: the first valid row's
        k = perm.index(0)
        perm[k], perm[valid_labels[0]] = perm[valid_labels[0]], 0
    dst = [perm[v] if isinstance(v, int) else v for v in labels]

    slot_major = draw(st.integers(0, 5)) == 5
    slot_pad = draw(st.sampled_from([0, 1, 3, 8])) * elem
    layer_pad = draw(st.sampled_from([0, 0, 1, 5])) * elem
    named = [d for d in dst if isinstance(d, int)]
    huge = draw(st.integers(0, lim["huge_one_in"] - 1)) == lim["huge_one_in"] - 1
    if huge and named:
        slot_stride = _strides(slot_bytes, layers, 1, slot_major, slot_pad, layer_pad)[0]
        # past 2^31 elements where the arena allows (a 32-bit slot * stride in elements wraps), else past
        # 2 GiB of bytes; the slot number must fit an int32
        reach = HUGE_OFFSET * elem if HUGE_OFFSET * elem + 4 * slot_stride < HUGE_LIMIT else HUGE_OFFSET
        if reach // slot_stride + 4 >= HUGE_OFFSET:
            reach = HUGE_OFFSET
        if reach // slot_stride + 4 < HUGE_OFFSET:
            top = max(named)
            far = -(-reach // slot_stride) + draw(st.integers(0, 2))
            dst = [far if d == top else d for d in dst]
            slots = slots - top + far
            if not slot_major:
                layer_stride = slots * slot_stride + layer_pad
                layers = max(1, min(layers, HUGE_LIMIT // layer_stride))
    slot_stride, layer_stride = _strides(slot_bytes, layers, slots, slot_major, slot_pad, layer_pad)
    dst = [-1 if d == "dst-1" else slots + draw(st.integers(0, 2)) if d == "dst>=S" else d for d in dst]

    states_pad = draw(st.sampled_from([0, 0, 1, 3]))
    probe = StepStates(0, layers, rows, steps, slot_bytes, elem, states_pad, window)
    sizes = {"states": probe.nbytes}
    pool_probe = SlotBuffer(0, layers, slots, slot_bytes, slot_stride, layer_stride, elem)
    sizes["pool"] = pool_probe.nbytes
    order = ("states", "pool") if draw(st.booleans()) else ("pool", "states")
    cursor, offsets = GAP, {}
    for name in order:
        offsets[name] = _align_up(cursor, 8) + draw(st.integers(0, 7 // elem)) * elem
        cursor = offsets[name] + sizes[name] + GAP
    pool = SlotBuffer(offsets["pool"], layers, slots, slot_bytes, slot_stride, layer_stride, elem)
    return StateScatterCase(
        arena_size=_align_up(cursor, 64), pool=pool, states_offset=offsets["states"], rows=rows, steps=steps,
        dst_idx=tuple(dst), step_idx=tuple(steps_of), window=window, states_pad=states_pad,
        index_dtype=draw(st.sampled_from(INDEX_DTYPES)), seed=draw(st.integers(0, 2**32 - 1)),
        perturb=maybe_perturb(draw, profile))

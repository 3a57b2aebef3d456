"""What the update and prefill strategies share: a pool in the arena (padded slots at an offset) and, one
case in a few, a slot number far enough out that its offset overflows 32 bits, reached by the number, not by
a huge stride."""
from __future__ import annotations

from hypothesis import strategies as st

HUGE = 1 << 31
MAX_SPARSE = 7 << 30  # the sparse arena's reach, less room for the slots after the far one


def arena_pool(draw, slot_bytes: int, elem: int) -> tuple[int, int]:
    """(slot stride, offset) of a pool in the arena: slots padded by 0, 1 or 8 elements (none half the
    time), the pool up to 16 elements in."""
    slot_stride = slot_bytes + elem * draw(st.sampled_from([0, 0, 1, 8]))
    return slot_stride, elem * draw(st.integers(0, 16))


def far_slot(draw, one_in: int, elem: int, offset: int, slot_stride: int, round_up: bool = False) -> int | None:
    """One case in `one_in` (0: none; else None), ``far_slot_number``'s slot."""
    if not one_in or draw(st.integers(0, one_in - 1)) != 0:
        return None
    return far_slot_number(draw, elem, offset, slot_stride, round_up)


def far_slot_number(draw, elem: int, offset: int, slot_stride: int, round_up: bool = False) -> int:
    """A slot of a pool at byte `offset`, slots `slot_stride` bytes apart, past 2^31 elements where the
    sparse arena allows (a kernel's 32-bit slot * stride is in elements), else past 2 GiB of bytes (a byte
    offset in 32 bits): the last slot before the boundary and up to 3 after, or (`round_up`) the first past
    it and up to 2 after (a slot that stops short of it overflows nothing)."""
    reach = HUGE * elem if HUGE * elem + slot_stride * 4 < MAX_SPARSE else HUGE
    if (reach - offset) // slot_stride + 4 >= HUGE - 1:  # slot numbers are int32 too
        reach = HUGE
    if round_up:
        top = -(-(reach - offset) // slot_stride) + draw(st.integers(0, 2))
    else:
        top = (reach - offset) // slot_stride + draw(st.integers(0, 3))
    return min(top, (MAX_SPARSE - offset) // slot_stride - 1)

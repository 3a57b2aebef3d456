"""What the update and prefill strategies share: a slot number far enough out that its offset overflows
32 bits, reached by the number, not by a huge stride."""
from __future__ import annotations

from hypothesis import strategies as st

HUGE = 1 << 31
MAX_SPARSE = 7 << 30  # the sparse arena's reach, less room for the slots after the far one


def far_slot(draw, elem: int, offset: int, slot_stride: int, round_up: bool = False) -> int:
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

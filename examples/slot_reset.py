"""A contract mambafuzz does not ship, in one file of the user's own: zeroing new requests' state slots.

When an engine admits a request with no cached prefix it zeroes the request's
slot of the state pool before the first step (SGLang's ``MambaPool`` zeroes
the conv and temporal state of the slots it allocates; vLLM starts from zeros
where ``has_initial_state`` is false).  Contract ``slot_reset``: the pool is
``state [S, D]`` float32 with a padded slot stride, ``idx [B]`` int32 names the
slots to zero, ``-1`` is a pad row that changes nothing.  Every other byte,
the pad's neighbours and slot 0 included, stays as it was.

This file is what ARCHITECTURE.md's recipe asks for: a case type, a
Hypothesis strategy, a numpy oracle, the arguments, and one ``register``
line.  ``reset_slots`` is an engine-style Triton kernel behind its adapter
(loaded index, Python ``and`` on scalars, int32 sizes).  Fuzz it:

    cd examples && mambafuzz fuzz --target slot_reset:reset_slots --contract slot_reset --time 10
    pytest examples/test_slot_reset.py
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

import dataclasses

import numpy as np
import torch
import triton
import triton.language as tl
from hypothesis import strategies as st

from mambafuzz import contracts
from mambafuzz.contracts import Argument, Contract, Prepared
from mambafuzz.cases import CaseBase, check_int, check_int_list
from mambafuzz.errors import CaseError

PAD = -1
ELEM = 4  # float32


# ---------------------------------------------------------------- the case: plain numbers, JSON
@dataclass(frozen=True)
class SlotResetCase(CaseBase):
    """A pool of `slots` rows of `dim` float32 at byte `offset`, rows `stride` elements apart; `idx` the
    slots to zero (-1: pad)."""

    contract: ClassVar[str] = "slot_reset"
    FIELD_CHECKS: ClassVar[dict] = {"arena_size": lambda v: check_int("arena_size", v, 1),
                                    "slots": lambda v: check_int("slots", v, 1),
                                    "dim": lambda v: check_int("dim", v, 1),
                                    "offset": lambda v: check_int("offset", v, 0),
                                    "stride": lambda v: check_int("stride", v, 1),
                                    "idx": lambda v: check_int_list("idx", v, -1)}
    arena_size: int
    offset: int
    slots: int
    dim: int
    stride: int
    idx: tuple[int, ...]
    seed: int = 0

    @property
    def size(self) -> tuple:
        """Shrinks towards fewer rows, a smaller pool, no padding, low slots, seed 0."""
        return (len(self.idx), self.slots * self.dim, self.stride - self.dim + self.offset + sum(self.idx),
                self.seed != 0)

    def describe(self) -> str:
        return (f"pool {self.slots}x{self.dim} f32 (stride {self.stride}) at +{self.offset}; "
                f"zero {list(self.idx)}")


def _end(offset: int, slots: int, stride: int) -> int:
    return offset + slots * stride * ELEM


# ---------------------------------------------------------------- the oracle: numpy, from the snapshot
def expect_reset(snapshot: np.ndarray, offset: int, dim: int, stride: int, idx) -> np.ndarray:
    """The arena after a correct run: each named slot's `dim` floats zeroed, nothing else."""
    out = snapshot.copy()
    rows = np.asarray([i for i in idx if i != PAD], dtype=np.int64)
    if rows.size:
        starts = offset + rows * stride * ELEM
        cols = np.arange(dim * ELEM, dtype=np.int64)
        out[(starts[:, None] + cols[None, :]).reshape(-1)] = 0
    return out


# ---------------------------------------------------------------- the strategy
@st.composite
def slot_reset_cases(draw, profile) -> SlotResetCase:
    big = profile.name != "cpu"
    slots = draw(st.integers(1, 64 if big else 8))
    dim = draw(st.integers(1, 4096 if big else 48))
    stride = dim + draw(st.sampled_from([0, 0, 1, 3, 16]))
    offset = ELEM * draw(st.integers(0, 8))
    free = [s for s in range(slots)]
    idx = draw(st.lists(st.sampled_from(free) | st.just(PAD), max_size=min(slots + 2, 16)))
    seen, rows = set(), []
    for i in idx:  # one row per slot: two rows zeroing one slot would be a write-write pair
        if i == PAD or i not in seen:
            rows.append(i)
            seen.add(i)
    end = _end(offset, slots, stride)
    return SlotResetCase(arena_size=end + 64, offset=offset, slots=slots, dim=dim, stride=stride,
                         idx=tuple(rows), seed=draw(st.integers(0, 3)))


# ---------------------------------------------------------------- the contract
class SlotReset(Contract):
    name = "slot_reset"
    case_type = SlotResetCase
    summary = "zero the state slots idx[b] of new requests; -1 is a pad row"
    arguments = (
        Argument("state", "float32", "[S, D] (row stride >= D)", "the pool: a view of the arena"),
        Argument("idx", "int32", "[B]", "slot of row b to zero, -1: pad (nothing changes)"),
    )
    buckets = {"pads": ("none", "some"), "padded_stride": ("no", "yes")}

    def strategy(self, profile, **_):
        return slot_reset_cases(profile)

    def prepare(self, case: SlotResetCase, image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        if len(set(i for i in case.idx if i != PAD)) != len([i for i in case.idx if i != PAD]):
            raise CaseError("two rows zero one slot: ill-posed")
        if min(case.idx, default=0) < PAD or max(case.idx, default=0) >= case.slots:
            raise CaseError(f"an index is outside -1..{case.slots - 1}")
        if case.offset % ELEM or _end(case.offset, case.slots, case.stride) > case.arena_size:
            raise CaseError("the pool is misaligned or runs past the arena")
        floats = arena[case.offset:_end(case.offset, case.slots, case.stride)].view(torch.float32)
        state = floats.as_strided((case.slots, case.dim), (case.stride, 1))
        idx = torch.tensor(case.idx, dtype=torch.int32, device=device)
        return Prepared({"state": state, "idx": idx}, {},
                        expect_reset(snapshot, case.offset, case.dim, case.stride, case.idx))

    def locate(self, case: SlotResetCase, offset: int) -> str:
        row, col = divmod(offset - case.offset, case.stride * ELEM)
        return f"slot {row}, float {col // ELEM}" if 0 <= row < case.slots else "outside the pool"

    def valid(self, case: SlotResetCase) -> bool:
        named = [i for i in case.idx if i != PAD]
        return (len(set(named)) == len(named) and all(-1 <= i < case.slots for i in case.idx)
                and _end(case.offset, case.slots, case.stride) <= case.arena_size and case.stride >= case.dim)

    def candidates(self, case: SlotResetCase) -> Iterator[SlotResetCase]:
        for i in range(len(case.idx)):
            yield dataclasses.replace(case, idx=case.idx[:i] + case.idx[i + 1:])
        if case.stride > case.dim:
            yield dataclasses.replace(case, stride=case.dim)
        if case.dim > 1:
            yield dataclasses.replace(case, dim=max(1, case.dim // 2), stride=case.stride - case.dim + max(1, case.dim // 2))
        if case.offset:
            yield dataclasses.replace(case, offset=0)

    def features(self, case: SlotResetCase) -> dict[str, str]:
        return {"pads": "some" if PAD in case.idx else "none",
                "padded_stride": "yes" if case.stride > case.dim else "no"}

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        return dict(self.buckets)


CONTRACT = contracts.register(SlotReset())


# ---------------------------------------------------------------- an engine-style kernel and its adapter
@triton.jit
def _zero_slots_kernel(state_ptr, idx_ptr, dim, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    slot = tl.load(idx_ptr + row)
    n = dim.to(tl.int32)
    if slot >= 0 and n > 0:  # Python `and` on scalars, as engines write it
        base = state_ptr + slot.to(tl.int64) * stride
        for start in range(0, n, BLOCK):  # a loop bound read from an argument
            cols = start + tl.arange(0, BLOCK)
            tl.store(base + cols, tl.zeros([BLOCK], dtype=tl.float32), mask=cols < n)


def reset_slots(state, idx):
    """Zero the slots `idx` names (engine-style Triton kernel, one program per row)."""
    if idx.numel():
        _zero_slots_kernel[(idx.numel(),)](state, idx, state.shape[1], state.stride(0), BLOCK=64)


def reset_slots_no_pad_check(state, idx):
    """The bug: the pad row is never checked, so -1 zeroes the floats just before slot 0."""
    if idx.numel():
        _zero_slots_unchecked[(idx.numel(),)](state, idx, state.shape[1], state.stride(0), BLOCK=64)


@triton.jit
def _zero_slots_unchecked(state_ptr, idx_ptr, dim, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    slot = tl.load(idx_ptr + row)
    base = state_ptr + slot.to(tl.int64) * stride
    for start in range(0, dim, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        tl.store(base + cols, tl.zeros([BLOCK], dtype=tl.float32), mask=cols < dim)

"""The `state_scatter` case (docs/contracts.md#state_scatter): the commit after verification, per-step states into a
slot pool.

``pool`` is one ``oracle.SlotBuffer`` (``[L, S, slot_bytes]``: padded slot
and layer strides, layer- or slot-major).  The per-step states start at byte
``states_offset``: dense (``window`` 0) ``[L, rows, steps, E]`` elements with
``states_pad`` elements after each step's ``E``; the conv-window variant
(``window`` W >= 2) one buffer ``[L, rows, dim, steps + W - 2]`` with
``states_pad`` elements after each channel's run, seen as the overlapping
windows ``[L, rows, steps, dim, W - 1]``.  Row r of ``dst_idx`` /
``step_idx`` copies ``states[:, r, step]`` to slot ``dst`` when it is valid
(``oracle.state_scatter``).  The bytes come from the seed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import CaseBase, as_tuples, check_int, check_int_list, show
from mambafuzz.errors import CaseError
from mambafuzz.oracle import SlotBuffer

INDEX_DTYPES = ("int32", "int64")
_POOL_FIELDS = tuple(f.name for f in dataclasses.fields(SlotBuffer))


def _check_pool(value) -> None:
    """Types only; the oracle (SlotBuffer.validate, check_state_scatter) judges the geometry."""
    if isinstance(value, SlotBuffer):
        value = dataclasses.asdict(value)
    if not isinstance(value, dict):
        raise CaseError(f"case field 'pool' must be an object, got {show(value)}")
    missing = [k for k in _POOL_FIELDS if k not in value]
    unknown = sorted(set(value) - set(_POOL_FIELDS))
    if missing or unknown:
        raise CaseError(f"case field 'pool' is missing {', '.join(missing)}" if missing
                        else f"case field 'pool' has unknown field(s): {', '.join(unknown)}")
    for key, member in value.items():
        check_int(f"pool.{key}", member)


def _check_dtype(value) -> None:
    if value not in INDEX_DTYPES:
        raise CaseError(f"case field 'index_dtype' must be one of {', '.join(INDEX_DTYPES)}, got {show(value)}")


@dataclass(frozen=True)
class StateScatterCase(CaseBase):
    contract: ClassVar[str] = "state_scatter"
    FIELD_CHECKS: ClassVar[dict] = {
        "arena_size": lambda v: check_int("arena_size", v, 1),
        "pool": _check_pool,
        "states_offset": lambda v: check_int("states_offset", v, 0),
        "rows": lambda v: check_int("rows", v, 1),
        "steps": lambda v: check_int("steps", v, 1),
        "dst_idx": lambda v: check_int_list("dst_idx", v),
        "step_idx": lambda v: check_int_list("step_idx", v),
        "window": lambda v: check_int("window", v, 0),
        "states_pad": lambda v: check_int("states_pad", v, 0),
        "index_dtype": _check_dtype,
    }
    arena_size: int
    pool: SlotBuffer
    states_offset: int
    rows: int                     # R: rows of the states (N = len(dst_idx) may differ)
    steps: int                    # T
    dst_idx: tuple[int, ...]
    step_idx: tuple[int, ...]
    window: int = 0               # W of the conv-window variant; 0: dense states
    states_pad: int = 0           # elements of padding after each step entry (dense) or channel run (window)
    index_dtype: str = "int32"
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    @classmethod
    def _from_json_fields(cls, body, kwargs):
        if isinstance(body["pool"], dict):
            kwargs["pool"] = SlotBuffer(**as_tuples(body["pool"]))
        return kwargs

    @property
    def size(self) -> tuple:
        """(index rows, layers x slot bytes, states rows x steps, window, slots, layout, int64, seed not 0):
        layout = arena + offsets + strides + states padding + |index values| + 1 for a perturbation."""
        p = self.pool
        layout = (self.arena_size + p.offset + p.slot_stride + p.layer_stride + self.states_offset
                  + self.states_pad + sum(abs(v) for v in self.dst_idx) + sum(abs(v) for v in self.step_idx)
                  + (self.perturb is not None))
        return (len(self.dst_idx), p.layers * p.slot_bytes, self.rows * self.steps,
                (self.window > 0) + self.window, p.slots, layout, self.index_dtype != "int32", self.seed != 0)

    def describe(self) -> str:
        p = self.pool
        order = "" if p.layer_major else ", slot-major"
        pad = "" if (p.slot_stride, p.layer_stride) == (p.slot_bytes, p.slots * p.slot_bytes) else \
            f", strides {p.slot_stride}/{p.layer_stride}"
        kind = f"conv windows W {self.window}" if self.window else "dense"
        rows = [f"{d}<-{s}" for d, s in zip(self.dst_idx, self.step_idx)]
        more = f", +{len(rows) - 8} more" if len(rows) > 8 else ""
        return (f"pool {p.layers}x{p.slots}x{p.slot_bytes} B/e{p.elem_size}{pad}{order} at +{p.offset}; "
                f"states {self.rows} rows x {self.steps} steps ({kind}, pad {self.states_pad}) at "
                f"+{self.states_offset}; {len(rows)} row(s) dst<-step ({self.index_dtype}): "
                f"{', '.join(rows[:8])}{more}{self._perturb_note()}")

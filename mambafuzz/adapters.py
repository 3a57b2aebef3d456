"""Helpers for adapters: your kernel's arguments from a contract's.

A target is called with absolute byte addresses (int64) into one uint8 arena
and, for the block-table contracts, one int64 ``[S, 8]`` meta table.  Engine
kernels want other shapes: a typed tensor behind a pointer, per-column
metadata arrays of mixed int32 / int64, one block-table pointer per group and
a row stride.  These build them (torch only; no kernels, no device choice).

``arguments_table()`` renders what every contract passes (the README's table
is this function's output; ``python -m mambafuzz.adapters`` prints it, and a
test keeps the two equal).
"""
from __future__ import annotations

import math
import sys

import torch

from mambafuzz import contracts
# the block-table and slot contracts' helpers live with them; these names are their documented home
from mambafuzz.contracts.pools import (KIND_DS, KIND_SD, KIND_TEMPORAL, META_COLUMNS, STATE_COLUMN_TYPES,
                                       block_table_ptrs, block_table_row_stride, state_block_table_ptrs,
                                       state_columns)
from mambafuzz.contracts.slots import slot_buffers

META_COLS = len(META_COLUMNS)

__all__ = ["STATE_COLUMNS", "KIND_TEMPORAL", "KIND_SD", "KIND_DS", "add_region", "arguments_table", "block_table_ptrs",
           "block_table_row_stride", "bytes_at", "slot_buffers", "state_block_table_ptrs", "state_columns",
           "typed_view"]

# name -> (meta column, dtype) of state_columns (contracts.pools.STATE_COLUMN_TYPES as torch dtypes)
STATE_COLUMNS = {name: (col, getattr(torch, dtype)) for name, (col, dtype) in STATE_COLUMN_TYPES.items()}


def add_region(name: str, tensor_or_start, nbytes: int | None = None) -> None:
    """Tell the CPU race check's bounds fence that your kernel may touch this memory.

    A tensor (its elements, or `nbytes` from its start) or a raw address and
    `nbytes`.  Needed only for memory no torch op returned during the call: a
    buffer allocated before it and reached through a pointer table, or one from
    another library (README "What the race check knows").  A no-op when the
    recorder is not recording (on a GPU, say).
    """
    racecheck = sys.modules.get("mambafuzz.racecheck")  # never imported here: no recorder, nothing to tell
    recorder = racecheck.recording() if racecheck is not None else None
    if recorder is not None:
        recorder.add_region(name, tensor_or_start, nbytes)


def _address(ptr) -> int:
    return int(ptr.item()) if isinstance(ptr, torch.Tensor) else int(ptr)


def bytes_at(arena: torch.Tensor, ptr, n: int) -> torch.Tensor:
    """The `n` bytes at absolute address `ptr`, as a uint8 view of `arena` (writes go to the arena)."""
    if arena.dtype != torch.uint8 or arena.dim() != 1 or not arena.is_contiguous():
        raise TypeError("bytes_at: arena must be the contiguous 1-D uint8 tensor the target was given")
    ptr, n = _address(ptr), int(n)
    offset = ptr - arena.data_ptr()
    if n < 0 or offset < 0 or offset + n > arena.numel():
        raise ValueError(f"bytes_at: [{hex(ptr)}, +{n}) is outside the arena "
                         f"[{hex(arena.data_ptr())}, +{arena.numel()})")
    return arena[offset:offset + n]


def typed_view(arena: torch.Tensor, ptr, shape, dtype: torch.dtype, strides=None) -> torch.Tensor:
    """A `dtype` tensor of `shape` at `ptr`, viewing the arena; `strides` in bytes (None: contiguous).

    E.g. an SD conv pool from its meta row: ``typed_view(arena, base, (blocks, state_len, dim),
    torch.float16, strides=(block_stride, dim * 2, 2))``.  The address and the strides must be
    multiples of the element size.
    """
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    item = torch.empty((), dtype=dtype).element_size()
    ptr = _address(ptr)
    if ptr % item:
        raise ValueError(f"typed_view: address {hex(ptr)} is not aligned to {dtype} ({item} bytes)")
    if strides is None:
        return bytes_at(arena, ptr, math.prod(shape) * item).view(dtype).view(shape)
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape) or any(s % item for s in strides):
        raise ValueError(f"typed_view: strides {strides} must be {len(shape)} multiples of {item} bytes")
    extent = 0 if 0 in shape else sum((n - 1) * s for n, s in zip(shape, strides)) + item
    region = bytes_at(arena, ptr, extent).view(dtype)
    return region.as_strided(shape, tuple(s // item for s in strides))


# ---------------------------------------------------------------- the README's table
def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def arguments_table() -> str:
    """Markdown: every argument each contract passes (dtype, shape) and every contract option."""
    rows = ["| contract | argument | passed as | dtype | shape | meaning |", "| --- | --- | --- | --- | --- | --- |"]
    for c in [c for c in contracts.registered().values() if c.origin is None]:  # the built-in ones
        for a in c.arguments:
            rows.append(f"| {c.name} | `{a.name}` | positional | {a.dtype} | {a.shape} | {_cell(a.meaning)} |")
        for a in c.options:
            rows.append(f"| {c.name} | `{a.name}` | keyword | Python {a.dtype} | | {_cell(a.meaning)} |")
        rows.append(f"| {c.name} | `arena` | keyword, if your function takes it | uint8 | [arena bytes] | "
                    f"the memory every address points into (`adapters.bytes_at`) |")
    rows += ["", "| option | contracts | values | default | meaning |", "| --- | --- | --- | --- | --- |"]
    for o in contracts.options(built_in=True):  # one row each, naming every contract that declares it
        values = " \\| ".join(str(v) for v in o.choices)
        meaning = "; ".join([o.helps[0][1]] + [f"{c}: {h}" for c, h in o.helps[1:]])
        rows.append(f"| `{o.name}` (`{o.flag}`) | {', '.join(o.contracts)} | {values} | {o.default} | "
                    f"{_cell(meaning)} |")
    rows += ["", "| `state_columns(meta)[name]` | dtype | shape |", "| --- | --- | --- |"]
    for name, (_, dtype) in STATE_COLUMNS.items():
        rows.append(f"| `{name}` | {str(dtype).replace('torch.', '')} | [S] |")
    rows.append("| `kind` | int32 | [S] |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(arguments_table(), end="")

"""Paged state pools inside a flat byte arena (docs/contracts.md#pools).

A :class:`PoolLayout` places ``num_blocks`` blocks of one state in the arena,
``block_stride`` bytes apart starting at byte ``offset``.  Bytes of a block
that are not data (past the data in a block, or past ``state_len`` elements
in a padded DS row) are padding and must never change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import _checks
from .errors import OracleError

__all__ = ["LAYOUT_KINDS", "PoolLayout", "ELEM_SIZES"]

LAYOUT_KINDS = ("conv_sd", "conv_ds", "temporal")
ELEM_SIZES = (1, 2, 4, 8)
_INT_FIELDS = ("offset", "num_blocks", "block_stride", "elem_size", "state_len", "dim", "row_stride", "group")


@dataclass(frozen=True)
class PoolLayout:
    """Geometry of one state's pool.

    - ``conv_sd``: ``[num_blocks, state_len, dim]``, dim contiguous; token t is
      the contiguous run of ``dim * elem_size`` bytes.
    - ``conv_ds``: ``[num_blocks, dim, state_len]``; each of the ``dim`` rows
      holds ``state_len`` elements and rows are ``row_stride`` bytes apart
      (0 means ``state_len * elem_size``; larger means padded rows).  Token t
      is one element in each row.
    - ``temporal``: ``[num_blocks, *inner]``, copied as ``prod(inner) *
      elem_size`` bytes.

    ``group`` indexes the block table the state uses.  Fields that do not
    apply to the kind must stay 0 / ``()``.  Construction does not validate;
    :meth:`validate` (called by every oracle function) does.
    """

    kind: str
    offset: int
    num_blocks: int
    block_stride: int
    elem_size: int
    state_len: int = 0
    dim: int = 0
    row_stride: int = 0
    inner: tuple[int, ...] = ()
    group: int = 0

    def __post_init__(self):
        # numpy integers become Python ints (no int32 wrap-around in offsets);
        # a list/array `inner` becomes a tuple (the dataclass stays hashable).
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if isinstance(v, np.integer):
                object.__setattr__(self, name, int(v))
        if not isinstance(self.inner, tuple):
            try:
                object.__setattr__(self, "inner", tuple(self.inner))
            except TypeError:
                pass  # validate() reports it
        if any(isinstance(v, np.integer) for v in self.inner):
            object.__setattr__(self, "inner", tuple(int(v) if isinstance(v, np.integer) else v
                                                    for v in self.inner))

    # ------------------------------------------------------------------ checks
    def validate(self, arena_size: int | None = None) -> None:
        """Raise :class:`OracleError` naming the first problem found.

        With ``arena_size`` also check that every block's data lies inside
        ``[0, arena_size)`` (the padding after the last block's data may run
        past the arena's end).
        """
        if not isinstance(self.kind, str) or self.kind not in LAYOUT_KINDS:
            raise OracleError(f"unknown layout kind {self.kind!r}; expected one of {LAYOUT_KINDS}")
        ints = {}
        for name in _INT_FIELDS:
            ints[name] = _checks.int_scalar(name, getattr(self, name))
        elem = ints["elem_size"]
        if elem not in ELEM_SIZES:
            raise OracleError(f"elem_size must be one of {ELEM_SIZES}, got {elem}")
        for name in ("offset", "state_len", "dim", "row_stride", "group"):
            if ints[name] < 0:
                raise OracleError(f"negative {name} {ints[name]}")
        if ints["offset"] % elem:
            raise OracleError(f"offset {ints['offset']} is not a multiple of elem_size {elem}")
        if ints["num_blocks"] < 1:
            raise OracleError(f"num_blocks must be >= 1, got {ints['num_blocks']}")
        if not isinstance(self.inner, tuple):
            raise OracleError(f"inner must be a tuple of ints, got {self.inner!r}")
        if self.is_conv:
            if ints["state_len"] < 1:
                raise OracleError(f"conv state_len must be >= 1, got {ints['state_len']}")
            if ints["dim"] < 1:
                raise OracleError(f"conv dim must be >= 1, got {ints['dim']}")
            if self.inner != ():
                raise OracleError(f"inner is for temporal pools; a {self.kind} pool has inner={self.inner!r}")
            if self.kind == "conv_sd" and ints["row_stride"] != 0:
                raise OracleError(f"row_stride is for conv_ds pools; a conv_sd pool has row_stride={ints['row_stride']}")
            if self.kind == "conv_ds" and ints["row_stride"]:
                rs = ints["row_stride"]
                need = ints["state_len"] * elem
                if rs < need:
                    raise OracleError(
                        f"row_stride {rs} is smaller than a row's data ({ints['state_len']} x {elem} = {need} bytes)"
                    )
                if rs % elem:
                    raise OracleError(f"row_stride {rs} is not a multiple of elem_size {elem}")
        else:
            if len(self.inner) == 0:
                raise OracleError("temporal pool needs a non-empty inner shape, got inner=()")
            for k, v in enumerate(self.inner):
                v = _checks.int_scalar(f"inner[{k}]", v)
                if v < 1:
                    raise OracleError(f"inner[{k}] must be >= 1, got {v} (inner={self.inner!r})")
            for name in ("state_len", "dim", "row_stride"):
                if ints[name]:
                    raise OracleError(f"{name} is for conv pools; a temporal pool has {name}={ints[name]}")
        bs = ints["block_stride"]
        data = self.data_bytes
        if bs < 1 or bs < data:
            raise OracleError(f"block_stride {bs} is smaller than a block's data ({data} bytes)")
        if bs % elem:
            raise OracleError(f"block_stride {bs} is not a multiple of elem_size {elem}")
        if arena_size is not None:
            arena_size = _checks.int_scalar("arena_size", arena_size)
            end = ints["offset"] + (ints["num_blocks"] - 1) * bs + data
            if end > arena_size:
                raise OracleError(
                    f"{self.kind} pool at offset {ints['offset']} with {ints['num_blocks']} blocks "
                    f"ends at byte {end}, past the arena size {arena_size}"
                )

    # -------------------------------------------------------------- properties
    @property
    def is_conv(self) -> bool:
        return self.kind in ("conv_sd", "conv_ds")

    @property
    def token_bytes(self) -> int:
        """Bytes of one token in one row: SD ``dim * elem``; DS ``elem``; temporal the data."""
        if self.kind == "conv_sd":
            return self.dim * self.elem_size
        if self.kind == "conv_ds":
            return self.elem_size
        return self.data_bytes

    @property
    def row_stride_eff(self) -> int:
        """Bytes between the rows of :meth:`token_view` (SD: one token; DS:
        ``row_stride`` or ``state_len * elem``; temporal: the data, one row)."""
        if self.kind == "conv_ds":
            return self.row_stride or self.state_len * self.elem_size
        if self.kind == "conv_sd":
            return self.dim * self.elem_size
        return self.data_bytes

    @property
    def inner_elems(self) -> int:
        """Elements per block row: temporal ``prod(inner)``; conv ``dim``."""
        if self.is_conv:
            return self.dim
        return math.prod(self.inner)

    @property
    def data_bytes(self) -> int:
        """Span from a block's first data byte to its last, inclusive."""
        if self.kind == "conv_sd":
            return self.state_len * self.dim * self.elem_size
        if self.kind == "conv_ds":
            return (self.dim - 1) * self.row_stride_eff + self.state_len * self.elem_size
        return math.prod(self.inner) * self.elem_size

    @property
    def nbytes(self) -> int:
        return self.num_blocks * self.block_stride

    # ------------------------------------------------------------------ access
    def block_offset(self, block) -> int:
        """Byte offset of ``block`` in the arena."""
        block = _checks.int_scalar("block", block)
        if not 0 <= block < self.num_blocks:
            raise OracleError(f"block id {block} out of range [0, {self.num_blocks}) for {self.kind} pool")
        return self.offset + block * self.block_stride

    def _rows(self) -> tuple[int, int, int]:
        """(rows, row stride, bytes per row) of one block's data."""
        if self.kind == "conv_ds":
            return self.dim, self.row_stride_eff, self.state_len * self.elem_size
        if self.kind == "conv_sd":
            return self.state_len, self.row_stride_eff, self.dim * self.elem_size
        return 1, self.data_bytes, self.data_bytes

    def token_view(self, arena, block) -> np.ndarray:
        """A view (writable if ``arena`` is) of the block's data bytes:
        SD ``[state_len, dim*elem]``; DS ``[dim, state_len*elem]``; temporal ``[data_bytes]``."""
        arena = _checks.arena("arena", arena)
        self.validate(arena.size)
        o = self.block_offset(block)
        base = arena[o:o + self.data_bytes]
        if self.kind == "temporal":
            return base
        rows, stride, run = self._rows()
        return as_strided(base, shape=(rows, run), strides=(stride, 1))

    def logical_state(self, arena, block) -> np.ndarray:
        """A layout-independent copy of the block's state: conv -> uint8
        ``[state_len, dim, elem]`` (token, channel, byte); temporal -> ``[data_bytes]``."""
        view = self.token_view(arena, block)
        if self.kind == "temporal":
            return view.copy()
        L, D, e = self.state_len, self.dim, self.elem_size
        if self.kind == "conv_sd":
            return view.reshape(L, D, e).copy()
        return view.reshape(D, L, e).transpose(1, 0, 2).copy()

    def data_mask(self, arena_size) -> np.ndarray:
        """Bool ``[arena_size]``: True on every data byte of every block."""
        arena_size = _checks.int_scalar("arena_size", arena_size)
        self.validate(arena_size)
        total = max(arena_size, self.offset + self.nbytes)
        mask = np.zeros(total, dtype=bool)
        rows, stride, run = self._rows()
        view = as_strided(
            mask[self.offset:],
            shape=(self.num_blocks, rows, run),
            strides=(self.block_stride, stride, 1),
        )
        view[...] = True
        return mask if total == arena_size else mask[:arena_size].copy()

    def data_intervals(self, block) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the contiguous data runs of ``block`` (one per row)."""
        o = self.block_offset(block)
        rows, stride, run = self._rows()
        starts = o + np.arange(rows, dtype=np.int64) * stride
        return starts, starts + run

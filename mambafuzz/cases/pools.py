"""What the block-table cases share (docs/contracts.md#pools): pools at arena offsets, block tables, sparse limits."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from mambafuzz.cases import CaseBase, as_tuples, check_int, check_int_list, check_nested, check_objects, show
from mambafuzz.errors import CaseError
from mambafuzz.oracle import PoolLayout

DENSE_LIMIT = 256 << 20  # pool arenas above this are materialised sparsely
MAX_SPARSE_ARENA = 8 << 30
GUARD = 64               # padding bytes after each block's data that sparse mode still checks

_POOL_REQUIRED = ("kind", "offset", "num_blocks", "block_stride", "elem_size")
_POOL_FIELDS = {f.name for f in dataclasses.fields(PoolLayout)}


def _check_pool_member(where: str, key: str, value) -> None:
    if key == "kind":
        if not isinstance(value, str):
            raise CaseError(f"case field {where!r} must be a string, got {show(value)}")
    elif key == "inner":
        check_int_list(where, value)
    else:
        check_int(where, value)


def _check_pools(value) -> None:
    """Types only; the oracle (PoolLayout.validate) judges the geometry."""
    check_objects("pools", "pool", value, _POOL_REQUIRED, _POOL_FIELDS, _check_pool_member)


@dataclass(frozen=True)
class PoolCase(CaseBase):
    FIELD_CHECKS: ClassVar[dict] = {
        "arena_size": lambda v: check_int("arena_size", v, 1),
        "num_tiles": lambda v: check_int("num_tiles", v, 1),
        "pools": _check_pools,
        "block_tables": lambda v: check_nested("block_tables", v, 3),
    }
    arena_size: int
    pools: tuple[PoolLayout, ...]
    block_tables: tuple[tuple[tuple[int, ...], ...], ...]  # [G][R][C]
    num_tiles: int = 1
    seed: int = 0

    @classmethod
    def _from_json_fields(cls, body, kwargs):
        kwargs["pools"] = tuple(PoolLayout(**{k: as_tuples(v) for k, v in p.items()})
                                for p in body["pools"])
        return kwargs

    @property
    def num_requests(self) -> int:
        return len(self.block_tables[0]) if self.block_tables else 0

    def _pool_summary(self) -> str:
        kinds = ",".join(f"{p.kind}/e{p.elem_size}" for p in self.pools)
        return f"{len(self.pools)} state(s) [{kinds}], {len(self.block_tables)} group(s)"

    def _layout_size(self) -> int:
        """Arena size + pool offsets + block counts + block-table entries, + 1 for a perturbation."""
        return (self.arena_size + sum(p.offset + p.num_blocks for p in self.pools)
                + sum(len(row) for table in self.block_tables for row in table)
                + (getattr(self, "perturb", None) is not None))

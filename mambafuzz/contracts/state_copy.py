"""Contract `state_copy` (SPEC 2.4): request i copies every state from column src_col to dst_col with a token bias.

Conv states (SD or DS layout) shift tokens ``bias..`` of the source block to
``0..`` of the destination block; temporal states copy block ``src_col + bias``
whole.  Source and destination may be one physical block (memmove semantics).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases import check_int_list

from .base import Argument, Image, Prepared
from .pools import META_ARGUMENTS, TILES, PoolCase, PoolContract, int32


@dataclass(frozen=True)
class StateCopyCase(PoolCase):
    """Request i copies every state (src_col, dst_col, bias)."""

    contract: ClassVar[str] = "state_copy"
    FIELD_CHECKS: ClassVar[dict] = {name: (lambda v, name=name: check_int_list(name, v))
                                    for name in ("src_cols", "dst_cols", "biases")}
    src_cols: tuple[int, ...] = ()
    dst_cols: tuple[int, ...] = ()
    biases: tuple[int, ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def size(self) -> tuple:
        """A shrink measure, compared as the tuple (requests, states, data bytes + biases, tiles, layout,
        data seed not 0): packed pools, a cut arena, fewer blocks, table columns or groups, fewer tiles
        are each strictly smaller."""
        data = sum(p.data_bytes for p in self.pools) + sum(self.biases)
        return (len(self.src_cols), len(self.pools), data, self.num_tiles, self._layout_size(), self.seed != 0)

    def describe(self) -> str:
        reqs = ", ".join(f"r{i}: col {s}->{d} bias {b}" for i, (s, d, b) in
                         enumerate(zip(self.src_cols, self.dst_cols, self.biases)))
        return f"{self._pool_summary()}, tiles {self.num_tiles}; {reqs}{self._perturb_note()}"


def _droppable_columns(case: StateCopyCase) -> list[int]:
    """Columns no request reads or writes and, with a temporal state, none strictly between a
    request's src_col and src_col + bias (dropping one would move what src_col + bias names)."""
    cols = len(case.block_tables[0][0])
    keep = set(case.src_cols) | set(case.dst_cols)
    if any(p.kind == "temporal" for p in case.pools):
        for s, b in zip(case.src_cols, case.biases):
            keep |= set(range(s, s + b + 1))
    return [c for c in reversed(range(cols)) if c not in keep]


class StateCopy(PoolContract):
    name = "state_copy"
    case_type = StateCopyCase
    summary = "every state of request i is copied (src_col, dst_col, bias); source and destination may alias"
    arguments = META_ARGUMENTS + (
        Argument("src_cols", "int32", "[R]", "source block-table column of request i"),
        Argument("dst_cols", "int32", "[R]", "destination block-table column of request i"),
        Argument("biases", "int32", "[R]", "token shift (conv) or column offset (temporal) of request i"),
    )
    options = (TILES,)
    request_fields = ("src_cols", "dst_cols", "biases")

    def strategy(self, profile, **_):
        from mambafuzz.strategies.pools import state_copy_cases
        return state_copy_cases(profile)

    def prepare(self, case: StateCopyCase, image: Image, snapshot: np.ndarray, base: int, device: str) -> Prepared:
        _, pools, tables = image.plan
        expected = oracle.expect_state_copies(snapshot, pools, tables, case.src_cols, case.dst_cols, case.biases)
        args, kwargs = self.common_args(case, image, base, device)
        args.update(src_cols=int32(case.src_cols, device), dst_cols=int32(case.dst_cols, device),
                    biases=int32(case.biases, device))
        return Prepared(args, kwargs, expected)

    def column_candidates(self, case: StateCopyCase) -> Iterator[StateCopyCase]:
        if not (case.block_tables and case.block_tables[0]):
            return
        for c in _droppable_columns(case):  # later columns renumbered
            tables = tuple(tuple(row[:c] + row[c + 1:] for row in table) for table in case.block_tables)
            yield dataclasses.replace(case, block_tables=tables, src_cols=tuple(s - (s > c) for s in case.src_cols),
                                      dst_cols=tuple(d - (d > c) for d in case.dst_cols))


CONTRACT = StateCopy()

"""Contract `state_copy` (docs/contracts.md#state_copy): request i copies every state from column src_col to dst_col
with a token bias.

Conv states (SD or DS layout) shift tokens ``bias..`` of the source block to
``0..`` of the destination block; temporal states copy block ``src_col + bias``
whole.  Source and destination may be one physical block (memmove semantics).

Options that match what real engines fix (``mambafuzz.check(..., layout=...)``,
``--layout``): ``layout`` draws conv states of one layout only (``sd``, ``ds``,
or ``both``); ``tiles`` fixes the temporal tile count (an engine's constant,
vLLM: 16) instead of drawing it, and case reduction then never changes it;
``skip_equal_cols`` is the variant whose kernel skips a request with
``src_col == dst_col``: the oracle leaves those requests out of the
expectation.  ``tiles`` and ``skip_equal_cols`` are recorded in the case
(``tiles_fixed``, ``skip_equal_cols``; left out of its JSON when off, so
hashes of older cases are unchanged), so replay judges a case as it was found.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle

from .base import Argument, CliOption, Image, Prepared
from .pools import META_ARGUMENTS, TILES, PoolContract, int32
from mambafuzz.cases.state_copy import LAYOUTS, TileChoices, StateCopyCase, parse_options


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
    cli_options = (
        CliOption("layout", LAYOUTS, "both", "the conv layout your kernel handles: sd, ds or both"),
        CliOption("tiles", TileChoices(("drawn", "N")), "drawn",
                  "temporal tile count: drawn per case, or your kernel's fixed count N (vLLM: 16)"),
        CliOption("skip_equal_cols", ("no", "yes"), "no",
                  "yes: your kernel skips requests whose src_col == dst_col (expected untouched)"),
    )
    request_fields = ("src_cols", "dst_cols", "biases")

    def strategy(self, profile, layout="both", tiles="drawn", skip_equal_cols=False, **_):
        from mambafuzz.strategies.pools import state_copy_cases  # deferred: Hypothesis loads with the first strategy, not with the CLI's parser
        layout, fixed, skip = parse_options(layout, tiles, skip_equal_cols)
        return state_copy_cases(profile, layout=layout, tiles=fixed, skip_equal_cols=skip)

    def prepare(self, case: StateCopyCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        base = arena.data_ptr()
        _, pools, tables = image.plan
        keep = [r for r in range(len(case.src_cols))
                if not (case.skip_equal_cols and case.src_cols[r] == case.dst_cols[r])]
        pick = (lambda values: [values[r] for r in keep])
        if keep:  # a skipped request is left out of the expectation: its bytes stay as they were
            expected = oracle.expect_state_copies(snapshot, pools, np.asarray(tables)[:, keep, :],
                                                  pick(case.src_cols), pick(case.dst_cols), pick(case.biases))
        else:
            expected = np.array(snapshot, copy=True)
        args, kwargs = self.common_args(case, image, base, device)
        args.update(src_cols=int32(case.src_cols, device), dst_cols=int32(case.dst_cols, device),
                    biases=int32(case.biases, device))
        return Prepared(args, kwargs, expected)

    def candidates(self, case: StateCopyCase) -> Iterator[StateCopyCase]:
        """The shared cuts; with a fixed tile count, none that changes it (the engine could not run it)."""
        for smaller in super().candidates(case):
            if not case.tiles_fixed or smaller.num_tiles == case.num_tiles:
                yield smaller

    def column_candidates(self, case: StateCopyCase) -> Iterator[StateCopyCase]:
        if not (case.block_tables and case.block_tables[0]):
            return
        for c in _droppable_columns(case):  # later columns renumbered
            tables = tuple(tuple(row[:c] + row[c + 1:] for row in table) for table in case.block_tables)
            yield dataclasses.replace(case, block_tables=tables, src_cols=tuple(s - (s > c) for s in case.src_cols),
                                      dst_cols=tuple(d - (d > c) for d in case.dst_cols))

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        out = super().expected_features(options)
        out["past_2gib"] = ("no", "yes")
        if options.get("tiles") in (None, "drawn"):
            out["tiles"] = ("1", "2-3", "4-15", ">=16")
        return out


CONTRACT = StateCopy()

"""What the prefill contracts (docs/contracts.md#conv_prefill, #ssm_prefill, #delta_prefill) share on top of
the update contracts' case code (``UpdateContract``), over cases on ``cases.prefill.PrefillCase``:
the block table's and the prefix-caching columns' checks, the columns as the oracle and the target take
them, the shrink steps of a chunked batch (fewer tokens with the last column following, prefix caching off,
zeros for initial states, fewer table columns, the named slots packed low) and the per-row coverage (the
boundaries a chunk crosses, pad reads and destinations, derived or arbitrary columns) with the buckets a
narrowed run still draws.  A contract keeps its arguments, options, values, oracle call and own features.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from mambafuzz import oracle
from mambafuzz.oracle.conv_prefill import boundary_offsets, derived_columns

from .base import Argument
from .features import COUNT_EDGES, HUGE, bucket
from .updates import UpdateContract, int_tensor, rows_dropped, table_tensor

APC_COLUMNS = ("init", "first", "last", "computed")
BLOCK_SIZES = ((1, "1"), (2, "2-7"), (8, "8-15"), (16, ">=16"))
BLOCK_SIZE = Argument("block_size", "int", "", "prefix caching: tokens per block (0 without)")


def column_arguments(rows: str, held: str) -> tuple[Argument, ...]:
    """vLLM's prefix-caching column arguments, ``[rows]`` each; `held`: what a block boundary stores."""
    return (
        Argument("initial_state_idx", "int32 or None", f"[{rows}]", "prefix caching: the table column read"),
        Argument("block_idx_first_scheduled_token", "int32 or None", f"[{rows}]",
                 f"prefix caching: the column of the first block boundary's {held}"),
        Argument("block_idx_last_scheduled_token", "int32 or None", f"[{rows}]",
                 f"prefix caching: the column the final {held} goes to"),
        Argument("num_computed_tokens", "int32 or None", f"[{rows}]",
                 "prefix caching: tokens computed before the chunk (where its boundaries fall)"),
    )


class PrefillContract(UpdateContract):
    """The case code the prefill contracts share.  A contract names its block table's argument
    (``table_arg``) and its rows' starts (``starts_arg``), what a row is called in messages (``row_noun``),
    whether renumbering stops at packing the slots (``packed_only``) and, when it may store no final
    state, ``stores_final``."""

    table_arg = "cache_indices"
    starts_arg = "query_start_loc"
    row_noun = "row of lens"
    packed_only = True  # renumbering shrinks to the named slots packed low, not the looser steps after it

    # ------------------------------------------------------------ memory
    def check_rows(self, case) -> None:
        """OracleError unless the table, has_init and the prefix-caching columns have a row per row, the
        table's row stride holds its columns, several columns are 2-D, and indices and counts fit int32."""
        rows = len(case.lens)
        if len(case.idx) != rows or len(case.has_init) != rows or case.idx_stride < case.cols:
            raise oracle.OracleError(f"idx and has_init need one row per {self.row_noun}, and the table a row "
                                     "stride of at least its columns")
        for name in APC_COLUMNS:
            column = getattr(case, name)
            if (column is not None) != case.apc or (column is not None and len(column) != rows):
                raise oracle.OracleError("init, first, last and computed go with prefix caching (apc), one "
                                         "entry a row")
        if case.apc and case.block_size < 1:
            raise oracle.OracleError("prefix caching needs a positive block size")
        if any(not -(1 << 31) <= v < (1 << 31) for row in case.idx for v in row) or \
                any(not 0 <= v < (1 << 31) for v in case.computed or ()):
            raise oracle.OracleError("index values and computed counts are int32")
        if case.cols > 1 and not case.idx_2d:
            raise oracle.OracleError("several table columns need idx_2d")

    def columns(self, case) -> dict:
        """The prefix-caching columns and block size, as the oracle takes them."""
        return {name: getattr(case, name) for name in APC_COLUMNS} | {"block_size": case.block_size}

    def row_args(self, case, device) -> dict:
        """The block table, has_initial_state, the rows' starts and the prefix-caching columns (None
        without), as the target takes them."""
        import torch  # deferred: torch takes seconds to import

        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        return {self.table_arg: table_tensor(case, device),
                "has_initial_state": torch.tensor(list(case.has_init), dtype=torch.bool, device=device),
                self.starts_arg: int_tensor(cuts.tolist(), device),
                "initial_state_idx": int_tensor(case.init, device),
                "block_idx_first_scheduled_token": int_tensor(case.first, device),
                "block_idx_last_scheduled_token": int_tensor(case.last, device),
                "num_computed_tokens": int_tensor(case.computed, device)}

    def row_kwargs(self, case) -> dict:
        return {"pad_slot_id": case.pad, "block_size": case.block_size if case.apc else 0}

    def in_order(self, args: dict) -> dict:
        """`args` in the order of ``arguments`` (the target's)."""
        return {a.name: args[a.name] for a in self.arguments}

    def stores_final(self, case) -> bool:
        """Whether a live row stores its final state (to its last column)."""
        return True

    # ------------------------------------------------------------ shrinking
    def _shorter(self, case, rows, cut=lambda n: n - 1):
        """`cut` tokens from each of `rows`, each one's last column moved to keep last - first the
        boundaries it crosses (prefix caching)."""
        lens, last = list(case.lens), list(case.last or ())
        for b in rows:
            if lens[b] > 0:
                lens[b] = max(0, cut(lens[b]))
                if case.apc and lens[b] > 0:
                    last[b] = case.first[b] + len(boundary_offsets(case.computed[b], lens[b], case.block_size))
        return dataclasses.replace(case, lens=tuple(lens), last=tuple(last) if case.apc else None)

    def _rows_and_tokens(self, case, halved: bool = False):
        """Rows dropped; then (`halved`: half the tokens of every row first) a token fewer in every row,
        then in each row."""
        yield from rows_dropped(case, case.PER_ROW)
        if case.lens and max(case.lens) > 0:
            if halved:
                yield self._shorter(case, range(len(case.lens)), lambda n: n // 2)
            yield self._shorter(case, range(len(case.lens)))
            for b in range(len(case.lens)):
                if case.lens[b] > 0:
                    yield self._shorter(case, (b,))

    def _cache_off(self, case, fewer_columns: bool = True):
        """Prefix caching off; then (`fewer_columns`) the table cut to the columns rows use."""
        if case.apc:
            yield dataclasses.replace(case, apc=False, block_size=0, init=None, first=None, last=None,
                                      computed=None)
            if fewer_columns:
                yield from self._fewer_columns(case)

    def _no_initial_states(self, case):
        """Each row that starts from a state starting from zeros instead."""
        for b, has in enumerate(case.has_init):
            if has:
                yield dataclasses.replace(case, has_init=case.has_init[:b] + (False,) + case.has_init[b + 1:])

    def _fewer_columns(self, case):
        """The table cut to the columns rows use; column 0 dropped where no row uses it, every column and
        computed count moved down by one block (where each count is at least one block)."""
        used = max(max(c) for c in zip(case.init, case.first, case.last)) + 1
        if used < case.cols:
            yield dataclasses.replace(case, idx=tuple(row[:used] for row in case.idx),
                                      idx_stride=case.idx_stride - (case.cols - used))
        if min(min(c) for c in zip(case.init, case.first, case.last)) >= 1 and \
                min(case.computed) >= case.block_size:
            def down(column):
                return tuple(v - 1 for v in column)
            yield dataclasses.replace(case, idx=tuple(row[1:] for row in case.idx), idx_stride=case.idx_stride - 1,
                                      init=down(case.init), first=down(case.first), last=down(case.last),
                                      computed=tuple(c - case.block_size for c in case.computed))

    def _renumbered(self, case):
        """The update contracts' renumberings, or (``packed_only``) their first: the named slots packed low."""
        yield from itertools.islice(super()._renumbered(case), 1 if self.packed_only else None)

    # ------------------------------------------------------------ coverage
    def row_features(self, case, chunk) -> tuple[dict[str, list[str]], list]:
        """Per row its chunk's label (``chunk(length)``); per live row (tokens, a read slot) its initial state,
        the boundaries it crosses, whether a destination is the pad, and (prefix caching) derived or
        arbitrary columns.  Also the live rows, ``(b, row, length, (init, first, last), offsets, stores)``,
        for the contract's own features."""
        seen: dict[str, list[str]] = {name: [] for name in ("chunk", "boundaries", "initial_state", "pads",
                                                             "columns")}
        live = []
        for b, (row, length) in enumerate(zip(case.idx, case.lens)):
            init, first, last = (case.init[b], case.first[b], case.last[b]) if case.apc else (0, 0, 0)
            seen["chunk"].append(chunk(length))
            if row[init] == case.pad:
                seen["pads"].append("read")
                continue
            if length == 0:
                continue
            seen["initial_state"].append("yes" if case.has_init[b] else "no")
            offsets = boundary_offsets(case.computed[b], length, case.block_size) if case.apc else []
            seen["boundaries"].append("0" if not offsets else "1" if len(offsets) == 1 else ">1")
            stores = [first + k for k in range(len(offsets))] + ([last] if self.stores_final(case) else [])
            seen["pads"].append("write" if any(row[c] == case.pad for c in stores) else "none")
            if case.apc:
                derived = derived_columns(case.computed[b], length, case.block_size)
                seen["columns"].append("derived" if derived == (init, first, last, case.has_init[b])
                                       else "arbitrary")
            live.append((b, row, length, (init, first, last), offsets, stores))
        return seen, live

    @staticmethod
    def far_features(case, live, exact: bool = True) -> dict[str, str]:
        """Past 2 GiB of bytes, past 2^31 elements: over the slots a correct prefill reads (a live row's
        initial entry, with an initial state) or stores (its destinations that are not the pad), from
        ``row_features``' live rows.  A far slot in the table that nothing touches exercises no offset."""
        touched = [row[init] for b, row, _, (init, _, _), _, _ in live if case.has_init[b]]
        touched += [row[c] for _, row, *_, stores in live for c in stores if row[c] != case.pad]
        top = max(touched, default=0)
        return {"past_2gib": "yes" if exact and case.offset + top * case.slot_stride >= HUGE else "no",
                "past_2g_elements": "yes" if exact and top * (case.slot_stride // case.elem) >= HUGE else "no"}

    def table_features(self, case) -> dict[str, str]:
        """The batch's rows, prefix caching and table shape."""
        return {"rows": bucket(len(case.lens), COUNT_EDGES), "cache_mode": "all" if case.apc else "none",
                "index": ("2d" if case.idx_2d else "1d") + ("-strided" if case.idx_stride > case.cols else "")}

    @staticmethod
    def block_size_feature(case) -> str:
        return "none" if not case.apc else bucket(case.block_size, BLOCK_SIZES)

    def expected_rows(self) -> dict[str, tuple[str, ...]]:
        """The buckets a run of the default sizes draws before the options narrow them ("none" boundaries
        and initial states: every row skipped)."""
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3")
        out["boundaries"], out["initial_state"] = ("0", "1", ">1"), ("yes", "no")
        return out

    @staticmethod
    def expected_cache(out: dict, mode: str, sizes: tuple[str, ...] | None = None, **without) -> dict:
        """`out` narrowed by the cache_mode option: none (plus `without`: the contract's own), all, or both;
        `sizes`: the block-size buckets the block multiple leaves (None: no block_size feature)."""
        if mode == "none":  # the one destination is the slot read
            out.update(cache_mode=("none",), columns=("none",), boundaries=("0",), init_vs_last=("none",),
                       pads=("none", "read"), **without)
            if sizes is not None:
                out["block_size"] = ("none",)
        elif mode == "all":
            out.update(cache_mode=("all",), columns=("derived", "arbitrary"), init_vs_last=("same", "differ"),
                       index=("2d", "2d-strided"))
            if sizes is not None:
                out["block_size"] = sizes
        elif sizes is not None:
            out["block_size"] = ("none",) + sizes
        return out

    def admits_cache(self, case, n: dict) -> bool:
        """Whether `case` keeps to the narrowed pad, block multiple and cache mode."""
        return (case.pad == n["pad"] and (not case.apc or case.block_size % n["block_multiple"] == 0)
                and n["cache_mode"] in ("both", "all" if case.apc else "none"))

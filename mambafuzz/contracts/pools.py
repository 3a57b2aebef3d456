"""What the two block-table contracts (`state_copy`, `postprocess`) share: pools in one arena.

Every state has a pool (SD / DS conv or temporal, ``oracle.PoolLayout``) at a
byte offset of the arena and a group whose block table maps (request, column)
to a physical block.  A target receives the per-state ``meta`` table (columns
``mambafuzz.kernels.META_*``) and the block tables.  Pools past DENSE_LIMIT are
materialised sparsely: only referenced blocks' data plus GUARD bytes of their
padding are filled and compared (what lets ADDR-I32 be fuzzed on a CPU).

``META_COLUMNS`` is the meta table's layout; the project's kernels read it
through ``mambafuzz.kernels.META_*`` (they never import the engine; a test
checks the two agree).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.errors import CaseError
from mambafuzz.oracle import PoolLayout

from .base import Argument, Contract, Image, cut_to_end, packed, without
from .features import (ALIGNS, COUNT_EDGES, COUNTS, ELEMS, HUGE, NO_YES, SHIFTS, SIZES, align_label, bucket,
                       joined, shift_size)
from mambafuzz.cases.pools import DENSE_LIMIT, GUARD, MAX_SPARSE_ARENA
from mambafuzz.cases.pools import PoolCase

# The meta table: int64 [S, len(META_COLUMNS)], one row per state, these columns in this order.
META_COLUMNS = ("BASE", "BLOCK_STRIDE", "ELEM", "INNER", "CONV_LEN", "GROUP", "DS_ROWS", "DS_ROW_STRIDE")
META_ARGUMENTS = (
    Argument("meta", "int64", "[S, 8]", "one row per state: BASE, BLOCK_STRIDE, ELEM, INNER, CONV_LEN, GROUP, "
                                        "DS_ROWS, DS_ROW_STRIDE (ARCHITECTURE.md)"),
    Argument("block_tables", "int32", "[G, R, C]", "physical block of (group, request, column)"),
)
TILES = Argument("num_tiles", "int", "", "temporal copies split over this many tiles (programs)")


def meta_table(pools, base: int) -> np.ndarray:
    meta = np.zeros((len(pools), len(META_COLUMNS)), dtype=np.int64)
    for s, p in enumerate(pools):
        ds = p.kind == "conv_ds"
        meta[s] = (base + p.offset, p.block_stride, p.elem_size, p.inner_elems,
                   p.state_len if p.is_conv else 0, p.group, p.dim if ds else 0, p.row_stride_eff if ds else 0)
    return meta


def int32(values, device) -> torch.Tensor:
    import torch  # deferred: torch takes seconds to import; at first use, as in every contract: --help reads the contracts, needing no torch

    return torch.tensor(np.asarray(values, dtype=np.int32).reshape(-1), dtype=torch.int32, device=device)


def _compact(case: PoolCase) -> tuple[tuple[PoolLayout, ...], np.ndarray, np.ndarray]:
    """Pools, block tables and arena positions of a dense image of just the live blocks.

    A pool over 2 GiB (the ADDR-I32 territory) is mostly padding nobody touches;
    the oracle runs on an image holding each referenced block's data plus GUARD
    bytes of its padding, and the live arena is compared at those positions.
    """
    tables = np.asarray(case.block_tables, dtype=np.int64)
    used = [np.unique(tables[g]) for g in range(tables.shape[0])]
    new_tables = np.stack([np.searchsorted(used[g], tables[g]) for g in range(tables.shape[0])]).astype(np.int32)
    pools, pieces, cursor = [], [], 0
    for pool in case.pools:
        if not 0 <= pool.group < len(used):
            raise CaseError(f"pool group {pool.group} has no block table ({len(used)} group(s))")
        filler = -cursor % 8  # keep each compact pool 8-aligned; filler bytes map to no arena byte (-1)
        pieces.append(np.full(filler, -1, dtype=np.int64))
        cursor += filler
        ids = used[pool.group].astype(np.int64)
        window = min(pool.block_stride, pool.data_bytes + GUARD)
        pools.append(dataclasses.replace(pool, offset=cursor, num_blocks=len(ids), block_stride=window))
        starts = pool.offset + ids * pool.block_stride
        pieces.append((starts[:, None] + np.arange(window)[None, :]).reshape(-1))
        cursor += len(ids) * window
    positions = np.concatenate(pieces)
    return tuple(pools), new_tables, positions


# ---------------------------------------------------------------- reduction helpers
def _pools_end(pools) -> int:
    """Where the pools' bytes end: the last block's data plus the padding the engine checks."""
    return max((p.offset + (p.num_blocks - 1) * p.block_stride + min(p.block_stride, p.data_bytes + GUARD)
                for p in pools), default=1)


def _pool_compacted(case, **changes):
    """`case` with `changes`, in an arena cut to where its pools end."""
    return cut_to_end(case, lambda c: _pools_end(c.pools), **changes)


def _group_ids(case, group: int) -> list[int]:
    return sorted({b for row in case.block_tables[group] for b in row})


def _dense_tables(case):
    """Block ids renumbered 0.. per group (order kept); each pool's block count cut to match."""
    tables, counts = [], []
    for g, table in enumerate(case.block_tables):
        ids = _group_ids(case, g)
        index = {b: k for k, b in enumerate(ids)}
        tables.append(tuple(tuple(index[b] for b in row) for row in table))
        counts.append(max(1, len(ids)))
    pools = tuple(dataclasses.replace(p, num_blocks=counts[p.group]) for p in case.pools)
    return tuple(tables), pools


def _without_group(case, g: int):
    """Block table `g` (which no state uses) dropped; later groups renumbered."""
    pools = tuple(dataclasses.replace(p, group=p.group - (p.group > g)) for p in case.pools)
    return dataclasses.replace(case, block_tables=without(case.block_tables, g), pools=pools)


def _tile_counts(n: int) -> list[int]:
    return sorted({1, 2, n // 2, n - 1} & set(range(1, n)))


# ---------------------------------------------------------------- coverage helpers
def _pool_copy(pool, table_row, src_col, dst_col, bias):
    """(overlap kind, shift bytes, bytes moved, src offset, dst offset) of one state of one request, or None
    when a column is outside the table (the oracle rejects such a case)."""
    cols = len(table_row)
    read_col = src_col + (0 if pool.is_conv else bias)
    if not (0 <= read_col < cols and 0 <= dst_col < cols):
        return None
    src_block, dst_block = table_row[read_col], table_row[dst_col]
    src = pool.offset + src_block * pool.block_stride
    dst = pool.offset + dst_block * pool.block_stride
    if not pool.is_conv:
        return ("same" if src_block == dst_block else "none"), 0, pool.data_bytes, src, dst
    kept = max(0, pool.state_len - bias)
    rows = pool.dim if pool.kind == "conv_ds" else 1
    moved = kept * pool.token_bytes * rows
    shift = bias * pool.token_bytes
    if src_block != dst_block or kept == 0:
        kind = "none"
    else:
        kind = "left" if bias else "same"
    return kind, shift, moved, src + shift, dst


def _pool_align(pool, offset: int) -> str:
    """Alignment of every row a copy touches (DS rows are row_stride apart)."""
    if pool.kind == "conv_ds" and pool.dim > 1:
        return align_label(offset | pool.row_stride_eff)
    return align_label(offset)


_KIND_LABEL = {"conv_sd": "sd", "conv_ds": "ds", "temporal": "temporal"}


def _pool_terms(case, requests) -> list[str]:
    """Which address term of a block some copying request reads or writes reaches 2 GiB: block (block
    id x block stride), element (the block's offset below 2 GiB, one of its elements' at or past it)."""
    terms = set()
    tables = case.block_tables
    for r, src_col, dst_col, bias in requests:
        for pool in case.pools:
            if not 0 <= pool.group < len(tables) or r >= len(tables[pool.group]):
                continue
            row = tables[pool.group][r]
            for col in (src_col, src_col + (0 if pool.is_conv else bias), dst_col):
                if not 0 <= col < len(row):
                    continue
                start = row[col] * pool.block_stride
                if start >= HUGE:
                    terms.add("block")
                elif start + pool.data_bytes - pool.elem_size >= HUGE:
                    terms.add("element")
    return sorted(terms) or ["none"]


def _pools_past_2gib(case) -> bool:
    """Whether a block some table names starts at or past 2 GiB."""
    for pool in case.pools:
        if pool.group < len(case.block_tables):
            top = max((b for row in case.block_tables[pool.group] for b in row), default=0)
            if pool.offset + top * pool.block_stride >= HUGE:
                return True
    return False


class PoolContract(Contract):
    """The shared half of a block-table contract; subclasses add requests, expectation and columns."""

    request_fields: tuple[str, ...] = ()   # per-request case fields (dropped together with a request)
    max_arena = MAX_SPARSE_ARENA

    def image(self, case: PoolCase) -> Image:
        if case.num_tiles < 1:
            raise CaseError(f"num_tiles must be >= 1, got {case.num_tiles}")
        for pool in case.pools:
            pool.validate(case.arena_size)
        tables = np.asarray(case.block_tables, dtype=np.int32)
        if tables.ndim != 3:
            raise CaseError(f"block tables must be [groups, requests, columns], got shape {tables.shape}")
        if case.arena_size > DENSE_LIMIT:
            pools, oracle_tables, positions = _compact(case)
            return Image(positions, (tables, pools, oracle_tables))
        return Image(None, (tables, case.pools, tables))

    def common_args(self, case: PoolCase, image: Image, base: int, device: str) -> tuple[dict, dict]:
        import torch  # deferred: torch takes seconds to import

        tables = image.plan[0]
        args = {"meta": torch.tensor(meta_table(case.pools, base), device=device),
                "block_tables": torch.from_numpy(tables.copy()).to(device)}
        return args, {"num_tiles": case.num_tiles}

    def locate(self, case: PoolCase, offset: int) -> str:
        for s, pool in enumerate(case.pools):
            lo = pool.offset
            if lo <= offset < lo + pool.nbytes:
                block, within = divmod(offset - lo, pool.block_stride)
                part = "data" if within < pool.data_bytes else "padding"
                return f"state {s} ({pool.kind}) block {block} byte {within} ({part})"
        return "outside every pool"

    def valid(self, case: PoolCase) -> bool:
        if case.arena_size < 1:
            return False
        try:
            for p in case.pools:
                p.validate(case.arena_size)
        except oracle.OracleError:
            return False
        tables = case.block_tables
        for p in case.pools:
            if not 0 <= p.group < len(tables):
                return False
            ids = [b for row in tables[p.group] for b in row]
            if ids and not 0 <= min(ids) <= max(ids) < p.num_blocks:
                return False
        return True

    def column_candidates(self, case: PoolCase) -> Iterator[PoolCase]:
        """Cases with a block-table column dropped (none by default)."""
        return iter(())

    def candidates(self, case: PoolCase) -> Iterator[PoolCase]:
        """Requests, states, groups and columns dropped; fewer tiles and blocks; pools packed, arena cut."""
        requests = case.num_requests
        if requests > 1:
            for r in range(requests):
                changes = {f: without(getattr(case, f), r) for f in self.request_fields}
                changes["block_tables"] = tuple(without(table, r) for table in case.block_tables)
                yield dataclasses.replace(case, **changes)
        if len(case.pools) > 1:
            for s in range(len(case.pools)):
                yield dataclasses.replace(case, pools=without(case.pools, s))
        used_groups = {p.group for p in case.pools}
        for g in reversed(range(len(case.block_tables))):
            if g not in used_groups and len(case.block_tables) > 1:
                yield _without_group(case, g)
        yield from self.column_candidates(case)
        for n in _tile_counts(case.num_tiles):
            yield dataclasses.replace(case, num_tiles=n)
        # fewer blocks: ids renumbered densely, or only the unused blocks at the top dropped
        tables, pools = _dense_tables(case)
        yield _pool_compacted(case, block_tables=tables, pools=pools)
        trimmed = tuple(dataclasses.replace(p, num_blocks=max(1, max(_group_ids(case, p.group), default=0) + 1))
                        if p.group < len(case.block_tables) else p for p in case.pools)
        yield _pool_compacted(case, pools=trimmed)
        # pools packed from byte 0 up and the arena cut to their end; exact first, then keeping alignment
        for keep in (False, True):
            yield _pool_compacted(case, pools=packed(case.pools, lambda p: p.num_blocks * p.block_stride, keep))
        if _pools_end(case.pools) < case.arena_size:
            yield _pool_compacted(case)

    # -- coverage
    buckets = {"overlap": ("none", "left", "same"), "shift": SHIFTS, "size": SIZES,
               "aliasing": ("none", "same", "shared"), "src_align": ALIGNS, "dst_align": ALIGNS, "elem": ELEMS,
               "layout": ("sd", "ds", "temporal"), "padding": ("none", "block", "row"), "past_2gib": NO_YES,
               "past_2gib_by": ("none", "block", "element"), "tiles": COUNTS}

    def copying_requests(self, case: PoolCase) -> list[tuple[int, int, int, int]]:
        """(request, src_col, dst_col, bias) of every request that copies."""
        return [(r, s, d, b) for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases))]

    def features(self, case: PoolCase) -> dict[str, str]:
        """Per copied state: overlap kind (a conv shift within one block is left), shift, size, alignments;
        blocks aliased (same: a copy within one block; shared: a block in two requests' rows); element
        sizes, layouts, padding; a block past 2 GiB and which address term reaches it; tiles."""
        kinds, pieces, src_al, dst_al, aliasing = [], [], [], [], set()
        tables = case.block_tables
        requests = self.copying_requests(case)
        for r, src_col, dst_col, bias in requests:
            for pool in case.pools:
                if not 0 <= pool.group < len(tables) or r >= len(tables[pool.group]):
                    continue
                got = _pool_copy(pool, tables[pool.group][r], src_col, dst_col, bias)
                if got is None:
                    continue
                kind, shift, moved, src, dst = got
                kinds.append(kind)
                pieces.append((kind != "none", shift, moved))
                src_al.append(_pool_align(pool, src))
                dst_al.append(_pool_align(pool, dst))
                if kind != "none":
                    aliasing.add("same")
        for table in tables:  # a physical block in two requests' rows (prefix caching)
            owners: dict[int, int] = {}
            for r, row in enumerate(table):
                for b in set(row):
                    if owners.setdefault(b, r) != r:
                        aliasing.add("shared")
        padding = set()
        for p in case.pools:
            if p.block_stride > p.data_bytes:
                padding.add("block")
            if p.kind == "conv_ds" and p.row_stride_eff > p.state_len * p.elem_size:
                padding.add("row")
        own = self.buckets
        return {"overlap": joined(kinds or ["none"], own["overlap"]), **shift_size(pieces),
                "aliasing": joined(aliasing or ["none"], own["aliasing"]),
                "src_align": joined(src_al, ALIGNS), "dst_align": joined(dst_al, ALIGNS),
                "elem": joined([str(p.elem_size) for p in case.pools], ELEMS),
                "layout": joined([_KIND_LABEL.get(p.kind, p.kind) for p in case.pools], own["layout"]),
                "padding": joined(padding or ["none"], own["padding"]),
                "past_2gib": "yes" if _pools_past_2gib(case) else "no",
                "past_2gib_by": joined(_pool_terms(case, requests), own["past_2gib_by"]),
                "tiles": bucket(case.num_tiles, COUNT_EDGES)}

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        """What both block-table contracts draw; subclasses add their own."""
        layout = options.get("layout") or "both"
        layouts = {"both": ("sd", "ds", "temporal"), "sd": ("sd", "temporal"), "ds": ("ds", "temporal")}
        kinds = layouts.get(layout, layouts["both"])
        return {"overlap": ("none", "left", "same"), "aliasing": ("none", "same", "shared"),
                "layout": kinds, "elem": ELEMS, "padding": ("none", "block") + (("row",) if "ds" in kinds else ()),
                "src_align": ALIGNS, "dst_align": ALIGNS, "past_2gib_by": ("none", "block", "element")}


# ---------------------------------------------------------------- what an engine's adapter reads
# (the README documents them as mambafuzz.adapters.*, which re-exports them; torch at first use)

# name -> (meta column, dtype name) of state_columns: addresses and byte strides stay int64; counts and sizes
# fit int32
STATE_COLUMN_TYPES = {
    "base": (META_COLUMNS.index("BASE"), "int64"),
    "block_stride": (META_COLUMNS.index("BLOCK_STRIDE"), "int64"),
    "elem_size": (META_COLUMNS.index("ELEM"), "int32"),
    "inner": (META_COLUMNS.index("INNER"), "int32"),
    "conv_len": (META_COLUMNS.index("CONV_LEN"), "int32"),
    "group": (META_COLUMNS.index("GROUP"), "int32"),
    "ds_rows": (META_COLUMNS.index("DS_ROWS"), "int32"),
    "ds_row_stride": (META_COLUMNS.index("DS_ROW_STRIDE"), "int64"),
}
KIND_TEMPORAL, KIND_SD, KIND_DS = 0, 1, 2  # state_columns(meta)["kind"]


def state_columns(meta) -> dict:
    """The meta table as named per-state arrays ``[S]`` in the dtypes kernels take (STATE_COLUMN_TYPES).

    Also ``kind`` (int32): KIND_TEMPORAL, KIND_SD or KIND_DS.  For a conv state
    ``inner`` is its dim and ``conv_len`` its state_len; for a temporal state
    ``inner`` is prod(inner) elements.
    """
    import torch  # deferred: torch is heavy; the contract's case code runs without it

    cols = len(META_COLUMNS)
    if meta.dtype != torch.int64 or meta.dim() != 2 or meta.shape[1] != cols:
        raise TypeError(f"state_columns: meta must be int64 [S, {cols}], got {meta.dtype} {tuple(meta.shape)}")
    out = {}
    for name, (col, dtype_name) in STATE_COLUMN_TYPES.items():
        dtype = getattr(torch, dtype_name)
        column = meta[:, col]
        if dtype == torch.int32 and column.numel() and int(column.abs().max()) > 2**31 - 1:
            raise ValueError(f"state_columns: {name} does not fit int32")
        out[name] = column.to(dtype).contiguous()
    conv = out["conv_len"] > 0
    out["kind"] = torch.where(conv, torch.where(out["ds_rows"] > 0, KIND_DS, KIND_SD), KIND_TEMPORAL).to(torch.int32)
    return out


def check_block_tables(block_tables) -> None:
    if block_tables.dim() != 3:
        raise TypeError(f"block_tables must be [G, R, C], got shape {tuple(block_tables.shape)}")


def block_table_ptrs(block_tables):
    """int64 ``[G]``: the address of each group's ``[R, C]`` block table (int32 entries)."""
    import torch  # deferred: torch is heavy; the contract's case code runs without it

    check_block_tables(block_tables)
    step = block_tables.stride(0) * block_tables.element_size()
    return torch.tensor([block_tables.data_ptr() + g * step for g in range(block_tables.shape[0])],
                        dtype=torch.int64, device=block_tables.device)


def block_table_row_stride(block_tables) -> int:
    """Entries between request rows of one group's table (what engines pass as ``stride(0)``)."""
    check_block_tables(block_tables)
    return int(block_tables.stride(1))


def state_block_table_ptrs(meta, block_tables):
    """int64 ``[S]``: the block-table address of each state's group (engines with one table per layer)."""
    return block_table_ptrs(block_tables)[meta[:, META_COLUMNS.index("GROUP")].to(block_tables.device)]

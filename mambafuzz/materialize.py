"""Turn a Case into live device memory, a snapshot, and the oracle's expectation.

The expectation is computed once, from the unmodified snapshot, by the oracle;
the target then runs on the live arena (restored from the snapshot before every
repetition) and `compare` reports what differs the way numpy.testing does:
counts first, then the first differing positions with expected and actual.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mambafuzz import oracle
from mambafuzz.kernels import META_COLS
from mambafuzz.kernels.perturb import Perturb

from .cases import BatchCopyCase, Case, PostprocessCase, StateCopyCase
from .errors import CaseError
from .signature import accepts, by_position

MAX_ARENA = 1 << 31      # largest dense arena (2 GiB)
DENSE_LIMIT = 256 << 20  # pool arenas above this are materialised sparsely
MAX_SPARSE_ARENA = 8 << 30
GUARD = 64               # padding bytes after each block's data that sparse mode still checks
FIRST_DIFFS = 8


def fill_bytes(seed: int, n: int) -> np.ndarray:
    """Pseudo-random, never periodic bytes: a shift by any p changes them."""
    return np.random.default_rng(np.random.PCG64(seed)).integers(0, 256, size=n, dtype=np.uint8)


@dataclass
class Mismatch:
    """What differed between a repetition and the oracle, numpy.testing style."""

    count: int
    total: int
    first: list[dict[str, Any]]
    accepted: list[dict[str, int]] = field(default_factory=list)
    note: str = ""  # set when the first bytes could not be captured (see gpu_reps.failing_mismatch)

    def summary(self) -> str:
        parts = []
        if self.count and not self.first:
            parts.append(f"{self.count} of {self.total} bytes differ ({100 * self.count / self.total:.3g}%)")
        elif self.count:
            f = self.first[0]
            parts.append(f"{self.count} of {self.total} bytes differ ({100 * self.count / self.total:.3g}%); "
                         f"first at arena+{f['offset']} ({f['where']}): expected 0x{f['expected']:02x}, "
                         f"got 0x{f['actual']:02x}")
        if self.accepted:
            a = self.accepted[0]
            parts.append(f"accepted count of request {a['request']}: expected {a['expected']}, got {a['actual']}")
        if self.note:
            parts.append(self.note)
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = {"count": self.count, "total": self.total, "first": self.first, "accepted": self.accepted}
        if self.note:
            out["note"] = self.note
        return out


def _locate(case: Case, offset: int) -> str:
    """Name the byte: which copy row or which pool/block/part it belongs to."""
    if isinstance(case, BatchCopyCase):
        for i, (src, dst, n) in enumerate(case.copies):
            if dst <= offset < dst + n:
                return f"row {i} dst byte {offset - dst} (src byte {src + offset - dst})"
        return "outside every destination"
    for s, pool in enumerate(case.pools):
        lo = pool.offset
        if lo <= offset < lo + pool.nbytes:
            block, within = divmod(offset - lo, pool.block_stride)
            part = "data" if within < pool.data_bytes else "padding"
            return f"state {s} ({pool.kind}) block {block} byte {within} ({part})"
    return "outside every pool"


@dataclass
class Materialized:
    """One case on one device: live memory, its snapshot, and the expectation."""

    case: Case
    device: str
    arena: torch.Tensor
    snapshot: np.ndarray
    expected: np.ndarray
    args: dict[str, Any]
    kwargs: dict[str, Any]
    expected_accepted: np.ndarray | None = None
    accepted_snapshot: torch.Tensor | None = None
    _arena_snapshot: torch.Tensor | None = None
    positions: np.ndarray | None = None  # sparse mode: arena offset of each snapshot byte
    _positions: torch.Tensor | None = None
    perturb: Perturb | None = None  # the case's race amplification, validated

    def restore(self) -> None:
        if self._positions is None:
            self.arena.copy_(self._arena_snapshot)
        else:
            self.arena[self._positions] = self._arena_snapshot
        if self.accepted_snapshot is not None:
            self.args["num_accepted"].copy_(self.accepted_snapshot)

    def run(self, fn, amplifiable: bool | None = None) -> None:
        """Call ``fn`` on the live arena, as ``signature.SIGNATURES`` says.

        The contract's arguments go positionally (in contract order), its
        options by keyword, ``arena=`` only when ``fn`` accepts it, and
        ``perturb=`` only when the case has one and the target is amplifiable
        (``amplifiable``, or else ``fn.amplifiable``).
        """
        if amplifiable is None:
            amplifiable = bool(getattr(fn, "amplifiable", False))
        extra = {"arena": self.arena} if accepts(fn, "arena") else {}
        if self.perturb is not None and amplifiable:
            extra["perturb"] = self.perturb
        if by_position(fn, len(self.args)):
            fn(*self.args.values(), **self.kwargs, **extra)
        else:
            fn(**self.args, **self.kwargs, **extra)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor a target may touch, by name (the race recorder's regions)."""
        named = {"arena": self.arena}
        named.update({k: v for k, v in self.args.items() if isinstance(v, torch.Tensor)})
        return named

    def compare(self) -> Mismatch | None:
        if self._positions is None:
            actual = self.arena.cpu().numpy()
        else:  # sparse: filler bytes of the image (position -1) are never touched
            actual = self.snapshot.copy()
            actual[self.positions >= 0] = self.arena[self._positions].cpu().numpy()
        diff = np.flatnonzero(actual != self.expected)
        bad_acc: list[dict[str, int]] = []
        if self.expected_accepted is not None:
            got = self.args["num_accepted"].cpu().numpy()
            for r in np.flatnonzero(got != self.expected_accepted)[:FIRST_DIFFS]:
                bad_acc.append({"request": int(r), "expected": int(self.expected_accepted[r]), "actual": int(got[r])})
        if diff.size == 0 and not bad_acc:
            return None
        offsets = diff if self.positions is None else self.positions[diff]
        first = [{"offset": int(a), "expected": int(self.expected[o]), "actual": int(actual[o]),
                  "where": _locate(self.case, int(a))} for o, a in zip(diff[:FIRST_DIFFS], offsets)]
        return Mismatch(int(diff.size), int(actual.size), first, bad_acc)


def _meta_table(pools, base: int) -> np.ndarray:
    meta = np.zeros((len(pools), META_COLS), dtype=np.int64)
    for s, p in enumerate(pools):
        ds = p.kind == "conv_ds"
        meta[s] = (base + p.offset, p.block_stride, p.elem_size, p.inner_elems,
                   p.state_len if p.is_conv else 0, p.group, p.dim if ds else 0, p.row_stride_eff if ds else 0)
    return meta


def _i32(values, device) -> torch.Tensor:
    return torch.tensor(np.asarray(values, dtype=np.int32).reshape(-1), dtype=torch.int32, device=device)


def _compact(case) -> tuple[tuple[oracle.PoolLayout, ...], np.ndarray, np.ndarray]:
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


def materialize(case: Case, device: str) -> Materialized:
    """Allocate and fill the case's memory on `device`; raise CaseError if it is impossible."""
    pooled = not isinstance(case, BatchCopyCase)
    limit = MAX_SPARSE_ARENA if pooled else MAX_ARENA
    if not 0 < case.arena_size <= limit:
        raise CaseError(f"arena size {case.arena_size} is outside 1..{limit} bytes")
    sparse = pooled and case.arena_size > DENSE_LIMIT
    positions = None
    perturb = None
    if getattr(case, "perturb", None) is not None:
        try:
            perturb = Perturb.from_tuple(case.perturb)
        except (TypeError, ValueError) as exc:
            raise CaseError(f"bad perturb {case.perturb!r}: {exc}") from None
    try:
        if pooled:
            for pool in case.pools:
                pool.validate(case.arena_size)
            tables = np.asarray(case.block_tables, dtype=np.int32)
            if tables.ndim != 3:
                raise CaseError(f"block tables must be [groups, requests, columns], got shape {tables.shape}")
            pools = case.pools
            oracle_tables = tables
            if sparse:
                pools, oracle_tables, positions = _compact(case)
        snapshot = fill_bytes(case.seed, len(positions) if sparse else case.arena_size)
        snapshot.flags.writeable = False
        arena_snapshot = torch.from_numpy(snapshot.copy()).to(device)
        if sparse:
            arena = torch.empty(case.arena_size, dtype=torch.uint8, device=device)
            live = positions >= 0
            positions_dev = torch.from_numpy(positions[live]).to(device)
            arena_snapshot = arena_snapshot[torch.from_numpy(live).to(device)]
            arena[positions_dev] = arena_snapshot
        else:
            arena, positions_dev = arena_snapshot.clone(), None
        base = arena.data_ptr()
        expected_accepted = accepted_snapshot = None
        kwargs: dict[str, Any] = {}
        if not pooled:
            rows = np.asarray(case.copies, dtype=np.int64).reshape(-1, 3)
            src, dst, sizes = rows[:, 0], rows[:, 1], rows[:, 2]
            oracle.check_batch(src, dst, sizes, case.arena_size)
            expected = oracle.expect_batch(snapshot, src, dst, sizes, check=False)
            args = {"src_ptrs": torch.tensor(src + base, device=device),
                    "dst_ptrs": torch.tensor(dst + base, device=device),
                    "sizes": torch.tensor(sizes, device=device)}
        else:
            if case.num_tiles < 1:
                raise CaseError(f"num_tiles must be >= 1, got {case.num_tiles}")
            common = {"meta": torch.tensor(_meta_table(case.pools, base), device=device),
                      "block_tables": torch.from_numpy(tables.copy()).to(device)}
            kwargs["num_tiles"] = case.num_tiles
            if isinstance(case, StateCopyCase):
                expected = oracle.expect_state_copies(snapshot, pools, oracle_tables, case.src_cols,
                                                      case.dst_cols, case.biases)
                args = {**common, "src_cols": _i32(case.src_cols, device),
                        "dst_cols": _i32(case.dst_cols, device), "biases": _i32(case.biases, device)}
            else:
                assert isinstance(case, PostprocessCase)
                expected, expected_accepted = oracle.expect_postprocess(
                    snapshot, pools, oracle_tables, case.num_computed, case.num_scheduled, case.num_draft,
                    case.num_accepted, case.state_idx, case.block_size)
                args = {**common, "num_computed": _i32(case.num_computed, device),
                        "num_scheduled": _i32(case.num_scheduled, device),
                        "num_draft": _i32(case.num_draft, device),
                        "num_accepted": _i32(case.num_accepted, device),
                        "state_idx": _i32(case.state_idx, device)}
                accepted_snapshot = args["num_accepted"].clone()
                kwargs["block_size"] = case.block_size
    except oracle.OracleError as exc:
        raise CaseError(str(exc)) from None
    except (TypeError, ValueError, OverflowError) as exc:  # malformed numbers in a hand-edited case
        raise CaseError(f"malformed case: {exc}") from None
    return Materialized(case, device, arena, snapshot, expected, args, kwargs,
                        expected_accepted=expected_accepted, accepted_snapshot=accepted_snapshot,
                        _arena_snapshot=arena_snapshot, positions=positions, _positions=positions_dev,
                        perturb=perturb)

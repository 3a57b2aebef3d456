"""Cases: the plain, frozen, JSON-serialisable inputs that strategies draw.

A case holds geometry and a data seed, never bytes: the engine materialises the
bytes from the seed, so a crash file stays small and human-readable.  All byte
positions are offsets into one flat arena.

Every case may also carry ``perturb``: ``(position, delay_ns, schedule, seed,
num_warps)`` (``kernels.perturb.Perturb`` as a tuple), the race amplification
an amplifiable target is launched with on a GPU.  ``None`` (the default) is
left out of the JSON, so a case without one hashes as it always did and old
crash files load unchanged.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from mambafuzz.oracle import PoolLayout

from .errors import CaseError

SCHEMA_VERSION = 1
CONTRACTS = ("batch_memcpy", "state_copy", "postprocess")


def _tuples(value):
    """Lists (from JSON) back to nested tuples so cases stay hashable and frozen."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


class _CaseBase:
    contract: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        if body.get("perturb", None) is None:
            body.pop("perturb", None)  # absent, not null: the hash of an unperturbed case is unchanged
        body["contract"] = self.contract
        return body

    def with_perturb(self, perturb):
        """The same case with ``perturb`` (a 5-tuple, a ``Perturb``, or None)."""
        if perturb is not None and not isinstance(perturb, tuple):
            perturb = perturb.to_tuple()
        return dataclasses.replace(self, perturb=perturb)

    def _perturb_note(self) -> str:
        p = getattr(self, "perturb", None)
        if p is None:
            return ""
        pos, ns, sched, seed, warps = p
        return f"; perturb: pos {pos}, {ns} ns, schedule {sched}, seed {seed}, {warps} warps"

    def content_hash(self) -> str:
        """Stable across runs and machines: sha256 of the canonical JSON."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def with_seed(self, seed: int):
        return dataclasses.replace(self, seed=seed)


@dataclass(frozen=True)
class BatchCopyCase(_CaseBase):
    """`batch_memcpy` contract: rows of (src, dst, size) byte offsets into the arena."""

    contract: ClassVar[str] = "batch_memcpy"
    arena_size: int
    copies: tuple[tuple[int, int, int], ...]
    seed: int = 0
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def size(self) -> tuple:
        """A shrink measure, compared as the tuple (rows, bytes moved, layout, data seed not 0).

        Layout = 2 x each row's |src - dst| + its lower offset, plus the arena
        size, plus 1 for a perturbation: a smaller shift, a row moved towards
        byte 0, a smaller arena and no perturbation are each strictly smaller;
        the fill seed 0 is the canonical tie-break.
        """
        moved = sum(n for _, _, n in self.copies)
        layout = sum(2 * abs(s - d) + min(s, d) for s, d, _ in self.copies)
        layout += self.arena_size + (self.perturb is not None)
        return (len(self.copies), moved, layout, self.seed != 0)

    def describe(self) -> str:
        rows = ", ".join(f"{s}->{d} ({n} B)" for s, d, n in self.copies[:4])
        more = f", +{len(self.copies) - 4} more" if len(self.copies) > 4 else ""
        return f"{len(self.copies)} row(s): {rows}{more}{self._perturb_note()}"


@dataclass(frozen=True)
class _PoolCase(_CaseBase):
    arena_size: int
    pools: tuple[PoolLayout, ...]
    block_tables: tuple[tuple[tuple[int, ...], ...], ...]  # [G][R][C]
    num_tiles: int = 1
    seed: int = 0

    @property
    def num_requests(self) -> int:
        return len(self.block_tables[0]) if self.block_tables else 0

    def _pool_summary(self) -> str:
        kinds = ",".join(f"{p.kind}/e{p.elem_size}" for p in self.pools)
        return f"{len(self.pools)} state(s) [{kinds}], {len(self.block_tables)} group(s)"


@dataclass(frozen=True)
class StateCopyCase(_PoolCase):
    """`state_copy` contract: request i copies every state (src_col, dst_col, bias)."""

    contract: ClassVar[str] = "state_copy"
    src_cols: tuple[int, ...] = ()
    dst_cols: tuple[int, ...] = ()
    biases: tuple[int, ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def size(self) -> tuple:
        """A shrink measure, compared as the tuple (requests, states, data bytes + biases, tiles, layout,
        data seed not 0).

        Layout = arena size + pool offsets + block counts + block-table
        entries, plus 1 for a perturbation: packed pools, a cut arena, fewer
        blocks, table columns or groups, fewer tiles are each strictly smaller.
        """
        layout = (self.arena_size + sum(p.offset + p.num_blocks for p in self.pools)
                  + sum(len(row) for table in self.block_tables for row in table) + (self.perturb is not None))
        data = sum(p.data_bytes for p in self.pools) + sum(self.biases)
        return (len(self.src_cols), len(self.pools), data, self.num_tiles, layout, self.seed != 0)

    def describe(self) -> str:
        reqs = ", ".join(f"r{i}: col {s}->{d} bias {b}" for i, (s, d, b) in
                         enumerate(zip(self.src_cols, self.dst_cols, self.biases)))
        return f"{self._pool_summary()}, tiles {self.num_tiles}; {reqs}{self._perturb_note()}"


@dataclass(frozen=True)
class PostprocessCase(_PoolCase):
    """`postprocess` contract: SPEC 2.5's decision plus the copies, per request."""

    contract: ClassVar[str] = "postprocess"
    block_size: int = 1
    num_computed: tuple[int, ...] = ()
    num_scheduled: tuple[int, ...] = ()
    num_draft: tuple[int, ...] = ()
    num_accepted: tuple[int, ...] = ()
    state_idx: tuple[int, ...] = ()
    perturb: tuple[int, int, int, int, int] | None = None

    @property
    def size(self) -> tuple:
        """Like StateCopyCase.size: (requests, states, data bytes, tiles, layout, data seed not 0)."""
        layout = (self.arena_size + sum(p.offset + p.num_blocks for p in self.pools)
                  + sum(len(row) for table in self.block_tables for row in table) + (self.perturb is not None))
        data = sum(p.data_bytes for p in self.pools)
        return (len(self.num_computed), len(self.pools), data, self.num_tiles, layout, self.seed != 0)

    def describe(self) -> str:
        reqs = ", ".join(
            f"r{i}: comp {c} sched {s} draft {d} acc {a} idx {x}" for i, (c, s, d, a, x) in enumerate(
                zip(self.num_computed, self.num_scheduled, self.num_draft, self.num_accepted, self.state_idx)))
        return (f"{self._pool_summary()}, block_size {self.block_size}, tiles {self.num_tiles}; {reqs}"
                f"{self._perturb_note()}")


CASE_TYPES = {cls.contract: cls for cls in (BatchCopyCase, StateCopyCase, PostprocessCase)}
Case = BatchCopyCase | StateCopyCase | PostprocessCase


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count


def _int(name: str, value, low: int | None = None) -> None:
    if not _is_int(value):
        raise CaseError(f"case field {name!r} must be an integer, got {_show(value)}")
    if low is not None and value < low:
        bound = "positive" if low == 1 else "non-negative" if low == 0 else f">= {low}"
        raise CaseError(f"case field {name!r} must be {bound}, got {value}")


def _int_list(name: str, value, low: int | None = None, length: int | None = None) -> None:
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field {name!r} must be a list of integers, got {_show(value)}")
    if length is not None and len(value) != length:
        raise CaseError(f"case field {name!r} must hold {length} integers, got {len(value)}")
    for i, v in enumerate(value):
        _int(f"{name}[{i}]", v, low)


def _nested(name: str, value, depth: int) -> None:
    """A list nested `depth` deep whose leaves are integers (block tables)."""
    if depth == 1:
        _int_list(name, value)
        return
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field {name!r} must be a list, got {_show(value)}")
    for i, v in enumerate(value):
        _nested(f"{name}[{i}]", v, depth - 1)


_POOL_REQUIRED = ("kind", "offset", "num_blocks", "block_stride", "elem_size")
_POOL_FIELDS = {f.name for f in dataclasses.fields(PoolLayout)}


def _check_pools(value) -> None:
    """Types only; the oracle (PoolLayout.validate) judges the geometry."""
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field 'pools' must be a list of pool objects, got {_show(value)}")
    for i, pool in enumerate(value):
        where = f"pools[{i}]"
        if not isinstance(pool, dict):
            raise CaseError(f"case field {where!r} must be an object, got {_show(pool)}")
        missing = [k for k in _POOL_REQUIRED if k not in pool]
        if missing:
            raise CaseError(f"case field {where!r} is missing {', '.join(missing)}")
        unknown = sorted(set(pool) - _POOL_FIELDS)
        if unknown:
            raise CaseError(f"case field {where!r} has unknown field(s): {', '.join(unknown)}")
        if not isinstance(pool["kind"], str):
            raise CaseError(f"case field '{where}.kind' must be a string, got {_show(pool['kind'])}")
        for key, v in pool.items():
            if key == "inner":
                _int_list(f"{where}.inner", v)
            elif key != "kind":
                _int(f"{where}.{key}", v)


def _check_copies(value) -> None:
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field 'copies' must be a list of [src, dst, size] rows, got {_show(value)}")
    for i, row in enumerate(value):
        if not isinstance(row, (list, tuple)) or len(row) != 3:
            raise CaseError(f"case field 'copies[{i}]' must be [src, dst, size], got {_show(row)}")
        for j, v in enumerate(row):
            _int(f"copies[{i}][{j}]", v, 0)


_FIELD_CHECKS = {
    "arena_size": lambda v: _int("arena_size", v, 1),
    "seed": lambda v: _int("seed", v, 0),
    "num_tiles": lambda v: _int("num_tiles", v, 1),
    "block_size": lambda v: _int("block_size", v, 1),
    "copies": _check_copies,
    "pools": _check_pools,
    "block_tables": lambda v: _nested("block_tables", v, 3),
    "perturb": lambda v: None if v is None else _int_list("perturb", v, 0, length=5),
    **{name: (lambda v, name=name: _int_list(name, v))
       for name in ("src_cols", "dst_cols", "biases", "num_computed", "num_scheduled", "num_draft",
                    "num_accepted", "state_idx")},
}


def case_from_json(body: dict[str, Any]) -> Case:
    """Inverse of `to_json`; raises CaseError naming the field that is wrong.

    Every field is type-checked here (ints are ints, never bools or floats;
    sizes positive, offsets non-negative) so that a hand-edited or corrupted
    case fails in one line before it reaches numpy or a kernel; geometry
    (overlaps, pools past the arena) is the oracle's to judge.
    """
    if not isinstance(body, dict):
        raise CaseError(f"a case must be a JSON object, got {type(body).__name__}")
    contract = body.get("contract")
    cls = CASE_TYPES.get(contract) if isinstance(contract, str) else None
    if cls is None:
        raise CaseError(f"unknown case contract {contract!r} (known: {', '.join(CONTRACTS)})")
    names = {f.name for f in dataclasses.fields(cls)}
    missing = [n for n, f in cls.__dataclass_fields__.items()
               if n not in body and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise CaseError(f"{contract} case is missing field(s): {', '.join(missing)}")
    unknown = set(body) - names - {"contract"}
    if unknown:
        raise CaseError(f"{contract} case has unknown field(s): {', '.join(sorted(unknown))}")
    for name in names:
        if name in body:
            _FIELD_CHECKS[name](body[name])
    kwargs = {k: _tuples(v) for k, v in body.items() if k in names}
    if "pools" in kwargs:
        kwargs["pools"] = tuple(PoolLayout(**{k: _tuples(v) for k, v in p.items()}) for p in body["pools"])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise CaseError(f"malformed {contract} case: {exc}") from None

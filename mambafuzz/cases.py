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

from oracle import PoolLayout

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
    def size(self) -> int:
        """A shrink measure: rows and bytes moved."""
        return len(self.copies) * 1_000_000 + sum(c[2] for c in self.copies)

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
    def size(self) -> int:
        return len(self.src_cols) * 1_000_000 + sum(p.data_bytes for p in self.pools) + sum(self.biases)

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
    def size(self) -> int:
        return len(self.num_computed) * 1_000_000 + sum(p.data_bytes for p in self.pools)

    def describe(self) -> str:
        reqs = ", ".join(
            f"r{i}: comp {c} sched {s} draft {d} acc {a} idx {x}" for i, (c, s, d, a, x) in enumerate(
                zip(self.num_computed, self.num_scheduled, self.num_draft, self.num_accepted, self.state_idx)))
        return (f"{self._pool_summary()}, block_size {self.block_size}, tiles {self.num_tiles}; {reqs}"
                f"{self._perturb_note()}")


CASE_TYPES = {cls.contract: cls for cls in (BatchCopyCase, StateCopyCase, PostprocessCase)}
Case = BatchCopyCase | StateCopyCase | PostprocessCase


def case_from_json(body: dict[str, Any]) -> Case:
    """Inverse of `to_json`; raises CaseError naming what is wrong."""
    if not isinstance(body, dict):
        raise CaseError(f"a case must be a JSON object, got {type(body).__name__}")
    contract = body.get("contract")
    cls = CASE_TYPES.get(contract)
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
    kwargs = {k: _tuples(v) for k, v in body.items() if k in names}
    if kwargs.get("perturb") is not None:
        p = kwargs["perturb"]
        if not (isinstance(p, tuple) and len(p) == 5
                and all(isinstance(x, int) and not isinstance(x, bool) for x in p)):
            raise CaseError(f"perturb must be null or [position, delay_ns, schedule, seed, num_warps] "
                            f"(5 ints), got {body['perturb']!r}")
    if "pools" in kwargs:
        try:
            kwargs["pools"] = tuple(PoolLayout(**{k: _tuples(v) for k, v in p.items()}) for p in body["pools"])
        except (TypeError, AttributeError) as exc:
            raise CaseError(f"malformed pool in case: {exc}") from None
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise CaseError(f"malformed {contract} case: {exc}") from None


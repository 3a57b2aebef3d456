"""Cases: the plain, frozen, JSON-serialisable inputs that strategies draw.

A case holds geometry and a data seed, never bytes: the engine materialises the
bytes from the seed, so a crash file stays small and human-readable.  All byte
positions are offsets into one flat arena.  Each contract module
(``mambafuzz.contracts.*``) defines its case type on ``CaseBase``.

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
from typing import Any, ClassVar

from mambafuzz.errors import CaseError

SCHEMA_VERSION = 1


def as_tuples(value):
    """Lists (from JSON) back to nested tuples so cases stay hashable and frozen."""
    if isinstance(value, (list, tuple)):
        return tuple(as_tuples(v) for v in value)
    return value


def show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count


INT64 = 1 << 63  # every integer field fits int64: numpy holds it without an OverflowError
INT32 = 1 << 31  # the bound of a field a target receives as int32 (counts, index columns)
TOKENS = 1 << 20  # the most tokens a row's count or an index stride may name (sizes a host array)


def check_int(name: str, value, low: int | None = None, high: int = INT64 - 1) -> None:
    if not _is_int(value):
        raise CaseError(f"case field {name!r} must be an integer, got {show(value)}")
    if low is not None and value < low:
        bound = "positive" if low == 1 else "non-negative" if low == 0 else f">= {low}"
        raise CaseError(f"case field {name!r} must be {bound}, got {value}")
    if value > high:
        raise CaseError(f"case field {name!r} must be at most {high}, got {show(value)}")
    if value < -INT64:
        raise CaseError(f"case field {name!r} must fit in 64 bits, got {show(value)}")


def check_int_list(name: str, value, low: int | None = None, length: int | None = None,
                   high: int = INT64 - 1) -> None:
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field {name!r} must be a list of integers, got {show(value)}")
    if length is not None and len(value) != length:
        raise CaseError(f"case field {name!r} must hold {length} integers, got {len(value)}")
    for i, v in enumerate(value):
        check_int(f"{name}[{i}]", v, low, high)


def check_nested(name: str, value, depth: int) -> None:
    """A list nested `depth` deep whose leaves are integers (block tables)."""
    if depth == 1:
        check_int_list(name, value)
        return
    if not isinstance(value, (list, tuple)):
        raise CaseError(f"case field {name!r} must be a list, got {show(value)}")
    for i, v in enumerate(value):
        check_nested(f"{name}[{i}]", v, depth - 1)


FLOAT_DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}  # the update contracts' float dtypes: bytes
UPDATE_PADS = (-1, 0)  # the pad slot id, -1 or the null block 0 (docs/contracts.md#pad)


def one_of(name: str, choices):
    """A field check: the value is one of `choices`."""
    def check(value) -> None:
        if value not in choices:
            raise CaseError(f"case field {name!r} must be one of {', '.join(map(str, choices))}, got {show(value)}")
    return check


def boolean(name: str):
    """A field check: true or false."""
    def check(value) -> None:
        if not isinstance(value, bool):
            raise CaseError(f"case field {name!r} must be true or false, got {show(value)}")
    return check


def optional_int_list(name: str, low: int | None, high: int = INT64 - 1):
    """A field check: null, or a list of integers in `low`..`high`."""
    def check(value) -> None:
        if value is not None:
            check_int_list(name, value, low, high=high)
    return check


def index_table(name: str, rows: str = "B", optional: bool = False):
    """A field check: a rectangular [rows][C] integer table with C >= 1 (null allowed if `optional`)."""
    def check(value) -> None:
        if value is None and optional:
            return
        check_nested(name, value, 2)
        if len({len(row) for row in value}) > 1 or any(len(row) == 0 for row in value):
            raise CaseError(f"case field {name!r} must be rectangular [{rows}][C] with C >= 1")
    return check


def check_objects(name: str, noun: str, value, required, known, check_member) -> None:
    """A list of JSON objects (pools, buffers): each an object with every `required` key and none
    outside `known`; ``check_member(where, key, member_value)`` judges each member's type."""
    if not isinstance(value, (list, tuple)) or not value:
        raise CaseError(f"case field {name!r} must be a list of {noun} objects, at least one, got {show(value)}")
    for i, obj in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(obj, dict):
            raise CaseError(f"case field {where!r} must be an object, got {show(obj)}")
        missing = [k for k in required if k not in obj]
        if missing:
            raise CaseError(f"case field {where!r} is missing {', '.join(missing)}")
        unknown = sorted(set(obj) - set(known))
        if unknown:
            raise CaseError(f"case field {where!r} has unknown field(s): {', '.join(unknown)}")
        for key, member in obj.items():
            check_member(f"{where}.{key}", key, member)


class CaseBase:
    """What every case type shares: JSON, hashing, the perturbation, field checks."""

    contract: ClassVar[str]
    # field -> check(value) raising CaseError; merged along the class hierarchy
    FIELD_CHECKS: ClassVar[dict] = {
        "seed": lambda v: check_int("seed", v, 0),
        "perturb": lambda v: None if v is None else check_int_list("perturb", v, 0, length=5),
    }

    def to_json(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        if body.get("perturb", None) is None:
            body.pop("perturb", None)  # absent, not null: the hash of an unperturbed case is unchanged
        body["contract"] = self.contract
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]):
        """Inverse of `to_json` for this case type; CaseError names the field that is wrong."""
        contract = cls.contract
        names = {f.name for f in dataclasses.fields(cls)}
        missing = [n for n, f in cls.__dataclass_fields__.items()
                   if n not in body and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise CaseError(f"{contract} case is missing field(s): {', '.join(missing)}")
        unknown = set(body) - names - {"contract"}
        if unknown:
            raise CaseError(f"{contract} case has unknown field(s): {', '.join(sorted(unknown))}")
        checks: dict = {}
        for klass in reversed(cls.__mro__):
            checks.update(klass.__dict__.get("FIELD_CHECKS", {}))
        for name in names:
            if name in body:
                checks[name](body[name])
        kwargs = {k: as_tuples(v) for k, v in body.items() if k in names}
        kwargs = cls._from_json_fields(body, kwargs)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise CaseError(f"malformed {contract} case: {exc}") from None

    @classmethod
    def _from_json_fields(cls, body: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Hook for fields that are objects, not plain values (pools)."""
        return kwargs

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


Case = CaseBase


"""What a contract is: everything mambafuzz knows about one shape of state-moving kernel.

A contract module defines its case type and one ``Contract`` subclass instance:
how cases are drawn (``strategy``), laid out in memory and what the oracle
expects of them (``image``, ``prepare``), how a failing case is cut smaller
(``candidates``, ``valid``), how a byte is named in a report (``locate``), what
a target is called with (``arguments``, ``options``, with dtypes and shapes),
the CLI options that describe what a user's kernel supports, and its zoo rows.
Nothing outside the contract modules branches on the case type.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class Argument:
    """One argument a target receives: the adapter table in the README is made of these."""

    name: str
    dtype: str
    shape: str
    meaning: str


@dataclass(frozen=True)
class CliOption:
    """A contract option a user sets on the command line (what their kernel supports)."""

    name: str            # the keyword it reaches the strategy and the target spec by
    choices: tuple
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass
class Image:
    """Which arena bytes are live: ``positions`` maps a sparse image to arena offsets (None: dense);
    ``plan`` is whatever the contract needs again in ``prepare`` (compacted pools, say)."""

    positions: np.ndarray | None = None
    plan: Any = None


@dataclass(frozen=True)
class Output:
    """An argument the target updates in place (not arena bytes), and what it must hold afterwards.

    Compared element by element: exactly, or within ``atol + rtol * |expected|``
    where a contract's outputs are float math; elements where ``care`` is False are not compared.  ``what`` names one element in a
    report ("request {i}"); the engine restores the argument before every run.  The arrays are numpy,
    or torch tensors on the case's device (an oracle that ran there: nothing crosses to the host unless
    a difference is reported).
    """

    name: str
    expected: Any                    # np.ndarray or torch.Tensor
    atol: Any = 0.0                  # a scalar, or one bound per element (as `expected`)
    rtol: float = 0.0
    what: str = "element {i}"
    care: Any = None                 # bool, as `expected`: False where any value is right (a pad row's output)

    @cached_property
    def tolerant(self) -> bool:
        """Whether elements are judged within a tolerance (else equal, where compared)."""
        zero = self.atol == 0
        return not (bool(zero.all()) if hasattr(zero, "all") else bool(zero)) or self.rtol != 0

    @property
    def exact(self) -> bool:
        return not self.tolerant and self.care is None


@dataclass
class Prepared:
    """A case on a device: the target's arguments and the oracle's expectation."""

    args: dict[str, Any]                   # positional arguments, in call order
    kwargs: dict[str, Any]                 # keyword options
    expected: np.ndarray                   # the arena (or sparse image) after a correct run
    outputs: tuple[Output, ...] = ()       # arguments the target updates in place


class Contract:
    """Base of the contract definitions; each contract module makes one instance."""

    name: str = ""
    case_type: type = object
    summary: str = ""
    arguments: tuple[Argument, ...] = ()
    options: tuple[Argument, ...] = ()
    cli_options: tuple[CliOption, ...] = ()
    max_arena: int = 1 << 31
    # coverage: this contract's own features and their buckets in display order (``features`` draws
    # labels from them; ``search/features.py`` adds the perturbation's and the verdict's)
    buckets: dict[str, tuple[str, ...]] = {}
    # the module a user's contract was registered from (None: built in); crash files and workers record it
    origin: str | None = None
    origin_path: str | None = None   # the folder that module imports from

    def origin_record(self) -> dict[str, str] | None:
        """Where a process that lacks this contract imports it from (``contracts.import_origin``)."""
        if not self.origin:
            return None
        return {"module": self.origin, **({"path": self.origin_path} if self.origin_path else {})}

    @property
    def positional(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arguments)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.options)

    def signature_text(self) -> str:
        keywords = "".join(f", {o}" for o in self.option_names)
        return f"fn({', '.join(self.positional)}, *{keywords}, arena=None)"

    def narrowed(self, given: dict[str, Any] | None = None) -> dict[str, str]:
        """This contract's options in `given` that differ from their defaults, as text: what a run left out
        of the draws (a report says so next to a clean verdict)."""
        given = given or {}
        return {o.name: str(given[o.name]) for o in self.cli_options
                if given.get(o.name) is not None and str(given[o.name]) != str(o.default)}

    def defaults(self, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """This contract's CLI options with their defaults, overridden by `given` (unknown keys dropped)."""
        given = given or {}
        return {o.name: given.get(o.name, o.default) if given.get(o.name) is not None else o.default
                for o in self.cli_options}

    # -- drawing, materialising, judging: each contract module implements these
    def strategy(self, profile, **options):
        raise NotImplementedError

    def image(self, case) -> Image:
        return Image()

    def fill(self, case, image: Image, snapshot: np.ndarray) -> None:
        """Shape the seeded random bytes in place before they are snapshotted (default: leave them):
        a contract whose oracle does float math writes finite, distinct values into its float regions."""

    def prepare(self, case, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        """The target's arguments and the oracle's expectation (from `snapshot`, never from `arena`).

        `arena` is the live uint8 tensor on `device` holding the snapshot's bytes (its ``data_ptr()`` is
        byte 0 of the case): pointers are addresses into it, tensor arguments may be views of it.
        """
        raise NotImplementedError

    def locate(self, case, offset: int) -> str:
        return ""

    def candidates(self, case) -> Iterator:
        return iter(())

    def valid(self, case) -> bool:
        return True

    def admits(self, case, options: dict[str, Any]) -> bool:
        """Whether the strategy could draw `case` under `options` (the run's contract options): shrinking
        keeps to what the user's kernel takes, never trading a finding for a case outside it."""
        return True

    # -- coverage: what one case exercised, and what a run of the default sizes must have drawn
    def features(self, case) -> dict[str, str]:
        """{feature: bucket label} of one case; the race map's (shift, size) under ``RACE_SHIFT`` /
        ``RACE_SIZE`` of ``contracts.features`` (optional)."""
        return {}

    def expected_features(self, options: dict[str, Any]) -> dict[str, tuple[str, ...]]:
        """The buckets this contract's strategy draws under `options`, reliably, a few hundred examples
        each: one never drawn is warned about as a hole in what was tested."""
        return {}

    def zoo(self) -> list:
        """The zoo targets of this contract (imports the kernels: the device must be chosen first)."""
        from mambafuzz.kernels import registry  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)
        return [t for t in registry.zoo_targets() if t.contract == self.name]


def host_array(values) -> np.ndarray:
    """An ``Output``'s array (numpy, a torch tensor anywhere, a scalar) as numpy on the host."""
    if hasattr(values, "detach"):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def without(items: tuple, i: int) -> tuple:
    return items[:i] + items[i + 1:]


def down_to(value: int, residue: int, modulus: int) -> int:
    """The smallest x >= value with x % modulus == residue % modulus."""
    return value + (residue - value) % modulus


def packed(regions, nbytes, keep_alignment: bool) -> tuple:
    """Regions (dataclasses with ``offset`` and ``elem_size``) moved down to byte 0 in offset order, each
    right after the one before (``nbytes(region)`` long), keeping each offset's residue mod 8
    (`keep_alignment`) or mod its element size."""
    out = list(regions)
    cursor = 0
    for i in sorted(range(len(regions)), key=lambda i: regions[i].offset):
        r = regions[i]
        offset = min(r.offset, down_to(cursor, r.offset, 8 if keep_alignment else r.elem_size))
        out[i] = dataclasses.replace(r, offset=offset)
        cursor = offset + nbytes(r)
    return tuple(out)


def cut_to_end(case, end, **changes):
    """`case` with `changes`, in an arena cut to ``end(changed case)`` (at least 1 byte)."""
    out = dataclasses.replace(case, **changes)
    return dataclasses.replace(out, arena_size=max(1, end(out)))

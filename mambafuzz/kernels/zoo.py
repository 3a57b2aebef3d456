"""The bug zoo (docs/contracts.md#zoo) as data: the row type.

A kernel module that declares its own targets (``kernels/registry.py``) lists its
rows next to its kernel, as ``ZOO`` (the copy family's rows: ``kernels/copy_family.py``);
``registry.ZOO`` is every row.

Every entry is the project's correct kernel with exactly one bug, switched on
by a constexpr flag (compiled out of the correct kernel) or, for PP-INPLACE,
by the launcher passing the live tensor where the per-step snapshot belongs.
``variant`` is the ``variant=`` value the contract's launcher takes.

``kind`` says how the bug shows, in the project's words (docs/contracts.md#zoo).  ``interpreter`` says what the CPU
interpreter shows on a case that exercises the bug (programs run one after
another, every tensor op loads all its lanes before it stores any):

* ``"wrong"``: the bytes differ from the oracle, so any mode catches it;
* ``"right bytes"``: the bytes come out right; only the race recorder (docs/contracts.md#races)
  or a GPU catches it.

``cpu`` and ``gpu`` are the verdict kinds (``engine.KINDS``) that count as
catching the bug: on the CPU (the race check, the bounds fence and the
oracle) and on a GPU (the bytes compared; a CUDA fault).  A finding of any
other kind -- the launcher raising, say -- is an escape, as is a clean run.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class ZooEntry:
    id: str
    contract: str      # a contract's name (mambafuzz.contracts)
    kind: str          # one of the kinds of docs/contracts.md#zoo
    description: str   # one line
    produced_by: str   # how the variant is made
    interpreter: str   # what the CPU interpreter shows (see module docstring)
    cpu: tuple[str, ...]   # the verdict kinds that catch it on the CPU (see module docstring)
    gpu: tuple[str, ...]   # ... and on a GPU
    options: tuple = ()    # (name, value) contract options the row is fuzzed with (e.g. min_accepted 0)

    @property
    def variant(self) -> str:
        return self.id

    def caught_as(self, device: str) -> tuple[str, ...]:
        """The verdict kinds that count as catching this bug on `device` ('cpu' or 'cuda')."""
        return self.cpu if device == "cpu" else self.gpu

    @property
    def racy(self) -> bool:
        return "racy" in self.kind

    @property
    def wrong(self) -> bool:
        return "wrong" in self.kind


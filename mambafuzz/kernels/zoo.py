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
    memory: int = 0        # device bytes the biggest case its bug needs takes (PAST_2GIB: it shows only there)

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

# What a row whose bug shows only in pools past 2 GiB (the int32-offset rows) needs of a worker's memory budget
# (control.mps): a sparse arena at its limit (cases.pools.MAX_SPARSE_ARENA, 8 GiB; a test keeps them
# in step) and its live bytes, snapshot and offsets on the device.  Such a row is dealt to a worker with room.
PAST_2GIB = 9 << 30

# Seconds a row has needed, from a fresh start, to its first failure (the worst of its measured seeds;
# bench/zoo_ttf.py writes them, bench/RESULTS.md keeps the tables).  The zoo starts the slowest rows first
# (``order``) so that a slow row is never the one the end of --time cuts off, and, with several workers,
# deals them out so that each worker's rows cost about the same.  A row not listed costs DEFAULT_COST.
COST = {
    # H200, gpu-amp: issue 44's worst for its three named rows; the others the second worst of the stored
    # amplified zoo runs (bench/results/zoo_gpu_amp*_h200*.json, escapes_h200*, updzoo*), those over 2 s
    "cuda": {
        "SSM-TOKSTRIDE": 13.2, "DU-STEPS": 11.9, "PAD-CLOBBER": 8.0, "PP-INPLACE": 7.4, "SSM-DSTPAD": 5.4,
        "BM-NOGUARD": 4.8, "DS-ROW": 4.1, "CU-I32": 4.0, "SSM-NOCLAMP": 3.5, "SLOT-I32": 3.5, "SD-SPAN": 3.4,
        "SSM-I32": 3.0, "NOOP-SKIP": 2.9, "DU-TRANSPOSE": 2.8, "CU-NOCLAMP": 2.5,
    },
    # the interpreter, race mode: the worst of 3 seeds, 2 workers on a loaded 2-core box (bench/RESULTS.md,
    # issue 44), those over 2 s
    "cpu": {
        "SSM-I32": 19.0, "SSM-TOKSTRIDE": 17.1, "SSM-NOCLAMP": 13.4, "ADDR-I32": 12.2, "PAD-CLOBBER": 9.1,
        "TILE-GAP": 8.4, "NOOP-SKIP": 4.1, "CU-DSTPAD": 3.9, "SLOT-I32": 3.8, "DS-ROW": 3.6, "SSM-DSTPAD": 3.3,
        "DU-PADSTORE": 2.7, "CU-NOCLAMP": 2.2, "CP-BOUNDARYX": 2.2,
    },
}
DEFAULT_COST = 2.0


def cost(zoo_id: str, device: str) -> float:
    """The seconds row `zoo_id` is expected to need on `device` (``COST``; DEFAULT_COST unknown)."""
    return COST.get("cpu" if device == "cpu" else "cuda", {}).get(zoo_id, DEFAULT_COST)


def order(targets: list, device: str) -> list:
    """`targets` with the zoo rows slowest first (by ``cost``), ties and other targets in their order."""
    return sorted(targets, key=lambda t: -cost(t.zoo_id, device) if getattr(t, "zoo_id", None) else -DEFAULT_COST)

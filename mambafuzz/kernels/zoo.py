"""The bug zoo (docs/contracts.md#zoo) as data: the row type, and the rows of the pointer and slot kernels.

A kernel module that declares its own targets (``kernels/registry.py``) lists its
rows next to its kernel, as ``ZOO``; ``registry.ZOO`` is every row.

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


ZOO = (
    ZooEntry(
        "BM-NOGUARD", "batch_memcpy", "racy",
        "batch copy with no barrier between load and store on left overlap (dst < src)",
        "batch_memcpy(variant='BM-NOGUARD'): move_span(NOGUARD_LEFT=True)",
        "right bytes",
        cpu=("race",), gpu=("mismatch",)),
    ZooEntry(
        "BM-RIGHT", "batch_memcpy", "wrong + racy",
        "batch copy that walks forward (ascending) on right overlap (dst > src); barrier kept",
        "batch_memcpy(variant='BM-RIGHT'): move_span(FORWARD_RIGHT=True)",
        "wrong when the right overlap spans more than one piece (a later piece loads "
        "bytes an earlier piece stored); right bytes for a single-piece copy",
        cpu=("race", "mismatch"), gpu=("mismatch",)),
    ZooEntry(
        "SD-SPAN", "state_copy", "racy",
        "SD conv same-block shift copied as one parallel span with no barrier",
        "state_copy(variant='SD-SPAN'): copy_one_state(SD_SPAN=True) -> one "
        "move_span(NOGUARD_LEFT=True) instead of the token loop",
        "right bytes",
        cpu=("race",), gpu=("mismatch",)),
    ZooEntry(
        "DS-ROW", "state_copy", "racy",
        "DS conv same-block shift, each row copied as one parallel byte run (unguarded)",
        "state_copy(variant='DS-ROW'): copy_one_state(DS_ROW=True) -> per row "
        "move_span(NOGUARD_LEFT=True) of bytes bias*elem.. -> 0..",
        "right bytes",
        cpu=("race",), gpu=("mismatch",)),
    ZooEntry(
        "DS-CONTIG", "state_copy", "wrong",
        "DS conv with bias > 0 copied as if the tail were contiguous",
        "state_copy(variant='DS-CONTIG'): copy_one_state(DS_CONTIG=True) -> one guarded "
        "move_span from block+bias*elem of n_tokens*elem*dim bytes",
        "wrong",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "ADDR-I32", "state_copy", "wrong",
        "block_id * block_stride computed in 32 bits (pools over 2 GiB)",
        "state_copy(variant='ADDR-I32'): copy_one_state(ADDR_I32=True) -> int32 product",
        "wrong when block_id*block_stride >= 4 GiB (lands on a lower block); between 2 and "
        "4 GiB the address goes negative (a fault)",
        cpu=("oob", "mismatch"), gpu=("mismatch", "fault")),
    ZooEntry(
        "TAIL-DROP", "batch_memcpy", "wrong",
        "u64 copy that drops the last size % 8 bytes",
        "batch_memcpy(variant='TAIL-DROP'): move_span(DROP_TAIL=True)",
        "wrong",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "MISALIGN", "batch_memcpy", "wrong (fault on some GPUs)",
        "u64 fast path taken when src and dst differ in alignment mod 8",
        "batch_memcpy(variant='MISALIGN'): move_span(CHECK_DST_ALIGN_ONLY=True) -> the head "
        "aligns dst, src is never checked, u64 loads from misaligned src",
        "right bytes (the CPU reads misaligned words); the recorder's alignment check "
        "flags it; NVIDIA GPUs fault with a misaligned address",
        cpu=("race",), gpu=("fault",)),
    ZooEntry(
        "TILE-GAP", "state_copy", "wrong / racy",
        "temporal copy split over tiles with a gap or overlap between tiles",
        "state_copy(variant='TILE-GAP'): copy_one_state(TILE_GAP=True) -> tile = "
        "floor(size/num_tiles) rounded down to 8, the last tile not taking the remainder",
        "wrong when size is not a multiple of 8*num_tiles (gap)",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "NOOP-SKIP", "postprocess", "wrong",
        "self-copy skipped whenever src_col == dst_col, even with bias > 0",
        "postprocess(variant='NOOP-SKIP'): _postprocess_kernel(NOOP_SKIP=True)",
        "wrong",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "PP-INPLACE", "postprocess", "racy (cross-program)",
        "accepted count updated in place while other programs still read it",
        "postprocess(variant='PP-INPLACE'): the launcher passes num_accepted itself "
        "as accepted_in (no per-step snapshot)",
        "wrong when a request with src_col == dst_col and bias > 0 has more than one "
        "program (states x tiles > 1): programs after (r,0,0) read accepted=1 and "
        "redo the decision; right bytes with a single program per request",
        cpu=("race",), gpu=("mismatch",)),
    ZooEntry(
        "PAD-CLOBBER", "state_copy", "wrong",
        "temporal copy sized by block stride, overwriting padding",
        "state_copy(variant='PAD-CLOBBER'): copy_one_state(PAD_CLOBBER=True) -> size = "
        "BLOCK_STRIDE instead of INNER*ELEM",
        "wrong when the block stride is padded",
        cpu=("mismatch",), gpu=("mismatch",)),
    # index-based slot pools (docs/contracts.md#slot-buffers): kernels.slots
    ZooEntry(
        "SLOT-CHAIN", "slot_copy", "racy (cross-program)",
        "slot copy with one load-store pass per program: a destination that is another pair's source races",
        "slot_copy(variant='SLOT-CHAIN'): _slot_kernel(DIRECT=True), one launch, no gather into scratch",
        "wrong when a chained pair's reader runs after its writer (programs run in grid order); right "
        "bytes otherwise; the recorder flags the cross-program hazard on every chain",
        cpu=("race",), gpu=("mismatch",)),
    ZooEntry(
        "FORK-CHAIN", "slot_fork", "racy (cross-program)",
        "slot fork with one load-store pass per program: a child slot that is another pair's parent races",
        "slot_fork(variant='FORK-CHAIN'): _slot_kernel(DIRECT=True), one launch, no gather into scratch",
        "wrong when the parent is read after the pair writing it ran; right bytes otherwise; the "
        "recorder flags the cross-program hazard on every chain",
        cpu=("race",), gpu=("mismatch",)),
    ZooEntry(
        "SLOT-I32", "slot_copy", "wrong",
        "slot offset slot * SLOT_STRIDE + layer * LAYER_STRIDE computed in 32 bits (buffers over 2 GiB)",
        "slot_copy(variant='SLOT-I32'): _slot_ptr(ADDR_I32=True) -> int32 products",
        "wrong when an offset is >= 4 GiB (lands lower in the buffer); between 2 and 4 GiB the address "
        "goes below the buffer (out of bounds)",
        cpu=("oob", "mismatch"), gpu=("mismatch", "fault")),
    ZooEntry(
        "SLOT-FLAT", "slot_copy", "wrong",
        "strided slot buffer addressed as if contiguous ((layer * SLOTS + slot) * SLOT_BYTES)",
        "slot_copy(variant='SLOT-FLAT'): _slot_ptr(FLAT=True)",
        "wrong when a slot or layer stride is padded (or the buffer is slot-major)",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SLOT-PAD", "slot_copy", "wrong",
        "slot copied as SLOT_STRIDE bytes instead of SLOT_BYTES, overwriting padding",
        "slot_copy(variant='SLOT-PAD'): _slot_kernel(PAD=True) -> size = SLOT_STRIDE",
        "wrong when the slot stride is padded; the last slot's copy can run past the buffer and the "
        "arena (out of bounds)",
        cpu=("mismatch", "oob"), gpu=("mismatch", "fault")),
)


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

"""The copy family: the five copy contracts (batch_memcpy, state_copy, postprocess, slot_copy, slot_fork),
listed together, and their zoo rows.

Each member is a kernel module that declares its contract as every contract's kernel module does
(``CONTRACT``, ``DESCRIPTION``, ``contract_fn``, ``torch_fn``; ``kernels/registry.py``), and declares
``AMPLIFIABLE`` (its functions take ``perturb=``).  The family adds only the order ``mambafuzz list`` and
``mambafuzz zoo`` have always shown them in (``FAMILY``: every member's Triton target, then every torch
path, then these rows), and the rows themselves, in the order they were added to the zoo (interleaving
the members, not grouped by contract).  A new copy contract need not join: a kernel module of its own
is listed after the families like any other.
"""
from . import batch_memcpy, postprocess, slot_copy, slot_fork, state_copy
from .zoo import PAST_2GIB, ZooEntry

FAMILY = (batch_memcpy, state_copy, postprocess, slot_copy, slot_fork)

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
        cpu=("oob", "mismatch"), gpu=("mismatch", "fault"), memory=PAST_2GIB),
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
        cpu=("oob", "mismatch"), gpu=("mismatch", "fault"), memory=PAST_2GIB),
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

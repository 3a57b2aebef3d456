"""Device-side judge of one repetition: count what differs, restore the snapshot.

``check_restore(arena, expected, snapshot, counter, n, slot=...)`` reads the
first ``n`` bytes of ``arena`` and ``expected`` once, adds the number of
differing BYTES to ``counter[slot]`` (int64, one atomic add per program that
saw a difference) and stores ``snapshot`` over ``arena`` in the same pass, so
the next repetition starts from the unmodified input.  No host
synchronisation, no allocation: a repetition of "target, check" is two kernel
launches and can be captured in a CUDA graph.

Dense layout (``check_restore``): when the three buffers are 8-byte aligned
(torch's CUDA allocator gives 256-byte aligned storage; the wrapper checks the
actual ``data_ptr``) the bytes are read as u64 words, ``WORDS`` words per
program (``SMALL_WORDS`` for a small arena), and the ``n % 8`` tail bytes
byte-wise; otherwise every access is a byte.  Every program but the last covers a full block with no mask (so the
loads vectorise); the last one covers the rest of the words, the tail and the
auxiliary array.  Differing bytes of a u64 word are counted SWAR-style: OR the
bits of every byte into its low bit, mask, and sum the eight low bits with one
multiply.

Sparse layout (``check_restore_sparse``): for arenas too large to copy whole,
``positions[i]`` is the arena offset of snapshot/expected byte ``i``; the
kernel gathers ``arena[positions]``, compares with ``expected`` and scatters
``snapshot`` back.  Positions must be distinct (``materialize`` makes them so).

Auxiliary array (both layouts): an optional second byte buffer with its own
expected/snapshot (a contract's in-place ``Output``, viewed as bytes),
judged and restored by one extra program; its differing bytes go into the
same ``counter[slot]``.

Slot: ``counter[slot + slot_base[0]]`` when ``slot_base`` (int64 ``[1]`` on
the device) is given, else ``counter[slot]``.  A CUDA graph of K repetitions
bakes ``slot = 0..K-1`` and advances ``slot_base`` by K at its end, so every
replay lands in fresh slots.

Every lane loads and stores only its own bytes, and programs cover disjoint
bytes: the kernel is race-free in the recorder's sense.  Works compiled and in
the interpreter (``while`` loops only, see ``kernels.copy``).

Chunked judge (``ChunkCheck``, large dense arenas): the arena is cut into
chunks of ``CHUNK_WORDS`` u64 words; ``order`` lists every chunk, the
``n_check`` chunks a correct target changes first.  A repetition's first
launch (``_check_chunks``, a program per changed chunk) reads only those: each
program sums its chunk's words (position-keyed, ``_chunk_sum``) and compares
the sum with the expectation's, precomputed once; only a chunk whose sum
differs is read again with the expectation to count its differing bytes
exactly.  A chunk is then restored from the snapshot if it differs, or if it
is among the first ``n_restore`` (the chunks the next repetition reads back).
The second launch (``_walk_chunks``, ``STRIDE_PROGRAMS`` programs that exit at
once in a repetition that is not full; a launch loop, which knows its slot,
leaves it out and walks a full repetition on a program per chunk) walks
the other chunks, grid-strided, in every ``full_every``-th repetition and the
last one (``last_slot``): it counts what differs there and restores exactly
that, so a stray write outside the changed chunks is counted, and undone,
within ``full_every`` repetitions and by the batch's end.  (A failing
repetition once walked too; that kept a stray write from outliving it, but
cost every repetition a launch, 2-3% of a large one.)  Splitting the
walk off keeps the every-repetition kernel at few registers, hence at full
occupancy (the read bandwidth ``bench/tune_large.py`` measures).  No chunk sum
is ever trusted to say "equal" for bytes it did not read: only unequal sums
lead to a count, and an undetected difference needs a 64-bit collision of a
bijectively mixed sum.
"""
import torch
import triton
import triton.language as tl

WORDS = 1024        # u64 words per program (8 KiB) in the aligned dense path
BYTES = 4096        # bytes per program in the byte-wise paths
# A small judge (at most SMALL_PROGRAMS programs of the small shape) spreads its bytes thin: in a
# CUDA graph its node then takes 1.5 us where one 8 KiB program took 2.0 (dense), 1.9 where one
# 4 KiB sparse program took 5.3 (bench/small_reps.py).  Two shapes, so two compiles, not one per size.
SMALL_WORDS = 64
SMALL_BYTES = 256
SMALL_PROGRAMS = 128
AUX_BLOCK = 256     # bytes per step of the auxiliary program
CHUNK_WORDS = 512   # u64 words per chunk (4 KiB) of the chunked judge (bench/tune_large.py)
CHUNK_WARPS = 2     # warps per program of the chunked judge (bench/tune_large.py)
SUB_WORDS = tl.constexpr(256)  # u64 words per step of a chunk's rare paths (count, restore)
STRIDE_PROGRAMS = 1024  # programs that walk the chunks not judged every repetition (grid-strided)


@triton.jit
def _bytes_differing_u64(x):
    """Number of nonzero bytes in each u64 of ``x`` (int32)."""
    t = x | (x >> 4)
    t = t | (t >> 2)
    t = t | (t >> 1)
    t = t & 0x0101010101010101
    return ((t * 0x0101010101010101) >> 56).to(tl.int32)


@triton.jit
def _add_count(counter, slot_base, slot, total, HAS_BASE: tl.constexpr):
    if total != 0:
        idx = slot.to(tl.int64)
        if HAS_BASE:
            idx += tl.load(slot_base)
        tl.atomic_add(counter + idx, total.to(tl.int64))


@triton.jit
def _judge_bytes(arena_at, expected_at, snapshot_at, m):
    """Differing bytes where ``m`` (int32); stores the snapshot bytes over the arena ones."""
    a = tl.load(arena_at, mask=m, other=0)
    e = tl.load(expected_at, mask=m, other=0)
    s = tl.load(snapshot_at, mask=m, other=0)
    total = tl.sum(((a != e) & m).to(tl.int32))
    tl.store(arena_at, s, mask=m)
    return total


@triton.jit
def _check_aux(aux, aux_expected, aux_snapshot, n_aux, AUX_BLOCK: tl.constexpr):
    """Count differing bytes of the auxiliary buffer and restore it (one program)."""
    n_aux = n_aux.to(tl.int64)
    lanes = tl.arange(0, AUX_BLOCK).to(tl.int64)
    acc = (n_aux * 0).to(tl.int32)
    j = n_aux * 0
    while j < n_aux:
        o = j + lanes
        m = o < n_aux
        acc += _judge_bytes(aux + o, aux_expected + o, aux_snapshot + o, m)
        j += AUX_BLOCK
    return acc


@triton.jit(do_not_specialize=["slot", "n", "n_aux"])
def _check_restore_dense(arena, expected, snapshot, counter, slot_base, slot, n,
                         aux, aux_expected, aux_snapshot, n_aux,
                         WORDS: tl.constexpr, BYTES: tl.constexpr, AUX_BLOCK: tl.constexpr,
                         VEC: tl.constexpr, HAS_BASE: tl.constexpr, HAS_AUX: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    last = tl.num_programs(0) - 1
    n = n.to(tl.int64)
    if VEC:
        a64 = arena.to(tl.pointer_type(tl.uint64))
        e64 = expected.to(tl.pointer_type(tl.uint64))
        s64 = snapshot.to(tl.pointer_type(tl.uint64))
        n_words = n // 8
        offs = pid * WORDS + tl.arange(0, WORDS).to(tl.int64)
        if pid < last:  # a full block: no mask
            a = tl.load(a64 + offs)
            e = tl.load(e64 + offs)
            s = tl.load(s64 + offs)
            total = tl.sum(_bytes_differing_u64(a ^ e))
            tl.store(a64 + offs, s)
            _add_count(counter, slot_base, slot, total, HAS_BASE)
        else:  # the remaining words, the byte tail, the auxiliary buffer
            m = offs < n_words
            a = tl.load(a64 + offs, mask=m, other=0)
            e = tl.load(e64 + offs, mask=m, other=0)
            s = tl.load(s64 + offs, mask=m, other=0)
            total = tl.sum(_bytes_differing_u64(a ^ e))  # masked lanes: 0 ^ 0
            tl.store(a64 + offs, s, mask=m)
            toffs = n_words * 8 + tl.arange(0, 8).to(tl.int64)
            mt = toffs < n
            total += _judge_bytes(arena + toffs, expected + toffs, snapshot + toffs, mt)
            if HAS_AUX:
                total += _check_aux(aux, aux_expected, aux_snapshot, n_aux, AUX_BLOCK)
            _add_count(counter, slot_base, slot, total, HAS_BASE)
    else:
        boffs = pid * BYTES + tl.arange(0, BYTES).to(tl.int64)
        mb = boffs < n
        totalb = _judge_bytes(arena + boffs, expected + boffs, snapshot + boffs, mb)
        if HAS_AUX:
            if pid == last:
                totalb += _check_aux(aux, aux_expected, aux_snapshot, n_aux, AUX_BLOCK)
        _add_count(counter, slot_base, slot, totalb, HAS_BASE)


@triton.jit(do_not_specialize=["slot", "n", "n_aux"])
def _check_restore_sparse(arena, positions, expected, snapshot, counter, slot_base, slot, n,
                          aux, aux_expected, aux_snapshot, n_aux,
                          BYTES: tl.constexpr, AUX_BLOCK: tl.constexpr,
                          HAS_BASE: tl.constexpr, HAS_AUX: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    n = n.to(tl.int64)
    offs = pid * BYTES + tl.arange(0, BYTES).to(tl.int64)
    m = offs < n
    pos = tl.load(positions + offs, mask=m, other=0).to(tl.int64)
    total = _judge_bytes(arena + pos, expected + offs, snapshot + offs, m)
    if HAS_AUX:
        if pid == tl.num_programs(0) - 1:
            total += _check_aux(aux, aux_expected, aux_snapshot, n_aux, AUX_BLOCK)
    _add_count(counter, slot_base, slot, total, HAS_BASE)


@triton.jit
def _slot_index(slot_base, slot, HAS_BASE: tl.constexpr):
    idx = slot.to(tl.int64)
    if HAS_BASE:
        idx += tl.load(slot_base)
    return idx


@triton.jit
def _chunk_sum(w, widx, m):
    """Sum of the u64 words ``w`` (word indices ``widx``, lanes ``m``), each xored with a multiple
    of its index and mixed bijectively first: a changed, moved or swapped word changes the sum."""
    h = (w ^ (widx.to(tl.uint64) * 0x2545F4914F6CDD1D)) * 0x5851F42D4C957F2D
    h = h ^ (h >> 29)
    return tl.sum(tl.where(m, h, 0))


@triton.jit
def _sum_chunks(buf, sums, n, WORDS: tl.constexpr):
    """``sums[c]`` = the chunk sum of chunk ``c`` of ``buf`` (its whole words; the byte tail is not in it)."""
    c = tl.program_id(0).to(tl.int64)
    n_words = n.to(tl.int64) // 8
    widx = c * WORDS + tl.arange(0, WORDS).to(tl.int64)
    m = widx < n_words
    w = tl.load(buf.to(tl.pointer_type(tl.uint64)) + widx, mask=m, other=0)
    tl.store(sums.to(tl.pointer_type(tl.uint64)) + c, _chunk_sum(w, widx, m))


@triton.jit
def _at(p64, widx, ALIGNED16: tl.constexpr):
    """``p64 + widx``, marked 16-byte aligned when the buffers are (a whole chunk's words start at a
    multiple of ``WORDS``): the compiler then moves two words per access instead of one."""
    if ALIGNED16:
        return tl.multiple_of(p64 + widx, 16)
    else:
        return p64 + widx


@triton.jit
def _count_or_copy(a64, b64, w0, limit, WORDS: tl.constexpr, COUNT: tl.constexpr, MASKED: tl.constexpr,
                   ALIGNED16: tl.constexpr):
    """Over the ``WORDS`` words from ``w0`` (below ``limit`` if MASKED): the bytes where ``a64``
    and ``b64`` differ (COUNT), or ``b64`` stored over ``a64``.  In steps of at most
    ``SUB_WORDS``, so the few registers the judge's sum needs also bound these rare paths
    (registers set the judge's occupancy, hence its read bandwidth)."""
    if WORDS > SUB_WORDS:
        return _count_or_copy_steps(a64, b64, w0, limit, WORDS, SUB_WORDS, COUNT, MASKED, ALIGNED16)
    else:
        return _count_or_copy_steps(a64, b64, w0, limit, WORDS, WORDS, COUNT, MASKED, ALIGNED16)


@triton.jit
def _count_or_copy_steps(a64, b64, w0, limit, WORDS: tl.constexpr, STEP: tl.constexpr, COUNT: tl.constexpr,
                         MASKED: tl.constexpr, ALIGNED16: tl.constexpr):
    lanes = tl.arange(0, STEP).to(tl.int64)
    total = (w0 * 0).to(tl.int32)
    j = w0 * 0
    while j < WORDS:
        widx = w0 + j + lanes
        if MASKED:
            m = widx < limit
            b = tl.load(b64 + widx, mask=m, other=0)
            if COUNT:
                total += tl.sum(_bytes_differing_u64(tl.load(a64 + widx, mask=m, other=0) ^ b))
            else:
                tl.store(a64 + widx, b, mask=m)
        else:
            b = tl.load(_at(b64, widx, ALIGNED16))
            if COUNT:
                total += tl.sum(_bytes_differing_u64(tl.load(_at(a64, widx, ALIGNED16)) ^ b))
            else:
                tl.store(_at(a64, widx, ALIGNED16), b)
        j += STEP
    return total


@triton.jit
def _judge_chunk(arena, expected, snapshot, sums, c, n, restore, WORDS: tl.constexpr,
                 ALIGNED16: tl.constexpr):
    """Differing bytes of chunk ``c`` (read only when its sum differs); then the snapshot stored
    over it if ``restore`` or if it differs."""
    n = n.to(tl.int64)
    n_words = n // 8
    last = (n - 1) // (WORDS * 8)
    widx = c * WORDS + tl.arange(0, WORDS).to(tl.int64)
    a64 = arena.to(tl.pointer_type(tl.uint64))
    e64 = expected.to(tl.pointer_type(tl.uint64))
    s64 = snapshot.to(tl.pointer_type(tl.uint64))
    want = tl.load(sums.to(tl.pointer_type(tl.uint64)) + c)
    total = (c * 0).to(tl.int32)
    if c < last:  # a whole chunk: no mask
        differs = _chunk_sum(tl.load(_at(a64, widx, ALIGNED16)), widx, widx >= 0) != want
        if differs:  # rare: read the chunk again rather than hold it in registers through the sum
            total += _count_or_copy(a64, e64, c * WORDS, n_words, WORDS, True, False, ALIGNED16)
        if restore | (total != 0):
            _count_or_copy(a64, s64, c * WORDS, n_words, WORDS, False, False, ALIGNED16)
    else:  # the last chunk: its remaining words and the byte tail (compared directly)
        m = widx < n_words
        if _chunk_sum(tl.load(a64 + widx, mask=m, other=0), widx, m) != want:
            total += _count_or_copy(a64, e64, c * WORDS, n_words, WORDS, True, True, ALIGNED16)
        toffs = n_words * 8 + tl.arange(0, 8).to(tl.int64)
        mt = toffs < n
        ta = tl.load(arena + toffs, mask=mt, other=0)
        te = tl.load(expected + toffs, mask=mt, other=0)
        total += tl.sum(((ta != te) & mt).to(tl.int32))
        if restore | (total != 0):
            _count_or_copy(a64, s64, c * WORDS, n_words, WORDS, False, True, ALIGNED16)
            tl.store(arena + toffs, tl.load(snapshot + toffs, mask=mt, other=0), mask=mt)
    return total


@triton.jit
def _is_full(idx, full_every, last_slot):
    return ((idx + 1) % full_every == 0) | (idx == last_slot)


@triton.jit(do_not_specialize=["slot", "n", "n_check", "n_restore", "n_aux"])
def _check_chunks(arena, expected, snapshot, sums, order, counter, slot_base, slot, n, n_check, n_restore,
                  aux, aux_expected, aux_snapshot, n_aux,
                  WORDS: tl.constexpr, AUX_BLOCK: tl.constexpr, HAS_BASE: tl.constexpr,
                  HAS_AUX: tl.constexpr, ALIGNED16: tl.constexpr):
    """One repetition's judge of the changed chunks: program p < n_check judges chunk ``order[p]``
    (restoring it when p < n_restore, or when it differs).  With HAS_AUX the last program judges
    and restores the aux buffer.  Nothing else here: this kernel's registers bound its occupancy,
    and occupancy bounds its read bandwidth (the walk over the other chunks is ``_walk_chunks``)."""
    p = tl.program_id(0).to(tl.int64)
    if HAS_AUX:
        grid = tl.num_programs(0) - 1
    else:
        grid = tl.num_programs(0)
    total = (p * 0).to(tl.int32)
    if p >= grid:
        total += _check_aux(aux, aux_expected, aux_snapshot, n_aux, AUX_BLOCK)
    elif p < n_check:
        total += _judge_chunk(arena, expected, snapshot, sums, tl.load(order + p), n, p < n_restore, WORDS,
                              ALIGNED16)
    if total != 0:
        tl.atomic_add(counter + _slot_index(slot_base, slot, HAS_BASE), total.to(tl.int64))


@triton.jit(do_not_specialize=["slot", "n", "n_chunks", "n_check", "full_every", "last_slot"])
def _walk_chunks(arena, expected, snapshot, sums, order, counter, slot_base, slot, n, n_chunks,
                 n_check, full_every, last_slot,
                 WORDS: tl.constexpr, HAS_BASE: tl.constexpr, ALIGNED16: tl.constexpr):
    """After ``_check_chunks``: in a full repetition (``_is_full``), judge every chunk it did not,
    grid-strided, and store the snapshot over each that differs.  Otherwise every program exits
    at once.  Those chunks are ones a correct target leaves alone, so "differs from the
    expectation" is "differs from the snapshot": afterwards the arena is as a passing
    repetition leaves it."""
    p = tl.program_id(0).to(tl.int64)
    grid = tl.num_programs(0)
    idx = _slot_index(slot_base, slot, HAS_BASE)
    if _is_full(idx, full_every, last_slot):
        total = (p * 0).to(tl.int32)
        q = n_check + p
        while q < n_chunks:
            total += _judge_chunk(arena, expected, snapshot, sums, tl.load(order + q), n, q < 0, WORDS,
                                  ALIGNED16)
            q += grid
        if total != 0:
            tl.atomic_add(counter + idx, total.to(tl.int64))


@triton.jit(do_not_specialize=["n"])
def _restore_chunks(arena, snapshot, order, n, WORDS: tl.constexpr, ALIGNED16: tl.constexpr):
    """Store the snapshot over chunk ``order[p]``: the start of a batch, when only the changed chunks
    can differ from it (``ChunkCheck.restore_changed``)."""
    c = tl.load(order + tl.program_id(0).to(tl.int64))
    n = n.to(tl.int64)
    n_words = n // 8
    a64 = arena.to(tl.pointer_type(tl.uint64))
    s64 = snapshot.to(tl.pointer_type(tl.uint64))
    if c < (n - 1) // (WORDS * 8):
        _count_or_copy(a64, s64, c * WORDS, n_words, WORDS, False, False, ALIGNED16)
    else:
        _count_or_copy(a64, s64, c * WORDS, n_words, WORDS, False, True, ALIGNED16)
        toffs = n_words * 8 + tl.arange(0, 8).to(tl.int64)
        mt = toffs < n
        tl.store(arena + toffs, tl.load(snapshot + toffs, mask=mt, other=0), mask=mt)


def _bytes(name, t, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"check_restore: {name} must be a tensor")
    if not t.is_contiguous():
        raise ValueError(f"check_restore: {name} must be contiguous")
    if t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    t = t.reshape(-1)
    if device is not None and t.device != device:
        raise ValueError(f"check_restore: {name} is on {t.device}, the arena on {device}")
    return t


def _aux_buffers(who: str, arena, aux, aux_expected, aux_snapshot):
    """The in-place output a judge checks besides the arena (a contract's ``Output``), as
    ``(aux, aux_expected, aux_snapshot, n_aux)``; without one, the arena three times (never read)."""
    if aux is None:
        return arena, arena, arena, 0
    dev = arena.device
    aux = _bytes("aux", aux, dev)
    aux_expected = _bytes("aux_expected", aux_expected, dev)
    aux_snapshot = _bytes("aux_snapshot", aux_snapshot, dev)
    if not aux.numel() == aux_expected.numel() == aux_snapshot.numel():
        raise ValueError(f"{who}: aux, aux_expected and aux_snapshot differ in length")
    return aux, aux_expected, aux_snapshot, aux.numel()


class CheckRestore:
    """One prepared check: buffers validated and the grid computed once; call per repetition.

    ``CheckRestore(arena, expected, snapshot, n=None, positions=None, aux=None,
    aux_expected=None, aux_snapshot=None)``; then ``check(counter, slot,
    slot_base=None)`` launches one kernel.  The bytes a program judges
    (``words``, ``nbytes_per_program``) default by size: the small shape for a
    judge of at most ``SMALL_PROGRAMS`` of its programs, else the large one.
    With ``positions`` (int64) the check is sparse: ``expected``/``snapshot``
    hold ``n`` bytes that belong at ``arena[positions]``.
    """

    def __init__(self, arena, expected, snapshot, n=None, *, positions=None, aux=None,
                 aux_expected=None, aux_snapshot=None, words=None, nbytes_per_program=None,
                 num_warps=4):
        if not isinstance(arena, torch.Tensor) or arena.dtype != torch.uint8 or arena.dim() != 1 \
                or not arena.is_contiguous():
            raise TypeError("check_restore: arena must be a contiguous 1-D uint8 tensor")
        dev = arena.device
        expected = _bytes("expected", expected, dev)
        snapshot = _bytes("snapshot", snapshot, dev)
        n = expected.numel() if n is None else int(n)
        if n < 0 or expected.numel() < n or snapshot.numel() < n:
            raise ValueError(f"check_restore: expected ({expected.numel()}) and snapshot "
                             f"({snapshot.numel()}) must hold n = {n} bytes")
        if positions is None:
            if arena.numel() < n:
                raise ValueError(f"check_restore: arena ({arena.numel()} bytes) is shorter than n = {n}")
        else:
            if not isinstance(positions, torch.Tensor) or positions.dtype != torch.int64 \
                    or positions.dim() != 1 or not positions.is_contiguous() or positions.device != dev:
                raise TypeError("check_restore: positions must be a contiguous 1-D int64 tensor "
                                "on the arena's device")
            if positions.numel() < n:
                raise ValueError(f"check_restore: positions ({positions.numel()}) must hold n = {n} entries")
        has_aux = aux is not None
        aux, aux_expected, aux_snapshot, n_aux = _aux_buffers("check_restore", arena, aux, aux_expected,
                                                              aux_snapshot)
        self.arena, self.expected, self.snapshot, self.positions = arena, expected, snapshot, positions
        self.n = n
        self._aux = (aux, aux_expected, aux_snapshot, n_aux)
        self._has_aux = has_aux
        self._num_warps = num_warps
        self._words = int(words or (SMALL_WORDS if n <= SMALL_PROGRAMS * 8 * SMALL_WORDS else WORDS))
        self._bytes = int(nbytes_per_program or (SMALL_BYTES if n <= SMALL_PROGRAMS * SMALL_BYTES else BYTES))
        if positions is not None:
            self.kind = "sparse"
            self.grid = (triton.cdiv(n, self._bytes) + (1 if has_aux else 0) or 1,)
        else:
            self.vec = all(t.data_ptr() % 8 == 0 for t in (arena, expected, snapshot))
            self.kind = "dense-u64" if self.vec else "dense-bytes"
            if self.vec:
                self.grid = ((n // 8) // self._words + 1,)
            else:
                self.grid = (max(1, triton.cdiv(n, self._bytes)),)

    def __call__(self, counter, slot=0, slot_base=None):
        if counter.dtype != torch.int64:
            raise TypeError("check_restore: counter must be int64")
        base = counter if slot_base is None else slot_base
        aux, aux_e, aux_s, n_aux = self._aux
        if self.positions is not None:
            _check_restore_sparse[self.grid](
                self.arena, self.positions, self.expected, self.snapshot, counter, base, slot, self.n,
                aux, aux_e, aux_s, n_aux, BYTES=self._bytes, AUX_BLOCK=AUX_BLOCK,
                HAS_BASE=slot_base is not None, HAS_AUX=self._has_aux,
                num_warps=self._num_warps, num_stages=1)
        else:
            _check_restore_dense[self.grid](
                self.arena, self.expected, self.snapshot, counter, base, slot, self.n,
                aux, aux_e, aux_s, n_aux, WORDS=self._words, BYTES=self._bytes, AUX_BLOCK=AUX_BLOCK,
                VEC=self.vec, HAS_BASE=slot_base is not None, HAS_AUX=self._has_aux,
                num_warps=self._num_warps, num_stages=1)


class ChunkCheck:
    """The chunked judge of one dense arena, prepared once; call per repetition (two launches).

    ``ChunkCheck(arena, expected, snapshot, order, n_check, n_restore, full_every=...)``:
    ``order`` (int64, every chunk id exactly once) lists the chunks judged every
    repetition first (``n_check`` of them), of which the first ``n_restore`` are
    restored every repetition.  ``check(counter, slot, slot_base=None,
    last_slot=-1, walk=True)``: judge the changed chunks; when the
    repetition's absolute slot + 1 is a multiple of ``full_every`` or equals
    ``last_slot`` + 1, judge every other chunk too (the second launch, which
    ``walk=False`` leaves out, for a caller that knows whether the repetition
    is full: it calls ``walk`` for a full one).  Any chunk that differs is restored: a changed one at once, any
    other by the next full repetition.  The three buffers must be 8-byte
    aligned.
    """

    def __init__(self, arena, expected, snapshot, order, n_check, n_restore, *, full_every,
                 words=CHUNK_WORDS, aux=None, aux_expected=None, aux_snapshot=None, num_warps=CHUNK_WARPS,
                 stride_programs=None):
        if not isinstance(arena, torch.Tensor) or arena.dtype != torch.uint8 or arena.dim() != 1 \
                or not arena.is_contiguous():
            raise TypeError("chunk_check: arena must be a contiguous 1-D uint8 tensor")
        dev = arena.device
        expected = _bytes("expected", expected, dev)
        snapshot = _bytes("snapshot", snapshot, dev)
        n = arena.numel()
        if n < 1 or expected.numel() != n or snapshot.numel() != n:
            raise ValueError(f"chunk_check: arena ({n}), expected ({expected.numel()}) and snapshot "
                             f"({snapshot.numel()}) must be equally long, at least 1 byte")
        if any(t.data_ptr() % 8 for t in (arena, expected, snapshot)):
            raise ValueError("chunk_check: arena, expected and snapshot must be 8-byte aligned")
        words = int(words)
        if words < 1 or words & (words - 1):
            raise ValueError(f"chunk_check: words must be a power of two, got {words}")
        n_chunks = triton.cdiv(n, 8 * words)
        order = torch.as_tensor(order, dtype=torch.int64).reshape(-1)
        if order.numel() != n_chunks or not torch.equal(torch.sort(order.cpu()).values, torch.arange(n_chunks)):
            raise ValueError(f"chunk_check: order must list each of the {n_chunks} chunks once")
        if not 0 <= n_restore <= n_check <= n_chunks:
            raise ValueError(f"chunk_check: need 0 <= n_restore ({n_restore}) <= n_check ({n_check}) "
                             f"<= chunks ({n_chunks})")
        if int(full_every) < 1:
            raise ValueError(f"chunk_check: full_every must be >= 1, got {full_every}")
        has_aux = aux is not None
        aux, aux_expected, aux_snapshot, n_aux = _aux_buffers("chunk_check", arena, aux, aux_expected,
                                                              aux_snapshot)
        self.arena, self.expected, self.snapshot = arena, expected, snapshot
        self.order = order.to(dev)
        self.n, self.n_chunks, self.n_check, self.n_restore = n, n_chunks, int(n_check), int(n_restore)
        self.full_every = int(full_every)
        self.kind = "chunks"
        self._words = words
        self._aligned16 = all(t.data_ptr() % 16 == 0 for t in (arena, expected, snapshot))
        self._aux = (aux, aux_expected, aux_snapshot, n_aux)
        self._has_aux = has_aux
        self._num_warps = num_warps
        # a program per changed chunk; the walk over the others is grid-strided over at most
        # stride_programs programs when the device decides (``__call__``), a program per chunk when
        # the host knows the repetition is full (``walk``)
        stride_programs = int(stride_programs or STRIDE_PROGRAMS)
        self._grid = max(self.n_check, 1)
        self._walk_grid = min(n_chunks, stride_programs)
        self._wide_grid = max(n_chunks - self.n_check, 1)
        self.sums = torch.empty(n_chunks, dtype=torch.int64, device=dev)
        _sum_chunks[(n_chunks,)](expected, self.sums, n, WORDS=words, num_warps=num_warps, num_stages=1)

    def __call__(self, counter, slot=0, slot_base=None, last_slot=-1, walk=True):
        if counter.dtype != torch.int64:
            raise TypeError("chunk_check: counter must be int64")
        aux, aux_e, aux_s, n_aux = self._aux
        _check_chunks[(self._grid + (1 if self._has_aux else 0),)](
            self.arena, self.expected, self.snapshot, self.sums, self.order, counter,
            counter if slot_base is None else slot_base, slot, self.n, self.n_check, self.n_restore,
            aux, aux_e, aux_s, n_aux, AUX_BLOCK=AUX_BLOCK, HAS_AUX=self._has_aux,
            **self._common(slot_base is not None))
        if walk:
            self._walk(counter, slot, slot_base, self.full_every, last_slot)

    def is_full(self, slot: int, last_slot: int) -> bool:
        """Whether absolute `slot` is a full repetition: the host's copy of ``_is_full``."""
        return (slot + 1) % self.full_every == 0 or slot == last_slot

    def walk(self, counter, slot, slot_base=None) -> None:
        """Judge every chunk not judged every repetition against ``counter[slot]`` (plus
        ``slot_base[0]``) and restore those that differ, on a program per chunk: a full
        repetition's walk for a caller that knows it is one (a launch loop, the last repetition of
        a batch cut short), where the second launch of ``__call__`` decides on the device, on few
        programs (99 us against 66 for the same bytes, ``bench/loop_timeline.py``)."""
        self._walk(counter, slot, slot_base, 1, -1, self._wide_grid)

    def _walk(self, counter, slot, slot_base, full_every, last_slot, grid=None) -> None:
        _walk_chunks[(grid or self._walk_grid,)](
            self.arena, self.expected, self.snapshot, self.sums, self.order, counter,
            counter if slot_base is None else slot_base, slot, self.n, self.n_chunks, self.n_check,
            full_every, last_slot, **self._common(slot_base is not None))

    def _common(self, has_base: bool) -> dict:
        """The launch options both kernels share."""
        return dict(WORDS=self._words, HAS_BASE=has_base, ALIGNED16=self._aligned16,
                    num_warps=self._num_warps, num_stages=1)

    def restore_changed(self) -> None:
        """Store the snapshot over the ``n_check`` changed chunks (and the aux buffer): all a batch must
        restore at its start when the arena can differ from the snapshot only where a correct
        repetition changes it, as every batch of this judge leaves it (its last repetition is full)."""
        if self.n_check:
            _restore_chunks[(self.n_check,)](self.arena, self.snapshot, self.order, self.n, WORDS=self._words,
                                             ALIGNED16=self._aligned16, num_warps=self._num_warps, num_stages=1)
        aux, _, aux_snapshot, n_aux = self._aux
        if self._has_aux:
            aux.copy_(aux_snapshot)


def check_restore(arena, expected, snapshot, counter, n=None, *, slot=0, slot_base=None,
                  aux=None, aux_expected=None, aux_snapshot=None, words=None):
    """Add the number of bytes where ``arena[:n] != expected[:n]`` to ``counter[slot]``
    and copy ``snapshot[:n]`` over ``arena[:n]``; one launch, no host synchronisation."""
    CheckRestore(arena, expected, snapshot, n, aux=aux, aux_expected=aux_expected,
                 aux_snapshot=aux_snapshot, words=words)(counter, slot, slot_base)


def check_restore_sparse(arena, positions, expected, snapshot, counter, n=None, *, slot=0,
                         slot_base=None, aux=None, aux_expected=None, aux_snapshot=None):
    """Sparse variant: compare ``arena[positions[i]]`` with ``expected[i]`` and store
    ``snapshot[i]`` there, for ``i < n``."""
    CheckRestore(arena, expected, snapshot, n, positions=positions, aux=aux, aux_expected=aux_expected,
                 aux_snapshot=aux_snapshot)(counter, slot, slot_base)


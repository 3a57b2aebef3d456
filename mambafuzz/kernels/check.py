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
program, and the ``n % 8`` tail bytes byte-wise; otherwise every access is a
byte.  Every program but the last covers a full block with no mask (so the
loads vectorise); the last one covers the rest of the words, the tail and the
auxiliary array.  Differing bytes of a u64 word are counted SWAR-style: OR the
bits of every byte into its low bit, mask, and sum the eight low bits with one
multiply.

Sparse layout (``check_restore_sparse``): for arenas too large to copy whole,
``positions[i]`` is the arena offset of snapshot/expected byte ``i``; the
kernel gathers ``arena[positions]``, compares with ``expected`` and scatters
``snapshot`` back.  Positions must be distinct (``materialize`` makes them so).

Auxiliary array (both layouts): an optional second byte buffer with its own
expected/snapshot (the postprocess accepted counts, int32 viewed as bytes),
judged and restored by one extra program; its differing bytes go into the
same ``counter[slot]``.

Slot: ``counter[slot + slot_base[0]]`` when ``slot_base`` (int64 ``[1]`` on
the device) is given, else ``counter[slot]``.  A CUDA graph of K repetitions
bakes ``slot = 0..K-1`` and advances ``slot_base`` by K at its end, so every
replay lands in fresh slots.

Every lane loads and stores only its own bytes, and programs cover disjoint
bytes: the kernel is race-free in the recorder's sense.  Works compiled and in
the interpreter (``while`` loops only, see ``kernels.copy``).
"""
import torch
import triton
import triton.language as tl

WORDS = 1024        # u64 words per program (8 KiB) in the aligned dense path
BYTES = 4096        # bytes per program in the byte-wise paths
AUX_BLOCK = 256     # bytes per step of the auxiliary program


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


class CheckRestore:
    """One prepared check: buffers validated and the grid computed once; call per repetition.

    ``CheckRestore(arena, expected, snapshot, n=None, positions=None, aux=None,
    aux_expected=None, aux_snapshot=None)``; then ``check(counter, slot,
    slot_base=None)`` launches one kernel.  With ``positions`` (int64) the
    check is sparse: ``expected``/``snapshot`` hold ``n`` bytes that belong at
    ``arena[positions]``.
    """

    def __init__(self, arena, expected, snapshot, n=None, *, positions=None, aux=None,
                 aux_expected=None, aux_snapshot=None, words=WORDS, nbytes_per_program=BYTES,
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
        if has_aux:
            aux = _bytes("aux", aux, dev)
            aux_expected = _bytes("aux_expected", aux_expected, dev)
            aux_snapshot = _bytes("aux_snapshot", aux_snapshot, dev)
            if not aux.numel() == aux_expected.numel() == aux_snapshot.numel():
                raise ValueError("check_restore: aux, aux_expected and aux_snapshot differ in length")
            n_aux = aux.numel()
        else:
            aux = aux_expected = aux_snapshot = arena  # never read (HAS_AUX is False)
            n_aux = 0
        self.arena, self.expected, self.snapshot, self.positions = arena, expected, snapshot, positions
        self.n = n
        self._aux = (aux, aux_expected, aux_snapshot, n_aux)
        self._has_aux = has_aux
        self._num_warps = num_warps
        self._words = int(words)
        self._bytes = int(nbytes_per_program)
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


def check_restore(arena, expected, snapshot, counter, n=None, *, slot=0, slot_base=None,
                  aux=None, aux_expected=None, aux_snapshot=None, words=WORDS):
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


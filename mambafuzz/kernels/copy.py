"""Memmove-safe copy helpers shared by every kernel (``@triton.jit`` only).

``move_span`` copies ``n`` bytes inside ONE program with memmove semantics.

Loops are ``while`` loops: the 3.6 interpreter cannot take a tensor as a
``range`` bound under numpy 2.x (``__index__`` calls ``int()`` on a
shape-(1,) array).

Addresses are int64 absolute byte addresses turned into pointers in-kernel
with ``.to(tl.pointer_type(...))``; all address arithmetic is int64.

Layout of one span copy
-----------------------
If ``src % 8 == dst % 8`` the span is cut into

* a byte *head* (0..7 bytes) that brings ``dst`` to an 8-byte boundary,
* a u64 *body* walked in chunks of ``BLOCK`` bytes (``BLOCK // 8`` lanes),
* a byte *tail* (0..7 bytes);

otherwise the whole span is a byte-wise body (``BLOCK`` lanes per chunk) and
head = tail = 0.

Ordering and barriers
---------------------
``left``  = ``dst < src < dst + n`` (destination below source, overlapping);
``right`` = ``src < dst < src + n`` (destination above source, overlapping).

Pieces are walked ascending (head, body chunks ascending, tail) unless the
copy overlaps to the right, then descending (tail, body chunks descending,
head).  Every piece is ``load; if left or right: debug_barrier(); store``.
Walking away from the overlap means a later piece never loads a byte an
earlier piece stored, and the barrier between the load and the store of one
piece means no lane stores a byte another lane of the same piece still has to
load.  So within one barrier epoch no byte is stored by one lane and loaded or
stored by another.  Copies that do not overlap (or overlap exactly,
``src == dst``) execute no barrier at all.

Zoo flags (constexpr, default off, compiled out when off)
---------------------------------------------------------
``NOGUARD_LEFT``          no barrier on left overlap             (BM-NOGUARD)
``FORWARD_RIGHT``         walk ascending on right overlap        (BM-RIGHT)
``DROP_TAIL``             tail length forced to 0                (TAIL-DROP)
``CHECK_DST_ALIGN_ONLY``  u64 path chosen from dst alone: the head aligns
                          dst and src is never checked, so src may be read
                          with misaligned u64 loads          (MISALIGN)

Race amplification (constexpr, default off, compiled out when off)
------------------------------------------------------------------
``DELAY_POS``, the flags ``DELAY_NS`` and ``SCHEDULE``, and the runtime
``seed`` word that carries the delay, schedule and seed (see
``kernels.perturb``) make chosen warps sleep (PTX ``nanosleep``) at one of two
positions of every piece: 1 = before its load, 2 = between its load and its
store (before the barrier, where there is one).  ``warp_delay`` is a no-op unless
``DELAY_NS > 0`` and the position matches, and always a no-op in Triton's
interpreter (no inline asm there): the choice is made when the kernel is
traced, so an unperturbed kernel is the same code as before.
"""
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def floordiv(a, b):
    """Python-style floor division for signed ints (Triton's ``//`` truncates)."""
    q = a // b
    rem = a - q * b
    return tl.where((rem != 0) & ((rem < 0) != (b < 0)), q - 1, q)


# Whether this module's kernels compile (True) or run in Triton's interpreter,
# read from what ``@triton.jit`` just made (it decided from TRITON_INTERPRET as
# it ran; ``kernels.INTERPRETED`` can be stale if ``kernels`` was imported
# before the device was chosen).  A constexpr global, so ``if COMPILED:`` is
# resolved while a kernel is traced and the interpreter never sees inline asm.
COMPILED = tl.constexpr(not isinstance(floordiv, InterpretedFunction))


@triton.jit
def warp_delay(POS_HERE: tl.constexpr, DELAY_POS: tl.constexpr, DELAY_NS: tl.constexpr,
             SCHEDULE: tl.constexpr, SEED):
    """Sleep chosen warps at position ``POS_HERE`` (see the module docstring).

    ``DELAY_NS`` and ``SCHEDULE`` are on/off flags here; the delay step, the
    schedule and the seed come packed in the runtime ``SEED`` word
    (``kernels.perturb.Perturb.word``), so one compiled kernel serves every
    delay and schedule.  Warp w of W (``%tid.x / 32`` of ``%ntid.x / 32``)
    sleeps, by schedule: 1: ``delay * (W-1-w)`` (lower warps slower, adjacent
    warps ``delay`` apart); 2: ``delay * w`` (higher warps slower); 3:
    ``delay * (W-1) * h / 1023`` with h a hash of (w, seed, program id) in
    0..1023.  The skew between adjacent warps is what opens a race window, and
    it must outlast a load's latency (~1 us), hence the delay per warp step.
    Every thread of a warp computes the same delay, so a warp never diverges
    here.  ``nanosleep`` needs sm_70+ and sleeps anywhere in [0, 2t], at most 1 ms.
    """
    if COMPILED:
        if DELAY_NS > 0:
            if DELAY_POS == POS_HERE:
                if SCHEDULE > 0:
                    word = SEED.to(tl.int64)
                    delay = ((word >> 31) & 0x1FFFF).to(tl.uint32)
                    schedule = ((word >> 48) & 3).to(tl.uint32)
                    seed = (word & 0x7FFFFFFF).to(tl.uint32)
                    tid = tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [],
                                                    dtype=tl.uint32, is_pure=True, pack=1)
                    ntid = tl.inline_asm_elementwise("mov.u32 $0, %ntid.x;", "=r", [],
                                                     dtype=tl.uint32, is_pure=True, pack=1)
                    warp = tid // 32
                    last = tl.maximum(ntid // 32, 1) - 1
                    pid = (tl.program_id(0).to(tl.uint32)
                           + tl.program_id(1).to(tl.uint32) * 7919
                           + tl.program_id(2).to(tl.uint32) * 104729)
                    h = warp * 0x9E3779B1
                    h = h ^ (seed * 0x85EBCA77) ^ (pid * 0xC2B2AE3D)
                    h = h ^ (h >> 16)
                    h = h * 0x7FEB352D
                    h = h ^ (h >> 15)
                    h = h * 0x846CA68B
                    h = h ^ (h >> 16)
                    ns = tl.where(schedule == 1, delay * (last - warp),
                                  tl.where(schedule == 2, delay * warp, ((delay * (h & 1023)) // 1023) * last))
                    tl.inline_asm_elementwise("nanosleep.u32 $1;\n\tmov.u32 $0, 0;", "=r,r", [ns],
                                              dtype=tl.uint32, is_pure=False, pack=1)


@triton.jit
def move_bytes_small(src_addr, dst_addr, n, guard, DELAY_POS: tl.constexpr = 0,
                      DELAY_NS: tl.constexpr = 0, SCHEDULE: tl.constexpr = 0, seed=0):
    """One piece of at most 8 bytes (a head or a tail), byte lanes."""
    if n > 0:
        offs = tl.arange(0, 8).to(tl.int64)
        m = offs < n
        warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        x = tl.load((src_addr + offs).to(tl.pointer_type(tl.uint8)), mask=m)
        warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
        if guard:
            tl.debug_barrier()
        tl.store((dst_addr + offs).to(tl.pointer_type(tl.uint8)), x, mask=m)


@triton.jit
def move_span(src_addr, dst_addr, n, BLOCK: tl.constexpr,
               NOGUARD_LEFT: tl.constexpr = False,
               FORWARD_RIGHT: tl.constexpr = False,
               DROP_TAIL: tl.constexpr = False,
               CHECK_DST_ALIGN_ONLY: tl.constexpr = False,
               DELAY_POS: tl.constexpr = 0, DELAY_NS: tl.constexpr = 0,
               SCHEDULE: tl.constexpr = 0, seed=0):
    """memmove(dst, src, n) inside one program (see the module docstring)."""
    src_addr = src_addr.to(tl.int64)
    dst_addr = dst_addr.to(tl.int64)
    n = n.to(tl.int64)
    left = (dst_addr < src_addr) & (src_addr < dst_addr + n)
    right = (src_addr < dst_addr) & (dst_addr < src_addr + n)
    if NOGUARD_LEFT:
        guard = right
    else:
        guard = left | right
    if FORWARD_RIGHT:
        desc = left & right  # never true: always walk ascending
    else:
        desc = right

    if CHECK_DST_ALIGN_ONLY:
        vec = n >= 0  # always: the head aligns dst, src is not looked at
    else:
        vec = (src_addr % 8) == (dst_addr % 8)
    head = tl.minimum((8 - dst_addr % 8) % 8, n)
    head = tl.where(vec, head, 0)
    body = tl.where(vec, ((n - head) // 8) * 8, n)
    if DROP_TAIL:
        tail = n * 0
    else:
        tail = n - head - body
    tail_off = head + body

    # first edge piece: the tail when walking down, the head when walking up
    if desc:
        move_bytes_small(src_addr + tail_off, dst_addr + tail_off, tail, guard,
                          DELAY_POS, DELAY_NS, SCHEDULE, seed)
    else:
        move_bytes_small(src_addr, dst_addr, head, guard, DELAY_POS, DELAY_NS, SCHEDULE, seed)

    if vec:
        nch = (body + BLOCK - 1) // BLOCK
        lanes = tl.arange(0, BLOCK // 8).to(tl.int64) * 8
        k = nch * 0
        while k < nch:
            c = tl.where(desc, nch - 1 - k, k)
            offs = head + c * BLOCK + lanes
            m = offs < tail_off
            warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            x = tl.load((src_addr + offs).to(tl.pointer_type(tl.uint64)), mask=m)
            warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            if guard:
                tl.debug_barrier()
            tl.store((dst_addr + offs).to(tl.pointer_type(tl.uint64)), x, mask=m)
            k += 1
    else:
        # (names differ from the u64 branch: a variable assigned in both
        # branches of a runtime `if` must keep one type when compiled)
        nchb = (body + BLOCK - 1) // BLOCK
        lanes_b = tl.arange(0, BLOCK).to(tl.int64)
        kb = nchb * 0
        while kb < nchb:
            cb = tl.where(desc, nchb - 1 - kb, kb)
            offs_b = cb * BLOCK + lanes_b
            mb = offs_b < body
            warp_delay(1, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            xb = tl.load((src_addr + offs_b).to(tl.pointer_type(tl.uint8)), mask=mb)
            warp_delay(2, DELAY_POS, DELAY_NS, SCHEDULE, seed)
            if guard:
                tl.debug_barrier()
            tl.store((dst_addr + offs_b).to(tl.pointer_type(tl.uint8)), xb, mask=mb)
            kb += 1

    # last edge piece
    if desc:
        move_bytes_small(src_addr, dst_addr, head, guard, DELAY_POS, DELAY_NS, SCHEDULE, seed)
    else:
        move_bytes_small(src_addr + tail_off, dst_addr + tail_off, tail, guard,
                          DELAY_POS, DELAY_NS, SCHEDULE, seed)

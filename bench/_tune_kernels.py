"""Read ceilings for ``tune_large.py``: the chunk judge's reads without its compare (import after
the device is chosen: ``@triton.jit`` reads ``TRITON_INTERPRET``)."""
import triton
import triton.language as tl

from mambafuzz.judge.check import _chunk_sum


@triton.jit
def read_sum(buf, order, sums, WORDS: tl.constexpr, MIX: tl.constexpr):
    """``sums[p]`` = the sum of chunk ``order[p]``'s words: plain (MIX 0) or mixed as the judge mixes."""
    p = tl.program_id(0).to(tl.int64)
    c = tl.load(order + p)
    widx = c * WORDS + tl.arange(0, WORDS).to(tl.int64)
    w = tl.load(tl.multiple_of(buf.to(tl.pointer_type(tl.uint64)) + widx, 16))
    if MIX:
        s = _chunk_sum(w, widx, widx >= 0)
    else:
        s = tl.sum(w)
    tl.store(sums.to(tl.pointer_type(tl.uint64)) + p, s)


@triton.jit
def flat_copy(src, dst, n_words, BLOCK_WORDS: tl.constexpr, UNROLL: tl.constexpr, EVICT: tl.constexpr):
    """Ceiling for a Triton copy: ``n_words`` u64 words from one 16-byte aligned region to another,
    program p copying ``UNROLL`` consecutive blocks (no masks: ``n_words`` a multiple of the step);
    EVICT marks the loads evict-first (a streaming read)."""
    p = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_WORDS).to(tl.int64)
    s = src.to(tl.pointer_type(tl.uint64))
    d = dst.to(tl.pointer_type(tl.uint64))
    for u in tl.static_range(UNROLL):
        o = (p * UNROLL + u) * BLOCK_WORDS + lanes
        if EVICT:
            x = tl.load(tl.multiple_of(s + o, 16), eviction_policy="evict_first")
        else:
            x = tl.load(tl.multiple_of(s + o, 16))
        tl.store(tl.multiple_of(d + o, 16), x)

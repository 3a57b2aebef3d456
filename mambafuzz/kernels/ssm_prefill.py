"""The Mamba2 chunked-scan prefill with prefix caching (contract ``ssm_prefill``,
docs/contracts.md#ssm_prefill).

``ssm_prefill(x, dt, A, B, dt_bias, ssm_state, cache_indices, has_initial_state, cu_seqlens,
initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, *,
dt_softplus, pad_slot_id, block_size)``: one program per (row, head, block of headdim).  A program loads
its row's initial entry and token range, returns on the pad or no tokens, loads its ``[BLOCK_P, N]`` tile
of the initial state (zeros without one) into registers before it stores anything, then walks the row in
pieces: a piece ends at the next chunk edge (the batch's token positions cut every ``CHUNK`` tokens, as
SSD's chunks are, so a row may start mid-chunk), at the next block boundary, or at the row's end.  Per
piece, SSD's way: the cumulative decay ``cs`` of ``A dt'`` over the piece's tokens, each token's weight
``exp(cs_end - cs_u) dt'_u`` folded into B and rounded to the inputs' dtype, the piece's terms summed by
one ``tl.dot`` over its tokens, the carried state scaled by ``exp(cs_end)``: the float math runs in another
order than the token-by-token recurrence.  At a block boundary the state goes to ``idx[b, first + k]``,
after the last piece to ``idx[b, last]``, each unless it is the pad.  Slot offsets are int64 and every
stride is the tensor's own.

Zoo flags (constexpr, compiled out when off; ``kernels.zoo``): ``CUMSUM_START`` (a row's first piece takes
its decay from the chunk's start, not the row's: vLLM #23279), ``BOUNDARY_UNALIGNED`` (boundaries counted
from the chunk's first token, ``c % Bs`` ignored: vLLM #34587 / #34798), ``WRONG_CHUNK`` (a boundary stores
the state before the piece that ends there: SGLang #31833 / #33450), ``BF16_CKPT`` (a boundary's state
rounded to bfloat16 before it is stored: SGLang #34820), ``CKPT_CHUNK`` (boundaries every ``CHUNK``
tokens, the scan's chunk size for the block size: SGLang #35086), ``NO_HAS_INIT`` (``has_initial_state``
ignored: tpu-inference #2431), ``PAD_ROW`` (a padding row scanned from zeros and stored: TileOPs #1512),
``ZERO_LEN`` (an empty row scanned as one token: vllm-ascend #11438 / #11807), ``I32_OFFSET``
(``slot * stride`` in 32 bits).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import variant_flags
from .prefill_columns import row_columns
from .zoo import PAST_2GIB, ZooEntry

CONTRACT = "ssm_prefill"
DESCRIPTION = ("Triton Mamba2 chunked-scan prefill with prefix caching: grid (rows, heads, headdim blocks), "
               "SSD-style pieces (cumulative decay, one dot per piece) cut at chunk edges and block boundaries, "
               "int64 slot offsets")
BLOCK_P = 16
CHUNK_CPU = 16   # interpreted: small tiles, several chunks a row
CHUNK_GPU = 64
FLAGS = ("CUMSUM_START", "BOUNDARY_UNALIGNED", "WRONG_CHUNK", "BF16_CKPT", "CKPT_CHUNK", "NO_HAS_INIT", "PAD_ROW",
         "ZERO_LEN", "I32_OFFSET")


@triton.jit
def _slot_offset(slot, stride, I32_OFFSET: tl.constexpr):
    if I32_OFFSET:
        return (slot.to(tl.int32) * stride.to(tl.int32)).to(tl.int64)
    return slot.to(tl.int64) * stride


@triton.jit(do_not_specialize=["hdim", "dstate", "pad", "block_size", "ratio", "idx_row_stride", "idx_col_stride",
                               "sx_tok", "sx_head", "sx_p", "sdt_tok", "sdt_head", "sb_tok", "sb_group", "sb_n",
                               "s_slot", "s_head", "s_p", "s_n"])
def _ssm_prefill_kernel(x_ptr, dt_ptr, a_ptr, b_ptr, bias_ptr, state_ptr, idx_ptr, has_ptr, cu_ptr, init_ptr,
                        first_ptr, last_ptr, computed_ptr, hdim, dstate, pad, block_size, ratio, idx_row_stride,
                        idx_col_stride, sx_tok, sx_head, sx_p, sdt_tok, sdt_head, sb_tok, sb_group, sb_n,
                        s_slot, s_head, s_p, s_n,
                        CHUNK: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr,
                        SOFTPLUS: tl.constexpr, APC: tl.constexpr, CUMSUM_START: tl.constexpr,
                        BOUNDARY_UNALIGNED: tl.constexpr, WRONG_CHUNK: tl.constexpr, BF16_CKPT: tl.constexpr,
                        CKPT_CHUNK: tl.constexpr, NO_HAS_INIT: tl.constexpr, PAD_ROW: tl.constexpr,
                        ZERO_LEN: tl.constexpr, I32_OFFSET: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    ps = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    ns = tl.arange(0, BLOCK_N)
    pmask = ps < hdim
    nmask = ns < dstate
    tile = pmask[:, None] & nmask[None, :]
    row = b.to(tl.int64) * idx_row_stride
    init_col, first_col, last_col, computed = row_columns(init_ptr, first_ptr, last_ptr, computed_ptr, b, APC)
    src = tl.load(idx_ptr + row + init_col * idx_col_stride).to(tl.int64)
    start = tl.load(cu_ptr + b).to(tl.int64)
    end = tl.load(cu_ptr + b + 1).to(tl.int64)
    live = (src != pad) & (end > start)
    if PAD_ROW:
        live = end > start
    if ZERO_LEN:
        live = src != pad
        end = tl.maximum(end, start + 1)
    if live:
        has = tl.load(has_ptr + b + ps * 0) != 0  # per lane: the interpreter takes no tile & scalar mask
        if NO_HAS_INIT:
            has = ps == ps
        if PAD_ROW:
            has = has & ((ps * 0 + src) != pad)
        inner = head * s_head + ps[:, None] * s_p + ns[None, :] * s_n
        st = tl.load(state_ptr + _slot_offset(src, s_slot, I32_OFFSET) + inner, mask=tile & has[:, None],
                     other=0.0).to(tl.float32)
        a_h = tl.load(a_ptr + head).to(tl.float32)
        bias = 0.0
        if HAS_BIAS:
            bias = tl.load(bias_ptr + head).to(tl.float32)
        group = head // ratio
        dst = tl.load(idx_ptr + row + last_col * idx_col_stride).to(tl.int64)
        step = block_size
        if CKPT_CHUNK:
            step = block_size * 0 + CHUNK
        next_b = end  # the next block boundary (global position); none without prefix caching
        if APC:
            if BOUNDARY_UNALIGNED:
                next_b = start + step
            else:
                next_b = start + step - computed % step
        k = first_col * 0
        pos = start
        io = x_ptr.dtype.element_ty
        while pos < end:
            seg_end = tl.minimum(tl.minimum((pos // CHUNK + 1) * CHUNK, end), next_b)
            lo = pos
            if CUMSUM_START:
                if pos == start:  # the decay from the chunk's first token: the previous row's tokens too
                    lo = (pos // CHUNK) * CHUNK
            toks = lo + tl.arange(0, CHUNK)
            tmask = toks < seg_end
            inseg = tmask & (toks >= pos)
            d = tl.load(dt_ptr + toks * sdt_tok + head * sdt_head, mask=tmask, other=0.0).to(tl.float32) + bias
            if SOFTPLUS:
                d = tl.where(d <= 20.0, tl.log(1.0 + tl.exp(d)), d)
            d = tl.where(tmask, d, 0.0)
            cs = tl.cumsum(d * a_h, axis=0)
            total = tl.sum(d * a_h, axis=0)
            w = tl.where(inseg, tl.exp(total - cs) * d, 0.0)
            xt = tl.load(x_ptr + toks[None, :] * sx_tok + head * sx_head + ps[:, None] * sx_p,
                         mask=inseg[None, :] & pmask[:, None], other=0.0)                  # [BLOCK_P, CHUNK]
            bt = tl.load(b_ptr + toks[:, None] * sb_tok + group * sb_group + ns[None, :] * sb_n,
                         mask=inseg[:, None] & nmask[None, :], other=0.0).to(tl.float32)  # [CHUNK, BLOCK_N]
            bw = (bt * w[:, None]).to(io)
            before = st
            st = st * tl.exp(total) + tl.dot(xt, bw)
            if APC:
                if (seg_end == next_b) & (seg_end < end):  # a block boundary inside the chunk
                    slot = tl.load(idx_ptr + row + (first_col + k) * idx_col_stride).to(tl.int64)
                    keep = st
                    if WRONG_CHUNK:
                        keep = before
                    if BF16_CKPT:
                        keep = keep.to(tl.bfloat16).to(tl.float32)
                    ok = (ps * 0 + slot) != pad
                    tl.store(state_ptr + _slot_offset(slot, s_slot, I32_OFFSET) + inner,
                             keep.to(state_ptr.dtype.element_ty), mask=tile & ok[:, None])
                    k += 1
                    next_b += step
            pos = seg_end
        keep_final = (ps * 0 + dst) != pad
        tl.store(state_ptr + _slot_offset(dst, s_slot, I32_OFFSET) + inner, st.to(state_ptr.dtype.element_ty),
                 mask=tile & keep_final[:, None])


def ssm_prefill(x, dt, A, B, dt_bias, ssm_state, cache_indices, has_initial_state, cu_seqlens, initial_state_idx,
                block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, *,
                dt_softplus=False, pad_slot_id=-1, block_size=0, variant=None, chunk=None):
    """Triton Mamba2 chunked-scan prefill: grid (rows, heads, headdim blocks), SSD-style pieces, int64 offsets."""
    flags = variant_flags("ssm_prefill", VARIANTS, FLAGS, variant)
    rows = cu_seqlens.shape[0] - 1
    if rows <= 0:
        return ssm_state
    _, heads, hdim, dstate = ssm_state.shape
    idx = cache_indices if cache_indices.dim() == 2 else cache_indices.unsqueeze(1)
    apc = block_idx_last_scheduled_token is not None
    columns = (initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
               num_computed_tokens) if apc else (idx,) * 4
    if chunk is None:
        chunk = CHUNK_GPU if x.is_cuda else CHUNK_CPU
    grid = (rows, heads, triton.cdiv(hdim, BLOCK_P))
    _ssm_prefill_kernel[grid](
        x, dt, A, B, dt_bias if dt_bias is not None else A, ssm_state, idx, has_initial_state.view(torch.uint8),
        cu_seqlens, *columns, hdim, dstate, pad_slot_id, block_size if apc else 1, heads // B.shape[1],
        idx.stride(0), idx.stride(1), x.stride(0), x.stride(1), x.stride(2), dt.stride(0), dt.stride(1),
        B.stride(0), B.stride(1), B.stride(2), *ssm_state.stride(),
        CHUNK=chunk, BLOCK_P=BLOCK_P, BLOCK_N=max(16, triton.next_power_of_2(dstate)),
        HAS_BIAS=dt_bias is not None, SOFTPLUS=bool(dt_softplus), APC=apc, **flags)
    return ssm_state


def torch_fn(x, dt, A, B, dt_bias, ssm_state, cache_indices, has_initial_state, cu_seqlens, initial_state_idx,
             block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, *,
             dt_softplus=False, pad_slot_id=-1, block_size=0):
    """The same prefill in plain torch, token by token (float32 math; the reference's torch path)."""
    idx = cache_indices if cache_indices.dim() == 2 else cache_indices.unsqueeze(1)
    heads = ssm_state.shape[1]
    group = torch.arange(heads, device=x.device) // (heads // B.shape[1])
    cu = cu_seqlens.tolist()
    apc = block_idx_last_scheduled_token is not None
    a = A.float()
    for b in range(len(cu) - 1):
        init, first, last, computed = ((int(initial_state_idx[b]), int(block_idx_first_scheduled_token[b]),
                                        int(block_idx_last_scheduled_token[b]), int(num_computed_tokens[b]))
                                       if apc else (0, 0, 0, 0))
        src, lo, hi = int(idx[b, init]), cu[b], cu[b + 1]
        if src == pad_slot_id or hi == lo:
            continue
        if bool(has_initial_state[b]):
            st = ssm_state[src].float()                                          # a copy: loads first
        else:
            st = torch.zeros(ssm_state.shape[1:], dtype=torch.float32, device=x.device)
        ends = list(range(block_size - computed % block_size, hi - lo, block_size)) if apc else []
        stores = {o: int(idx[b, first + k]) for k, o in enumerate(ends)}
        for t, tok in enumerate(range(lo, hi)):
            d = dt[tok].float() + (dt_bias.float() if dt_bias is not None else 0.0)
            if dt_softplus:
                d = torch.nn.functional.softplus(d)
            st = (st * torch.exp(a * d)[:, None, None]
                  + (d[:, None] * x[tok].float())[..., None] * B[tok].float()[group][:, None, :])
            slot = stores.get(t + 1)
            if slot is not None and slot != pad_slot_id:
                ssm_state[slot] = st.to(ssm_state.dtype)
        if int(idx[b, last]) != pad_slot_id:
            ssm_state[int(idx[b, last])] = st.to(ssm_state.dtype)
    return ssm_state


# ---------------------------------------------------------------- targets (kernels/registry.py)
VARIANTS = {None: {}, "SP-CUMSUM-START": {"CUMSUM_START": True}, "SP-BOUNDARY": {"BOUNDARY_UNALIGNED": True},
            "SP-WRONGCHUNK": {"WRONG_CHUNK": True}, "SP-BF16CKPT": {"BF16_CKPT": True},
            "SP-CKPTCHUNK": {"CKPT_CHUNK": True}, "SP-NOINIT": {"NO_HAS_INIT": True}, "SP-SEQIDX": {"PAD_ROW": True},
            "SP-ZEROLEN": {"ZERO_LEN": True}, "SP-I32": {"I32_OFFSET": True}}


def contract_fn(variant=None):
    """The contract's signature over ``ssm_prefill`` with one zoo variant (None: the correct kernel)."""
    def fn(x, dt, A, B, dt_bias, ssm_state, cache_indices, has_initial_state, cu_seqlens, initial_state_idx,
           block_idx_first_scheduled_token, block_idx_last_scheduled_token, num_computed_tokens, *,
           dt_softplus=False, pad_slot_id=-1, block_size=0):
        return ssm_prefill(x, dt, A, B, dt_bias, ssm_state, cache_indices, has_initial_state, cu_seqlens,
                           initial_state_idx, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
                           num_computed_tokens, dt_softplus=dt_softplus, pad_slot_id=pad_slot_id,
                           block_size=block_size, variant=variant)
    return fn


# Zoo rows (docs/contracts.md#zoo): the chunked-scan prefill bugs engines shipped in 2025-2026;
# kernels.registry lists them.
ZOO = (
    ZooEntry(
        "SP-CUMSUM-START", "ssm_prefill", "wrong",
        "a row that starts mid-chunk takes its initial state's decay from the chunk's start: the previous "
        "row's dA summed in (vLLM #23279: dA_cumsum from the chunk's start, not the sequence's)",
        "ssm_prefill(variant='SP-CUMSUM-START'): a row's first piece sums A dt' from the chunk's first token",
        "wrong when a row with an initial state starts mid-chunk after another row's tokens",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SP-BOUNDARY", "ssm_prefill", "wrong",
        "block-boundary states not aligned to blocks: boundaries counted from the chunk's first token, the "
        "tokens computed before ignored (vLLM #34587, #34798)",
        "ssm_prefill(variant='SP-BOUNDARY'): the first boundary Bs tokens in, not Bs - c % Bs",
        "wrong when a chunk that starts mid-block crosses a boundary",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SP-WRONGCHUNK", "ssm_prefill", "wrong",
        "the wrong chunk's state cached at a block boundary: the state before the piece that ends there "
        "(SGLang #31833, #33450)",
        "ssm_prefill(variant='SP-WRONGCHUNK'): a boundary stores the state the piece started from",
        "wrong when a chunk crosses a block boundary",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SP-BF16CKPT", "ssm_prefill", "wrong",
        "a block-boundary checkpoint stored through bfloat16 instead of the state's dtype (SGLang #34820)",
        "ssm_prefill(variant='SP-BF16CKPT'): a boundary's state rounded to bfloat16 before the store",
        "wrong (outside the bound) when a float32 or float16 state crosses a block boundary",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SP-CKPTCHUNK", "ssm_prefill", "wrong",
        "the state's and the checkpoint's chunk sizes mixed up: boundary states every scan chunk, not every "
        "block (SGLang #35086)",
        "ssm_prefill(variant='SP-CKPTCHUNK'): boundaries every CHUNK tokens, CHUNK - c % CHUNK in",
        "wrong when the block size is not the kernel's chunk size and a chunk crosses a boundary (or a chunk "
        "edge): states at the wrong tokens, in the wrong columns, or past the table's row",
        cpu=("mismatch", "oob"), gpu=("fault", "mismatch")),
    ZooEntry(
        "SP-NOINIT", "ssm_prefill", "wrong",
        "has_initial_state ignored: a request without one starts from its initial block's stale state "
        "(tpu-inference #2431)",
        "ssm_prefill(variant='SP-NOINIT'): the initial state always loaded",
        "wrong when a live row has no initial state",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SP-SEQIDX", "ssm_prefill", "wrong",
        "a padding row (seq_idx -1) not zeroed out: scanned from zeros and its states stored (TileOPs #1512)",
        "ssm_prefill(variant='SP-SEQIDX'): a row whose initial entry is the pad runs, its destinations kept",
        "wrong when a pad row has tokens and a destination that is a slot",
        cpu=("mismatch",), gpu=("mismatch",)),
    ZooEntry(
        "SP-ZEROLEN", "ssm_prefill", "wrong",
        "a zero-length row scanned as one token: the next row's first token, or past the batch's last, read "
        "and a state stored (vllm-ascend #11438, #11807)",
        "ssm_prefill(variant='SP-ZEROLEN'): a live row's end taken as max(end, start + 1)",
        "wrong when a live row has no tokens: its destination changes; out of bounds when no token follows it",
        cpu=("mismatch", "oob"), gpu=("fault", "mismatch")),
    ZooEntry(
        "SP-I32", "ssm_prefill", "wrong",
        "the state offset slot * stride in 32 bits: a slot past 2^31 elements wraps (the int32-offset family of "
        "vLLM #20838 and state-spaces/mamba #884)",
        "ssm_prefill(variant='SP-I32'): slot.to(int32) * stride.to(int32)",
        "wrong or out of bounds when a slot the prefill reads or stores starts past 2^31 elements (exact cases: "
        "the pool in the arena)",
        cpu=("mismatch", "oob"), gpu=("fault", "mismatch"), memory=PAST_2GIB),
)

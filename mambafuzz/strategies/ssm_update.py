"""Selective-state-update steps (`ssm_update`), drawn where the engines' index bugs hide.

Pad rows and pad destinations (spec decode), slot 0 live under ``pad=-1``,
nacc = 0 under ``min_accepted=0``, a separate dst table or in-place updates,
index arrays whose columns are not adjacent (a strided view: 3 times in 4
where a live row reads or stores a column >= 1, the only place a token stride
matters; spec rows are varlen 3 times in 4, so that they have such columns)
and whose rows are further apart than their columns, empty varlen rows, groups shared by
heads, and, in ``exact`` cases (values the fp32 math keeps exact, so the pool
is compared byte for byte in the arena), one in ``huge_one_in`` with a named
slot past 2^31 elements (16-bit states) or 2 GiB of bytes, reached by a slot
number.  Live rows never share a slot.

Narrowed by the contract's options to what a user's kernel takes: spec
decode, varlen batches, a separate dst table and each of z, D and dt_bias
present always or never, one token a row without spec decode.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.ssm_update import DTYPES, SsmUpdateCase

from .narrow import presence
from .perturb import maybe_perturb
from .profiles import Profile
from .updates import arena_pool, far_slot


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "heads": 4, "dim": (4, 16), "dstate": (4, 16), "slots": 12, "cols": 4, "huge_one_in": 3}
    return {"rows": 32, "heads": 8, "dim": (16, 64), "dstate": (16, 128), "slots": 200, "cols": 4, "huge_one_in": 2}


def late_columns(spec: bool, lens, src, nacc, pad: int, cols: int) -> bool:
    """Whether a row reads or stores an index column >= 1: a spec row accepting more than one token
    (it reads column nacc - 1), or a live spec row of several tokens (it stores columns 0..len-1).
    Only there does the index array's column (token) stride matter."""
    return spec and any(nacc[b] > 1 or (lens[b] > 1 and cols > 1 and src[b][max(nacc[b] - 1, 0)] != pad)
                        for b in range(len(lens)))


@st.composite
def ssm_update_cases(draw, profile: Profile, pad: int = -1, min_accepted: int = 1, ill_posed: bool = False,
                     spec: bool | None = None, varlen: bool | None = None, one_token: bool = False,
                     dst: bool | None = None, z: bool | None = None, d: bool | None = None,
                     dt_bias: bool | None = None):
    """`spec`, `varlen`, `dst` (a separate dst table), `z`, `d`, `dt_bias`: None drawn, True always, False
    never; `one_token`: at most one token a row without spec decode."""
    lim = _limits(profile)
    dtype = draw(st.sampled_from(tuple(DTYPES)))
    io_dtype = draw(st.sampled_from(tuple(DTYPES)))
    heads = draw(st.integers(1, lim["heads"]))
    groups = draw(st.sampled_from([g for g in range(1, heads + 1) if heads % g == 0]))
    dim = draw(st.integers(*lim["dim"]))
    dstate = draw(st.integers(*lim["dstate"]))
    rows = draw(st.integers(1, lim["rows"]))
    spec = presence(draw, spec)
    if varlen is None and spec:  # spec decode's columns >= 1 need rows of several tokens: 3 in 4 varlen
        varlen = draw(st.integers(0, 3)) > 0
    else:
        varlen = presence(draw, varlen)
    cols = draw(st.integers(1, lim["cols"]))
    if varlen:
        top = cols if spec else 1 if one_token else 4
        lens = tuple(draw(st.integers(0, top)) for _ in range(rows))
    else:
        lens = (1,) * rows
    separate_dst = presence(draw, dst)
    exact = draw(st.booleans())

    first = 0 if pad == -1 else 1  # pad 0 keeps slot 0 the null block
    need = first + rows * cols * (2 if separate_dst else 1) + 1
    slot_count = max(draw(st.integers(1, lim["slots"])), need)
    fresh = iter(draw(st.permutations(range(first, slot_count))))
    src, dst, nacc = [], [], []
    for b in range(rows):
        s_row = [next(fresh) for _ in range(cols)]
        d_row = [next(fresh) for _ in range(cols)] if separate_dst else s_row
        top = min(cols, max(lens[b], 1))
        n = draw(st.integers(min_accepted, max(min_accepted, top)))
        nacc.append(n)
        read_col = max(n - 1, 0) if spec else 0
        kind = draw(st.sampled_from(("live", "live", "pad", "pad_dst")))
        if kind == "pad":
            s_row[read_col] = pad
        elif kind == "pad_dst" and spec:
            choices = [t for t in range(min(lens[b], cols)) if separate_dst or t != read_col]
            if choices:
                d_row[draw(st.sampled_from(choices))] = pad
        src.append(s_row)
        dst.append(d_row)
    if ill_posed and rows > 1:
        dst[1][0] = dst[0][0]
        src[1][0] = src[1][0] if separate_dst else dst[0][0]

    slot_bytes = heads * dim * dstate * DTYPES[dtype]
    elem = DTYPES[dtype]
    slot_stride, offset = slot_bytes, 0
    if exact:  # the pool lives in the arena: padded slots, an offset, maybe past 2 GiB
        slot_stride, offset = arena_pool(draw, slot_bytes, elem)
        top_slot = far_slot(draw, lim["huge_one_in"], elem, offset, slot_stride, round_up=True)
        if top_slot is not None:
            used = []  # the entries a correct step reads or stores (a pad row's or an empty row's do nothing)
            for b in range(rows):
                read_col = max(nacc[b] - 1, 0) if spec else 0
                if src[b][read_col] == pad or lens[b] == 0:
                    continue
                used.append((src, b, read_col))
                stores = range(min(lens[b], cols)) if spec else (0,)
                used += [(dst, b, t) for t in stores if dst[b][t] != pad and (separate_dst or t != read_col)]
            if used:
                tab, b, c = draw(st.sampled_from(used))
                tab[b][c] = top_slot
                slot_count = top_slot + 1
    # a token (column) stride only matters where a live row reads or stores a column >= 1 (SSM-TOKSTRIDE):
    # there the columns are not adjacent 3 times in 4, elsewhere half the time
    late = late_columns(spec, lens, src, nacc, pad, cols)
    col_stride = draw(st.sampled_from([1, 2, 3, 2] if late else [1, 1, 2, 3]))
    row_stride = (cols - 1) * col_stride + 1 + draw(st.sampled_from([0, 0, 1, 3]))
    arena = offset + slot_count * slot_stride + 64 if exact else 64
    return SsmUpdateCase(
        arena_size=arena, dtype=dtype, io_dtype=io_dtype, offset=offset, slots=slot_count, heads=heads,
        groups=groups, dim=dim, dstate=dstate, slot_stride=slot_stride, lens=lens,
        src=tuple(map(tuple, src)), dst=tuple(map(tuple, dst)) if separate_dst else None,
        idx_col_stride=col_stride, idx_row_stride=row_stride, nacc=tuple(nacc) if spec else None, varlen=varlen,
        has_z=presence(draw, z), has_d=presence(draw, d), has_dt_bias=presence(draw, dt_bias),
        softplus=not exact and draw(st.booleans()), a_per_head=draw(st.booleans()), exact=exact, pad=pad,
        seed=draw(st.integers(0, 3)), perturb=maybe_perturb(draw, profile))

"""Conv-state update steps (`conv_update`), drawn where the engines' index bugs hide.

Pad rows (read slot = the pad value) and pad destinations, slot 0 live
under ``pad=-1`` (so a pad clamped to 0 clobbers a request), nacc = 0 under
``min_accepted=0``, spec states exactly as wide as the drafts need, index
rows further apart than their columns, empty varlen rows, both slot layouts,
and one case in ``huge_one_in`` with a slot past 2^31 elements on an entry the
step reads or stores (a 32-bit ``slot * stride`` wraps; 16-bit states, within
the sparse arena's 8 GiB) or past 2 GiB of bytes (32-bit states), reached by a
slot number, not a huge stride.
Live rows never share a slot (the oracle calls that ill-posed).

Narrowed by the contract's options to what a user's kernel takes: the slot
layouts, the widest window, spec decode, varlen batches and prefix caching
present always or never, one token a row without spec decode.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.conv_update import DTYPES, LAYOUTS, ConvUpdateCase

from .narrow import presence
from .perturb import maybe_perturb
from .profiles import Profile
from .updates import arena_pool, far_slot


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile: every program is interpreted
        return {"rows": 4, "dim": 12, "wide_dim": 64, "slots": 10, "cols": 4, "huge_one_in": 3}
    return {"rows": 64, "dim": 256, "wide_dim": 1024, "slots": 160, "cols": 6, "huge_one_in": 6}


@st.composite
def conv_update_cases(draw, profile: Profile, pad: int = -1, min_accepted: int = 1, ill_posed: bool = False,
                      layouts: tuple = LAYOUTS, max_width: int = 6, spec: bool | None = None,
                      varlen: bool | None = None, apc: bool | None = None, one_token: bool = False):
    """`layouts`, `max_width`: what the kernel takes; `spec`, `varlen`, `apc` (prefix caching): None drawn,
    True always, False never; `one_token`: at most one token a row without spec decode."""
    lim = _limits(profile)
    dtype = draw(st.sampled_from(tuple(DTYPES)))
    elem = DTYPES[dtype]
    layout = draw(st.sampled_from(tuple(layouts)))
    width = draw(st.integers(2, max_width))
    dim = draw(st.integers(1, lim["dim"]) | st.integers(lim["dim"], lim["wide_dim"]))
    rows = draw(st.integers(1, lim["rows"]))
    spec = presence(draw, spec)
    varlen = presence(draw, varlen)
    max_len = 1 if one_token and not spec else draw(st.integers(1, 8))
    lens = tuple(draw(st.integers(0, max_len)) if varlen else max_len for _ in range(rows))
    longest = max(lens)
    need = width - 2 + longest if spec else width - 1
    state_len = max(need, 1) + draw(st.sampled_from([0, 0, 0, 1, 3]))
    cols = draw(st.integers(2 if apc else 1, lim["cols"]))
    idx_2d = cols > 1 or draw(st.booleans())
    apc = cols > 1 and presence(draw, apc)

    # slots: each live row gets its own fresh ones (pad 0 keeps slot 0 the null block)
    first = 0 if pad == -1 else 1
    slot_count = max(draw(st.integers(1, lim["slots"])), first + rows * cols + 1)
    order = draw(st.permutations(range(first, slot_count)))
    fresh = iter(order)
    idx, init, last, nacc = [], [], [], []
    for b in range(rows):
        row = [next(fresh) for _ in range(cols)]
        read_col = draw(st.integers(0, cols - 1)) if apc else 0
        write_col = draw(st.integers(read_col, cols - 1)) if apc else 0
        kind = draw(st.sampled_from(("live", "live", "pad", "pad_dst")))
        if kind == "pad":
            row[read_col] = pad
        elif kind == "pad_dst" and write_col != read_col:
            row[write_col] = pad
        if draw(st.integers(0, 4)) == 0:  # an unused column holding the pad (engines pad draft columns)
            spare = [c for c in range(cols) if c not in (read_col, write_col)]
            if spare:
                row[draw(st.sampled_from(spare))] = pad
        idx.append(tuple(row))
        init.append(read_col)
        last.append(write_col)
        top = min(lens[b], state_len - width + 2)  # off + W - 1 <= SL
        nacc.append(draw(st.integers(min_accepted, max(min_accepted, top))))
    if ill_posed and rows > 1 and idx[0][init[0]] != pad:
        idx[1] = tuple(idx[0][last[0]] if c == last[1] else v for c, v in enumerate(idx[1]))

    slot_bytes = dim * state_len * elem
    slot_stride, offset = arena_pool(draw, slot_bytes, elem)
    top_slot = far_slot(draw, lim["huge_one_in"], elem, offset, slot_stride)
    if top_slot is not None:
        live = []  # the entries a correct step reads or stores (a pad row's or an empty row's do nothing)
        for b in range(rows):
            if idx[b][init[b]] == pad or lens[b] == 0:
                continue
            live.append((b, init[b]))
            if last[b] != init[b] and idx[b][last[b]] != pad:
                live.append((b, last[b]))
        if live:
            b, c = draw(st.sampled_from(live))
            idx[b] = tuple(top_slot if j == c else v for j, v in enumerate(idx[b]))
            slot_count = top_slot + 1
    idx_stride = cols + draw(st.sampled_from([0, 0, 1, 3]))
    arena = offset + slot_count * slot_stride + 64
    return ConvUpdateCase(
        arena_size=arena, dtype=dtype, layout=layout, offset=offset, slots=slot_count, dim=dim,
        state_len=state_len, slot_stride=slot_stride, width=width, lens=lens, idx=tuple(idx),
        bias=draw(st.booleans()), silu=draw(st.booleans()), varlen=varlen, idx_2d=idx_2d,
        idx_stride=idx_stride, nacc=tuple(nacc) if spec else None,
        init=tuple(init) if apc else None, last=tuple(last) if apc else None, pad=pad,
        seed=draw(st.integers(0, 3)), perturb=maybe_perturb(draw, profile))

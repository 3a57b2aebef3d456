"""Gated-delta-rule steps (`delta_update`), drawn where the engines' state bugs hide.

Both pool layouts with K != V most of the time (a transposed state is then a scrambled one) and K == V
one time in four (it is then a transpose, values still differ); grouped value heads; pad rows and
pad draft columns; nacc = 0 under ``min_accepted=0``; empty sequences; index rows further apart
than their columns; the per-step buffer half the time, 3 in 4 of those (where a sequence has several
tokens) with fewer steps than a sequence's tokens (a kernel must not cache past them) and then mostly a
spare buffer row (DU-STEPS).  Live sequences never share a slot or a buffer row (the oracle calls that
ill-posed).  The CPU profile is small (K, V 4..16, at most 4
tokens and 4 sequences): every program is interpreted.

Narrowed by the contract's options to what a user's kernel takes: the pool layouts, the gate kinds,
spec decode and the per-step buffer present always or never, one token a sequence without spec decode.
"""
from __future__ import annotations

from hypothesis import strategies as st

from mambafuzz.cases.delta_update import DTYPES, LAYOUTS, DeltaUpdateCase

from .narrow import presence
from .perturb import maybe_perturb
from .profiles import Profile


def _limits(profile: Profile) -> dict:
    if profile.max_rows <= 16:  # the CPU profile
        return {"rows": 4, "tokens": 4, "dims": (4, 5, 8, 12, 16), "heads": 2, "group": 2, "slots": 12}
    return {"rows": 16, "tokens": 5, "dims": (16, 32, 64, 100, 128), "heads": 4, "group": 2, "slots": 120}


@st.composite
def delta_update_cases(draw, profile: Profile, pad: int = -1, min_accepted: int = 1, ill_posed: bool = False,
                       layouts: tuple = LAYOUTS, kda: bool | None = None, spec: bool | None = None,
                       buffer: bool | None = None, one_token: bool = False, pad_rows: bool = True):
    """`layouts`: the pool layouts the kernel takes; `kda` (a per-K gate), `spec`, `buffer` (the per-step
    buffer): None drawn, True always, False never; `one_token`: at most one token a sequence without spec;
    `pad_rows`: whether a read slot or a store column may be the pad value."""
    lim = _limits(profile)
    key_dim = draw(st.sampled_from(lim["dims"]))
    value_dim = key_dim if draw(st.integers(0, 3)) == 0 else draw(st.sampled_from(lim["dims"]))
    rows = draw(st.integers(1, lim["rows"]))
    spec = presence(draw, spec)
    max_len = 1 if one_token and not spec else draw(st.integers(1, lim["tokens"]))
    lens = tuple(draw(st.integers(0, max_len)) for _ in range(rows))
    longest = max(lens)
    cols = (max(longest, 1) + draw(st.sampled_from([0, 0, 1]))) if spec else draw(st.integers(1, 3))
    idx_2d = cols > 1 or draw(st.booleans())

    first = 0 if pad == -1 else 1  # pad 0 keeps slot 0 the null block
    slot_count = max(draw(st.integers(1, lim["slots"])), first + rows * cols + 1)
    fresh = iter(draw(st.permutations(range(first, slot_count))))
    idx, nacc = [], []
    for n in range(rows):
        row = [next(fresh) for _ in range(cols)]
        accepted = draw(st.integers(min_accepted, cols)) if spec else 0
        read_col = max(accepted - 1, 0)
        kind = draw(st.sampled_from(("live", "live", "pad", "pad_dst"))) if pad_rows else "live"
        if kind == "pad":
            row[read_col] = pad
        elif kind == "pad_dst" and spec:
            others = [c for c in range(min(lens[n], cols)) if c != read_col]
            if others:
                row[draw(st.sampled_from(others))] = pad
        idx.append(tuple(row))
        nacc.append(accepted)
    if ill_posed and rows > 1 and idx[0][0] != pad and lens[0] and lens[1]:
        idx[1] = (idx[0][0],) + idx[1][1:]  # row 1 stores (or reads) the slot row 0 stores

    inter_rows, cache_steps, inter_idx = 0, 0, None
    if presence(draw, buffer):
        # fewer steps than a sequence's tokens 3 times in 4 (DU-STEPS: a kernel caching past them), and then
        # a spare buffer row 3 times in 4, so the row after the long sequence's is there to be overwritten
        short = longest > 1 and draw(st.integers(0, 3)) > 0
        inter_rows = rows + draw(st.sampled_from([0, 1, 1, 2] if short else [0, 0, 1, 2]))
        cache_steps = draw(st.integers(1, longest - 1)) if short else max(longest, 1) + draw(st.sampled_from([0, 0, 1]))
        order = draw(st.permutations(range(inter_rows)))
        inter_idx = tuple(-1 if draw(st.integers(0, 5)) == 0 else order[n] for n in range(rows))
    return DeltaUpdateCase(
        arena_size=64, dtype=draw(st.sampled_from(tuple(DTYPES))), act_dtype=draw(st.sampled_from(tuple(DTYPES))),
        layout=draw(st.sampled_from(tuple(layouts))), slots=slot_count, heads=draw(st.integers(1, lim["heads"])),
        group=draw(st.integers(1, lim["group"])), key_dim=key_dim, value_dim=value_dim, lens=lens,
        idx=tuple(idx), idx_2d=idx_2d, idx_stride=cols + draw(st.sampled_from([0, 0, 1, 3])),
        nacc=tuple(nacc) if spec else None, pad=pad, kda=presence(draw, kda), beta_per_v=draw(st.booleans()),
        l2norm=draw(st.booleans()), inter_rows=inter_rows, cache_steps=cache_steps, inter_idx=inter_idx,
        seed=draw(st.integers(0, 3)), perturb=maybe_perturb(draw, profile))

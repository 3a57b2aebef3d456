"""Contract `conv_update` (docs/contracts.md#conv_update): the causal-conv1d state update of a decode or spec-decode
step.

The target gets vLLM's ``causal_conv1d_update`` arguments as tensors: ``x``
(``[B, dim, L]``, or ``[T, dim]`` with ``query_start_loc``), ``conv_state``
(a ``[S, dim, SL]`` view of the arena, either axis contiguous, slots padded),
``weight [dim, W]``, ``bias [dim]`` or None, ``conv_state_indices`` (int32
``[B]`` or ``[B, C]``, rows maybe further apart than ``C``), optional
``num_accepted_tokens``, ``query_start_loc``, ``initial_state_idx`` and
``last_state_idx`` (prefix caching), and ``out`` to write, shaped as ``x``.

Checked: the pool's bytes exactly (a stored slot's new state, every other
slot, the pad slot, padding and guard bytes unchanged); ``out`` within a
per-element bound (``oracle.conv_tolerance``: products rounded to the state
dtype, an fp32 sum, SiLU), except rows that skip (pad, no tokens), whose
output is anything (vLLM leaves ``x``, SGLang garbage); every input exactly
unchanged.  Pools past 256 MiB are materialised sparsely (the named slots).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.conv_update import LAYOUTS, ConvUpdateCase
from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.oracle.conv_update import conv_tolerance, expect_conv_update, plan_conv_update

from .base import Argument, CliOption, Image, Output, Prepared
from .features import COUNT_EDGES, COUNTS, HUGE, NO_YES, bucket, joined
from .updates import (DRAWN, NONSPEC_TOKENS, PRESENCE, SPEC, UPDATE_CLI_OPTIONS, VARLEN, ConvPoolContract, allowed,
                      check_int32_indices, check_slot_pool, extras_off, int_tensor, min_accepted_option, nacc_buckets,
                      one_of, pad_option, presence, presence_buckets, rows_dropped, stored_tensor, table_tensor,
                      unchanged_inputs)


# the inputs a step must leave exactly as they were
UNCHANGED = ("x", "weight", "bias", "conv_state_indices", "num_accepted_tokens", "query_start_loc",
             "initial_state_idx", "last_state_idx")


# what an engine's conv update may not take (vLLM's causal_conv1d_update: everything, its own checks assert a
# channel-contiguous pool; SGLang's: widths up to 4, no varlen batches, no prefix caching)
CONV_LAYOUT = CliOption("conv_layout", ("both",) + LAYOUTS, "both",
                        "the pool layouts your kernel takes: dim (channels contiguous, which vLLM's and SGLang's "
                        "checks assert), token (tokens contiguous), or both")
MAX_WIDTH = CliOption("max_width", ("6", "5", "4"), "6", "the widest conv your kernel takes: widths 2 up to this "
                                                         "are drawn (vLLM: 6, SGLang: 4)")
PREFIX_CACHING = CliOption("prefix_caching", PRESENCE, DRAWN,
                           "prefix caching (initial_state_idx and last_state_idx given): drawn per case, always, "
                           "or never (SGLang's conv update)")


class ConvUpdate(ConvPoolContract):
    name = "conv_update"
    case_type = ConvUpdateCase
    summary = "causal conv1d decode step: read idx[b, init], convolve, store the new window to idx[b, last]"
    arguments = (
        Argument("x", "state dtype", "[B, dim, L] or [T, dim]", "the step's tokens (varlen: packed)"),
        Argument("conv_state", "float32, float16 or bfloat16", "[S, dim, SL] (strided)",
                 "the pool: a view of the arena, dim or token axis contiguous, slots padded"),
        Argument("weight", "state dtype", "[dim, W]", "the taps, W = 2..6"),
        Argument("bias", "state dtype or None", "[dim]", "added before the activation"),
        Argument("conv_state_indices", "int32", "[B] or [B, C] (row stride >= C)",
                 "slots of row b; the pad value means none"),
        Argument("num_accepted_tokens", "int32 or None", "[B]",
                 "spec decode: the window is read at column max(nacc - 1, 0)"),
        Argument("query_start_loc", "int32 or None", "[B + 1]", "varlen: row b's tokens are x[qsl[b]:qsl[b+1]]"),
        Argument("initial_state_idx", "int32 or None", "[B]", "prefix caching: the index column read"),
        Argument("last_state_idx", "int32 or None", "[B]", "prefix caching: the index column stored"),
        Argument("out", "state dtype", "as x", "the outputs to write (skipped rows: anything)"),
    )
    options = (
        Argument("activation", "str or None", "", "'silu' or None"),
        Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
        Argument("max_query_len", "int", "", "the longest row's token count"),
    )
    cli_options = UPDATE_CLI_OPTIONS + (VARLEN, CONV_LAYOUT, MAX_WIDTH, PREFIX_CACHING)
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "spec": NO_YES, "nacc": ("none", "0", "1", ">1"), "pads": ("none", "read", "write"),
        "conv_layout": ("dim", "token"), "width": ("2", "3", "4", "5", "6"),
        "dtype": ("float32", "float16", "bfloat16"), "varlen": NO_YES, "empty_rows": NO_YES,
        "index": ("1d", "2d", "2d-strided"), "apc": NO_YES, "slot_padding": NO_YES, "past_2gib": NO_YES,
        "past_2g_elements": NO_YES,
    }

    def strategy(self, profile, ill_posed: bool = False, **options):
        from mambafuzz.strategies.conv_update import conv_update_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return conv_update_cases(profile, ill_posed=ill_posed, **self._narrowing(options))

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        o = self.defaults(options)
        layout = one_of(self.name, CONV_LAYOUT, o["conv_layout"])
        return {"pad": pad_option(self.name, o["pad"]),
                "min_accepted": min_accepted_option(self.name, o["min_accepted"]),
                "layouts": LAYOUTS if layout == "both" else (layout,),
                "max_width": int(one_of(self.name, MAX_WIDTH, o["max_width"])),
                "spec": presence(self.name, SPEC.name, o["spec"]),
                "varlen": presence(self.name, VARLEN.name, o["varlen"]),
                "apc": presence(self.name, PREFIX_CACHING.name, o["prefix_caching"]),
                "one_token": one_of(self.name, NONSPEC_TOKENS, o["nonspec_tokens"]) == "1"}

    def admits(self, case: ConvUpdateCase, options) -> bool:
        n = self._narrowing(options)
        spec = case.nacc is not None
        return (case.pad == n["pad"] and (not spec or min(case.nacc, default=1) >= n["min_accepted"])
                and case.layout in n["layouts"] and case.width <= n["max_width"] and allowed(spec, n["spec"])
                and allowed(case.varlen, n["varlen"]) and allowed(case.init is not None, n["apc"])
                and not (n["one_token"] and not spec and max(case.lens, default=0) > 1))

    # ------------------------------------------------------------ memory
    def image(self, case: ConvUpdateCase) -> Image:
        check_slot_pool(case)
        rows = len(case.lens)
        for name in ("nacc", "init", "last"):
            if getattr(case, name) is not None and len(getattr(case, name)) != rows:
                raise oracle.OracleError(f"{name} has {len(getattr(case, name))} entries for {rows} rows")
        if len(case.idx) != rows or case.idx_stride < case.cols or (case.init is None) != (case.last is None):
            raise oracle.OracleError("idx needs one row per row of lens, a row stride of at least its columns, "
                                     "and init and last go together")
        if not case.varlen and len(set(case.lens)) > 1:
            raise oracle.OracleError("rows of a batch (not varlen) have one token count")
        check_int32_indices((case.idx,))
        if not 2 <= case.width <= 6 or (case.cols > 1 and not case.idx_2d):
            raise oracle.OracleError("the width is 2..6; several index columns need idx_2d")
        return self.slot_image(case)

    def prepare(self, case: ConvUpdateCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        used, starts = image.plan
        pool, x_rows, weight64, bias64, (x_raw, w_raw, b_raw), cuts = self._oracle_values(case, snapshot, starts)
        try:
            got = expect_conv_update(pool, x_rows, weight64, bias64, self._remapped(case, used, case.idx),
                                     nacc=case.nacc, init=case.init, last=case.last, silu=case.silu, pad=case.pad)
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, used))})") from None
        expected = self._expected(case, snapshot, starts, got.pool, {s for s in got.stored if s is not None})

        rows = len(case.lens)
        if case.varlen:
            x = stored_tensor(x_raw.reshape(sum(case.lens), case.dim), case.dtype, device)
        else:
            length = case.lens[0] if rows else 0
            x = stored_tensor(x_raw.reshape(rows, length, case.dim).transpose(0, 2, 1), case.dtype, device)
        conv_state, weight, bias = self._tensors(case, arena, w_raw, b_raw, device)
        ints = lambda values: int_tensor(values, device)
        qsl = ints(cuts.tolist()) if case.varlen else None
        out = torch.full_like(x, float("nan"))
        args = {"x": x, "conv_state": conv_state, "weight": weight, "bias": bias,
                "conv_state_indices": table_tensor(case, device), "num_accepted_tokens": ints(case.nacc),
                "query_start_loc": qsl, "initial_state_idx": ints(case.init), "last_state_idx": ints(case.last),
                "out": out}
        kwargs = {"activation": "silu" if case.silu else None, "pad_slot_id": case.pad,
                  "max_query_len": max(case.lens, default=0)}
        outputs = (self._out(case, got, x),) + unchanged_inputs(args, UNCHANGED)
        return Prepared(args, kwargs, expected, outputs=outputs)

    def _out(self, case: ConvUpdateCase, got, x) -> Output:
        """`out` shaped as x: each live row's values and bound; skipped rows are don't-care."""
        want = np.zeros((sum(case.lens), case.dim))
        bound = np.zeros_like(want)
        care = np.zeros(want.shape, dtype=bool)
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        for b, (values, scale) in enumerate(zip(got.out, got.scale)):
            if values is None:
                continue
            want[cuts[b]:cuts[b + 1]] = values.T
            bound[cuts[b]:cuts[b + 1]] = conv_tolerance(case.dtype, scale, values, case.width).T
            care[cuts[b]:cuts[b + 1]] = True
        if not case.varlen:
            rows, length = len(case.lens), (case.lens[0] if case.lens else 0)
            def batch(a):
                return a.reshape(rows, length, case.dim).transpose(0, 2, 1)
            want, bound, care = batch(want), batch(bound), batch(care)
        return Output("out", want, atol=bound, what=self._out_where(case), care=care)

    @staticmethod
    def _out_where(case: ConvUpdateCase) -> str:
        return "flat element {i} of out" + (" [T, dim]" if case.varlen else " [B, dim, L]")

    # ------------------------------------------------------------ shrinking
    def plan(self, case: ConvUpdateCase):
        return plan_conv_update(case.slots, case.state_len, case.width, case.lens, case.idx, nacc=case.nacc,
                                init=case.init, last=case.last, pad=case.pad)

    def candidates(self, case: ConvUpdateCase) -> Iterator[ConvUpdateCase]:
        """Rows dropped; index columns no row uses dropped; fewer tokens; a narrower pool and conv; extras
        off; slots renumbered low."""
        r = dataclasses.replace
        yield from rows_dropped(case, ("lens", "idx", "nacc", "init", "last"))
        yield from self._columns_dropped(case)
        if case.lens and max(case.lens) > 1:
            shorter = tuple(max(0 if case.varlen else 1, n - 1) for n in case.lens)
            nacc = None if case.nacc is None else tuple(min(a, max(n, 1)) for a, n in zip(case.nacc, shorter))
            yield r(case, lens=shorter, nacc=nacc)
        yield from extras_off(case, ({"perturb": None}, {"bias": False}, {"silu": False}, {"nacc": None},
                                     {"init": None, "last": None}, {"idx_stride": case.cols}, {"idx_2d": False},
                                     {"layout": "dim"}, {"seed": 0}))
        if case.varlen and len(set(case.lens)) == 1:
            yield r(case, varlen=False)
        need = case.width - 1 if case.nacc is None else case.width - 2 + max(case.lens, default=1)
        if case.state_len > need:
            yield self._resized(case, state_len=max(need, 1))
        if case.width > 2:
            yield self._resized(case, width=case.width - 1)
        yield from self._narrower(case)

    @staticmethod
    def _columns_dropped(case: ConvUpdateCase) -> Iterator[ConvUpdateCase]:
        """The index columns no row reads or stores through (column 0 without prefix caching, else the
        init and last columns) cut: all of them, then each alone; init and last follow their columns, the
        row stride keeps its padding."""
        used = {0} if case.init is None else set(case.init) | set(case.last)
        unused = [c for c in range(case.cols) if c not in used]
        for cut in ([unused] if len(unused) > 1 else []) + [[c] for c in unused]:
            keep = [c for c in range(case.cols) if c not in cut]
            where = {c: k for k, c in enumerate(keep)}
            idx = tuple(tuple(row[c] for c in keep) for row in case.idx)
            init, last = (None if v is None else tuple(where[c] for c in v) for v in (case.init, case.last))
            yield dataclasses.replace(case, idx=idx, init=init, last=last, idx_stride=case.idx_stride - len(cut))

    # ------------------------------------------------------------ coverage
    def features(self, case: ConvUpdateCase) -> dict[str, str]:
        rows = len(case.lens)
        read = [case.idx[b][case.init[b] if case.init else 0] for b in range(rows)]
        write = [case.idx[b][case.last[b] if case.last else 0] for b in range(rows)]
        pads = ["read" if s == case.pad else "write" if d == case.pad else "none" for s, d in zip(read, write)]
        nacc = ["none"] if case.nacc is None else ["0" if a == 0 else "1" if a == 1 else ">1" for a in case.nacc]
        top = max((v for row in case.idx for v in row if v != case.pad), default=0)
        return {
            "rows": bucket(rows, COUNT_EDGES), "spec": "yes" if case.nacc is not None else "no",
            "nacc": joined(nacc, self.buckets["nacc"]), "pads": joined(pads or ["none"], self.buckets["pads"]),
            "conv_layout": case.layout, "width": str(case.width), "dtype": case.dtype,
            "varlen": "yes" if case.varlen else "no", "empty_rows": "yes" if 0 in case.lens else "no",
            "index": "1d" if not case.idx_2d else "2d-strided" if case.idx_stride > case.cols else "2d",
            "apc": "yes" if case.init is not None else "no",
            "slot_padding": "yes" if case.slot_stride > case.slot_bytes else "no",
            "past_2gib": "yes" if case.offset + top * case.slot_stride >= HUGE else "no",
            "past_2g_elements": "yes" if top * (case.slot_stride // case.elem) >= HUGE else "no",
        }

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        n = self._expected_narrowing(options)
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3")
        out["spec"] = presence_buckets(n["spec"])
        out["nacc"] = nacc_buckets(n["spec"], n["min_accepted"])
        out["varlen"] = presence_buckets(n["varlen"])
        out["empty_rows"] = NO_YES if n["varlen"] is not False else ("no",)
        out["conv_layout"] = n["layouts"]
        out["width"] = tuple(str(w) for w in range(2, n["max_width"] + 1))
        out["apc"] = presence_buckets(n["apc"])
        if n["apc"]:  # several index columns
            out["index"] = ("2d", "2d-strided")
        if n["apc"] is False:  # a pad destination needs a write column of its own
            out["pads"] = ("none", "read")
        return out


CONTRACT = ConvUpdate()

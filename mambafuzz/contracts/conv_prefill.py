"""Contract `conv_prefill` (docs/contracts.md#conv_prefill): the causal-conv1d prefill of a batch of chunks,
with prefix caching.

The target gets vLLM's ``causal_conv1d_fn`` arguments as tensors: ``x``
(``[T, dim]``, rows packed, ``query_start_loc [B + 1]``), ``conv_state`` (a
``[S, dim, SL]`` view of the arena, either axis contiguous, slots padded),
``weight [dim, W]``, ``bias [dim]`` or None, ``cache_indices`` (int32
``[B]`` or ``[B, M]``, rows maybe further apart than ``M``),
``has_initial_state`` (bool ``[B]``), and, with prefix caching,
``initial_state_idx``, ``block_idx_first_scheduled_token``,
``block_idx_last_scheduled_token`` and ``num_computed_tokens`` (int32 ``[B]``;
all None without), and ``out`` to write, shaped as ``x``.

Checked: the pool's bytes exactly (every stored window, every other slot, the
pad slot, columns past ``W - 1``, padding and guard bytes unchanged); ``out``
within the decode update's per-element bound, except rows that skip (pad, no
tokens), whose output is anything; every input exactly unchanged.  Pools past
256 MiB are materialised sparsely (the named slots).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.conv_prefill import ConvPrefillCase
from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.oracle.conv_prefill import conv_prefill_tolerance, expect_conv_prefill, plan_conv_prefill

from .base import Argument, CliOption, Image, Output, Prepared
from .features import COUNTS, NO_YES, joined
from .prefill import BLOCK_SIZE, PrefillContract, column_arguments
from .updates import (UPDATE_CLI_OPTIONS, ConvPoolContract, check_slot_pool, extras_off, one_of, pad_option,
                      stored_tensor, unchanged_inputs)

# the inputs a prefill must leave exactly as they were
UNCHANGED = ("x", "weight", "bias", "cache_indices", "has_initial_state", "query_start_loc", "initial_state_idx",
             "block_idx_first_scheduled_token", "block_idx_last_scheduled_token", "num_computed_tokens")

CLI_OPTIONS = (
    UPDATE_CLI_OPTIONS[0],  # --pad -1|0, as for every state update
    CliOption("max_width", ("6", "5", "4", "3", "2"), "6",
              "the widest conv your kernel takes: W is drawn from 2 to this (vLLM's prefill kernel: 4)"),
    CliOption("conv_layout", ("both", "dim", "token"), "both",
              "the conv pool layouts your kernel takes: channels contiguous (dim, vLLM's), tokens contiguous "
              "(token), or both"),
    CliOption("block_multiple", ("1", "8", "16"), "1",
              "prefix caching's block size is drawn as a multiple of this (vLLM's prefill kernel: 8)"),
    CliOption("cache_mode", ("both", "none", "all"), "both",
              "prefix caching your kernel takes: none (one slot a row, read and stored; SGLang, vLLM without "
              "prefix caching), all (vLLM's mamba_cache_mode 'all': the block columns and every block "
              "boundary's window), or both"),
)


class ConvPrefill(PrefillContract, ConvPoolContract):
    name = "conv_prefill"
    case_type = ConvPrefillCase
    summary = ("causal conv1d prefill: read idx[b, init] (or zeros), convolve the chunk, store the window at "
               "each block boundary crossed and the final one")
    arguments = (
        Argument("x", "state dtype", "[T, dim]", "the chunks' tokens, packed (row b: x[qsl[b]:qsl[b+1]])"),
        Argument("conv_state", "float32, float16 or bfloat16", "[S, dim, SL >= W - 1] (strided)",
                 "the pool: a view of the arena, dim or token axis contiguous, slots padded"),
        Argument("weight", "state dtype", "[dim, W]", "the taps, W = 2..6"),
        Argument("bias", "state dtype or None", "[dim]", "added before the activation"),
        Argument("cache_indices", "int32", "[B] or [B, M] (row stride >= M)",
                 "row b's block table (slots); the pad value means none"),
        Argument("has_initial_state", "bool", "[B]", "row b starts from its initial block's window (else zeros)"),
        Argument("query_start_loc", "int32", "[B + 1]", "row b's tokens are x[qsl[b]:qsl[b+1]] (0 allowed)"),
        *column_arguments("B", "window"),
        Argument("out", "state dtype", "as x", "the outputs to write (skipped rows: anything)"),
    )
    options = (
        Argument("activation", "str or None", "", "'silu' or None"),
        Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
        BLOCK_SIZE,
    )
    cli_options = CLI_OPTIONS
    packed_only = False  # every renumbering step, as conv_update (a kernel reading a slot's neighbour finds one)
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "cache_mode": ("none", "all"), "columns": ("none", "derived", "arbitrary"),
        "chunk": ("empty", "short", "long"), "boundaries": ("none", "0", "1", ">1"), "near_boundary": NO_YES,
        "init_vs_last": ("none", "same", "differ"), "init_stored": NO_YES, "initial_state": ("none", "yes", "no"),
        "pads": ("none", "read", "write"), "conv_layout": ("dim", "token"), "width": ("2", "3", "4", "5", "6"),
        "dtype": ("float32", "float16", "bfloat16"), "block_size": ("none", "1", "2-7", "8-15", ">=16"),
        "index": ("1d", "1d-strided", "2d", "2d-strided"), "slot_padding": NO_YES, "past_2gib": NO_YES,
        "past_2g_elements": NO_YES,
    }

    def strategy(self, profile, pad="-1", max_width="6", conv_layout="both", block_multiple="1", cache_mode="both",
                 **_):
        from mambafuzz.strategies.conv_prefill import conv_prefill_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return conv_prefill_cases(profile, pad=pad_option(self.name, pad),
                                  max_width=int(one_of(self.name, CLI_OPTIONS[1], max_width)),
                                  conv_layout=one_of(self.name, CLI_OPTIONS[2], conv_layout),
                                  block_multiple=int(one_of(self.name, CLI_OPTIONS[3], block_multiple)),
                                  cache_mode=one_of(self.name, CLI_OPTIONS[4], cache_mode))

    # ------------------------------------------------------------ memory
    def image(self, case: ConvPrefillCase) -> Image:
        check_slot_pool(case)
        self.check_rows(case)
        if not 2 <= case.width <= 6:
            raise oracle.OracleError("the width is 2..6")
        return self.slot_image(case)

    def prepare(self, case: ConvPrefillCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        used, starts = image.plan
        pool, x_rows, weight64, bias64, (x_raw, w_raw, b_raw), _ = self._oracle_values(case, snapshot, starts)
        try:
            got = expect_conv_prefill(pool, x_rows, weight64, bias64, self._remapped(case, used, case.idx),
                                      case.has_init, silu=case.silu, pad=case.pad, **self.columns(case))
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, used))})") from None
        expected = self._expected(case, snapshot, starts, got.pool, {s for row in got.stored for s in row})

        x = stored_tensor(x_raw.reshape(sum(case.lens), case.dim), case.dtype, device)
        conv_state, weight, bias = self._tensors(case, arena, w_raw, b_raw, device)
        args = self.in_order(self.row_args(case, device) | {
            "x": x, "conv_state": conv_state, "weight": weight, "bias": bias,
            "out": torch.full_like(x, float("nan"))})
        kwargs = {"activation": "silu" if case.silu else None} | self.row_kwargs(case)
        outputs = (self._out(case, got),) + unchanged_inputs(args, UNCHANGED)
        return Prepared(args, kwargs, expected, outputs=outputs)

    def _out(self, case: ConvPrefillCase, got) -> Output:
        """`out` [T, dim]: each live row's values and bound; skipped rows are don't-care."""
        want = np.zeros((sum(case.lens), case.dim))
        bound = np.zeros_like(want)
        care = np.zeros(want.shape, dtype=bool)
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        for b, (values, scale) in enumerate(zip(got.out, got.scale)):
            if values is None:
                continue
            want[cuts[b]:cuts[b + 1]] = values.T
            bound[cuts[b]:cuts[b + 1]] = conv_prefill_tolerance(case.dtype, scale, values, case.width).T
            care[cuts[b]:cuts[b + 1]] = True
        return Output("out", want, atol=bound, what="flat element {i} of out [T, dim]", care=care)

    # ------------------------------------------------------------ shrinking
    def plan(self, case: ConvPrefillCase):
        return plan_conv_prefill(case.slots, case.state_len, case.width, case.lens, case.idx, case.has_init,
                                 pad=case.pad, **self.columns(case))

    def candidates(self, case: ConvPrefillCase) -> Iterator[ConvPrefillCase]:
        """Rows dropped; fewer tokens (the last column following); prefix caching off; zeros for initial
        states; extras off; a narrower pool and conv; slots renumbered low."""
        yield from self._rows_and_tokens(case)
        yield from self._cache_off(case)
        yield from self._no_initial_states(case)
        yield from extras_off(case, ({"perturb": None}, {"bias": False}, {"silu": False}, {"idx_stride": case.cols},
                                     {"idx_2d": case.cols > 1}, {"layout": "dim"}, {"seed": 0}))
        if case.state_len > case.width - 1:
            yield self._resized(case, state_len=case.width - 1)
        if case.width > 2:
            yield self._resized(case, width=case.width - 1, state_len=max(case.state_len - 1, 1))
        yield from self._narrower(case)

    # ------------------------------------------------------------ coverage
    def features(self, case: ConvPrefillCase) -> dict[str, str]:
        """Per live row (tokens, a read slot): its chunk against the window, the boundaries it crosses, its
        columns; "none" where no row had one."""
        w1 = case.width - 1
        seen, live = self.row_features(case, lambda n: "empty" if n == 0 else "short" if n < w1 else "long")
        seen["init_vs_last"] = ["same" if init == last else "differ"
                                for _, _, _, (init, _, last), _, _ in live] if case.apc else []
        out = {name: joined(labels or ["none"], self.buckets[name]) for name, labels in seen.items()}
        near = any(offsets and offsets[0] < w1 for *_, offsets, _ in live)
        stored = case.apc and any(row[cols[0]] in [row[c] for c in stores] for _, row, _, cols, _, stores in live)
        return out | self.table_features(case) | {
            "near_boundary": "yes" if near else "no", "init_stored": "yes" if stored else "no",
            "conv_layout": case.layout, "width": str(case.width), "dtype": case.dtype,
            "block_size": self.block_size_feature(case),
            "slot_padding": "yes" if case.slot_stride > case.slot_bytes else "no",
        } | self.far_features(case, live)

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        out = self.expected_rows()
        widest = int(options.get("max_width", "6"))
        out["width"] = tuple(str(w) for w in range(2, widest + 1))
        if widest == 2:  # a window of one column: no chunk is shorter, no boundary nearer
            out["chunk"] = ("empty", "long")
            out["near_boundary"] = ("no",)
        layout = options.get("conv_layout", "both")
        out["conv_layout"] = ("dim", "token") if layout == "both" else (layout,)
        sizes = {1: ("1", "2-7", "8-15"), 8: ("8-15", ">=16"), 16: (">=16",)}[int(options.get("block_multiple", "1"))]
        return self.expected_cache(out, options.get("cache_mode", "both"), sizes, near_boundary=("no",),
                                   init_stored=("no",))


CONTRACT = ConvPrefill()

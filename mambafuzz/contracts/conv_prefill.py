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

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.conv_prefill import ConvPrefillCase
from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.errors import UsageError
from mambafuzz.oracle.conv_prefill import (boundary_offsets, conv_prefill_tolerance, derived_columns,
                                           expect_conv_prefill, plan_conv_prefill)

from .base import Argument, CliOption, Image, Output, Prepared
from .features import COUNT_EDGES, COUNTS, HUGE, NO_YES, bucket, joined
from .updates import (UPDATE_CLI_OPTIONS, ConvPoolContract, check_slot_pool, pad_option, rows_dropped, to_float64,
                      unchanged_inputs)

# the inputs a prefill must leave exactly as they were
UNCHANGED = ("x", "weight", "bias", "cache_indices", "has_initial_state", "query_start_loc", "initial_state_idx",
             "block_idx_first_scheduled_token", "block_idx_last_scheduled_token", "num_computed_tokens")
APC_COLUMNS = ("init", "first", "last", "computed")

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


def option_int(name: str, value, choices) -> int:
    """An integer option's text as an int; UsageError in one line when it is not one of `choices`."""
    if str(value) not in choices:
        raise UsageError(f"conv_prefill option {name} must be one of {', '.join(choices)}, got {value!r}")
    return int(value)


def option_word(name: str, value, choices) -> str:
    if str(value) not in choices:
        raise UsageError(f"conv_prefill option {name} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


class ConvPrefill(ConvPoolContract):
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
        Argument("initial_state_idx", "int32 or None", "[B]", "prefix caching: the table column read"),
        Argument("block_idx_first_scheduled_token", "int32 or None", "[B]",
                 "prefix caching: the column of the first block boundary's window"),
        Argument("block_idx_last_scheduled_token", "int32 or None", "[B]",
                 "prefix caching: the column the final window goes to"),
        Argument("num_computed_tokens", "int32 or None", "[B]",
                 "prefix caching: tokens computed before the chunk (where its boundaries fall)"),
        Argument("out", "state dtype", "as x", "the outputs to write (skipped rows: anything)"),
    )
    options = (
        Argument("activation", "str or None", "", "'silu' or None"),
        Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
        Argument("block_size", "int", "", "prefix caching: tokens per block (0 without)"),
    )
    cli_options = CLI_OPTIONS
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
                                  max_width=option_int("max_width", max_width, CLI_OPTIONS[1].choices),
                                  conv_layout=option_word("conv_layout", conv_layout, CLI_OPTIONS[2].choices),
                                  block_multiple=option_int("block_multiple", block_multiple, CLI_OPTIONS[3].choices),
                                  cache_mode=option_word("cache_mode", cache_mode, CLI_OPTIONS[4].choices))

    # ------------------------------------------------------------ memory
    def image(self, case: ConvPrefillCase) -> Image:
        check_slot_pool(case)
        rows = len(case.lens)
        if len(case.idx) != rows or len(case.has_init) != rows or case.idx_stride < case.cols:
            raise oracle.OracleError("idx and has_init need one row per row of lens, and the table a row stride "
                                     "of at least its columns")
        for name in APC_COLUMNS:
            column = getattr(case, name)
            if (column is not None) != case.apc or (column is not None and len(column) != rows):
                raise oracle.OracleError("init, first, last and computed go with prefix caching (apc), one "
                                         "entry a row")
        if case.apc and case.block_size < 1:
            raise oracle.OracleError("prefix caching needs a positive block size")
        if any(not -(1 << 31) <= v < (1 << 31) for row in case.idx for v in row) or \
                any(not 0 <= v < (1 << 31) for v in case.computed or ()):
            raise oracle.OracleError("index values and computed counts are int32")
        if not 2 <= case.width <= 6 or (case.cols > 1 and not case.idx_2d):
            raise oracle.OracleError("the width is 2..6; several table columns need idx_2d")
        return self.slot_image(case)

    def _columns(self, case: ConvPrefillCase) -> dict:
        return {name: getattr(case, name) for name in APC_COLUMNS} | {"block_size": case.block_size}

    def prepare(self, case: ConvPrefillCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        used, starts = image.plan
        pool = self._pool(case, snapshot, starts)
        x_raw, w_raw, b_raw = self._inputs(case)
        x64 = to_float64(x_raw, case.dtype)
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        x_rows = [x64[cuts[b]:cuts[b + 1]].T for b in range(len(case.lens))]
        try:
            got = expect_conv_prefill(pool, x_rows, to_float64(w_raw, case.dtype),
                                      None if b_raw is None else to_float64(b_raw, case.dtype),
                                      self._remapped(case, used, case.idx), case.has_init, silu=case.silu, pad=case.pad,
                                      **self._columns(case))
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, used))})") from None
        expected = snapshot.copy()
        for k in sorted({s for row in got.stored for s in row}):
            self._store(case, expected, int(starts[k]), got.pool[k])

        tdtype = getattr(torch, case.dtype)

        def tensor(raw, shape):
            t = torch.from_numpy(np.ascontiguousarray(raw).reshape(shape).copy())
            return (t.view(torch.bfloat16) if case.dtype == "bfloat16" else t).to(device)

        def ints(values):
            return None if values is None else torch.tensor(list(values), dtype=torch.int32, device=device)

        rows = len(case.lens)
        x = tensor(x_raw, (sum(case.lens), case.dim))
        weight = tensor(w_raw, (case.dim, case.width))
        bias = None if b_raw is None else tensor(b_raw, (case.dim,))
        flat = arena[case.offset:case.offset + case.slots * case.slot_stride].view(tdtype)
        per_slot = case.slot_stride // case.elem
        strides = (per_slot, 1, case.dim) if case.layout == "dim" else (per_slot, case.state_len, 1)
        conv_state = flat.as_strided((case.slots, case.dim, case.state_len), strides)
        table = np.full((rows, case.idx_stride), case.pad, dtype=np.int32)
        table[:, :case.cols] = np.asarray(case.idx, dtype=np.int64).reshape(rows, case.cols)
        base = torch.from_numpy(table).to(device)
        indices = base[:, :case.cols] if case.idx_2d else base[:, 0]
        args = {"x": x, "conv_state": conv_state, "weight": weight, "bias": bias, "cache_indices": indices,
                "has_initial_state": torch.tensor(list(case.has_init), dtype=torch.bool, device=device),
                "query_start_loc": ints(cuts.tolist()), "initial_state_idx": ints(case.init),
                "block_idx_first_scheduled_token": ints(case.first),
                "block_idx_last_scheduled_token": ints(case.last), "num_computed_tokens": ints(case.computed),
                "out": torch.full_like(x, float("nan"))}
        kwargs = {"activation": "silu" if case.silu else None, "pad_slot_id": case.pad,
                  "block_size": case.block_size if case.apc else 0}
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
                                 pad=case.pad, **self._columns(case))

    def candidates(self, case: ConvPrefillCase) -> Iterator[ConvPrefillCase]:
        """Rows dropped; fewer tokens (the last column following); prefix caching off; zeros for initial
        states; extras off; a narrower pool and conv; slots renumbered low."""
        r = dataclasses.replace
        yield from rows_dropped(case, ConvPrefillCase.PER_ROW)
        if case.lens and max(case.lens) > 0:
            yield self._shorter(case, range(len(case.lens)))
            for b in range(len(case.lens)):
                if case.lens[b] > 0:
                    yield self._shorter(case, (b,))
        if case.apc:
            yield r(case, apc=False, block_size=0, init=None, first=None, last=None, computed=None)
            yield from self._fewer_columns(case)
        for b, has in enumerate(case.has_init):
            if has:
                yield r(case, has_init=case.has_init[:b] + (False,) + case.has_init[b + 1:])
        for extra in ({"perturb": None}, {"bias": False}, {"silu": False}, {"idx_stride": case.cols},
                      {"idx_2d": case.cols > 1}, {"layout": "dim"}, {"seed": 0}):
            if any(getattr(case, k) != v for k, v in extra.items()):
                yield r(case, **extra)
        if case.state_len > case.width - 1:
            yield self._resized(case, state_len=case.width - 1)
        if case.width > 2:
            yield self._resized(case, width=case.width - 1, state_len=max(case.state_len - 1, 1))
        for dim in sorted({1, case.dim // 2, case.dim - 1}):
            if 1 <= dim < case.dim:
                yield self._resized(case, dim=dim)
        if case.dtype != "float32":
            yield self._resized(case, dtype="float32")
        if case.slot_stride > case.slot_bytes or case.offset:
            yield self._resized(case, padded=False)
        yield from self._renumbered(case)

    def _shorter(self, case: ConvPrefillCase, rows) -> ConvPrefillCase:
        """One token fewer in `rows`, each one's last column moved to keep last - first the boundaries it
        crosses (prefix caching)."""
        lens, last = list(case.lens), list(case.last or ())
        for b in rows:
            if lens[b] > 0:
                lens[b] -= 1
                if case.apc and lens[b] > 0:
                    last[b] = case.first[b] + len(boundary_offsets(case.computed[b], lens[b], case.block_size))
        return dataclasses.replace(case, lens=tuple(lens), last=tuple(last) if case.apc else None)

    def _fewer_columns(self, case: ConvPrefillCase) -> Iterator[ConvPrefillCase]:
        """The table cut to the columns rows use; column 0 dropped where no row uses it, every column
        and computed count moved down by one block (where each count is at least one block)."""
        used = max(max(c) for c in zip(case.init, case.first, case.last)) + 1
        if used < case.cols:
            yield dataclasses.replace(case, idx=tuple(row[:used] for row in case.idx),
                                      idx_stride=case.idx_stride - (case.cols - used))
        if min(min(c) for c in zip(case.init, case.first, case.last)) >= 1 and \
                min(case.computed) >= case.block_size:
            def down(column):
                return tuple(v - 1 for v in column)
            yield dataclasses.replace(case, idx=tuple(row[1:] for row in case.idx), idx_stride=case.idx_stride - 1,
                                      init=down(case.init), first=down(case.first), last=down(case.last),
                                      computed=tuple(c - case.block_size for c in case.computed))

    # ------------------------------------------------------------ coverage
    def features(self, case: ConvPrefillCase) -> dict[str, str]:
        """Per live row (tokens, a read slot): its chunk against the window, the boundaries it crosses, its
        columns; "none" where no row had one."""
        w1 = case.width - 1
        seen: dict[str, list[str]] = {name: [] for name in ("chunk", "boundaries", "near_boundary", "init_vs_last",
                                                             "init_stored", "initial_state", "pads", "columns")}
        for b, (row, length) in enumerate(zip(case.idx, case.lens)):
            init, first, last = (case.init[b], case.first[b], case.last[b]) if case.apc else (0, 0, 0)
            seen["chunk"].append("empty" if length == 0 else "short" if length < w1 else "long")
            if row[init] == case.pad:
                seen["pads"].append("read")
                continue
            if length == 0:
                continue
            seen["initial_state"].append("yes" if case.has_init[b] else "no")
            offsets = boundary_offsets(case.computed[b], length, case.block_size) if case.apc else []
            seen["boundaries"].append("0" if not offsets else "1" if len(offsets) == 1 else ">1")
            seen["near_boundary"].append("yes" if offsets and offsets[0] < w1 else "no")
            stores = [first + k for k in range(len(offsets))] + [last]
            seen["pads"].append("write" if any(row[c] == case.pad for c in stores) else "none")
            if case.apc:
                seen["init_vs_last"].append("same" if init == last else "differ")
                seen["init_stored"].append("yes" if row[init] in [row[c] for c in stores] else "no")
                derived = derived_columns(case.computed[b], length, case.block_size)
                seen["columns"].append("derived" if derived == (init, first, last, case.has_init[b])
                                       else "arbitrary")
        top = max((v for row in case.idx for v in row if v != case.pad), default=0)
        bs = "none" if not case.apc else bucket(case.block_size, ((1, "1"), (2, "2-7"), (8, "8-15"), (16, ">=16")))
        out = {name: joined(labels or ["none"], self.buckets[name]) for name, labels in seen.items()}
        out["near_boundary"] = "yes" if "yes" in seen["near_boundary"] else "no"
        out["init_stored"] = "yes" if "yes" in seen["init_stored"] else "no"
        return out | {
            "rows": bucket(len(case.lens), COUNT_EDGES), "cache_mode": "all" if case.apc else "none",
            "conv_layout": case.layout, "width": str(case.width), "dtype": case.dtype, "block_size": bs,
            "index": ("2d" if case.idx_2d else "1d") + ("-strided" if case.idx_stride > case.cols else ""),
            "slot_padding": "yes" if case.slot_stride > case.slot_bytes else "no",
            "past_2gib": "yes" if case.offset + top * case.slot_stride >= HUGE else "no",
            "past_2g_elements": "yes" if top * (case.slot_stride // case.elem) >= HUGE else "no",
        }

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3")
        out["boundaries"], out["initial_state"] = ("0", "1", ">1"), ("yes", "no")  # "none": every row skipped
        widest = int(options.get("max_width", "6"))
        out["width"] = tuple(str(w) for w in range(2, widest + 1))
        if widest == 2:  # a window of one column: no chunk is shorter, no boundary nearer
            out["chunk"] = ("empty", "long")
            out["near_boundary"] = ("no",)
        layout = options.get("conv_layout", "both")
        out["conv_layout"] = ("dim", "token") if layout == "both" else (layout,)
        mode = options.get("cache_mode", "both")
        if mode == "none":
            out.update(cache_mode=("none",), columns=("none",), block_size=("none",), boundaries=("0",),
                       near_boundary=("no",), init_vs_last=("none",), init_stored=("no",),
                       pads=("none", "read"))  # the one destination is the slot read
            return out
        sizes = {1: ("1", "2-7", "8-15"), 8: ("8-15", ">=16"), 16: (">=16",)}[int(options.get("block_multiple", "1"))]
        if mode == "all":
            out.update(cache_mode=("all",), columns=("derived", "arbitrary"), block_size=sizes,
                       init_vs_last=("same", "differ"), index=("2d", "2d-strided"))
        else:
            out["block_size"] = ("none",) + sizes
        return out


CONTRACT = ConvPrefill()

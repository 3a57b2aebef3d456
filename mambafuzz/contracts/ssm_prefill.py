"""Contract `ssm_prefill` (docs/contracts.md#ssm_prefill): the Mamba2 chunked-scan prefill of a batch of
chunks from states in a pool, storing the final state and, with prefix caching, the state at every block
boundary.

The target gets the arguments of vLLM's varlen chunked scan (``mamba_chunk_scan_combined_varlen``) and
the prefix-caching columns of its Mamba2 mixer, as tensors: ``x [T, H, P]``, ``dt [T, H]``, ``A [H]``,
``B [T, G, N]``, ``dt_bias [H]`` or None, ``ssm_state`` (the pool, ``[S, H, P, N]``, slots maybe padded),
``cache_indices`` (int32 ``[B]`` or ``[B, M]``, rows maybe further apart than ``M``),
``has_initial_state`` (bool ``[B]``), ``cu_seqlens [B + 1]`` and, with prefix caching,
``initial_state_idx``, ``block_idx_first_scheduled_token``, ``block_idx_last_scheduled_token`` and
``num_computed_tokens`` (int32 ``[B]``; all None without); options ``dt_softplus``, ``pad_slot_id`` and
``block_size``.

Checked: every stored state within ``oracle.ssm_prefill``'s bound, every other slot exactly unchanged (the
pad slot, the initial blocks, slot padding); every input exactly unchanged.  The scan's output ``y`` is not
part of the contract.  ``exact`` cases keep the pool in the arena, byte for byte (padding, guard bytes,
pools past 2 GiB, sparse past 256 MiB): their values make any order of fp32 math exact.  Other cases hand
the pool over as its own tensor, an in-place output.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.cases.ssm_prefill import SsmPrefillCase
from mambafuzz.oracle.ssm_prefill import expect_ssm_prefill, plan_ssm_prefill

from .base import Argument, CliOption, Image, Output, Prepared, host_array
from .features import COUNTS, NO_YES, joined
from .prefill import BLOCK_SIZE, PrefillContract, column_arguments
from .updates import (DRAWN, PAD, PRESENCE, SsmPoolContract, allowed, as_stored, as_tensors, exact_or_seeded_pool,
                      extras_off, finite_values, from_float64, one_of, oracle_input, pad_option, padded_rows,
                      presence, presence_buckets, stored_tensor, unchanged_inputs)

# the inputs a prefill must leave exactly as they were
UNCHANGED = ("x", "dt", "A", "B", "dt_bias", "cache_indices", "has_initial_state", "cu_seqlens", "initial_state_idx",
             "block_idx_first_scheduled_token", "block_idx_last_scheduled_token", "num_computed_tokens")

BLOCK_MULTIPLE = CliOption("block_multiple", ("1", "8", "16"), "1",
                           "prefix caching's block size is drawn as a multiple of this (vLLM: a multiple of the "
                           "scan's chunk size)")
CACHE_MODE = CliOption("cache_mode", ("both", "none", "all"), "both",
                       "prefix caching your kernel takes: none (one slot a row, read and stored), all (vLLM's "
                       "mamba_cache_mode 'all': the block columns and every block boundary's state), or both")
HAS_DT_BIAS = CliOption("has_dt_bias", PRESENCE, DRAWN, "dt_bias given: drawn per case, always, or never")
CLI_OPTIONS = (PAD, BLOCK_MULTIPLE, CACHE_MODE, HAS_DT_BIAS)


class SsmPrefill(PrefillContract, SsmPoolContract):
    name = "ssm_prefill"
    case_type = SsmPrefillCase
    summary = ("Mamba2 chunked-scan prefill: read idx[b, init] (or zeros), scan the chunk, store the state at "
               "each block boundary crossed and the final one")
    arguments = (
        Argument("x", "io dtype", "[T, H, P]", "the chunks' tokens, packed (row b: x[cu[b]:cu[b+1]])"),
        Argument("dt", "io dtype", "[T, H]", "the time steps"),
        Argument("A", "float32", "[H]", "the decay rates (negative)"),
        Argument("B", "io dtype", "[T, G, N]", "input projection per group (H a multiple of G)"),
        Argument("dt_bias", "float32 or None", "[H]", "added to dt before the softplus"),
        Argument("ssm_state", "float32, float16 or bfloat16", "[S, H, P, N] (slots strided)",
                 "the pool, updated in place"),
        Argument("cache_indices", "int32", "[B] or [B, M] (row stride >= M)",
                 "row b's block table (slots); the pad value means none"),
        Argument("has_initial_state", "bool", "[B]", "row b starts from its initial block's state (else zeros)"),
        Argument("cu_seqlens", "int32", "[B + 1]", "row b's tokens are x[cu[b]:cu[b+1]] (0 allowed)"),
        *column_arguments("B", "state"),
    )
    options = (
        Argument("dt_softplus", "bool", "", "dt = softplus(dt + dt_bias)"),
        Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
        BLOCK_SIZE,
    )
    cli_options = CLI_OPTIONS
    table_arg, starts_arg, head_rows = "cache_indices", "cu_seqlens", "headdim"
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "cache_mode": ("none", "all"), "columns": ("none", "derived", "arbitrary"),
        "chunk": ("empty", "short", "long"), "boundaries": ("none", "0", "1", ">1"),
        "init_vs_last": ("none", "same", "differ"), "initial_state": ("none", "yes", "no"),
        "pads": ("none", "read", "write"), "dtype": ("float32", "float16", "bfloat16"),
        "io_dtype": ("float32", "float16", "bfloat16"), "block_size": ("none", "1", "2-7", "8-15", ">=16"),
        "mid_chunk": NO_YES, "index": ("1d", "1d-strided", "2d", "2d-strided"), "groups": ("1", "shared", "per-head"),
        "exact": NO_YES, "softplus": NO_YES, "dt_bias": NO_YES, "past_2gib": NO_YES, "past_2g_elements": NO_YES,
    }

    def strategy(self, profile, **options):
        from mambafuzz.strategies.ssm_prefill import ssm_prefill_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return ssm_prefill_cases(profile, **self._narrowing(options))

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        o = self.defaults(options)
        return {"pad": pad_option(self.name, o["pad"]),
                "block_multiple": int(one_of(self.name, BLOCK_MULTIPLE, o["block_multiple"])),
                "cache_mode": one_of(self.name, CACHE_MODE, o["cache_mode"]),
                "dt_bias": presence(self.name, HAS_DT_BIAS.name, o["has_dt_bias"])}

    def admits(self, case: SsmPrefillCase, options) -> bool:
        n = self._narrowing(options)
        return self.admits_cache(case, n) and allowed(case.has_dt_bias, n["dt_bias"])

    # ------------------------------------------------------------ memory
    def check(self, case: SsmPrefillCase) -> None:
        self.check_rows(case)

    def slot_fill(self, rng, n: int, case: SsmPrefillCase) -> np.ndarray:
        """Multiples of 1/4 in [-4, 4] as the pool's dtype (sums of the exact terms stay representable)."""
        return from_float64(rng.integers(-16, 17, n) / 4.0, case.dtype)

    def _inputs(self, case: SsmPrefillCase) -> dict[str, np.ndarray | None]:
        """Stored input elements from the seed: io dtype x [T, H, P], dt [T, H], B [T, G, N]; float32 A,
        dt_bias [H]."""
        rng = np.random.default_rng((case.seed, 11))
        total, h, p, n, g = sum(case.lens), case.heads, case.headdim, case.dstate, case.groups
        io = case.io_dtype

        def exact(values, dtype=io):
            return from_float64(np.asarray(values, dtype=np.float64), dtype)
        if case.exact:  # x, B in {-1, 0, 1}, dt' in {0, 1/4, 1/2}, A = 0: every term a multiple of 1/4
            x = exact(rng.integers(-1, 2, total * h * p))
            dt = exact(rng.integers(0, 2, total * h) / 4.0)
            Bm = exact(rng.integers(-1, 2, total * g * n))
            a = np.zeros(h, dtype=np.float32)
            bias = (rng.integers(0, 2, h) / 4.0).astype(np.float32) if case.has_dt_bias else None
        else:  # dt' in about [0.01, 0.2], A in [-1, -0.1]: a token decays the state by 0.1-20%
            x = finite_values(rng, total * h * p, io)
            if case.softplus:
                dt = exact(rng.uniform(-4.5, -2.0, total * h))
                bias = rng.uniform(0.0, 0.5, h).astype(np.float32) if case.has_dt_bias else None
            else:
                dt = exact(rng.uniform(0.01, 0.15, total * h))
                bias = rng.uniform(0.0, 0.05, h).astype(np.float32) if case.has_dt_bias else None
            Bm = finite_values(rng, total * g * n, io)
            a = -rng.uniform(0.1, 1.0, h).astype(np.float32)
        return {"x": x.reshape(total, h, p), "dt": dt.reshape(total, h), "B": Bm.reshape(total, g, n), "A": a,
                "dt_bias": bias}

    def prepare(self, case: SsmPrefillCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        used, starts = image.plan
        h, p, n = case.heads, case.headdim, case.dstate
        pool = exact_or_seeded_pool(case, snapshot, image.plan, (h, p, n), device)
        ins = self._inputs(case)
        idx = self._remapped(case, used, case.idx) if case.exact else [list(row) for row in case.idx]
        on = lambda values: oracle_input(values, device)
        try:
            got = expect_ssm_prefill(
                on(pool), on(padded_rows(case, ins["x"])), on(padded_rows(case, ins["dt"])),
                on(ins["A"].astype(np.float64)), on(padded_rows(case, ins["B"])), case.lens, idx, case.has_init,
                dt_bias=on(None if ins["dt_bias"] is None else ins["dt_bias"].astype(np.float64)),
                softplus=case.softplus, pad=case.pad, dtype=case.dtype, io_dtype=case.io_dtype,
                **self.columns(case))
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            if not case.exact:
                raise
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, used))})") from None
        got = as_tensors(got, "pool", "pool_tol")

        sdtype = getattr(torch, case.dtype)
        expected = snapshot.copy()
        outputs = []
        per_slot = case.slot_stride // case.elem
        if case.exact:
            stored = np.flatnonzero(got.stored)
            new = host_array(as_stored(got.pool[torch.as_tensor(stored, device=got.pool.device)], case.dtype))
            for k, raw in zip(stored, new):
                expected[starts[k]:starts[k] + case.slot_bytes] = raw.reshape(-1).view(np.uint8)
            flat = arena[case.offset:case.offset + case.slots * case.slot_stride].view(sdtype)
            state = flat.as_strided((case.slots, h, p, n), (per_slot, p * n, n, 1))
        else:  # a pool of its own: within the bound where a row stores, exactly (as stored) elsewhere
            state = pool
            what = "flat element {i} of ssm_state [S, H, P, N]"
            if bool(got.pool_tol.any()):
                outputs.append(Output("ssm_state", got.pool, atol=got.pool_tol, what=what))
            else:
                outputs.append(Output("ssm_state", as_stored(got.pool, case.dtype), what=what))

        args = self.in_order(self.row_args(case, device) | {
            "x": stored_tensor(ins["x"], case.io_dtype, device), "dt": stored_tensor(ins["dt"], case.io_dtype, device),
            "A": stored_tensor(ins["A"], "float32", device), "B": stored_tensor(ins["B"], case.io_dtype, device),
            "dt_bias": None if ins["dt_bias"] is None else stored_tensor(ins["dt_bias"], "float32", device),
            "ssm_state": state})
        kwargs = {"dt_softplus": case.softplus} | self.row_kwargs(case)
        outputs = tuple(outputs) + unchanged_inputs(args, UNCHANGED)
        return Prepared(args, kwargs, expected, outputs=outputs)

    # ------------------------------------------------------------ shrinking
    def plan(self, case: SsmPrefillCase):
        return plan_ssm_prefill(case.slots, case.lens, case.idx, case.has_init, pad=case.pad, **self.columns(case))

    def candidates(self, case: SsmPrefillCase) -> Iterator[SsmPrefillCase]:
        """Rows dropped; fewer tokens (half first; the last column following); prefix caching off; zeros for
        initial states; extras off; a smaller state; slots renumbered low."""
        yield from self._rows_and_tokens(case, halved=True)
        yield from self._cache_off(case)
        yield from self._no_initial_states(case)
        yield from extras_off(case, ({"perturb": None}, {"has_dt_bias": False}, {"softplus": False},
                                     {"idx_stride": case.cols}, {"idx_2d": case.cols > 1}, {"seed": 0}))
        yield from self._smaller_state(case)

    # ------------------------------------------------------------ coverage
    def features(self, case: SsmPrefillCase) -> dict[str, str]:
        """Per live row (tokens, a read slot): its chunk, the boundaries it crosses, its columns; "none"
        where no row had one."""
        seen, live = self.row_features(case, lambda n: "empty" if n == 0 else "short" if n < 16 else "long")
        seen["init_vs_last"] = ["same" if row[init] == row[last] else "differ"
                                for _, row, _, (init, _, last), _, _ in live] if case.apc else []
        starts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        mid = any(starts[b] % 16 != 0 and case.has_init[b] for b, *_ in live)
        out = {name: joined(labels or ["none"], self.buckets[name]) for name, labels in seen.items()}
        return out | self.table_features(case) | {
            "dtype": case.dtype, "io_dtype": case.io_dtype, "block_size": self.block_size_feature(case),
            "mid_chunk": "yes" if mid else "no",
            "groups": "1" if case.groups == 1 else "per-head" if case.groups == case.heads else "shared",
            "exact": "yes" if case.exact else "no", "softplus": "yes" if case.softplus else "no",
            "dt_bias": "yes" if case.has_dt_bias else "no",
        } | self.far_features(case, live, case.exact)

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        n = self._expected_narrowing(options)
        out = self.expected_rows()
        out["groups"] = ("1",)
        out["dt_bias"] = presence_buckets(n["dt_bias"])
        sizes = {1: ("1", "2-7", "8-15", ">=16"), 8: ("8-15", ">=16"), 16: (">=16",)}[n["block_multiple"]]
        return self.expected_cache(out, n["cache_mode"], sizes)


CONTRACT = SsmPrefill()

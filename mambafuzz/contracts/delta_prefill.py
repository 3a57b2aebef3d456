"""Contract `delta_prefill` (docs/contracts.md#delta_prefill): the gated-delta-rule prefill (GDN; KDA with a per-K
decay) of a batch of sequences, starting from states in a pool and storing the final state and, with prefix
caching, the state at every block boundary.

The target gets what an engine hands FLA's ``chunk_gated_delta_rule`` around its call (tokens packed:
``q``, ``k`` ``[T, H, K]``, ``v [T, HV, V]``, ``g``, ``beta``, ``cu_seqlens``), the pool itself
(``ssm_state``, updated in place: the gather through the table, the zeros where ``has_initial_state``
is false, the scatter of the final state), the block table (``ssm_state_indices``) and, with prefix
caching, vLLM's column arguments (``initial_state_idx``, ``block_idx_first_scheduled_token``,
``block_idx_last_scheduled_token``, ``num_computed_tokens``), and ``out [T, HV, V]`` to write.  The
pool is a tensor of its own, not arena bytes: compared as an ``Output`` within a per-element bound
(``oracle.delta_prefill``), exactly (bound 0) wherever a correct prefill stores nothing (every other
slot, the pad slot, the initial slot unless it is also a destination, everything when no final state
is asked for and no boundary is crossed); ``out`` likewise, except tokens of skipped sequences (pad, no
tokens), which are anything; every input exactly unchanged.  A write past a tensor is the CPU bounds
fence's (``oob``).  ``exact`` cases (values any order of fp32 math keeps exact: no decay, beta 0 or 1,
one-hot keys) keep the pool in the arena instead, compared byte for byte there (slot padding, guard bytes,
pools past 2 GiB, sparse past 256 MiB); ``out`` is still a tensor within the bound.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.cases.delta_prefill import LAYOUTS, DeltaPrefillCase
from mambafuzz.oracle.delta_prefill import expect_delta_prefill, plan_delta_prefill

from .base import Argument, Image, Output, Prepared, host_array
from .conv_prefill import CLI_OPTIONS as CONV_PREFILL_OPTIONS
from .delta_update import GATE, STATE_LAYOUT, TOKEN_ARGUMENTS, TOKEN_OPTIONS
from .features import COUNTS, NO_YES, joined
from .prefill import BLOCK_SIZE, PrefillContract, column_arguments
from .updates import (UPDATE_CLI_OPTIONS, allowed, as_stored, as_tensors, check_slot_pool, exact_or_seeded_pool,
                      extras_off, from_float64, one_of, oracle_input, pad_option, presence_buckets, slot_values,
                      state_output, stored_tensor, to_float64, unchanged_inputs)

# the inputs a prefill must leave exactly as they were
UNCHANGED = ("q", "k", "v", "g", "beta", "cu_seqlens", "ssm_state_indices", "has_initial_state",
             "initial_state_idx", "block_idx_first_scheduled_token", "block_idx_last_scheduled_token",
             "num_computed_tokens")
BLOCK_MULTIPLE, CACHE_MODE = CONV_PREFILL_OPTIONS[3], CONV_PREFILL_OPTIONS[4]  # the same meaning here


class DeltaPrefill(PrefillContract):
    name = "delta_prefill"
    case_type = DeltaPrefillCase
    summary = ("gated delta rule prefill (GDN / KDA): start from idx[n, init] (or zeros), scan the chunk, store "
               "the state at each block boundary crossed and the final one")
    arguments = (
        *TOKEN_ARGUMENTS,
        Argument("ssm_state", "float32, float16 or bfloat16", "[S, HV, V, K] or [S, HV, K, V]",
                 "the pool, updated in place (state_layout says which)"),
        Argument("cu_seqlens", "int32", "[N + 1]", "sequence n's tokens are cu[n]:cu[n+1] (0 allowed)"),
        Argument("ssm_state_indices", "int32", "[N] or [N, M] (row stride >= M)",
                 "sequence n's block table (slots); the pad value means none"),
        Argument("has_initial_state", "bool", "[N]", "sequence n starts from its initial slot's state (else zeros)"),
        *column_arguments("N", "state"),
        Argument("out", "act dtype", "[T, HV, V]", "the outputs to write (skipped sequences: anything)"),
    )
    options = (
        *TOKEN_OPTIONS,
        BLOCK_SIZE,
        Argument("output_final_state", "bool", "", "whether the final state is stored (False: no store of it)"),
        Argument("max_seqlen", "int", "", "the longest sequence's token count"),
    )
    cli_options = (UPDATE_CLI_OPTIONS[0], STATE_LAYOUT, GATE, BLOCK_MULTIPLE, CACHE_MODE)
    table_arg, starts_arg, row_noun = "ssm_state_indices", "cu_seqlens", "sequence"
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "cache_mode": ("none", "all"), "columns": ("none", "derived", "arbitrary"),
        "chunk": ("empty", "short", "one", "tail", "whole"), "boundaries": ("none", "0", "1", ">1"),
        "boundary_at_edge": NO_YES, "ends_on_boundary": NO_YES, "init_vs_last": ("none", "same", "differ"),
        "initial_state": ("none", "yes", "no"), "pads": ("none", "read", "write"), "final": NO_YES,
        "state_layout": ("vk", "kv"), "gate": ("head", "per-K"), "beta": ("head", "per-V"), "l2norm": NO_YES,
        "dtype": ("float32", "float16", "bfloat16"), "grouped": NO_YES, "dims": ("K=V", "K!=V"),
        "index": ("1d", "1d-strided", "2d", "2d-strided"), "exact": NO_YES, "past_2gib": NO_YES,
        "past_2g_elements": NO_YES,
    }

    def strategy(self, profile, **options):
        from mambafuzz.strategies.delta_prefill import delta_prefill_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return delta_prefill_cases(profile, **self._narrowing(options))

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        o = self.defaults(options)
        layout = one_of(self.name, STATE_LAYOUT, o["state_layout"])
        gate = one_of(self.name, GATE, o["gate"])
        return {"pad": pad_option(self.name, o["pad"]),
                "layouts": LAYOUTS if layout == "both" else (layout,),
                "kda": None if gate == "both" else gate == "kda",
                "block_multiple": int(one_of(self.name, BLOCK_MULTIPLE, o["block_multiple"])),
                "cache_mode": one_of(self.name, CACHE_MODE, o["cache_mode"])}

    def admits(self, case: DeltaPrefillCase, options) -> bool:
        n = self._narrowing(options)
        return self.admits_cache(case, n) and case.layout in n["layouts"] and allowed(case.kda, n["kda"])

    # ------------------------------------------------------------ memory
    def image(self, case: DeltaPrefillCase) -> Image:
        """Exact: the held slots in the arena (``slot_image``); else nothing (the pool is a tensor of its own,
        of at most 1 GiB, with no offset or padding)."""
        self.check_rows(case)
        if case.exact:
            check_slot_pool(case)
            if case.l2norm:
                raise oracle.OracleError("an exact case has no l2norm (its division is not exact)")
            return self.slot_image(case)
        if case.offset or case.slot_pad:
            raise oracle.OracleError("a pool of its own (not exact) has no offset and no slot padding")
        if case.slots * case.slot_bytes > 1 << 30:
            raise oracle.OracleError(f"the pool takes {case.slots * case.slot_bytes} bytes, more than 1 GiB")
        return Image()

    def pool_in_arena(self, case: DeltaPrefillCase) -> bool:
        return case.exact  # else the pool is a tensor of its own

    def slot_fill(self, rng, n: int, case: DeltaPrefillCase) -> np.ndarray:
        """Multiples of 1/4 in [-4, 4] as the pool's dtype (what an exact case's states hold)."""
        return from_float64(rng.integers(-16, 17, n) / 4.0, case.dtype)

    def stores_final(self, case: DeltaPrefillCase) -> bool:
        return case.final

    def _inner(self, case: DeltaPrefillCase) -> tuple[int, int, int]:
        """A slot's shape in the case's layout."""
        hv, kd, vd = case.value_heads, case.key_dim, case.value_dim
        return (hv, vd, kd) if case.layout == "vk" else (hv, kd, vd)

    def _values(self, case: DeltaPrefillCase, device: str, snapshot=None, plan=None):
        """Stored elements from the seed: the pool (a tensor on `device` in its layout; exact: the held slots
        [U, ...] from the arena's `snapshot`, ``plan`` ``slot_image``'s), q, k, v, g, beta (numpy).  Keys are
        drawn with |k| <= 1 (the contraction regime the bound assumes); exact: one-hot (+-1) or zero, g 0,
        beta 0 or 1, v multiples of 1/4 in [-4, 4], so every state a correct prefill forms is a pool or v
        value (or its negation), each sum exact."""
        rng = np.random.default_rng((case.seed, 29))
        hv, kd, vd = case.value_heads, case.key_dim, case.value_dim
        inner = self._inner(case)
        if case.exact:
            pool = exact_or_seeded_pool(case, snapshot, plan, inner, device)
        else:
            pool = slot_values(case.slots, inner, lambda n: rng.standard_normal(n, dtype=np.float32), case.dtype,
                               device)
        total = sum(case.lens)

        def act(values):
            return from_float64(np.asarray(values, dtype=np.float64), case.act_dtype)
        if case.exact:
            q = act(rng.integers(-4, 5, (total, case.heads, kd)) / 4.0)
            axis = rng.integers(-1, kd, (total, case.heads))  # -1: a zero key
            keys = np.zeros((total, case.heads, kd))
            t, h = np.nonzero(axis >= 0)
            keys[t, h, axis[t, h]] = rng.choice((-1.0, 1.0), t.size)
            v = act(rng.integers(-16, 17, (total, hv, vd)) / 4.0)
            g = act(np.zeros((total, hv, kd) if case.kda else (total, hv)))
            beta = act(rng.choice((0.0, 1.0, 1.0), (total, hv, vd) if case.beta_per_v else (total, hv)))
            return pool, q, act(keys), v, g, beta
        q = act(rng.standard_normal((total, case.heads, kd)))
        keys = rng.standard_normal((total, case.heads, kd)) / np.sqrt(kd)
        keys /= np.maximum(np.sqrt((keys * keys).sum(-1, keepdims=True)), 1.0)
        k = act(keys * 0.999)
        v = act(rng.standard_normal((total, hv, vd)))
        g = act(-rng.uniform(0.02, 1.0, (total, hv, kd) if case.kda else (total, hv)))
        beta = act(rng.uniform(0.05, 1.0, (total, hv, vd) if case.beta_per_v else (total, hv)))
        return pool, q, k, v, g, beta

    def prepare(self, case: DeltaPrefillCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        pool, q, k, v, g, beta = self._values(case, device, snapshot, image.plan)
        idx = self._remapped(case, image.plan[0], case.idx) if case.exact else case.idx
        cu = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        f64 = {name: oracle_input(to_float64(a, case.act_dtype), device)
               for name, a in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))}
        scale = case.key_dim ** -0.5
        vmajor = oracle_input(pool if case.layout == "vk" else pool.transpose(-1, -2), device)
        try:
            got = expect_delta_prefill(vmajor, f64["q"], f64["k"], f64["v"], f64["g"], f64["beta"], cu, idx,
                                       case.has_init, scale=scale, pad=case.pad, l2norm=case.l2norm,
                                       final=case.final, state_dtype=case.dtype, act_dtype=case.act_dtype,
                                       **self.columns(case))
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            if not case.exact:
                raise
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, image.plan[0]))})") from None
        got = as_tensors(got, "pool", "pool_bound", "out", "out_bound")
        expected = snapshot.copy()
        if case.exact:  # the held slots' new bytes into the image; the target gets the pool in the arena
            used, starts = image.plan
            values = got.pool if case.layout == "vk" else got.pool.transpose(-1, -2)
            for slot in got.stored:
                raw = host_array(as_stored(values[slot], case.dtype)).reshape(-1)
                expected[starts[slot]:starts[slot] + case.slot_bytes] = raw.view(np.uint8)
            inner = self._inner(case)
            flat = arena[case.offset:case.offset + case.slots * case.slot_stride].view(getattr(torch, case.dtype))
            pool = flat.as_strided((case.slots,) + inner, (case.slot_stride // case.elem, inner[1] * inner[2],
                                                           inner[2], 1))

        act = lambda raw: stored_tensor(raw, case.act_dtype, device)
        args = self.in_order(self.row_args(case, device) | {
            "q": act(q), "k": act(k), "v": act(v), "g": act(g), "beta": act(beta), "ssm_state": pool,
            "out": torch.full(v.shape, float("nan"), dtype=getattr(torch, case.act_dtype), device=device)})
        kwargs = {"scale": scale, "use_qk_l2norm_in_kernel": case.l2norm, "state_layout": case.layout,
                  "output_final_state": case.final, "max_seqlen": max(case.lens, default=0)} | self.row_kwargs(case)
        care = np.broadcast_to(got.care[:, None, None], tuple(got.out.shape)).copy()
        outputs = (Output("out", got.out, atol=got.out_bound, care=care, what="flat element {i} of out [T, HV, V]"),)
        if not case.exact:
            outputs = (state_output(case, "ssm_state", "S", got.pool, got.pool_bound),) + outputs
        return Prepared(args, kwargs, expected, outputs=outputs + unchanged_inputs(args, UNCHANGED))

    def locate(self, case: DeltaPrefillCase, offset: int) -> str:
        if not case.exact:
            return f"byte {offset} of the token arena (the pool is a tensor of its own)"
        slot, within = divmod(offset - case.offset, case.slot_stride)
        if offset < case.offset or not 0 <= slot < case.slots:
            return "outside the pool"
        if within >= case.slot_bytes:
            return f"slot {slot} padding byte {within - case.slot_bytes}"
        head, rest = divmod(within // case.elem, case.head_elems)
        _, rows, cols = self._inner(case)
        names = ("V", "K") if case.layout == "vk" else ("K", "V")
        return f"slot {slot} value head {head} {names[0]} {rest // cols} {names[1]} {rest % cols}"

    # ------------------------------------------------------------ shrinking
    def plan(self, case: DeltaPrefillCase):
        return plan_delta_prefill(case.slots, case.lens, case.idx, case.has_init, pad=case.pad, final=case.final,
                                  **self.columns(case))

    def candidates(self, case: DeltaPrefillCase) -> Iterator[DeltaPrefillCase]:
        """Half the tokens; rows dropped; fewer tokens (the last column following); prefix caching off; zeros
        for initial states; extras off; smaller heads; slots renumbered low."""
        if case.lens and max(case.lens) > 1:  # half the tokens first: every later candidate runs faster
            by = max(1, max(case.lens) // 2)
            yield self._shorter(case, range(len(case.lens)), lambda n: n - by)
        yield from self._rows_and_tokens(case)
        yield from self._cache_off(case, fewer_columns=False)
        yield from self._no_initial_states(case)
        yield from extras_off(case, ({"perturb": None}, {"kda": False}, {"beta_per_v": False}, {"l2norm": False},
                                     {"final": True}, {"idx_stride": case.cols}, {"idx_2d": case.cols > 1},
                                     {"slot_pad": 0}, {"offset": 0}, {"exact": False, "arena_size": 64},
                                     {"layout": "vk"}, {"dtype": "float32"}, {"act_dtype": "float32"}, {"group": 1},
                                     {"heads": 1}, {"seed": 0}))
        for dim in ("key_dim", "value_dim"):
            for size in sorted({4, getattr(case, dim) // 2}):
                if 1 <= size < getattr(case, dim):
                    yield dataclasses.replace(case, **{dim: size})
        if case.key_dim != case.value_dim:
            yield dataclasses.replace(case, value_dim=case.key_dim)
        yield from self._renumbered(case)

    # ------------------------------------------------------------ coverage
    def features(self, case: DeltaPrefillCase) -> dict[str, str]:
        """Per live row (tokens, a read slot): its length against the 16-token chunk, the boundaries it
        crosses and where, its columns; "none" where no row had one."""
        seen, live = self.row_features(case, lambda n: "empty" if n == 0 else "short" if n < 16 else "one"
                                       if n == 16 else "whole" if n % 16 == 0 else "tail")
        seen["init_vs_last"] = ["same" if init == last else "differ"
                                for _, _, _, (init, _, last), _, _ in live] if case.apc else []
        at_edge = any(o % 16 in (0, 1, 15) for *_, offsets, _ in live for o in offsets)
        ends_on = case.apc and any((case.computed[n] + length) % case.block_size == 0 for n, _, length, *_ in live)
        out = {name: joined(labels or ["none"], self.buckets[name]) for name, labels in seen.items()}
        return out | self.table_features(case) | {
            "boundary_at_edge": "yes" if at_edge else "no", "ends_on_boundary": "yes" if ends_on else "no",
            "final": "yes" if case.final else "no", "state_layout": case.layout,
            "gate": "per-K" if case.kda else "head", "beta": "per-V" if case.beta_per_v else "head",
            "l2norm": "yes" if case.l2norm else "no", "dtype": case.dtype, "grouped": "yes" if case.group > 1 else "no",
            "dims": "K=V" if case.key_dim == case.value_dim else "K!=V", "exact": "yes" if case.exact else "no",
        } | self.far_features(case, live, case.exact)

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        n = self._expected_narrowing(options)
        out = self.expected_rows()
        out["state_layout"] = n["layouts"]
        out["gate"] = presence_buckets(n["kda"], "head", "per-K")
        return self.expected_cache(out, n["cache_mode"], boundary_at_edge=("no",), ends_on_boundary=("no",))


CONTRACT = DeltaPrefill()

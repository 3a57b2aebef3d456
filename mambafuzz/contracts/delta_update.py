"""Contract `delta_update` (docs/contracts.md#delta_update): the gated delta rule (GDN; KDA with a per-K decay) of a
decode or spec-decode step, its state read from and stored to a pool through index arrays.

The target gets vLLM's ``fused_recurrent_gated_delta_rule`` arguments (tokens packed: ``q``, ``k``
``[T, H, K]``, ``v [T, HV, V]``, ``g``, ``beta``; ``initial_state`` the pool, updated in place;
``cu_seqlens``, ``ssm_state_indices``, ``num_accepted_tokens``), SGLang's per-step buffer
(``intermediate_states_buffer``, ``intermediate_state_indices``, ``cache_steps``) and ``out [T, HV, V]``
to write.  The pool and the buffer are tensors of their own, not arena bytes: their new values are
float math, so they are compared as ``Output``s within a per-element bound
(``oracle.delta_tolerance``), exactly (bound 0) wherever a correct step writes nothing (every other
slot, the pad slot, every buffer step not cached); ``out`` likewise, except tokens of skipped
sequences (pad, no tokens), which are anything; every input exactly unchanged.  A write past a
tensor is the CPU bounds fence's (``oob``).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.delta_update import LAYOUTS, DeltaUpdateCase
from mambafuzz.oracle.delta_update import expect_delta_update, plan_delta_update

from .base import Argument, CliOption, Image, Output, Prepared
from .features import COUNT_EDGES, COUNTS, NO_YES, bucket, joined
from .updates import (DRAWN, NONSPEC_TOKENS, PRESENCE, SPEC, UPDATE_CLI_OPTIONS, UpdateContract, allowed,
                      as_tensors, check_int32_indices, extras_off, from_float64, int_tensor, min_accepted_option,
                      nacc_buckets, one_of, oracle_input, pad_option, presence, presence_buckets, rows_dropped,
                      slot_values, state_output, stored_tensor, table_tensor, to_float64, unchanged_inputs)



# the inputs a step must leave exactly as they were
UNCHANGED = ("q", "k", "v", "g", "beta", "cu_seqlens", "ssm_state_indices", "num_accepted_tokens",
             "intermediate_state_indices")


# what an engine's delta-rule update may not take (vLLM's fused_recurrent_gated_delta_rule: one pool layout,
# a per-head gate (GDN), no per-step buffer; SGLang's update kernel: K-major pools, no spec decode)
STATE_LAYOUT = CliOption("state_layout", ("both",) + LAYOUTS, "both",
                         "the pool layouts your kernel takes: vk (V-major [.., V, K]), kv (K-major [.., K, V]), "
                         "or both")
GATE = CliOption("gate", ("both", "gdn", "kda"), "both",
                 "the decay your kernel takes: gdn (g per head, [T, HV]), kda (g per K, [T, HV, K]), or both")
STEP_BUFFER = CliOption("step_buffer", PRESENCE, DRAWN,
                        "the per-step buffer (intermediate_states_buffer given): drawn per case, always, or "
                        "never (vLLM's kernel has none)")

PAD_ROWS = CliOption("pad_rows", ("drawn", "never"), "drawn",
                     "sequences whose read slot or a store column is the pad value: drawn, or never (vLLM's "
                     "fused_recurrent_gated_delta_rule checks no pad: it would read and store slot -1)")


# what the delta-rule contracts (this one and delta_prefill) take alike: the packed tokens, q's scale, the
# l2 norm, the pool layout and the pad
TOKEN_ARGUMENTS = (
    Argument("q", "act dtype", "[T, H, K]", "queries, sequences packed"),
    Argument("k", "act dtype", "[T, H, K]", "keys"),
    Argument("v", "act dtype", "[T, HV, V]", "values; HV a multiple of H (head hv uses key head hv // (HV/H))"),
    Argument("g", "act dtype", "[T, HV] or [T, HV, K]", "log decay: per head (GDN) or per K (KDA)"),
    Argument("beta", "act dtype", "[T, HV] or [T, HV, V]", "per head, or per V"),
)
TOKEN_OPTIONS = (
    Argument("scale", "float", "", "q's scale (K ** -0.5)"),
    Argument("use_qk_l2norm_in_kernel", "bool", "", "l2-normalise q and k (x / sqrt(sum x^2 + 1e-6))"),
    Argument("state_layout", "str", "", "'vk' (V-major [.., V, K]) or 'kv' (K-major [.., K, V])"),
    Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
)


class DeltaUpdate(UpdateContract):
    name = "delta_update"
    case_type = DeltaUpdateCase
    summary = "gated delta rule step (GDN / KDA): read idx[n, max(nacc - 1, 0)], update per token, store"
    arguments = (
        *TOKEN_ARGUMENTS,
        Argument("initial_state", "float32, float16 or bfloat16", "[S, HV, V, K] or [S, HV, K, V]",
                 "the pool, updated in place (state_layout says which)"),
        Argument("cu_seqlens", "int32", "[N + 1]", "sequence n's tokens are cu[n]:cu[n+1]"),
        Argument("ssm_state_indices", "int32", "[N] or [N, C] (row stride >= C)",
                 "slots of sequence n; the pad value means none"),
        Argument("num_accepted_tokens", "int32 or None", "[N]",
                 "spec decode: read column max(nacc - 1, 0), store token t's state to column t"),
        Argument("intermediate_states_buffer", "state dtype or None", "[R, cache_steps, HV, V, K] (or K, V)",
                 "per-step states: token t of sequence n to [inter[n], t] for t < cache_steps"),
        Argument("intermediate_state_indices", "int32 or None", "[N]", "buffer row of sequence n; < 0: none"),
        Argument("out", "act dtype", "[T, HV, V]", "the outputs to write (skipped sequences: anything)"),
    )
    options = (
        *TOKEN_OPTIONS,
        Argument("cache_steps", "int", "", "the buffer's steps per row (0: no buffer)"),
        Argument("max_query_len", "int", "", "the longest sequence's token count"),
    )
    cli_options = UPDATE_CLI_OPTIONS + (STATE_LAYOUT, GATE, STEP_BUFFER, PAD_ROWS)
    buckets = {
        "rows": COUNTS, "spec": NO_YES, "nacc": ("none", "0", "1", ">1"), "pads": ("none", "read", "write"),
        "state_layout": ("vk", "kv"), "dims": ("K=V", "K!=V"), "dtype": ("float32", "float16", "bfloat16"),
        "gate": ("head", "per-K"), "beta": ("head", "per-V"), "l2norm": NO_YES, "grouped": NO_YES,
        "buffer": ("none", "enough", "short"), "index": ("1d", "2d", "2d-strided"), "empty_rows": NO_YES,
    }

    def strategy(self, profile, ill_posed: bool = False, **options):
        from mambafuzz.strategies.delta_update import delta_update_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return delta_update_cases(profile, ill_posed=ill_posed, **self._narrowing(options))

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        o = self.defaults(options)
        layout = one_of(self.name, STATE_LAYOUT, o["state_layout"])
        gate = one_of(self.name, GATE, o["gate"])
        return {"pad": pad_option(self.name, o["pad"]),
                "min_accepted": min_accepted_option(self.name, o["min_accepted"]),
                "layouts": LAYOUTS if layout == "both" else (layout,),
                "kda": None if gate == "both" else gate == "kda",
                "spec": presence(self.name, SPEC.name, o["spec"]),
                "buffer": presence(self.name, STEP_BUFFER.name, o["step_buffer"]),
                "one_token": one_of(self.name, NONSPEC_TOKENS, o["nonspec_tokens"]) == "1",
                "pad_rows": one_of(self.name, PAD_ROWS, o["pad_rows"]) == "drawn"}

    def admits(self, case: DeltaUpdateCase, options) -> bool:
        n = self._narrowing(options)
        spec = case.nacc is not None
        return (case.pad == n["pad"] and (not spec or min(case.nacc, default=1) >= n["min_accepted"])
                and case.layout in n["layouts"] and allowed(case.kda, n["kda"]) and allowed(spec, n["spec"])
                and allowed(case.inter_rows > 0, n["buffer"])
                and not (n["one_token"] and not spec and max(case.lens, default=0) > 1)
                and (n["pad_rows"] or all(v != case.pad for row in case.idx for v in row)))

    # ------------------------------------------------------------ memory
    def image(self, case: DeltaUpdateCase) -> Image:
        rows = len(case.lens)
        if len(case.idx) != rows or case.idx_stride < case.cols or (case.cols > 1 and not case.idx_2d):
            raise oracle.OracleError("idx needs one row per sequence, a row stride of at least its columns, "
                                     "and several columns need idx_2d")
        for name in ("nacc", "inter_idx"):
            if getattr(case, name) is not None and len(getattr(case, name)) != rows:
                raise oracle.OracleError(f"{name} has {len(getattr(case, name))} entries for {rows} sequences")
        check_int32_indices((case.idx,))
        if (case.inter_rows > 0) != (case.inter_idx is not None) or (case.inter_rows > 0) != (case.cache_steps > 0):
            raise oracle.OracleError("the per-step buffer needs rows, steps and intermediate_state_indices together")
        elems = case.slots * case.slot_bytes + case.inter_rows * case.cache_steps * case.slot_bytes
        if elems > 1 << 30:
            raise oracle.OracleError(f"the pool and buffer take {elems} bytes, more than 1 GiB")
        return Image()

    def pool_in_arena(self, case: DeltaUpdateCase) -> bool:
        return False  # the pool and the per-step buffer are tensors of their own

    def _values(self, case: DeltaUpdateCase, device: str):
        """Stored elements from the seed: the pool and buffer (tensors on `device`, each in its layout,
        ``slot_values``), q, k, v, g, beta (numpy)."""
        rng = np.random.default_rng((case.seed, 13))
        hv, kd, vd = case.value_heads, case.key_dim, case.value_dim
        inner = (hv, vd, kd) if case.layout == "vk" else (hv, kd, vd)
        draw = lambda n: rng.standard_normal(n, dtype=np.float32)
        pool = slot_values(case.slots, inner, draw, case.dtype, device)
        steps = (case.inter_rows, case.cache_steps)
        buf = slot_values(int(np.prod(steps)), inner, draw, case.dtype, device).reshape(steps + inner)
        total = sum(case.lens)

        def act(values):
            return from_float64(np.asarray(values, dtype=np.float64), case.act_dtype)
        q = act(rng.standard_normal((total, case.heads, kd)))
        k = act(rng.standard_normal((total, case.heads, kd)) / np.sqrt(kd))  # |k| ~ 1: the contraction regime
        v = act(rng.standard_normal((total, hv, vd)))
        g = act(-rng.uniform(0.02, 1.0, (total, hv, kd) if case.kda else (total, hv)))
        beta = act(rng.uniform(0.05, 1.0, (total, hv, vd) if case.beta_per_v else (total, hv)))
        return pool, buf, q, k, v, g, beta

    def _vmajor(self, case, values, device: str):
        """A pool or buffer tensor in its layout as the oracle's float64 V-major."""
        return oracle_input(values if case.layout == "vk" else values.transpose(-1, -2), device)

    def prepare(self, case: DeltaUpdateCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        pool, buf, q, k, v, g, beta = self._values(case, device)
        cu = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        f64 = {name: oracle_input(to_float64(a, case.act_dtype), device)
               for name, a in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))}
        scale = case.key_dim ** -0.5
        got = expect_delta_update(
            self._vmajor(case, pool, device), f64["q"], f64["k"], f64["v"], f64["g"], f64["beta"], cu, case.idx,
            scale=scale, nacc=case.nacc, pad=case.pad, l2norm=case.l2norm, state_dtype=case.dtype,
            out_dtype=case.act_dtype, buffer=self._vmajor(case, buf, device) if case.inter_rows else None,
            inter_idx=case.inter_idx, cache_steps=case.cache_steps)
        got = as_tensors(got, "pool", "pool_bound", "out", "out_bound", "buffer", "buffer_bound")

        ints = lambda values: int_tensor(values, device)
        act = lambda raw: stored_tensor(raw, case.act_dtype, device)
        args = {"q": act(q), "k": act(k), "v": act(v), "g": act(g), "beta": act(beta),
                "initial_state": pool, "cu_seqlens": ints(cu.tolist()),
                "ssm_state_indices": table_tensor(case, device),
                "num_accepted_tokens": ints(case.nacc),
                "intermediate_states_buffer": buf if case.inter_rows else None,
                "intermediate_state_indices": ints(case.inter_idx) if case.inter_rows else None,
                "out": torch.full(v.shape, float("nan"), dtype=getattr(torch, case.act_dtype), device=device)}
        kwargs = {"scale": scale, "use_qk_l2norm_in_kernel": case.l2norm, "state_layout": case.layout,
                  "pad_slot_id": case.pad, "cache_steps": case.cache_steps, "max_query_len": max(case.lens, default=0)}
        outputs = [state_output(case, "initial_state", "S", got.pool, got.pool_bound)]
        if case.inter_rows:
            outputs.append(state_output(case, "intermediate_states_buffer", "R, steps", got.buffer,
                                        got.buffer_bound))
        care = np.broadcast_to(got.care[:, None, None], tuple(got.out.shape)).copy()
        outputs.append(Output("out", got.out, atol=got.out_bound, care=care,
                              what="flat element {i} of out [T, HV, V]"))
        outputs = tuple(outputs) + unchanged_inputs(args, UNCHANGED)
        return Prepared(args, kwargs, snapshot.copy(), outputs=outputs)

    def locate(self, case: DeltaUpdateCase, offset: int) -> str:
        return f"byte {offset} of the token arena (the pool and buffer are tensors of their own)"

    # ------------------------------------------------------------ shrinking
    def plan(self, case: DeltaUpdateCase):
        return plan_delta_update(case.slots, case.lens, case.idx, nacc=case.nacc, pad=case.pad,
                                 inter_idx=case.inter_idx, inter_rows=case.inter_rows)

    def candidates(self, case: DeltaUpdateCase) -> Iterator[DeltaUpdateCase]:
        """Sequences dropped; fewer tokens; extras off; smaller heads; slots renumbered low."""
        r = dataclasses.replace
        yield from rows_dropped(case, ("lens", "idx", "nacc", "inter_idx"))
        if case.lens and max(case.lens) > 1:
            yield r(case, lens=tuple(max(0, n - 1) for n in case.lens))
        yield from extras_off(case, ({"perturb": None}, {"kda": False}, {"beta_per_v": False}, {"l2norm": False}, {"nacc": None},
                                     {"inter_rows": 0, "cache_steps": 0, "inter_idx": None}, {"idx_stride": case.cols},
                                     {"idx_2d": False}, {"layout": "vk"}, {"dtype": "float32"}, {"act_dtype": "float32"},
                                     {"group": 1}, {"heads": 1}, {"seed": 0}))
        for dim in ("key_dim", "value_dim"):
            for size in sorted({4, getattr(case, dim) // 2}):
                if 1 <= size < getattr(case, dim):
                    yield r(case, **{dim: size})
        if case.key_dim != case.value_dim:
            yield r(case, value_dim=case.key_dim)
        yield from self._renumbered(case)

    # ------------------------------------------------------------ coverage
    def features(self, case: DeltaUpdateCase) -> dict[str, str]:
        rows = len(case.lens)
        read = [row[max(case.nacc[n] - 1, 0) if case.nacc else 0] for n, row in enumerate(case.idx)]
        pads = ["read" if s == case.pad else "write" if case.pad in row[:max(case.lens[n], 1)] else "none"
                for n, (s, row) in enumerate(zip(read, case.idx))]
        nacc = ["none"] if case.nacc is None else ["0" if a == 0 else "1" if a == 1 else ">1" for a in case.nacc]
        buffer = ("none" if not case.inter_rows else
                  "short" if case.cache_steps < max(case.lens, default=0) else "enough")
        return {
            "rows": bucket(rows, COUNT_EDGES), "spec": "yes" if case.nacc is not None else "no",
            "nacc": joined(nacc, self.buckets["nacc"]), "pads": joined(pads or ["none"], self.buckets["pads"]),
            "state_layout": case.layout, "dims": "K=V" if case.key_dim == case.value_dim else "K!=V",
            "dtype": case.dtype, "gate": "per-K" if case.kda else "head", "beta": "per-V" if case.beta_per_v else "head",
            "l2norm": "yes" if case.l2norm else "no", "grouped": "yes" if case.group > 1 else "no",
            "buffer": buffer, "index": "1d" if not case.idx_2d else "2d-strided" if case.idx_stride > case.cols else "2d",
            "empty_rows": "yes" if 0 in case.lens else "no",
        }

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        n = self._expected_narrowing(options)
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3")
        out["spec"] = presence_buckets(n["spec"])
        out["nacc"] = nacc_buckets(n["spec"], n["min_accepted"])
        out["state_layout"] = n["layouts"]
        out["gate"] = presence_buckets(n["kda"], "head", "per-K")
        steps = ("enough", "short") if not (n["one_token"] and n["spec"] is False) else ("enough",)
        out["buffer"] = ("none",) + steps if n["buffer"] is None else steps if n["buffer"] else ("none",)
        if n["spec"] is False:  # a pad destination is a spec column's
            out["pads"] = ("none", "read")
        if not n["pad_rows"]:
            out["pads"] = ("none",)
        return out


CONTRACT = DeltaUpdate()

"""Contract `ssm_update` (docs/contracts.md#ssm_update): the Mamba2 selective state update of a decode or spec-decode
step.

The target gets vLLM's ``selective_state_update`` arguments as tensors:
``state [S, H, D, N]`` (the pool, slots maybe padded), ``x``, ``dt`` (``[B, H,
D]``, or ``[T, H, D]`` with ``cu_seqlens``), ``A [H, D, N]`` (maybe a per-head
value broadcast with strides (1, 0, 0)), ``B``, ``C`` (``[B|T, G, N]``), ``D``,
``z``, ``dt_bias`` or None, ``state_batch_indices`` and
``dst_state_batch_indices`` (int32 ``[B, C]`` views whose columns and rows may
be further apart than 1 and C; dst None: in place), ``num_accepted_tokens``,
``cu_seqlens``, and ``out`` shaped as x; options ``dt_softplus`` and
``pad_slot_id``.

Checked: every stored state within ``oracle.ssm_update``'s bound, every other
slot exactly unchanged (the pad slot included); ``out`` within its bound
except a skipped row's (pad or no tokens: vLLM writes it from a zero state,
the contract judges none of it); every input unchanged.  ``exact`` cases keep the pool
in the arena, byte for byte (padding, guard bytes, pools past 2 GiB, sparse
past 256 MiB): their values make fp32 math exact (A = 0 so exp(A dt) = 1, no
softplus, dt, x, B and the pool small multiples of 1/8 and 1/4).  Other cases
hand the pool over as its own tensor, an in-place output.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.pools import MAX_SPARSE_ARENA
from mambafuzz.cases.ssm_update import SsmUpdateCase
from mambafuzz.oracle.ssm_update import expect_ssm_update, plan_ssm_update

from .base import Argument, CliOption, Image, Output, Prepared, host_array
from .features import COUNT_EDGES, COUNTS, HUGE, NO_YES, bucket, joined
from .updates import (DRAWN, NONSPEC_TOKENS, PRESENCE, SPEC, UPDATE_CLI_OPTIONS, VARLEN, SsmPoolContract, allowed,
                      as_stored, as_tensors, check_int32_indices, exact_or_seeded_pool, extras_off, finite_values,
                      from_float64, min_accepted_option, nacc_buckets, one_of, oracle_input, pad_option, padded_rows,
                      presence, presence_buckets, rows_dropped, stored_tensor, to_float64, unchanged_inputs)



# the inputs a step must leave exactly as they were
UNCHANGED = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_batch_indices", "dst_state_batch_indices",
             "num_accepted_tokens", "cu_seqlens")


# what an engine's selective state update may not take (vLLM's: everything; SGLang's: no spec decode, no
# varlen batches, no dst table, and it needs D and dt_bias: it reads their strides unconditionally)
DST_INDICES = CliOption("dst_indices", PRESENCE, DRAWN,
                        "a separate dst_state_batch_indices table: drawn per case, always, or never (in place "
                        "only: SGLang's)")
HAS_Z = CliOption("has_z", PRESENCE, DRAWN, "the gate z given: drawn per case, always, or never")
HAS_D = CliOption("has_d", PRESENCE, DRAWN, "the skip connection D given: drawn per case, always (SGLang's "
                                            "kernel needs it), or never")
HAS_DT_BIAS = CliOption("has_dt_bias", PRESENCE, DRAWN, "dt_bias given: drawn per case, always (SGLang's "
                                                        "kernel needs it), or never")


class SsmUpdate(SsmPoolContract):
    name = "ssm_update"
    case_type = SsmUpdateCase
    summary = "Mamba2 selective state update: read src[b, nacc - 1], scan the tokens, store to dst[b, t]"
    arguments = (
        Argument("state", "float32, float16 or bfloat16", "[S, H, D, N] (slots strided)", "the pool, updated in place"),
        Argument("x", "io dtype", "[B, H, D] or [T, H, D]", "the step's tokens (varlen: packed)"),
        Argument("dt", "io dtype", "as x", "the time steps"),
        Argument("A", "float32", "[H, D, N] (maybe strides (1, 0, 0))", "the decay rates (negative)"),
        Argument("B", "io dtype", "[B, G, N] or [T, G, N]", "input projection per group (H a multiple of G)"),
        Argument("C", "io dtype", "as B", "output projection per group"),
        Argument("D", "float32 or None", "[H, D]", "skip connection"),
        Argument("z", "io dtype or None", "as x", "gate: out *= silu(z)"),
        Argument("dt_bias", "float32 or None", "[H, D]", "added to dt before the softplus"),
        Argument("state_batch_indices", "int32", "[B, C] (strided)", "the slots row b reads; the pad means none"),
        Argument("dst_state_batch_indices", "int32 or None", "[B, C] (strided)",
                 "the slots row b stores (token t to column t in spec decode); None: state_batch_indices"),
        Argument("num_accepted_tokens", "int32 or None", "[B]", "spec decode: read column max(nacc - 1, 0)"),
        Argument("cu_seqlens", "int32 or None", "[B + 1]", "varlen: row b's tokens are x[cu[b]:cu[b+1]]"),
        Argument("out", "io dtype", "as x", "the outputs to write (skipped rows: anything)"),
    )
    options = (
        Argument("dt_softplus", "bool", "", "dt = softplus(dt + dt_bias)"),
        Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
    )
    cli_options = UPDATE_CLI_OPTIONS + (VARLEN, DST_INDICES, HAS_Z, HAS_D, HAS_DT_BIAS)
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "spec": NO_YES, "nacc": ("none", "0", "1", ">1"), "pads": ("none", "read", "write"),
        "dtype": ("float32", "float16", "bfloat16"), "io_dtype": ("float32", "float16", "bfloat16"),
        "varlen": NO_YES, "empty_rows": NO_YES, "dst": ("in-place", "separate"),
        "index": ("contiguous", "col-strided", "row-strided"), "groups": ("1", "shared", "per-head"),
        "exact": NO_YES, "z": NO_YES, "softplus": NO_YES, "a_per_head": NO_YES, "past_2gib": NO_YES,
        "token_stride": ("unused", "adjacent", "strided"),
    }

    def strategy(self, profile, ill_posed: bool = False, **options):
        from mambafuzz.strategies.ssm_update import ssm_update_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return ssm_update_cases(profile, ill_posed=ill_posed, **self._narrowing(options))

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        o = self.defaults(options)
        return {"pad": pad_option(self.name, o["pad"]),
                "min_accepted": min_accepted_option(self.name, o["min_accepted"]),
                "spec": presence(self.name, SPEC.name, o["spec"]),
                "varlen": presence(self.name, VARLEN.name, o["varlen"]),
                "one_token": one_of(self.name, NONSPEC_TOKENS, o["nonspec_tokens"]) == "1",
                "dst": presence(self.name, DST_INDICES.name, o["dst_indices"]),
                "z": presence(self.name, HAS_Z.name, o["has_z"]),
                "d": presence(self.name, HAS_D.name, o["has_d"]),
                "dt_bias": presence(self.name, HAS_DT_BIAS.name, o["has_dt_bias"])}

    def admits(self, case: SsmUpdateCase, options) -> bool:
        n = self._narrowing(options)
        spec = case.nacc is not None
        return (case.pad == n["pad"] and (not spec or min(case.nacc, default=1) >= n["min_accepted"])
                and allowed(spec, n["spec"]) and allowed(case.varlen, n["varlen"])
                and allowed(case.dst is not None, n["dst"]) and allowed(case.has_z, n["z"])
                and allowed(case.has_d, n["d"]) and allowed(case.has_dt_bias, n["dt_bias"])
                and not (n["one_token"] and not spec and max(case.lens, default=0) > 1))

    # ------------------------------------------------------------ memory
    def check(self, case: SsmUpdateCase) -> None:
        rows = len(case.lens)
        if len(case.src) != rows or (case.dst is not None and (len(case.dst) != rows or
                                                                len(case.dst[0]) != case.cols)):
            raise oracle.OracleError("src and dst need one row per row of lens, with as many columns")
        if case.nacc is not None and len(case.nacc) != rows:
            raise oracle.OracleError(f"nacc has {len(case.nacc)} entries for {rows} rows")
        if case.idx_row_stride < (case.cols - 1) * case.idx_col_stride + 1:
            raise oracle.OracleError("the index rows must be at least (C - 1) * column stride + 1 apart")
        if not case.varlen and any(n != 1 for n in case.lens):
            raise oracle.OracleError("rows of a batch (not varlen) have one token each")
        check_int32_indices((case.src, case.dst))

    def slot_fill(self, rng, n: int, case: SsmUpdateCase) -> np.ndarray:
        """Multiples of 1/8 in [-4, 4] as the pool's dtype (a sum with the exact increments stays representable)."""
        return from_float64(rng.integers(-32, 33, n) / 8.0, case.dtype)

    def _inputs(self, case: SsmUpdateCase) -> dict[str, np.ndarray | None]:
        """Stored input elements from the seed: io dtype [T, ...] for x, dt, z, B, C; float32 A, D, dt_bias."""
        rng = np.random.default_rng((case.seed, 11))
        total, h, d, n, g = sum(case.lens), case.heads, case.dim, case.dstate, case.groups
        io = case.io_dtype

        def normal(count, dtype=io):
            return finite_values(rng, count, dtype)
        def exact(values, dtype=io):
            return from_float64(np.asarray(values, dtype=np.float64), dtype)
        if case.exact:  # x, B in {-1, 0, 1}, dt' in {0, 1/4, 1/2, 3/4}: every increment a multiple of 1/4
            x = exact(rng.integers(-1, 2, total * h * d))
            dt = exact(rng.integers(0, 3, total * h * d) / 4.0)
            Bm = exact(rng.integers(-1, 2, total * g * n))
            a = np.zeros(h if case.a_per_head else h * d * n, dtype=np.float32)
            bias = (rng.integers(0, 2, h * d) / 4.0).astype(np.float32) if case.has_dt_bias else None
        else:  # dt, dt_bias >= 0 and A < 0: exp(A dt') <= 1, the state stays of unit size
            x = normal(total * h * d)
            dt = from_float64(np.abs(to_float64(normal(total * h * d), io)) * 0.5, io)
            Bm = normal(total * g * n)
            a = -np.abs(normal(h if case.a_per_head else h * d * n, "float32"))
            bias = np.abs(normal(h * d, "float32")) * np.float32(0.5) if case.has_dt_bias else None
        return {"x": x.reshape(total, h, d), "dt": dt.reshape(total, h, d), "B": Bm.reshape(total, g, n),
                "C": normal(total * g * n).reshape(total, g, n), "A": a,
                "D": normal(h * d, "float32").reshape(h, d) if case.has_d else None,
                "z": normal(total * h * d).reshape(total, h, d) if case.has_z else None,
                "dt_bias": None if bias is None else bias.reshape(h, d)}

    def prepare(self, case: SsmUpdateCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        used, starts = image.plan
        h, d, n = case.heads, case.dim, case.dstate
        pool = exact_or_seeded_pool(case, snapshot, image.plan, (h, d, n), device)
        ins = self._inputs(case)
        a64 = ins["A"].astype(np.float64)
        a64 = np.broadcast_to(a64[:, None, None], (h, d, n)) if case.a_per_head else a64.reshape(h, d, n)
        src, dst = case.src, case.dst
        if case.exact:  # the oracle holds the used slots only (a pool maybe past 2 GiB), renumbered
            src, dst = self._remapped(case, used, src), self._remapped(case, used, dst)
        on = lambda values: oracle_input(values, device)
        try:
            got = expect_ssm_update(
                on(pool), on(padded_rows(case, ins["x"])), on(padded_rows(case, ins["dt"])), on(a64),
                on(padded_rows(case, ins["B"])), on(padded_rows(case, ins["C"])), case.lens, src, dst=dst,
                D=on(None if ins["D"] is None else ins["D"].astype(np.float64)), z=on(padded_rows(case, ins["z"])),
                dt_bias=on(None if ins["dt_bias"] is None else ins["dt_bias"].astype(np.float64)),
                softplus=case.softplus, nacc=case.nacc, pad=case.pad, dtype=case.dtype, io_dtype=case.io_dtype)
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            if not case.exact:
                raise
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, used))})") from None
        got = as_tensors(got, "pool", "pool_tol", "out", "out_tol")

        sdtype = getattr(torch, case.dtype)
        expected = snapshot.copy()
        outputs = []
        per_slot = case.slot_stride // case.elem
        shape, strides = (case.slots, h, d, n), (per_slot, d * n, n, 1)
        if case.exact:
            stored = np.flatnonzero(got.stored)
            new = host_array(as_stored(got.pool[torch.as_tensor(stored, device=device)], case.dtype))
            for k, raw in zip(stored, new):
                expected[starts[k]:starts[k] + case.slot_bytes] = raw.reshape(-1).view(np.uint8)
            flat = arena[case.offset:case.offset + case.slots * case.slot_stride].view(sdtype)
            state = flat.as_strided(shape, strides)
        else:  # a pool of its own: within the bound where a row stores, exactly (as stored) elsewhere
            state = pool
            what = "flat element {i} of state [S, H, D, N]"
            if bool(got.pool_tol.any()):
                outputs.append(Output("state", got.pool, atol=got.pool_tol, what=what))
            else:
                outputs.append(Output("state", as_stored(got.pool, case.dtype), what=what))

        rows = len(case.lens)
        def tokens(raw, dtype_name):
            if raw is None:
                return None
            t = stored_tensor(raw, dtype_name, device)
            return t if case.varlen else t.reshape((rows,) + tuple(raw.shape[1:]))
        x, dt, z = tokens(ins["x"], case.io_dtype), tokens(ins["dt"], case.io_dtype), tokens(ins["z"], case.io_dtype)
        Bt, Ct = tokens(ins["B"], case.io_dtype), tokens(ins["C"], case.io_dtype)
        A = stored_tensor(ins["A"], "float32", device)
        A = A.as_strided((h, d, n), (1, 0, 0)) if case.a_per_head else A.reshape(h, d, n)
        def ints(values):
            return None if values is None else torch.tensor(list(values), dtype=torch.int32, device=device)
        def floats(values):
            return None if values is None else stored_tensor(values, "float32", device)
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        out = torch.full_like(x, float("nan"))
        args = {"state": state, "x": x, "dt": dt, "A": A, "B": Bt, "C": Ct, "D": floats(ins["D"]), "z": z,
                "dt_bias": floats(ins["dt_bias"]), "state_batch_indices": self._index(case, case.src, device),
                "dst_state_batch_indices": None if case.dst is None else self._index(case, case.dst, device),
                "num_accepted_tokens": ints(case.nacc), "cu_seqlens": ints(cuts.tolist()) if case.varlen else None,
                "out": out}
        kwargs = {"dt_softplus": case.softplus, "pad_slot_id": case.pad}
        outputs.insert(0, self._out(case, got, cuts))
        outputs = tuple(outputs) + unchanged_inputs(args, UNCHANGED)
        return Prepared(args, kwargs, expected, outputs=outputs)

    def _index(self, case: SsmUpdateCase, table, device):
        """An int32 [B, C] view with the case's column and row strides over a pad-filled buffer."""
        import torch  # deferred: torch takes seconds to import

        rows = len(table)
        buf = np.full(rows * case.idx_row_stride, case.pad, dtype=np.int32)
        at = (np.arange(rows)[:, None] * case.idx_row_stride + np.arange(case.cols)[None, :] * case.idx_col_stride)
        buf[at.reshape(-1)] = np.asarray(table, dtype=np.int64).reshape(-1)
        base = torch.from_numpy(buf).to(device)
        return base.as_strided((rows, case.cols), (case.idx_row_stride, case.idx_col_stride))

    def _out(self, case: SsmUpdateCase, got, cuts) -> Output:
        """`out` shaped as x: live tokens' values and bounds; skipped rows' don't-care."""
        import torch  # deferred: torch takes seconds to import

        rows = len(case.lens)
        b = np.repeat(np.arange(rows), case.lens)
        t = np.arange(int(cuts[-1])) - cuts[b]
        at = (torch.as_tensor(b, device=got.out.device), torch.as_tensor(t, device=got.out.device))
        want, bound = got.out[at], got.out_tol[at]
        care = np.broadcast_to(got.out_care[b, t][:, None, None], tuple(want.shape)).copy()
        what = "flat element {i} of out" + (" [T, H, D]" if case.varlen else " [B, H, D]")
        return Output("out", want, atol=bound, what=what, care=care)

    # ------------------------------------------------------------ shrinking
    def plan(self, case: SsmUpdateCase):
        return plan_ssm_update(case.slots, case.lens, case.src, case.dst, case.nacc, case.pad)

    def candidates(self, case: SsmUpdateCase) -> Iterator[SsmUpdateCase]:
        """Rows dropped; fewer tokens; a smaller state; extras off; slots renumbered low."""
        r = dataclasses.replace
        yield from rows_dropped(case, ("lens", "src", "dst", "nacc"))
        if case.varlen and case.lens and max(case.lens) > 1:
            yield r(case, lens=tuple(max(0, k - 1) for k in case.lens))
        yield from extras_off(case, ({"perturb": None}, {"has_z": False}, {"has_d": False}, {"has_dt_bias": False},
                                     {"softplus": False}, {"a_per_head": False}, {"nacc": None}, {"dst": None},
                                     {"idx_col_stride": 1, "idx_row_stride": case.cols}, {"seed": 0}))
        if case.varlen and all(k == 1 for k in case.lens):
            yield r(case, varlen=False)
        yield from self._smaller_state(case)

    # ------------------------------------------------------------ coverage
    def features(self, case: SsmUpdateCase) -> dict[str, str]:
        from mambafuzz.strategies.ssm_update import late_columns  # deferred: Hypothesis loads with the first strategy, not with the parser

        rows = len(case.lens)
        spec = case.nacc is not None
        read_col = [max(a - 1, 0) for a in case.nacc] if spec else [0] * rows
        dst = case.dst if case.dst is not None else case.src
        pads = []
        for b in range(rows):
            if case.src[b][read_col[b]] == case.pad:
                pads.append("read")
            elif spec and case.pad in dst[b][:case.lens[b]]:
                pads.append("write")
            else:
                pads.append("none")
        nacc = ["none"] if not spec else ["0" if a == 0 else "1" if a == 1 else ">1" for a in case.nacc]
        top = max((v for t in self.index_tables(case) for row in t for v in row if v != case.pad), default=0)
        index = ("col-strided" if case.idx_col_stride > 1 else
                 "row-strided" if case.idx_row_stride > case.cols else "contiguous")
        return {
            "rows": bucket(rows, COUNT_EDGES), "spec": "yes" if spec else "no",
            "nacc": joined(nacc, self.buckets["nacc"]), "pads": joined(pads or ["none"], self.buckets["pads"]),
            "dtype": case.dtype, "io_dtype": case.io_dtype, "varlen": "yes" if case.varlen else "no",
            "empty_rows": "yes" if 0 in case.lens else "no",
            "dst": "separate" if case.dst is not None else "in-place", "index": index,
            "groups": "1" if case.groups == 1 else "per-head" if case.groups == case.heads else "shared",
            "exact": "yes" if case.exact else "no", "z": "yes" if case.has_z else "no",
            "softplus": "yes" if case.softplus else "no", "a_per_head": "yes" if case.a_per_head else "no",
            "past_2gib": "yes" if case.exact and case.offset + top * case.slot_stride >= HUGE else "no",
            # a row reads or stores an index column >= 1, the columns adjacent or not (SSM-TOKSTRIDE: strided)
            "token_stride": ("unused" if not late_columns(spec, case.lens, case.src, case.nacc or [0] * rows,
                                                          case.pad, case.cols)
                             else "strided" if case.idx_col_stride > 1 else "adjacent"),
        }

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        n = self._expected_narrowing(options)
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3")
        out["groups"] = ("1",)
        out["spec"] = presence_buckets(n["spec"])
        out["nacc"] = nacc_buckets(n["spec"], n["min_accepted"])
        out["varlen"] = presence_buckets(n["varlen"])
        out["empty_rows"] = NO_YES if n["varlen"] is not False else ("no",)
        out["dst"] = presence_buckets(n["dst"], "in-place", "separate")
        out["z"] = presence_buckets(n["z"])
        if n["spec"] is False:  # a pad destination is a spec column's
            out["pads"] = ("none", "read")
        if n["spec"] is False or n["varlen"] is False:  # a column >= 1 is a spec row's of several tokens
            out["token_stride"] = ("unused",)
        if n["varlen"] is False:  # one token a row: it accepts at most one
            out["nacc"] = tuple(b for b in out["nacc"] if b != ">1")
        return out


CONTRACT = SsmUpdate()

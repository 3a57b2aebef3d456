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

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.pools import DENSE_LIMIT, GUARD, MAX_SPARSE_ARENA
from mambafuzz.cases.ssm_prefill import SsmPrefillCase
from mambafuzz.errors import UsageError
from mambafuzz.oracle.ssm_prefill import boundary_offsets, derived_columns, expect_ssm_prefill, plan_ssm_prefill

from .base import Argument, CliOption, Contract, Image, Output, Prepared, host_array
from .features import COUNT_EDGES, COUNTS, HUGE, NO_YES, bucket, joined
from .updates import (DRAWN, PAD, PRESENCE, RAW, allowed, as_stored, as_tensors, finite_values, from_float64,
                      oracle_input, pad_option, presence, presence_buckets, rows_dropped, slot_values, stored_tensor,
                      to_float64, unchanged_inputs)

# the inputs a prefill must leave exactly as they were
UNCHANGED = ("x", "dt", "A", "B", "dt_bias", "cache_indices", "has_initial_state", "cu_seqlens", "initial_state_idx",
             "block_idx_first_scheduled_token", "block_idx_last_scheduled_token", "num_computed_tokens")
APC_COLUMNS = ("init", "first", "last", "computed")

BLOCK_MULTIPLE = CliOption("block_multiple", ("1", "8", "16"), "1",
                           "prefix caching's block size is drawn as a multiple of this (vLLM: a multiple of the "
                           "scan's chunk size)")
CACHE_MODE = CliOption("cache_mode", ("both", "none", "all"), "both",
                       "prefix caching your kernel takes: none (one slot a row, read and stored), all (vLLM's "
                       "mamba_cache_mode 'all': the block columns and every block boundary's state), or both")
HAS_DT_BIAS = CliOption("has_dt_bias", PRESENCE, DRAWN, "dt_bias given: drawn per case, always, or never")
CLI_OPTIONS = (PAD, BLOCK_MULTIPLE, CACHE_MODE, HAS_DT_BIAS)


def _choice(option: CliOption, value) -> str:
    if str(value) not in option.choices:
        raise UsageError(f"ssm_prefill option {option.name} must be one of {', '.join(option.choices)}, "
                         f"got {value!r}")
    return str(value)


class SsmPrefill(Contract):
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
        Argument("initial_state_idx", "int32 or None", "[B]", "prefix caching: the table column read"),
        Argument("block_idx_first_scheduled_token", "int32 or None", "[B]",
                 "prefix caching: the column of the first block boundary's state"),
        Argument("block_idx_last_scheduled_token", "int32 or None", "[B]",
                 "prefix caching: the column the final state goes to"),
        Argument("num_computed_tokens", "int32 or None", "[B]",
                 "prefix caching: tokens computed before the chunk (where its boundaries fall)"),
    )
    options = (
        Argument("dt_softplus", "bool", "", "dt = softplus(dt + dt_bias)"),
        Argument("pad_slot_id", "int", "", "the pad value (-1 or 0)"),
        Argument("block_size", "int", "", "prefix caching: tokens per block (0 without)"),
    )
    cli_options = CLI_OPTIONS
    max_arena = MAX_SPARSE_ARENA
    buckets = {
        "rows": COUNTS, "cache_mode": ("none", "all"), "columns": ("none", "derived", "arbitrary"),
        "chunk": ("empty", "short", "long"), "boundaries": ("none", "0", "1", ">1"),
        "init_vs_last": ("none", "same", "differ"), "initial_state": ("none", "yes", "no"),
        "pads": ("none", "read", "write"), "dtype": ("float32", "float16", "bfloat16"),
        "io_dtype": ("float32", "float16", "bfloat16"), "block_size": ("none", "1", "2-7", "8-15", ">=16"),
        "mid_chunk": NO_YES, "index": ("1d", "1d-strided", "2d", "2d-strided"), "groups": ("1", "shared", "per-head"),
        "exact": NO_YES, "softplus": NO_YES, "dt_bias": NO_YES, "past_2gib": NO_YES,
    }

    def strategy(self, profile, **options):
        from mambafuzz.strategies.ssm_prefill import ssm_prefill_cases  # deferred: Hypothesis loads with the first strategy, not with the parser
        return ssm_prefill_cases(profile, **self._narrowing(options))

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        o = self.defaults(options)
        return {"pad": pad_option(self.name, o["pad"]),
                "block_multiple": int(_choice(BLOCK_MULTIPLE, o["block_multiple"])),
                "cache_mode": _choice(CACHE_MODE, o["cache_mode"]),
                "dt_bias": presence(self.name, HAS_DT_BIAS.name, o["has_dt_bias"])}

    def admits(self, case: SsmPrefillCase, options) -> bool:
        n = self._narrowing(options)
        return (case.pad == n["pad"] and allowed(case.has_dt_bias, n["dt_bias"])
                and (not case.apc or case.block_size % n["block_multiple"] == 0)
                and n["cache_mode"] in ("both", "all" if case.apc else "none"))

    # ------------------------------------------------------------ memory
    def _used(self, case: SsmPrefillCase) -> np.ndarray:
        """The slots the oracle holds: every slot the table names, and slot 0."""
        named = {v for row in case.idx for v in row if 0 <= v < case.slots}
        return np.array(sorted(named | {0}), dtype=np.int64)

    def _check(self, case: SsmPrefillCase) -> None:
        if case.offset % case.elem or case.slot_stride % case.elem or case.slot_stride < case.slot_bytes:
            raise oracle.OracleError("the pool's offset and slot stride must be multiples of the element size, "
                                     "the stride at least a slot's bytes")
        if not case.exact and (case.offset or case.slot_stride != case.slot_bytes):
            raise oracle.OracleError("a pool of its own (not exact) has no offset and no slot padding")
        if not case.exact and case.slots * case.slot_bytes > 1 << 30:
            raise oracle.OracleError(f"a pool of its own takes {case.slots * case.slot_bytes} bytes, more than 1 GiB")
        if case.exact and case.softplus:
            raise oracle.OracleError("an exact case has no softplus")
        if case.heads % case.groups:
            raise oracle.OracleError(f"heads {case.heads} must be a multiple of groups {case.groups}")
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
        if case.cols > 1 and not case.idx_2d:
            raise oracle.OracleError("several table columns need idx_2d")
        end = case.offset + case.slots * case.slot_stride if case.exact else 1
        if end > case.arena_size:
            raise oracle.OracleError(f"the pool ends at byte {end}, past the arena's {case.arena_size}")

    def image(self, case: SsmPrefillCase) -> Image:
        self._check(case)
        used = self._used(case)
        if not case.exact:
            return Image(None, (used, None))
        if case.arena_size <= DENSE_LIMIT:
            return Image(None, (used, case.offset + used * case.slot_stride))
        window = min(case.slot_stride, case.slot_bytes + GUARD,
                     case.arena_size - case.offset - (case.slots - 1) * case.slot_stride)
        window -= window % case.elem
        starts = case.offset + used * case.slot_stride
        positions = (starts[:, None] + np.arange(window)[None, :]).reshape(-1)
        return Image(positions, (used, np.arange(len(used), dtype=np.int64) * window))

    @staticmethod
    def _quarters(rng, n: int, dtype: str) -> np.ndarray:
        """Multiples of 1/4 in [-4, 4] as `dtype` (sums of the exact terms stay representable)."""
        return from_float64(rng.integers(-16, 17, n) / 4.0, dtype)

    def fill(self, case: SsmPrefillCase, image: Image, snapshot: np.ndarray) -> None:
        if not case.exact:
            return
        used, starts = image.plan
        rng = np.random.default_rng((case.seed, 7))
        n = case.slot_bytes // case.elem
        for start in starts:  # every held slot: distinct values (a stale block is never zeros)
            snapshot[start:start + case.slot_bytes] = self._quarters(rng, n, case.dtype).view(np.uint8)

    def _pool(self, case: SsmPrefillCase, snapshot: np.ndarray, plan, device: str):
        """The pool the prefill starts from, stored elements on `device`: exact, the held slots [U, H, P, N]
        from the arena; else the whole pool [S, H, P, N] from the seed (``slot_values``)."""
        used, starts = plan
        inner = (case.heads, case.headdim, case.dstate)
        if case.exact:
            raw = np.stack([snapshot[s:s + case.slot_bytes].view(RAW[case.dtype]) for s in starts])
            return stored_tensor(raw.reshape((len(used),) + inner), case.dtype, device)
        rng = np.random.default_rng((case.seed, 7))
        draw = lambda n: rng.random(n, dtype=np.float32) * np.float32(4) - np.float32(2)  # uniform in [-2, 2)
        return slot_values(case.slots, inner, draw, case.dtype, device)

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

    def _remapped(self, case: SsmPrefillCase, used: np.ndarray):
        """Table rows with every held slot renumbered to its place in `used` (others kept: the oracle
        names them); the pad value is unchanged (slot 0 is always held at place 0)."""
        where = {int(s): k for k, s in enumerate(used)}
        return [[where.get(v, v) if v != case.pad else v for v in row] for row in case.idx]

    def _columns(self, case: SsmPrefillCase) -> dict:
        return {name: getattr(case, name) for name in APC_COLUMNS} | {"block_size": case.block_size}

    def _padded(self, case: SsmPrefillCase, values: np.ndarray) -> np.ndarray:
        """[T, ...] packed tokens as float64 [B, T_max, ...] (zeros past a row's end)."""
        v = to_float64(values, case.io_dtype)
        rows, tmax = len(case.lens), max(max(case.lens, default=0), 1)
        out = np.zeros((rows, tmax) + v.shape[1:])
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        b = np.repeat(np.arange(rows), case.lens)
        out[b, np.arange(len(v)) - cuts[b]] = v
        return out

    def prepare(self, case: SsmPrefillCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        import torch  # deferred: torch takes seconds to import

        used, starts = image.plan
        pool = self._pool(case, snapshot, image.plan, device)
        ins = self._inputs(case)
        idx = self._remapped(case, used) if case.exact else [list(row) for row in case.idx]
        on = lambda values: oracle_input(values, device)
        try:
            got = expect_ssm_prefill(
                on(pool), on(self._padded(case, ins["x"])), on(self._padded(case, ins["dt"])),
                on(ins["A"].astype(np.float64)), on(self._padded(case, ins["B"])), case.lens, idx, case.has_init,
                dt_bias=on(None if ins["dt_bias"] is None else ins["dt_bias"].astype(np.float64)),
                softplus=case.softplus, pad=case.pad, dtype=case.dtype, io_dtype=case.io_dtype,
                **self._columns(case))
        except oracle.OracleError as exc:  # name slots as the case does, not as the compact pool
            if not case.exact:
                raise
            raise oracle.OracleError(str(exc) + f" (slots as held: {list(map(int, used))})") from None
        got = as_tensors(got, "pool", "pool_tol")

        sdtype = getattr(torch, case.dtype)
        expected = snapshot.copy()
        outputs = []
        h, p, n = case.heads, case.headdim, case.dstate
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

        def ints(values):
            return None if values is None else torch.tensor(list(values), dtype=torch.int32, device=device)
        rows = len(case.lens)
        table = np.full((rows, case.idx_stride), case.pad, dtype=np.int32)
        table[:, :case.cols] = np.asarray(case.idx, dtype=np.int64).reshape(rows, case.cols)
        base = torch.from_numpy(table).to(device)
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        args = {"x": stored_tensor(ins["x"], case.io_dtype, device),
                "dt": stored_tensor(ins["dt"], case.io_dtype, device),
                "A": stored_tensor(ins["A"], "float32", device),
                "B": stored_tensor(ins["B"], case.io_dtype, device),
                "dt_bias": None if ins["dt_bias"] is None else stored_tensor(ins["dt_bias"], "float32", device),
                "ssm_state": state,
                "cache_indices": base[:, :case.cols] if case.idx_2d else base[:, 0],
                "has_initial_state": torch.tensor(list(case.has_init), dtype=torch.bool, device=device),
                "cu_seqlens": ints(cuts.tolist()), "initial_state_idx": ints(case.init),
                "block_idx_first_scheduled_token": ints(case.first),
                "block_idx_last_scheduled_token": ints(case.last), "num_computed_tokens": ints(case.computed)}
        kwargs = {"dt_softplus": case.softplus, "pad_slot_id": case.pad,
                  "block_size": case.block_size if case.apc else 0}
        outputs = tuple(outputs) + unchanged_inputs(args, UNCHANGED)
        return Prepared(args, kwargs, expected, outputs=outputs)

    def locate(self, case: SsmPrefillCase, offset: int) -> str:
        slot, within = divmod(offset - case.offset, case.slot_stride)
        if not case.exact or not 0 <= slot < case.slots or offset < case.offset:
            return "outside the pool"
        if within >= case.slot_bytes:
            return f"slot {slot} padding byte {within - case.slot_bytes}"
        head, rest = divmod(within // case.elem, case.headdim * case.dstate)
        return f"slot {slot} head {head} headdim {rest // case.dstate} dstate {rest % case.dstate}"

    # ------------------------------------------------------------ shrinking
    def valid(self, case: SsmPrefillCase) -> bool:
        try:
            self._check(case)
            plan_ssm_prefill(case.slots, case.lens, case.idx, case.has_init, pad=case.pad, **self._columns(case))
        except oracle.OracleError:
            return False
        return True

    def candidates(self, case: SsmPrefillCase) -> Iterator[SsmPrefillCase]:
        """Rows dropped; fewer tokens (the last column following); prefix caching off; zeros for initial
        states; extras off; a smaller state; slots renumbered low."""
        r = dataclasses.replace
        yield from rows_dropped(case, SsmPrefillCase.PER_ROW)
        if case.lens and max(case.lens) > 0:
            yield self._shorter(case, range(len(case.lens)), half=True)
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
        for extra in ({"perturb": None}, {"has_dt_bias": False}, {"softplus": False}, {"idx_stride": case.cols},
                      {"idx_2d": case.cols > 1}, {"seed": 0}):
            if any(getattr(case, k) != v for k, v in extra.items()):
                yield r(case, **extra)
        for field in ("heads", "headdim", "dstate"):
            value = getattr(case, field)
            for smaller in sorted({1, value // 2, value - 1}):
                if 1 <= smaller < value:
                    groups = case.groups if field != "heads" else (case.groups if smaller % case.groups == 0 else 1)
                    yield self._resized(case, **{field: smaller, "groups": groups})
        if case.groups > 1:
            yield r(case, groups=1)
        for name in ("dtype", "io_dtype"):
            if getattr(case, name) != "float32":
                yield self._resized(case, **{name: "float32"})
        if case.exact and (case.slot_stride > case.slot_bytes or case.offset):
            yield self._resized(case, padded=False)
        yield from self._renumbered(case)

    def _shorter(self, case: SsmPrefillCase, rows, half: bool = False) -> SsmPrefillCase:
        """One token fewer (or half as many) in `rows`, each one's last column moved to keep last - first
        the boundaries it crosses (prefix caching)."""
        lens, last = list(case.lens), list(case.last or ())
        for b in rows:
            if lens[b] > 0:
                lens[b] = lens[b] // 2 if half else lens[b] - 1
                if case.apc and lens[b] > 0:
                    last[b] = case.first[b] + len(boundary_offsets(case.computed[b], lens[b], case.block_size))
        return dataclasses.replace(case, lens=tuple(lens), last=tuple(last) if case.apc else None)

    def _fewer_columns(self, case: SsmPrefillCase) -> Iterator[SsmPrefillCase]:
        """The table cut to the columns rows use; column 0 dropped where no row uses it, every column and
        computed count moved down by one block (where each count is at least one block)."""
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

    def _resized(self, case: SsmPrefillCase, padded: bool = True, **changes) -> SsmPrefillCase:
        """`case` with `changes`, its slot stride and arena following (padding kept unless `padded` False)."""
        out = dataclasses.replace(case, **changes)
        if not case.exact:
            return dataclasses.replace(out, slot_stride=out.slot_bytes)
        pad_elems = (case.slot_stride - case.slot_bytes) // case.elem if padded else 0
        offset = (case.offset // case.elem) * out.elem if padded else 0
        stride = out.slot_bytes + pad_elems * out.elem
        return dataclasses.replace(out, slot_stride=stride, offset=offset,
                                   arena_size=offset + out.slots * stride + 64)

    def _renumbered(self, case: SsmPrefillCase) -> Iterator[SsmPrefillCase]:
        """The named slots renumbered 0.. (1.. under pad 0) in order, the pool cut to them."""
        named = sorted({v for row in case.idx for v in row if v != case.pad and 0 <= v < case.slots})
        first = 1 if case.pad == 0 else 0
        where = {s: first + k for k, s in enumerate(named)}
        slots = max(first + len(named), 1)
        if slots < case.slots:
            idx = tuple(tuple(where.get(v, v) for v in row) for row in case.idx)
            arena = case.offset + slots * case.slot_stride + 64 if case.exact else case.arena_size
            yield dataclasses.replace(case, idx=idx, slots=slots, arena_size=arena)

    # ------------------------------------------------------------ coverage
    def features(self, case: SsmPrefillCase) -> dict[str, str]:
        """Per live row (tokens, a read slot): its chunk, the boundaries it crosses, its columns; "none"
        where no row had one."""
        seen: dict[str, list[str]] = {name: [] for name in ("chunk", "boundaries", "init_vs_last", "initial_state",
                                                             "pads", "columns")}
        starts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        mid = False
        for b, (row, length) in enumerate(zip(case.idx, case.lens)):
            init, first, last = (case.init[b], case.first[b], case.last[b]) if case.apc else (0, 0, 0)
            seen["chunk"].append("empty" if length == 0 else "short" if length < 16 else "long")
            if row[init] == case.pad:
                seen["pads"].append("read")
                continue
            if length == 0:
                continue
            mid = mid or (starts[b] % 16 != 0 and case.has_init[b])
            seen["initial_state"].append("yes" if case.has_init[b] else "no")
            offsets = boundary_offsets(case.computed[b], length, case.block_size) if case.apc else []
            seen["boundaries"].append("0" if not offsets else "1" if len(offsets) == 1 else ">1")
            stores = [first + k for k in range(len(offsets))] + [last]
            seen["pads"].append("write" if any(row[c] == case.pad for c in stores) else "none")
            if case.apc:
                seen["init_vs_last"].append("same" if row[init] == row[last] else "differ")
                derived = derived_columns(case.computed[b], length, case.block_size)
                seen["columns"].append("derived" if derived == (init, first, last, case.has_init[b])
                                       else "arbitrary")
        top = max((v for row in case.idx for v in row if v != case.pad), default=0)
        bs = "none" if not case.apc else bucket(case.block_size, ((1, "1"), (2, "2-7"), (8, "8-15"), (16, ">=16")))
        out = {name: joined(labels or ["none"], self.buckets[name]) for name, labels in seen.items()}
        return out | {
            "rows": bucket(len(case.lens), COUNT_EDGES), "cache_mode": "all" if case.apc else "none",
            "dtype": case.dtype, "io_dtype": case.io_dtype, "block_size": bs, "mid_chunk": "yes" if mid else "no",
            "index": ("2d" if case.idx_2d else "1d") + ("-strided" if case.idx_stride > case.cols else ""),
            "groups": "1" if case.groups == 1 else "per-head" if case.groups == case.heads else "shared",
            "exact": "yes" if case.exact else "no", "softplus": "yes" if case.softplus else "no",
            "dt_bias": "yes" if case.has_dt_bias else "no",
            "past_2gib": "yes" if case.exact and case.offset + top * case.slot_stride >= HUGE else "no",
        }

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        try:
            n = self._narrowing(options)
        except UsageError:  # a run refuses such options before it draws; expect what the defaults draw
            n = self._narrowing({})
        out = dict(self.buckets)
        out["rows"] = ("1", "2-3")
        out["groups"] = ("1",)
        out["boundaries"], out["initial_state"] = ("0", "1", ">1"), ("yes", "no")  # "none": every row skipped
        out["dt_bias"] = presence_buckets(n["dt_bias"])
        mode = n["cache_mode"]
        if mode == "none":
            out.update(cache_mode=("none",), columns=("none",), block_size=("none",), boundaries=("0",),
                       init_vs_last=("none",), pads=("none", "read"))  # the one destination is the slot read
            return out
        sizes = {1: ("1", "2-7", "8-15", ">=16"), 8: ("8-15", ">=16"), 16: (">=16",)}[n["block_multiple"]]
        if mode == "all":
            out.update(cache_mode=("all",), columns=("derived", "arbitrary"), block_size=sizes,
                       init_vs_last=("same", "differ"), index=("2d", "2d-strided"))
        else:
            out["block_size"] = ("none",) + sizes
        return out


CONTRACT = SsmPrefill()

"""What every update contract (docs/contracts.md#update-rules) shares: stored floats to float64 and back, distinct
finite values to fill slots with, pools of distinct values at the cost of one slot (``slot_values``), tensors on the
case's device for the kernel and the oracle, the pad and min-accepted options, the one-row-fewer
shrink step, and ``UpdateContract``: the case code of a pool of slots (held slots, the arena image, index
tables renumbered, the pool resized, validity) on cases of ``cases.updates.UpdateCase``
(``ConvPoolContract``: what the conv contracts add; ``SsmPoolContract``: what the SSM ones add).  The
prefill contracts build on it too (``contracts/prefill.py``), so what a prefill shares with an update
(the index table's tensor, packed rows, delta-rule pools, shrink steps) lives here."""
from __future__ import annotations

import dataclasses

import numpy as np

from mambafuzz import oracle
from mambafuzz.cases.pools import DENSE_LIMIT, GUARD
from mambafuzz.errors import UsageError

from .base import CliOption, Contract, Image, Output

# A presence option: whether the cases carry an optional input (spec decode, varlen, a per-step buffer,
# z, ...): drawn per case (the default: everything is drawn), always, or never.
DRAWN, ALWAYS, NEVER = "drawn", "always", "never"
PRESENCE = (DRAWN, ALWAYS, NEVER)

# every update contract's CLI options: the engine's pad value (docs/contracts.md#pad), whether nacc can
# be 0, and what an engine's kernel may not take (defaults: everything is drawn)
PAD = CliOption("pad", ("-1", "0"), "-1", "the pad slot id your engine uses: -1 (SGLang, vLLM before "
                                           "2026-02) or 0 (vLLM's null block: slot 0 is never stored)")
MIN_ACCEPTED = CliOption("min_accepted", ("1", "0"), "1", "whether your engine can issue num_accepted_tokens = 0 "
                                                          "(0) or always at least 1")
SPEC = CliOption("spec", PRESENCE, DRAWN, "spec decode (num_accepted_tokens given): drawn per case, always, "
                                          "or never (a kernel without spec decode: SGLang's SSM and "
                                          "delta-rule update kernels)")
NONSPEC_TOKENS = CliOption("nonspec_tokens", ("any", "1"), "any",
                           "tokens per row without spec decode: any, or at most 1 (a decode-only kernel; vLLM's "
                           "delta rule stores token t's state to column t there)")
VARLEN = CliOption("varlen", PRESENCE, DRAWN, "varlen batches (tokens packed, query_start_loc or cu_seqlens "
                                              "given): drawn per case, always, or never (x is [B, ...]: "
                                              "SGLang's conv update)")
UPDATE_CLI_OPTIONS = (PAD, MIN_ACCEPTED, SPEC, NONSPEC_TOKENS)
RAW = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


def to_float64(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored elements (float32, float16, or bfloat16 as its uint16 bits) as float64."""
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def from_float64(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values that `dtype` holds exactly (copies of stored ones) back as stored elements."""
    if dtype == "bfloat16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(RAW[dtype])


def finite_values(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    """`n` normal values of unit size (so a wrong slot or column is a large error), stored as `dtype`."""
    values = rng.standard_normal(n).astype(np.float32)
    if dtype == "bfloat16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(RAW[dtype])


def stored_tensor(raw: np.ndarray, dtype: str, device):
    """Stored elements (bfloat16 as its uint16 bits) as a tensor of `dtype` on `device`."""
    import torch  # deferred: torch takes seconds to import

    t = torch.from_numpy(np.ascontiguousarray(raw).copy())
    return (t.view(torch.bfloat16) if dtype == "bfloat16" else t).to(device)


def oracle_input(values, device):
    """float64 values (numpy, or a tensor on `device`) as the oracle takes them there: numpy on the CPU
    (faster there than torch), a float64 tensor on a GPU, so that a 256-row batch is judged in
    milliseconds (``oracle/_xp.py``).  None stays None."""
    import torch  # deferred: torch takes seconds to import

    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        values = values.double()
        return values.numpy() if values.device.type == "cpu" else values
    values = np.ascontiguousarray(values, dtype=np.float64)
    return values if torch.device(device).type == "cpu" else torch.from_numpy(values).to(device)


def as_tensors(result, *fields: str):
    """`result` with its float arrays `fields` as torch tensors (numpy ones shared, not copied), so
    that the contract code after the oracle is the same on every device."""
    import torch  # deferred: torch takes seconds to import

    return dataclasses.replace(result, **{f: torch.from_numpy(getattr(result, f)) for f in fields
                                          if isinstance(getattr(result, f), np.ndarray)})


def as_stored(values, dtype: str):
    """float64 values a stored `dtype` holds exactly, as that dtype (bfloat16 as its int16 bits, as an
    exact ``Output`` compares it)."""
    import torch  # deferred: torch takes seconds to import

    t = values.to(getattr(torch, dtype))
    return t.view(torch.int16) if dtype == "bfloat16" else t


def slot_values(slots: int, inner: tuple[int, ...], draw, dtype: str, device):
    """A pool ``[slots, *inner]`` of `dtype` on `device`: one drawn tile plus a drawn offset per slot
    (``draw(n)``: n float32 values of unit size).  Every slot, head and element differs from every
    other, so a wrong one is an error of the values' own size, and drawing costs one slot, not the
    pool: a 256-row batch's pool is made on the GPU in microseconds.  The float32 sum and the cast
    round the same on every device."""
    import torch  # deferred: torch takes seconds to import

    tile = torch.from_numpy(draw(int(np.prod(inner)))).to(device).reshape(inner)
    offsets = torch.from_numpy(draw(slots)).to(device).reshape((slots,) + (1,) * len(inner))
    return (tile + offsets).to(getattr(torch, dtype))


def padded_rows(case, values):
    """[T, ...] packed tokens (stored ``case.io_dtype`` elements, rows of ``case.lens``) as float64
    [B, T_max, ...], zeros past a row's end: the scan oracles' layout.  None stays None."""
    if values is None:
        return None
    v = to_float64(values, case.io_dtype)
    rows, tmax = len(case.lens), max(max(case.lens, default=0), 1)
    out = np.zeros((rows, tmax) + v.shape[1:])
    cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
    b = np.repeat(np.arange(rows), case.lens)
    out[b, np.arange(len(v)) - cuts[b]] = v
    return out


def exact_or_seeded_pool(case, snapshot: np.ndarray, plan, inner: tuple[int, ...], device):
    """An SSM pool as the step starts from it, stored elements on `device`: ``exact``, the held slots
    [U, *inner] from the arena (``plan``: ``slot_image``'s); else the whole pool [S, *inner] from the seed,
    uniform in [-2, 2) (``slot_values``)."""
    used, starts = plan
    if case.exact:
        raw = np.stack([snapshot[s:s + case.slot_bytes].view(RAW[case.dtype]) for s in starts])
        return stored_tensor(raw.reshape((len(used),) + inner), case.dtype, device)
    rng = np.random.default_rng((case.seed, 7))
    draw = lambda n: rng.random(n, dtype=np.float32) * np.float32(4) - np.float32(2)  # uniform in [-2, 2)
    return slot_values(case.slots, inner, draw, case.dtype, device)


def state_output(case, name: str, lead: str, values, bound) -> Output:
    """A delta-rule pool or buffer (V-major values and bound) as the target holds it, in ``case.layout``:
    within `bound` where written; where nothing is, exactly (as stored elements when nothing is written at
    all: a bound of 0 everywhere is an exact Output, which compares bfloat16 as its bits).  `lead`: its
    leading dimensions' names."""
    dims = "HV, V, K" if case.layout == "vk" else "HV, K, V"
    what = f"flat element {{i}} of {name} [{lead}, {dims}]"
    if case.layout == "kv":
        values, bound = values.transpose(-1, -2), bound.transpose(-1, -2)
    if not bool(bound.any()):
        return Output(name, as_stored(values, case.dtype), what=what)
    return Output(name, values, atol=bound, what=what)


def unchanged_inputs(args: dict, names: tuple[str, ...]) -> tuple[Output, ...]:
    """Every input among `names` must stay as it was, exactly: its value now, kept on its device
    (a bfloat16 one as its bits, as an exact ``Output`` compares it)."""
    import torch  # deferred: torch takes seconds to import

    out = []
    for name in names:
        t = args[name]
        if isinstance(t, torch.Tensor):
            keep = t.detach().clone()
            keep = keep.view(torch.int16) if keep.dtype == torch.bfloat16 else keep
            out.append(Output(name, keep, what=f"{name} (an input) element {{i}}"))
    return tuple(out)


def pad_option(contract: str, value) -> int:
    """The pad value P (docs/contracts.md#pad: -1 or 0) from an option's text; UsageError in one line otherwise."""
    pad = int(value) if str(value).lstrip("-").isdigit() else None
    if pad not in (-1, 0):
        raise UsageError(f"{contract} option pad must be -1 or 0, got {value!r}")
    return pad


def min_accepted_option(contract: str, value) -> int:
    """Whether the engine can issue nacc = 0 (0) or not (1), from an option's text."""
    got = int(value) if str(value).isdigit() else None
    if got not in (0, 1):
        raise UsageError(f"{contract} option min_accepted must be 0 or 1, got {value!r}")
    return got


def presence(contract: str, name: str, value) -> bool | None:
    """A presence option's value: None (drawn per case), True (always), False (never); UsageError in one
    line for anything else."""
    text = str(value)
    if text not in PRESENCE:
        raise UsageError(f"{contract} option {name} must be one of {', '.join(PRESENCE)}, got {value!r}")
    return None if text == DRAWN else text == ALWAYS


def one_of(contract: str, option: CliOption, value) -> str:
    """A choice option's value as text; UsageError in one line when it is not one of its choices."""
    text = str(value)
    if text not in option.choices:
        raise UsageError(f"{contract} option {option.name} must be one of {', '.join(option.choices)}, "
                         f"got {value!r}")
    return text


def allowed(value, wanted: bool | None) -> bool:
    """Whether a case whose input is present (`value`) fits a presence option (None: drawn, anything fits)."""
    return wanted is None or bool(value) == wanted


def presence_buckets(wanted: bool | None, absent: str = "no", present: str = "yes") -> tuple[str, ...]:
    """The coverage buckets a presence option leaves to draw."""
    return (absent, present) if wanted is None else (present,) if wanted else (absent,)


def nacc_buckets(spec: bool | None, min_accepted: int) -> tuple[str, ...]:
    """The nacc buckets a run draws reliably: 'none' without spec, counts with it (0 under min_accepted 0)."""
    counts = ("1", ">1") + (("0",) if min_accepted == 0 else ())
    return ("none",) if spec is False else counts if spec else ("none",) + counts


def rows_dropped(case, fields: tuple[str, ...]):
    """The cases with one row fewer (a shrink step): row i cut from each per-row field in `fields` (None
    stays None); none for a one-row case."""
    rows = len(getattr(case, fields[0]))
    if rows < 2:
        return
    for i in range(rows):
        cut = {f: None if getattr(case, f) is None else getattr(case, f)[:i] + getattr(case, f)[i + 1:]
               for f in fields}
        yield dataclasses.replace(case, **cut)


def extras_off(case, extras):
    """The cases with each of `extras` (a dict of field values: an optional input off, a default layout)
    where `case` differs from it: one shrink step each."""
    for extra in extras:
        if any(getattr(case, k) != v for k, v in extra.items()):
            yield dataclasses.replace(case, **extra)


def int_tensor(values, device):
    """int32 values as a tensor on `device` (None stays None): counts and columns a target takes."""
    import torch  # deferred: torch takes seconds to import

    return None if values is None else torch.tensor(list(values), dtype=torch.int32, device=device)


def table_tensor(case, device):
    """The case's ``idx`` table as the target takes it: a [B, C] view of a pad-filled int32 buffer of rows
    ``idx_stride`` apart, or (``idx_2d`` False) its column 0, [B]."""
    import torch  # deferred: torch takes seconds to import

    rows = len(case.lens)
    table = np.full((rows, case.idx_stride), case.pad, dtype=np.int32)
    table[:, :case.cols] = np.asarray(case.idx, dtype=np.int64).reshape(rows, case.cols)
    base = torch.from_numpy(table).to(device)
    return base[:, :case.cols] if case.idx_2d else base[:, 0]


def check_int32_indices(tables) -> None:
    """OracleError unless every value of the index tables (None: absent) fits int32."""
    if any(not -(1 << 31) <= v < (1 << 31) for t in tables if t is not None for row in t for v in row):
        raise oracle.OracleError("index values are int32")


def check_slot_pool(case) -> None:
    """OracleError unless the pool at ``case.offset`` (slots ``case.slot_stride`` bytes apart) is aligned to its
    elements, its stride holds a slot, and it ends inside the arena."""
    if case.offset % case.elem or case.slot_stride % case.elem or case.slot_stride < case.slot_bytes:
        raise oracle.OracleError("the pool's offset and slot stride must be multiples of the element size, "
                                 "the stride at least a slot's bytes")
    end = case.offset + case.slots * case.slot_stride
    if end > case.arena_size:
        raise oracle.OracleError(f"the pool ends at byte {end}, past the arena's {case.arena_size}")


class UpdateContract(Contract):
    """The case code the update contracts share, over cases on ``UpdateCase`` (index tables ``INDEX_FIELDS``,
    a pool of ``slots`` slots; in the arena at ``offset``, ``slot_stride`` bytes apart, when
    ``pool_in_arena``).  A contract keeps what is its own: its checks in ``image``, ``plan`` (the oracle's
    plan, raising ``OracleError`` for an ill-posed case), ``prepare``, its candidates, its coverage."""

    def pool_in_arena(self, case) -> bool:
        """Whether the pool lives in the arena (compared there byte for byte; shrinking cuts the arena with
        it).  Else it is a tensor of its own, ``slot_bytes`` apart."""
        return True

    def plan(self, case):
        """The oracle's plan of `case` (OracleError for an ill-posed one); what ``valid`` asks besides ``image``."""
        raise NotImplementedError

    def _narrowing(self, options: dict) -> dict:
        """The options as the strategy takes them (UsageError in one line for a bad value)."""
        raise NotImplementedError

    def _expected_narrowing(self, options: dict) -> dict:
        """``_narrowing`` for ``expected_features``: a run refuses bad options before it draws, so expect
        what the defaults draw."""
        try:
            return self._narrowing(options)
        except UsageError:
            return self._narrowing({})

    def valid(self, case) -> bool:
        try:
            self.image(case)
            self.plan(case)
        except oracle.OracleError:
            return False
        return True

    def index_tables(self, case) -> tuple:
        """The case's index tables that are given."""
        return tuple(t for t in (getattr(case, f) for f in case.INDEX_FIELDS) if t is not None)

    def _used(self, case) -> np.ndarray:
        """The slots the image holds: every slot an index names, and slot 0."""
        named = {v for t in self.index_tables(case) for row in t for v in row if 0 <= v < case.slots}
        return np.array(sorted(named | {0}), dtype=np.int64)

    def slot_image(self, case) -> Image:
        """The held slots (``_used``) and where each starts in the image (plan ``(used, starts)``; starts None
        for a pool of its own): the arena itself up to DENSE_LIMIT, else each held slot's window (its
        bytes and GUARD bytes of padding, whole elements) one after another."""
        used = self._used(case)
        if not self.pool_in_arena(case):
            return Image(None, (used, None))
        if case.arena_size <= DENSE_LIMIT:
            return Image(None, (used, case.offset + used * case.slot_stride))
        window = min(case.slot_stride, case.slot_bytes + GUARD,
                     case.arena_size - case.offset - (case.slots - 1) * case.slot_stride)
        window -= window % case.elem
        starts = case.offset + used * case.slot_stride
        positions = (starts[:, None] + np.arange(window)[None, :]).reshape(-1)
        return Image(positions, (used, np.arange(len(used), dtype=np.int64) * window))

    def fill(self, case, image: Image, snapshot: np.ndarray) -> None:
        """Every held slot in the arena: distinct finite values, none zero (a stale block is never zeros)."""
        if not self.pool_in_arena(case):
            return
        used, starts = image.plan
        rng = np.random.default_rng((case.seed, 7))
        n = case.slot_bytes // case.elem
        for start in starts:
            snapshot[start:start + case.slot_bytes] = self.slot_fill(rng, n, case).view(np.uint8)

    def slot_fill(self, rng: np.random.Generator, n: int, case) -> np.ndarray:
        """One held slot's `n` stored elements (``fill``)."""
        return finite_values(rng, n, case.dtype)

    def _remapped(self, case, used: np.ndarray, table):
        """Index rows with every held slot renumbered to its place in `used` (others kept: the oracle names
        them); the pad value is unchanged (slot 0 is always held at place 0).  None stays None."""
        if table is None:
            return None
        where = {int(s): k for k, s in enumerate(used)}
        return [[where.get(v, v) if v != case.pad else v for v in row] for row in table]

    def _resized(self, case, padded: bool = True, **changes):
        """`case` with `changes`, its slot stride and arena following (padding kept unless `padded` False)."""
        out = dataclasses.replace(case, **changes)
        if not self.pool_in_arena(case):
            return dataclasses.replace(out, slot_stride=out.slot_bytes)
        pad_elems = (case.slot_stride - case.slot_bytes) // case.elem if padded else 0
        offset = (case.offset // case.elem) * out.elem if padded else 0
        stride = out.slot_bytes + pad_elems * out.elem
        return dataclasses.replace(out, slot_stride=stride, offset=offset,
                                   arena_size=offset + out.slots * stride + 64)

    def _renumbered(self, case):
        """The named slots renumbered low in order, the pool (and the arena, when the pool is in it) cut to
        them: packed from 0 (1 under pad 0), then with at most one unnamed slot below each (a kernel that
        reads a slot's neighbour still finds one), then with every gap halved (a failure that needs a high
        slot number)."""
        named = sorted({v for t in self.index_tables(case) for row in t for v in row
                        if v != case.pad and 0 <= v < case.slots})
        first = 1 if case.pad == 0 else 0
        for shrink in (lambda gap: 0, lambda gap: min(gap, 1), lambda gap: gap // 2):
            where, old, new = {}, first - 1, first - 1
            for s in named:  # `gap` unnamed slots between s and the named slot below it (or the first slot)
                new += 1 + shrink(s - old - 1)
                where[s], old = new, s
            slots = max(new + 1, 1)
            changes = {f: None if getattr(case, f) is None else tuple(tuple(where.get(v, v) for v in row)
                                                                      for row in getattr(case, f))
                       for f in case.INDEX_FIELDS}
            if slots >= case.slots and all(changes[f] == getattr(case, f) for f in case.INDEX_FIELDS):
                continue
            if self.pool_in_arena(case):
                changes["arena_size"] = min(case.arena_size, case.offset + slots * case.slot_stride + 64)
            yield dataclasses.replace(case, slots=slots, **changes)


class ConvPoolContract(UpdateContract):
    """What the causal-conv contracts (``conv_update``, ``conv_prefill``) share on top: a pool of
    ``[slots, dim, state_len]`` elements, ``layout`` ``dim`` (token rows of ``dim`` channels) or ``token`` (each
    channel's tokens together), and seeded ``x``, ``weight``, ``bias``."""

    def _pool(self, case, snapshot: np.ndarray, starts) -> np.ndarray:
        """The held slots' states as float64 [U, dim, SL]."""
        raw = np.stack([snapshot[s:s + case.slot_bytes].view(RAW[case.dtype]) for s in starts])
        if case.layout == "dim":
            values = raw.reshape(len(starts), case.state_len, case.dim).transpose(0, 2, 1)
        else:
            values = raw.reshape(len(starts), case.dim, case.state_len)
        return to_float64(values, case.dtype)

    def _store(self, case, expected: np.ndarray, start: int, state: np.ndarray) -> None:
        raw = from_float64(state.T if case.layout == "dim" else state, case.dtype)
        expected[start:start + case.slot_bytes] = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)

    def _oracle_values(self, case, snapshot: np.ndarray, starts):
        """What the conv oracles take, float64: the held slots' states, each row's tokens [dim, L], the weight
        and the bias (None without); then the stored x, weight and bias (``_inputs``) and the rows' starts."""
        pool = self._pool(case, snapshot, starts)
        x_raw, w_raw, b_raw = self._inputs(case)
        x64 = to_float64(x_raw, case.dtype)
        cuts = np.concatenate([[0], np.cumsum(case.lens)]).astype(np.int64)
        x_rows = [x64[cuts[b]:cuts[b + 1]].T for b in range(len(case.lens))]
        bias = None if b_raw is None else to_float64(b_raw, case.dtype)
        return pool, x_rows, to_float64(w_raw, case.dtype), bias, (x_raw, w_raw, b_raw), cuts

    def _expected(self, case, snapshot: np.ndarray, starts, pool: np.ndarray, stored) -> np.ndarray:
        """The snapshot with the oracle's new states of the held slots `stored` (places in ``starts``)."""
        expected = snapshot.copy()
        for k in sorted(stored):
            self._store(case, expected, int(starts[k]), pool[k])
        return expected

    def _tensors(self, case, arena, w_raw, b_raw, device):
        """The pool as the target sees it (a [slots, dim, SL] view of the arena in the case's layout), the
        weight and the bias (None without)."""
        import torch  # deferred: torch takes seconds to import

        flat = arena[case.offset:case.offset + case.slots * case.slot_stride].view(getattr(torch, case.dtype))
        per_slot = case.slot_stride // case.elem
        strides = (per_slot, 1, case.dim) if case.layout == "dim" else (per_slot, case.state_len, 1)
        conv_state = flat.as_strided((case.slots, case.dim, case.state_len), strides)
        weight = stored_tensor(w_raw.reshape(case.dim, case.width), case.dtype, device)
        return conv_state, weight, None if b_raw is None else stored_tensor(b_raw, case.dtype, device)

    def _narrower(self, case):
        """Shrink steps: fewer channels (1, half, one fewer), float32, no slot padding or offset; the slots
        renumbered low."""
        for dim in sorted({1, case.dim // 2, case.dim - 1}):
            if 1 <= dim < case.dim:
                yield self._resized(case, dim=dim)
        if case.dtype != "float32":
            yield self._resized(case, dtype="float32")
        if case.slot_stride > case.slot_bytes or case.offset:
            yield self._resized(case, padded=False)
        yield from self._renumbered(case)

    def _inputs(self, case):
        """x ([T, dim], the rows' tokens one after another), weight, bias as stored elements, from the seed."""
        rng = np.random.default_rng((case.seed, 11))
        total = sum(case.lens)
        x = finite_values(rng, total * case.dim, case.dtype).reshape(total, case.dim)
        weight = finite_values(rng, case.dim * case.width, case.dtype).reshape(case.dim, case.width)
        bias = finite_values(rng, case.dim, case.dtype) if case.bias else None
        return x, weight, bias

    def locate(self, case, offset: int) -> str:
        slot, within = divmod(offset - case.offset, case.slot_stride)
        if not 0 <= slot < case.slots or offset < case.offset:
            return "outside the pool"
        if within >= case.slot_bytes:
            return f"slot {slot} padding byte {within - case.slot_bytes}"
        elem = within // case.elem
        first, second = divmod(elem, case.dim if case.layout == "dim" else case.state_len)
        dim, col = (second, first) if case.layout == "dim" else (first, second)
        return f"slot {slot} channel {dim} column {col}"


class SsmPoolContract(UpdateContract):
    """What the SSM contracts (``ssm_update``, ``ssm_prefill``) share on top: a pool of ``[slots, heads,
    <head_rows>, dstate]`` elements that lives in the arena only in ``exact`` cases (values any order of fp32
    math keeps exact: compared byte for byte), else a tensor of its own compared within the bound; its
    checks, ``image`` and ``locate``.  A contract names the field of a head's rows (``head_rows``) and
    declares ``check`` (its own geometry's)."""

    head_rows = "dim"

    def check(self, case) -> None:
        raise NotImplementedError

    def check_pool(self, case) -> None:
        """OracleError unless the pool fits: in the arena (exact), else a pool of its own of at most 1 GiB
        with no offset or padding; no softplus in an exact case; heads a multiple of groups."""
        if case.exact:
            check_slot_pool(case)
        elif case.offset or case.slot_stride != case.slot_bytes:
            raise oracle.OracleError("a pool of its own (not exact) has no offset and no slot padding")
        elif case.slots * case.slot_bytes > 1 << 30:
            raise oracle.OracleError(f"a pool of its own takes {case.slots * case.slot_bytes} bytes, more than 1 GiB")
        if case.exact and case.softplus:
            raise oracle.OracleError("an exact case has no softplus")
        if case.heads % case.groups:
            raise oracle.OracleError(f"heads {case.heads} must be a multiple of groups {case.groups}")

    def image(self, case) -> Image:
        self.check_pool(case)
        self.check(case)
        return self.slot_image(case)

    def pool_in_arena(self, case) -> bool:
        return case.exact  # else the pool is a tensor of its own, compared within the bound

    def _smaller_state(self, case):
        """Shrink steps: a smaller state (heads, a head's rows, dstate: 1, half, one fewer; groups following),
        one group, float32 state and io, no slot padding; the slots renumbered low."""
        for field in ("heads", self.head_rows, "dstate"):
            value = getattr(case, field)
            for smaller in sorted({1, value // 2, value - 1}):
                if 1 <= smaller < value:
                    groups = case.groups if field != "heads" else (case.groups if smaller % case.groups == 0 else 1)
                    yield self._resized(case, **{field: smaller, "groups": groups})
        if case.groups > 1:
            yield dataclasses.replace(case, groups=1)
        for name in ("dtype", "io_dtype"):
            if getattr(case, name) != "float32":
                yield self._resized(case, **{name: "float32"})
        if case.exact and (case.slot_stride > case.slot_bytes or case.offset):
            yield self._resized(case, padded=False)
        yield from self._renumbered(case)

    def locate(self, case, offset: int) -> str:
        slot, within = divmod(offset - case.offset, case.slot_stride)
        if not case.exact or not 0 <= slot < case.slots or offset < case.offset:
            return "outside the pool"
        if within >= case.slot_bytes:
            return f"slot {slot} padding byte {within - case.slot_bytes}"
        head, rest = divmod(within // case.elem, getattr(case, self.head_rows) * case.dstate)
        return f"slot {slot} head {head} {self.head_rows} {rest // case.dstate} dstate {rest % case.dstate}"

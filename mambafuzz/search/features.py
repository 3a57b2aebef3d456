"""What each example exercised, as named buckets: the run's case-space coverage.

"0 findings" says nothing if the strategies never drew a right overlap, an
aliased block, a shift of 1 or a pool past 2 GiB.  ``features(case, verdict)``
turns one example into ``{feature: bucket label}`` (overlap kind, shift and
size buckets, aliasing, alignment, element size, layout, padding, pool past
2 GiB, the perturbation, repetitions, the verdict).  The fuzz loop hands them
to Hypothesis (``hypothesis.event``, so they land in ``--observe`` records as
Tyche's "features") and counts them per target in a ``Tally``, which also
bins repetitions and failing repetitions into the GPU race map (shift x size x
warps x delay) and keeps examples over time.  ``expected_features`` is what a
contract's strategy draws under the run's profile and options: a bucket in it
that a run never drew is warned about.

A feature whose example touches several rows, requests or buffers gets every
label it saw, joined by "," in the order of its bucket list ("none,left").
Counting splits them again: the table counts examples that drew each label.
The race map needs one (shift, size) per example: the tightest overlap's (the
smallest shift, the racy one), or "none" and the largest piece when nothing
overlaps.
"""
from __future__ import annotations

import textwrap
from typing import Any, Callable

SEP = ","
HUGE = 1 << 31  # a byte at or past 2 GiB: where 32-bit address arithmetic wraps

SHIFT_EDGES = ((0, "0"), (1, "1"), (2, "2-3"), (4, "4-7"), (8, "8-15"), (16, "16-63"), (64, "64-255"),
               (256, "256-1023"), (1024, ">=1K"))
SIZE_EDGES = ((0, "0"), (1, "1-7"), (8, "8-63"), (64, "64-511"), (512, "512-4095"), (4096, "4K-32K"),
              (32768, ">=32K"))
REPS_EDGES = ((0, "0"), (1, "1"), (2, "2-9"), (10, "10-99"), (100, "100-999"), (1000, ">=1000"))
COUNT_EDGES = ((0, "0"), (1, "1"), (2, "2-3"), (4, "4-15"), (16, ">=16"))
ALIGNS = ("1", "2", "4", "8", ">=16")
SCHEDULES = {0: "off", 1: "low-warps-slow", 2: "high-warps-slow", 3: "random"}  # kernels/perturb.py's numbers
POSITIONS = {1: "before-load", 2: "load-store"}

# Every feature and its buckets in display order (labels never hold SEP).
BUCKETS: dict[str, tuple[str, ...]] = {
    "overlap": ("none", "left", "right", "same"),
    "shift": ("none",) + tuple(label for _, label in SHIFT_EDGES),
    "size": tuple(label for _, label in SIZE_EDGES),
    "aliasing": ("none", "same", "shared"),
    "chains": ("none", "self", "chain", "swap", "cycle"),
    "src_align": ALIGNS,
    "dst_align": ALIGNS,
    "elem": ("1", "2", "4", "8"),
    "layout": ("sd", "ds", "temporal", "layer-major", "slot-major"),
    "padding": ("none", "block", "row", "slot", "layer"),
    "past_2gib": ("no", "yes"),
    "past_2gib_by": ("none", "layer", "slot", "block", "element"),
    "rows": tuple(label for _, label in COUNT_EDGES),
    "zero_size": ("no", "yes"),
    "tiles": tuple(label for _, label in COUNT_EDGES),
    "decision": ("no-copy", "copy", "self-skip"),
    "fanout": tuple(label for _, label in COUNT_EDGES),
    "index_dtype": ("int32", "int64"),
    "perturb": ("none", "warps-only", "delay"),
    "schedule": ("none",) + tuple(SCHEDULES.values()),
    "position": ("none",) + tuple(POSITIONS.values()),
    "num_warps": ("default", "1", "2", "4", "8", "16"),
    "delay_ns": ("0", "500", "2000", "8000"),
    "reps": tuple(label for _, label in REPS_EDGES),
    "verdict": ("pass", "mismatch", "race", "oob", "exception", "compile", "fault", "crash", "hang"),
}
RACE_AXES = ("shift", "size", "num_warps", "delay_ns")
# the race map's (shift, size) of an example ride along with its features under these names (not counted,
# not sent to Hypothesis)
RACE_SHIFT, RACE_SIZE = "_race_shift", "_race_size"


def bucket(value: int, edges) -> str:
    """The label of the last edge at or below `value`."""
    label = edges[0][1]
    for low, name in edges:
        if value >= low:
            label = name
    return label


def align_label(offset: int) -> str:
    """The largest power of two dividing an arena offset (the arena itself is 64-byte aligned), 16 and up as one."""
    for a, label in ((16, ">=16"), (8, "8"), (4, "4"), (2, "2")):
        if offset % a == 0:
            return label
    return "1"


def joined(feature: str, labels) -> str:
    """Several labels of one feature as one, in bucket order."""
    seen = set(labels)
    order = BUCKETS.get(feature, ())
    known = [label for label in order if label in seen]
    return SEP.join(known + sorted(seen - set(order)))


def labels_of(value: str) -> list[str]:
    return value.split(SEP) if value else []


# ---------------------------------------------------------------- per contract
def _shift_size(pieces) -> dict[str, str]:
    """The "shift" and "size" features of every piece (a row, a state of a request, a slot), and the
    race map's one (shift, size): the tightest overlap's (a self-copy only when nothing else overlaps),
    or "none" and the largest piece when nothing overlaps.  `pieces` are (overlaps, shift bytes, bytes)."""
    shifts = [bucket(shift, SHIFT_EDGES) if over else "none" for over, shift, _ in pieces]
    sizes = [bucket(size, SIZE_EDGES) for _, _, size in pieces]
    overlapping = sorted((shift == 0, shift, -size) for over, shift, size in pieces if over)
    if overlapping:
        _, shift, size = overlapping[0]
        race = (bucket(shift, SHIFT_EDGES), bucket(-size, SIZE_EDGES))
    else:
        race = ("none", bucket(max((size for _, _, size in pieces), default=0), SIZE_EDGES))
    return {"shift": joined("shift", shifts or ["none"]), "size": joined("size", sizes or ["0"]),
            RACE_SHIFT: race[0], RACE_SIZE: race[1]}


def batch_features(case) -> dict[str, str]:
    kinds, pieces, src_al, dst_al = [], [], [], []
    for s, d, n in case.copies:
        if s == d:
            kind = "same"
        elif n > 0 and abs(s - d) < n:
            kind = "left" if d < s else "right"
        else:
            kind = "none"
        kinds.append(kind)
        pieces.append((kind != "none", abs(s - d), n))
        src_al.append(align_label(s))
        dst_al.append(align_label(d))
    return {"overlap": joined("overlap", kinds), **_shift_size(pieces),
            "src_align": joined("src_align", src_al), "dst_align": joined("dst_align", dst_al),
            "rows": bucket(len(case.copies), COUNT_EDGES),
            "zero_size": "yes" if any(n == 0 for _, _, n in case.copies) else "no"}


def _pool_requests(case) -> list[tuple[int, int, int, int]]:
    """(request, src_col, dst_col, bias) of every request that copies."""
    if case.contract == "postprocess":
        from mambafuzz.oracle import decide

        d = decide(case.num_computed, case.num_scheduled, case.num_draft, case.num_accepted, case.state_idx,
                   case.block_size)
        return [(r, int(d.src_col[r]), int(d.dst_col[r]), int(d.bias[r])) for r in range(len(d)) if d.do_copy[r]]
    return [(r, s, d, b) for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases))]


def _pool_copy(pool, table_row, src_col, dst_col, bias):
    """(overlap kind, shift bytes, bytes moved, src offset, dst offset) of one state of one request, or None
    when a column is outside the table (the oracle rejects such a case)."""
    cols = len(table_row)
    read_col = src_col + (0 if pool.is_conv else bias)
    if not (0 <= read_col < cols and 0 <= dst_col < cols):
        return None
    src_block, dst_block = table_row[read_col], table_row[dst_col]
    src = pool.offset + src_block * pool.block_stride
    dst = pool.offset + dst_block * pool.block_stride
    if not pool.is_conv:
        return ("same" if src_block == dst_block else "none"), 0, pool.data_bytes, src, dst
    kept = max(0, pool.state_len - bias)
    rows = pool.dim if pool.kind == "conv_ds" else 1
    moved = kept * pool.token_bytes * rows
    shift = bias * pool.token_bytes
    if src_block != dst_block or kept == 0:
        kind = "none"
    else:
        kind = "left" if bias else "same"
    return kind, shift, moved, src + shift, dst


def _pool_align(pool, offset: int) -> str:
    """Alignment of every row a copy touches (DS rows are row_stride apart)."""
    if pool.kind == "conv_ds" and pool.dim > 1:
        return align_label(offset | pool.row_stride_eff)
    return align_label(offset)


_KIND_LABEL = {"conv_sd": "sd", "conv_ds": "ds", "temporal": "temporal"}


def pool_features(case) -> dict[str, str]:
    kinds, pieces, src_al, dst_al, aliasing = [], [], [], [], set()
    tables = case.block_tables
    for r, src_col, dst_col, bias in _pool_requests(case):
        for pool in case.pools:
            if not 0 <= pool.group < len(tables) or r >= len(tables[pool.group]):
                continue
            got = _pool_copy(pool, tables[pool.group][r], src_col, dst_col, bias)
            if got is None:
                continue
            kind, shift, moved, src, dst = got
            kinds.append(kind)
            pieces.append((kind != "none", shift, moved))
            src_al.append(_pool_align(pool, src))
            dst_al.append(_pool_align(pool, dst))
            if kind != "none":
                aliasing.add("same")
    for table in tables:  # a physical block in two requests' rows (prefix caching)
        owners: dict[int, int] = {}
        for r, row in enumerate(table):
            for b in set(row):
                if owners.setdefault(b, r) != r:
                    aliasing.add("shared")
    padding = set()
    for p in case.pools:
        if p.block_stride > p.data_bytes:
            padding.add("block")
        if p.kind == "conv_ds" and p.row_stride_eff > p.state_len * p.elem_size:
            padding.add("row")
    out = {"overlap": joined("overlap", kinds or ["none"]), **_shift_size(pieces),
           "aliasing": joined("aliasing", aliasing or ["none"]),
           "src_align": joined("src_align", src_al), "dst_align": joined("dst_align", dst_al),
           "elem": joined("elem", [str(p.elem_size) for p in case.pools]),
           "layout": joined("layout", [_KIND_LABEL.get(p.kind, p.kind) for p in case.pools]),
           "padding": joined("padding", padding or ["none"]),
           "past_2gib": "yes" if _pools_past_2gib(case) else "no",
           "past_2gib_by": joined("past_2gib_by", _pool_terms(case)),
           "tiles": bucket(case.num_tiles, COUNT_EDGES)}
    if case.contract == "postprocess":
        from mambafuzz.oracle import decide

        d = decide(case.num_computed, case.num_scheduled, case.num_draft, case.num_accepted, case.state_idx,
                   case.block_size)
        out["decision"] = joined("decision", ["self-skip" if d.self_copy_skip[r] else "copy" if d.do_copy[r]
                                              else "no-copy" for r in range(len(d))])
    return out


def _pool_terms(case) -> list[str]:
    """Which address term of a block some copying request reads or writes reaches 2 GiB: block (block
    id x block stride), element (the block's offset below 2 GiB, one of its elements' at or past it)."""
    terms = set()
    tables = case.block_tables
    for r, src_col, dst_col, bias in _pool_requests(case):
        for pool in case.pools:
            if not 0 <= pool.group < len(tables) or r >= len(tables[pool.group]):
                continue
            row = tables[pool.group][r]
            for col in (src_col, src_col + (0 if pool.is_conv else bias), dst_col):
                if not 0 <= col < len(row):
                    continue
                start = row[col] * pool.block_stride
                if start >= HUGE:
                    terms.add("block")
                elif start + pool.data_bytes - pool.elem_size >= HUGE:
                    terms.add("element")
    return sorted(terms) or ["none"]


def _pools_past_2gib(case) -> bool:
    """Whether a block some table names starts at or past 2 GiB."""
    for pool in case.pools:
        if pool.group < len(case.block_tables):
            top = max((b for row in case.block_tables[pool.group] for b in row), default=0)
            if pool.offset + top * pool.block_stride >= HUGE:
                return True
    return False


def _chain_labels(src, children) -> list[str]:
    """Per pair: self (copies a slot onto itself), chain (reads another pair's destination), none; plus
    swap / cycle for each cycle of pairs (a slot graph src -> dst that comes back)."""
    written = {}
    for i, row in enumerate(children):
        for d in row:
            written.setdefault(d, i)
    labels = []
    for i, (s, row) in enumerate(zip(src, children)):
        if s in row:
            labels.append("self")
        elif s in written and written[s] != i:
            labels.append("chain")
        else:
            labels.append("none")
    # pair i -> pair j when j reads a slot i writes; a cycle through k >= 2 pairs is a swap (2) or cycle
    reads = {}
    for j, s in enumerate(src):
        reads.setdefault(s, []).append(j)
    succ = {i: {j for d in row for j in reads.get(d, ()) if j != i} for i, row in enumerate(children)}
    for start in range(len(src)):
        length = _cycle_through(start, succ)
        if length == 2:
            labels.append("swap")
        elif length > 2:
            labels.append("cycle")
    return labels


def _cycle_through(start: int, succ: dict) -> int:
    """Length of the shortest cycle of pairs through `start` (0: none), breadth-first."""
    depth = {start: 0}
    frontier = [start]
    while frontier:
        nxt = []
        for i in frontier:
            for j in succ.get(i, ()):
                if j == start:
                    return depth[i] + 1
                if j not in depth:
                    depth[j] = depth[i] + 1
                    nxt.append(j)
        frontier = nxt
    return 0


def _slot_align(buf, slot: int) -> str:
    offset = buf.offset + slot * buf.slot_stride
    if buf.layers > 1:
        offset |= buf.layer_stride
    return align_label(offset)


def _slot_terms(buf, top: int) -> list[str]:
    """Which address term of a copied element of `buf` (named slots up to `top`) reaches 2 GiB: layer
    (layer x layer stride), slot (slot x slot stride), element (its whole offset from the buffer's
    base, when neither term alone does)."""
    layer, slot = (buf.layers - 1) * buf.layer_stride, top * buf.slot_stride
    terms = [name for name, offset in (("layer", layer), ("slot", slot)) if offset >= HUGE]
    if not terms and layer + slot + buf.slot_bytes - buf.elem_size >= HUGE:
        terms.append("element")
    return terms


def slot_features(case) -> dict[str, str]:
    src, children = case.src_idx, case.children
    chains = _chain_labels(src, children)
    padding, layout, src_al, dst_al = set(), [], [], []
    past, terms = False, []
    named = set(src) | {d for row in children for d in row}
    for buf in case.buffers:
        major = "layer-major" if buf.layer_major else "slot-major"
        layout.append(major)
        if major == "layer-major":
            slot_min, layer_min = buf.slot_bytes, buf.slots * buf.slot_stride
        else:
            slot_min, layer_min = buf.layers * buf.layer_stride, buf.slot_bytes
        if buf.slot_stride > slot_min:
            padding.add("slot")
        if buf.layer_stride > layer_min:
            padding.add("layer")
        src_al += [_slot_align(buf, s) for s in src]
        dst_al += [_slot_align(buf, d) for row in children for d in row]
        if named:
            top = max(named)
            past |= buf.offset + (buf.layers - 1) * buf.layer_stride + top * buf.slot_stride + buf.slot_bytes > HUGE
            terms += _slot_terms(buf, top)
    pieces = [(s in row, 0, b.slot_bytes) for s, row in zip(src, children) for b in case.buffers]
    out = {"overlap": joined("overlap", ["same" if over else "none" for over, _, _ in pieces] or ["none"]),
           **_shift_size(pieces), "chains": joined("chains", chains), "src_align": joined("src_align", src_al),
           "dst_align": joined("dst_align", dst_al),
           "elem": joined("elem", [str(b.elem_size) for b in case.buffers]), "layout": joined("layout", layout),
           "padding": joined("padding", padding or ["none"]), "past_2gib": "yes" if past else "no",
           "past_2gib_by": joined("past_2gib_by", terms or ["none"]), "index_dtype": case.index_dtype,
           "rows": bucket(len(src), COUNT_EDGES)}
    if case.contract == "slot_fork":
        out["fanout"] = bucket(max((len(row) for row in children), default=0), COUNT_EDGES)
    return out


BY_CONTRACT: dict[str, Callable[[Any], dict[str, str]]] = {
    "batch_memcpy": batch_features, "state_copy": pool_features, "postprocess": pool_features,
    "slot_copy": slot_features, "slot_fork": slot_features,
}


def perturb_features(perturb) -> dict[str, str]:
    if perturb is None:
        return {"perturb": "none", "schedule": "none", "position": "none", "num_warps": "default", "delay_ns": "0"}
    position, delay, schedule, _seed, warps = perturb
    delays = delay > 0 and schedule > 0
    return {"perturb": "delay" if delays else "warps-only",
            "schedule": SCHEDULES.get(schedule, str(schedule)) if delays else "none",
            "position": POSITIONS.get(position, str(position)) if delays else "none",
            "num_warps": str(warps), "delay_ns": str(delay if delays else 0)}


def verdict_features(verdict) -> dict[str, str]:
    return {"verdict": verdict.kind or "pass", "reps": bucket(verdict.reps, REPS_EDGES)}


def features(case, verdict=None) -> dict[str, str]:
    """{feature: bucket label} of one example (`verdict` adds the verdict and the repetitions).

    A contract without a table here may define ``features(case)`` on its Contract.
    """
    return {k: v for k, v in _features(case, verdict).items() if not k.startswith("_")}


def _features(case, verdict=None) -> dict[str, str]:
    """features() with the race map's (shift, size) under RACE_SHIFT / RACE_SIZE."""
    own = BY_CONTRACT.get(case.contract)
    if own is None:
        from mambafuzz import contracts

        own = getattr(contracts.registered().get(case.contract), "features", None) or (lambda c: {})
    out = dict(own(case))
    out.update(perturb_features(getattr(case, "perturb", None)))
    if verdict is not None:
        out.update(verdict_features(verdict))
    return out


# ---------------------------------------------------------------- what a run should draw
_SHIFTS_BATCH = ("none", "0", "1", "2-3", "4-7", "8-15", "16-63")


def expected_features(contract: str, *, amplify: bool = False, options: dict | None = None) -> dict[str, tuple]:
    """The buckets `contract`'s strategy draws under these options, a few hundred examples each.

    Only buckets a run of the default sizes reaches reliably are here: a bucket in this table
    that a run never drew is a hole in what was tested, not bad luck."""
    options = options or {}
    out: dict[str, tuple] = {}
    if contract == "batch_memcpy":
        left_only = options.get("overlap") == "left"
        out = {"overlap": ("none", "left", "same") if left_only else ("none", "left", "right", "same"),
               "shift": _SHIFTS_BATCH, "size": ("0", "1-7", "8-63", "64-511", "512-4095"),
               "src_align": ALIGNS, "dst_align": ALIGNS, "rows": ("1", "2-3", "4-15"),
               "zero_size": ("no", "yes")}
    elif contract in ("state_copy", "postprocess"):
        layout = options.get("layout") or "both"
        layouts = {"both": ("sd", "ds", "temporal"), "sd": ("sd", "temporal"), "ds": ("ds", "temporal")}
        kinds = layouts.get(layout, layouts["both"])
        out = {"overlap": ("none", "left", "same"), "aliasing": ("none", "same", "shared"),
               "layout": kinds, "elem": ("1", "2", "4", "8"),
               "padding": ("none", "block") + (("row",) if "ds" in kinds else ()),
               "src_align": ("1", "2", "4", "8", ">=16"), "dst_align": ("1", "2", "4", "8", ">=16")}
        out["past_2gib_by"] = ("none", "block", "element")
        if contract == "state_copy":
            out["past_2gib"] = ("no", "yes")
            if options.get("tiles") in (None, "drawn"):
                out["tiles"] = ("1", "2-3", "4-15", ">=16")
        else:
            out["decision"] = ("no-copy", "copy", "self-skip")
            out["tiles"] = ("1", "2-3", "4-15", ">=16")
    elif contract in ("slot_copy", "slot_fork"):
        chains = options.get("chains") or "allowed"
        out = {"chains": ("none", "self", "chain", "swap") if chains == "allowed" else ("none",),
               "overlap": ("none", "same") if chains == "allowed" else ("none",),
               "layout": ("layer-major", "slot-major"), "elem": ("1", "2", "4", "8"),
               "padding": ("none", "slot", "layer"), "past_2gib": ("no", "yes"),
               "past_2gib_by": ("none", "layer", "slot", "element"), "index_dtype": ("int32", "int64")}
        if contract == "slot_fork":
            out["fanout"] = ("1", "2-3", "4-15")
    if amplify:
        out.update({"perturb": ("none", "warps-only", "delay"), "schedule": tuple(SCHEDULES.values())[1:],
                    "position": tuple(POSITIONS.values()), "num_warps": ("4", "8"),
                    "delay_ns": ("500", "2000", "8000")})
    return out


# ---------------------------------------------------------------- counting
TIMELINE_POINTS = 400   # at most this many (seconds, examples) samples per target; thinned by halves
REJECTION_REASONS = 20  # distinct reasons a target gave for rejecting cases; the rest are counted as one
OTHER_REASONS = "(other reasons)"


class Tally:
    """One target's coverage counts, race-map cells and examples over time (JSON: ``to_json``)."""

    def __init__(self):
        self.examples = 0
        self.counts: dict[str, dict[str, int]] = {}
        self.expected: dict[str, tuple] = {}
        self.race = False                       # bin repetitions into the race map (cuda or perturbed)
        self.cells: dict[tuple, list[int]] = {}  # (shift, size, num_warps, delay_ns) -> [reps, failed reps]
        self.timeline: list[list[float]] = []   # [seconds since the target started, examples so far]
        self.rejections: dict[str, int] = {}    # why the target rejected drawn cases (mambafuzz.reject) -> count
        self._latest: list[float] | None = None
        self._step = 1.0

    def expect(self, contract: str, *, profile=None, device: str = "cpu", options: dict | None = None) -> None:
        self.expected = expected_features(contract, amplify=bool(getattr(profile, "amplify", False)),
                                          options=options)
        self.race = device == "cuda"

    def add(self, case, verdict, seconds: float) -> dict[str, str]:
        """Count one valid example; returns its features."""
        try:
            feats = _features(case, verdict)
        except Exception as exc:  # noqa: BLE001 - coverage must never end a fuzz run; the table shows it
            feats = {"error": type(exc).__name__, **verdict_features(verdict)}
        self.examples += 1
        self._add_cell(case, feats, verdict)
        feats.pop(RACE_SHIFT, None)
        feats.pop(RACE_SIZE, None)
        for name, value in feats.items():
            counts = self.counts.setdefault(name, {})
            for label in labels_of(value):
                counts[label] = counts.get(label, 0) + 1
        self._sample(seconds)
        return feats

    def reject(self, reason: str, n: int = 1) -> None:
        """Count `n` drawn cases the target rejected for `reason` (not valid examples: no coverage)."""
        if reason not in self.rejections and len(self.rejections) >= REJECTION_REASONS:
            reason = OTHER_REASONS
        self.rejections[reason] = self.rejections.get(reason, 0) + n

    @property
    def rejected(self) -> int:
        return sum(self.rejections.values())

    def reasons(self) -> list[tuple[str, int]]:
        """(reason, count) of the target's rejections, most first."""
        return sorted(self.rejections.items(), key=lambda kv: (-kv[1], kv[0]))

    def add_rates(self, case, verdict) -> None:
        """A shrinking candidate's repetitions, into the race map only: it was not drawn, so the coverage
        counts leave it out, but its k/N is a measured rate at its shift, size, warps and delay."""
        if not self._maps(case):
            return
        try:
            feats = _features(case, verdict)
        except Exception:  # noqa: BLE001 - coverage must never end a fuzz run
            return
        self._add_cell(case, feats, verdict)

    def _maps(self, case) -> bool:
        """Whether `case`'s repetitions go into the race map: on a GPU, or perturbed."""
        return self.race or getattr(case, "perturb", None) is not None

    def _add_cell(self, case, feats: dict[str, str], verdict) -> None:
        """Add `verdict`'s repetitions and failing ones to the race-map cell of `feats`."""
        if not self._maps(case):
            return
        key = (feats.get(RACE_SHIFT, "?"), feats.get(RACE_SIZE, "?"), feats.get("num_warps", "?"),
               feats.get("delay_ns", "?"))
        failed = verdict.failures or (1 if verdict.failed else 0)  # a hazard fails its one recorded run
        cell = self.cells.setdefault(key, [0, 0])
        cell[0] += max(verdict.reps, failed)
        cell[1] += failed

    def _sample(self, seconds: float) -> None:
        """A (seconds, examples) point at most once per step; the step doubles whenever the points are
        thinned to half, so a night's session keeps TIMELINE_POINTS of them."""
        self._latest = [round(seconds, 3), self.examples]
        if not self.timeline or seconds - self.timeline[-1][0] >= self._step:
            self.timeline.append(self._latest)
            if len(self.timeline) > TIMELINE_POINTS:
                self.timeline = self.timeline[::2]
                self._step *= 2

    def points(self) -> list[list[float]]:
        """The timeline with the latest example's point at its end."""
        latest = self._latest
        return self.timeline + ([latest] if latest and (not self.timeline or latest != self.timeline[-1]) else [])

    def never_drawn(self) -> dict[str, list[str]]:
        out = {}
        for name, labels in self.expected.items():
            missing = [label for label in labels if not self.counts.get(name, {}).get(label)]
            if missing:
                out[name] = missing
        return out

    def to_json(self) -> dict[str, Any]:
        """The JSON report's ``coverage``, ``race_map`` and ``timeline`` keys (never_drawn is derived)."""
        order = lambda name, counts: sorted(counts, key=lambda label: (  # noqa: E731
            BUCKETS.get(name, ()).index(label) if label in BUCKETS.get(name, ()) else len(BUCKETS.get(name, ())),
            label))
        coverage = {"examples": self.examples,
                    "features": {name: {label: counts[label] for label in order(name, counts)}
                                 for name, counts in self.counts.items()},
                    "expected": {name: list(labels) for name, labels in self.expected.items()},
                    "never_drawn": self.never_drawn()}
        race_map = None
        if self.race or self.cells:
            race_map = {"axes": list(RACE_AXES),
                        "cells": [[*key, reps, failed] for key, (reps, failed) in sorted(self.cells.items())]}
        return {"coverage": coverage, "race_map": race_map, "timeline": [list(p) for p in self.points()],
                "rejected_by_target": dict(self.reasons())}

    @classmethod
    def from_json(cls, body: dict) -> "Tally":
        """From a TargetReport's JSON (absent keys: an empty tally, as in reports written before them)."""
        tally = cls()
        coverage = body.get("coverage") or {}
        tally.examples = int(coverage.get("examples", 0))
        tally.counts = {name: {str(k): int(v) for k, v in counts.items()}
                        for name, counts in (coverage.get("features") or {}).items()}
        tally.expected = {name: tuple(labels) for name, labels in (coverage.get("expected") or {}).items()}
        race_map = body.get("race_map")
        if race_map:
            tally.race = True
            for *key, reps, failed in race_map.get("cells", []):
                tally.cells[tuple(str(k) for k in key)] = [int(reps), int(failed)]
        tally.timeline = [[float(t), int(n)] for t, n in body.get("timeline") or []]
        for reason, n in (body.get("rejected_by_target") or {}).items():
            tally.reject(str(reason), int(n))
        return tally

    @classmethod
    def merged(cls, tallies: list["Tally"]) -> "Tally":
        """Several workers' tallies of one target: counts and cells add up; the timelines add up in time."""
        out = cls()
        for t in tallies:
            out.examples += t.examples
            for name, counts in t.counts.items():
                mine = out.counts.setdefault(name, {})
                for label, n in counts.items():
                    mine[label] = mine.get(label, 0) + n
            out.expected = {**t.expected, **out.expected}
            out.race |= t.race
            for key, (reps, failed) in t.cells.items():
                cell = out.cells.setdefault(key, [0, 0])
                cell[0] += reps
                cell[1] += failed
            for reason, n in t.rejections.items():
                out.reject(reason, n)
        lines = [t.points() for t in tallies]
        for when in sorted({p[0] for line in lines for p in line}):
            total = sum(max((n for s, n in line if s <= when), default=0) for line in lines)
            out.timeline.append([when, total])
        return out


# ---------------------------------------------------------------- Hypothesis and the summary
def emit(feats: dict[str, str]) -> None:
    """Each feature as a Hypothesis event (``features`` in observability records; ``--hypothesis-show-statistics``)."""
    from hypothesis import event

    for name, value in feats.items():
        event(name, value)


def observe(tally: Tally, case, verdict, seconds: float) -> None:
    """The fuzz loop's hook: count the example and tell Hypothesis its features."""
    emit(tally.add(case, verdict, seconds))


def observe_rejection(tally: Tally, reason: str) -> None:
    """The fuzz loop's hook for a case the target rejected: count it, tell Hypothesis why."""
    tally.reject(reason)
    emit({"rejected": reason})


def summary_lines(target: str, tally: Tally, *, warn: bool = True, width: int = 80) -> list[str]:
    """Plain lines, each at most `width` columns: per feature how many examples drew each bucket; then
    (with `warn`) the expected buckets never drawn; then the cases the target rejected, by reason."""
    rejected = rejection_lines(target, tally, width=width)
    if not tally.examples:
        return rejected
    lines = [f"coverage of {target} ({tally.examples} examples):"]
    body = tally.to_json()["coverage"]["features"]
    for name, counts in body.items():
        lines += pack(f"  {name}: ", [f"{label} {n}" for label, n in counts.items()], ", ", width)
    if warn:
        lines += warning_lines(target, tally, width=width)
    return lines + rejected


def rejection_lines(target: str, tally: Tally, *, width: int = 80) -> list[str]:
    """How many drawn cases the target rejected (``mambafuzz.reject``), one line per reason, most first."""
    if not tally.rejections:
        return []
    head = textwrap.wrap(f"rejected by {target} ({tally.rejected} drawn cases, not counted as examples):",
                         width=width, subsequent_indent="    ", break_on_hyphens=False)
    body = [f"  {n}: {reason}" for reason, n in tally.reasons()]
    return head + [text if len(text) <= width else text[:width - 3] + "..." for text in body]


def warning_lines(target: str, tally: Tally, *, width: int = 80) -> list[str]:
    missing = tally.never_drawn()
    if not missing or not tally.examples:
        return []
    items = [f"{name} {'|'.join(labels)}" for name, labels in missing.items()]
    head = textwrap.wrap(f"WARNING {target}: never drawn in {tally.examples} examples:", width=width,
                         subsequent_indent="    ", break_on_hyphens=False)
    return head[:-1] + pack(head[-1] + " ", items, "; ", width)


def pack(first: str, items: list[str], sep: str, width: int, indent: str = "      ") -> list[str]:
    """`first` then the items, `sep` between them, in lines of at most `width` columns broken only
    between items (an item longer than a line is cut)."""
    lines, line = [], first
    for i, item in enumerate(items):
        piece = item + (sep.rstrip() if i < len(items) - 1 else "")
        if len(line) + len(piece) > width and line.strip() and line != first:
            lines.append(line.rstrip())
            line = indent
        line += piece + (" " if i < len(items) - 1 else "")
    lines.append(line.rstrip())
    return [text if len(text) <= width else text[:width - 3] + "..." for text in lines]


# ---------------------------------------------------------------- --observe
def run_observed(test: Callable[[], None], folder: str | None, target: str) -> None:
    """Run one Hypothesis test; with `folder`, every observation it makes is appended to
    ``folder/<date>_testcases.jsonl`` (``_info.jsonl`` for the others), one JSON object a line, the
    records Tyche reads, with ``property`` set to the target's name.  Line coverage is not collected
    (on Python 3.11 it would slow the interpreter several times over)."""
    if not folder:
        test()
        return
    import datetime
    import json
    import os
    from pathlib import Path

    from hypothesis.internal import observability as obs

    Path(folder).mkdir(parents=True, exist_ok=True)
    day = datetime.date.today().isoformat()

    def deliver(observation) -> None:
        body = _jsonable(observation)
        if isinstance(body, dict) and "property" in body:
            body["property"] = target
        kind = "testcases" if isinstance(body, dict) and body.get("type") == "test_case" else "info"
        line = (json.dumps(body, default=repr) + "\n").encode()
        fd = os.open(os.path.join(folder, f"{day}_{kind}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write per record: lines of several workers never interleave
        finally:
            os.close(fd)

    collect = getattr(obs, "OBSERVABILITY_COLLECT_COVERAGE", None)
    add = getattr(obs, "add_observability_callback", None)
    remove = getattr(obs, "remove_observability_callback", None)
    if add is None:  # Hypothesis before the callback functions: the list
        add, remove = obs.TESTCASE_CALLBACKS.append, obs.TESTCASE_CALLBACKS.remove
    obs.OBSERVABILITY_COLLECT_COVERAGE = False
    add(deliver)
    try:
        test()
    finally:
        remove(deliver)
        if collect is not None:
            obs.OBSERVABILITY_COLLECT_COVERAGE = collect


def _jsonable(observation):
    if isinstance(observation, dict):
        return observation
    try:
        from hypothesis.strategies._internal.utils import to_jsonable

        return to_jsonable(observation, avoid_realization=False)
    except Exception:  # noqa: BLE001 - an older or newer Hypothesis: the dataclass fields will do
        import dataclasses

        return dataclasses.asdict(observation) if dataclasses.is_dataclass(observation) else {"repr": repr(observation)}

"""What the two index-based contracts (`slot_copy`, `slot_fork`) share: slot buffers in one arena.

Every state buffer is ``[layers, slots, *trailing]`` (``oracle.SlotBuffer``:
padded slot and layer strides, layer- or slot-major) at a byte offset of the
arena.  A target receives the ``meta`` table (int64 ``[B, 7]``, columns
``SLOT_META_COLUMNS``; the project's kernels read them through
``mambafuzz.kernels.slots.SLOT_META_*``), ``src_idx`` and ``dst_idx`` (int32 or
int64, as the case says).  Buffers past DENSE_LIMIT are materialised sparsely:
only the slots the indices name, their data plus GUARD bytes of padding, are
filled and compared (what lets SLOT-I32 be fuzzed on a CPU).

The user states what their engine promises with ``--chains``: ``allowed``
(the default: chains, swaps, cycles and self-copies are drawn and must be
handled) or ``forbidden`` (no destination slot is ever a source slot).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle
from mambafuzz.oracle import SlotBuffer

from .base import Argument, CliOption, Contract, Image, Prepared, cut_to_end, packed, without
from .features import (ALIGNS, COUNT_EDGES, COUNTS, ELEMS, HUGE, NO_YES, SHIFTS, SIZES, align_label, bucket,
                       joined, shift_size)
from .pools import DENSE_LIMIT, GUARD, MAX_SPARSE_ARENA
from mambafuzz.cases.slots import CHAIN_CHOICES, INDEX_DTYPES, check_chains
from mambafuzz.cases.slots import SlotCase

# The meta table: int64 [B, len(SLOT_META_COLUMNS)], one row per buffer, these columns in this order.
SLOT_META_COLUMNS = ("BASE", "LAYERS", "SLOTS", "SLOT_BYTES", "SLOT_STRIDE", "LAYER_STRIDE", "ELEM")

META_ARGUMENT = Argument(
    "meta", "int64", "[B, 7]",
    "one row per state buffer: BASE (address of layer 0, slot 0), LAYERS, SLOTS, SLOT_BYTES (data bytes of one "
    "slot in one layer), SLOT_STRIDE, LAYER_STRIDE (bytes), ELEM; slot s of layer l is at "
    "BASE + l*LAYER_STRIDE + s*SLOT_STRIDE")
SRC_ARGUMENT = Argument("src_idx", "int32 or int64", "[P]", "source slot of pair i (the same slot in every buffer)")
CHAINS = CliOption("chains", CHAIN_CHOICES, "allowed",
                   "allowed: chains, swaps, cycles and self-copies are drawn (a destination may be another pair's "
                   "source); forbidden: your engine never issues them (no slot is both a destination and a source)")

# ---------------------------------------------------------------- the sparse image
def slot_window(buf: SlotBuffer) -> int:
    """Bytes of each slot the sparse image holds: the data and up to GUARD bytes of padding after it,
    never reaching the next slot's, the next layer's or the footprint's end."""
    w = buf.slot_bytes + GUARD
    if buf.layer_major:
        inner_stride, inner_n, outer_stride, outer_n = buf.slot_stride, buf.slots, buf.layer_stride, buf.layers
    else:
        inner_stride, inner_n, outer_stride, outer_n = buf.layer_stride, buf.layers, buf.slot_stride, buf.slots
    if inner_n > 1:
        w = min(w, inner_stride)
    if outer_n > 1:
        w = min(w, outer_stride - (inner_n - 1) * inner_stride)
    return min(w, buf.nbytes - (buf.layers - 1) * buf.layer_stride - (buf.slots - 1) * buf.slot_stride)


def _compact(case: SlotCase, src: np.ndarray, dst: np.ndarray):
    """Buffers and indices of a dense image of just the named slots, and each image byte's arena offset."""
    used = np.unique(np.concatenate([src, dst.reshape(-1)]))
    buffers, pieces, cursor = [], [], 0
    for buf in case.buffers:
        filler = -cursor % 8  # each compact buffer 8-aligned; filler bytes map to no arena byte (-1)
        pieces.append(np.full(filler, -1, dtype=np.int64))
        cursor += filler
        w = slot_window(buf)
        layers = np.arange(buf.layers, dtype=np.int64) * buf.layer_stride
        slots = used * buf.slot_stride
        if buf.layer_major:
            starts = (layers[:, None] + slots[None, :]).reshape(-1)
            compact = SlotBuffer(cursor, buf.layers, len(used), buf.slot_bytes, w, len(used) * w, buf.elem_size)
        else:
            starts = (slots[:, None] + layers[None, :]).reshape(-1)
            compact = SlotBuffer(cursor, buf.layers, len(used), buf.slot_bytes, buf.layers * w, w, buf.elem_size)
        buffers.append(compact)
        pieces.append((buf.offset + starts[:, None] + np.arange(w)[None, :]).reshape(-1))
        cursor += len(starts) * w
    positions = np.concatenate(pieces)
    return tuple(buffers), np.searchsorted(used, src), np.searchsorted(used, dst), positions


def meta_table(buffers, base: int) -> np.ndarray:
    return np.array([(base + b.offset, b.layers, b.slots, b.slot_bytes, b.slot_stride, b.layer_stride, b.elem_size)
                     for b in buffers], dtype=np.int64).reshape(-1, len(SLOT_META_COLUMNS))


# ---------------------------------------------------------------- reduction helpers
def _end(buffers) -> int:
    return max((b.offset + b.nbytes for b in buffers), default=1)


def _cut(case, **changes):
    """`case` with `changes`, in an arena cut to where its buffers end."""
    return cut_to_end(case, lambda c: _end(c.buffers), **changes)


def _contiguous(b: SlotBuffer) -> SlotBuffer:
    return dataclasses.replace(b, slot_stride=b.slot_bytes, layer_stride=b.slots * b.slot_bytes)


def _less_padded(b: SlotBuffer) -> Iterator[SlotBuffer]:
    """The buffer with one element of slot padding (or none) and no padding between layers or slots."""
    e = b.elem_size
    if b.layer_major:
        for ss in sorted({b.slot_bytes, b.slot_bytes + e}):
            if ss >= b.slot_stride:
                continue
            yield dataclasses.replace(b, slot_stride=ss)  # the layer stride kept (it may be what fails)
        if b.layer_stride > b.slots * b.slot_stride:
            yield dataclasses.replace(b, layer_stride=b.slots * b.slot_stride)
    else:
        for ls in sorted({b.slot_bytes, b.slot_bytes + e}):
            if ls >= b.layer_stride:
                continue
            yield dataclasses.replace(b, layer_stride=ls)
        if b.slot_stride > b.layers * b.layer_stride:
            yield dataclasses.replace(b, slot_stride=b.layers * b.layer_stride)


def _with_layers(b: SlotBuffer, layers: int) -> SlotBuffer:
    return dataclasses.replace(b, layers=layers)


def _with_slot_bytes(b: SlotBuffer, n: int) -> SlotBuffer:
    return dataclasses.replace(b, slot_bytes=n)


# ---------------------------------------------------------------- coverage helpers
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


class SlotContract(Contract):
    """The shared half of slot_copy and slot_fork; subclasses say how ``dst_idx`` is shaped."""

    forked = False
    cli_options = (CHAINS,)
    max_arena = MAX_SPARSE_ARENA

    # -- subclasses
    def _dst_field(self, children) -> tuple:
        """The case's ``dst_idx`` from [P][N] rows."""
        raise NotImplementedError

    def strategy(self, profile, chains: str = "allowed", ill_posed: bool = False, **_):
        check_chains(self.name, chains)
        from mambafuzz.strategies.slots import slot_cases  # deferred: Hypothesis loads with the first strategy, not with the CLI's parser
        return slot_cases(profile, forked=self.forked, chains=chains, ill_posed=ill_posed)

    # -- materialising and judging
    def _arrays(self, case: SlotCase) -> tuple[np.ndarray, np.ndarray]:
        src = np.asarray(case.src_idx, dtype=np.int64).reshape(-1)
        dst = np.asarray(case.children, dtype=np.int64).reshape(len(case.src_idx), -1)
        return src, dst

    def _dst_for_oracle(self, dst: np.ndarray) -> np.ndarray:
        return dst if self.forked else dst.reshape(-1)

    def image(self, case: SlotCase) -> Image:
        src, dst = self._arrays(case)
        oracle.check_slots(case.buffers, src, self._dst_for_oracle(dst), case.arena_size)
        if case.arena_size > DENSE_LIMIT:
            buffers, o_src, o_dst, positions = _compact(case, src, dst)
            return Image(positions, (buffers, o_src, o_dst))
        return Image(None, (case.buffers, src, dst))

    def prepare(self, case: SlotCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        base = arena.data_ptr()
        buffers, o_src, o_dst = image.plan
        expect = oracle.expect_slot_fork if self.forked else oracle.expect_slot_copy
        expected = expect(snapshot, buffers, o_src, self._dst_for_oracle(o_dst))
        import torch  # deferred: torch takes seconds to import; at first use: --help reads the contracts, needing no torch

        dtype = getattr(torch, case.index_dtype)
        src, dst = self._arrays(case)
        args = {"meta": torch.tensor(meta_table(case.buffers, base), device=device),
                "src_idx": torch.tensor(src, dtype=dtype, device=device),
                "dst_idx": torch.tensor(self._dst_for_oracle(dst), dtype=dtype, device=device)}
        return Prepared(args, {}, expected)

    def locate(self, case: SlotCase, offset: int) -> str:
        for b, buf in enumerate(case.buffers):
            where = buf.locate(offset)
            if where is None:
                continue
            layer, slot, byte, data = where
            writers = [f"pair {i}" + (f" child {n}" if self.forked else "") + f" from slot {s}"
                       for i, (s, row) in enumerate(zip(case.src_idx, case.children))
                       for n, d in enumerate(row) if d == slot]
            who = f"; written by {writers[0]}" if writers else "; no pair writes this slot"
            return f"buffer {b} layer {layer} slot {slot} byte {byte} ({'data' if data else 'padding'}{who})"
        return "outside every buffer"

    def valid(self, case: SlotCase) -> bool:
        """Well-posed and inside the arena (what materialize would accept)."""
        if not 1 <= case.arena_size <= self.max_arena or case.index_dtype not in INDEX_DTYPES:
            return False
        src, dst = self._arrays(case)
        if case.index_dtype == "int32" and len(src) and max(src.max(), dst.max()) >= 2**31:
            return False
        try:
            oracle.check_slots(case.buffers, src, self._dst_for_oracle(dst), case.arena_size)
        except oracle.OracleError:
            return False
        return True

    def candidates(self, case: SlotCase) -> Iterator[SlotCase]:
        """Strictly smaller cases (``SlotCase.size``), biggest cuts first."""
        size = case.size
        for smaller in self._cuts(case):
            if smaller.size < size:
                yield smaller

    def _cuts(self, case: SlotCase) -> Iterator[SlotCase]:
        src, rows, buffers = case.src_idx, case.children, case.buffers
        if len(src) > 1:  # a pair dropped
            for i in range(len(src)):
                yield dataclasses.replace(case, src_idx=without(src, i), dst_idx=self._dst_field(without(rows, i)))
        width = len(rows[0]) if rows else 0
        if self.forked and width > 1:  # a child column dropped
            for n in range(width):
                yield dataclasses.replace(case, dst_idx=self._dst_field(tuple(without(r, n) for r in rows)))
        if len(buffers) > 1:
            for b in range(len(buffers)):
                yield _cut(case, buffers=without(buffers, b))
        # slots renumbered 0.. in order (or only the slots past the last one named dropped)
        used = sorted(set(src) | {d for r in rows for d in r})
        index = {s: k for k, s in enumerate(used)}
        dense = {"src_idx": tuple(index[s] for s in src),
                 "dst_idx": self._dst_field(tuple(tuple(index[d] for d in r) for r in rows))}
        yield _cut(case, buffers=tuple(dataclasses.replace(b, slots=max(1, len(used))) for b in buffers), **dense)
        yield _cut(case, **dense)
        if used:
            yield _cut(case, buffers=tuple(dataclasses.replace(b, slots=used[-1] + 1) for b in buffers))
        yield _cut(case, buffers=tuple(_contiguous(b) for b in buffers))
        for b, buf in enumerate(buffers):
            for layers in sorted({1, buf.layers // 2, buf.layers - 1} - {0}):
                if layers < buf.layers:
                    yield _cut(case, buffers=buffers[:b] + (_with_layers(buf, layers),) + buffers[b + 1:])
            e = buf.elem_size
            for n in sorted({e, buf.slot_bytes // 2 // e * e, buf.slot_bytes - e} - {0}):
                if n < buf.slot_bytes:
                    yield _cut(case, buffers=buffers[:b] + (_with_slot_bytes(buf, n),) + buffers[b + 1:])
            if (buf.slot_stride, buf.layer_stride) != (buf.slot_bytes, buf.slots * buf.slot_bytes):
                yield _cut(case, buffers=buffers[:b] + (_contiguous(buf),) + buffers[b + 1:])
            for tighter in _less_padded(buf):
                yield _cut(case, buffers=buffers[:b] + (tighter,) + buffers[b + 1:])
        if case.index_dtype != "int32":
            yield dataclasses.replace(case, index_dtype="int32")
        for keep in (False, True):  # buffers packed from byte 0 up and the arena cut; exact first
            yield _cut(case, buffers=packed(buffers, lambda b: b.nbytes, keep))
        if _end(buffers) < case.arena_size:
            yield _cut(case)

    # -- coverage
    buckets = {"overlap": ("none", "same"), "shift": SHIFTS, "size": SIZES,
               "chains": ("none", "self", "chain", "swap", "cycle"), "src_align": ALIGNS, "dst_align": ALIGNS,
               "elem": ELEMS, "layout": ("layer-major", "slot-major"), "padding": ("none", "slot", "layer"),
               "past_2gib": NO_YES, "past_2gib_by": ("none", "layer", "slot", "element"),
               "index_dtype": INDEX_DTYPES, "rows": COUNTS}

    def features(self, case: SlotCase) -> dict[str, str]:
        """Chains, swaps, cycles and self-copies among the pairs; per buffer its layout, padding, element
        size, alignments and which address term of a named slot reaches 2 GiB; index dtype; pairs."""
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
        own = self.buckets
        overlap = ["same" if over else "none" for over, _, _ in pieces] or ["none"]
        return {"overlap": joined(overlap, own["overlap"]), **shift_size(pieces),
                "chains": joined(chains, own["chains"]), "src_align": joined(src_al, ALIGNS),
                "dst_align": joined(dst_al, ALIGNS), "elem": joined([str(b.elem_size) for b in case.buffers], ELEMS),
                "layout": joined(layout, own["layout"]), "padding": joined(padding or ["none"], own["padding"]),
                "past_2gib": "yes" if past else "no",
                "past_2gib_by": joined(terms or ["none"], own["past_2gib_by"]), "index_dtype": case.index_dtype,
                "rows": bucket(len(src), COUNT_EDGES)}

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        allowed = (options.get("chains") or "allowed") == "allowed"
        return {"chains": ("none", "self", "chain", "swap") if allowed else ("none",),
                "overlap": ("none", "same") if allowed else ("none",),
                "layout": ("layer-major", "slot-major"), "elem": ELEMS, "padding": ("none", "slot", "layer"),
                "past_2gib": NO_YES, "past_2gib_by": ("none", "layer", "slot", "element"),
                "index_dtype": INDEX_DTYPES}


# ---------------------------------------------------------------- what an engine's adapter reads
# (the README documents it as mambafuzz.adapters.slot_buffers, which re-exports it; torch at first use)

def slot_buffers(meta, arena) -> list:
    """The slot contracts' buffers as tensors ``[layers, slots, slot_bytes / elem]`` viewing the arena
    (an integer dtype of the element size; padded strides kept), what index-based engines hold."""
    import torch  # deferred: torch is heavy; the contract's case code runs without it

    col = {name: i for i, name in enumerate(SLOT_META_COLUMNS)}
    if meta.dtype != torch.int64 or meta.dim() != 2 or meta.shape[1] != len(SLOT_META_COLUMNS):
        raise TypeError(f"slot_buffers: meta must be int64 [B, {len(SLOT_META_COLUMNS)}], got {tuple(meta.shape)}")
    if arena.dtype != torch.uint8 or arena.dim() != 1 or not arena.is_contiguous():
        raise TypeError("slot_buffers: arena must be the contiguous 1-D uint8 tensor the target was given")
    int_dtypes = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    views = []
    for row in meta.tolist():
        elem = row[col["ELEM"]]
        shape = (row[col["LAYERS"]], row[col["SLOTS"]], row[col["SLOT_BYTES"]] // elem)
        strides = (row[col["LAYER_STRIDE"]], row[col["SLOT_STRIDE"]], elem)
        offset = row[col["BASE"]] - arena.data_ptr()
        extent = 0 if 0 in shape else sum((n - 1) * s for n, s in zip(shape, strides)) + elem
        if row[col["BASE"]] % elem or any(s % elem for s in strides):
            raise ValueError(f"slot_buffers: buffer at {hex(row[col['BASE']])} (strides {strides}) is not aligned "
                             f"to its element size ({elem} bytes)")
        if offset < 0 or offset + extent > arena.numel():
            raise ValueError(f"slot_buffers: [{hex(row[col['BASE']])}, +{extent}) is outside the arena "
                             f"[{hex(arena.data_ptr())}, +{arena.numel()})")
        region = arena[offset:offset + extent].view(int_dtypes[elem])
        views.append(region.as_strided(shape, tuple(s // elem for s in strides)))
    return views

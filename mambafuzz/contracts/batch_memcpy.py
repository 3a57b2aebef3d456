"""Contract `batch_memcpy` (docs/contracts.md#batch_memcpy): copy i is a memmove of sizes[i] bytes from src_ptrs[i] to
dst_ptrs[i].

Cases are rows of (src, dst, size) byte offsets into one arena; the batch must
be well-posed (no byte written by one row is touched by another).  A user
kernel says which overlaps it supports: ``--overlap left`` (dst < src only, as
the reference engine's fixed kernel) or ``full`` (true memmove).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from mambafuzz import oracle

from .base import Argument, CliOption, Contract, Image, Prepared, down_to, without
from .features import ALIGNS, COUNT_EDGES, COUNTS, NO_YES, SHIFTS, SIZES, align_label, bucket, joined, shift_size
from mambafuzz.cases.batch_memcpy import BatchCopyCase


# ---------------------------------------------------------------- reduction helpers
def _rows_end(copies) -> int:
    return max((max(s, d) + n for s, d, n in copies), default=0)


def _compacted(case: BatchCopyCase, copies) -> BatchCopyCase:
    """`copies` in an arena cut to where they end."""
    return dataclasses.replace(case, copies=tuple(copies), arena_size=max(1, _rows_end(copies)))


def _packed_rows(copies, keep_alignment: bool):
    """Rows in offset order, each placed right after the one before (its own geometry kept).

    With `keep_alignment` each row moves by a multiple of 8, so every address
    keeps its alignment.
    """
    out = list(copies)
    cursor = 0
    for i in sorted(range(len(copies)), key=lambda i: min(copies[i][:2])):
        s, d, n = copies[i]
        low = min(s, d)
        new_low = down_to(cursor, low, 8) if keep_alignment else cursor
        new_low = min(new_low, low)
        out[i] = (s - low + new_low, d - low + new_low, n)
        cursor = max(s, d) - low + new_low + n
    return tuple(out)


def _replace_row(copies, i, row):
    return copies[:i] + (row,) + copies[i + 1:]


class BatchMemcpy(Contract):
    name = "batch_memcpy"
    case_type = BatchCopyCase
    summary = "copy i is a memmove of sizes[i] bytes; rows are independent"
    arguments = (
        Argument("src_ptrs", "int64", "[n]", "absolute byte address of row i's source"),
        Argument("dst_ptrs", "int64", "[n]", "absolute byte address of row i's destination"),
        Argument("sizes", "int64", "[n]", "bytes to move in row i (0 allowed)"),
    )
    cli_options = (CliOption("overlap", ("full", "left"), "full",
                             "which overlaps a user batch_memcpy supports: full (memmove) or left (dst < src)"),)
    max_arena = 1 << 31

    def strategy(self, profile, overlap: str = "full", ill_posed: bool = False, **_):
        from mambafuzz.strategies.batch import batch_copy_cases  # deferred: Hypothesis loads with the first strategy, not with the CLI's parser
        return batch_copy_cases(profile, overlap=overlap, ill_posed=ill_posed)

    def prepare(self, case: BatchCopyCase, image: Image, snapshot: np.ndarray, arena, device: str) -> Prepared:
        base = arena.data_ptr()
        import torch  # deferred: torch takes seconds to import; here, not at import: the CLI's parser reads the contracts, and --help needs no torch

        rows = np.asarray(case.copies, dtype=np.int64).reshape(-1, 3)
        src, dst, sizes = rows[:, 0], rows[:, 1], rows[:, 2]
        oracle.check_batch(src, dst, sizes, case.arena_size)
        expected = oracle.expect_batch(snapshot, src, dst, sizes, check=False)
        args = {"src_ptrs": torch.tensor(src + base, device=device),
                "dst_ptrs": torch.tensor(dst + base, device=device),
                "sizes": torch.tensor(sizes, device=device)}
        return Prepared(args, {}, expected)

    def locate(self, case: BatchCopyCase, offset: int) -> str:
        for i, (src, dst, n) in enumerate(case.copies):
            if dst <= offset < dst + n:
                return f"row {i} dst byte {offset - dst} (src byte {src + offset - dst})"
        return "outside every destination"

    def valid(self, case: BatchCopyCase) -> bool:
        """Well-posed and inside the arena (what materialize would accept)."""
        if case.arena_size < 1 or any(min(row) < 0 for row in case.copies):
            return False
        rows = np.asarray(case.copies, dtype=np.int64).reshape(-1, 3)
        try:
            oracle.check_batch(rows[:, 0], rows[:, 1], rows[:, 2], case.arena_size)
        except oracle.OracleError:
            return False
        return True

    def candidates(self, case: BatchCopyCase) -> Iterator[BatchCopyCase]:
        """Rows dropped; rows packed from byte 0 and the arena cut; fewer bytes; smaller shifts."""
        copies = case.copies
        if len(copies) > 1:
            for i in range(len(copies)):
                yield dataclasses.replace(case, copies=without(copies, i))
        # rows packed from byte 0 up and the arena cut to their end; exact first, then keeping alignment
        for keep in (False, True):
            yield _compacted(case, _packed_rows(copies, keep))
        if _rows_end(copies) < case.arena_size:
            yield _compacted(case, copies)
        for i, (src, dst, n) in enumerate(copies):
            if n > 1:  # fewer bytes in a row, same overlap geometry
                for smaller in sorted({1, n // 2, min(n - 1, 16), n - 1}):
                    yield dataclasses.replace(case, copies=_replace_row(copies, i, (src, dst, smaller)))
            if abs(src - dst) > 1:  # a smaller shift, inside the row's own footprint: src towards dst, or dst
                step = 1 if src > dst else -1  # towards src (which one moves can matter for alignment)
                for gap in sorted({1, abs(src - dst) // 2, abs(src - dst) - 1}):
                    yield dataclasses.replace(case, copies=_replace_row(copies, i, (dst + step * gap, dst, n)))
                    yield dataclasses.replace(case, copies=_replace_row(copies, i, (src, src - step * gap, n)))
            low = min(src, dst)
            for new_low in sorted({0, low % 8, (low // 2) - (low // 2 - low) % 8}):
                if 0 <= new_low < low:  # this row alone, down towards byte 0
                    delta = low - new_low
                    yield dataclasses.replace(case, copies=_replace_row(copies, i, (src - delta, dst - delta, n)))

    # -- coverage
    buckets = {"overlap": ("none", "left", "right", "same"), "shift": SHIFTS, "size": SIZES,
               "src_align": ALIGNS, "dst_align": ALIGNS, "rows": COUNTS, "zero_size": NO_YES}

    def features(self, case: BatchCopyCase) -> dict[str, str]:
        """Each row's overlap kind (left: dst < src), shift, size and alignments; rows; a zero-size row."""
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
        return {"overlap": joined(kinds, self.buckets["overlap"]), **shift_size(pieces),
                "src_align": joined(src_al, ALIGNS), "dst_align": joined(dst_al, ALIGNS),
                "rows": bucket(len(case.copies), COUNT_EDGES),
                "zero_size": "yes" if any(n == 0 for _, _, n in case.copies) else "no"}

    def expected_features(self, options) -> dict[str, tuple[str, ...]]:
        left_only = options.get("overlap") == "left"
        return {"overlap": ("none", "left", "same") if left_only else ("none", "left", "right", "same"),
                "shift": ("none", "0", "1", "2-3", "4-7", "8-15", "16-63"),
                "size": ("0", "1-7", "8-63", "64-511", "512-4095"),
                "src_align": ALIGNS, "dst_align": ALIGNS, "rows": ("1", "2-3", "4-15"), "zero_size": NO_YES}


CONTRACT = BatchMemcpy()

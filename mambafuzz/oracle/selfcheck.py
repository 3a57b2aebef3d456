"""A quick check that the installed oracle agrees with hand-worked examples."""
from __future__ import annotations

import numpy as np

from mambafuzz import oracle


def _checks():
    arena = np.arange(16, dtype=np.uint8)
    yield ("memmove left (dst 2, src 5, 6 bytes)", oracle.expect_memmove(arena, 2, 5, 6),
           [0, 1, 5, 6, 7, 8, 9, 10, 8, 9, 10, 11, 12, 13, 14, 15])
    yield ("memmove right (dst 5, src 2, 6 bytes)", oracle.expect_memmove(arena, 5, 2, 6),
           [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15])
    # SD pool, 1 block, state_len 4, dim 2, 1-byte elements: tokens [0 1][2 3][4 5][6 7]; shift by 1 in place
    sd = oracle.PoolLayout("conv_sd", offset=0, num_blocks=1, block_stride=8, elem_size=1, state_len=4, dim=2)
    yield ("SD conv shift by 1, same block", oracle.expect_state_copies(
        np.arange(8, dtype=np.uint8), [sd], np.zeros((1, 1, 2), np.int32), [0], [1], [1]),
        [2, 3, 4, 5, 6, 7, 6, 7])
    d = oracle.decide([7], [3], [2], [2], [0], 4)  # running 8, new 9, aligned 8: col 0 -> col 1, bias 0
    yield ("align decision at a block boundary", [int(d.do_copy[0]), int(d.bias[0]), int(d.dst_col[0])], [1, 0, 1])


def run_selfcheck() -> list[tuple[str, bool, str]]:
    results = []
    for name, got, want in _checks():
        got = np.asarray(got).tolist()
        ok = got == list(want)
        results.append((name, ok, "" if ok else f"expected {list(want)}, got {got}"))
    return results

"""What the conv and SSM prefill kernels share: a row's prefix-caching columns, read before anything else."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def row_columns(init_ptr, first_ptr, last_ptr, computed_ptr, b, APC: tl.constexpr):
    """Row `b`'s table columns (initial, first boundary, last) and its tokens computed before, int64; all 0
    without prefix caching (the row reads and stores column 0)."""
    init_col = 0
    first_col = 0
    last_col = 0
    computed = 0
    if APC:
        init_col = tl.load(init_ptr + b).to(tl.int64)
        first_col = tl.load(first_ptr + b).to(tl.int64)
        last_col = tl.load(last_ptr + b).to(tl.int64)
        computed = tl.load(computed_ptr + b).to(tl.int64)
    return init_col, first_col, last_col, computed

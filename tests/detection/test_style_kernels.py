"""Engine-style kernels (tests/style_kernels) fuzzed through the CLI as a user does.

Each kernel is correct or carries one named bug; the verdict must be the same
on every supported Triton.  Their `for` loops over a size loaded from memory
run on 3.5 and 3.6 too, whose interpreters mambafuzz mends while it runs a
kernel.  A construct no interpreter runs (inline PTX) must answer inconclusive
(exit 3) with one line naming the construct, the installed Triton and the
kernel line, and save no crash file.
"""
import json

import pytest
import triton
from common import mf

from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.judge.engine import run_case
from mambafuzz.oracle import PoolLayout

TARGET = "tests.style_kernels.batch"
CLEAN_EXAMPLES = 12
BUGGY_EXAMPLES = 60  # an upper bound: a run stops at its first finding

# adapter, --overlap, expected finding kind (None: clean; "inconclusive": no verdict, exit 3)
KERNELS = [
    ("memmove", "full", None),
    ("memmove_left", "left", None),
    ("left_barrier_before_load", "left", "race"),
    ("left_guard_misses_short", "left", "race"),
    ("forward_on_right_overlap", "full", "mismatch"),
    ("tail_dropped", "full", "mismatch"),
    ("memmove_nc_sizes", "full", "inconclusive"),
]


# one held-out kernel in the quick tier, the rest in the matrix (`pytest -m matrix`)
@pytest.mark.parametrize("fn, overlap, expected", [
    pytest.param(*k, id=k[0], marks=() if k[0] == "left_barrier_before_load" else pytest.mark.matrix)
    for k in KERNELS])
def test_style_kernel_verdict(tmp_path, fn, overlap, expected):
    n = BUGGY_EXAMPLES if expected in ("race", "mismatch") else CLEAN_EXAMPLES
    proc = mf("fuzz", "--target", f"{TARGET}:{fn}", "--contract", "batch_memcpy", "--overlap", overlap,
              "--device", "cpu", "--max-examples", str(n), "--seed", "1", "--crashes-dir", "crashes",
              "--database", "none", "--json", cwd=tmp_path)
    version = triton.__version__
    where = f"Triton {version}, {fn}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, where
    (report,) = json.loads(proc.stdout)["targets"]
    if expected == "inconclusive":
        assert proc.returncode == 3, where
        assert report["status"] == "inconclusive" and report["examples"] == 0, where
        reason = report["detail"]
        assert "\n" not in reason, where
        for needle in ("inline assembly", f"Triton {version}'s interpreter", "no release's interpreter",
                       "--device cuda", "batch.py:", "tl.inline_asm_elementwise(", "not a finding"):
            assert needle in reason, (needle, where)
        assert not list(tmp_path.glob("crashes/**/*.json")), where
        return
    if expected is None:
        assert proc.returncode == 0, where
        assert report["status"] == "clean" and report["examples"] == n and report["failed_reps"] == 0, where
        return
    assert proc.returncode == 1, where
    finding = report["finding"]
    assert report["status"] == "finding" and finding["kind"] == expected, where
    if expected == "race":
        # the witness is an intra-program pair of this kernel's own lines
        assert "intra-program hazard" in finding["summary"], where
        assert "tests/style_kernels/batch.py:" in finding["summary"], where
    else:
        assert "differ from the oracle" in finding["summary"], where
    assert list(tmp_path.glob("crashes/**/*.json")) == [tmp_path / finding["path"]], where


# --------------------------------------------------------------------------
# the state-copy kernels (tests/style_kernels/state.py), on hand-built cases
# --------------------------------------------------------------------------
def _same_block_shift(pool):
    """One request shifting block 1 onto itself by one token (bias 1)."""
    end = pool.offset + 2 * pool.block_stride
    return StateCopyCase(arena_size=end, pools=(pool,), block_tables=(((1, 0),),), num_tiles=1, seed=4,
                         src_cols=(0,), dst_cols=(0,), biases=(1,))


# pool, whether the wrong tile order corrupts it (a same-block span of more than one 1 KiB tile)
STATE_CASES = [
    (PoolLayout("conv_sd", 0, 2, 8 * 40 * 8, 8, state_len=8, dim=40), True),    # 2240 B shifted by 320 B
    (PoolLayout("conv_sd", 0, 2, 8 * 9 * 8, 8, state_len=8, dim=9), False),     # 504 B: one tile
    (PoolLayout("conv_ds", 0, 2, 2 * 300 * 8, 8, state_len=300, dim=2), True),  # 2392 B of each 2400 B row
]


@pytest.mark.parametrize("pool, shows", STATE_CASES, ids=["sd-2240", "sd-504", "ds-2392"])
def test_state_kernel_verdict(pool, shows):
    """A loop over a size loaded from `meta`, on every release: clean, or a mismatch and no race."""
    from tests.style_kernels import state

    case = _same_block_shift(pool)
    clean = run_case(state.tiled_state_copy, case, "cpu", mode="race", reps=2)
    assert (clean.failed, clean.reps, clean.hazards) == (False, 2, []), (triton.__version__, clean)
    wrong = run_case(state.tiled_state_copy_wrong_order, case, "cpu", mode="race", reps=2)
    assert wrong.failed is shows, (triton.__version__, wrong)
    assert wrong.hazards == [] and wrong.reps == 2, (triton.__version__, wrong)
    if shows:
        assert wrong.kind == "mismatch" and wrong.failures == 2, (triton.__version__, wrong)

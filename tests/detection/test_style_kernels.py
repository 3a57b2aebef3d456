"""Engine-style kernels (tests/style_kernels) fuzzed through the CLI as a user does.

Each kernel is correct or carries one named bug; the verdict must be right on
every supported Triton.  An interpreter that cannot run a `for` loop whose
bound is loaded from memory (found by running one, not from the version
string) must answer inconclusive (exit 3) with one line naming the construct,
the installed Triton and the first release that can.
"""
import json
import os

import pytest
import torch
import triton
import triton.language as tl
from common import mf

TARGET = "tests.style_kernels.batch"
CLEAN_EXAMPLES = 12
BUGGY_EXAMPLES = 60  # an upper bound: a run stops at its first finding

# adapter, --overlap, expected finding kind (None: clean)
KERNELS = [
    ("memmove", "full", None),
    ("memmove_left", "left", None),
    ("left_barrier_before_load", "left", "race"),
    ("left_guard_misses_short", "left", "race"),
    ("forward_on_right_overlap", "full", "mismatch"),
    ("tail_dropped", "full", "mismatch"),
]


@triton.jit
def _loaded_bound_loop(n_ptr, out_ptr):
    n = tl.load(n_ptr)
    for i in range(0, n, 1):
        tl.store(out_ptr + i, i)


@pytest.fixture(scope="module")
def loaded_range_runs():
    """Whether this Triton's interpreter runs `range` over a loaded bound (feature, not version)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the probe runs in Triton's interpreter")
    n = torch.tensor([3], dtype=torch.int32)
    out = torch.full((4,), -1, dtype=torch.int32)
    try:
        _loaded_bound_loop[(1,)](n, out)
    except Exception:  # noqa: BLE001 - any failure of the construct means "cannot"
        return False
    assert out.tolist() == [0, 1, 2, -1], f"Triton {triton.__version__}: loop ran wrong: {out.tolist()}"
    return True


@pytest.mark.parametrize("fn, overlap, expected", KERNELS, ids=[k[0] for k in KERNELS])
def test_style_kernel_verdict(tmp_path, loaded_range_runs, fn, overlap, expected):
    n = CLEAN_EXAMPLES if expected is None else BUGGY_EXAMPLES
    proc = mf("fuzz", "--target", f"{TARGET}:{fn}", "--contract", "batch_memcpy", "--overlap", overlap,
              "--device", "cpu", "--max-examples", str(n), "--seed", "1", "--crashes-dir", "crashes",
              "--database", "none", "--json", cwd=tmp_path)
    version = triton.__version__
    where = f"Triton {version}, {fn}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, where
    (report,) = json.loads(proc.stdout)["targets"]
    if not loaded_range_runs:
        assert proc.returncode == 3, where
        assert report["status"] == "inconclusive" and report["examples"] == 0, where
        reason = report["detail"]
        assert "\n" not in reason, where
        for needle in ("range", f"Triton {version}", "3.7", "batch.py"):
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

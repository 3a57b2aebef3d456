"""Detection power on tile-edge bugs: the CPU profile must draw spans of several
1 KiB tiles, or a state copy that walks its tiles in the wrong order stays clean.

The kernels (tests/style_kernels/state.py) loop over a size loaded from memory,
which mambafuzz makes Triton 3.5 and 3.6's interpreters run too (racecheck.hooks).
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.judge.engine import run_case
from mambafuzz.oracle import PoolLayout

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests.style_kernels.state:"


def _fuzz(fn: str, seed: int, tmp_path, *extra) -> tuple[int, dict]:
    cmd = [sys.executable, "-m", "mambafuzz.cli", "fuzz", "--target", TARGET + fn, "--contract", "state_copy",
           "--device", "cpu", "--seed", str(seed), "--database", "none", "--crashes-dir", str(tmp_path),
           "--json", *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    try:
        body = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"rc {proc.returncode}, no JSON report; stderr: {proc.stderr[-2000:]}")
    return proc.returncode, body["targets"][0]


def _same_block_case(pool: PoolLayout) -> StateCopyCase:
    """One request shifting block 1 onto itself by one token (bias 1)."""
    end = pool.offset + 2 * pool.block_stride
    return StateCopyCase(arena_size=end, pools=(pool,), block_tables=(((1, 0),),), num_tiles=1, seed=4,
                         src_cols=(0,), dst_cols=(0,), biases=(1,))


@pytest.mark.parametrize("pool, shows", [
    (PoolLayout("conv_sd", 0, 2, 8 * 9 * 8, 8, state_len=8, dim=9), False),        # a 504 B span: one tile
    (PoolLayout("conv_sd", 0, 2, 8 * 40 * 8, 8, state_len=8, dim=40), True),       # a 2240 B span shifted by 320 B
    (PoolLayout("conv_ds", 0, 2, 2 * 300 * 8, 8, state_len=300, dim=2), True),     # 2392 B of each 2400 B row
    (PoolLayout("conv_ds", 0, 2, 2 * 11 * 8, 8, state_len=8, dim=2, row_stride=88), False),  # rows of 88 B
])
def test_the_bug_needs_a_same_block_shift_over_more_than_one_tile(pool, shows):
    """Hand-checked: the wrong walk order corrupts only spans longer than one 1 KiB tile."""
    from tests.style_kernels import state

    case = _same_block_case(pool)
    assert not run_case(state.tiled_state_copy, case, "cpu", mode="race").failed
    verdict = run_case(state.tiled_state_copy_wrong_order, case, "cpu", mode="race")
    assert verdict.failed is shows
    if shows:
        assert verdict.kind == "mismatch"  # wrong bytes, and no race: the kernels keep their barriers


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.matrix
def test_wrong_tile_order_is_found_with_default_settings(seed, tmp_path):
    rc, report = _fuzz("tiled_state_copy_wrong_order", seed, tmp_path)
    assert rc == 1, report
    finding = report["finding"]
    assert finding["kind"] == "mismatch", finding
    assert finding["examples_to_first"] <= 1000


@pytest.mark.matrix
def test_correct_tiled_state_copy_stays_clean(tmp_path):
    rc, report = _fuzz("tiled_state_copy", 1, tmp_path, "--max-examples", "150")
    assert rc == 0, report
    assert report["status"] == "clean" and report["examples"] == 150, report

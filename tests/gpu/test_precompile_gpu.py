"""Compile ahead on the GPU: the helpers fill Triton's cache with what fuzzing then needs.

With an empty cache, helpers build an amplified target's variants
(``precompile.Precompiler``, as a run starts them); a fresh fuzzing process
of that target on the same cache then builds at most a few kernels of its
own, where the same fuzzing on a second empty cache builds every variant.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
TARGET = "triton.batch_memcpy"   # correct: fuzzing runs all its examples, no shrinking
EXAMPLES = 40

WARM = f"""
from mambafuzz import strategies
from mambafuzz.control import device
from mambafuzz.run import precompile
from mambafuzz.search.fuzz import FuzzOptions
from mambafuzz.control.targets import resolve
device.select("cuda")
opts = FuzzOptions(device="cuda", mode="compare", reps=50, profile=strategies.PROFILES["gpu-amp"])
with precompile.ahead(resolve(["{TARGET}"]), opts, 6) as pre:
    pre.stop(grace=600)
print(pre.summary(), [f for f in pre.finished if f[2]])
"""


def _env(cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(cache))
    env.pop("TRITON_INTERPRET", None)
    return env


def _built(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.cubin"))


def _fuzz(cache: Path, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mambafuzz", "fuzz", "--target", TARGET, "--device", "cuda",
                           "--profile", "gpu-amp", "--reps", "50", "--max-examples", str(EXAMPLES), "--seed", "3",
                           "--database", "none", "--crashes-dir", str(tmp / "crashes"), "--no-isolate",
                           "--precompile", "0", "--json"], env=_env(cache), cwd=tmp, capture_output=True,
                          text=True, timeout=600)


def test_helpers_build_what_fuzzing_then_loads(tmp_path):
    warm_cache, cold_cache = tmp_path / "warm", tmp_path / "cold"
    warm_cache.mkdir()
    cold_cache.mkdir()
    w = subprocess.run([sys.executable, "-c", WARM], env=_env(warm_cache), cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert w.returncode == 0, w.stderr[-2000:]
    assert "'failed': 0" in w.stdout and "'done': 6" in w.stdout, w.stdout
    by_helpers = _built(warm_cache)
    warm = _fuzz(warm_cache, tmp_path)
    cold = _fuzz(cold_cache, tmp_path)
    assert warm.returncode == cold.returncode == 0, (warm.stderr[-2000:], cold.stderr[-2000:])
    built_warm, built_cold = _built(warm_cache) - by_helpers, _built(cold_cache)
    print(f"helpers built {by_helpers}; fuzzing built {built_warm} after them, {built_cold} on an empty cache")
    assert built_cold >= 6
    assert by_helpers >= 6
    assert built_warm <= 2, (built_warm, built_cold)

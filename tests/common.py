"""Helpers shared by the test files (a plain module: test files never import each other).

``pyproject.toml`` puts ``tests/`` on pytest's path, so every test folder
imports this as ``common``.
"""
import os
import subprocess
import sys
from pathlib import Path

from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.search.fuzz import FuzzOptions

ROOT = Path(__file__).resolve().parents[1]

# 24 bytes moved by 8 inside a 128-byte arena, left and right
LEFT_SHIFT = BatchCopyCase(arena_size=128, copies=((16, 8, 24),), seed=3)
RIGHT_SHIFT = BatchCopyCase(arena_size=128, copies=((8, 16, 24),), seed=3)


def fuzz_options(tmp_path, **kw) -> FuzzOptions:
    """CPU fuzz options for a test: its own database and crashes folder under `tmp_path`."""
    base = dict(device="cpu", mode="race", reps=1, max_examples=60, seed=0,
                database=str(tmp_path / "db"), crashes_dir=tmp_path / "crashes", shrink_budget=300)
    base.update(kw)
    return FuzzOptions(**base)


def caught_and_shrunk(zoo_id: str, tmp_path, rows_of, most: int = 2, **options):
    """Fuzz zoo row `zoo_id` with ``zoo_options`` (and `options`: a shrink budget): its finding is saved, of a
    kind the row declares for the CPU, and shrunk to at most `most` rows (``rows_of(case)``); returns the
    finding."""
    from mambafuzz.kernels import registry
    from mambafuzz.search.fuzz import fuzz_target

    report = fuzz_target(registry.get(f"zoo.{zoo_id}"), zoo_options(tmp_path, **options))
    f = report.finding
    assert f is not None, f"{zoo_id} escaped {report.examples} examples"
    assert f.verdict.kind in registry.zoo_entry(zoo_id).caught_as("cpu"), f.verdict.summary()
    assert len(rows_of(f.case)) <= most, f.case.describe()
    assert f.path is not None and f.path.exists()
    return f


def zoo_options(tmp_path, **kw) -> FuzzOptions:
    """The detection matrix's options: seeded, the race check on, no database, shrinking to its end."""
    return fuzz_options(tmp_path, **{"max_examples": 300, "seed": 1, "database": None, "crashes_dir": tmp_path, **kw})


def clean_under_zoo_fuzzing(name: str, tmp_path, examples: int, **contract_options) -> None:
    """A correct registry target fuzzed as the zoo rows are: no finding, `examples` valid examples."""
    from mambafuzz.kernels import registry
    from mambafuzz.search.fuzz import fuzz_target

    opts = zoo_options(tmp_path, max_examples=examples, **({"contract_options": contract_options}
                                                           if contract_options else {}))
    report = fuzz_target(registry.get(name), opts)
    assert report.finding is None, report.finding.verdict.summary()
    assert report.examples == examples and not report.rejected, report.rejected


def python_memmove(src_ptrs, dst_ptrs, sizes, *, arena):
    """A correct user kernel: memmove through a clone."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()


def forward_bytes(src_ptrs, dst_ptrs, sizes, *, arena):
    """A byte-at-a-time forward copy: right for left overlaps, wrong for right ones."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        for i in range(n):
            arena[d - base + i] = arena[s - base + i]


def mf_env(cwd, env_extra=None, pythonpath=None, columns=80) -> dict:
    """The environment a user's shell gives `mambafuzz`: the checkout and cwd importable."""
    env = {**os.environ, "PYTHONPATH": pythonpath or f"{ROOT}{os.pathsep}{cwd}", "COLUMNS": str(columns)}
    env.pop("TRITON_INTERPRET", None)  # the CLI chooses the mode itself
    env.update(env_extra or {})
    return env


def mf(*args, cwd, env_extra=None, timeout=600, pythonpath=None, columns=80):
    """Run `python -m mambafuzz.cli ARGS` in `cwd` as a user would; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "mambafuzz.cli", *map(str, args)], cwd=cwd,
                          env=mf_env(cwd, env_extra, pythonpath, columns), capture_output=True, text=True,
                          timeout=timeout)


def mf_popen(*args, cwd, env_extra=None):
    return subprocess.Popen([sys.executable, "-m", "mambafuzz.cli", *map(str, args)], cwd=cwd,
                            env=mf_env(cwd, env_extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def one_line_error(proc, *needles, code=2):
    """The process failed with `code` and exactly one stderr line holding every needle, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# The prelude every sm_90 compile check starts with: imports, the target, ``comp`` and the kernels' signatures.
# ``NO_DELAY`` are the race-amplification constexprs switched off.
COMPILE_PRELUDE = r'''
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mambafuzz.kernels.batch_memcpy import _batch_memcpy_kernel
from mambafuzz.kernels.state_copy import _state_copy_kernel, FLAG_NAMES
from mambafuzz.kernels.postprocess import _postprocess_kernel
target = GPUTarget("cuda", 90, 32)
NO_DELAY = {"DELAY_POS": 0, "DELAY_NS": 0, "SCHEDULE": 0}

def comp(fn, sig, consts, num_warps=4):
    sig = {**sig, **{k: "constexpr" for k in consts}}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target,
                       options={"num_warps": num_warps, "num_stages": 1})
    assert "cubin" in k.asm
    return k

BM_FLAGS = ("NOGUARD_LEFT", "FORWARD_RIGHT", "DROP_TAIL", "CHECK_DST_ALIGN_ONLY")
BM_SIG = {"src_ptrs": "*i64", "dst_ptrs": "*i64", "sizes": "*i64", "cap": "i32", "seed": "i32"}
SC_SIG = {"meta_ptr": "*i64", "bt_ptr": "*i32", "src_cols": "*i32", "dst_cols": "*i32",
          "biases": "*i32", "num_tiles": "i32", "R": "i32", "C": "i32", "seed": "i32"}
PP_SIG = {"meta_ptr": "*i64", "bt_ptr": "*i32", "num_computed": "*i32", "num_scheduled": "*i32",
          "num_draft": "*i32", "accepted_in": "*i32", "num_accepted": "*i32", "state_idx": "*i32",
          "block_size": "i32", "num_tiles": "i32", "S": "i32", "R": "i32", "C": "i32", "seed": "i32"}
'''


def compile_for_sm90(body: str, timeout: int = 600) -> str:
    """Run ``COMPILE_PRELUDE + body`` in a fresh compiled-mode process; its stdout.

    Skips when Triton's NVIDIA backend is missing; fails unless the process
    exits 0 and prints ``compiled``.
    """
    try:
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception as exc:  # pragma: no cover
        import pytest
        pytest.skip(f"Triton's NVIDIA backend is not available: {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", COMPILE_PRELUDE + body], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
    return r.stdout


def precompile_probe(task, job, state):
    """A precompile helper's work for the pool tests: note the task in `job['dir']`, maybe slowly, maybe
    failing (a target spec of 'boom'), and print (which must reach nobody)."""
    import time as _time
    print("helper output that must not reach the run's stdout")
    state["n"] = state.get("n", 0) + 1
    _time.sleep(job.get("sleep", 0.0))
    if task.entry["spec"] == "boom":
        raise RuntimeError("probe failure")
    name = f"{task.entry['spec']}-{task.perturb}-{os.getpid()}-{state['n']}"
    (Path(job["dir"]) / name).write_text("done")
    return None


def eager_capture(body, warmup):
    """A stand-in for cuda_capture on the CPU: warm up once, then each replay runs the body."""
    warmup()

    class Eager:
        def replay(self):
            body()
    return Eager()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A local redis-server on a free port, bound to 127.0.0.1, its data in `folder` (append-only, so that
    a restart keeps it, as a campaign's hub should be run).  Skips the test when redis is not installed."""

    def __init__(self, folder: Path):
        import shutil

        import pytest

        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.skip("redis-server is not installed (.ci/run installs it)")
        pytest.importorskip("redis")
        self.folder, self.port, self.proc = Path(folder), free_port(), None
        self.folder.mkdir(parents=True, exist_ok=True)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        import time

        import redis

        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.folder)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return self
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def client(self):
        import redis

        return redis.Redis.from_url(self.url, decode_responses=True)

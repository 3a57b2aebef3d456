"""Compile-ahead helpers hold no GPU memory (issue 44 on a GPU: seven helpers took 5-12 GiB each beside the
zoo's workers, and under MPS a helper's context keeps a server that lost a client from taking new ones).

A helper starts with every GPU hidden and no MPS pipe, and for a GPU run builds on the host: its cases in
host memory, Triton's driver naming the target (``precompile.HostDriver``).  Run here for real: a sm_90
cubin lands in Triton's cache from a process where every use of ``torch.cuda`` raises.
"""
import os
import subprocess
import sys
import textwrap

from mambafuzz.run import precompile

from common import ROOT

HOST = textwrap.dedent('''
    import sys
    import torch
    touched = []

    class Spy:
        """torch.cuda, every attribute of which (but a module's own dunders) raises and is noted."""
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            if name.startswith("__"):
                return getattr(self.real, name)
            touched.append(name)
            raise RuntimeError(f"torch.cuda.{name} touched by a compile-ahead helper")

    torch.cuda = sys.modules["torch.cuda"] = Spy(torch.cuda)
    from mambafuzz.run import precompile
    job = {"device": "cuda", "profile": "gpu-amp", "reps": 1, "mode": "compare", "contract_options": {}, "arch": 90}
    task = precompile.Task({"spec": "triton.batch_memcpy", "contract": "batch_memcpy"}, (1, 0, 0, 0, 8))
    print("error:", precompile.warm(task, job, {}), "touched:", touched)
''')


def test_a_gpu_runs_helper_builds_on_the_host_without_touching_torch_cuda(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled, as on a GPU box
    env.update(PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", HOST], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "error: None touched: []" in done.stdout, done.stdout + done.stderr[-2000:]
    cubins = list((tmp_path / "cache").rglob("*.cubin"))
    assert cubins, "nothing compiled"
    assert any('"arch": 90' in p.read_text() or "sm_90" in p.read_text()
               for p in (tmp_path / "cache").rglob("*.json")), "not built for sm_90"


def env_probe(task, job, state):
    """A helper's work for the test below: what its environment says about the GPU, as its 'error': as the
    helper has it now, and as it was started (``/proc/self/environ``: before any import in it)."""
    with open("/proc/self/environ", "rb") as f:
        started = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    return repr((os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
                 started.get(b"CUDA_VISIBLE_DEVICES"), started.get(b"CUDA_MPS_PIPE_DIRECTORY")))


def test_helpers_start_with_every_gpu_hidden_and_no_mps_pipe(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps-pipe")
    tasks = [precompile.Task({"spec": "a", "contract": "batch_memcpy"}, None)]
    pre = precompile.Precompiler.start(tasks, {"work": f"{__name__}:env_probe"}, 1)
    pre.stop(grace=120)
    assert [f[2] for f in pre.finished] == [repr(("", None, b"", None))]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"  # the parent's own, put back


def test_no_helpers_where_the_gpus_capability_cannot_be_read_without_cuda(monkeypatch):
    from mambafuzz import strategies
    from mambafuzz.control import gpu
    from mambafuzz.search.fuzz import FuzzOptions

    monkeypatch.setattr(gpu, "query", lambda index=0: None)
    opts = FuzzOptions(device="cuda", mode="compare", reps=1, profile=strategies.PROFILES["gpu"])
    target = type("T", (), {"name": "triton.batch_memcpy", "contract": "batch_memcpy"})()
    with precompile.ahead([target], opts, 4) as pre:
        assert pre.processes == []
    monkeypatch.setattr(gpu, "query", lambda index=0: gpu.GpuInfo(80 << 30, 90))
    assert precompile.arch("cuda") == 90 and precompile.arch("cpu") is None

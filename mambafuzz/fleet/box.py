"""Who a worker is and what it runs: the box, its GPU and driver, the versions, each target's digest.

A finding on the hub says where it was seen; the corpus and the buckets are
keyed by ``versions_key`` (mambafuzz and Hypothesis) and a target's
``target_digest``, so that a box on another version never replays a case
shaped for a different one as if it were.  mambafuzz's version is its
package version plus a digest of its own source: boxes run from checkouts
whose version string never moves.  A box's ``kind`` (device and GPU model)
is what a confirming replay must match.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import socket
import subprocess
import sys
import types
from importlib.metadata import version
from pathlib import Path

# packages whose source is not the target's: their versions are recorded instead
_NOT_THE_TARGET = frozenset({"torch", "triton", "numpy", "hypothesis", "builtins"}) | frozenset(sys.stdlib_module_names)
_DEPTH = 4        # how far a target's digest follows what it calls
_MAX_FILES = 64


def box_name(given: str | None = None) -> str:
    """--box, else MAMBAFUZZ_BOX, else the host name (with the Slurm array task, which may share a node)."""
    name = given or os.environ.get("MAMBAFUZZ_BOX")
    if name:
        return name
    host = socket.gethostname() or "box"
    task = os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{host}-{task}" if task else host


def worker_id(box: str) -> str:
    """One worker process of a box: unique while it lives (host and pid)."""
    return f"{box}/{socket.gethostname()}/{os.getpid()}"


@functools.lru_cache(maxsize=None)
def mambafuzz_version() -> str:
    """The package version and a digest of the package's source ('0.1.0+src.1a2b3c4d5e6f')."""
    try:
        base = version("mambafuzz")
    except Exception:  # noqa: BLE001 - not installed: a checkout on PYTHONPATH
        base = "0"
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{base}+src.{digest.hexdigest()[:12]}"


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except Exception:  # noqa: BLE001 - a missing package is simply not recorded
        return None


def versions_key() -> str:
    """What keys the corpus and the buckets: mambafuzz's and Hypothesis' versions."""
    return f"mambafuzz {mambafuzz_version()}, hypothesis {_version('hypothesis')}"


@functools.lru_cache(maxsize=None)
def gpu(device: str) -> tuple[str | None, str | None]:
    """(GPU model, driver version) of this process's first GPU on cuda; (None, None) on the CPU."""
    if device != "cuda":
        return None, None
    model = driver = None
    try:
        import torch  # deferred: torch takes seconds to import
        model = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True)
        driver = out.stdout.strip().splitlines()[0].strip() if out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        pass
    return model, driver


def info(box: str, device: str) -> dict:
    """What a pushed finding and the worker list say about where it ran."""
    model, driver = gpu(device)
    return {"box": box, "host": socket.gethostname(), "pid": os.getpid(), "device": device, "gpu": model,
            "driver": driver, "torch": _version("torch"), "triton": _version("triton"),
            "mambafuzz": mambafuzz_version(), "hypothesis": _version("hypothesis"),
            "python": sys.version.split()[0]}


def kind(device: str, gpu_model: str | None) -> str:
    """A confirming replay runs on a box of this kind: 'cpu', or 'cuda NVIDIA H200'."""
    return device if device != "cuda" else f"cuda {gpu_model or 'unknown GPU'}"


# ---------------------------------------------------------------- a target's source
def _unwrapped(obj):
    while True:
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        elif not isinstance(obj, (types.FunctionType, types.ModuleType, type)) and isinstance(
                getattr(obj, "fn", None), types.FunctionType):
            obj = obj.fn  # a @triton.jit kernel: its Python function
        else:
            return obj


def _top(obj) -> str:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None) or ""
    return name.partition(".")[0]


def _names(code) -> set[str]:
    """Every global and attribute name a function's code (and its nested functions) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def source_files(fn) -> list[str]:
    """The files a target's source lives in: its function's, and those of the functions, kernels and
    modules it calls (a few levels), outside torch, Triton, numpy, Hypothesis and the standard library."""
    files: list[str] = []
    seen: set[int] = set()
    todo = [(fn, 0)]
    while todo and len(files) < _MAX_FILES:
        obj, depth = todo.pop(0)
        obj = _unwrapped(obj)
        if id(obj) in seen or _top(obj) in _NOT_THE_TARGET or not _top(obj):
            continue
        seen.add(id(obj))
        try:
            path = inspect.getsourcefile(obj)
        except (TypeError, OSError):
            path = None
        if path and path not in files:
            files.append(path)
        if not isinstance(obj, types.FunctionType) or depth >= _DEPTH:
            continue
        names = _names(obj.__code__)
        refs = [obj.__globals__.get(n) for n in names]
        refs += [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        for ref in list(refs):
            if isinstance(ref, types.ModuleType):  # module.function: follow the attributes the code names
                refs += [getattr(ref, n, None) for n in names]
        todo += [(r, depth + 1) for r in refs if r is not None and (callable(r) or isinstance(r, types.ModuleType))]
    return files


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def target_digest(fn) -> str:
    """A digest of the target's source files (``source_files``, by name and content)."""
    digest = hashlib.sha256()
    for path in sorted(source_files(fn)):
        try:
            digest.update(os.path.basename(path).encode() + b"\0" + Path(path).read_bytes() + b"\0")
        except OSError:
            digest.update(path.encode())
    return digest.hexdigest()[:12]


def corpus_key(fn) -> str:
    """What the fuzz loop adds to a target's corpus key in a campaign: the versions and its digest."""
    return f"{versions_key()}, source {target_digest(fn)}"

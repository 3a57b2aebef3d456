"""A GPU's memory and compute capability, read without opening it: ``nvidia-smi``, never CUDA.

The session's parent sizes its workers' memory budgets and the zoo's worker
count from the GPU's memory, and the compile-ahead helpers build for its
compute capability on the host (``run/precompile.py``).  Neither may create a
CUDA context for it: a context costs GPU memory, and under MPS every client
(a helper too) must exit before a server that lost a client to a fault takes
new ones ("MPS server is not ready").  ``nvidia-smi`` talks to the driver
through NVML, which creates none.  Where it is missing or says nothing usable,
``query`` is None and the callers fall back (no budgets, one zoo worker, no
compile-ahead).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

COMMAND = "nvidia-smi"


@dataclass(frozen=True)
class GpuInfo:
    total_bytes: int          # the GPU's memory
    capability: int           # compute capability as Triton names targets: 90 for 9.0 (sm_90)


def query(gpu: int = 0) -> GpuInfo | None:
    """GPU `gpu`'s memory and compute capability (as ``CUDA_VISIBLE_DEVICES`` numbers it, or the
    physical index without it), or None when ``nvidia-smi`` cannot say."""
    exe = shutil.which(COMMAND)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--query-gpu=memory.total,compute_cap", "--format=csv,noheader,nounits",
                               f"--id={_physical(gpu)}"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode:
        return None
    return parse(done.stdout)


def parse(text: str) -> GpuInfo | None:
    """``nvidia-smi``'s csv line (``81559, 9.0``: MiB, major.minor) as a GpuInfo; None if it is not one."""
    try:
        mib, cap = (part.strip() for part in text.strip().splitlines()[0].split(","))
        major, minor = cap.split(".")
        return GpuInfo(total_bytes=int(float(mib)) << 20, capability=int(major) * 10 + int(minor))
    except (ValueError, IndexError):
        return None


def _physical(gpu: int) -> str:
    """The id nvidia-smi knows GPU `gpu` by: nvidia-smi ignores ``CUDA_VISIBLE_DEVICES``."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[gpu] if 0 <= gpu < len(visible) else str(gpu)

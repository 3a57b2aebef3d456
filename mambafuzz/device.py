"""Which device a process fuzzes on, chosen before any kernel is defined.

Triton reads TRITON_INTERPRET when ``@triton.jit`` runs, i.e. when a kernel
module is imported, not when it is launched.  So one process is either
interpreted (device ``cpu``) or compiled (device ``cuda``): ``select`` must run
before ``kernels.*`` submodules are imported, and refuses a switch afterwards.
"""
from __future__ import annotations

import os
import sys

from .errors import UsageError

DEVICES = ("cpu", "cuda", "auto")
_KERNEL_MODULES = ("kernels.copy", "kernels.batch_memcpy", "kernels.state_copy", "kernels.postprocess")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return torch.cuda.is_available()


def kernels_loaded_interpreted() -> bool | None:
    """None while no kernel module is imported; else whether they were interpreted."""
    if not any(m in sys.modules for m in _KERNEL_MODULES):
        return None
    import kernels
    return kernels.INTERPRETED


def select(device: str) -> str:
    """Resolve `device` ('cpu', 'cuda', 'auto') and set the process's Triton mode."""
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r} (choose from {', '.join(DEVICES)})")
    if device == "auto":
        device = "cuda" if _cuda_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    if device == "cuda" and not _cuda_available():
        raise UsageError("device 'cuda' asked for, but torch sees no CUDA GPU (use --device cpu)")
    want_interpreted = device == "cpu"
    loaded = kernels_loaded_interpreted()
    if loaded is not None and loaded != want_interpreted:
        mode = "interpreted" if loaded else "compiled"
        raise UsageError(f"kernels were already loaded {mode} in this process; device {device!r} needs a new process")
    os.environ["TRITON_INTERPRET"] = "1" if want_interpreted else "0"
    return device

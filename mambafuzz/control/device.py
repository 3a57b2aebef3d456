"""Which device a process fuzzes on, chosen before any kernel is defined.

Triton reads TRITON_INTERPRET when ``@triton.jit`` runs, i.e. when a kernel
module is imported, not when it is launched.  So one process is either
interpreted (device ``cpu``) or compiled (device ``cuda``): ``select`` must run
before ``kernels.*`` submodules are imported, and refuses a switch afterwards.
"""
from __future__ import annotations

import os
import sys

from mambafuzz.errors import UsageError

DEVICES = ("cpu", "cuda", "auto")
# What the process was started with; select() sets TRITON_INTERPRET itself afterwards.
_INHERITED = os.environ.get("TRITON_INTERPRET")
# every kernel module imports kernels.copy (the shared jitted helpers) as it loads
_KERNEL_HELPERS = "mambafuzz.kernels.copy"


def _cuda_available() -> bool:
    try:
        import torch  # deferred: torch takes seconds to import
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return torch.cuda.is_available()


def kernels_loaded_interpreted() -> bool | None:
    """None while no kernel module is imported; else whether the loaded kernels are interpreted.

    Asks a jitted function itself: ``kernels.INTERPRETED`` is read when the
    package is first imported, which can be before ``select`` ran.
    """
    if _KERNEL_HELPERS not in sys.modules:
        return None
    from mambafuzz.kernels import copy  # deferred: the kernels: Triton fixes compiled or interpreted when they are imported (after control.device.select)
    return not bool(copy.COMPILED)


def _check_inherited(device: str) -> None:
    """An inherited TRITON_INTERPRET that contradicts the device is an error, not a silent switch."""
    if _INHERITED is None or _INHERITED not in ("0", "1"):
        return
    if (_INHERITED == "1") != (device == "cpu"):
        raise UsageError(f"TRITON_INTERPRET={_INHERITED} in the environment contradicts device {device!r} "
                         f"(unset it; mambafuzz sets it from --device / MAMBAFUZZ_DEVICE)")


def select(device: str, probe: bool = True) -> str:
    """Resolve `device` ('cpu', 'cuda', 'auto') and set the process's Triton mode.  `probe` False: compiled
    for 'cuda' without asking torch for a GPU (a compile-ahead helper, which builds on the host and must
    not initialise CUDA: ``run/precompile.py``)."""
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r} (choose from {', '.join(DEVICES)})")
    if device == "auto":
        device = "cuda" if _cuda_available() and _INHERITED != "1" else "cpu"
    _check_inherited(device)
    if device == "cuda" and probe and not _cuda_available():
        raise UsageError("device 'cuda' asked for, but torch sees no CUDA GPU (use --device cpu)")
    want_interpreted = device == "cpu"
    loaded = kernels_loaded_interpreted()
    if loaded is not None and loaded != want_interpreted:
        mode = "interpreted" if loaded else "compiled"
        raise UsageError(f"kernels were already loaded {mode} in this process; device {device!r} needs a new process")
    os.environ["TRITON_INTERPRET"] = "1" if want_interpreted else "0"
    return device

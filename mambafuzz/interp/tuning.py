"""Autotuned kernels in the interpreter: one config, chosen without a benchmark.

``triton.autotune`` with several configs times each one on the device
(``Autotuner._bench``) before the first launch; on a machine without a GPU
there is no driver to time with ("0 active drivers"), and in the interpreter
each timed run would also update the kernel's in-place arguments before the
real launch.  Inside the adapters every config times the same, so the
autotuner keeps its first (pruned) config and runs the kernel once, as a
compiled launch with that config would.
"""
from __future__ import annotations

from triton.runtime import autotuner as _autotuner

__all__ = ["install", "uninstall"]

_saved = None


def _untimed(self, *args, config, **meta):
    return [0.0, 0.0, 0.0]


def install() -> None:
    global _saved
    tuner = getattr(_autotuner, "Autotuner", None)
    if _saved is not None or tuner is None or not hasattr(tuner, "_bench"):
        return
    _saved = tuner.__dict__.get("_bench")
    tuner._bench = _untimed


def uninstall() -> None:
    global _saved
    if _saved is None:
        return
    _autotuner.Autotuner._bench = _saved
    _saved = None

"""Helpers shared by the GPU benchmarks (``gpu_bench``, ``kernel_bench``).

Nothing here imports torch or triton at import time: a benchmark checks
``TRITON_INTERPRET`` (``require_compiled_gpu``) before anything imports them.
"""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path


def die(prog: str, msg: str) -> None:
    print(f"{prog}: {msg}", file=sys.stderr)
    raise SystemExit(2)


def require_compiled_gpu(prog: str, *, force_compiled: bool = False):
    """Exit (status 2) unless compiled Triton on a CUDA GPU is available; return ``torch``.

    ``force_compiled``: set ``TRITON_INTERPRET=0`` (before torch is imported).
    """
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        die(prog, "TRITON_INTERPRET=1 is set; this benchmark times compiled kernels on a GPU "
                  "(unset it or run with TRITON_INTERPRET=0)")
    if force_compiled:
        os.environ["TRITON_INTERPRET"] = "0"
    import torch
    if not torch.cuda.is_available():
        die(prog, "needs a CUDA GPU with compiled Triton; none is available here "
                  "(the CPU interpreter is for correctness, not timing)")
    return torch


def device_line() -> str:
    """The report's ``- device: ...`` line (GPU 0, torch, triton, python versions)."""
    import torch
    import triton
    return (f"- device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"triton {triton.__version__}, python {platform.python_version()}")


def timed_us(fn, reps: int) -> float:
    """Mean microseconds per call of ``reps`` back-to-back calls, between two CUDA events."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps * 1e3


def median_us(fn, reps: int, samples: int) -> float:
    """Median over ``samples`` samples of ``timed_us(fn, reps)``."""
    return statistics.median(timed_us(fn, reps) for _ in range(samples))


def warm_median_us(fn, warm: int = 20, samples: int = 15) -> float:
    """Median of `samples` single calls after `warm` untimed ones: the reference copy is the
    first GPU work of a process, and a median of 5 taken at once read 4029-4185 GB/s across runs
    (a low reference inflates every percentage measured against it)."""
    for _ in range(warm):
        fn()
    return median_us(fn, reps=1, samples=samples)


def reference_copy(ref_mib: int, time_copy) -> tuple[float, float]:
    """``(us, bytes/s)`` of a device-to-device ``copy_`` of ``ref_mib`` MiB.

    ``time_copy(copy)`` times the zero-argument ``copy`` (warm-up included)
    and returns microseconds per copy; the bandwidth counts read + write.
    The buffers are freed (and the cache emptied) before returning.
    """
    import torch
    n_ref = ref_mib << 20
    us = _time_copy_of(n_ref, time_copy)  # its buffers are gone once it returns
    torch.cuda.empty_cache()
    return us, 2 * n_ref / (us * 1e-6)


def _time_copy_of(n_ref: int, time_copy) -> float:
    import torch
    a = torch.empty(n_ref, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    return time_copy(lambda: b.copy_(a))


class Report:
    """``out(line)`` prints a line and keeps it; ``write(path)`` saves the kept lines."""

    def __init__(self, prog: str):
        self.prog = prog
        self.lines: list[str] = []

    def __call__(self, s: str = "") -> None:
        print(s, flush=True)
        self.lines.append(s)

    def table(self, title: str | None, columns: list[str], aligns: str) -> None:
        """A section's heading (when ``title``) and a markdown table's header: ``aligns`` has one
        letter a column, ``l`` or ``r``."""
        if title:
            self(f"## {title}")
            self()
        self("| " + " | ".join(columns) + " |")
        self("| " + " | ".join("---:" if a == "r" else "---" for a in aligns) + " |")

    def header(self, title: str, argv) -> None:
        """``# {prog}: {title}``, then the device line and the commit with the exact command (`argv`:
        the script's arguments, None for the process's own)."""
        self(f"# {self.prog}: {title}")
        self()
        self(device_line())
        args = sys.argv[1:] if argv is None else argv
        self(f"- commit: {commit()}; command: python bench/{self.prog}.py {' '.join(args)}".rstrip())

    def write(self, path: Path | None) -> None:
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(self.lines) + "\n")
            print(f"{self.prog}: wrote {path}")

    def traceback(self) -> None:
        """The exception being handled, as a fenced block: a section that failed, the run goes on."""
        self("```")
        self(traceback.format_exc())
        self("```")

    def finish(self, path: Path | None) -> None:
        """The closing time stamp, then ``write(path)``."""
        self()
        self(f"_written {time.strftime('%Y-%m-%d %H:%M:%S')}_")
        self.write(path)


def commit() -> str:
    """The checkout's commit (with '+dirty' when files differ from it), or 'unknown'; MF_COMMIT when set
    (the device tool's copy of the tree carries no usable .git)."""
    if os.environ.get("MF_COMMIT"):
        return os.environ["MF_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                              text=True, timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=Path(__file__).resolve().parents[1],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except Exception:  # noqa: BLE001 - a copy without .git, no git binary
        return "unknown"

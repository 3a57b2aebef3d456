"""pytest setup: the CPU runs Triton kernels through the interpreter.

``TRITON_INTERPRET`` must be set before any kernel module is imported (Triton
decides compiled-or-interpreted at ``@triton.jit`` time), so it is set here,
first.  Tests marked ``gpu`` are skipped without a CUDA device.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing or broken
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

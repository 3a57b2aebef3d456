"""pytest setup: choose interpreted (CPU, default) or compiled (GPU) Triton.

``TRITON_INTERPRET`` must be set before any kernel module is imported (Triton
decides compiled-or-interpreted at ``@triton.jit`` time), so it is set here,
first.  ``MAMBAFUZZ_DEVICE=cuda pytest -m gpu`` runs the compiled GPU tests;
otherwise everything runs through the interpreter and ``gpu`` tests are skipped.
"""
import os

GPU_RUN = os.environ.get("MAMBAFUZZ_DEVICE") == "cuda"
_INHERITED = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "0" if GPU_RUN else "1"

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests are deterministic in CI: a red run must be reproducible, a green one must not be luck.
settings.register_profile("mambafuzz-tests", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("mambafuzz-tests")


def pytest_configure(config):
    # An inherited TRITON_INTERPRET=0 on a CPU run used to turn the CPU tests into skipped GPU tests, green.
    if _INHERITED is not None and _INHERITED != os.environ["TRITON_INTERPRET"]:
        raise pytest.UsageError(f"TRITON_INTERPRET={_INHERITED} in the environment contradicts this run "
                                f"(MAMBAFUZZ_DEVICE={'cuda' if GPU_RUN else 'unset: CPU'}); unset it")


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing or broken
        has_cuda = False
    for item in items:
        if "gpu" in item.keywords and not (GPU_RUN and has_cuda):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU and MAMBAFUZZ_DEVICE=cuda"))
        elif "gpu" not in item.keywords and GPU_RUN:
            item.add_marker(pytest.mark.skip(reason="CPU test; this run compiles kernels for the GPU"))

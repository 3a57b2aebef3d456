"""pytest setup: choose interpreted (CPU, default) or compiled (GPU) Triton.

``TRITON_INTERPRET`` must be set before any kernel module is imported (Triton
decides compiled-or-interpreted at ``@triton.jit`` time), so it is set here,
first.  ``MAMBAFUZZ_DEVICE=cuda pytest -m gpu`` runs the compiled GPU tests;
otherwise everything runs through the interpreter and ``gpu`` tests are skipped.

Tiers: a plain ``pytest`` (the README's command) leaves out the tests marked
``matrix`` (the long detection matrix).  ``pytest -m matrix`` runs only them;
``--matrix`` or ``MAMBAFUZZ_MATRIX=1`` runs both tiers, and so does naming test
paths, ``-m`` or ``-k`` on the command line.
"""
import os

GPU_RUN = os.environ.get("MAMBAFUZZ_DEVICE") == "cuda"
_INHERITED = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "0" if GPU_RUN else "1"

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

_MATRIX_LEFT = pytest.StashKey[int]()

# Property tests are deterministic in CI: a red run must be reproducible, a green one must not be luck.
settings.register_profile("mambafuzz-tests", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("mambafuzz-tests")


def pytest_addoption(parser):
    parser.addoption("--matrix", action="store_true",
                     help="also run the tests marked matrix (the long detection matrix); MAMBAFUZZ_MATRIX=1 too")


def _quick_tier(config) -> bool:
    """True when the run chose no tests itself: pytest's testpaths (or the current folder), no -m, no -k."""
    if config.getoption("--matrix", False) or os.environ.get("MAMBAFUZZ_MATRIX") == "1":
        return False
    if config.option.markexpr or config.option.keyword:
        return False
    return config.args_source is not pytest.Config.ArgsSource.ARGS


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
    if _quick_tier(config):
        matrix = [item for item in items if item.get_closest_marker("matrix")]
        if matrix:
            config.hook.pytest_deselected(items=matrix)
            items[:] = [item for item in items if not item.get_closest_marker("matrix")]
        config.stash[_MATRIX_LEFT] = len(matrix)
    for item in items:
        if "gpu" in item.keywords and not (GPU_RUN and has_cuda):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU and MAMBAFUZZ_DEVICE=cuda"))
        elif "gpu" not in item.keywords and GPU_RUN:
            item.add_marker(pytest.mark.skip(reason="CPU test; this run compiles kernels for the GPU"))


def pytest_report_collectionfinish(config, start_path, items):
    left = config.stash.get(_MATRIX_LEFT, 0)
    if left:
        return (f"quick tier: {left} matrix tests left out; `pytest -m matrix` runs them, "
                "`--matrix` or MAMBAFUZZ_MATRIX=1 both tiers")
    return None

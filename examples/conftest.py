"""The examples run in Triton's interpreter on the CPU unless MAMBAFUZZ_DEVICE=cuda.

Triton fixes compiled or interpreted when ``@triton.jit`` runs, i.e. when an
example module is imported, so the device is chosen here, before collection.
(In your own suite, ``pytest --mambafuzz-device cpu`` does the same.)
"""
import os

import pytest

from mambafuzz import device
from mambafuzz.errors import UsageError

try:
    device.select(os.environ.get("MAMBAFUZZ_DEVICE", "cpu"))
except UsageError as exc:
    raise pytest.UsageError(f"examples: {exc}") from None

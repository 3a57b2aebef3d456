"""Triton kernels for moving recurrent state, and the bug zoo.

Triton decides compiled-or-interpreted when ``@triton.jit`` runs, i.e. when the
kernel modules are imported.  A process therefore picks its mode *before* it
imports ``kernels.*`` submodules (``mambafuzz.control.device.select`` does this by
setting ``TRITON_INTERPRET``); ``INTERPRETED`` records the choice that held.
"""
import os

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Columns of the per-state metadata table (int64 [S, 8]); see ARCHITECTURE.md.
META_BASE = 0
META_BLOCK_STRIDE = 1
META_ELEM = 2
META_INNER = 3
META_CONV_LEN = 4
META_GROUP = 5
META_DS_ROWS = 6
META_DS_ROW_STRIDE = 7
META_COLS = 8

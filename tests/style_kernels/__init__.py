"""Kernels written in the style inference engines use, for the style-kernel tests.

Each module holds small Triton kernels, correct or carrying one named bug, and
contract adapters (plain functions over torch tensors) that mambafuzz fuzzes
as user targets (``--target tests.style_kernels.batch:<fn>``).
"""

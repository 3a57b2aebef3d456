"""A conformance corpus: small Triton kernels in the idioms of the engines' own kernels.

Each entry of :data:`CASES` is one small kernel of ours written the way vLLM,
SGLang, FLA (as vLLM and SGLang ship it), LightLLM or TensorRT-LLM write
theirs (scalar/block masks, module aliases, constexpr globals, heuristics and
autotune, block pointers, static ranges, libdevice, 16/8-bit float math,
casts, int64 offsets, 3-D grids ...), with deterministic inputs, a launcher,
and an independent numpy expectation.  ``tests/unit/test_conformance.py`` runs
every entry in Triton's interpreter (inside ``mambafuzz.interp.adapters()``,
and once under the race recorder); ``bench/conformance_gpu.py`` runs each
compiled on a GPU and interpreted on the CPU on the same inputs.

Values cross to numpy in their wire form (``numerics.wire``: bfloat16 as
uint16 bits, float8 as uint8 bits); an expectation takes the inputs in that
form and returns the outputs in it.  Where the output is 16- or 8-bit float,
the expectation models what compiled Triton computes (``Entry.model``).

Import this package only after ``TRITON_INTERPRET`` is set the way the
process means to run (Triton reads it when ``@triton.jit`` runs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

from .numerics import EXACT, Bound

__all__ = ["CASES", "Entry", "by_name"]


@dataclass(frozen=True)
class Entry:
    """One kernel of the corpus."""

    name: str
    idioms: str                                   # one line: what it exercises, after which engine code
    inputs: Callable[[str], dict]                 # device -> {name: torch tensor}, seeded numpy
    launch: Callable[[dict], dict]                # inputs -> {name: output tensor} (same device)
    expect: Callable[[dict], dict]                # {name: wire array} -> {output name: wire array}
    bound: Union[Bound, Mapping[str, Bound]] = EXACT    # one for all outputs, or per output
    model: str = ""                               # how the expectation models compiled 16/8-bit math
    # Triton release prefix ("3.9") -> the construct its interpreter cannot run (the entry must
    # then end in an exception that mambafuzz's blame calls inconclusive, naming the construct)
    unrunnable: Mapping[str, str] = field(default_factory=dict)

    def bound_for(self, output: str) -> Bound:
        if isinstance(self.bound, Bound):
            return self.bound
        return self.bound.get(output, EXACT)

    def unrunnable_on(self, version: str):
        """The construct this Triton release's interpreter cannot run, or None."""
        for prefix, construct in self.unrunnable.items():
            if version == prefix or version.startswith(prefix + "."):
                return construct
        return None


def _collect():
    from . import fla_style, lightllm_style, lowp, sglang_style, trtllm_style, vllm_style

    cases = []
    for module in (vllm_style, sglang_style, fla_style, lightllm_style, trtllm_style, lowp):
        cases.extend(module.ENTRIES)
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate conformance entries: {dupes}")
    return cases


CASES: list = _collect()


def by_name(name: str) -> Entry:
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(name)

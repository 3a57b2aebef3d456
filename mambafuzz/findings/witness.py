"""The CPU's word on a GPU finding (``search/cross`` makes it; a crash file and the report carry it).

Its own module so that ``findings`` reads a witness without importing the search that makes one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WITNESSED, NOT_WITNESSED, UNAVAILABLE = "witnessed", "not-witnessed", "unavailable"


@dataclass
class Witness:
    """What the CPU said about a GPU finding, and what the GPU said about the CPU's smaller case."""

    status: str                          # one of WITNESSED, NOT_WITNESSED, UNAVAILABLE
    why: str = ""                        # unavailable: the one-line reason
    summary: str = ""                    # the CPU verdict's summary (the hazard, or the differing bytes)
    verdict: dict | None = None          # the CPU verdict on the GPU's case (JSON)
    cpu_case: dict | None = None         # the CPU-shrunk case (JSON), when witnessed
    cpu_summary: str = ""
    cpu_size: list | None = None         # Case.size of the CPU-shrunk case
    gpu_rate: list | None = None         # [k, n] of the CPU-shrunk case back on the GPU
    adopted: bool = False                # the CPU-shrunk case failed on the GPU and became the finding
    divergence: str = ""                 # interpreted values that differ from the GPU's on its case (one line)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "Witness":
        if not isinstance(body, dict) or body.get("status") not in (WITNESSED, NOT_WITNESSED, UNAVAILABLE):
            raise ValueError(f"not a CPU witness: {body!r:.80}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in body.items() if k in known})

    def line(self) -> str:
        """One line for tables and reports."""
        if self.status == UNAVAILABLE:
            return f"CPU witness unavailable: {self.why}"
        if self.status == NOT_WITNESSED:
            return "CPU race check: clean on this case (the GPU failure is not reproduced by the interpreter)"
        text = f"CPU race check: {self.summary}"
        if self.gpu_rate is not None:
            k, n = self.gpu_rate
            text += f"; CPU-shrunk case ({self.cpu_summary}) on the GPU: {k}/{n} failed"
            text += " (adopted)" if self.adopted else ""
        return text

"""``torch.cuda.device(t.device.index)`` around a launch, for CPU tensors.

Engines' launchers select the tensors' GPU before launching (SGLang's
``selective_state_update``: ``with torch.cuda.device(x.device.index):``).
On a GPU box a CPU tensor's index is None and the context changes nothing;
torch built without CUDA (or with no GPU) raises instead, before any kernel
runs, which would read as the kernel's exception on the CPU only.  Inside
the adapters a CPU device (None, ``"cpu"``, ``torch.device("cpu")``) selects
nothing, as it would there; any other device is torch's own business.
"""
from __future__ import annotations

import torch

__all__ = ["install", "uninstall"]

_saved = None       # torch.cuda.device.__init__ while installed


def _cpu(device) -> bool:
    if device is None:
        return True
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and device == "cpu"


def _init(self, device) -> None:
    if _cpu(device):
        self.idx, self.prev_idx = -1, -1        # a negative index: torch's own no-op
        return
    _saved(self, device)


def install() -> None:
    global _saved
    if _saved is not None:
        return
    _saved = torch.cuda.device.__dict__["__init__"]
    torch.cuda.device.__init__ = _init


def uninstall() -> None:
    global _saved
    if _saved is None:
        return
    torch.cuda.device.__init__ = _saved
    _saved = None

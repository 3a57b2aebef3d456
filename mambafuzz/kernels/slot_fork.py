"""The `slot_fork` contract's targets (docs/contracts.md#slot_copy): the kernel is ``kernels.slots.slot_fork``
(the two slot contracts share it), declared here as every contract's kernel module declares its own
(``kernels/registry.py``)."""
from .slots import slot_fork, torch_slot_fork

CONTRACT = "slot_fork"
DESCRIPTION = "Triton slot fork: gather every parent into scratch, then scatter to the children"
AMPLIFIABLE = True  # its targets take perturb= (warp delays built into the kernel)


def contract_fn(variant=None):
    """The contract's signature over ``slot_fork`` with one zoo variant (None: the correct kernel), plus
    ``perturb=`` (race amplification; None: none)."""
    def fn(meta, src_idx, dst_idx, *, arena=None, perturb=None):
        return slot_fork(meta, src_idx, dst_idx, arena=arena, variant=variant, perturb=perturb)
    fn.__doc__ = slot_fork.__doc__
    return fn


torch_fn = torch_slot_fork
TORCH_DESCRIPTION = "torch path: view[:, dst[i, n]] = view[:, src[i]] on [L, S, slot bytes] byte views"

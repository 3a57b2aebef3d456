"""The `slot_copy` contract's targets (docs/contracts.md#slot_copy): the kernel is ``kernels.slots.slot_copy``
(the two slot contracts share it), declared here as every contract's kernel module declares its own
(``kernels/registry.py``)."""
from .slots import slot_copy, torch_slot_copy

CONTRACT = "slot_copy"
DESCRIPTION = "Triton slot copy: gather every source into scratch, then scatter (chain- and swap-safe)"
AMPLIFIABLE = True  # its targets take perturb= (warp delays built into the kernel)


def contract_fn(variant=None):
    """The contract's signature over ``slot_copy`` with one zoo variant (None: the correct kernel), plus
    ``perturb=`` (race amplification; None: none)."""
    def fn(meta, src_idx, dst_idx, *, arena=None, perturb=None):
        return slot_copy(meta, src_idx, dst_idx, arena=arena, variant=variant, perturb=perturb)
    fn.__doc__ = slot_copy.__doc__
    return fn


torch_fn = torch_slot_copy
TORCH_DESCRIPTION = "torch path: view[:, dst] = view[:, src] on [L, S, slot bytes] byte views"

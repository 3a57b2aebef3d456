"""Launcher plumbing shared by ``batch_memcpy``, ``state_copy`` and ``postprocess``.

``variant_flags`` turns a zoo id into the kernel's constexpr flags; ``launch``
resolves ``perturb=`` (``kernels.perturb.launch_args``) and launches a kernel
whose last runtime argument is the perturbation seed, with ``num_stages=1``.
"""
from .perturb import launch_args


def variant_flags(fn, variants, names, variant):
    """``{name: bool}`` for every flag in ``names``: those ``variants[variant]`` sets are True.

    ``variants`` maps zoo id (None: the correct kernel) to its flags; an id
    not in it raises ValueError naming ``fn`` and the known ids.
    """
    try:
        chosen = variants[variant]
    except KeyError:
        raise ValueError(f"{fn}: unknown variant {variant!r}; "
                         f"known: {sorted(v for v in variants if v)}") from None
    return {k: bool(chosen.get(k, False)) for k in names}


def launch(kernel, grid, args, *, perturb, num_warps, **constexprs):
    """``kernel[grid](*args, seed, **constexprs, **delay)`` with ``perturb`` resolved.

    ``perturb`` is validated even when the grid is empty; an empty grid
    (a zero in ``grid``) launches nothing.  ``perturb``'s ``num_warps``, when
    given, replaces ``num_warps``.
    """
    delay, seed, num_warps = launch_args(perturb, num_warps)
    if 0 in grid:
        return
    kernel[grid](*args, seed, num_warps=num_warps, num_stages=1, **constexprs, **delay)

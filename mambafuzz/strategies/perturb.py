"""Race amplification as a drawn part of a case (GPU profiles with ``amplify``).

A perturbation is ``(position, delay_ns, schedule, seed, num_warps)``, the
tuple form of ``kernels.perturb.Perturb`` (this module does not import
kernels).  It is drawn so that Hypothesis shrinks it towards no perturbation:
the delay shrinks to 0 and the warp count to 4, and a draw with neither is
``None``; a draw with no delay has no position, schedule or seed either.
"""
from __future__ import annotations

from hypothesis import strategies as st

DELAYS_NS = (0, 500, 2000, 8000)
WARPS = (4, 8)
POSITIONS = (1, 2)      # before the load, between load and store
SCHEDULES = (1, 2, 3)   # lower warps slower, higher warps slower, random per warp


@st.composite
def perturbs(draw) -> tuple[int, int, int, int, int] | None:
    """A perturbation tuple, or None (the shrink target)."""
    delay = draw(st.sampled_from(DELAYS_NS))
    warps = draw(st.sampled_from(WARPS))
    if delay == 0:
        return None if warps == 4 else (1, 0, 0, 0, warps)
    position = draw(st.sampled_from(POSITIONS))
    schedule = draw(st.sampled_from(SCHEDULES))
    seed = draw(st.integers(0, 2**16 - 1)) if schedule == 3 else 0
    return (position, delay, schedule, seed, warps)


def maybe_perturb(draw, profile) -> tuple[int, int, int, int, int] | None:
    """Draw a perturbation when the profile amplifies; draw nothing otherwise."""
    return draw(perturbs()) if getattr(profile, "amplify", False) else None


def compile_classes(profile) -> list[tuple[int, int, int, int, int] | None]:
    """One perturbation per kernel build a draw can need (``precompile``): what a kernel compiles on is
    its warp count and whether and where warps sleep, not the delay, schedule or seed (those ride in a
    runtime word, ``kernels.perturb``).  ``[None]`` for a profile that draws no perturbation."""
    if not getattr(profile, "amplify", False):
        return [None]
    classes: list[tuple[int, int, int, int, int] | None] = [None]
    for warps in WARPS:
        if warps != 4:
            classes.append((1, 0, 0, 0, warps))
        classes += [(position, DELAYS_NS[1], SCHEDULES[0], 0, warps) for position in POSITIONS]
    return classes

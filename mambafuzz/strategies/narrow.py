"""What the update strategies share about narrowing: a presence an option fixes is not drawn.

A contract option (``contracts.updates.PRESENCE``) arrives here as None (drawn per case, the default),
True (always) or False (never).  Fixed, nothing is drawn for it, so a narrowed run spends no examples on
cases the user's kernel cannot take; left to be drawn, the draw is the one the strategy always made (the
same seed draws the same cases as before the option existed).
"""
from __future__ import annotations

from hypothesis import strategies as st


def presence(draw, wanted: bool | None) -> bool:
    """Whether an optional input is present: drawn when `wanted` is None, else `wanted`."""
    return draw(st.booleans()) if wanted is None else wanted

"""The run's one clock: ``--time`` as a ``Deadline`` on ``time.monotonic()``.

The CLI (or ``check()``) makes one ``Deadline``; the runner or each session
worker starts it when fuzzing can and gives every target ``Deadline.share`` of
what is left; ``fuzz_target`` stops at its share's end and hands that end (a
float on the same clock) to shrinking and the GPU batch (``gpu_reps.TimeBox``).
The share formula is here and nowhere else.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Deadline:
    """``seconds`` from when it is ``started`` (None: no limit); ``end`` on ``time.monotonic()``.

    ``started`` fixes the end when fuzzing can start: in this process when the
    runner starts, in a session when a worker is ready (each first worker at
    its own readiness; one started after a crash gets the end the session
    heard first).  Workers receive the end itself: the monotonic clock is the
    host's (CLOCK_MONOTONIC, time since boot), the same in every process on it.
    """

    seconds: float | None = None   # None: no limit
    end: float | None = None       # on time.monotonic(); None until started

    def started(self) -> "Deadline":
        """This deadline with its end fixed (from now, unless it was fixed already)."""
        if self.seconds is None or self.end is not None:
            return self
        return dataclasses.replace(self, end=time.monotonic() + self.seconds)

    def over(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def share(self, targets_left: int) -> "Deadline":
        """The next target's share, started: an equal part of what is left, over the `targets_left`
        targets still to run (it included).  Unlimited while this one has no end."""
        if self.end is None:
            return Deadline()
        now = time.monotonic()
        seconds = max(0.0, self.end - now) / max(1, targets_left)
        return Deadline(seconds, now + seconds)

    def not_run(self, ran: int) -> str:
        """Why a target whose turn came after the end is not run: `ran` targets before it ran."""
        if ran:
            return f"not run: --time ({self.seconds:g} s) ran out while the {ran} target(s) before it ran"
        return f"not run: --time ({self.seconds:g} s) ran out before its turn"

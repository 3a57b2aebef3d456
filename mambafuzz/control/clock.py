"""The run's one clock: ``--time`` as a ``Deadline`` on ``time.monotonic()``.

The CLI (or ``check()``) makes one ``Deadline``; the runner or each session
worker starts it when fuzzing can and gives every target ``Deadline.share`` of
what is left; ``fuzz_target`` stops at its share's end and hands the share
itself, or a part of it (``shrink``, ``witness``), to shrinking, the CPU
witness, ``judge.engine.run_case`` and the GPU batch (``gpu_reps.TimeBox``).
Every share and margin is a method here and nowhere else.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

WITNESS_MIN_SECONDS = 5.0  # less left than this: no CPU witness (the child's imports alone take seconds)
WITNESS_SHRINK_PART = 0.6  # of the witness's time, the child's shrinking (the rest: imports, the first run)


_ON_PROGRESS: list = [None]  # this process's listener: a session worker's "still going" to its parent


def on_progress(listener) -> None:
    """Hear of each repetition judged (None: stop).  A session worker tells its parent, so that a slow
    example that is still repeating is not a hang: a hang is no repetition for ``--hang-timeout``."""
    _ON_PROGRESS[0] = listener


def progressed() -> None:
    """A repetition finished (the device synchronised, or the host judged it)."""
    if _ON_PROGRESS[0] is not None:
        _ON_PROGRESS[0]()


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

    @classmethod
    def until(cls, end: float | None) -> "Deadline":
        """The deadline that ends at `end` on ``time.monotonic()`` (None: never)."""
        return cls(None if end is None else 0.0, end)

    def over(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def left(self) -> float | None:
        """Seconds to the end from now (None: no limit; never below 0)."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def ends_by(self, moment: float) -> bool:
        """Whether this deadline ends by `moment` (on ``time.monotonic()``): a target's share that ended
        before it started, a shrink the run's end cut short."""
        return self.end is not None and self.end <= moment

    def shrink(self, first_failure: float, seconds: float) -> "Deadline":
        """Shrinking's share: `seconds` (``--shrink-time``) from the first failure, within this one."""
        end = first_failure + seconds
        return Deadline(seconds, end if self.end is None else min(end, self.end))

    def witness(self, seconds: float) -> tuple[float, float] | None:
        """The CPU witness's share (``search/cross``): its child's timeout, at most `seconds`, and the
        part of it the child shrinks for; None when too little is left to start one."""
        left = self.left()
        left = seconds if left is None else left
        if left <= WITNESS_MIN_SECONDS:
            return None
        timeout = min(seconds, left)
        return timeout, timeout * WITNESS_SHRINK_PART

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

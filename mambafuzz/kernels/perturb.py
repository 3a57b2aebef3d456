"""Compile-time race amplification: which warps sleep, where, for how long.

A :class:`Perturb` is handed to a launcher (``batch_memcpy``, ``state_copy``,
``postprocess``) as ``perturb=``; the launcher turns it into the constexprs of
``kernels.copy.warp_delay`` (``DELAY_POS``, and ``DELAY_NS``/``SCHEDULE`` as
on/off flags), one runtime argument (``seed``, the packed word below) and the
launch's ``num_warps``.

Compiles: the delay, the schedule and the seed travel in the runtime word
(``Perturb.word``: seed in bits 0-30, delay in 31-47, schedule in 48-49, bit 62
always set so that Triton types it int64 every time), so a kernel compiles
once per position and warp count, not once per (position, delay, schedule,
warp count): 36 compiles of each zoo kernel were what filled a short share of
an amplified run.

* ``position``: 1 = before every load of a copy piece (and before the
  postprocess decision reads), 2 = between the load and the store of every
  piece (before the barrier, where the kernel has one).
* ``delay_ns``: the delay step in nanoseconds: adjacent warps sleep this much
  apart (PTX ``nanosleep``: the hardware sleeps anywhere in [0, 2t], at most
  1 ms), so the longest sleep is ``delay_ns * (num_warps - 1)``.  0 = no delay.
* ``schedule``: 0 = off; 1 = lower warps slower (warp w of W sleeps
  ``delay * (W-1-w)``); 2 = higher warps slower (``delay * w``); 3 =
  pseudo-random per warp, from a hash of the warp, ``seed`` and the program id
  (``delay * (W-1) * h / 1023``, h in 0..1023; programs differ, which a
  cross-program race needs).
* ``seed``: only schedule 3 reads it (in the runtime word, no recompile).
* ``num_warps``: the launch's warp count (the SD span race shows at 8 warps,
  not at 4).

A perturbation with no delay (``delay_ns == 0`` or ``schedule == 0``) compiles
exactly the unperturbed kernel; only ``num_warps`` then differs.  In Triton's
interpreter (CPU) the delay is compiled out entirely (no inline asm there).

This module imports neither torch nor triton (cases and strategies may use it).
"""
from __future__ import annotations

from dataclasses import dataclass

POSITIONS = (1, 2)            # 1: before the load, 2: between load and store
SCHEDULES = (0, 1, 2, 3)      # off, lower warps slower, higher warps slower, random per warp
SCHEDULE_NAMES = {0: "off", 1: "low-warps-slow", 2: "high-warps-slow", 3: "random"}
WARPS = (1, 2, 4, 8, 16)
MAX_DELAY_NS = 100_000        # per warp step; x15 steps stays near nanosleep's 1 ms ceiling
MAX_SEED = 2**31 - 1          # bits 0-30 of the runtime word
DELAY_SHIFT = 31              # delay_ns in bits 31-47 (MAX_DELAY_NS < 2**17)
SCHEDULE_SHIFT = 48           # schedule in bits 48-49
WORD_TAG = 1 << 62            # always set: the word is int64 to Triton, one compiled signature


NO_DELAY = {"DELAY_POS": 0, "DELAY_NS": 0, "SCHEDULE": 0}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class Perturb:
    """Where and how long chosen warps sleep; hashable, validated on construction."""

    position: int = 1
    delay_ns: int = 0
    schedule: int = 0
    seed: int = 0
    num_warps: int = 4

    def __post_init__(self):
        for name in ("position", "delay_ns", "schedule", "seed", "num_warps"):
            if not _is_int(getattr(self, name)):
                raise TypeError(f"Perturb.{name} must be an int, got {getattr(self, name)!r}")
        if self.position not in POSITIONS:
            raise ValueError(f"Perturb.position must be 1 (before the load) or 2 (between load and "
                             f"store), got {self.position}")
        if not 0 <= self.delay_ns <= MAX_DELAY_NS:
            raise ValueError(f"Perturb.delay_ns must be in 0..{MAX_DELAY_NS}, got {self.delay_ns}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"Perturb.schedule must be one of {SCHEDULES} "
                             f"({', '.join(f'{k}={v}' for k, v in SCHEDULE_NAMES.items())}), "
                             f"got {self.schedule}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"Perturb.seed must be in 0..{MAX_SEED}, got {self.seed}")
        if self.num_warps not in WARPS:
            raise ValueError(f"Perturb.num_warps must be one of {WARPS}, got {self.num_warps}")

    @property
    def delays(self) -> bool:
        """Whether any warp sleeps at all."""
        return self.delay_ns > 0 and self.schedule > 0

    def constexprs(self) -> dict[str, int]:
        """The kernels' constexprs: the position and two on-flags (the values are in ``word``); all
        zero (the unperturbed kernel) when nothing sleeps."""
        if not self.delays:
            return dict(NO_DELAY)
        return {"DELAY_POS": self.position, "DELAY_NS": 1, "SCHEDULE": 1}

    def word(self) -> int:
        """The runtime argument: seed, delay and schedule packed (module docstring); 0 when nothing
        sleeps (the unperturbed kernel never reads it)."""
        if not self.delays:
            return 0
        return self.seed | self.delay_ns << DELAY_SHIFT | self.schedule << SCHEDULE_SHIFT | WORD_TAG

    def to_tuple(self) -> tuple[int, int, int, int, int]:
        """``(position, delay_ns, schedule, seed, num_warps)``: the form a case stores."""
        return (self.position, self.delay_ns, self.schedule, self.seed, self.num_warps)

    @classmethod
    def from_tuple(cls, value) -> "Perturb":
        if isinstance(value, Perturb):
            return value
        try:
            items = tuple(value)
        except TypeError:
            raise TypeError(f"a perturbation is (position, delay_ns, schedule, seed, num_warps), "
                            f"got {value!r}") from None
        if len(items) != 5:
            raise ValueError(f"a perturbation is (position, delay_ns, schedule, seed, num_warps): "
                             f"5 ints, got {len(items)}: {value!r}")
        return cls(*items)

    def describe(self) -> str:
        if not self.delays:
            return f"{self.num_warps} warps, no delay"
        where = "before loads" if self.position == 1 else "between load and store"
        sched = SCHEDULE_NAMES[self.schedule] + (f" seed {self.seed}" if self.schedule == 3 else "")
        return f"{self.num_warps} warps, {self.delay_ns} ns/warp step {where}, {sched}"


def launch_args(perturb, num_warps: int) -> tuple[dict[str, int], int, int]:
    """``(constexprs, seed, num_warps)`` for a launcher's ``perturb=`` (None, Perturb or 5-tuple)."""
    if perturb is None:
        return dict(NO_DELAY), 0, num_warps
    p = Perturb.from_tuple(perturb)
    return p.constexprs(), p.word(), p.num_warps

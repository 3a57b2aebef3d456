"""Targets dealt out to a session's workers by cost, instead of every worker running every target.

``fuzz --workers-per-gpu K`` gives every worker every target (K seeds on each,
the counts added up).  The zoo is many short rows, each with a cost: the
seconds it needs from a fresh start to its first failure (``kernels.zoo.COST``,
measured by ``bench/zoo_ttf.py``).  Run by K workers that each take every row,
a row still gets only ``--time / rows`` of wall time; dealt out, each worker
runs about rows / K of them, so each gets K times the time, and the slowest
start first.  ``deal`` is the greedy longest-first split (each row, slowest
first, to the worker with the least cost so far), each worker's rows slowest
first.  Within a worker a row caught early leaves the rest of its share to the
rows after it and to second turns (``search.fuzz.second_turns``).  A worker
done with its rows while the run has time left helps (``help_list``): it is
started again on the rows other workers have not caught yet (the slowest
first), as ``fuzz`` runs a target in several workers, each with its own seeds.

Workers sharing a GPU each have a memory budget (``control.mps``); a row whose
bug needs big pools (``kernels.zoo.PAST_2GIB``, an entry's ``memory``) is dealt
only to a worker with room for it, and a worker that never starts hands its
rows back to be dealt again (``redeal``) onto the workers still running.
"""
from __future__ import annotations


def cost(entry: dict) -> float:
    """A session entry's cost (seconds; 1 when it has none)."""
    return float(entry.get("cost", 1.0))


def need(entry: dict) -> int:
    """The device bytes a session entry's bug needs one case to take (0: any worker will do)."""
    return int(entry.get("memory", 0))


def fits(entry: dict, room: int | None) -> bool:
    """Whether a worker whose case budget is `room` bytes (None: unbounded) can run `entry`'s bug's cases."""
    return room is None or need(entry) <= room


def deal(entries: list[dict], workers: int, rooms: list[int | None] | None = None) -> list[list[dict]]:
    """`entries` split over `workers` lists: longest first to the least loaded worker with room for it (its
    ``memory`` within the worker's budget in `rooms`; None: no bound), each list slowest first.  Ties keep
    the entries' order; an entry is in exactly one list, or in none when no worker has room for it
    (``homeless`` says which)."""
    workers = max(1, workers)
    return redeal(entries, [0.0] * workers, rooms)


def redeal(entries: list[dict], loads: list[float], rooms: list[int | None] | None = None) -> list[list[dict]]:
    """`deal` onto workers already carrying `loads` (seconds of rows each): the rows of a worker that could
    not start, handed to those still running."""
    loads = list(loads)
    rooms = rooms if rooms is not None else [None] * len(loads)
    hands: list[list[dict]] = [[] for _ in loads]
    for entry in sorted(entries, key=lambda e: -cost(e)):  # sorted() is stable: ties keep their order
        able = [w for w in range(len(loads)) if fits(entry, rooms[w])]
        if not able:
            continue
        i = min(able, key=lambda w: (loads[w], w))
        hands[i].append(entry)
        loads[i] += cost(entry)
    return hands


def homeless(entries: list[dict], rooms: list[int | None]) -> list[dict]:
    """The entries no worker of `rooms` has the memory for."""
    return [e for e in entries if not any(fits(e, r) for r in rooms)]


def help_list(entries: list[dict], ran: set[str], caught: set[str], room: int | None = None) -> list[dict]:
    """What a worker that finished its own rows runs next: the entries not caught yet that it has not run
    and has the memory for (`room`), slowest first (an empty list: nothing to help with)."""
    name = (lambda e: e.get("name", e["spec"]))
    return sorted((e for e in entries if name(e) not in caught and name(e) not in ran and fits(e, room)),
                  key=lambda e: -cost(e))

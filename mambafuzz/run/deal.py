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
"""
from __future__ import annotations


def cost(entry: dict) -> float:
    """A session entry's cost (seconds; 1 when it has none)."""
    return float(entry.get("cost", 1.0))


def deal(entries: list[dict], workers: int) -> list[list[dict]]:
    """`entries` split over `workers` lists: longest first to the least loaded, each list slowest first.
    Ties keep the entries' order; an entry is in exactly one list."""
    workers = max(1, workers)
    loads = [0.0] * workers
    hands: list[list[dict]] = [[] for _ in range(workers)]
    for entry in sorted(entries, key=lambda e: -cost(e)):  # sorted() is stable: ties keep their order
        i = min(range(workers), key=lambda w: (loads[w], w))
        hands[i].append(entry)
        loads[i] += cost(entry)
    return hands


def help_list(entries: list[dict], ran: set[str], caught: set[str]) -> list[dict]:
    """What a worker that finished its own rows runs next: the entries not caught yet that it has not run,
    slowest first (an empty list: nothing to help with)."""
    name = (lambda e: e.get("name", e["spec"]))
    return sorted((e for e in entries if name(e) not in caught and name(e) not in ran), key=lambda e: -cost(e))

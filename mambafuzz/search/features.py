"""What each example exercised, as named buckets: the run's case-space coverage.

"0 findings" says nothing if the strategies never drew a right overlap, an
aliased block, a shift of 1 or a pool past 2 GiB.  ``features(case, verdict)``
turns one example into ``{feature: bucket label}``: its contract's features
(``Contract.features``: overlap kind, shift and size buckets, aliasing,
alignment, layout, ...), then the perturbation, the repetitions and the
verdict.  The fuzz loop hands them to Hypothesis (``hypothesis.event``, so
they land in ``--observe`` records as Tyche's "features") and counts them per
target in a ``Tally``, which also bins repetitions and failing repetitions
into the GPU race map (shift x size x warps x delay) and keeps examples over
time.  ``expected_features`` is what a contract's strategy draws under the
run's profile and options (``Contract.expected_features``, plus the
perturbation's under an amplifying profile): a bucket in it that a run never
drew is warned about.

A feature holding several labels ("none,left") is split again when counted:
the table counts examples that drew each label (``contracts/features.py``).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from mambafuzz import contracts
from mambafuzz.contracts.features import RACE_SHIFT, RACE_SIZE, SEP, bucket, labels_of  # noqa: F401 - public here too

REPS_EDGES = ((0, "0"), (1, "1"), (2, "2-9"), (10, "10-99"), (100, "100-999"), (1000, ">=1000"))
SCHEDULES = {0: "off", 1: "low-warps-slow", 2: "high-warps-slow", 3: "random"}  # kernels/perturb.py's numbers
POSITIONS = {1: "before-load", 2: "load-store"}

# The features every example has, whatever its contract, and their buckets in display order.
GENERIC_BUCKETS: dict[str, tuple[str, ...]] = {
    "perturb": ("none", "warps-only", "delay"),
    "schedule": ("none",) + tuple(SCHEDULES.values()),
    "position": ("none",) + tuple(POSITIONS.values()),
    "num_warps": ("default", "1", "2", "4", "8", "16"),
    "delay_ns": ("0", "500", "2000", "8000"),
    "reps": tuple(label for _, label in REPS_EDGES),
    "verdict": ("pass", "mismatch", "race", "oob", "exception", "compile", "fault", "crash", "hang"),
}
RACE_AXES = ("shift", "size", "num_warps", "delay_ns")

_merged: tuple[tuple, dict[str, tuple[str, ...]]] = ((), {})


def buckets() -> dict[str, tuple[str, ...]]:
    """Every feature and its buckets in display order: every registered contract's ``buckets``, then
    the generic ones.  A feature several contracts declare gets all their labels, each contract's in
    its own order (ties: the first contract's first)."""
    global _merged
    registered = contracts.registered()
    key = tuple((name, id(c), id(c.buckets)) for name, c in registered.items())
    if _merged[0] != key:
        orders: dict[str, list[tuple[str, ...]]] = {}
        for c in registered.values():
            for name, labels in c.buckets.items():
                orders.setdefault(name, []).append(tuple(labels))
        for name, labels in GENERIC_BUCKETS.items():
            orders.setdefault(name, []).append(labels)
        _merged = (key, {name: _merge(lists) for name, lists in orders.items()})
    return dict(_merged[1])


def _merge(orders: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The labels of all `orders`, keeping each one's order where they agree, first seen first."""
    first = {}
    for order in orders:
        for label in order:
            first.setdefault(label, len(first))
    after = {label: set() for label in first}  # label -> the labels some order puts before it
    for order in orders:
        for i, label in enumerate(order):
            after[label].update(order[:i])
    out: list[str] = []
    left = sorted(first, key=first.get)
    while left:  # the first-seen label nothing left must precede (or, orders disagreeing, the first left)
        ready = next((label for label in left if not after[label] & (set(left) - {label})), left[0])
        out.append(ready)
        left.remove(ready)
    return tuple(out)


class _Buckets(Mapping):
    """``buckets()`` as a read-only mapping, built when read (contracts may register late)."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return buckets()[name]

    def __iter__(self):
        return iter(buckets())

    def __len__(self) -> int:
        return len(buckets())


BUCKETS: Mapping[str, tuple[str, ...]] = _Buckets()


def perturb_features(perturb) -> dict[str, str]:
    if perturb is None:
        return {"perturb": "none", "schedule": "none", "position": "none", "num_warps": "default", "delay_ns": "0"}
    position, delay, schedule, _seed, warps = perturb
    delays = delay > 0 and schedule > 0
    return {"perturb": "delay" if delays else "warps-only",
            "schedule": SCHEDULES.get(schedule, str(schedule)) if delays else "none",
            "position": POSITIONS.get(position, str(position)) if delays else "none",
            "num_warps": str(warps), "delay_ns": str(delay if delays else 0)}


def verdict_features(verdict) -> dict[str, str]:
    return {"verdict": verdict.kind or "pass", "reps": bucket(verdict.reps, REPS_EDGES)}


def features(case, verdict=None) -> dict[str, str]:
    """{feature: bucket label} of one example (`verdict` adds the verdict and the repetitions)."""
    return {k: v for k, v in _features(case, verdict).items() if not k.startswith("_")}


def _features(case, verdict=None) -> dict[str, str]:
    """features() with the race map's (shift, size) under RACE_SHIFT / RACE_SIZE."""
    out = dict(contracts.of(case).features(case))
    out.update(perturb_features(getattr(case, "perturb", None)))
    if verdict is not None:
        out.update(verdict_features(verdict))
    return out


# ---------------------------------------------------------------- what a run should draw
def expected_features(contract: str, *, amplify: bool = False, options: dict | None = None) -> dict[str, tuple]:
    """The buckets `contract`'s strategy draws under these options, a few hundred examples each
    (``Contract.expected_features``), and the perturbation's under an amplifying profile."""
    out = dict(contracts.get(contract).expected_features(options or {}))
    if amplify:
        out.update({"perturb": ("none", "warps-only", "delay"), "schedule": tuple(SCHEDULES.values())[1:],
                    "position": tuple(POSITIONS.values()), "num_warps": ("4", "8"),
                    "delay_ns": ("500", "2000", "8000")})
    return out


# ---------------------------------------------------------------- counting
TIMELINE_POINTS = 400   # at most this many (seconds, examples) samples per target; thinned by halves
REJECTION_REASONS = 20  # distinct reasons a target gave for rejecting cases; the rest are counted as one
OTHER_REASONS = "(other reasons)"


class Tally:
    """One target's coverage counts, race-map cells and examples over time (JSON: ``to_json``)."""

    def __init__(self):
        self.examples = 0
        self.counts: dict[str, dict[str, int]] = {}
        self.expected: dict[str, tuple] = {}
        self.race = False                       # bin repetitions into the race map (cuda or perturbed)
        self.cells: dict[tuple, list[int]] = {}  # (shift, size, num_warps, delay_ns) -> [reps, failed reps]
        self.timeline: list[list[float]] = []   # [seconds since the target started, examples so far]
        self.rejections: dict[str, int] = {}    # why the target rejected drawn cases (mambafuzz.reject) -> count
        self._latest: list[float] | None = None
        self._step = 1.0

    def expect(self, contract: str, *, profile=None, device: str = "cpu", options: dict | None = None) -> None:
        self.expected = expected_features(contract, amplify=bool(getattr(profile, "amplify", False)),
                                          options=options)
        self.race = device == "cuda"

    def add(self, case, verdict, seconds: float) -> dict[str, str]:
        """Count one valid example; returns its features."""
        try:
            feats = _features(case, verdict)
        except Exception as exc:  # noqa: BLE001 - coverage must never end a fuzz run; the table shows it
            feats = {"error": type(exc).__name__, **verdict_features(verdict)}
        self.examples += 1
        self._add_cell(case, feats, verdict)
        feats.pop(RACE_SHIFT, None)
        feats.pop(RACE_SIZE, None)
        for name, value in feats.items():
            counts = self.counts.setdefault(name, {})
            for label in labels_of(value):
                counts[label] = counts.get(label, 0) + 1
        self._sample(seconds)
        return feats

    def reject(self, reason: str, n: int = 1) -> None:
        """Count `n` drawn cases the target rejected for `reason` (not valid examples: no coverage)."""
        if reason not in self.rejections and len(self.rejections) >= REJECTION_REASONS:
            reason = OTHER_REASONS
        self.rejections[reason] = self.rejections.get(reason, 0) + n

    @property
    def rejected(self) -> int:
        return sum(self.rejections.values())

    def reasons(self) -> list[tuple[str, int]]:
        """(reason, count) of the target's rejections, most first."""
        return sorted(self.rejections.items(), key=lambda kv: (-kv[1], kv[0]))

    def add_rates(self, case, verdict) -> None:
        """A shrinking candidate's repetitions, into the race map only: it was not drawn, so the coverage
        counts leave it out, but its k/N is a measured rate at its shift, size, warps and delay."""
        if not self._maps(case):
            return
        try:
            feats = _features(case, verdict)
        except Exception:  # noqa: BLE001 - coverage must never end a fuzz run
            return
        self._add_cell(case, feats, verdict)

    def _maps(self, case) -> bool:
        """Whether `case`'s repetitions go into the race map: on a GPU, or perturbed."""
        return self.race or getattr(case, "perturb", None) is not None

    def _add_cell(self, case, feats: dict[str, str], verdict) -> None:
        """Add `verdict`'s repetitions and failing ones to the race-map cell of `feats`."""
        if not self._maps(case):
            return
        key = (feats.get(RACE_SHIFT, "?"), feats.get(RACE_SIZE, "?"), feats.get("num_warps", "?"),
               feats.get("delay_ns", "?"))
        failed = verdict.failures or (1 if verdict.failed else 0)  # a hazard fails its one recorded run
        cell = self.cells.setdefault(key, [0, 0])
        cell[0] += max(verdict.reps, failed)
        cell[1] += failed

    def _sample(self, seconds: float) -> None:
        """A (seconds, examples) point at most once per step; the step doubles whenever the points are
        thinned to half, so a night's session keeps TIMELINE_POINTS of them."""
        self._latest = [round(seconds, 3), self.examples]
        if not self.timeline or seconds - self.timeline[-1][0] >= self._step:
            self.timeline.append(self._latest)
            if len(self.timeline) > TIMELINE_POINTS:
                self.timeline = self.timeline[::2]
                self._step *= 2

    def points(self) -> list[list[float]]:
        """The timeline with the latest example's point at its end."""
        latest = self._latest
        return self.timeline + ([latest] if latest and (not self.timeline or latest != self.timeline[-1]) else [])

    def never_drawn(self) -> dict[str, list[str]]:
        out = {}
        for name, labels in self.expected.items():
            missing = [label for label in labels if not self.counts.get(name, {}).get(label)]
            if missing:
                out[name] = missing
        return out

    def to_json(self) -> dict[str, Any]:
        """The JSON report's ``coverage``, ``race_map`` and ``timeline`` keys (never_drawn is derived)."""
        every = buckets()
        order = lambda name, counts: sorted(counts, key=lambda label: (  # noqa: E731
            every.get(name, ()).index(label) if label in every.get(name, ()) else len(every.get(name, ())), label))
        coverage = {"examples": self.examples,
                    "features": {name: {label: counts[label] for label in order(name, counts)}
                                 for name, counts in self.counts.items()},
                    "expected": {name: list(labels) for name, labels in self.expected.items()},
                    "never_drawn": self.never_drawn()}
        race_map = None
        if self.race or self.cells:
            race_map = {"axes": list(RACE_AXES),
                        "cells": [[*key, reps, failed] for key, (reps, failed) in sorted(self.cells.items())]}
        return {"coverage": coverage, "race_map": race_map, "timeline": [list(p) for p in self.points()],
                "rejected_by_target": dict(self.reasons())}

    @classmethod
    def from_json(cls, body: dict) -> "Tally":
        """From a TargetReport's JSON (absent keys: an empty tally, as in reports written before them)."""
        tally = cls()
        coverage = body.get("coverage") or {}
        tally.examples = int(coverage.get("examples", 0))
        tally.counts = {name: {str(k): int(v) for k, v in counts.items()}
                        for name, counts in (coverage.get("features") or {}).items()}
        tally.expected = {name: tuple(labels) for name, labels in (coverage.get("expected") or {}).items()}
        race_map = body.get("race_map")
        if race_map:
            tally.race = True
            for *key, reps, failed in race_map.get("cells", []):
                tally.cells[tuple(str(k) for k in key)] = [int(reps), int(failed)]
        tally.timeline = [[float(t), int(n)] for t, n in body.get("timeline") or []]
        for reason, n in (body.get("rejected_by_target") or {}).items():
            tally.reject(str(reason), int(n))
        return tally

    @classmethod
    def merged(cls, tallies: list["Tally"]) -> "Tally":
        """Several workers' tallies of one target: counts and cells add up; the timelines add up in time."""
        out = cls()
        for t in tallies:
            out.examples += t.examples
            for name, counts in t.counts.items():
                mine = out.counts.setdefault(name, {})
                for label, n in counts.items():
                    mine[label] = mine.get(label, 0) + n
            out.expected = {**t.expected, **out.expected}
            out.race |= t.race
            for key, (reps, failed) in t.cells.items():
                cell = out.cells.setdefault(key, [0, 0])
                cell[0] += reps
                cell[1] += failed
            for reason, n in t.rejections.items():
                out.reject(reason, n)
        lines = [t.points() for t in tallies]
        for when in sorted({p[0] for line in lines for p in line}):
            total = sum(max((n for s, n in line if s <= when), default=0) for line in lines)
            out.timeline.append([when, total])
        return out


# ---------------------------------------------------------------- Hypothesis and the summary
def emit(feats: dict[str, str]) -> None:
    """Each feature as a Hypothesis event (``features`` in observability records; ``--hypothesis-show-statistics``)."""
    from hypothesis import event  # deferred: Hypothesis loads with the first strategy, not with the parser

    for name, value in feats.items():
        event(name, value)


def observe(tally: Tally, case, verdict, seconds: float) -> None:
    """The fuzz loop's hook: count the example and tell Hypothesis its features."""
    emit(tally.add(case, verdict, seconds))


def observe_rejection(tally: Tally, reason: str) -> None:
    """The fuzz loop's hook for a case the target rejected: count it, tell Hypothesis why."""
    tally.reject(reason)
    emit({"rejected": reason})


def summary_lines(target: str, tally: Tally, *, warn: bool = True, width: int = 80,
                  options: dict | None = None) -> list[str]:
    """Plain lines, each at most `width` columns: per feature how many examples drew each bucket (under
    the contract `options` that narrowed the draws, named in the head line); then (with `warn`) the
    expected buckets never drawn; then the cases the target rejected, by reason."""
    rejected = rejection_lines(target, tally, width=width)
    if not tally.examples:
        return rejected
    narrowed = "".join(f", {k}={v}" for k, v in (options or {}).items())
    lines = textwrap.wrap(f"coverage of {target} ({tally.examples} examples{narrowed}):", width=width,
                          subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    body = tally.to_json()["coverage"]["features"]
    for name, counts in body.items():
        lines += pack(f"  {name}: ", [f"{label} {n}" for label, n in counts.items()], ", ", width)
    if warn:
        lines += warning_lines(target, tally, width=width)
    return lines + rejected


def rejection_lines(target: str, tally: Tally, *, width: int = 80) -> list[str]:
    """How many drawn cases the target rejected (``mambafuzz.reject``), one line per reason, most first."""
    if not tally.rejections:
        return []
    head = textwrap.wrap(f"rejected by {target} ({tally.rejected} drawn cases, not counted as examples):",
                         width=width, subsequent_indent="    ", break_on_hyphens=False)
    body = [f"  {n}: {reason}" for reason, n in tally.reasons()]
    return head + [text if len(text) <= width else text[:width - 3] + "..." for text in body]


def warning_lines(target: str, tally: Tally, *, width: int = 80) -> list[str]:
    missing = tally.never_drawn()
    if not missing or not tally.examples:
        return []
    items = [f"{name} {'|'.join(labels)}" for name, labels in missing.items()]
    head = textwrap.wrap(f"WARNING {target}: never drawn in {tally.examples} examples:", width=width,
                         subsequent_indent="    ", break_on_hyphens=False)
    return head[:-1] + pack(head[-1] + " ", items, "; ", width)


def pack(first: str, items: list[str], sep: str, width: int, indent: str = "      ") -> list[str]:
    """`first` then the items, `sep` between them, in lines of at most `width` columns broken only
    between items (an item longer than a line is cut)."""
    lines, line = [], first
    for i, item in enumerate(items):
        piece = item + (sep.rstrip() if i < len(items) - 1 else "")
        if len(line) + len(piece) > width and line.strip() and line != first:
            lines.append(line.rstrip())
            line = indent
        line += piece + (" " if i < len(items) - 1 else "")
    lines.append(line.rstrip())
    return [text if len(text) <= width else text[:width - 3] + "..." for text in lines]


# ---------------------------------------------------------------- --observe
def run_observed(test: Callable[[], None], folder: str | None, target: str) -> None:
    """Run one Hypothesis test; with `folder`, every observation it makes is appended to
    ``folder/<date>_testcases.jsonl`` (``_info.jsonl`` for the others), one JSON object a line, the
    records Tyche reads, with ``property`` set to the target's name.  Line coverage is not collected
    (on Python 3.11 it would slow the interpreter several times over)."""
    if not folder:
        test()
        return

    from hypothesis.internal import observability as obs  # deferred: Hypothesis loads with the first strategy, not with the parser

    Path(folder).mkdir(parents=True, exist_ok=True)
    day = datetime.date.today().isoformat()

    def deliver(observation) -> None:
        body = _jsonable(observation)
        if isinstance(body, dict) and "property" in body:
            body["property"] = target
        kind = "testcases" if isinstance(body, dict) and body.get("type") == "test_case" else "info"
        line = (json.dumps(body, default=repr) + "\n").encode()
        fd = os.open(os.path.join(folder, f"{day}_{kind}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write per record: lines of several workers never interleave
        finally:
            os.close(fd)

    collect = getattr(obs, "OBSERVABILITY_COLLECT_COVERAGE", None)
    add = getattr(obs, "add_observability_callback", None)
    remove = getattr(obs, "remove_observability_callback", None)
    if add is None:  # Hypothesis before the callback functions: the list
        add, remove = obs.TESTCASE_CALLBACKS.append, obs.TESTCASE_CALLBACKS.remove
    obs.OBSERVABILITY_COLLECT_COVERAGE = False
    add(deliver)
    try:
        test()
    finally:
        remove(deliver)
        if collect is not None:
            obs.OBSERVABILITY_COLLECT_COVERAGE = collect


def _jsonable(observation):
    if isinstance(observation, dict):
        return observation
    try:
        from hypothesis.strategies._internal.utils import to_jsonable  # deferred: Hypothesis loads with the first strategy, not with the parser

        return to_jsonable(observation, avoid_realization=False)
    except Exception:  # noqa: BLE001 - an older or newer Hypothesis: the dataclass fields will do

        return dataclasses.asdict(observation) if dataclasses.is_dataclass(observation) else {"repr": repr(observation)}

"""The zoo on several workers: rows dealt out by cost, slowest first, a worker done early helping (issue 44).

Parent-side logic only (no worker is spawned): ``run.deal``, ``kernels.zoo.order`` and ``Session._restart``
with a fake finished worker.
"""
import time
from types import SimpleNamespace

from mambafuzz.run import deal as deal_mod
from mambafuzz.control.clock import Deadline
from mambafuzz.run.session import HELP_AFTER, Session, SessionOptions
from mambafuzz.search.fuzz import TargetReport


def entry(name, cost=None):
    return {"spec": name, "name": name, "contract": "batch_memcpy", "overlap": "full",
            **({"cost": cost} if cost is not None else {})}


def names(hand):
    return [e["name"] for e in hand]


def test_deal_gives_each_entry_to_one_worker_slowest_first_and_balances_cost():
    entries = [entry("a", 1), entry("b", 13), entry("c", 2), entry("d", 12), entry("e", 8), entry("f", 1)]
    hands = deal_mod.deal(entries, 3)
    assert sorted(n for h in hands for n in names(h)) == sorted(names(entries))  # each exactly once
    assert [names(h)[0] for h in hands] == ["b", "d", "e"]  # the three slowest start at once
    for h in hands:
        costs = [e["cost"] for e in h]
        assert costs == sorted(costs, reverse=True)  # a worker's rows slowest first
    loads = [sum(e["cost"] for e in h) for h in hands]
    assert max(loads) - min(loads) <= 2  # 13 | 12 + 1 | 8 + 2 + 1 (longest first to the least loaded)


def test_deal_without_costs_keeps_the_order_round_robin_and_one_worker_takes_all():
    entries = [entry(n) for n in "abcde"]
    assert [names(h) for h in deal_mod.deal(entries, 2)] == [["a", "c", "e"], ["b", "d"]]
    assert names(deal_mod.deal(entries, 1)[0]) == list("abcde")
    assert deal_mod.deal(entries[:1], 3)[1:] == [[], []]  # more workers than rows: some get none


def test_help_list_is_what_is_not_caught_and_not_run_here_slowest_first():
    entries = [entry("a", 1), entry("b", 13), entry("c", 2), entry("d", 12)]
    assert names(deal_mod.help_list(entries, ran={"a"}, caught={"d"})) == ["b", "c"]
    assert deal_mod.help_list(entries, ran={"a", "b"}, caught={"c", "d"}) == []


def test_zoo_order_starts_the_measured_slow_rows_first():
    from mambafuzz.kernels import registry, zoo

    rows = registry.zoo_targets()
    ordered = [t.zoo_id for t in zoo.order(rows, "cuda")]
    slow = zoo.COST["cuda"]
    assert set(ordered[:len(slow)]) == set(slow) and ordered[0] == max(slow, key=slow.get)
    costs = [zoo.cost(r, "cuda") for r in ordered]
    assert costs == sorted(costs, reverse=True)
    assert sorted(ordered) == sorted(t.zoo_id for t in rows)
    assert zoo.cost("NOT-A-ROW", "cuda") == zoo.DEFAULT_COST
    rest = [t.zoo_id for t in rows if t.zoo_id not in zoo.COST["cuda"]]
    assert ordered[len(slow):] == rest  # the others keep the registry's order


class _Started(Exception):
    pass


def _session(deal=True, seconds_left=60.0):
    entries = [entry("a", 1), entry("b", 13), entry("c", 2), entry("d", 12)]
    sopts = SessionOptions(device="cpu", options={"mode": "race"}, workers=2, state_dir=None, deal=deal,
                           deadline=Deadline(seconds_left, time.monotonic() + seconds_left))
    session = Session(entries, sopts)
    started = []
    session._start = lambda index, gpu, remaining, ctx: started.append((index, names(remaining))) or "new"
    return session, started


def _done_worker(index, ran):
    spec = SimpleNamespace(index=index, gpu=None)
    # a worker that said bye is often killed while it exits (exit code -9): "finished" is what counts
    return SimpleNamespace(spec=spec, process=SimpleNamespace(exitcode=-9), remaining=[], finished=True,
                           ready=True), set(ran)


def test_a_worker_done_with_its_rows_helps_with_those_not_caught():
    session, started = _session()
    w, ran = _done_worker(0, {"b", "c"})
    session._ran[0] = ran
    session.reports["c"] = TargetReport("c", "batch_memcpy", finding=object())  # caught: needs no help
    live = []
    session._restart(w, False, live, None)
    assert started == [(0, ["d", "a"])]  # the uncaught rows it has not run, slowest first
    assert live == ["new"]


def test_no_help_near_the_end_or_without_dealing_or_with_nothing_left():
    session, started = _session(seconds_left=HELP_AFTER - 1)
    w, session._ran[0] = _done_worker(0, {"b"})
    session._restart(w, False, [], None)
    session, started2 = _session(deal=False)
    w, session._ran[0] = _done_worker(0, {"b"})
    session._restart(w, False, [], None)
    session, started3 = _session()
    w, session._ran[0] = _done_worker(0, {"a", "b", "c", "d"})
    session._restart(w, False, [], None)
    assert started == started2 == started3 == []

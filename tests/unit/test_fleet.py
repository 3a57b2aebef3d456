"""The fleet's parts against a local redis-server: leases, buckets, the outbox, confirmation, collect.

One redis-server for the module (emptied before each test); every test here runs in this process
and well under 5 s.  The campaigns of several processes are in tests/integration/test_fleet_campaign.py.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import RedisServer, fuzz_options, mf, one_line_error

TARGETS = [{"name": n, "spec": n, "contract": "batch_memcpy", "overlap": "full"} for n in ("t.a", "t.b", "t.c")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("hub")).start()
    yield srv
    srv.stop()


@pytest.fixture
def hub(server):
    client = server.client()
    client.flushdb()
    return client


def _leases(client, worker, targets=TARGETS, ttl=0.4, cap=0):
    from mambafuzz.fleet.hub import Keys
    from mambafuzz.fleet.leases import Leases

    return Leases(client, Keys("camp"), worker, targets, ttl, cap)


# ---------------------------------------------------------------- leases
def test_an_exclusive_lease_lapses_and_goes_to_the_next_worker(hub):
    w1, w2, w3 = (_leases(hub, f"w{i}", TARGETS[:2], cap=1) for i in (1, 2, 3))
    assert w1.take().target == "t.a" and w2.take().target == "t.b"
    assert w3.take() == 2  # every open target has its one worker: wait
    time.sleep(0.5)        # w1 and w2 stop renewing: their leases lapse
    assert w2.renew("t.b") == "retaken"  # lapsed but free: taken again
    got = w3.take()
    assert got.target == "t.a" and got.open == 2
    assert w1.renew("t.a") == "lost"     # w3 holds it now
    assert w3.renew("t.a") == "ok"
    assert w2.finish("t.b", "B", "finding") and w2.renew("t.b") == "done"
    assert not w3.finish("t.a", "C", "time")  # its share ran out: open again, given back
    assert w1.take().target == "t.a" and w1.finish("t.a", "A", "max-examples")
    assert w1.take() is None and w2.take() is None  # every target done


def test_without_a_cap_a_worker_joins_the_open_target_that_needs_it_most(hub):
    from mambafuzz.fleet.hub import Keys

    ws = [_leases(hub, f"w{i}", ttl=30) for i in range(5)]
    assert [w.take().target for w in ws[:3]] == ["t.a", "t.b", "t.c"]  # a free target first, in order
    hub.hset(Keys("camp").fuzzed, mapping={"t.a": 9.0, "t.b": 1.0, "t.c": 5.0})
    assert ws[3].take().target == "t.b"  # none free: the fewest workers, then the fewest seconds fuzzed
    lease = ws[4].take()
    assert lease.target == "t.c" and lease.workers == 5 and lease.open == 3


def test_the_keeper_ends_a_turn_another_worker_finished_and_sends_its_counts(hub):
    from mambafuzz.fleet.leases import Keeper, Counts

    a, b = _leases(hub, "wa", ttl=30), _leases(hub, "wb", ttl=30)
    a.take(), b.take()
    keeper = Keeper(b, "B", every=10.0, max_examples=50)
    keeper.hold("t.b")
    keeper.progress(7, 1.5)
    keeper.beat()
    assert keeper.turn_over() is None and b.examples("t.b") == 7
    keeper.progress(9, 2.0)
    a.finish("t.b", "A", "finding")  # another worker finished it
    keeper.beat()
    assert keeper.turn_over() == "another worker finished this target"
    assert b.examples("t.b") == 9  # only what was new was added
    counts = Counts(examples=60, seconds=1.0)
    a.send_counts("t.a", "A", counts)
    keeper.hold("t.a")
    keeper.beat()
    assert keeper.turn_over() == "the boxes ran its examples"


# ---------------------------------------------------------------- buckets
def _race(first, second, *, offset=1, contract="batch_memcpy", target="zoo.X"):
    """A race record: `first` and `second` are 'file.py:line op' (the op store or load)."""
    (first_line, first_op), (second_line, second_op) = first.split(), second.split()
    hazard = {"kind": "intra-program", "offset": offset,
              "first": {"op": first_op, "line": f"/a/b/mambafuzz/kernels/{first_line}: tl.{first_op}(x)"},
              "second": {"op": second_op, "line": f"/c/mambafuzz/kernels/{second_line}: tl.{second_op}(y)"}}
    return {"contract": contract, "target": target, "device": "cpu",
            "verdict": {"kind": "race", "hazards": [hazard]}}


def _mismatch(where, *, outputs=()):
    return {"contract": "batch_memcpy", "target": "zoo.Y", "device": "cuda",
            "verdict": {"kind": "mismatch", "mismatch": {"count": 1, "total": 9, "outputs": list(outputs),
                                                         "first": [{"offset": 8, "where": where}]}}}


def test_a_bucket_is_what_failed_not_where_the_case_put_it():
    from mambafuzz.fleet.buckets import bucket_key, signature

    v = "mambafuzz 1, hypothesis 6, source abc"
    st, ld = "copy.py:214 store", "copy.py:210 load"
    race = bucket_key(_race(st, ld, offset=1), v)[0]
    # the same pair of kernel lines in the other order, at another byte, from another checkout: one bucket
    assert bucket_key(_race(ld, st, offset=77), v)[0] == race
    assert bucket_key(_race(st, "copy.py:199 load"), v)[0] != race          # another line: another bug
    assert bucket_key(_race(st, ld, target="zoo.Z"), v)[0] != race          # another target
    assert bucket_key(_race(st, ld), v + "x")[0] != race                    # another version
    assert signature(_race(st, ld)) == "intra-program: copy.py:210 (load) and copy.py:214 (store)"
    # a mismatch: the tensors and the region of the first difference, its numbers dropped
    one = signature(_mismatch("state 0 (conv) block 3 byte 12 (data)"))
    assert one == signature(_mismatch("state 2 (conv) block 40 byte 1 (data)"))
    assert one != signature(_mismatch("state 0 (conv) block 3 byte 12 (padding)"))
    assert signature(_mismatch("slot 1", outputs=[{"argument": "out", "where": "x"}])).startswith("arena, out differ")
    # a fault: the access the CPU witness's bounds fence stopped, else the message without addresses
    fault = {"contract": "c", "target": "t", "device": "cuda", "verdict": {"kind": "fault", "fault":
             "CUDA error: an illegal memory access at 0x7f3a12 was encountered"}}
    assert signature(fault) == "fault: CUDA error: an illegal memory access at # was encountered"
    fault["witness"] = {"status": "witnessed", "verdict": {"hazards": [
        {"kind": "out-of-bounds", "first": {"op": "load", "line": "k.py:40: x = tl.load(p)"}}]}}
    assert signature(fault) == "fault: out-of-bounds at k.py:40 (load)"


def _pushed(lineage, record, box="A", seq=1, found_at=100.0, version="v1"):
    from mambafuzz.fleet.buckets import Pushed

    return Pushed(lineage, seq, record, {"box": box, "kind": "cpu"}, version, found_at)


def _case_record(copies, where="row 0 dst byte 0 (src byte 0)"):
    return {"contract": "batch_memcpy", "target": "zoo.Y", "device": "cpu",
            "case": {"contract": "batch_memcpy", "arena_size": 128, "copies": copies, "seed": 1},
            "verdict": {"kind": "mismatch", "mismatch": {"count": 1, "total": 9, "outputs": [],
                                                         "first": [{"offset": 8, "where": where}]}}}


def test_two_boxes_finding_one_bug_make_one_bucket_counted_twice_with_the_smaller_case(hub):
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.hub import Keys

    keys = Keys("camp")
    big, small = _case_record([[0, 64, 40], [64, 0, 8]]), _case_record([[0, 8, 1]])
    key = buckets.push(hub, keys, _pushed("A:1", big, "A", found_at=105.0))
    assert buckets.push(hub, keys, _pushed("B:1", small, "B", found_at=101.0)) == key
    (b,) = buckets.read(hub, keys)
    assert (b.count, b.boxes, b.fields["best"], b.first_found) == (2, ["A", "B"], "B:1", 101.0)
    assert b.state == buckets.PENDING and not b.counts and hub.sismember(keys.pending, key)
    # a newer version of A's finding, smaller, is the best; its older version arriving late changes nothing
    buckets.push(hub, keys, _pushed("A:1", _case_record([[0, 4, 1]]), "A", seq=2))
    buckets.push(hub, keys, _pushed("A:1", big, "A", seq=1))
    (b,) = buckets.read(hub, keys)
    assert b.count == 2 and b.fields["best"] == "A:1" and b.best["case"]["copies"] == [[0, 4, 1]]
    # a lineage that shrinks into another region leaves its first bucket (which forgets it)
    other = buckets.push(hub, keys, _pushed("B:1", _case_record([[0, 8, 1]], "outside every destination"),
                                            "B", seq=2))
    assert other != key
    got = {b.key: b for b in buckets.read(hub, keys)}
    assert got[key].count == 1 and got[key].boxes == ["A"] and got[other].boxes == ["B"]


def test_a_bucket_counts_once_a_replay_confirms_it_and_keeps_counting_while_a_smaller_case_waits(hub):
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.hub import Keys

    keys = Keys("camp")
    key = buckets.push(hub, keys, _pushed("A:1", _case_record([[0, 64, 40]])))
    buckets.record_confirmation(hub, keys, key, "A:1", buckets.UNCONFIRMED, "could not run", "w")
    assert buckets.read(hub, keys)[0].state == buckets.PENDING  # tried again later
    buckets.record_confirmation(hub, keys, key, "A:1", buckets.CONFIRMED, "still failing", "w")
    (b,) = buckets.read(hub, keys)
    assert b.counts and b.state == buckets.CONFIRMED and not hub.sismember(keys.pending, key)
    buckets.push(hub, keys, _pushed("B:1", _case_record([[0, 8, 1]]), "B"))
    (b,) = buckets.read(hub, keys)
    assert b.state == buckets.PENDING and b.counts  # the new best waits; the confirmed one still counts
    assert b.confirmed["case"]["copies"] == [[0, 64, 40]] and b.best["case"]["copies"] == [[0, 8, 1]]
    buckets.record_confirmation(hub, keys, key, "A:1", buckets.CONFIRMED, "late word on an old best", "w")
    assert buckets.read(hub, keys)[0].state == buckets.PENDING  # about a case that is no longer the best
    for _ in range(buckets.CONFIRM_TRIES):
        buckets.record_confirmation(hub, keys, key, "B:1", buckets.UNCONFIRMED, "child died", "w")
    assert buckets.read(hub, keys)[0].state == buckets.UNCONFIRMED and not hub.sismember(keys.pending, key)
    buckets.push(hub, keys, _pushed("A:1", _case_record([[0, 64, 40]]), "A", seq=2))  # known lineage: no news
    assert buckets.read(hub, keys)[0].state == buckets.UNCONFIRMED
    buckets.push(hub, keys, _pushed("C:1", _case_record([[0, 16, 1]]), "C"))  # seen again: replayed again
    (b,) = buckets.read(hub, keys)
    assert b.state == buckets.PENDING and b.fields["best"] == "B:1" and hub.sismember(keys.pending, key)


def test_a_target_done_for_a_finding_no_replay_upholds_is_open_again(hub):
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.confirm import reopen_if_unfounded
    from mambafuzz.fleet.hub import Keys

    keys = Keys("camp")
    key = buckets.push(hub, keys, _pushed("A:1", _case_record([[0, 8, 1]])))
    hub.hset(keys.done, "zoo.Y", json.dumps({"stop": "finding"}))
    assert not reopen_if_unfounded(hub, keys, "zoo.Y")  # its bucket still waits for a replay
    buckets.record_confirmation(hub, keys, key, "A:1", buckets.NOT_REPRODUCED, "fixed: 0/100", "w")
    assert reopen_if_unfounded(hub, keys, "zoo.Y") and not hub.hexists(keys.done, "zoo.Y")
    hub.hset(keys.done, "zoo.Y", json.dumps({"stop": "max-examples"}))
    assert not reopen_if_unfounded(hub, keys, "zoo.Y")  # done for its examples: stays done


# ---------------------------------------------------------------- the outbox
def test_a_finding_waits_in_the_outbox_while_the_hub_is_down_and_goes_when_it_answers(hub, server, tmp_path):
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.hub import HubDown, Keys, connect
    from mambafuzz.fleet.outbox import Outbox

    box = Outbox(tmp_path, "camp")
    box.put(_pushed("A:1", _case_record([[0, 8, 1]])))
    box.put(_pushed("A:1", _case_record([[0, 4, 1]]), seq=2))  # the newer version replaces it
    down = connect(f"redis://127.0.0.1:{server.port + 1 if server.port < 65535 else 1}/0", timeout=0.5)
    assert box.flush(lambda c, item: buckets.push(down, Keys(c), item)) == (0, 1)
    assert box.waiting() == 1 and not any(p.suffix == ".json" for p in tmp_path.rglob("*"))  # no crash file
    # another live process's entry is its own to send; a dead one's is this process's to adopt
    theirs = Outbox(tmp_path, "camp", owner=f"{box.owner.rpartition(':')[0]}:1")  # pid 1 lives
    theirs.put(_pushed("B:1", _case_record([[0, 8, 2]]), "B"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = Outbox(tmp_path, "camp", owner=f"{box.owner.rpartition(':')[0]}:{gone.stdout.strip()}")
    orphan.put(_pushed("C:1", _case_record([[0, 8, 3]]), "C"))
    assert box.flush(lambda c, item: buckets.push(hub, Keys(c), item)) == (2, 0)
    (b,) = buckets.read(hub, Keys("camp"))
    assert sorted(b.boxes) == ["A", "C"] and b.best["case"]["copies"] == [[0, 4, 1]]
    assert box.waiting() == 1  # B's, until its owner sends it or `collect --from` does
    assert Outbox(tmp_path).flush(lambda c, item: buckets.push(hub, Keys(c), item), everyone=True) == (1, 0)
    assert box.waiting() == 0 and buckets.read(hub, Keys("camp"))[0].boxes == ["A", "B", "C"]
    with pytest.raises(HubDown):
        buckets.push(down, Keys("camp"), _pushed("D:1", _case_record([[0, 8, 1]])))


def test_the_corpus_in_redis_carries_on_when_redis_does_not_answer():
    from mambafuzz.search.redisdb import HubDatabase

    db = HubDatabase("redis://127.0.0.1:1/0")  # nothing listens on port 1
    db.save(b"k", b"v")
    db.move(b"k", b"j", b"v")
    db.delete(b"k", b"v")
    assert list(db.fetch(b"k")) == []


# ---------------------------------------------------------------- versions and the corpus key
def test_a_targets_digest_follows_its_source_and_the_corpus_key_keeps_versions_apart(tmp_path, monkeypatch):
    import importlib

    from mambafuzz.fleet import box

    (tmp_path / "helper_k.py").write_text("def inner(x):\n    return x + 1\n")
    (tmp_path / "user_k.py").write_text("import helper_k\n\ndef target(x):\n    return helper_k.inner(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    user = importlib.import_module("user_k")
    files = {Path(f).name for f in box.source_files(user.target)}
    assert files == {"user_k.py", "helper_k.py"}  # what it calls, not torch or the standard library
    before = box.target_digest(user.target)
    (tmp_path / "helper_k.py").write_text("def inner(x):\n    return x + 2\n")
    assert box.target_digest(user.target) != before  # the kernel it calls changed: another digest
    key = box.corpus_key(user.target)
    assert box.mambafuzz_version() in key and "hypothesis" in key and box.target_digest(user.target) in key


def test_a_corpus_key_gives_a_target_a_corpus_of_its_own(tmp_path):
    from mambafuzz.kernels import registry
    from mambafuzz.search.fuzz import fuzz_target

    target = registry.get("zoo.TAIL-DROP")  # found in a few examples; its failure is what the corpus keeps
    keys, new, firsts = set(), [], []
    for i, corpus_key in enumerate(("", "mambafuzz 1, source a", "mambafuzz 1, source a", "mambafuzz 2, source a")):
        report = fuzz_target(target, fuzz_options(tmp_path, seed=i, shrink_budget=1, corpus_key=corpus_key,
                                                  crashes_dir=tmp_path / f"c{i}"))
        firsts.append(report.finding.examples_to_first)
        now = {p.name for p in (tmp_path / "db").iterdir()}
        new.append(len(now - keys))
        keys |= now
    assert new[0] and new[1] and not new[2] and new[3], new  # a corpus per key: the same key twice shares one
    assert firsts[2] == 1, firsts  # the same key: its saved failure replayed first


def test_a_turn_the_fleet_ends_stops_between_examples_as_fleet(tmp_path):
    from mambafuzz.kernels import registry
    from mambafuzz.search.fuzz import fuzz_target

    asked = []

    def over():
        asked.append(1)
        return "another worker finished this target" if len(asked) > 4 else None

    report = fuzz_target(registry.get("torch.batch_memcpy"), fuzz_options(tmp_path, turn_over=over))
    assert report.stop == "fleet" and report.examples == 4 and report.detail == "another worker finished this target"


def _picky(src_ptrs, dst_ptrs, sizes, *, arena):
    """A memmove that drops a byte only for rows of exactly 40 and 9 bytes: no draw finds it soon."""
    base = arena.data_ptr()
    wrong = sizes.tolist() == [40, 9]
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        n -= wrong
        arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()


def test_a_turn_tries_the_cases_other_boxes_found_before_it_draws(hub, tmp_path):
    from mambafuzz.contracts import case_from_json
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.hub import Keys
    from mambafuzz.kernels.registry import Target
    from mambafuzz.search.fuzz import fuzz_target

    keys = Keys("camp")
    theirs = _case_record([[0, 64, 40], [105, 118, 9]])  # a box died shrinking it
    for lineage, record, version in (("A:1", theirs, "v1"), ("B:1", _case_record([[0, 8, 1]]), "v2")):
        buckets.push(hub, keys, _pushed(lineage, {**record, "target": "t:picky"}, version=version))
    seeds = buckets.cases_of(hub, keys, "t:picky", "v1")
    assert seeds == [theirs["case"]]  # v2's case was shaped for another version: not tried here
    target = Target("t:picky", "batch_memcpy", "user", "full", "picky", _picky)
    opts = fuzz_options(tmp_path, seed=5, database=None, shrink_budget=2, max_examples=30)
    assert fuzz_target(target, opts).finding is None  # drawing alone does not find it
    report = fuzz_target(target, fuzz_options(tmp_path, seed=5, database=None, shrink_budget=2, max_examples=30,
                                              seeds=tuple(case_from_json(c) for c in seeds)))
    assert report.finding.examples_to_first == 1  # the first example run is theirs


# ---------------------------------------------------------------- confirm and collect
@pytest.fixture(scope="module")
def tail_drop(tmp_path_factory):
    """A real finding (zoo.TAIL-DROP on the CPU, shrunk) and its crash file's record."""
    from mambafuzz.kernels import registry
    from mambafuzz.search.fuzz import fuzz_target

    folder = tmp_path_factory.mktemp("tail")
    report = fuzz_target(registry.get("zoo.TAIL-DROP"), fuzz_options(folder, seed=1, database=None,
                                                                     shrink_budget=2))
    return json.loads(report.finding.path.read_text())


def _join(hub, name="camp"):
    from mambafuzz.fleet import hub as hubmod
    from mambafuzz.fleet.hub import Keys

    spec = {"targets": [{"name": "zoo.TAIL-DROP", "contract": "batch_memcpy", "overlap": "full"}],
            "options": {"min_examples": 1}}
    hubmod.join(hub, Keys(name), spec)
    return Keys(name), spec


def test_collect_writes_the_confirmed_bucket_as_a_crash_file_replay_and_report_read(hub, server, tail_drop,
                                                                                   tmp_path):
    from mambafuzz import findings
    from mambafuzz.findings.replay import STILL_FAILING, replay_one
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.collect import collect
    from mambafuzz.fleet.confirm import confirm_pending
    from mambafuzz.report.load import load

    from mambafuzz.fleet.outbox import Outbox

    keys, _ = _join(hub)
    case = tail_drop["case"]  # box A's case is bigger: one more row (TAIL-DROP drops every row's tail)
    bigger = {**tail_drop, "case": {**case, "arena_size": 64, "copies": case["copies"] + [[40, 50, 8]]}}
    Outbox(tmp_path / "crashes-A", "camp", owner="elsewhere:1").put(_pushed("A:1", bigger, "A", found_at=time.time()))
    out = collect(server.url, tmp_path / "out", from_dirs=[tmp_path / "crashes-A"])  # box A ended with the hub down
    assert out.sent == 1 and not Outbox(tmp_path / "crashes-A").waiting()
    assert out.files == [] and out.code == 3  # found, not confirmed yet: no file, not done
    assert confirm_pending(hub, keys, kind="cuda H200", corpus_key=lambda t: "v1", device="cuda",
                           worker="w", timeout=10) == []  # another kind of box: not its word to say
    (done,) = confirm_pending(hub, keys, kind="cpu", corpus_key=lambda t: "v1", device="cpu", worker="w",
                              timeout=10)
    assert done[1] == buckets.CONFIRMED
    hub.hset(keys.done, "zoo.TAIL-DROP", json.dumps({"stop": "finding"}))
    out = collect(server.url, tmp_path / "out")
    (path,) = out.files
    assert out.code == 1 and path.parent == tmp_path / "out" / "batch_memcpy" / "zoo.TAIL-DROP"
    record = findings.load(path)
    assert replay_one(record, device="cpu", reps=None, mode=None).status == STILL_FAILING
    assert str(path.absolute()) in record.body["replay"]
    fleet = record.body["fleet"]
    assert fleet["campaign"] == "camp" and fleet["count"] == 1 and fleet["boxes"] == ["A"]
    report = load(tmp_path / "out")
    assert report.kind == "campaign" and report.targets[0].finding is not None
    assert report.campaign["buckets"][0]["file"] == str(path.relative_to(tmp_path / "out"))
    pytest.importorskip("plotly")
    from mambafuzz.report.render import render

    page = render(report)
    campaign = page[page.index('id="campaign"'):page.index('id="findings"')]
    assert "Examples per target per box" in campaign and ">A<" in campaign and "zoo.TAIL-DROP" in campaign
    assert (tmp_path / "out" / "campaign.txt").read_text().startswith("campaign camp (complete")
    # another box finds a smaller case: collecting again replaces the file (after its replay)
    buckets.push(hub, keys, _pushed("B:1", tail_drop, "B"))
    confirm_pending(hub, keys, kind="cpu", corpus_key=lambda t: "v1", device="cpu", worker="w", timeout=10)
    (again,) = collect(server.url, tmp_path / "out").files
    assert again != path and not path.exists() and json.loads(again.read_text())["fleet"]["count"] == 2


def test_collect_and_fuzz_say_what_is_wrong_in_one_line(hub, server, tmp_path):
    _join(hub, "one")
    _join(hub, "two")
    one_line_error(mf("collect", server.url, cwd=tmp_path), "holds 2 campaigns", "--campaign")
    one_line_error(mf("collect", server.url, "--campaign", "three", cwd=tmp_path), "no campaign 'three'")
    one_line_error(mf("collect", "http://x", cwd=tmp_path), "not a Redis URL")
    one_line_error(mf("collect", f"redis://127.0.0.1:{server.port - 1}/0", cwd=tmp_path), "does not answer")


def test_fuzz_with_a_bad_hub_or_campaign_is_one_line_before_anything_runs(hub, server, tmp_path, capsys):
    from mambafuzz.cli import main

    base = ["fuzz", "--target", "torch.batch_memcpy", "--device", "cpu", "--crashes-dir", str(tmp_path)]
    for extra, needle in ((["--fleet", "http://127.0.0.1/0"], "not a Redis URL"),
                          (["--fleet", f"redis://127.0.0.1:{server.port - 1}/0"], "does not answer"),
                          (["--fleet", server.url, "--campaign", "-bad name"], "campaign name"),
                          (["--fleet", server.url, "--campaign", "one"], "runs other targets")):
        if extra[-1] == "one":
            _join(hub, "one")
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err


def _command(text: str, start: str) -> list[str]:
    """The shell command that starts at `start` in `text`, its continuation lines joined, split as sh does."""
    import shlex

    joined = ""
    for part in text[text.index(start):].splitlines():
        joined += part.strip().rstrip("\\") + " "
        if not part.rstrip().endswith("\\"):
            break
    return shlex.split(joined.rstrip().rstrip("&"))


def test_the_examples_start_boxes_with_command_lines_mambafuzz_reads():
    from common import ROOT
    from mambafuzz.cli import build_parser

    slurm = (ROOT / "examples" / "fleet" / "slurm.sbatch").read_text()
    k8s = (ROOT / "examples" / "fleet" / "kubernetes.yaml").read_text()
    assert "#SBATCH --signal=B:TERM@120" in slurm and "\nexec mambafuzz fuzz" in slurm  # the signal reaches it
    for argv in (_command(slurm, "exec mambafuzz fuzz")[1:], _command(k8s, "mambafuzz fuzz")):
        args = build_parser().parse_args(argv[1:])
        assert args.command == "fuzz" and args.fleet and args.campaign and args.time and args.crashes_dir
    for text in (slurm, k8s):
        collect = _command(text, "mambafuzz collect")
        assert build_parser().parse_args(collect[1:]).command == "collect"
    assert "trap 'term=1; kill -TERM $child' TERM INT" in k8s  # sh as PID 1 passes SIGTERM on


def test_a_crash_the_session_makes_is_pushed_and_ends_its_target_unless_it_waits_for_its_replay(hub, server,
                                                                                              tmp_path):
    from common import LEFT_SHIFT
    from mambafuzz import findings
    from mambafuzz.fleet import buckets
    from mambafuzz.fleet.hub import Keys
    from mambafuzz.fleet.worker import Fleet
    from mambafuzz.judge.engine import Verdict

    entries = [{"name": n, "spec": n, "contract": "batch_memcpy", "overlap": "full"} for n in ("t:crash", "t:mps")]
    fleet = Fleet(server.url, "camp", "S", entries, {"targets": entries}, {"t:crash": "v1", "t:mps": "v1"},
                  str(tmp_path))
    for name, suspect in (("t:crash", False), ("t:mps", True)):
        verdict = Verdict(reps=1, failures=1, mode="race", fault="worker died (exit code -11)", fault_kind="crash")
        finding = findings.Finding(target=name, contract="batch_memcpy", device="cpu", mode="race", case=LEFT_SHIFT,
                                   verdict=verdict)
        findings.save(finding, tmp_path)  # on disk first, as the session writes it
        fleet.session_found(finding, suspect)
    got = {b.fields["target"]: b for b in buckets.read(hub, Keys("camp"))}
    assert got["t:crash"].fields["signature"] == "crash: worker died (exit code -#)"
    assert got["t:crash"].boxes == ["S"] and got["t:mps"].state == buckets.PENDING
    assert hub.hexists(Keys("camp").done, "t:crash")  # its worker died on it: done, no other box dies there too
    assert not hub.hexists(Keys("camp").done, "t:mps")  # a fault on a shared GPU: its replay alone decides


def test_a_campaigns_workers_may_start_the_child_that_confirms_a_fault():
    # a campaign's worker replays a CUDA fault in a child of its own, and a daemonic process may start none
    # (the H100 run at 95711c1: every confirmation raised "daemonic processes are not allowed to have children")
    import multiprocessing as mp

    from mambafuzz.run.session import Session, SessionOptions

    started = []

    class Ctx:
        def Pipe(self, duplex=False):
            return mp.Pipe(duplex=False)

        def Process(self, target, args, daemon):
            started.append(daemon)

            class Proc:
                def start(self):
                    pass
            return Proc()

    for turns, daemonic in ((None, True), (object(), False)):
        session = Session([], SessionOptions(device="cpu", options={}), turns=turns)
        session._start(0, None, [], Ctx())
        assert started[-1] is daemonic

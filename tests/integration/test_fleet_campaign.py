"""A campaign on one machine: a local redis-server as the hub, worker processes standing in for boxes.

Each box is `python -m mambafuzz.cli fuzz ... --fleet URL` with its own crash folder, on the CPU,
over fast user targets.  One box is killed with SIGKILL mid-target (its lease lapses, another box
finishes the target from the shared corpus, its pushed finding stays: one bucket seen on two boxes);
the hub is stopped and started again mid-campaign (the boxes carry on; what they found meanwhile
reaches the hub once it is back, while they fuzz on); SIGTERM ends a box as Ctrl-C does.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from common import ROOT, RedisServer, mf, mf_env

TARGETS = textwrap.dedent('''
    import os, time

    def _memmove(src_ptrs, dst_ptrs, sizes, arena):
        base = arena.data_ptr()
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()

    def ok_a(src_ptrs, dst_ptrs, sizes, *, arena): _memmove(src_ptrs, dst_ptrs, sizes, arena)
    def ok_b(src_ptrs, dst_ptrs, sizes, *, arena): _memmove(src_ptrs, dst_ptrs, sizes, arena)

    def ok_slow(src_ptrs, dst_ptrs, sizes, *, arena):
        time.sleep(0.1)
        _memmove(src_ptrs, dst_ptrs, sizes, arena)

    def slow_wrong(src_ptrs, dst_ptrs, sizes, *, arena):
        """Drops the last byte of rows of 40 bytes or more, half a second a call: found at once, shrunk slowly."""
        time.sleep(0.5)
        _memmove(src_ptrs, dst_ptrs, (sizes - (sizes >= 40).long()).clamp(min=0), arena)

    def trig_wrong(src_ptrs, dst_ptrs, sizes, *, arena):
        """Correct until a file TRIGGER appears in the working folder; then drops every row's last byte."""
        time.sleep(0.1)
        if os.path.exists("TRIGGER"):
            sizes = (sizes - 1).clamp(min=0)
        _memmove(src_ptrs, dst_ptrs, sizes, arena)
''')


def _box(workdir, url, campaign, box, targets, *extra, isolate=False):
    """One box: a fuzz process of the campaign, in its own process group (a dead box takes its workers)."""
    args = [sys.executable, "-m", "mambafuzz.cli", "fuzz", *[a for t in targets for a in ("--target", f"fleetk:{t}")],
            "--contract", "batch_memcpy", "--device", "cpu", "--fleet", url, "--campaign", campaign, "--box", box,
            "--crashes-dir", f"crashes-{box}", "--lease-ttl", "3", "--min-examples", "5", "--shrink-time", "3",
            "--json", "--isolate" if isolate else "--no-isolate", *extra]
    return subprocess.Popen(args, cwd=workdir, env=mf_env(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _until(what, check, timeout=120.0, every=0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")


def _finish(proc, timeout=150):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "fleetk.py").write_text(TARGETS)
    return tmp_path


@pytest.mark.matrix
def test_a_box_killed_mid_target_loses_its_lease_and_another_finishes_it_one_bucket_on_two_boxes(workdir):
    hub = RedisServer(workdir / "hub").start()
    client = hub.client()
    p = "mambafuzz:fleet:kill:"
    targets = ["slow_wrong", "ok_a", "ok_b"]
    boxes = {}
    try:
        # box A (a session: a parent and its worker) takes the first target, finds its bug, pushes it
        boxes["A"] = _box(workdir, hub.url, "kill", "A", targets, "--max-examples", "30", "--isolate", isolate=True)
        _until("box A's lease", lambda: client.zcard(p + "lease:fleetk:slow_wrong"))
        for name in "BC":  # strictly one worker a target: B and C must wait for A's lease to lapse
            boxes[name] = _box(workdir, hub.url, "kill", name, targets, "--max-examples", "30",
                               "--workers-per-target", "1")
        _until("box A's finding on the hub", lambda: client.scard(p + "buckets"))
        assert not client.hexists(p + "done", "fleetk:slow_wrong")  # still shrinking: mid-target
        os.killpg(boxes["A"].pid, signal.SIGKILL)
        killed = time.monotonic()
        results = {name: _finish(boxes[name]) for name in "BC"}
    finally:
        for proc in boxes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        hub_done = client.hgetall(p + "done")
        hub.stop()
    assert list((workdir / "crashes-A").rglob("*.json")), "A's finding was not on its disk first"
    finisher = json.loads(hub_done["fleetk:slow_wrong"])
    assert finisher["stop"] == "finding" and finisher["box"] in "BC", finisher
    assert set(hub_done) == {f"fleetk:{t}" for t in targets}
    code, out, err = results[finisher["box"]]
    assert code == 1, err[-3000:]
    body = json.loads(out)
    row = next(t for t in body["targets"] if t["target"] == "fleetk:slow_wrong")
    assert row["finding"]["examples_to_first"] == 1, row  # resumed from the shared corpus: A's failure first
    assert body["fleet"]["campaign"] == "kill" and body["fleet"]["complete"]
    other = results["C" if finisher["box"] == "B" else "B"]
    assert other[0] in (0, 1), other[2][-3000:]
    # collect: one bucket for the one bug, seen on A (killed) and on the box that finished, confirmed
    hub.start()
    try:
        got = mf("collect", hub.url, "-o", "out", "--json", cwd=workdir)
    finally:
        hub.stop()
    assert got.returncode == 1, got.stderr[-2000:]
    summary = json.loads(got.stdout)
    (bucket,) = [b for b in summary["buckets"] if b["target"] == "fleetk:slow_wrong"]
    assert bucket["counts"] and bucket["count"] >= 2 and {"A", finisher["box"]} <= set(bucket["boxes"]), bucket
    assert bucket["kind"] == "mismatch" and bucket["file"], bucket
    assert time.monotonic() - killed < 120
    from mambafuzz import findings
    from mambafuzz.findings.replay import STILL_FAILING, replay_one
    from mambafuzz.report.load import load

    record = findings.load(workdir / "out" / bucket["file"])
    assert replay_one(record, device="cpu", reps=None, mode=None).status == STILL_FAILING
    report = load(workdir / "out")
    per_box = {t["target"]: t["boxes"] for t in report.campaign["targets"]}
    assert "A" in per_box["fleetk:slow_wrong"] and report.kind == "campaign"


@pytest.mark.matrix
def test_the_hub_restarted_mid_campaign_the_boxes_carry_on_and_their_findings_arrive_when_it_is_back(workdir):
    hub = RedisServer(workdir / "hub").start()
    client = hub.client()
    p = "mambafuzz:fleet:restart:"
    boxes = {}
    try:
        for name in "DE":
            boxes[name] = _box(workdir, hub.url, "restart", name, ["trig_wrong", "ok_slow"], "--max-examples",
                               "100000", "--time", "60", "--shrink-time", "1")
        _until("both boxes fuzzing", lambda: client.zcard(p + "lease:fleetk:trig_wrong")
               and client.zcard(p + "lease:fleetk:ok_slow"))
        hub.stop()  # the hub goes away mid-campaign
        (workdir / "TRIGGER").write_text("")  # and the bug shows while it is away
        pending = _until("a finding kept while the hub is down",
                         lambda: [q for name in "DE" for q in (workdir / f"crashes-{name}").rglob("*.pending")])
        finder = pending[0].parent.parent.name.rpartition("-")[2]
        time.sleep(3.0)  # the finder's turn is over (its shrink had 1 s); it waits for the hub
        # (nobody fuzzes the target again: the finder knows it found it, the other box is in a long turn)
        assert all(proc.poll() is None for proc in boxes.values())  # the boxes carry on
        hub.start()  # back, with its data (append-only file)
        # the finder goes on to the other target, a long turn: its keeper must send what waited meanwhile
        _until("the waiting finding on the hub while its box fuzzes on", lambda: client.scard(p + "buckets"),
               timeout=15)
        _until("the finder on the other target", lambda: client.zcard(p + "lease:fleetk:ok_slow") == 2, timeout=15)
        assert all(proc.poll() is None for proc in boxes.values())
        for proc in boxes.values():
            proc.send_signal(signal.SIGTERM)
        results = {name: _finish(boxes[name]) for name in "DE"}
        done = client.hgetall(p + "done")
        (key,) = client.smembers(p + "buckets")
        lineages = client.smembers(p + f"bucket:{key}:lineages")
        seen_by = {client.hget(p + f"lineage:{x}", "box") for x in lineages}
    finally:
        for proc in boxes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        hub.stop()
    assert json.loads(done["fleetk:trig_wrong"]) == {**json.loads(done["fleetk:trig_wrong"]), "stop": "finding",
                                                     "box": finder}
    assert seen_by == {finder}
    code, out, err = results[finder]
    assert code == 1 and "the hub does not answer" in err and "answers again" in err, err[-3000:]
    assert not [q for name in "DE" for q in (workdir / f"crashes-{name}").rglob("*.pending")]


@pytest.mark.matrix
def test_sigterm_ends_a_box_as_ctrl_c_does_its_finding_on_the_hub_and_its_target_open_at_once(workdir):
    """What Slurm (scancel, the time limit, pre-emption) and Kubernetes (a pod's deletion) send: the session's
    parent passes it to its worker, which stops between examples, sends what it found and gives its lease
    back at once (the lease's time to live is 60 s here: a lapse cannot be what freed it)."""
    hub = RedisServer(workdir / "hub").start()
    client = hub.client()
    p = "mambafuzz:fleet:term:"
    try:
        proc = _box(workdir, hub.url, "term", "T", ["slow_wrong"], "--lease-ttl", "60", "--shrink-time", "60",
                    isolate=True)
        _until("its finding on the hub", lambda: client.scard(p + "buckets"))
        time.sleep(1.0)  # shrinking now
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code, out, err = _finish(proc, timeout=60)
        assert time.monotonic() - sent < 30, "not within a pod's default grace period"
        assert code == 1, err[-3000:]  # a finding: it wins over the interruption
        body = json.loads(out)
        assert body["interrupted"] and body["targets"][0]["finding"] is not None
        assert client.zcard(p + "lease:fleetk:slow_wrong") == 0  # given back, not left to lapse
        assert not client.hexists(p + "done", "fleetk:slow_wrong")  # open: the next box takes it up
        assert int(client.hget(p + "examples:fleetk:slow_wrong", "T")) >= 1  # its examples counted
        assert not list((workdir / "crashes-T").rglob("*.pending"))  # nothing waits: the hub has it all
        key = next(iter(client.smembers(p + "buckets")))
        best = json.loads(client.get(p + "record:" + client.hget(p + "bucket:" + key, "best")))
        local = [json.loads(f.read_text()) for f in (workdir / "crashes-T").rglob("*.json")]
        assert best["case_hash"] in {c["case_hash"] for c in local}  # the hub has the case as it was last kept
    finally:
        hub.stop()

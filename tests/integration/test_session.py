"""Sessions that survive: worker processes, fault and hang findings, resume, shared Redis corpus."""
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from common import ROOT, mf, one_line_error

BAD_TARGETS = textwrap.dedent('''
    import os, signal, time

    def crash(src_ptrs, dst_ptrs, sizes, *, arena):
        """Dies the way a segfaulting kernel takes its process down."""
        os.kill(os.getpid(), signal.SIGSEGV)

    def hang(src_ptrs, dst_ptrs, sizes, *, arena):
        """Never returns."""
        while True:
            time.sleep(0.05)

    def sluggish(src_ptrs, dst_ptrs, sizes, *, arena):
        """Correct, but 1.2 s a call: four repetitions outlast a 3 s hang timeout."""
        time.sleep(1.2)
        base = arena.data_ptr()
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()

    def slow(src_ptrs, dst_ptrs, sizes, *, arena):
        """Correct, but slow enough to be interrupted."""
        time.sleep(0.2)
        base = arena.data_ptr()
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()
''')


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "badk.py").write_text(BAD_TARGETS)
    return tmp_path


@pytest.mark.matrix
def test_faulting_and_hanging_targets_are_findings_and_the_session_goes_on(workdir):
    proc = mf("fuzz", "--target", "badk:crash", "--target", "badk:hang", "--target", "torch.batch_memcpy",
              "--contract", "batch_memcpy", "--hang-timeout", "4", "--max-examples", "20", "--json",
              cwd=workdir)
    assert proc.returncode == 1, proc.stderr
    rows = {t["target"]: t for t in json.loads(proc.stdout)["targets"]}
    assert rows["badk:crash"]["finding"]["kind"] == "crash"
    assert "exit code -11" in rows["badk:crash"]["finding"]["summary"]
    assert rows["badk:hang"]["finding"]["kind"] == "hang"
    assert rows["torch.batch_memcpy"]["status"] == "clean" and rows["torch.batch_memcpy"]["examples"] == 20
    for name in ("badk:crash", "badk:hang"):
        body = json.loads((workdir / rows[name]["finding"]["path"]).read_text())
        assert body["verdict"]["kind"] == rows[name]["finding"]["kind"] and body["case"]["copies"]
    # replaying them neither kills nor stalls the replay: each runs in its own child process
    replay = mf("replay", "crashes", "--timeout", "10", "--json", cwd=workdir)
    got = {r["target"]: r for r in json.loads(replay.stdout)["files"]}
    assert replay.returncode == 1, replay.stderr
    assert got["badk:crash"]["status"] == "still failing" and "died" in got["badk:crash"]["verdict"]["summary"]
    assert got["badk:hang"]["status"] == "still failing" and "hang" in got["badk:hang"]["verdict"]["summary"]


def test_a_slow_example_that_keeps_repeating_is_not_a_hang(workdir):
    """A hang is no repetition for --hang-timeout, not a long example: each repetition judged is heard."""
    proc = mf("fuzz", "--target", "badk:sluggish", "--contract", "batch_memcpy", "--reps", "4",
              "--hang-timeout", "3", "--max-examples", "2", "--min-examples", "1", "--json", cwd=workdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = json.loads(proc.stdout)["targets"][0]
    assert row["status"] == "clean" and row["examples"] == 2


@pytest.mark.matrix
def test_time_budget_with_a_hanging_target_still_fuzzes_the_rest(workdir):
    start = time.monotonic()
    proc = mf("fuzz", "--target", "badk:hang", "--target", "torch.batch_memcpy", "--contract", "batch_memcpy",
              "--hang-timeout", "3", "--time", "20", "--max-examples", "100000", "--json", cwd=workdir)
    assert proc.returncode == 1, proc.stderr
    rows = {t["target"]: t for t in json.loads(proc.stdout)["targets"]}
    assert rows["badk:hang"]["finding"]["kind"] == "hang"
    assert rows["torch.batch_memcpy"]["examples"] > 10
    assert time.monotonic() - start < 90


SHARE_TARGETS = textwrap.dedent('''
    import time

    def _memmove(src_ptrs, dst_ptrs, sizes, arena):
        base = arena.data_ptr()
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()

    def ok_a(src_ptrs, dst_ptrs, sizes, *, arena): _memmove(src_ptrs, dst_ptrs, sizes, arena)
    def ok_b(src_ptrs, dst_ptrs, sizes, *, arena): _memmove(src_ptrs, dst_ptrs, sizes, arena)
    def ok_c(src_ptrs, dst_ptrs, sizes, *, arena): _memmove(src_ptrs, dst_ptrs, sizes, arena)
    def ok_d(src_ptrs, dst_ptrs, sizes, *, arena): _memmove(src_ptrs, dst_ptrs, sizes, arena)

    def slow_wrong(src_ptrs, dst_ptrs, sizes, *, arena):
        """Drops the last byte of rows of 40 bytes or more, and takes a second a call: found at
        once, shrunk slowly (every candidate costs a second)."""
        time.sleep(1.0)
        _memmove(src_ptrs, dst_ptrs, (sizes - (sizes >= 40).long()).clamp(min=0), arena)

    def ok_last(src_ptrs, dst_ptrs, sizes, *, arena):
        time.sleep(0.1)
        _memmove(src_ptrs, dst_ptrs, sizes, arena)
''')


@pytest.mark.matrix
def test_a_target_found_late_shrinks_within_its_share_of_what_is_left(tmp_path):
    """Four targets done in a second or two leave their time to the rest; the slow shrink of the
    fifth must take its equal share of that, not all of it up to its cumulative slice's end (which
    in a 150 s amplified zoo left the last rows no time)."""
    (tmp_path / "sharek.py").write_text(SHARE_TARGETS)
    names = ["ok_a", "ok_b", "ok_c", "ok_d", "slow_wrong", "ok_last"]
    proc = mf("fuzz", *[a for n in names for a in ("--target", f"sharek:{n}")], "--contract", "batch_memcpy",
              "--device", "cpu", "--time", "40", "--max-examples", "20", "--min-examples", "5", "--isolate",
              "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    by = {t["target"].split(":")[1]: t for t in json.loads(proc.stdout)["targets"]}
    assert by["slow_wrong"]["status"] == "finding"
    # what was left when it started (40 s less the quick four) over the two targets left: about 17 s;
    # the cumulative slice ended at 5/6 of 40 s, over 25 s after it started
    assert by["slow_wrong"]["seconds"] < 21, by["slow_wrong"]["seconds"]
    assert by["ok_last"]["status"] == "clean" and by["ok_last"]["examples"] == 20


@pytest.mark.matrix
def test_sigterm_saves_the_session_and_the_next_run_resumes(workdir):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}", "COLUMNS": "200"}
    env.pop("TRITON_INTERPRET", None)
    args = [sys.executable, "-m", "mambafuzz.cli", "fuzz", "--target", "torch.batch_memcpy", "--target",
            "badk:slow", "--contract", "batch_memcpy", "--max-examples", "60", "--json"]
    proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state_dir = workdir / ".mambafuzz" / "sessions"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(state_dir.glob("*.json")):
        time.sleep(0.2)  # the state file appears once the first target is done
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    body = json.loads(out)
    assert body["interrupted"], err
    saved = json.loads(next(state_dir.glob("*.json")).read_text())
    assert saved["done"] == ["torch.batch_memcpy"]
    again = mf(*args[3:-1], "--max-examples", "3", cwd=workdir)
    # different options (fewer examples): a different session, not resumed
    assert "resuming" not in again.stderr
    resumed = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert re.search(r"resuming session [0-9a-f]{16} \(\S+\.json\): 1 of 2 target\(s\) done "
                     r"\(torch\.batch_memcpy: \d+ example\(s\), kept\); to run: badk:slow; --fresh starts over",
                     resumed.stderr), resumed.stderr
    rows = {t["target"]: t for t in json.loads(resumed.stdout)["targets"]}
    assert rows["badk:slow"]["examples"] == 60 and rows["badk:slow"]["status"] == "clean"
    assert not list(state_dir.glob("*.json"))  # finished: the next run starts fresh


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    pytest.importorskip("redis")
    port = _free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.mark.matrix
def test_two_workers_share_one_redis_corpus(workdir, redis_url):
    import redis

    proc = mf("fuzz", "--target", "zoo.TAIL-DROP", "--workers", "2", "--database", redis_url, "--seed", "3",
              "--max-examples", "200", "--crashes-dir", "crashes", "--json", cwd=workdir)
    assert proc.returncode == 1, proc.stderr
    row = json.loads(proc.stdout)["targets"][0]
    assert row["finding"]["kind"] == "mismatch"
    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() > 0  # both workers wrote their examples to the shared corpus
    # a later session on another "machine" (a fresh folder) starts from the shared corpus
    other = workdir / "other"
    other.mkdir()
    again = mf("fuzz", "--target", "zoo.TAIL-DROP", "--database", redis_url, "--max-examples", "200",
               "--json", cwd=other)
    assert json.loads(again.stdout)["targets"][0]["finding"]["examples_to_first"] == 1


@pytest.mark.matrix
def test_redis_that_does_not_answer_is_one_line(workdir):
    one_line_error(mf("fuzz", "--target", "torch.batch_memcpy", "--database", f"redis://127.0.0.1:{_free_port()}",
                      cwd=workdir), "does not answer")


@pytest.mark.matrix
def test_more_gpus_than_present(workdir):
    one_line_error(mf("fuzz", "--target", "triton.*", "--gpus", "2", cwd=workdir), "--gpus")


# ---------------------------------------------------------------- --time: one deadline, start-up not taken
def test_a_short_time_is_fuzzing_time_not_start_up(workdir):
    """--time 3 with one target in a worker: the worker's seconds of imports used to take the whole
    share and report the target 'not run: ... used up by the targets before it' (there were none)."""
    proc = mf("fuzz", "--target", "torch.batch_memcpy", "--time", "3", "--max-examples", "100000",
              "--database", "none", "--json", cwd=workdir)
    (row,) = json.loads(proc.stdout)["targets"]
    assert row["stop"] == "time" and row["examples"] > 0, row
    assert 2.5 <= row["seconds"] <= 3 + 3, row["seconds"]  # its share, less nothing, plus one example at most
    assert "before it" not in (row["why"] or "")


def test_a_deadline_shares_what_is_left_and_says_truly_why_a_target_did_not_run():
    from mambafuzz.control.clock import Deadline

    unlimited = Deadline()
    assert unlimited.started() == unlimited and unlimited.share(3) == Deadline() and not unlimited.over()
    waiting = Deadline(30.0)
    assert waiting.end is None and waiting.share(3) == Deadline()  # its clock starts when fuzzing can
    before = time.monotonic()
    deadline = waiting.started()
    assert before + 30 <= deadline.end <= time.monotonic() + 30
    assert deadline.started() == deadline  # once fixed, every worker gets the same end
    share = deadline.share(3)
    assert 9.9 <= share.end - time.monotonic() <= 10.0  # an equal part of what is left, the target included
    assert 9.9 <= share.seconds <= 10.0 and share.started() == share  # started: fuzz_target keeps its end
    assert not deadline.over() and Deadline(1.0, end=time.monotonic() - 1).over()
    assert Deadline(1.0, end=time.monotonic() - 1).share(2).end <= time.monotonic()  # ends now, not before
    assert deadline.not_run(2) == "not run: --time (30 s) ran out while the 2 target(s) before it ran"
    assert deadline.not_run(0) == "not run: --time (30 s) ran out before its turn"


TURN_TARGETS = textwrap.dedent('''
    import time

    def slow_ok(src_ptrs, dst_ptrs, sizes, *, arena):
        """Right, and a fifth of a second a call: its share of --time runs out."""
        time.sleep(0.2)
        base = arena.data_ptr()
        for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
            arena[d - base:d - base + n] = arena[s - base:s - base + n].clone()

    def copies_nothing(src_ptrs, dst_ptrs, sizes, *, arena):
        """Wrong on any case that moves a byte: caught at once, it leaves most of its share."""

    def dies(src_ptrs, dst_ptrs, sizes, *, arena):
        """Kills its worker on the first call (a fault): the targets after it run in a new process."""
        import os, signal
        os.kill(os.getpid(), signal.SIGSEGV)
''')


@pytest.mark.parametrize("isolate", [pytest.param("--no-isolate"), pytest.param("--isolate", marks=pytest.mark.matrix)])
def test_a_target_whose_share_ran_out_gets_what_the_targets_caught_early_left(tmp_path, isolate):
    """--time 8 over two targets: the slow right one's first share (4 s) runs out; the wrong one is
    caught within a second and shrinks for at most 0.5 s; the 2-3 s it leaves go to a second turn of
    the first, whose counts and seconds go on from its first turn."""
    (tmp_path / "turnk.py").write_text(TURN_TARGETS)
    proc = mf("fuzz", "--target", "turnk:slow_ok", "--target", "turnk:copies_nothing", "--contract", "batch_memcpy",
              "--device", "cpu", "--time", "8", "--shrink-time", "0.5", "--max-examples", "100000",
              "--min-examples", "3", "--database", "none", "--seed", "3", isolate, "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    by = {t["target"].split(":")[1]: t for t in json.loads(proc.stdout)["targets"]}
    assert by["copies_nothing"]["status"] == "finding" and by["copies_nothing"]["seconds"] < 2.5
    slow = by["slow_ok"]
    assert slow["status"] == "clean" and slow["stop"] == "time"
    assert 5.0 < slow["seconds"] < 8.5 and slow["examples"] > 5.0 / 0.25, slow  # both turns, counted once each


def test_a_second_turn_with_a_seed_draws_other_cases_than_the_first(tmp_path, monkeypatch):
    from common import fuzz_options
    from mambafuzz.kernels import registry
    from mambafuzz.search import fuzz

    seeds = []
    real = fuzz._seed_hypothesis
    monkeypatch.setattr(fuzz, "_seed_hypothesis", lambda s: (seeds.append(s), real(s))[1])
    opts = fuzz_options(tmp_path, max_examples=20, database=None, seed=5)
    target = registry.get("torch.batch_memcpy")
    first = fuzz.fuzz_target(target, opts)
    turn1, seeds[:] = list(seeds), []
    both = fuzz.fuzz_target(target, dataclasses.replace(opts, max_examples=40), resume=first)
    assert turn1 and seeds and not set(turn1) & set(seeds)
    assert (first.examples, both.examples) == (20, 40) and both.seconds >= first.seconds


@pytest.mark.matrix
def test_a_second_turn_reaches_a_target_an_earlier_worker_process_fuzzed(tmp_path):
    """A fault ends a worker; the targets after it run in a new process, which must still give the
    first target (whose share ran out in the old process) what the caught ones left."""
    (tmp_path / "turnk.py").write_text(TURN_TARGETS)
    names = ["slow_ok", "dies", "copies_nothing"]
    proc = mf("fuzz", *[a for n in names for a in ("--target", f"turnk:{n}")], "--contract", "batch_memcpy",
              "--device", "cpu", "--time", "9", "--shrink-time", "0.5", "--max-examples", "100000",
              "--min-examples", "3", "--database", "none", "--isolate", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    by = {t["target"].split(":")[1]: t for t in json.loads(proc.stdout)["targets"]}
    assert by["dies"]["finding"]["kind"] == "crash" and by["copies_nothing"]["status"] == "finding"
    slow = by["slow_ok"]
    assert slow["status"] == "clean" and 4.5 < slow["seconds"] < 9.5, slow  # a first share of 3 s, then more

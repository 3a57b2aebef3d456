"""A user's own contract (``slot_reset.py``), fuzzed from pytest and from the CLI, its crash file replayed.

The contract is registered when ``slot_reset`` is imported (its last
``contracts.register`` line); the CLI imports the target's module before it
looks the contract up, and a crash file records where the contract came from
so ``mambafuzz replay`` finds it from any directory.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mambafuzz
import slot_reset

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def test_the_user_contract_is_registered_with_its_arguments():
    contract = mambafuzz.contracts.get("slot_reset")
    assert contract is slot_reset.CONTRACT
    assert contract.positional == ("state", "idx")
    assert contract.origin == "slot_reset"


def test_a_correct_kernel_is_clean(tmp_path):
    report = mambafuzz.check(slot_reset.reset_slots, "slot_reset", max_examples=30, crashes_dir=tmp_path,
                             database=None)
    assert report.status == "clean" and report.examples >= 10


def test_a_pad_row_that_writes_is_found(tmp_path):
    with pytest.raises(mambafuzz.Failure) as info:
        mambafuzz.check(slot_reset.reset_slots_no_pad_check, "slot_reset", max_examples=60, crashes_dir=tmp_path,
                        database=None, seed=1)
    assert "-1" in str(info.value)  # the minimal case names the pad row
    assert list(tmp_path.rglob("*.json")), "the finding is saved"


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "mambafuzz", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.matrix
def test_the_cli_fuzzes_the_user_contract_and_replays_its_finding(tmp_path):
    crashes = tmp_path / "crashes"
    common = ["--contract", "slot_reset", "--max-examples", "60", "--seed", "1", "--database", "none",
              "--crashes-dir", str(crashes), "--json"]
    good = _cli("fuzz", "--target", "slot_reset:reset_slots", *common, cwd=HERE)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    assert json.loads(good.stdout)["targets"][0]["examples"] >= 10

    bad = _cli("fuzz", "--target", "slot_reset:reset_slots_no_pad_check", *common, cwd=HERE)
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    files = sorted(crashes.rglob("*.json"))
    assert files
    body = json.loads(files[0].read_text())
    assert body["contract"] == "slot_reset" and body["contract_origin"]["module"] == "slot_reset"

    again = _cli("replay", str(files[0]), cwd=tmp_path)  # elsewhere: the contract comes from the crash file
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    assert "reproduced" in again.stdout.lower() or "fail" in again.stdout.lower(), again.stdout[-2000:]

"""ARCHITECTURE.md's recipe, followed from a test file: a contract registered here, run through everything.

``byte_fill`` is a memset: ``n[i]`` bytes at ``dst[i]`` become ``value[i]``.
Its case type, oracle, strategy and contract live in this file and nowhere
else; the API, the CLI (in this process and in isolated workers), crash
files, replay from another folder, coverage and the registry's errors must
all work from the declarations alone.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import strategies as st

import mambafuzz
from mambafuzz import contracts
from mambafuzz.contracts import Argument, Contract, Prepared
from mambafuzz.cases import CaseBase, check_int, check_nested
from mambafuzz.errors import CaseError, UsageError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class FillCase(CaseBase):
    contract: ClassVar[str] = "byte_fill"
    FIELD_CHECKS: ClassVar[dict] = {"arena_size": lambda v: check_int("arena_size", v, 1),
                                    "rows": lambda v: check_nested("rows", v, 2)}
    arena_size: int
    rows: tuple[tuple[int, int, int], ...]  # (dst, n, value)
    seed: int = 0

    @property
    def size(self) -> tuple:
        return (len(self.rows), sum(n for _, n, _ in self.rows), self.arena_size, self.seed != 0)

    def describe(self) -> str:
        return ", ".join(f"{n} B of {v} at {d}" for d, n, v in self.rows)


def expect_fill(snapshot: np.ndarray, rows) -> np.ndarray:
    out = snapshot.copy()
    for d, n, v in rows:
        out[d:d + n] = v
    return out


@st.composite
def fill_cases(draw, profile):
    rows, cursor = [], 0
    for _ in range(draw(st.integers(0, 4))):
        cursor += draw(st.integers(0, 9))
        n = draw(st.integers(0, 12))
        rows.append((cursor, n, draw(st.integers(0, 255))))
        cursor += n
    return FillCase(arena_size=cursor + 8, rows=tuple(rows), seed=draw(st.integers(0, 2)))


class ByteFill(Contract):
    name = "byte_fill"
    case_type = FillCase
    summary = "n[i] bytes at dst[i] become value[i]"
    arguments = (Argument("dst", "int64", "[n]", "arena offset of row i"),
                 Argument("n", "int64", "[n]", "bytes of row i"),
                 Argument("value", "int64", "[n]", "the byte row i writes"))
    buckets = {"fill_rows": ("0", "1", "2+")}

    def strategy(self, profile, **_):
        return fill_cases(profile)

    def prepare(self, case, image, snapshot, arena, device):
        import torch

        if any(d + n > case.arena_size for d, n, _ in case.rows):
            raise CaseError("a row runs past the arena")
        cols = [torch.tensor([r[i] for r in case.rows], dtype=torch.int64, device=device) for i in range(3)]
        return Prepared(dict(zip(("dst", "n", "value"), cols)), {}, expect_fill(snapshot, case.rows))

    def candidates(self, case):
        for i in range(len(case.rows)):
            yield dataclasses.replace(case, rows=case.rows[:i] + case.rows[i + 1:])

    def features(self, case):
        return {"fill_rows": str(len(case.rows)) if len(case.rows) < 2 else "2+"}

    def expected_features(self, options):
        return dict(self.buckets)


CONTRACT = contracts.register(ByteFill())


def fill(dst, n, value, *, arena):
    """A correct fill through torch."""
    for d, k, v in zip(dst.tolist(), n.tolist(), value.tolist()):
        arena[d:d + k] = v


def fill_one_more(dst, n, value, *, arena):
    """The bug: one byte past each row."""
    for d, k, v in zip(dst.tolist(), n.tolist(), value.tolist()):
        if k:
            arena[d:d + k + 1] = v


def test_the_registry_knows_it_and_guards_its_names():
    assert contracts.get("byte_fill") is CONTRACT
    assert "byte_fill" in contracts.names()
    assert contracts.register(CONTRACT) is CONTRACT  # the same instance again: a no-op

    class Other(ByteFill):
        pass

    with pytest.raises(UsageError, match="registered twice"):
        contracts.register(Other())

    class Unnamed(ByteFill):
        name = "not a name"

    with pytest.raises(UsageError, match="identifier"):
        contracts.register(Unnamed())
    class Unchecked(ByteFill):
        name = "byte_fill_unchecked"
        case_type = dataclasses.make_dataclass("Bare", [("width", int, 0)], bases=(FillCase,), frozen=True,
                                               namespace={"contract": "byte_fill_unchecked"})

    with pytest.raises(UsageError, match="width have no FIELD_CHECKS"):
        contracts.register(Unchecked())
    with pytest.raises(UsageError, match="Contract instance"):
        contracts.register(object())
    with pytest.raises(UsageError, match="unknown contract 'nope'"):
        contracts.get("nope")


def test_an_entry_point_registers_a_contract(monkeypatch):
    class EP:
        name, value = "byte_fill_ep", "somewhere:CONTRACT"

        def load(self):
            class ByteFillEP(ByteFill):
                name = "byte_fill_ep"
            ByteFillEP.case_type = dataclasses.make_dataclass(
                "FillCaseEP", [], bases=(FillCase,), frozen=True, namespace={"contract": "byte_fill_ep"})
            return ByteFillEP()

    class Broken(EP):
        name = "broken"

        def load(self):
            raise ImportError("no module named 'somewhere'")

    monkeypatch.setattr(contracts, "_LOADED", False)
    monkeypatch.setattr(contracts, "_CONTRACTS", dict(contracts.registered()))
    monkeypatch.setattr(contracts.importlib.metadata, "entry_points", lambda group: [EP()])
    monkeypatch.setattr(contracts, "_LOADED", False)
    assert "byte_fill_ep" in contracts.names()
    monkeypatch.setattr(contracts, "_LOADED", False)
    monkeypatch.setattr(contracts.importlib.metadata, "entry_points", lambda group: [Broken()])
    with pytest.raises(UsageError, match="entry point 'broken'.*cannot load"):
        contracts.names()


def test_the_api_fuzzes_it_both_ways(tmp_path):
    report = mambafuzz.check(fill, "byte_fill", max_examples=40, crashes_dir=tmp_path, database=None)
    assert report.status == "clean" and report.examples >= 10
    with pytest.raises(mambafuzz.Failure, match="byte_fill"):
        mambafuzz.check(fill_one_more, "byte_fill", max_examples=40, crashes_dir=tmp_path, database=None)


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "mambafuzz", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.matrix
@pytest.mark.parametrize("isolate", ["--no-isolate", "--isolate"])
def test_the_cli_workers_crash_files_and_replay_know_it(tmp_path, isolate):
    crashes = tmp_path / "crashes"
    args = ["--contract", "byte_fill", "--max-examples", "30", "--seed", "1", "--database", "none",
            "--crashes-dir", str(crashes), "--json", isolate]
    good = _cli("fuzz", "--target", "test_user_contract:fill", *args, cwd=HERE)
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-3000:]
    target = json.loads(good.stdout)["targets"][0]
    assert target["examples"] >= 10
    assert "fill_rows" in json.dumps(target), "the contract's own coverage features are counted"

    bad = _cli("fuzz", "--target", "test_user_contract:fill_one_more", *args, cwd=HERE)
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-3000:]
    (path,) = sorted(crashes.rglob("*.json"))
    body = json.loads(path.read_text())
    assert body["contract_origin"] == {"module": "test_user_contract", "path": str(HERE)}

    again = _cli("replay", str(path), "--json", cwd=tmp_path)
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]


@pytest.mark.matrix
def test_a_crash_file_whose_contract_cannot_be_imported_is_one_line(tmp_path):
    crashes = tmp_path / "crashes"
    bad = _cli("fuzz", "--target", "test_user_contract:fill_one_more", "--contract", "byte_fill",
               "--max-examples", "30", "--database", "none", "--crashes-dir", str(crashes), cwd=HERE)
    assert bad.returncode == 1, bad.stderr[-3000:]
    (path,) = sorted(crashes.rglob("*.json"))
    body = json.loads(path.read_text())
    body["contract_origin"] = {"module": "no_such_module_here"}
    path.write_text(json.dumps(body))
    again = _cli("replay", str(path), cwd=tmp_path)
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_module_here" in lines[0], again.stderr

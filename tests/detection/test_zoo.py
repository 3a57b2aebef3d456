"""Detection power, both directions: every zoo variant is caught on the CPU, by a
kind its row declares, and the correct kernels pass the same fuzzing with the
race check on."""
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from mambafuzz import cli, contracts
from common import zoo_options
from mambafuzz.kernels import registry
from mambafuzz.judge.engine import KINDS, run_case
from mambafuzz.search.fuzz import fuzz_target
from mambafuzz.report import build

MATRIX = pytest.mark.matrix  # the long detection matrix: `pytest -m matrix`
RACY = {"BM-NOGUARD", "SD-SPAN", "DS-ROW", "PP-INPLACE"}  # right bytes in the interpreter: only the recorder sees them
ZOO_IDS = [e.id for e in registry.ZOO]
# the slot contracts' rows are caught and shrunk in test_slots.py, conv_update's and state_scatter's in their own
POINTER_ZOO_IDS = [e.id for e in registry.ZOO if e.contract in ("batch_memcpy", "state_copy", "postprocess")]




def test_the_zoo_has_every_spec_row():
    """The copy and slot rows of kernels/zoo.py (docs/contracts.md#zoo); an update contract's (kernels declaring
    CONTRACT) are its own zoo test's."""
    assert {e.id for e in registry.ZOO if e.contract not in registry.DECLARED} == {
        "BM-NOGUARD", "BM-RIGHT", "SD-SPAN", "DS-ROW", "DS-CONTIG", "ADDR-I32", "TAIL-DROP", "MISALIGN", "TILE-GAP",
        "NOOP-SKIP", "PP-INPLACE", "PAD-CLOBBER", "SLOT-CHAIN", "FORK-CHAIN", "SLOT-I32", "SLOT-FLAT", "SLOT-PAD"}
    assert len(set(ZOO_IDS)) == len(ZOO_IDS)
    for zoo_id in ZOO_IDS:
        assert registry.get(f"zoo.{zoo_id}").zoo_id == zoo_id


@pytest.mark.parametrize("zoo_id", [pytest.param(z, marks=() if z == "TAIL-DROP" else MATRIX)
                                    for z in POINTER_ZOO_IDS])  # one row in the quick tier
def test_every_zoo_variant_is_caught_and_shrunk(zoo_id, tmp_path):
    target = registry.get(f"zoo.{zoo_id}")
    report = fuzz_target(target, zoo_options(tmp_path))
    f = report.finding
    assert f is not None, f"{zoo_id} escaped {report.examples} examples"
    assert f.verdict.kind in registry.zoo_entry(zoo_id).caught_as("cpu"), f.verdict.summary()
    if zoo_id in RACY:
        assert f.verdict.hazards, f.verdict.summary()
        assert {h.kind for h in f.verdict.hazards} & {"intra-program", "cross-program"}
    if zoo_id == "MISALIGN":
        assert f.verdict.hazards and f.verdict.hazards[0].kind == "misaligned"
    if target.contract == "batch_memcpy":
        assert len(f.case.copies) == 1, f.case.copies  # shrunk to the one row that shows the bug
        # BM-RIGHT's wrong bytes need a right overlap longer than one copy block (1024 B)
        assert f.case.copies[0][2] <= (1025 if zoo_id == "BM-RIGHT" else 64), f.case.copies
    else:
        assert f.case.num_requests == 1 and len(f.case.pools) <= 2, f.case.describe()
    assert f.path is not None and f.path.exists()


def test_every_row_declares_the_kinds_that_catch_it():
    for e in registry.ZOO:
        for device in ("cpu", "cuda"):
            kinds = e.caught_as(device)
            assert kinds and set(kinds) <= set(KINDS) and "exception" not in kinds, (e.id, device, kinds)
        assert "race" not in e.gpu and "oob" not in e.gpu, e.id  # no recorder on a GPU


def test_a_finding_of_another_kind_is_an_escape(tmp_path, monkeypatch, capsys):
    """TAIL-DROP whose launcher raises is not caught: exit 1, ESCAPED in the table, caught false in JSON."""
    def raises(src_ptrs, dst_ptrs, sizes, *, arena):
        raise IndexError("the launcher's own bug")

    broken = dataclasses.replace(registry.get("zoo.TAIL-DROP"), fn=raises)
    monkeypatch.setitem(registry.TARGETS, "zoo.TAIL-DROP", broken)
    monkeypatch.chdir(tmp_path)
    argv = ["zoo", "--target", "zoo.TAIL-DROP", "--max-examples", "20", "--database", "none", "--seed", "1"]
    assert cli.main(argv + ["--json"]) == 1
    doc = capsys.readouterr().out
    (row,) = json.loads(doc)["targets"]
    assert (row["status"], row["finding"]["kind"], row["caught"], row["caught_as"]) == (
        "finding", "exception", False, ["mismatch"])
    (tmp_path / "zoo.json").write_text(doc)  # the report page says so too
    build(tmp_path / "zoo.json", tmp_path / "zoo.html")
    page = (tmp_path / "zoo.html").read_text()
    assert ">ESCAPED<" in page and '"outcome": "ESCAPED"' in page and ">0 of 1</b>caught<" in page
    assert cli.main(argv) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert "ESCAPED" in text and "exception, not mismatch" in text
    assert ("ESCAPED zoo.TAIL-DROP: a finding of kind exception, but on cpu this bug is caught as mismatch "
            "(exception: IndexError: the launcher's own bug") in " ".join(text.split())
    assert lines[-1] == "0 of 1 zoo variants caught; escaped: zoo.TAIL-DROP (exception); exit 1"
    assert max(map(len, lines)) <= 80, text


@pytest.mark.parametrize("name", ["triton.batch_memcpy", pytest.param("triton.state_copy", marks=MATRIX),
                                  pytest.param("triton.postprocess", marks=MATRIX), "torch.batch_memcpy",
                                  "torch.state_copy"])
def test_correct_kernels_pass_the_same_fuzzing(name, tmp_path):
    report = fuzz_target(registry.get(name), zoo_options(tmp_path, max_examples=50))
    assert report.finding is None, report.finding.verdict.summary()
    assert report.examples == 50 and not report.rejected


def _left_overlaps(case):
    """True/False; None for a left overlap by a whole number of 1 KiB pieces: the body's lanes then
    each reload their own bytes, so only the head and tail pieces (other lanes) can race, depending on
    alignment (e.g. 1176->152, 3071 B races in its tail): no prediction."""
    left = [(src - dst) % 1024 for src, dst, n in case.copies if dst < src < dst + n]
    if any(shift == 0 for shift in left):
        return None
    return bool(left)


def _same_block_shift(case, kind):
    """True/False; None when a shift inside one block moves bytes by a whole number of 1 KiB pieces
    (each lane then reloads its own bytes: conv_sd, 8-byte elements, dim 16, bias 8 is race-free)."""
    tables = np.asarray(case.block_tables)
    racy = False
    for pool in case.pools:
        if pool.kind != kind:
            continue
        unit = pool.elem_size * (pool.dim if kind == "conv_sd" else 1)  # bytes per token step
        for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases)):
            if tables[pool.group, r, s] == tables[pool.group, r, d] and 0 < b < pool.state_len - b:
                if (b * unit) % 1024 == 0:
                    return None
                racy = True
    return racy


RACY_GEOMETRY = {
    "BM-NOGUARD": ("batch_memcpy", _left_overlaps),
    "SD-SPAN": ("state_copy", lambda c: _same_block_shift(c, "conv_sd")),
    "DS-ROW": ("state_copy", lambda c: _same_block_shift(c, "conv_ds")),
}


@pytest.mark.parametrize("zoo_id", [pytest.param(z, marks=() if z == "BM-NOGUARD" else MATRIX)
                                    for z in sorted(RACY_GEOMETRY)])
def test_racy_variant_is_flagged_on_every_racy_case_and_only_there(zoo_id):
    """Deterministic detection: the first racy case drawn is the first one flagged."""
    contract, racy = RACY_GEOMETRY[zoo_id]
    fn = registry.get(f"zoo.{zoo_id}").fn
    seen = {True: 0, False: 0}

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy(contract))
    def check(case):
        expected = racy(case)
        if expected is None:
            return
        verdict = run_case(fn, case, "cpu", mode="race")
        races = [h for h in verdict.hazards if h.kind == "intra-program"]
        assert bool(races) == expected, (case.describe(), verdict.summary())
        seen[expected] += 1

    check()
    # racy draws are about 1 in 10; an unlucky run once had 2 of 80, so the floor is what proves the test
    # checked both sides at all
    assert seen[True] >= 1 and seen[False] >= 4, seen

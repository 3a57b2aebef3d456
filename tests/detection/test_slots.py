"""The slot contracts (docs/contracts.md#slot_copy, #slot_fork) end to end: hand-worked oracle examples, the project's
kernels and the torch path against them, the zoo rows caught (the racy ones by the race check, on every
chain), the correct kernels clean, ``--chains forbidden``, the sparse image past 2 GiB, and the README's
adapter from the CLI."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from common import ROOT, fuzz_options, mf
from mambafuzz import contracts, oracle
from mambafuzz.contracts import case_from_json
from mambafuzz.contracts import slots as contract_slots
from mambafuzz.contracts.slot_copy import SlotCopyCase
from mambafuzz.contracts.slot_fork import SlotForkCase
from mambafuzz.judge.engine import run_case
from mambafuzz.errors import CaseError
from mambafuzz.search.fuzz import fuzz_target
from mambafuzz.kernels import registry
from mambafuzz.kernels import slots as kslots
from mambafuzz.judge.materialize import materialize
from mambafuzz.oracle import OracleError, SlotBuffer, SlotConflict

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
SLOT_ZOO = ("SLOT-CHAIN", "FORK-CHAIN", "SLOT-I32", "SLOT-FLAT", "SLOT-PAD")
RACY = ("SLOT-CHAIN", "FORK-CHAIN")
CORRECT = ("triton.slot_copy", "triton.slot_fork", "torch.slot_copy", "torch.slot_fork")

# four 2-byte slots, contiguous: slot k holds (10(k+1), 10(k+1)+1)
FOUR = [SlotBuffer(offset=0, layers=1, slots=4, slot_bytes=2, slot_stride=2, layer_stride=8)]
FOUR_SNAP = np.array([10, 11, 20, 21, 30, 31, 40, 41], dtype=np.uint8)


def _copy(src, dst):
    return list(oracle.expect_slot_copy(FOUR_SNAP, FOUR, src, dst))


def _fork(src, dst):
    return list(oracle.expect_slot_fork(FOUR_SNAP, FOUR, src, dst))


# ---------------------------------------------------------------- oracle, by hand
def test_chain_reads_the_snapshot():
    # slot 1 <- slot 0, slot 2 <- slot 1 as it was (20, 21), not the 10, 11 it just received
    assert _copy([0, 1], [1, 2]) == [10, 11, 10, 11, 20, 21, 40, 41]
    assert _copy([1, 0], [2, 1]) == [10, 11, 10, 11, 20, 21, 40, 41]  # pair order does not matter


def test_swap_and_cycle():
    assert _copy([0, 1], [1, 0]) == [20, 21, 10, 11, 30, 31, 40, 41]
    assert _copy([0, 1, 2], [1, 2, 0]) == [30, 31, 10, 11, 20, 21, 40, 41]


def test_self_copies_change_nothing_and_can_be_read():
    assert _copy([2], [2]) == list(FOUR_SNAP)
    assert _copy([2, 2], [2, 3]) == [10, 11, 20, 21, 30, 31, 30, 31]


def test_fork_and_fork_chain():
    assert _fork([1], [[0, 2, 3]]) == [20, 21, 20, 21, 20, 21, 20, 21]
    # pair 1's parent (slot 1) is a child of pair 0: slot 2 gets slot 1 as it was; slot 2 named twice, one source
    assert _fork([0, 1], [[1, 3], [2, 2]]) == [10, 11, 10, 11, 20, 21, 10, 11]


def test_padded_strides_two_layers_padding_untouched():
    # layer l slot s at 1 + 10 l + 3 s (2 data bytes, 1 byte of slot padding, 1 of layer padding)
    buf = SlotBuffer(offset=1, layers=2, slots=3, slot_bytes=2, slot_stride=3, layer_stride=10)
    snap = np.arange(22, dtype=np.uint8)
    out = oracle.expect_slot_copy(snap, [buf], [0, 2], [2, 0])  # a swap of slots 0 and 2
    expected = snap.copy()
    expected[[1, 2, 7, 8, 11, 12, 17, 18]] = [7, 8, 1, 2, 17, 18, 11, 12]
    assert list(out) == list(expected)


def test_slot_major_buffer():
    # an [S, L] tensor seen as [L, S]: (layer l, slot s) at 5 s + 2 l, byte 4 of each slot is padding
    buf = SlotBuffer(offset=0, layers=2, slots=2, slot_bytes=2, slot_stride=5, layer_stride=2)
    assert buf.slot_major and not buf.layer_major
    out = oracle.expect_slot_copy(np.arange(10, dtype=np.uint8), [buf], [1], [0])
    assert list(out) == [5, 6, 7, 8, 4, 5, 6, 7, 8, 9]
    assert buf.locate(4) == (1, 0, 2, False) and buf.locate(7) == (1, 1, 0, True) and buf.locate(10) is None


def test_two_sources_for_one_slot_are_ill_posed_and_named():
    with pytest.raises(SlotConflict) as ei:
        oracle.check_slots(FOUR, [0, 1], [2, 2])
    assert isinstance(ei.value, oracle.IllPosedBatch)
    assert str(ei.value) == "ill-posed batch: pair 0 writes slot 2 from slot 0 and pair 1 writes it from slot 1"
    with pytest.raises(SlotConflict, match=r"pair 0 \(child 1\) writes slot 3 from slot 0 and pair 1 \(child 0\)"):
        oracle.expect_slot_fork(FOUR_SNAP, FOUR, [0, 1], [[2, 3], [3, 0]])
    assert oracle.find_slot_conflict([0, 0], [2, 2]) is None  # one source twice: well-posed
    assert _copy([0, 0], [2, 2]) == [10, 11, 20, 21, 10, 11, 40, 41]


@pytest.mark.parametrize("buffers, src, dst, message", [
    (FOUR, [4], [0], "src_idx value 4 is outside the 4 slot(s) of buffer 0"),
    (FOUR, [0], [-1], "dst_idx value -1 is outside"),
    ([SlotBuffer(0, 2, 2, 4, 2, 8)], [0], [1], "slots overlap"),
    ([SlotBuffer(0, 1, 4, 2, 2, 8), SlotBuffer(6, 1, 1, 2, 2, 2)], [0], [1], "buffers 0 and 1 overlap"),
    ([SlotBuffer(0, 1, 4, 2, 2, 8, elem_size=4)], [0], [1], "slot_bytes 2 is not a multiple of elem_size 4"),
    ([SlotBuffer(4, 1, 4, 2, 2, 8)], [0], [1], "ends past the arena size 8"),
])
def test_bad_geometry_is_one_clear_oracle_error(buffers, src, dst, message):
    with pytest.raises(OracleError) as ei:
        oracle.expect_slot_copy(FOUR_SNAP, buffers, src, dst)
    assert message in str(ei.value) and "\n" not in str(ei.value)


def test_chained_pairs_excludes_self_copies():
    assert list(oracle.chained_pairs([0, 1, 5], [1, 2, 6])) == [False, True, False]
    assert list(oracle.chained_pairs([0, 1], [1, 0])) == [True, True]
    assert list(oracle.chained_pairs([2, 2], [2, 3])) == [False, False]  # slot 2 is only "written" by itself
    assert list(oracle.chained_pairs([0, 1], [[1, 3], [2, 4]])) == [False, True]


def test_meta_columns_agree_with_the_kernels():
    names = [n for n in dir(kslots) if n.startswith("SLOT_META_") and n != "SLOT_META_COLS"]
    assert kslots.SLOT_META_COLS == len(contract_slots.SLOT_META_COLUMNS)
    for name in names:
        assert contract_slots.SLOT_META_COLUMNS[getattr(kslots, name)] == name[len("SLOT_META_"):]


# ---------------------------------------------------------------- kernels and the torch path vs the oracle
def _case(src, dst, buffers=None, dtype="int32", arena=None):
    buffers = tuple(buffers or (SlotBuffer(8, 2, 5, 12, 16, 88, 4), SlotBuffer(200, 3, 5, 3, 3, 15, 1)))
    arena = arena or max(b.offset + b.nbytes for b in buffers) + 64
    kind = SlotForkCase if np.ndim(dst) == 2 else SlotCopyCase
    dst = tuple(tuple(r) for r in dst) if np.ndim(dst) == 2 else tuple(dst)
    return kind(arena_size=arena, buffers=buffers, src_idx=tuple(src), dst_idx=dst, index_dtype=dtype, seed=5)


HAND_CASES = {
    "chain": _case([0, 1, 2], [1, 2, 3]),
    "chain-reversed": _case([2, 1, 0], [3, 2, 1]),
    "swap": _case([0, 3], [3, 0], dtype="int64"),
    "cycle": _case([0, 1, 2, 4], [1, 2, 4, 0]),
    "self-and-reader": _case([2, 2], [2, 3]),
    "slot-major": _case([1, 0], [0, 3], buffers=[SlotBuffer(0, 3, 4, 6, 3 * 8 + 2, 8, 2)]),
    "wide": _case([0, 1], [1, 0], buffers=[SlotBuffer(16, 2, 2, 3000, 3008, 6024, 8)]),
}
FORK_CASES = {
    "fork": _case([1], [[0, 2, 3, 4]]),
    "fork-chain": _case([0, 1], [[1, 3], [2, 4]], dtype="int64"),
    "fork-chain-self": _case([0, 2], [[2, 0], [1, 3]]),  # child 0->0 is a self-copy; slot 2 is read back
    "fork-one-source-twice": _case([0], [[2, 2]]),
}


@pytest.mark.parametrize("name, label", [(n, label) for n in CORRECT
                                          for label in (FORK_CASES if n.endswith("fork") else HAND_CASES)])
def test_correct_targets_match_the_oracle_with_no_hazard(name, label):
    case = {**HAND_CASES, **FORK_CASES}[label]
    verdict = run_case(registry.get(name).fn, case, "cpu", mode="race")
    assert not verdict.failed, verdict.summary()


@pytest.mark.parametrize("limit", [0, 1, 40, 200])
def test_rounds_through_a_small_scratch_stay_correct(limit):
    """A scratch limit below one layer's pieces makes the launcher work in rounds of layers and byte ranges."""
    case = HAND_CASES["cycle"]
    copy = registry.get("triton.slot_copy").fn

    def small_scratch(meta, src_idx, dst_idx, *, arena=None):
        kslots.slot_copy(meta, src_idx, dst_idx, scratch_limit=limit)

    assert kslots._rounds(4, 2, 3, 12, limit) != kslots._rounds(4, 2, 3, 12, kslots.SCRATCH_LIMIT)
    verdict = run_case(small_scratch, case, "cpu", mode="race")
    assert not verdict.failed, verdict.summary()
    assert not run_case(copy, case, "cpu", mode="race").failed


def test_kernel_rejects_bad_arguments():
    m = materialize(HAND_CASES["chain"], "cpu")
    meta, src, dst = m.args["meta"], m.args["src_idx"], m.args["dst_idx"]
    with pytest.raises(TypeError, match="meta must be an int64"):
        kslots.slot_copy(meta.int(), src, dst)
    with pytest.raises(TypeError, match="src_idx must be int32 or int64"):
        kslots.slot_copy(meta, src.double(), dst)
    with pytest.raises(TypeError, match="dst_idx must be a 2-D tensor"):
        kslots.slot_fork(meta, src, dst)
    with pytest.raises(ValueError, match="src_idx has 3 pairs, dst_idx 2"):
        kslots.slot_copy(meta, src, dst[:2])


def test_an_empty_batch_changes_nothing():
    m = materialize(HAND_CASES["chain"], "cpu")
    before = m.arena.clone()
    kslots.slot_copy(m.args["meta"], m.args["src_idx"][:0], m.args["dst_idx"][:0])
    assert bool((m.arena == before).all())


# ---------------------------------------------------------------- strategies and cases
@FAST
@given(contracts.strategy("slot_copy"))
def test_drawn_copies_are_well_posed_and_round_trip(case):
    assert contracts.get("slot_copy").valid(case)
    back = case_from_json(json.loads(json.dumps(case.to_json())))
    assert back == case and back.content_hash() == case.content_hash()


@FAST
@given(contracts.strategy("slot_fork"))
def test_drawn_forks_are_well_posed_with_fanout_up_to_8(case):
    assert contracts.get("slot_fork").valid(case)
    assert 1 <= len(case.dst_idx[0]) <= 8 and len({len(r) for r in case.dst_idx}) == 1


@FAST
@given(contracts.strategy("slot_fork", chains="forbidden"))
def test_chains_forbidden_draws_no_slot_that_is_both_written_and_read(case):
    written = {d for row in case.dst_idx for d in row}
    assert not written & set(case.src_idx)


@FAST
@given(contracts.strategy("slot_copy", ill_posed=True))
def test_ill_posed_on_request_only(case):
    assert oracle.find_slot_conflict(case.src_idx, case.dst_idx) is not None
    assert not contracts.get("slot_copy").valid(case)


def test_strategies_lean_towards_chains_swaps_self_copies_and_huge_buffers():
    seen = {"chain": 0, "swap": 0, "self": 0, "huge": 0, "slot-major": 0, "padded": 0}

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy("slot_copy"))
    def draw(case):
        pairs = set(zip(case.src_idx, case.dst_idx))
        seen["chain"] += bool(oracle.chained_pairs(case.src_idx, case.dst_idx).any())
        seen["swap"] += any((d, s) in pairs for s, d in pairs if s != d)
        seen["self"] += any(s == d for s, d in pairs)
        seen["huge"] += case.arena_size > 1 << 31
        seen["slot-major"] += any(not b.layer_major for b in case.buffers)
        seen["padded"] += any(b.slot_stride > b.slot_bytes for b in case.buffers)

    draw()
    assert min(seen.values()) >= 5, seen


def test_bad_chains_value_is_a_usage_error():
    from mambafuzz.errors import UsageError
    with pytest.raises(UsageError, match="chains must be one of allowed, forbidden"):
        contracts.strategy("slot_copy", chains="sometimes")


@pytest.mark.parametrize("body, message", [
    ({"buffers": [{"offset": 0}]}, "buffers[0]' is missing layers"),
    ({"index_dtype": "int16"}, "'index_dtype' must be one of int32, int64"),
    ({"buffers": [dict(offset=0, layers=1, slots=2, slot_bytes=2, slot_stride=2, layer_stride=4, elem_size=1,
                       pad=3)]}, "unknown field(s): pad"),
])
def test_bad_case_json_is_named(body, message):
    good = HAND_CASES["chain"].to_json()
    with pytest.raises(CaseError) as ei:
        case_from_json({**good, **body})
    assert message in str(ei.value)
    with pytest.raises(CaseError, match="rectangular"):
        case_from_json({**FORK_CASES["fork"].to_json(), "dst_idx": [[0, 2], [3]], "src_idx": [1, 1]})


@FAST
@given(contracts.strategy("slot_fork"))
def test_reduction_candidates_are_valid_and_strictly_smaller(case):
    contract = contracts.get("slot_fork")
    for smaller in contract.candidates(case):
        assert smaller.size < case.size
        if contract.valid(smaller):
            assert smaller.arena_size >= max(b.offset + b.nbytes for b in smaller.buffers)


def test_locate_names_buffer_layer_slot_and_writer():
    case = HAND_CASES["chain"]
    where = contracts.get("slot_copy").locate(case, 8 + 88 + 2 * 16 + 1)
    assert where == "buffer 0 layer 1 slot 2 byte 1 (data; written by pair 1 from slot 1)"
    assert "padding" in contracts.get("slot_copy").locate(case, 8 + 12)


# ---------------------------------------------------------------- past 2 GiB: the sparse image
HUGE = 1 << 31


def test_sparse_image_equals_the_dense_expectation(monkeypatch):
    case = HAND_CASES["cycle"]
    contract = contracts.get("slot_copy")
    dense = contract.image(case)
    snap = np.random.default_rng(1).integers(0, 256, case.arena_size, dtype=np.uint8)
    full = oracle.expect_slot_copy(snap, case.buffers, case.src_idx, case.dst_idx)
    monkeypatch.setattr(contract_slots, "DENSE_LIMIT", 0)
    sparse = contract.image(case)
    assert dense.positions is None and sparse.positions is not None
    live = sparse.positions >= 0
    assert len(np.unique(sparse.positions[live])) == live.sum()  # no arena byte twice
    image = np.zeros(len(sparse.positions), dtype=np.uint8)
    image[live] = snap[sparse.positions[live]]
    buffers, src, dst = sparse.plan
    got = oracle.expect_slot_copy(image, buffers, src, dst.reshape(-1))
    assert np.array_equal(got[live], full[sparse.positions[live]])
    # every data byte of a named slot is in the image, and nothing of an unnamed one (slot 3)
    named = {b.slot_offset(l, s) + k for b in case.buffers for l in range(b.layers) for s in (0, 1, 2, 4)
             for k in range(b.slot_bytes)}
    assert named <= set(sparse.positions[live].tolist())
    assert case.buffers[0].slot_offset(0, 3) not in set(sparse.positions[live].tolist())


def _huge_case(src, dst):
    buf = SlotBuffer(offset=64, layers=1, slots=3, slot_bytes=16, slot_stride=HUGE, layer_stride=3 * HUGE,
                     elem_size=8)
    return SlotCopyCase(arena_size=64 + buf.nbytes + 64, buffers=(buf,), src_idx=tuple(src), dst_idx=tuple(dst),
                        seed=1)


@pytest.mark.parametrize("src, kind", [([2], "mismatch"), ([1], "oob")])
def test_slot_offsets_past_2_gib(src, kind):
    """Slot 2 starts at 4 GiB (SLOT-I32 wraps to slot 0: wrong bytes); slot 1 at 2 GiB (wraps negative:
    out of bounds).  The correct kernels and the torch path copy both."""
    case = _huge_case(src, [0])
    for name in ("triton.slot_copy", "torch.slot_copy"):
        verdict = run_case(registry.get(name).fn, case, "cpu", mode="race")
        assert not verdict.failed, (name, verdict.summary())
    verdict = run_case(registry.get("zoo.SLOT-I32").fn, case, "cpu", mode="race")
    assert verdict.kind == kind, verdict.summary()
    if kind == "oob":
        assert verdict.hazards[0].kind == "out-of-bounds"


# ---------------------------------------------------------------- detection power
def _cross_program(verdict):
    return [h for h in verdict.hazards if h.kind == "cross-program"]


@pytest.mark.parametrize("zoo_id, contract", [("SLOT-CHAIN", "slot_copy"), ("FORK-CHAIN", "slot_fork")])
@pytest.mark.matrix
def test_the_race_check_flags_every_chain_and_nothing_else(zoo_id, contract):
    """Deterministic: the first chained case drawn is the first one flagged; the correct kernel never is."""
    racy = registry.get(f"zoo.{zoo_id}").fn
    correct = registry.get(f"triton.{contract}").fn
    seen = {True: 0, False: 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy(contract))
    def check(case):
        chained = bool(oracle.chained_pairs(case.src_idx, case.children).any())
        verdict = run_case(racy, case, "cpu", mode="race")
        assert bool(_cross_program(verdict)) == chained, (case.describe(), verdict.summary())
        assert not [h for h in verdict.hazards if h.kind != "cross-program"], verdict.summary()
        if chained:
            assert not run_case(correct, case, "cpu", mode="race").failed
        seen[chained] += 1

    check()
    assert seen[True] >= 5 and seen[False] >= 5, seen


def test_zoo_rows_are_in_the_table_and_registry():
    rows = {e.id: e for e in registry.ZOO if e.contract in ("slot_copy", "slot_fork")}
    assert set(rows) == set(SLOT_ZOO)
    for zoo_id, e in rows.items():
        t = registry.get(f"zoo.{zoo_id}")
        assert (t.kind, t.contract, t.bug) == ("zoo", e.contract, e.kind) and t.amplifiable
        assert e.racy == (zoo_id in RACY)


@pytest.mark.parametrize("zoo_id", SLOT_ZOO)
@pytest.mark.matrix
def test_every_slot_zoo_row_is_caught_and_shrunk(zoo_id, tmp_path):
    report = fuzz_target(registry.get(f"zoo.{zoo_id}"), fuzz_options(tmp_path, max_examples=300, seed=1,
                                                                     database=None))
    f = report.finding
    assert f is not None, f"{zoo_id} escaped {report.examples} examples"
    assert f.verdict.kind in registry.zoo_entry(zoo_id).caught_as("cpu"), f.verdict.summary()
    case = f.case
    b = case.buffers[0]
    assert len(case.buffers) == 1, case.describe()
    if zoo_id == "SLOT-I32":  # one layer, or two where the second starts past 2 GiB
        last = b.slot_offset(b.layers - 1, max(case.src_idx + case.dst_idx)) - b.offset
        assert last >= HUGE and b.layers <= 2 and case.arena_size > HUGE, case.describe()
    else:
        assert b.layers == 1, case.describe()
    if zoo_id in RACY:
        assert _cross_program(f.verdict), f.verdict.summary()
        assert len(case.src_idx) == 2 and oracle.chained_pairs(case.src_idx, case.children).any(), case.describe()
    else:
        assert len(case.src_idx) == 1, case.describe()
    if zoo_id in ("SLOT-FLAT", "SLOT-PAD"):
        assert f.verdict.mismatch is not None
        assert b.slot_stride <= b.slot_bytes + b.elem_size, case.describe()  # the padding shrunk to one element
    assert f.path is not None and f.path.exists()


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.matrix if n.startswith("triton.") else ())
                                  for n in CORRECT])
def test_correct_targets_pass_the_same_fuzzing(name, tmp_path):
    report = fuzz_target(registry.get(name), fuzz_options(tmp_path, max_examples=40, seed=2, database=None))
    assert report.finding is None, report.finding.verdict.summary()
    assert report.examples == 40 and not report.rejected


@pytest.mark.matrix
def test_chains_forbidden_keeps_a_chain_unsafe_kernel_clean(tmp_path):
    opts = fuzz_options(tmp_path, max_examples=40, seed=3, database=None, contract_options={"chains": "forbidden"})
    report = fuzz_target(registry.get("zoo.SLOT-CHAIN"), opts)
    assert report.finding is None and report.examples == 40, report.finding and report.finding.verdict.summary()


# ---------------------------------------------------------------- the README's adapter, from the CLI
ADAPTER = '''
from mambafuzz import adapters


def copy_slots(buffers, src, dst):      # stands in for the engine's kernel: gathers, then scatters
    for buf in buffers:
        buf[:, dst] = buf[:, src]


def copy_slots_pair_by_pair(buffers, src, dst):  # wrong on chains: a later pair reads a slot already written
    for buf in buffers:
        for s, d in zip(src.tolist(), dst.tolist()):
            buf[:, d] = buf[:, s]


def my_slot_copy(meta, src_idx, dst_idx, *, arena):
    """My engine's slot copy, on views of the arena."""
    copy_slots(adapters.slot_buffers(meta, arena), src_idx.long(), dst_idx.long())


def my_slot_fork(meta, src_idx, dst_idx, *, arena):
    """Each parent to its N children."""
    src = src_idx.long().repeat_interleave(dst_idx.shape[1])
    copy_slots(adapters.slot_buffers(meta, arena), src, dst_idx.long().reshape(-1))


def pair_by_pair(meta, src_idx, dst_idx, *, arena):
    copy_slots_pair_by_pair(adapters.slot_buffers(meta, arena), src_idx.long(), dst_idx.long())
'''


@pytest.mark.slow
@pytest.mark.matrix
def test_readme_adapter_runs_from_the_cli(tmp_path):
    (tmp_path / "myslots.py").write_text(textwrap.dedent(ADAPTER))
    common = ("--max-examples", 25, "--database", "none", "--no-isolate", "--seed", 4)
    for target, contract in (("my_slot_copy", "slot_copy"), ("my_slot_fork", "slot_fork")):
        r = mf("fuzz", "--target", f"myslots:{target}", "--contract", contract, *common, cwd=tmp_path)
        assert r.returncode == 0, (r.stdout, r.stderr)
    r = mf("fuzz", "--target", "myslots:pair_by_pair", "--contract", "slot_copy", "--chains", "forbidden", *common,
           cwd=tmp_path)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = mf("fuzz", "--target", "myslots:pair_by_pair", "--contract", "slot_copy", *common, cwd=tmp_path)
    assert r.returncode == 1 and "FINDING myslots:pair_by_pair (mismatch)" in r.stdout, (r.stdout, r.stderr)


# ---------------------------------------------------------------- compiled mode without a GPU
COMPILE = r'''
import os
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mambafuzz.kernels.slots import _slot_kernel, KERNEL_FLAGS
SIG = {"meta_ptr": "*i64", "src_ptr": "*i32", "dst_ptr": "*i64", "active_ptr": "*i32", "scratch_ptr": "*u8",
       "N": "i32", "l0": "i32", "c0": "i32", "cb": "i32", "seed": "i32"}
def comp(phase, width, flag=None, delay=0):
    consts = {"PHASE": phase, "BLOCK": 1024, "WIDTH": width, **{f: f == flag for f in KERNEL_FLAGS},
              "DELAY_POS": 1 if delay else 0, "DELAY_NS": delay, "SCHEDULE": 1 if delay else 0}
    k = triton.compile(ASTSource(fn=_slot_kernel, signature={**SIG, **{c: "constexpr" for c in consts}},
                                 constexprs=consts), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "num_stages": 1})
    assert "cubin" in k.asm
for phase in (0, 1, 2):
    for width in (8, 4, 2, 1):
        comp(phase, width)
for flag in KERNEL_FLAGS:
    comp(1, 8, flag)
comp(1, 8, delay=500)
print("compiled")
'''


@pytest.mark.slow
@pytest.mark.matrix
def test_slot_kernel_compiles_for_sm90_without_a_gpu():
    """The interpreter does not enforce compiled typing rules; ptxas does, with no GPU needed."""
    try:
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"Triton's NVIDIA backend is not available: {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", COMPILE], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]


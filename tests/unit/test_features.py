"""Case features on hand-made cases whose overlap, shift, aliasing and layout are worked out by hand;
the Tally's counts, race map, JSON and summary lines; Hypothesis events reaching --observe records."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mambafuzz import contracts
from mambafuzz.search import features
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.cases.postprocess import PostprocessCase
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.contracts.slot_copy import SlotCopyCase
from mambafuzz.contracts.slot_fork import SlotForkCase
from mambafuzz.judge.engine import SavedHazard, Verdict
from mambafuzz.search.features import Tally, features as feats
from mambafuzz.oracle import PoolLayout, SlotBuffer
from mambafuzz.strategies import CPU, GPU_AMP


def batch(*rows, arena=4096, perturb=None):
    return BatchCopyCase(arena_size=arena, copies=tuple(rows), perturb=perturb)


# ---------------------------------------------------------------- batch_memcpy
def test_a_left_overlap_row():
    f = feats(batch((16, 8, 24)))  # dst 8 < src 16, 24 bytes: the ranges share 16 bytes
    assert f["overlap"] == "left"
    assert f["shift"] == "8-15" and f["size"] == "8-63"
    assert f["src_align"] == ">=16" and f["dst_align"] == "8"
    assert f["rows"] == "1" and f["zero_size"] == "no"


def test_a_right_overlap_a_self_copy_and_a_disjoint_row():
    assert feats(batch((8, 9, 24)))["overlap"] == "right"
    assert feats(batch((8, 9, 24)))["shift"] == "1"
    same = feats(batch((33, 33, 5)))
    assert (same["overlap"], same["shift"], same["src_align"]) == ("same", "0", "1")
    apart = feats(batch((0, 100, 10)))  # 100 bytes apart, 10 moved: no overlap
    assert (apart["overlap"], apart["shift"]) == ("none", "none")
    assert feats(batch((0, 8, 8)))["overlap"] == "none"  # shift == size: adjacent, not overlapping


def test_several_rows_give_every_label_in_bucket_order():
    f = feats(batch((200, 300, 4), (16, 8, 24), (0, 0, 0)))
    assert f["overlap"] == "none,left,same"
    assert f["shift"] == "none,0,8-15"
    assert f["size"] == "0,1-7,8-63"
    assert f["rows"] == "2-3" and f["zero_size"] == "yes"
    assert features.labels_of(f["overlap"]) == ["none", "left", "same"]


def test_the_race_map_takes_the_tightest_real_overlap_not_a_self_copy():
    t = Tally()
    t.expect("batch_memcpy", device="cuda")
    t.add(batch((33, 33, 5), (100, 140, 64), (300, 301, 2)), Verdict(reps=10, failures=3, mode="compare"), 0.0)
    assert t.cells == {("1", "1-7", "default", "0"): [10, 3]}  # the shift-1 row, not the self-copy


# ---------------------------------------------------------------- state_copy / postprocess
SD = PoolLayout(kind="conv_sd", offset=64, num_blocks=4, block_stride=48, elem_size=2, state_len=4, dim=3)
DS = PoolLayout(kind="conv_ds", offset=1024, num_blocks=4, block_stride=80, elem_size=4, state_len=4, dim=2,
                row_stride=24)
TEMPORAL = PoolLayout(kind="temporal", offset=2048, num_blocks=4, block_stride=16, elem_size=8, inner=(2,))


def state_copy(pools, tables, src, dst, bias, arena=4096):
    return StateCopyCase(arena_size=arena, pools=tuple(pools), block_tables=tables, num_tiles=2,
                         src_cols=tuple(src), dst_cols=tuple(dst), biases=tuple(bias))


def test_a_conv_shift_within_one_block_is_a_left_overlap_of_bias_tokens():
    # request 0: columns 0 and 1 both map to physical block 2; shift by 1 token of 3 x 2 bytes
    f = feats(state_copy([SD], (((2, 2),),), [0], [1], [1]))
    assert f["overlap"] == "left" and f["aliasing"] == "same"
    assert f["shift"] == "4-7"          # 1 token = dim 3 x elem 2 = 6 bytes
    assert f["size"] == "8-63"          # 3 tokens kept x 6 bytes = 18
    assert f["layout"] == "sd" and f["elem"] == "2"
    assert f["padding"] == "block"      # stride 48 > data 4 x 3 x 2 = 24
    assert f["src_align"] == "2"        # 64 + 2 x 48 + 6 = 166
    assert f["dst_align"] == ">=16"     # 64 + 2 x 48 = 160
    assert f["past_2gib"] == "no" and f["tiles"] == "2-3"


def test_distinct_blocks_a_temporal_self_copy_and_a_shared_block():
    apart = feats(state_copy([SD], (((0, 1),),), [0], [1], [1]))
    assert (apart["overlap"], apart["aliasing"]) == ("none", "none")
    # temporal: reads column src + bias = 1 (block 3) into column 1 (block 3): the same block, no shift
    same = feats(state_copy([TEMPORAL], (((0, 3),),), [0], [1], [1]))
    assert (same["overlap"], same["shift"], same["size"]) == ("same", "0", "8-63")
    assert same["padding"] == "none"
    # two requests whose rows both hold block 1: prefix sharing
    shared = feats(state_copy([SD], (((0, 1), (1, 2)),), [0, 0], [1, 1], [0, 0]))
    assert shared["aliasing"] == "shared"


def test_ds_rows_padding_alignment_and_a_pool_past_2_gib():
    f = feats(state_copy([DS], (((1, 1),),), [0], [0], [2]))
    assert f["layout"] == "ds" and f["padding"] == "block,row"  # rows 24 > 4 x 4; stride 80 > 24 + 16
    assert f["shift"] == "8-15"           # 2 tokens x 4 bytes per row
    assert f["size"] == "8-63"            # 2 rows x 2 tokens x 4 bytes
    assert f["src_align"] == "8"          # 1024 + 80 + 8 = 1112, rows 24 apart: 8-aligned
    huge = PoolLayout(kind="temporal", offset=64, num_blocks=3, block_stride=(1 << 30) + 64, elem_size=1, inner=(8,))
    f = feats(state_copy([huge], (((0, 2),),), [0], [1], [0], arena=(3 << 30) + 256))
    assert f["past_2gib"] == "yes"        # block 2 starts at 64 + 2 x (1 GiB + 64)


def test_postprocess_decisions():
    # block_size 4.  r0: running 5, 4 accepted -> aligned 8, bias 3, dst col 1 == state_idx 1: copy in place
    # r1: running 8, 1 accepted -> aligned 8 == running, dst col 1 == state_idx 1, bias 0: skipped
    # r2: running 5, 1 accepted -> aligned 4 < running: no copy
    case = PostprocessCase(arena_size=4096, pools=(SD,), block_tables=(((0, 2), (1, 3), (0, 1)),), num_tiles=1,
                           block_size=4, num_computed=(4, 7, 4), num_scheduled=(4, 1, 4), num_draft=(3, 0, 3),
                           num_accepted=(4, 1, 1), state_idx=(1, 1, 1))
    f = feats(case)
    assert f["decision"] == "no-copy,copy,self-skip"
    assert f["overlap"] == "left"          # r0 shifts 3 tokens within block 2
    assert f["shift"] == "16-63"           # 3 tokens x 6 bytes


# ---------------------------------------------------------------- slots
def slots(src, dst, buffers=None, fork=False, arena=8192):
    buffers = buffers or (SlotBuffer(64, 2, 6, 12, 16, 96, 4),)
    cls = SlotForkCase if fork else SlotCopyCase
    return cls(arena_size=arena, buffers=buffers, src_idx=tuple(src),
               dst_idx=tuple(tuple(r) for r in dst) if fork else tuple(dst))


def test_slot_chains_swaps_cycles_and_self_copies():
    assert feats(slots([0], [1]))["chains"] == "none"
    assert feats(slots([0], [0]))["chains"] == "self"
    assert feats(slots([0], [0]))["overlap"] == "same"
    assert feats(slots([0, 1], [1, 2]))["chains"] == "none,chain"      # pair 1 reads what pair 0 writes
    assert feats(slots([0, 1], [1, 0]))["chains"] == "chain,swap"
    assert feats(slots([0, 1, 2], [1, 2, 0]))["chains"] == "chain,cycle"


def test_slot_layout_padding_alignment_and_fanout():
    f = feats(slots([0], [1]))
    assert f["layout"] == "layer-major" and f["elem"] == "4"
    assert f["padding"] == "slot"          # slot stride 16 > 12 bytes; layers 6 x 16 = 96 apart: no layer padding
    assert f["src_align"] == ">=16" and f["dst_align"] == ">=16"   # 64 + 0/16, layers 96 apart
    slot_major = SlotBuffer(64, 3, 2, 8, 40, 8, 8)   # [S, L]: layers 8 apart in a slot, slots 40 apart
    f = feats(slots([0], [1], buffers=(slot_major,)))
    assert f["layout"] == "slot-major" and f["padding"] == "slot"   # 40 > 3 x 8
    fork = feats(slots([0], [[1, 2, 3]], fork=True))
    assert fork["fanout"] == "2-3" and fork["rows"] == "1"
    huge = SlotBuffer(64, 2, 2, 8, 8, (1 << 31), 8)
    assert feats(slots([0], [1], buffers=(huge,), arena=(1 << 31) + 256))["past_2gib"] == "yes"


# ---------------------------------------------------------------- perturbation and verdict
def test_perturbation_and_verdict_features():
    none = feats(batch((16, 8, 24)))
    assert (none["perturb"], none["num_warps"], none["delay_ns"]) == ("none", "default", "0")
    f = feats(batch((16, 8, 24), perturb=(2, 500, 3, 7, 8)), Verdict(reps=100, failures=3, mode="compare"))
    assert (f["perturb"], f["schedule"], f["position"], f["num_warps"], f["delay_ns"]) == \
        ("delay", "random", "load-store", "8", "500")
    assert (f["verdict"], f["reps"]) == ("mismatch", "100-999")
    warps = feats(batch((16, 8, 24), perturb=(1, 0, 0, 0, 8)), Verdict(reps=1, failures=0, mode="race"))
    assert (warps["perturb"], warps["schedule"], warps["num_warps"], warps["verdict"]) == \
        ("warps-only", "none", "8", "pass")


# ---------------------------------------------------------------- the tally
def test_tally_counts_warns_and_round_trips():
    t = Tally()
    t.expect("batch_memcpy", profile=CPU, options={"overlap": "left"})
    assert "right" not in t.expected["overlap"]                       # --overlap left: never expected
    ok = Verdict(reps=1, failures=0, mode="race")
    t.add(batch((16, 8, 24)), ok, 0.5)
    t.add(batch((16, 8, 24), (0, 100, 0)), ok, 1.7)
    assert t.examples == 2
    assert t.counts["overlap"] == {"left": 2, "none": 1}
    assert t.never_drawn()["overlap"] == ["same"]
    assert t.cells == {}                                               # cpu, unperturbed: no race map
    body = t.to_json()
    assert body["race_map"] is None and body["timeline"] == [[0.5, 1], [1.7, 2]]
    assert body["coverage"]["never_drawn"]["overlap"] == ["same"]
    back = Tally.from_json(json.loads(json.dumps(body)))
    assert back.to_json() == body


def test_perturbed_cases_fill_the_race_map_and_workers_merge():
    a, b = Tally(), Tally()
    for t in (a, b):
        t.expect("batch_memcpy", profile=GPU_AMP, device="cuda")
    case = batch((16, 8, 24), perturb=(1, 2000, 1, 0, 8))
    a.add(case, Verdict(reps=50, failures=2, mode="compare"), 1.0)
    b.add(case, Verdict(reps=50, failures=0, mode="compare"), 1.5)
    b.add(batch((16, 8, 24)), Verdict(reps=50, failures=0, mode="compare"), 2.5)
    merged = Tally.merged([Tally.from_json(a.to_json()), Tally.from_json(b.to_json())])
    assert merged.examples == 3
    assert merged.cells == {("8-15", "8-63", "8", "2000"): [100, 2], ("8-15", "8-63", "default", "0"): [50, 0]}
    assert merged.counts["num_warps"] == {"8": 2, "default": 1}
    assert merged.points() == [[1.0, 1], [1.5, 2], [2.5, 3]]
    assert "schedule" in merged.expected                              # gpu-amp expects perturbations
    race = merged.to_json()["race_map"]
    assert race["axes"] == ["shift", "size", "num_warps", "delay_ns"]
    assert ["8-15", "8-63", "8", "2000", 100, 2] in race["cells"]


def test_shrinking_candidates_add_their_rates_to_the_race_map_but_not_to_coverage():
    t = Tally()
    t.expect("batch_memcpy", profile=GPU_AMP, device="cuda")
    t.add(batch((16, 8, 24), perturb=(1, 2000, 1, 0, 8)), Verdict(reps=50, failures=5, mode="compare"), 1.0)
    before = json.dumps(t.to_json()["coverage"])
    t.add_rates(batch((9, 8, 4), perturb=(1, 2000, 1, 0, 8)), Verdict(reps=150, failures=1, mode="compare"))
    t.add_rates(batch((16, 8, 24)), Verdict(reps=50, failures=0, mode="compare"))
    assert t.examples == 1 and json.dumps(t.to_json()["coverage"]) == before
    assert t.cells == {("8-15", "8-63", "8", "2000"): [50, 5], ("1", "1-7", "8", "2000"): [150, 1],
                       ("8-15", "8-63", "default", "0"): [50, 0]}
    cpu = Tally()
    cpu.expect("batch_memcpy", profile=CPU, device="cpu")
    cpu.add_rates(batch((16, 8, 24)), Verdict(reps=1, failures=1, mode="race"))
    assert cpu.cells == {}  # interpreted and unperturbed: no race map


def test_a_hazard_without_wrong_bytes_counts_as_one_failing_repetition():
    t = Tally()
    t.expect("batch_memcpy", device="cuda")
    v = Verdict(reps=1, failures=0, mode="race", hazards=[SavedHazard({"kind": "intra-program"})])
    t.add(batch((16, 8, 24)), v, 0.0)
    assert list(t.cells.values()) == [[1, 1]]


def test_the_timeline_is_thinned_to_a_bounded_number_of_points():
    t = Tally()
    for i in range(3 * features.TIMELINE_POINTS):
        t.add(batch((16, 8, 24)), Verdict(reps=1, failures=0, mode="race"), float(i))
    assert len(t.timeline) <= features.TIMELINE_POINTS
    assert t.points()[-1] == [3.0 * features.TIMELINE_POINTS - 1, 3 * features.TIMELINE_POINTS]
    times = [p[0] for p in t.points()]
    assert times == sorted(times)


def test_summary_lines_fit_80_columns_and_name_the_holes():
    t = Tally()
    t.expect("slot_fork", profile=GPU_AMP)
    t.add(slots([0], [[1, 2, 3]], fork=True), Verdict(reps=1, failures=0, mode="race"), 0.0)
    lines = features.summary_lines("a.rather.long.module.path:my_slot_fork_kernel_name", t)
    assert lines[0].startswith("coverage of a.rather.long.module.path:my_slot_fork_kernel_name (1 examples)")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    warning = " ".join(lines[lines.index(next(x for x in lines if x.startswith("WARNING"))):])
    assert "chains self|chain|swap" in warning and "perturb warps-only|delay" in warning
    assert not features.summary_lines("x", Tally())                    # nothing ran: nothing to say
    assert features.warning_lines("x", t, width=80) and not features.summary_lines("x", t, warn=False)[-1] \
        .startswith("WARNING")


def test_a_features_error_is_counted_not_raised():
    t = Tally()
    bad = BatchCopyCase(arena_size=64, copies=((1, 2),), seed=0)  # a row without a size
    t.add(bad, Verdict(reps=1, failures=0, mode="race"), 0.0)
    assert t.counts["error"] == {"ValueError": 1}


# ---------------------------------------------------------------- Hypothesis events and --observe
def test_features_reach_hypothesis_observability_records(tmp_path):
    tally = Tally()

    @settings(max_examples=5, database=None, deadline=None)
    @given(st.integers(1, 30))
    def body(shift):
        features.observe(tally, batch((8 + shift, 8, 24)), Verdict(reps=1, failures=0, mode="race"), 0.0)

    features.run_observed(body, str(tmp_path / "obs"), "my.target")
    (records,) = (tmp_path / "obs").glob("*_testcases.jsonl")
    cases = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(cases) >= 5 and {c["property"] for c in cases} == {"my.target"}
    passed = [c for c in cases if c["status"] == "passed"]
    assert passed and all(c["features"]["overlap"] in ("left", "none") for c in passed)
    assert {c["features"]["verdict"] for c in passed} == {"pass"}
    assert not any(k.startswith("_") for c in passed for k in c["features"])
    from hypothesis.internal.observability import observability_enabled
    assert not observability_enabled()                                  # the callback is gone again


@pytest.mark.parametrize("contract", ["batch_memcpy", "state_copy", "postprocess", "slot_copy", "slot_fork"])
def test_every_drawn_case_has_labels_from_the_bucket_lists(contract):
    own = {**contracts.get(contract).buckets, **features.GENERIC_BUCKETS}

    @settings(max_examples=25, database=None, deadline=None)
    @given(contracts.strategy(contract, profile=GPU_AMP))
    def body(case):
        for name, value in feats(case, Verdict(reps=3, failures=1, mode="compare")).items():
            for label in features.labels_of(value):
                assert label in own[name], (name, label)  # the contract declares what it draws
                assert label in features.BUCKETS[name], (name, label)

    body()


def test_the_buckets_are_every_contracts_merged_each_in_its_own_order():
    every = features.buckets()
    for contract in contracts.registered().values():
        for name, labels in contract.buckets.items():
            assert [label for label in every[name] if label in labels] == list(labels), (contract.name, name)
    assert dict(features.BUCKETS) == every and every["verdict"] == features.GENERIC_BUCKETS["verdict"]
    assert features._merge([("none", "block", "element"), ("none", "layer", "slot", "element")]) == \
        ("none", "block", "layer", "slot", "element")
    assert features._merge([("a", "b"), ("b", "a")]) == ("a", "b")  # orders that disagree: first seen first


def test_coverage_knows_no_contract_by_name():
    import inspect

    source = inspect.getsource(features)
    assert not [name for name in contracts.names() if name in source]


# ---------------------------------------------------------------- which address term passes 2 GiB
GIB = 1 << 30


@pytest.mark.parametrize("buf, src, label", [
    (SlotBuffer(64, 2, 6, 12, 16, 96, 4), [5], "none"),
    (SlotBuffer(64, 2, 2, 8, 8, 2 * GIB, 8), [1], "layer"),                         # layer 1 at 2 GiB
    (SlotBuffer(64, 1, (1 << 28) + 1, 8, 8, 2 * GIB + 8, 8), [1 << 28], "slot"),     # slot 2^28 x 8 = 2 GiB
    (SlotBuffer(64, 3, (1 << 28) + 1, 8, 8, 2 * GIB + 8, 8), [1 << 28], "layer,slot"),
    # two layers 1.25 GiB apart, slot 2^27 at 1 GiB: neither term reaches 2 GiB, their sum does
    (SlotBuffer(64, 2, (1 << 27) + 1, 8, 8, GIB + GIB // 4, 8), [1 << 27], "element"),
    # the same slot ends 8 bytes short of 2 GiB in layer 1: nothing crosses
    (SlotBuffer(64, 2, (1 << 27) + 1, 8, 8, GIB - 16, 8), [1 << 27], "none"),
])
def test_slot_features_name_the_address_term_past_2_gib(buf, src, label):
    case = slots(src, [0], buffers=(buf,), arena=64 + buf.nbytes + 64)
    assert feats(case)["past_2gib_by"] == label


def test_pool_features_name_the_block_or_element_term_of_a_copied_block_past_2_gib():
    def pool(stride):
        return PoolLayout(kind="temporal", offset=64, num_blocks=3, block_stride=stride, elem_size=1, inner=(8,))

    def term(stride, table, src=0, dst=1):
        return feats(state_copy([pool(stride)], (table,), [src], [dst], [0], arena=3 * stride + 256))["past_2gib_by"]

    assert term(GIB + 64, ((0, 2),)) == "block"              # block 2 at 2 GiB + 128
    assert term(GIB - 2, ((0, 2),)) == "element"             # block 2 at 2 GiB - 4, its last byte past it
    assert term(GIB - 8, ((0, 2),)) == "none"                # block 2 ends at 2 GiB - 9
    # the highest block past 2 GiB but no request copies it: past_2gib says so, no term crosses
    case = state_copy([pool(GIB + 64)], (((0, 1, 2),),), [0], [1], [0], arena=3 * (GIB + 64) + 256)
    assert feats(case)["past_2gib"] == "yes" and feats(case)["past_2gib_by"] == "none"


def test_a_run_that_never_crossed_by_one_term_is_warned_about():
    t = Tally()
    t.expect("slot_copy", profile=CPU)
    assert t.expected["past_2gib_by"] == ("none", "layer", "slot", "element")
    ok = Verdict(reps=1, failures=0, mode="race")
    t.add(slots([1], [0], buffers=(SlotBuffer(64, 2, 2, 8, 8, 2 * GIB, 8),), arena=4 * GIB + 256), ok, 0.0)
    t.add(slots([0], [1]), ok, 0.1)
    assert t.never_drawn()["past_2gib_by"] == ["slot", "element"]
    assert "past_2gib_by slot|element" in " ".join(features.warning_lines("t", t))
    for contract in ("state_copy", "postprocess"):
        assert features.expected_features(contract)["past_2gib_by"] == ("none", "block", "element")

"""Cases round-trip and hash stably; strategies draw well-posed, bug-shaped cases."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from mambafuzz import contracts, oracle, strategies
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.contracts import case_from_json
from mambafuzz.errors import CaseError
from mambafuzz.judge.materialize import fill_bytes, materialize
from mambafuzz.judge.stats import format_rate, rate_upper_bound

ALL_CASES = st.one_of(*(contracts.strategy(c) for c in ("batch_memcpy", "state_copy", "postprocess")))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(ALL_CASES)
def test_case_json_round_trip_and_stable_hash(case):
    text = json.dumps(case.to_json())
    back = case_from_json(json.loads(text))
    assert back == case
    assert back.content_hash() == case.content_hash()


def test_hash_is_pinned():
    case = BatchCopyCase(arena_size=64, copies=((8, 0, 16),), seed=7)
    # Pinned literal: a hash that drifts between versions would orphan every saved crash file.
    assert case.content_hash() == "e1196c2960c889a9"
    assert case.content_hash() == BatchCopyCase(arena_size=64, copies=((8, 0, 16),), seed=7).content_hash()
    assert case.content_hash() != case.with_seed(8).content_hash()


@FAST
@given(ALL_CASES)
def test_every_drawn_case_is_well_posed(case):
    m = materialize(case, "cpu")  # raises CaseError if the oracle rejects the case
    assert m.expected.shape == m.snapshot.shape


@FAST
@given(strategies.batch_copy_cases(strategies.CPU, ill_posed=True))
def test_ill_posed_batches_are_reported_with_a_pair(case):
    with pytest.raises(CaseError, match="ill-posed"):
        materialize(case, "cpu")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(strategies.batch_copy_cases(strategies.CPU, overlap="left"))
def test_left_only_targets_never_get_right_overlaps(case):
    for src, dst, n in case.copies:
        assert not (src < dst < src + n), (src, dst, n)


def test_strategies_reach_the_shapes_bugs_hide_in():
    """Over a fixed number of draws (CPU profile), each bug-relevant feature shows up."""
    seen = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.one_of(contracts.strategy("batch_memcpy"), contracts.strategy("state_copy")))
    def collect(case):
        if isinstance(case, BatchCopyCase):
            for src, dst, n in case.copies:
                if dst < src < dst + n:
                    seen.add("left")
                if src < dst < src + n:
                    seen.add("right")
                if n and (src - dst) % 8:
                    seen.add("misaligned")
                if n % 8:
                    seen.add("tail")
        else:
            tables = np.asarray(case.block_tables)
            for pool in case.pools:
                seen.add(pool.kind)
                if pool.block_stride > pool.data_bytes:
                    seen.add("padded")
                bt = tables[pool.group]
                for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases)):
                    if pool.is_conv and bt[r, s] == bt[r, d] and 0 < b < pool.state_len:
                        seen.add(f"same-block {pool.kind}")
            if case.num_tiles > 1:
                seen.add("tiles")
    collect()
    want = {"left", "right", "misaligned", "tail", "conv_sd", "conv_ds", "temporal", "padded",
            "same-block conv_sd", "same-block conv_ds", "tiles"}
    assert want <= seen, want - seen


@pytest.mark.matrix
def test_cpu_profile_draws_spans_over_several_tiles():
    """Engine kernels work in 1-4 KiB tiles and their tile-edge bugs need spans of several: the
    CPU profile draws them now and then (about one state or row in ten), within its caps."""
    seen, biggest = set(), {}
    cpu = strategies.CPU

    def note(name, value):
        seen.add(name)
        biggest[name] = max(biggest.get(name, 0), value)

    # 600: one case in three now stretches a pool past 2 GiB, and a temporal state over several tiles
    # (about 2% of cases) was drawn 0 times in this test's 400 derandomised examples
    @settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy("state_copy"))
    def pools(case):
        tables = np.asarray(case.block_tables)
        for pool in case.pools:
            bt = tables[pool.group]
            for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases)):
                span = (pool.state_len - b) * pool.token_bytes  # per row for DS
                if pool.is_conv and bt[r, s] == bt[r, d] and 0 < b * pool.token_bytes < span and span > 1024:
                    note(f"same-block {pool.kind} shift over 1 KiB tiles", span)  # overlapping, 2+ tiles
            if pool.kind == "temporal" and pool.data_bytes > 2048 and 1 < case.num_tiles < cpu.max_tiles:
                note("temporal over tiles, more than one but not all", pool.data_bytes)
            if pool.kind == "conv_ds":
                assert pool.state_len * pool.elem_size <= cpu.wide_row_bytes
            else:
                assert pool.data_bytes <= cpu.wide_bytes

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(contracts.strategy("batch_memcpy"))
    def rows(case):
        for src, dst, n in case.copies:
            assert n <= cpu.wide_bytes
            if n > 4096 and (dst < src < dst + n or src < dst < src + n):
                note("overlapping row over 4 KiB tiles", n)
    pools()
    rows()
    want = {"same-block conv_sd shift over 1 KiB tiles", "same-block conv_ds shift over 1 KiB tiles",
            "temporal over tiles, more than one but not all", "overlapping row over 4 KiB tiles"}
    assert want <= seen, want - seen
    # two 4 KiB tiles at least, not one edge: searched for (200 derandomised examples found one or not
    # depending on the test's source, which seeds them)
    two_tiles = (lambda c: any(n >= 2 * 4096 and (dst < src < dst + n or src < dst < src + n)
                               for src, dst, n in c.copies))
    find(contracts.strategy("batch_memcpy"), two_tiles,
         settings=settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck)))


def test_fill_is_not_periodic():
    data = fill_bytes(1, 1 << 16)
    for p in (1, 2, 4, 8, 16, 256, 1024):
        assert np.mean(data[p:] == data[:-p]) < 0.02, p


def test_rate_upper_bound():
    assert rate_upper_bound(0, 100) == pytest.approx(0.0295, abs=1e-3)  # about 3/N
    assert rate_upper_bound(0, 1000) == pytest.approx(0.002991, abs=1e-5)
    assert rate_upper_bound(100, 100) == 1.0
    assert 0.05 < rate_upper_bound(2, 100) < 0.07  # Clopper-Pearson: 0.0616
    assert "rate < 0.03" in format_rate(0, 100)


@pytest.mark.parametrize("body, message", [
    ({"contract": "nope"}, "unknown case contract"),
    ({"contract": "batch_memcpy", "arena_size": 8}, "missing field"),
    ({"contract": "batch_memcpy", "arena_size": 8, "copies": [], "bogus": 1}, "unknown field"),
    ([1, 2], "JSON object"),
    # hand-edited values numpy could not hold, or that no pool can be: named by field, never an internal error
    ({"contract": "state_copy", "arena_size": 64, "pools": [], "block_tables": []}, "'pools' must be a list of "
     "pool objects, at least one"),
    ({"contract": "state_copy", "arena_size": 64, "pools": [{"kind": "temporal", "offset": 0, "num_blocks": 1,
      "block_stride": 8, "elem_size": 1}], "block_tables": [[[0]]], "src_cols": [0], "dst_cols": [0],
      "biases": [1 << 31]}, "'biases\\[0\\]' must be at most 2147483647"),
    ({"contract": "slot_copy", "arena_size": 64, "buffers": [], "src_idx": [], "dst_idx": []}, "at least one"),
])
def test_malformed_case_json(body, message):
    with pytest.raises(CaseError, match=message):
        case_from_json(body)


def test_impossible_case_is_a_clear_error():
    case = StateCopyCase(arena_size=64, pools=(oracle.PoolLayout("conv_sd", 0, 1, 8, 1, 4, 2),),
                         block_tables=(((0, 5),),), src_cols=(0,), dst_cols=(1,), biases=(1,))
    with pytest.raises(CaseError, match="block"):
        materialize(case, "cpu")


def _copied_block_offsets(case, pools=1):
    """Byte offsets (from its pool's start) of the blocks that requests copy from or to, in the first
    `pools` states (None: every state)."""
    offsets = []
    for pool in case.pools[:pools]:
        table = case.block_tables[pool.group]
        cols = len(table[0])
        used = {table[r][c] for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases))
                if b or table[r][s] != table[r][d]  # a block copied onto itself unshifted moves nothing
                for c in (s, d, s + b) if c < cols}
        offsets += [blk * pool.block_stride for blk in used]
    return offsets or [0]


@pytest.mark.matrix
def test_gpu_profiles_copy_blocks_past_2_and_4_gib_often():
    """zoo ADDR-I32 shows only when a copied block lies past 2 GiB (a fault, out of bounds on the CPU)
    or past 4 GiB (wrong bytes): the GPU profiles stretch a copied block there in about a third of
    state-copy cases, the CPU profile (one case in three huge) in about one in eight."""
    from mambafuzz.contracts.pools import MAX_SPARSE_ARENA
    counts = {}
    for profile in (strategies.GPU_AMP, strategies.CPU):
        seen = counts[profile.name] = {"cases": 0, "2 GiB": 0, "4 GiB": 0}

        @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(strategies.state_copy_cases(profile))
        def draw(case):
            assert case.arena_size <= MAX_SPARSE_ARENA
            seen["cases"] += 1
            top = max(_copied_block_offsets(case, pools=None))  # the stretched pool need not be the first
            seen["2 GiB"] += top >= 1 << 31
            seen["4 GiB"] += top >= 1 << 32
        draw()
    gpu, cpu = counts["gpu-amp"], counts["cpu"]
    # floors with room: counting only the first pool, one full-suite run saw 38 of 200 GPU cases past
    # 2 GiB; counting every pool, 60 (4 GiB: 37) and CPU 29 (9) alone
    assert gpu["2 GiB"] >= gpu["cases"] // 6 and gpu["4 GiB"] >= gpu["cases"] // 12, counts
    assert cpu["cases"] // 3 >= cpu["2 GiB"] >= cpu["cases"] // 10 and cpu["4 GiB"] >= cpu["cases"] // 40, counts


@pytest.mark.matrix
def test_addr_i32_is_caught_on_a_gpu_profile_case_past_4_gib():
    from hypothesis import find

    from mambafuzz.judge.engine import run_case
    from mambafuzz.kernels import registry

    def wraps(c):  # a copied block past 4 GiB whose 32-bit offset is still positive: none that faults
        offsets = _copied_block_offsets(c, pools=None)  # the stretched pool need not be the first
        return max(offsets) >= 1 << 32 and all(o % (1 << 32) < 1 << 31 for o in offsets)

    import random

    from hypothesis.errors import NoSuchExample
    # fixed searches (such cases are about 1 in 30 draws, yet seed 2026 needs 1215 and one CI run
    # found none in 2000): the next seed's search where one comes up empty
    case = None
    for seed in range(2026, 2031):
        try:
            case = find(strategies.state_copy_cases(strategies.GPU), wraps, random=random.Random(seed),
                        settings=settings(max_examples=2000, deadline=None,
                                          suppress_health_check=list(HealthCheck), database=None))
            break
        except NoSuchExample:
            continue
    assert case is not None, "five seeded searches found no GPU-profile copy past 4 GiB"
    assert not run_case(registry.get("triton.state_copy").fn, case, "cpu").failed
    v = run_case(registry.get("zoo.ADDR-I32").fn, case, "cpu")
    # wrong bytes where the wrapped offset lands in the arena, out of bounds where it lands before it
    assert v.failed and v.kind in registry.zoo_entry("ADDR-I32").caught_as("cpu"), v.summary()

"""Case reduction: every candidate is valid and smaller, the greedy loop reaches
hand-worked minima, and a fuzzed wrong copy shrinks as far as a plain
Hypothesis test of the same kernel would."""
import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mambafuzz import contracts
from mambafuzz import strategies
from mambafuzz.kernels.registry import Target
from mambafuzz.cases.batch_memcpy import BatchCopyCase
from mambafuzz.cases.postprocess import PostprocessCase
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.search.fuzz import FuzzOptions, fuzz_target
from mambafuzz.judge.materialize import materialize
from mambafuzz.search.reduce import candidates, reduce_case
from mambafuzz.oracle import PoolLayout

ANY_PERTURB = st.one_of(st.none(), strategies.perturbs())
CASES = st.builds(lambda case, p: case.with_perturb(p),
                  st.one_of(*(contracts.strategy(c) for c in ("batch_memcpy", "state_copy", "postprocess"))),
                  ANY_PERTURB)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(CASES)
def test_every_candidate_is_valid_and_strictly_smaller(case):
    seen = 0
    for smaller in candidates(case):
        seen += 1
        assert type(smaller) is type(case)
        assert smaller.size < case.size, (case, smaller)
        materialize(smaller, "cpu")  # raises CaseError when a candidate is not a valid case
    if case.perturb is not None or (isinstance(case, BatchCopyCase) and len(case.copies) > 1):
        assert seen  # dropping the perturbation or a row is always a candidate


def _forever():
    return True


def _shift_one_overlap(case):
    return any(abs(s - d) == 1 and n > 1 for s, d, n in case.copies)


@pytest.mark.parametrize("row, minimal", [((201, 200, 37), (1, 0, 2)), ((200, 201, 37), (0, 1, 2))])
def test_batch_reduces_to_the_hand_worked_minimum(row, minimal):
    """A row overlapping its destination by a shift of 1 needs 2 bytes and a 3-byte arena, at byte 0."""
    case = BatchCopyCase(arena_size=512, copies=((100, 64, 40), row, (300, 380, 9)), seed=5,
                         perturb=(1, 500, 1, 0, 4))
    reduced, tried = reduce_case(case, _shift_one_overlap, _forever)
    assert reduced == BatchCopyCase(arena_size=3, copies=(minimal,), seed=0)  # data does not matter here
    assert tried > 0


def test_batch_rows_pack_without_losing_their_alignment_when_it_matters():
    """A predicate that needs src % 8 == 3 gets rows moved by multiples of 8 only."""
    case = BatchCopyCase(arena_size=1024, copies=((515, 600, 4),), seed=1)
    reduced, _ = reduce_case(case, lambda c: c.copies[0][0] % 8 == 3, _forever)
    # src 515 -> 3 (aligned pack), dst next to it (shift 1), one byte: arena 5
    assert reduced == BatchCopyCase(arena_size=5, copies=((3, 4, 1),), seed=0)


def _sd_pool(offset, num_blocks, stride=24):
    return PoolLayout("conv_sd", offset, num_blocks, stride, 2, state_len=4, dim=3)  # data 24 bytes


def _same_block_shift(case):
    """Some request reads and writes one physical block with a bias: the racy shape."""
    table = case.block_tables[0]
    return any(table[r][s] == table[r][d] and b > 0
               for r, (s, d, b) in enumerate(zip(case.src_cols, case.dst_cols, case.biases)))


def test_state_copy_reduces_to_one_block_at_byte_0():
    pools = (_sd_pool(64, 8), _sd_pool(64 + 8 * 24 + 64, 8, stride=32))
    case = StateCopyCase(arena_size=1024, pools=pools, block_tables=(((5, 5, 2), (3, 1, 7)),), num_tiles=16,
                         seed=9, src_cols=(0, 0), dst_cols=(1, 2), biases=(1, 2))
    reduced, _ = reduce_case(case, _same_block_shift, _forever)
    # request 0 alone (block 5 -> 5, bias 1), the first pool dropped (the first state removal tried),
    # unused column 2 dropped, one tile, block ids renumbered (5, 5) -> (0, 0), and the padded pool
    # packed to byte 0: one block, the arena cut after its padding (checked for clobbers): 32
    assert reduced == StateCopyCase(arena_size=32, pools=(_sd_pool(0, 1, stride=32),),
                                    block_tables=(((0, 0),),), num_tiles=1, seed=0, src_cols=(0,),
                                    dst_cols=(1,), biases=(1,))


@pytest.mark.parametrize("needed, start, expected", [(2, 16, 2), (5, 16, 5), (9, 10, 9)])
def test_tiles_reduce_to_the_fewest_that_still_fail(needed, start, expected):
    """A cross-program bug over tiles: 1 tile hides it; 2, half or n - 1 are tried, not only 1."""
    case = PostprocessCase(arena_size=64, pools=(_sd_pool(0, 2),), block_tables=(((0, 1),),), num_tiles=start,
                           seed=0, block_size=4, num_computed=(3,), num_scheduled=(1,), num_draft=(0,),
                           num_accepted=(1,), state_idx=(0,))
    reduced, _ = reduce_case(case, lambda c: c.num_tiles >= needed, _forever)
    assert reduced.num_tiles == expected
    assert reduced.arena_size == 48  # and the arena cut to the pool's two blocks


def drop_last_byte(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """A wrong batch copy: each row's last byte is never copied."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        if n > 1:
            arena[d - base:d - base + n - 1].copy_(arena[s - base:s - base + n - 1].clone())


def drop_last_byte_of_long_rows(src_ptrs, dst_ptrs, sizes, *, arena=None):
    """A wrong batch copy that the first, simplest draws miss: rows over 16 bytes lose their last byte."""
    base = arena.data_ptr()
    for s, d, n in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        m = n - 1 if n > 16 else n
        if m > 0:
            arena[d - base:d - base + m].copy_(arena[s - base:s - base + m].clone())


@pytest.mark.parametrize("fn", [drop_last_byte, drop_last_byte_of_long_rows])
def test_wrong_adapters_are_wrong_only_in_the_last_byte(fn):
    arena = torch.arange(64, dtype=torch.uint8)
    ptr = lambda *v: torch.tensor(v, dtype=torch.int64) + arena.data_ptr()  # noqa: E731
    fn(ptr(0, 40), ptr(8, 20), torch.tensor([4, 17]), arena=arena)
    assert arena[8:13].tolist() == ([0, 1, 2, 11, 12] if fn is drop_last_byte else [0, 1, 2, 3, 12])
    assert arena[20:38].tolist() == list(range(40, 56)) + [36, 37]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fn, max_arena, row_bytes", [(drop_last_byte, 16, None),
                                                      (drop_last_byte_of_long_rows, 24, 17)])
def test_wrong_batch_copy_shrinks_to_a_tiny_arena(seed, fn, max_arena, row_bytes, tmp_path):
    """A plain Hypothesis test shrinks these bugs to arenas of a few bytes; so must the fuzz loop.

    Hand-worked minima: one row of 1 byte next to its destination (arena 2);
    for the long-row bug one row of 17 bytes shifted by 1 (arena 18).
    """
    target = Target(name=f"test.{fn.__name__}", contract="batch_memcpy", kind="user", overlap="full",
                    description=fn.__doc__, fn=fn)
    opts = FuzzOptions(device="cpu", mode="race", max_examples=200, shrink_budget=60.0, seed=seed,
                       database=None, crashes_dir=tmp_path, profile=strategies.CPU)
    report = fuzz_target(target, opts)
    assert report.finding is not None
    case = report.finding.case
    assert report.finding.verdict.mismatch is not None
    assert len(case.copies) == 1 and case.arena_size <= max_arena, case
    if row_bytes is not None:
        assert case.copies[0][2] == row_bytes, case


def test_a_spent_shrink_budget_leaves_hypothesis_at_once(tmp_path, monkeypatch):
    """Once the shrink budget is spent, the next shrink candidate ends the run: the first failure
    stands (saved, reported).  Passing every later candidate instead let Hypothesis's shrinker draw
    thousands of them: a GPU zoo row shrank 35 s past its share of --time."""
    from mambafuzz.search import fuzz as fuzz_module
    examples = []
    monkeypatch.setattr(fuzz_module.interrupt, "check", lambda: examples.append(1))  # once per example

    def copies_nothing(src_ptrs, dst_ptrs, sizes, *, arena):
        """Wrong for every row of one byte or more."""

    target = Target(name="test.copies_nothing", contract="batch_memcpy", kind="user", overlap="full",
                    description="wrong", fn=copies_nothing)
    opts = FuzzOptions(device="cpu", mode="compare", max_examples=200, shrink_budget=0.0, seed=1,
                       database=None, crashes_dir=tmp_path, profile=strategies.CPU)
    report = fuzz_target(target, opts)
    assert report.finding is not None and report.stop == "finding"
    assert report.finding.path is not None and report.finding.path.exists()
    # examples before the first failure, the failing one, then one shrink candidate that ends it
    assert len(examples) == report.finding.examples_to_first + 1, (len(examples), report.finding.examples_to_first)


def test_sizes_order_fewer_rows_before_fewer_bytes_before_layout():
    small_rows = BatchCopyCase(arena_size=1 << 20, copies=((0, 1 << 19, 4096),))
    more_rows = BatchCopyCase(arena_size=4, copies=((0, 1, 1), (2, 3, 1)))
    assert small_rows.size < more_rows.size
    fewer_bytes = BatchCopyCase(arena_size=1 << 20, copies=((0, 1 << 19, 8),))
    assert fewer_bytes.size < small_rows.size
    packed = dataclasses.replace(fewer_bytes, arena_size=16, copies=((0, 8, 8),))
    assert packed.size < fewer_bytes.size

"""mambafuzz as a library: check(), its one Failure, Inconclusive, the regression corpus, contract
options, public strategies, adapters and the README's argument table."""
import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

import mambafuzz
from mambafuzz import adapters, cli, findings, strategies
from mambafuzz.search import reduce
from mambafuzz.contracts.state_copy import StateCopyCase
from mambafuzz.judge.engine import run_case
from mambafuzz.errors import Failure, Inconclusive, UsageError
from mambafuzz.kernels import registry
from mambafuzz.judge.materialize import materialize

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(database=None, shrink_time=10, seed=7)


def noguard_batch_copy(src_ptrs, dst_ptrs, sizes):
    """The bug zoo's BM-NOGUARD (no barrier on a left overlap), as a module-level user function."""
    registry.get("zoo.BM-NOGUARD").fn(src_ptrs, dst_ptrs, sizes)


def correct_batch_copy(src_ptrs, dst_ptrs, sizes):
    registry.get("triton.batch_memcpy").fn(src_ptrs, dst_ptrs, sizes)


def test_import_mambafuzz_loads_neither_torch_nor_triton():
    code = ("import sys, mambafuzz; mambafuzz.Failure, mambafuzz.Inconclusive, mambafuzz.UsageError, mambafuzz.check; "
            "import mambafuzz.pytest_plugin; "
            "bad = [m for m in ('torch', 'triton', 'hypothesis') if m in sys.modules]; assert not bad, bad; "
            "assert mambafuzz.check is mambafuzz.api.check and issubclass(mambafuzz.Failure, AssertionError)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_correct_kernel_gives_a_clean_report_and_no_files(tmp_path):
    report = mambafuzz.check(registry.get("triton.batch_memcpy").fn, "batch_memcpy", max_examples=15,
                             crashes_dir=tmp_path / "crashes", **FAST)
    assert (report.status, report.examples, report.replayed) == ("clean", 15, [])
    assert not list(tmp_path.rglob("*.json"))


def test_a_wrong_kernel_raises_one_failure_then_its_saved_case_is_replayed_first(tmp_path):
    crashes = tmp_path / "crashes"
    with pytest.raises(Failure) as first:
        mambafuzz.check(noguard_batch_copy, "batch_memcpy", max_examples=60, crashes_dir=crashes, **FAST)
    e = first.value
    assert isinstance(e, AssertionError) and e.verdict.kind == "race" and not e.replayed
    assert e.finding.target.endswith(":noguard_batch_copy") and e.report.finding is e.finding
    saved = findings.load(e.path)
    assert saved.case == e.case and e.path.parent == crashes / "batch_memcpy" / findings.safe_name(e.finding.target)
    assert e.replay == findings.replay_command(e.path, e.finding) and str(e.path.absolute()) in e.replay
    text = str(e)
    for part in (e.summary, "witness: store:", f"case: {e.case.describe()}", f"saved: {e.path}", f"replay: {e.replay}"):
        assert part in text, (part, text)

    start = time.monotonic()
    with pytest.raises(Failure) as again:  # the saved case first: no fuzzing, no new file
        mambafuzz.check(noguard_batch_copy, "batch_memcpy", max_examples=60, crashes_dir=crashes, **FAST)
    assert again.value.replayed and again.value.report is None
    assert (again.value.path, again.value.case) == (e.path, e.case)
    assert "replayed before fuzzing, still fails" in str(again.value)
    assert time.monotonic() - start < 30
    assert sorted(crashes.rglob("*.json")) == [e.path]

    report = mambafuzz.check(correct_batch_copy, "batch_memcpy", name=e.finding.target, max_examples=10,
                             crashes_dir=crashes, **FAST)  # the fixed kernel passes the saved case, then fuzzes
    assert report.status == "clean" and report.replayed == [e.path] and report.examples == 10


def test_an_inconclusive_run_raises_inconclusive_never_passes():
    import triton
    import triton.language as tl

    @triton.jit
    def _asm(p):
        x = tl.load(p)
        tl.store(p, tl.inline_asm_elementwise("mov.u32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True,
                                              pack=1))

    def asm_copy(src_ptrs, dst_ptrs, sizes):
        _asm[(1,)](torch.zeros(1, dtype=torch.int32))

    with pytest.raises(Inconclusive) as info:
        mambafuzz.check(asm_copy, "batch_memcpy", max_examples=5, crashes_dir=None, database=None)
    assert not isinstance(info.value, Failure)
    assert info.value.report.status == "inconclusive" and "inline_asm" in str(info.value)


@pytest.mark.parametrize("kwargs, says", [
    (dict(contract="nope"), "unknown contract 'nope'"),
    (dict(contract="state_copy", overlap="left"), "unknown option(s) overlap for contract state_copy"),
    (dict(contract="state_copy", tiles=0), "option tiles must be one of drawn, N, got 0"),
    (dict(contract="state_copy", tiles="sixteen"), "option tiles must be one of drawn, N"),
    (dict(contract="state_copy", layout="dd"), "option layout must be one of both, sd, ds"),
    (dict(contract="state_copy", skip_equal_cols="maybe"), "option skip_equal_cols must be one of no, yes"),
    (dict(contract="batch_memcpy", overlap="right"), "option overlap must be one of full, left"),
    (dict(contract="batch_memcpy", max_examples=0), "max_examples must be a positive number"),
    (dict(contract="state_copy"), "does not fit the state_copy contract"),
])
def test_bad_usage_is_one_usage_error(kwargs, says):
    with pytest.raises(UsageError) as info:
        mambafuzz.check(correct_batch_copy, crashes_dir=None, database=None, **kwargs)
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.matrix
def test_contract_options_reach_the_strategy():
    """layout and a fixed tile count, through check -> fuzz_target -> contracts.strategy."""
    seen = []

    def recording_state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles):
        seen.append((set(adapters.state_columns(meta)["kind"].tolist()), num_tiles))
        registry.get("triton.state_copy").fn(meta, block_tables, src_cols, dst_cols, biases, num_tiles=num_tiles)

    report = mambafuzz.check(recording_state_copy, "state_copy", layout="ds", tiles=5, max_examples=25,
                             crashes_dir=None, **FAST)
    assert report.status == "clean" and len(seen) == 25
    kinds = set().union(*(k for k, _ in seen))
    assert adapters.KIND_SD not in kinds and adapters.KIND_DS in kinds
    assert {n for _, n in seen} == {5}


@pytest.mark.matrix
def test_skip_equal_cols_expects_skipped_requests_untouched(tmp_path):
    """The project's kernel copies every request, so the skipping variant's oracle catches it; a wrapper
    that skips the equal-column requests fits the variant."""
    with pytest.raises(Failure) as info:
        mambafuzz.check(registry.get("triton.state_copy").fn, "state_copy", skip_equal_cols=True, name="copies-all",
                        max_examples=60, crashes_dir=tmp_path, **FAST)
    case = info.value.case
    assert info.value.verdict.kind == "mismatch" and case.skip_equal_cols
    assert any(s == d for s, d in zip(case.src_cols, case.dst_cols))
    assert findings.load(info.value.path).case == case  # the crash file keeps the variant for replay

    def skipping_state_copy(meta, block_tables, src_cols, dst_cols, biases, *, num_tiles):
        keep = torch.nonzero(src_cols != dst_cols).flatten()
        registry.get("triton.state_copy").fn(meta, block_tables[:, keep].contiguous(), src_cols[keep],
                                             dst_cols[keep], biases[keep], num_tiles=num_tiles)

    report = mambafuzz.check(skipping_state_copy, "state_copy", skip_equal_cols=True, max_examples=30,
                             crashes_dir=None, **FAST)
    assert report.status == "clean"


@settings(max_examples=10, deadline=None)
@given(strategies.state_copies(tiles=7))
def test_a_fixed_tile_count_is_never_reduced(case):
    assert case.tiles_fixed and case.num_tiles == 7
    assert all(c.num_tiles == 7 for c in reduce.candidates(case))
    drawn = dataclasses.replace(case, tiles_fixed=False)
    assert any(c.num_tiles != 7 for c in reduce.candidates(drawn))


def test_case_json_without_the_engine_options_is_unchanged():
    case = StateCopyCase(arena_size=64, pools=(mambafuzz.oracle.PoolLayout("conv_sd", 0, 1, 8, 1, 4, 2),),
                         block_tables=(((0,),),), src_cols=(0,), dst_cols=(0,), biases=(0,))
    assert "skip_equal_cols" not in case.to_json() and "tiles_fixed" not in case.to_json()
    flagged = dataclasses.replace(case, skip_equal_cols=True, tiles_fixed=True)
    assert flagged.to_json()["skip_equal_cols"] is True and flagged.content_hash() != case.content_hash()
    assert StateCopyCase.from_json(flagged.to_json()) == flagged


@settings(max_examples=15, deadline=None)
@given(strategies.batch_copies(overlap="left"))
def test_public_strategies_in_a_plain_given_test(case):
    """What the README shows: draw with mambafuzz.strategies, judge with mambafuzz.judge.engine.run_case."""
    assert all(dst <= src or dst >= src + n for src, dst, n in case.copies)  # overlap='left' reached the draw
    verdict = run_case(correct_batch_copy, case, "cpu", mode="race")
    assert not verdict.failed, verdict.summary()


@pytest.mark.parametrize("make, words", [
    (lambda: strategies.batch_copies(overlap="right"), "overlap must be one of full, left, got 'right'"),
    (lambda: strategies.state_copies(layout="dd"), "layout must be one of both, sd, ds, got 'dd'"),
    (lambda: strategies.state_copies(tiles=0), "tiles must be 'drawn' or a positive tile count, got 0"),
    (lambda: strategies.slot_copies(chains="sometimes"), "slot_copy option chains must be one of"),
    (lambda: strategies.slot_forks(chains="never"), "slot_fork option chains must be one of"),
    (lambda: strategies.postprocesses("tpu"), "unknown profile 'tpu'"),
    (lambda: mambafuzz.contracts.strategy("conv_updat"), "unknown contract 'conv_updat'"),
    (lambda: mambafuzz.contracts.strategy("ssm_update", profile="tpu"), "unknown profile 'tpu'"),
])
def test_a_public_strategy_with_a_bad_option_says_so_in_one_line(make, words):
    """Raised when the strategy is built, before any draw (a @given test fails at collection, not mid-run)."""
    with pytest.raises(UsageError, match=re.escape(words)):
        make()


@settings(max_examples=10, deadline=None)
@given(strategies.slot_forks(chains="forbidden"))
def test_slot_forks_draw_fork_cases_without_chains(case):
    assert case.contract == "slot_fork"
    assert not set(case.src_idx) & {d for row in case.dst_idx for d in row}  # no slot both source and destination


@settings(max_examples=10, deadline=None)
@given(mambafuzz.contracts.strategy("ssm_update", profile="gpu"))
def test_any_contract_strategy_by_name_and_profile_name(case):
    assert case.contract == "ssm_update"


@pytest.mark.matrix
def test_the_cli_passes_contract_options_through(capsys, tmp_path):
    args = cli.build_parser().parse_args(["fuzz", "--target", "triton.state_copy", "--tiles", "16",
                                          "--skip-equal-cols", "yes", "--layout", "sd"])
    options = cli.commands.fuzz_options(args, "cpu").contract_options
    assert {k: options[k] for k in ("layout", "tiles", "skip_equal_cols")} == {"layout": "sd", "tiles": "16",
                                                                               "skip_equal_cols": "yes"}
    with pytest.raises(SystemExit) as bad:
        cli.build_parser().parse_args(["fuzz", "--target", "t", "--tiles", "0"])
    assert bad.value.code == 2 and "choose from 'drawn', 'N'" in capsys.readouterr().err
    code = cli.main(["fuzz", "--target", "triton.state_copy", "--skip-equal-cols", "yes", "--no-isolate",
                     "--max-examples", "60", "--seed", "7", "--database", "none", "--shrink-time", "5",
                     "--crashes-dir", str(tmp_path), "--json"])
    assert code == 1 and "requests with src_col == dst_col skipped" in capsys.readouterr().out


# ---------------------------------------------------------------- adapters
def test_bytes_at_and_typed_view_are_views_of_the_arena():
    arena = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    base = arena.data_ptr()
    view = adapters.bytes_at(arena, base + 8, 4)
    assert view.tolist() == [8, 9, 10, 11]
    view[0] = 200
    assert int(arena[8]) == 200  # writes go to the arena
    with pytest.raises(ValueError, match="outside the arena"):
        adapters.bytes_at(arena, base + 250, 8)
    # [2 blocks, 3 tokens] of int16, blocks 16 bytes apart, tokens 4 bytes apart (padded)
    strided = adapters.typed_view(arena, base + 32, (2, 3), torch.int16, strides=(16, 4))
    expected = arena.numpy().view("<i2")
    assert strided.tolist() == [[int(expected[(32 + 16 * b + 4 * t) // 2]) for t in range(3)] for b in range(2)]
    assert adapters.typed_view(arena, base + 64, 4, torch.int32).tolist() == arena[64:80].view(torch.int32).tolist()
    with pytest.raises(ValueError, match="not aligned"):
        adapters.typed_view(arena, base + 3, 2, torch.int32)


@settings(max_examples=10, deadline=None)
@given(strategies.state_copies())
def test_state_columns_and_block_table_pointers_match_the_contract(case):
    m = materialize(case, "cpu")
    meta, tables = m.args["meta"], m.args["block_tables"]
    cols = adapters.state_columns(meta)
    assert {n: str(t.dtype) for n, t in cols.items()} == {
        "base": "torch.int64", "block_stride": "torch.int64", "elem_size": "torch.int32", "inner": "torch.int32",
        "conv_len": "torch.int32", "group": "torch.int32", "ds_rows": "torch.int32", "ds_row_stride": "torch.int64",
        "kind": "torch.int32"}
    for s, pool in enumerate(case.pools):
        assert int(cols["base"][s]) == m.arena.data_ptr() + pool.offset
        assert int(cols["block_stride"][s]) == pool.block_stride and int(cols["elem_size"][s]) == pool.elem_size
        assert int(cols["group"][s]) == pool.group
        kind = {"temporal": adapters.KIND_TEMPORAL, "conv_sd": adapters.KIND_SD, "conv_ds": adapters.KIND_DS}
        assert int(cols["kind"][s]) == kind[pool.kind]
    ptrs = adapters.block_table_ptrs(tables)
    stride = adapters.block_table_row_stride(tables)
    groups, rows, columns = tables.shape
    assert ptrs.dtype == torch.int64 and stride == columns
    for g in range(groups):  # each pointer reads back its group's table, rows `stride` entries apart
        table = adapters.typed_view(tables.view(-1).view(torch.uint8), ptrs[g], (rows, columns), torch.int32,
                                    strides=(stride * 4, 4))
        assert torch.equal(table, tables[g])
    per_state = adapters.state_block_table_ptrs(meta, tables)
    assert per_state.tolist() == [int(ptrs[p.group]) for p in case.pools]


def test_the_readme_table_is_the_rendered_one():
    """README "Arguments per contract" is generated: python -m mambafuzz.adapters prints it."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- arguments-table:begin -->\n(.*?)<!-- arguments-table:end -->", text, re.S)
    assert found, "README lacks the arguments-table markers"
    assert found.group(1) == adapters.arguments_table(), "README table is stale: paste python -m mambafuzz.adapters"

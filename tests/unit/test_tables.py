"""The CLI's tables at 80 columns (``mambafuzz.report.tables``): a user's ``module:function`` names
broken only between their parts, never inside a word; a finding's row split into the first failure
and its shrinking, the numbers the JSON report and the progress lines give."""
from types import SimpleNamespace

import pytest
from rich.console import Console

from mambafuzz.report import tables
from mambafuzz.search.fuzz import TargetReport

LONG = ["myconv:my_conv_update_nopadstore", "my_engine.kernels.mamba.ops:causal_conv1d_update_spec_decode",
        "vllm.model_executor.layers.mamba.ops.causal_conv1d:causal_conv1d_update", "zoo.CP-SHORTSTORE"]


def render(table) -> list[str]:
    console = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def name_cells(lines: list[str], column: int = 0) -> list[list[str]]:
    """Each row's lines of the name column (a row starts where the next column is not blank)."""
    rows = []
    for line in lines:
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if column + 1 < len(cells) and cells[column + 1] or not rows:
            rows.append([cells[column]])
        else:
            rows[-1].append(cells[column])
    return rows


def assert_whole_names(lines: list[str], names: list[str], column: int = 0) -> None:
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    rows = name_cells(lines, column)
    assert ["".join(r) for r in rows] == names, rows
    for row in rows:  # a break only after a boundary character: never inside a word
        for piece in row[:-1]:
            assert piece[-1] in tables.BREAK_AFTER, row


def report(name, *, examples=60, seconds=5.0, finding=None, stop="max-examples"):
    return TargetReport(name, "conv_update", examples=examples, reps=examples, seconds=seconds, stop=stop,
                        min_examples=10, finding=finding, finished=True)


def finding(first=3, first_s=0.4, shrinks=134, kind="mismatch", deterministic=False):
    return SimpleNamespace(examples_to_first=first, seconds_to_first=first_s, shrink_examples=shrinks,
                           deterministic=deterministic, verdict=SimpleNamespace(kind=kind))


def test_long_module_function_names_break_between_their_parts_at_80_columns():
    reps = [report(n, finding=finding() if i == 0 else None) for i, n in enumerate(LONG)]
    reps[0].seconds = 50.7
    table, notes = tables.report_table(reps, "mambafuzz fuzz (cpu, race)")
    lines = render(table)
    assert_whole_names(lines, LONG)
    assert notes == [tables.SHRINK_LEGEND] and all(len(n) <= 80 for n in notes)


@pytest.mark.parametrize("width", [80, 60, 40])
def test_the_name_column_takes_what_the_others_leave(width):
    t, _ = tables.table("t", ["name", "a", "b"], [[n, "x" * 10, "y"] for n in LONG], width=width)
    lines = render(t)
    assert all(len(line) <= width for line in lines), lines
    assert_whole_names(lines, LONG)


def test_a_part_wider_than_the_column_is_shortened_in_the_middle_and_named_whole_below():
    name = "mod:" + "a" * 70
    t, notes = tables.table("t", ["target", "status"], [[name, "clean"], ["x:y", "clean"]])
    lines = render(t)
    assert all(len(line) <= 80 for line in lines)
    (cell,) = [c for c in name_cells(lines)[0]]
    assert tables.ELLIPSIS in cell and cell.startswith("mod:aaa") and len(cell) < len(name)
    assert notes == [f"{cell} = {name}"]


def test_wrap_name_breaks_only_after_boundaries():
    assert tables.parts("a.b:c_d-e/f") == ["a.", "b:", "c_", "d-", "e/", "f"]
    assert tables.wrap_name("myconv:my_conv_update_nopadstore", 12) == ["myconv:my_", "conv_update_", "nopadstore"]
    assert tables.wrap_name("myconv:my_conv_update_nopadstore", 9) is None  # "conv_update_" is 12 wide
    assert tables.shorten("abcdefghij", 5) == "ab…ij"


def test_a_findings_row_is_its_first_failure_plus_its_shrinking_in_the_table_json_and_progress_line():
    """The first failure came at example 3 after 0.4 s; shrinking took 134 examples and the rest of the
    50.7 s: the row says so, not '137 examples, 50.7s'."""
    r = report("myconv:my_conv_update_nopadstore", examples=5, seconds=50.7, finding=finding(), stop="finding")
    body = r.first_failure()  # what to_json adds (a real finding's JSON: tests/integration/test_output_80.py)
    assert (body["first_failure_example"], body["first_failure_s"], body["shrink_s"]) == (3, 0.4, 50.3)
    cells = tables.report_cells(r)
    assert (cells["examples"], cells["time"], cells["k/N"]) == ("3+134", "0.4+50.3s", "0/5")
    line = tables.progress_line(r)
    assert line == ("myconv:my_conv_update_nopadstore: finding, 3+134 examples, 0.4+50.3s "
                    "(to the first failure + shrinking), k/N 0/5")
    clean = report("a:b", examples=46, seconds=8.2)
    assert clean.to_json()["first_failure_s"] is None and clean.to_json()["first_failure_example"] is None
    assert tables.progress_line(clean) == "a:b: clean, 46 examples, 8.2s, k/N 0/46"
    assert tables.progress_line(clean, again=True).startswith("a:b (another turn): clean, 46 examples, 8.2s")
    race = report("a:c", finding=finding(kind="race", deterministic=True))
    assert tables.report_cells(race)["k/N"] == "race"


def test_list_shows_an_overlap_only_where_the_contract_has_one():
    from mambafuzz.contracts import get
    from mambafuzz.kernels import registry

    targets = registry.all_targets()
    t, notes = tables.list_table(targets)
    lines = render(t)
    assert_whole_names(lines, [x.name for x in targets])
    rows = {c[0]: c for c in ([x.strip() for x in line.strip("│").split("│")] for line in lines
                              if line.startswith("│"))}
    for x in targets:
        has = any(o.name == "overlap" for o in get(x.contract).cli_options)
        assert rows[x.name][3] == (x.overlap if has else "-"), x.name
    assert any(rows[x.name][3] == "-" for x in targets) and any(rows[x.name][3] != "-" for x in targets)
    assert notes == ["overlap (--overlap): full = memmove, left = dst < src only; - = no such option"]

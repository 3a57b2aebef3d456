"""The README stays true: its counts are the code's (contracts, built-in targets, zoo rows), and its
measured figures (the test suite, the zoo page's screenshot) are entries of bench/RESULTS.md with the
same numbers and date."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
RESULTS = (ROOT / "bench" / "RESULTS.md").read_text()

BUILT_IN = re.compile(r"Built in: (\d+) contracts and (\d+) targets \((\d+) correct Triton kernels, (\d+) torch "
                      r"paths and (\d+) bug-zoo rows\)")
QUICK = re.compile(r"The test command is the quick tier: (\d+) tests in (\d+) s on (\d{4}-\d\d-\d\d) \(commit "
                   r"([0-9a-f]{7,})")
SHOT = re.compile(r"!\[The report page of `mambafuzz zoo --device cpu ([^`]*)`, (\d{4}-\d\d-\d\d): (\d+) of (\d+) "
                  r"variants caught\]\(docs/report-zoo-cpu\.png\)")


def one(pattern: re.Pattern, text: str = README) -> re.Match:
    found = list(pattern.finditer(" ".join(text.split())))
    assert len(found) == 1, f"{pattern.pattern!r}: {len(found)} matches in the README"
    return found[0]


def section(heading_words: list[str]) -> str:
    """The RESULTS.md section whose heading holds every one of `heading_words`."""
    parts = re.split(r"^## ", RESULTS, flags=re.M)
    hits = [p for p in parts if all(w in p.splitlines()[0] for w in heading_words)]
    assert len(hits) == 1, (heading_words, len(hits))
    return " ".join(hits[0].split())


def test_the_readmes_counts_are_the_codes():
    from mambafuzz import contracts
    from mambafuzz.kernels import registry

    n_contracts, n_targets, correct, torch_paths, zoo = map(int, one(BUILT_IN).groups())
    targets = registry.all_targets()
    kinds = [t.kind for t in targets]
    assert n_contracts == len(contracts.BUILTIN)
    assert (n_targets, correct, torch_paths, zoo) == (len(targets), kinds.count("correct"), kinds.count("torch"),
                                                      kinds.count("zoo"))
    assert zoo == len(registry.ZOO)


def test_the_test_suite_figures_are_a_dated_results_entry():
    tests, seconds, date, commit = one(QUICK).groups()
    body = section(["Test suite", date, commit])
    assert f"**{tests} tests in {seconds} s**" in body, body[:400]


def test_the_screenshot_shows_every_cpu_zoo_row_as_measured():
    from mambafuzz.kernels import registry

    args, date, caught, rows = one(SHOT).groups()
    on_cpu = [t for t in registry.zoo_targets() if "cpu" in t.devices]
    assert int(rows) == len(on_cpu), "the zoo has rows the screenshot does not show: redraw it (bench/RESULTS.md)"
    body = section(["report page", date])
    assert f"mambafuzz zoo --device cpu {args}" in body and f"**{caught} of {rows} caught**" in body, body[:400]

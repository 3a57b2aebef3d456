"""Every bucket a contract declares its strategy draws (``Contract.expected_features``) is drawn, under each
of its options: a strategy that stops drawing a hazard (nacc = 0, a pad read row, a slot past 2 GiB) fails
here, where a fuzz run only warns.  Draws only (no kernel, no oracle): the CPU profile, seeded."""
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from mambafuzz import contracts, strategies
from mambafuzz.contracts.features import labels_of
from mambafuzz.search import features

DRAWS = 300  # "a few hundred examples each", as expected_features promises


def option_sets(contract) -> list[dict]:
    """The defaults, then each CLI option's other choices one at a time (values, not a metavar like N)."""
    sets = [{}]
    for option in contract.cli_options:
        sets += [{option.name: c} for c in option.choices
                 if c != option.default and (str(c).islower() or str(c).lstrip("-").isdigit())]
    return sets


CASES = [(name, opts) for name in contracts.names() for opts in option_sets(contracts.get(name))]
# the quick tier: each contract's defaults, and the options that add a hazard to what is expected (nacc = 0);
# the other options' draws in the matrix tier (about 1.5 s each)
QUICK = [(name, opts) for name, opts in CASES if not opts or opts == {"min_accepted": "0"}]


def drawn(contract: str, options: dict, draws: int = DRAWS) -> dict[str, set[str]]:
    """Every label each feature took over `draws` seeded draws of the contract's strategy."""
    seen: dict[str, set[str]] = {}

    @settings(max_examples=draws, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategies.for_contract(contract, **options))
    def collect(case):
        for name, value in contracts.of(case).features(case).items():
            seen.setdefault(name, set()).update(labels_of(value))

    collect()
    return seen


def never_drawn(contract: str, options: dict, seen: dict[str, set[str]]) -> dict[str, list[str]]:
    expected = features.expected_features(contract, options=options)
    return {name: missing for name, labels in expected.items()
            if (missing := [label for label in labels if label not in seen.get(name, set())])}


@pytest.mark.parametrize("contract, options", QUICK, ids=[f"{c}-{o}" for c, o in QUICK])
def test_every_expected_bucket_is_drawn(contract, options):
    assert never_drawn(contract, options, drawn(contract, options)) == {}


LONG = [c for c in CASES if c not in QUICK]


@pytest.mark.matrix
@pytest.mark.parametrize("contract, options", LONG, ids=[f"{c}-{o}" for c, o in LONG])
def test_every_expected_bucket_is_drawn_under_each_option(contract, options):
    assert never_drawn(contract, options, drawn(contract, options)) == {}


def test_the_hazards_the_zoo_needs_are_among_the_expected_buckets():
    """The features whose absence let a bad kernel through are declared, so the test above guards them."""
    assert "0" in features.expected_features("delta_update", options={"min_accepted": "0"})["nacc"]
    assert "0" not in features.expected_features("delta_update", options={"min_accepted": "1"})["nacc"]
    for name in ("ssm_update", "delta_update", "conv_update"):
        assert {"read", "write"} <= set(features.expected_features(name)["pads"]), name
    assert "yes" in features.expected_features("state_scatter")["past_2gib"]

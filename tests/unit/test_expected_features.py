"""Every bucket a contract declares its strategy draws (``Contract.expected_features``) is drawn, under each
of its options: a strategy that stops drawing a hazard (nacc = 0, a pad read row, a slot past 2 GiB) fails
here, where a fuzz run only warns.  Draws only (no kernel, no oracle): the CPU profile, seeded."""
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from mambafuzz import contracts, strategies
from mambafuzz.contracts.features import HUGE, labels_of
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


def drawn(contract: str, options: dict, draws: int = DRAWS, seeds: tuple = (None,)) -> dict[str, set[str]]:
    """Every label each feature took over `draws` seeded draws of the contract's strategy per seed (None:
    derandomized), each draw a case its contract takes (``valid``: a strategy drawing cases the contract
    refuses tests nothing with them)."""
    seen: dict[str, set[str]] = {}
    spec = contracts.get(contract)

    for s in seeds:
        @settings(max_examples=draws, database=None, deadline=None, derandomize=s is None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(contracts.strategy(contract, **options))
        def collect(case):
            assert spec.valid(case), case.describe()
            for name, value in spec.features(case).items():
                seen.setdefault(name, set()).update(labels_of(value))

        (collect if s is None else seed(s)(collect))()
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
    # a bucket one run of a few hundred draws missed gets a second, seeded run: one CI run's derandomized
    # draws missed batch_memcpy's 2-3 byte shift under overlap=left, which a few hundred draws hold
    # several times over; a bucket missing from both is a hole
    seen = drawn(contract, options)
    if never_drawn(contract, options, seen):
        again = drawn(contract, options, seeds=(2026,))
        seen = {k: seen.get(k, set()) | again.get(k, set()) for k in set(seen) | set(again)}
    assert never_drawn(contract, options, seen) == {}


def test_the_hazards_the_zoo_needs_are_among_the_expected_buckets():
    """The features whose absence let a bad kernel through are declared, so the test above guards them."""
    assert "0" in features.expected_features("delta_update", options={"min_accepted": "0"})["nacc"]
    assert "0" not in features.expected_features("delta_update", options={"min_accepted": "1"})["nacc"]
    for name in ("ssm_update", "delta_update", "conv_update"):
        assert {"read", "write"} <= set(features.expected_features(name)["pads"]), name
    assert "yes" in features.expected_features("state_scatter")["past_2gib"]


@pytest.mark.parametrize("contract", ["conv_update", "ssm_update", "delta_update"])
def test_ill_posed_draws_are_ill_posed(contract):
    """``ill_posed`` (two rows on one slot) draws what the oracle refuses, often: a strategy that lost it
    would leave a kernel's handling of the ill-posed step unchecked."""
    from mambafuzz.oracle.conv_update import IllPosedUpdate

    spec, refused = contracts.get(contract), []

    @settings(max_examples=60, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract, ill_posed=True))
    def collect(case):
        try:
            spec.valid(case)
            spec.image(case)
            plan = {"conv_update": _conv_plan, "ssm_update": _ssm_plan, "delta_update": _delta_plan}[contract]
            plan(case)
        except IllPosedUpdate:
            refused.append(case)

    collect()
    assert len(refused) >= 10, len(refused)


def _conv_plan(c):
    from mambafuzz.oracle.conv_update import plan_conv_update
    plan_conv_update(c.slots, c.state_len, c.width, c.lens, c.idx, nacc=c.nacc, init=c.init, last=c.last, pad=c.pad)


def _ssm_plan(c):
    from mambafuzz.oracle.ssm_update import plan_ssm_update
    plan_ssm_update(c.slots, c.lens, c.src, c.dst, c.nacc, c.pad)


def _delta_plan(c):
    from mambafuzz.oracle.delta_update import plan_delta_update
    plan_delta_update(c.slots, c.lens, c.idx, nacc=c.nacc, pad=c.pad, inter_idx=c.inter_idx, inter_rows=c.inter_rows)


def test_the_ssm_slot_past_2_gib_is_one_a_correct_step_reads_or_stores():
    """past_2gib says a named slot is past 2 GiB; the strategy puts it where a live row reads or stores, or
    an offset formed in 32 bits is never exercised."""
    from mambafuzz.oracle.ssm_update import plan_ssm_update

    huge = []

    @settings(max_examples=400, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy("ssm_update"))
    def collect(case):
        if contracts.of(case).features(case)["past_2gib"] == "yes":
            plan = plan_ssm_update(case.slots, case.lens, case.src, case.dst, case.nacc, case.pad)
            touched = set(plan.read[plan.live].tolist()) | set(plan.target[plan.store].tolist())
            huge.append(case.slots - 1 in touched)

    collect()
    assert huge and all(huge), huge


@pytest.mark.parametrize("contract", ["ssm_prefill", "delta_prefill"])
@pytest.mark.parametrize("profile", ["cpu", "gpu-amp"])
def test_most_far_prefill_slots_are_past_2_31_elements(contract, profile):
    """A far slot in a 4-byte pool can reach only 2 GiB of bytes (the sparse arena ends at 8 GiB), where a
    32-bit ``slot * stride`` in elements does not wrap yet: most far cases hold 2-byte states, past 2^31
    elements.  (With the dtype left as drawn, 11 of 99 far delta_prefill cases on gpu-amp got there, and
    the H200's amplified zoo missed DP-I32 in 49 examples.)"""
    seen = {"yes": 0, "no": 0}

    @settings(max_examples=300, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract, profile=strategies.PROFILES[profile]))
    def collect(case):
        f = contracts.of(case).features(case)
        if f["past_2gib"] == "yes":
            seen[f["past_2g_elements"]] += 1

    collect()
    assert seen["yes"] >= 10 and seen["yes"] >= 2 * seen["no"], seen


@pytest.mark.parametrize("contract", ["conv_prefill", "ssm_prefill", "delta_prefill"])
def test_a_far_prefill_slot_is_one_the_prefill_reads_or_stores(contract):
    """The far slot goes on an entry a correct prefill reads or stores, never one it skips (a final
    destination where no final state is asked for).  (With the final destination always a candidate, 36 of
    87 far delta_prefill draws touched no far slot, and the H100's amplified zoo missed DP-I32.)"""
    spec, far = contracts.get(contract), []

    @settings(max_examples=300, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract, profile=strategies.PROFILES["gpu-amp"]))
    def collect(case):
        top = max((v for row in case.idx for v in row if v != case.pad), default=0)
        if getattr(case, "exact", True) and case.offset + top * case.slot_stride >= HUGE:
            _, live = spec.row_features(case, lambda n: "")
            far.append(spec.far_features(case, live)["past_2gib"])

    collect()
    assert len(far) >= 10 and far.count("no") == 0, far


def test_every_ill_posed_batch_is_one_the_contract_refuses():
    """``ill_posed`` adds a row writing into another row's bytes (a size-0 victim made real): each draw is a
    batch the contract refuses, and drawing never fails."""
    spec, seen = contracts.get("batch_memcpy"), []

    @settings(max_examples=300, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategies.batch_copy_cases(strategies.CPU, ill_posed=True))
    def collect(case):
        seen.append(spec.valid(case))

    collect()
    assert len(seen) == 300 and not any(seen)

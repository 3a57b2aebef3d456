"""Contract options that narrow the draws to what a user's kernel takes, and the words that list them.

An engine-shaped update kernel (``style_kernels/engine_updates.py``: SGLang's conv and SSM updates,
vLLM's delta rule) declines what it cannot take with ``mambafuzz.reject``.  Fuzzed as it is, most of its
examples are rejects (75-83% in the issue that asked for the options); narrowed by the options its
contract declares, through ``check`` (the pytest plugin's path) or the CLI's flags, under a tenth.
Every option keeps to its narrowing while shrinking (``Contract.admits``), a bad value is one line, and
every place that lists options names each contract an option applies to.
"""
import importlib.util
import json
import re
import subprocess
import sys
import textwrap

import pytest

import mambafuzz
from mambafuzz import cli, contracts, strategies
from mambafuzz.search import reduce
from mambafuzz.errors import UsageError
from style_kernels import engine_updates as engine

# what each engine kernel takes, as its contract's options say it
NARROWED = {
    "conv_update": (engine.conv_update, dict(varlen="never", prefix_caching="never", max_width="4",
                                             conv_layout="dim")),
    "ssm_update": (engine.ssm_update, dict(spec="never", varlen="never", dst_indices="never", has_d="always",
                                           has_dt_bias="always")),
    "delta_update": (engine.delta_update, dict(state_layout="kv", gate="gdn", step_buffer="never",
                                               nonspec_tokens="1", pad="0")),
}
QUICK = dict(database=None, crashes_dir=None, seed=1, mode="compare", shrink_time=5)


def _reject_fraction(fn, contract: str, examples: int, **options) -> tuple[float, object]:
    try:
        report = mambafuzz.check(fn, contract, max_examples=examples, min_examples=1, **QUICK, **options)
    except mambafuzz.Inconclusive as exc:  # a run of rejects only: its report says how many
        report = exc.report
    rejected = report.tally.rejected
    return rejected / max(1, rejected + report.examples), report


@pytest.mark.parametrize("contract", list(NARROWED))
def test_a_narrowed_engine_kernel_spends_under_a_tenth_of_its_examples_on_rejects(contract):
    fn, options = NARROWED[contract]
    fraction, report = _reject_fraction(fn, contract, 40, **options)
    assert report.status == "clean" and report.examples == 40, report.why
    assert fraction < 0.10, report.tally.rejections


@pytest.mark.parametrize("contract", list(NARROWED))
def test_not_narrowed_the_same_kernel_is_mostly_rejects(contract):
    fn, options = NARROWED[contract]
    kept = {k: v for k, v in options.items() if k == "pad"}  # pad was an option before: the new ones bite
    fraction, report = _reject_fraction(fn, contract, 6, **kept)
    assert fraction > 0.5, (fraction, report.tally.rejections)


@pytest.mark.parametrize("isolate", [pytest.param("--no-isolate", id="in-process"),
                                     pytest.param("--isolate", id="session", marks=pytest.mark.matrix)])
def test_the_cli_flags_narrow_as_check_does(capsys, tmp_path, monkeypatch, isolate):
    monkeypatch.chdir(tmp_path)
    fn, options = NARROWED["delta_update"]
    flags = [w for name, value in options.items() for w in (contracts.CliOption(name, (), "", "").flag, value)]
    code = cli.main(["fuzz", "--target", "style_kernels.engine_updates:delta_update", "--contract", "delta_update",
                     isolate, "--max-examples", "15", "--seed", "1", "--database", "none", "--json",
                     "--mode", "compare", *flags])
    text = capsys.readouterr().out
    body = json.loads(text)
    (target,) = body["targets"]
    assert code == 0 and target["examples"] == 15 and target["rejected_by_target"] == {}, target
    assert target["options"] == options  # what the clean verdict does not cover, in the report
    if importlib.util.find_spec("plotly"):  # the report page says it next to the contract
        (tmp_path / "r.json").write_text(text)
        assert cli.main(["report", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.html")]) == 0
        page = (tmp_path / "r.html").read_text()
        assert ", ".join(f"{k}={v}" for k, v in target["options"].items()) in page


def test_the_coverage_lines_name_the_options_that_narrowed_the_draws():
    from mambafuzz.search.features import Tally, summary_lines

    tally = Tally()
    tally.examples = 3
    lines = summary_lines("mine:a_rather_long_adapter_name", tally,
                          options={"state_layout": "kv", "gate": "gdn", "step_buffer": "never"})
    assert " ".join(" ".join(lines).split()).startswith("coverage of mine:a_rather_long_adapter_name (3 examples, state_layout=kv, "
                                      "gate=gdn, step_buffer=never):")
    assert all(len(line) <= 80 for line in lines)


# --------------------------------------------------------------------------- the draws, and shrinking
def _draws(contract: str, count: int, **options) -> list:
    from hypothesis import HealthCheck, Phase, given, settings

    out = []

    @settings(max_examples=count, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(contracts.strategy(contract, profile=strategies.CPU, **options))
    def draw(case):
        out.append(case)

    draw()
    return out


NARROWINGS = [  # (contract, options, what every drawn case must show)
    ("conv_update", {"spec": "always"}, lambda c: c.nacc is not None),
    ("conv_update", {"spec": "never", "nonspec_tokens": "1"}, lambda c: c.nacc is None and max(c.lens) <= 1),
    ("conv_update", {"varlen": "always", "prefix_caching": "always"}, lambda c: c.varlen and c.init is not None),
    ("conv_update", {"conv_layout": "token", "max_width": "4"}, lambda c: c.layout == "token" and c.width <= 4),
    ("ssm_update", {"has_z": "never", "has_d": "always", "has_dt_bias": "always"},
     lambda c: not c.has_z and c.has_d and c.has_dt_bias),
    ("ssm_update", {"dst_indices": "always", "varlen": "never"}, lambda c: c.dst is not None and not c.varlen),
    ("delta_update", {"state_layout": "kv", "gate": "kda"}, lambda c: c.layout == "kv" and c.kda),
    ("delta_update", {"step_buffer": "always", "spec": "never"}, lambda c: c.inter_rows > 0 and c.nacc is None),
    ("delta_update", {"pad_rows": "never"}, lambda c: all(v != c.pad for r in c.idx for v in r)),
]


@pytest.mark.parametrize("contract, options, holds", NARROWINGS, ids=[f"{c}-{'-'.join(o)}" for c, o, _ in NARROWINGS])
def test_narrowed_draws_and_their_shrink_candidates_stay_within_the_options(contract, options, holds):
    spec = contracts.get(contract)
    cases = _draws(contract, 40, **options)
    assert cases and all(holds(c) for c in cases)
    assert all(spec.admits(c, options) for c in cases)
    assert all(holds(s) for c in cases[:10] for s in reduce.candidates(c, options))
    if any(value in ("always", "kv", "token", "kda") for value in options.values()):
        # cuts that drop an input, or take the default layout, would leave such a narrowing: admits keeps
        # shrinking inside it
        assert any(not holds(s) for c in cases[:10] for s in reduce.candidates(c))


def test_defaults_draw_everything_and_the_coverage_expected_follows_the_options():
    conv = contracts.get("conv_update")
    assert {c.layout for c in _draws("conv_update", 60)} == {"dim", "token"}
    assert conv.expected_features({})["width"] == ("2", "3", "4", "5", "6")
    narrowed = conv.expected_features({"max_width": "4", "conv_layout": "dim", "prefix_caching": "never"})
    assert narrowed["width"] == ("2", "3", "4") and narrowed["conv_layout"] == ("dim",)
    assert narrowed["apc"] == ("no",) and "write" not in narrowed["pads"]
    delta = contracts.get("delta_update").expected_features({"step_buffer": "never", "gate": "gdn"})
    assert delta["buffer"] == ("none",) and delta["gate"] == ("head",)


@pytest.mark.parametrize("contract, option, value", [("delta_update", "gate", "gla"),
                                                     ("ssm_update", "has_d", "yes"),
                                                     ("conv_update", "max_width", "7")])
def test_a_bad_option_value_is_one_line(contract, option, value):
    with pytest.raises(UsageError) as info:
        mambafuzz.check(engine.delta_update, contract, **{option: value})
    message = str(info.value)
    assert option in message and repr(value) in message and "\n" not in message


# --------------------------------------------------------------------------- listed with their contracts
def _declared() -> dict[str, set]:
    found: dict[str, set] = {}
    for contract in contracts.registered().values():
        for option in contract.cli_options:
            found.setdefault(option.name, set()).add(contract.name)
    return found


def _help_entries(text: str) -> dict[str, str]:
    """argparse's help, one entry per option flag (its wrapped lines joined)."""
    entries, current = {}, None
    for line in text.splitlines():
        if line.startswith("  --"):
            current = line.split()[0]
            entries[current] = line
        elif current and line.startswith("      "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return {flag: " ".join(body.split()) for flag, body in entries.items()}


def test_every_option_in_fuzz_help_names_every_contract_it_applies_to(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fuzz", "--help"])
    entries = _help_entries(capsys.readouterr().out)
    declared = _declared()
    assert {"pad", "spec", "state_layout", "has_d", "conv_layout"} <= set(declared)
    for name, owners in declared.items():
        entry = entries["--" + name.replace("_", "-")]
        # "a, b: help" or, where contracts say different things, "a: help; b: help"
        named = set()
        for part in entry.split("}", 1)[-1].split("; "):
            head = {c.strip() for c in part.split(":", 1)[0].split(",")}
            if head <= set(contracts.registered()):
                named |= head
        assert owners == named, (name, entry)
    assert "conv_update, ssm_update, delta_update, conv_prefill" in entries["--pad"].split(": the pad slot id")[0]
    assert "slot_copy, slot_fork: allowed" in entries["--chains"]


def test_list_names_every_contract_of_every_option():
    text = " ".join(" ".join(cli.option_lines()).split())
    for name, owners in _declared().items():
        flag = "--" + name.replace("_", "-")
        entry = text.split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert all(o in entry for o in owners), (flag, entry)
    assert all(len(line) <= 80 for line in cli.option_lines())


def test_pytest_help_lists_each_option_with_its_contracts(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, owners in _declared().items():
        listed = re.search(rf"\b{name}=\S+ \(([^)]*)\)", text)
        assert listed and set(listed.group(1).split(", ")) == owners, (name, listed and listed.group(0))


def test_the_pytest_option_sets_a_contract_option_where_its_contract_declares_it(monkeypatch):
    """--mambafuzz-option pad=0 reaches every check whose contract has a pad (the plugin's context), and
    is left out where the contract has none."""
    from mambafuzz import api

    seen = {}

    def record(spec, options, profile):
        seen[spec.name] = dict(options)
        raise UsageError("stop here")

    monkeypatch.setattr(api, "_check_options", record)
    monkeypatch.setitem(api.PYTEST_CONTEXT, "options", {"pad": "0", "state_layout": "kv"})
    with pytest.raises(UsageError):
        mambafuzz.check(engine.delta_update, "delta_update", gate="gdn")
    with pytest.raises(UsageError):
        mambafuzz.check(engine.delta_update, "batch_memcpy")
    assert seen == {"delta_update": {"gate": "gdn", "pad": "0", "state_layout": "kv"}, "batch_memcpy": {}}

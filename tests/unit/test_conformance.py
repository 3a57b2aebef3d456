"""The conformance corpus (tests/conformance) in Triton's interpreter, against numpy.

Every entry is a small correct kernel in an engine's idioms.  Inside
``mambafuzz.interp.adapters()`` its outputs must match the entry's numpy
expectation under the entry's bound (bit for bit unless the entry documents a
tolerance), and under the race recorder it must show no hazard.  An entry the
installed release's interpreter cannot run (``Entry.unrunnable``) must instead
end in an exception that ``mambafuzz.judge.blame`` calls inconclusive, naming
the construct.  The rounding model the 16/8-bit expectations use is checked
against torch's own casts here too.
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
_ROOT = Path(__file__).resolve().parents[2]
for _p in (str(_ROOT), str(_ROOT / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":  # pragma: no cover
    pytest.skip("the corpus runs in Triton's interpreter here (TRITON_INTERPRET=1)", allow_module_level=True)

import torch  # noqa: E402
import triton  # noqa: E402

import conformance  # noqa: E402
from conformance import numerics as nx  # noqa: E402
from mambafuzz.interp import adapters  # noqa: E402
from mambafuzz.judge import blame  # noqa: E402
from mambafuzz.racecheck import RaceRecorder  # noqa: E402

VERSION = triton.__version__
CASES = conformance.CASES


def _wired(tensors: dict) -> dict:
    return {name: nx.wire(t) for name, t in tensors.items()}


def _mismatches(entry, outputs: dict, expected: dict) -> list:
    assert set(outputs) == set(expected), (sorted(outputs), sorted(expected))
    bad = []
    for name, out in outputs.items():
        c = nx.compare(nx.wire(out), expected[name], nx.dtype_name(out.dtype), entry.bound_for(name))
        if not c.ok:
            bad.append(f"{name} ({entry.bound_for(name).describe()}): {c.line()}")
    return bad


def _entry_id(entry):
    return entry.name


# --------------------------------------------------------------------------
# every entry against numpy
# --------------------------------------------------------------------------
@pytest.mark.parametrize("entry", CASES, ids=_entry_id)
def test_entry_matches_numpy_in_the_interpreter(entry):
    inputs = entry.inputs("cpu")
    expected = entry.expect(_wired(inputs))
    construct = entry.unrunnable_on(VERSION)
    if construct is not None:
        with adapters():
            with pytest.raises(Exception) as info:
                entry.launch(inputs)
        who = blame.classify(info.value)
        assert who.who == blame.INTERPRETER, (who.who, who.message)
        assert "\n" not in who.message and "inconclusive" in who.message, who.message
        # named by the verdict itself, not only by the kernel line it echoes
        said = who.message.replace(who.where or "\0", "")
        assert construct.strip("`") in said, f"Triton {VERSION}: {construct} not named in: {who.message}"
        return
    with adapters():
        outputs = entry.launch(inputs)
    bad = _mismatches(entry, outputs, expected)
    assert not bad, f"{entry.name} on Triton {VERSION}:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("entry", CASES, ids=_entry_id)
def test_entry_has_no_hazard_under_the_race_recorder(entry):
    construct = entry.unrunnable_on(VERSION)
    if construct is not None:
        pytest.skip(f"Triton {VERSION}'s interpreter cannot run {construct}")
    inputs = entry.inputs("cpu")
    expected = entry.expect(_wired(inputs))
    with RaceRecorder() as rec:
        for name, t in inputs.items():
            rec.add_region(name, t)
        outputs = entry.launch(inputs)
    assert rec.hazards == [], "\n".join(h.explanation for h in rec.hazards)
    assert rec.stats["events"] > 0
    bad = _mismatches(entry, outputs, expected)
    assert not bad, f"{entry.name} under the recorder on Triton {VERSION}:\n  " + "\n  ".join(bad)


# --------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------
# what the corpus must exercise somewhere (a word of some entry's idioms line)
IDIOMS = ["(coord != pad_slot_id) & (feats < dim)", "mask &= slot != pad", "exp = tl.exp", "div = div_normal",
          "triton.heuristics", "triton.autotune", "tl.make_block_ptr", "tl.advance", "tl.static_range",
          "libdevice", "tl.math", "tl.constexpr module global", "do_not_specialize", "3-D grid",
          "i_t.to(tl.int64)", "2**31", "range(0, tl.load(n_ptr), BLOCK)", "tl.pointer_type", "uint64",
          "int32", "if USE_PAD_SLOT and", " or slot >= n", "tl.where` with a scalar condition", "bf16 * bf16",
          ".to(tl.bfloat16)", "fp16", "tl.dot", "float8e4nv", "float8e5", "bitcast=True", "tl.clamp",
          "fp32 -> int32", "tl.int64` annotated"]


def test_the_registry_is_well_formed():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) and 20 <= len(names) <= 32, names
    for c in CASES:
        assert c.idioms and "\n" not in c.idioms, c.name
        assert "(" in c.idioms and ")" in c.idioms, f"{c.name}: name the engine code it mirrors"
        bounds = c.bound.values() if isinstance(c.bound, dict) else [c.bound]
        for b in bounds:
            assert b.exact or (b.reason and "\n" not in b.reason), f"{c.name}: a tolerance needs a reason"
        for prefix, construct in c.unrunnable.items():
            assert prefix.count(".") == 1 and construct, c.name
    text = " ".join(c.idioms for c in CASES)
    missing = [i for i in IDIOMS if i not in text]
    assert not missing, missing


def test_sixteen_and_eight_bit_entries_document_their_model():
    for c in CASES:
        lowp = {nx.dtype_name(t.dtype) for t in c.inputs("cpu").values()} & {"bfloat16", "float8_e4m3fn", "float8_e5m2"}
        if lowp or c.name.startswith("lowp_"):
            assert c.model, f"{c.name}: say how the expectation models compiled 16/8-bit math"


# --------------------------------------------------------------------------
# the numerics the expectations stand on
# --------------------------------------------------------------------------
def _midpoints(fmt):
    bits = np.arange(2 ** fmt.bits, dtype=np.uint64).astype(fmt.uint)
    vals = np.unique(nx.decode(bits, fmt))
    vals = vals[np.isfinite(vals)]
    return (vals[1:] + vals[:-1]) / 2


@pytest.mark.parametrize("name, limit", [("bfloat16", None), ("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_round_to_nearest_even_agrees_with_torch(name, limit):
    fmt = nx.FORMATS[name]
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(4000) * s for s in (1e-3, 1.0, 40.0)])
    mids = _midpoints(fmt)
    mids = mids[np.abs(mids) < 1e30][:: max(1, len(mids) // 4000)]
    x = np.concatenate([x, mids]).astype(np.float32)
    if limit is not None:
        x = np.clip(x, -limit, limit)
    ours = nx.round_to(x.astype(np.float64), fmt)
    theirs = nx.wire(torch.from_numpy(x).to(getattr(torch, name)))
    assert np.array_equal(ours, theirs), x[ours != theirs][:8]
    assert np.array_equal(nx.decode(theirs, fmt), torch.from_numpy(x).to(getattr(torch, name)).double().numpy())


def test_round_to_float16_agrees_with_numpy_and_overflows_to_inf():
    x = np.concatenate([_midpoints(nx.F16), [70000.0, -70000.0, 65519.0, 65520.0, 1e-8, -0.0]])
    x = x[np.abs(x) < 1e6].astype(np.float32)
    with np.errstate(over="ignore"):
        assert np.array_equal(nx.round_to(x.astype(np.float64), nx.F16), x.astype(np.float16).view(np.uint16))


def test_compare_counts_ulps_and_respects_the_bound():
    one = nx.to_bf16(np.array([1.0, 2.0, -3.0]))
    off = one.copy()
    off[1] += 1                                          # 2.0 -> the next bf16 up
    c = nx.compare(off, one, "bfloat16")
    assert (c.equal, c.total, c.max_ulps, c.ok) == (2, 3, 1.0, False) and c.max_abs == 2.0 ** -6
    assert "(1,)" in c.first_bad
    assert nx.compare(off, one, "bfloat16", nx.ulps(1, "r")).ok
    assert not nx.compare(off, one, "bfloat16", nx.close(1e-3, 0, "r")).ok
    a = np.array([0.0, -0.0], dtype=np.float32)
    assert not nx.compare(a, a[::-1].copy(), "float32").ok                  # bit for bit: -0 is not +0
    assert nx.compare(np.array([np.nan], np.float32), np.array([np.nan], np.float32), "float32").ok
    ints = nx.compare(np.array([5, 9], np.int64), np.array([5, 7], np.int64), "int64")
    assert (ints.ok, ints.max_ulps, ints.max_abs) == (False, 2.0, 2.0)
    with pytest.raises(AssertionError):
        nx.compare(np.zeros(2, np.float32), np.zeros(3, np.float32), "float32")
    with pytest.raises(AssertionError):                                     # bf16 must arrive as its bits
        nx.compare(np.zeros(2, np.float32), np.zeros(2, np.float32), "bfloat16")


def test_wire_round_trips_every_dtype_the_corpus_uses():
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2,
                  torch.int8, torch.int32, torch.int64, torch.uint8, torch.uint64):
        t = (torch.arange(-8, 8) * 3).to(torch.float32)
        t = t.abs().to(dtype) if dtype in (torch.uint8, torch.uint64) else t.to(dtype)
        back = nx.unwire(nx.wire(t), nx.dtype_name(dtype))
        assert back.dtype == dtype and torch.equal(back.view(torch.uint8), t.view(torch.uint8)), dtype

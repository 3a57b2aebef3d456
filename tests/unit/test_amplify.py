"""Race amplification ("GPU mode: races made to show").

CPU (the interpreter, every run): ``Perturb`` validation; cases carry an
optional ``perturb`` that round-trips through JSON and leaves the hash of an
unperturbed case as it was; only amplifying profiles draw perturbations, and
Hypothesis shrinks them towards none; the engine hands ``perturb=`` only to
amplifiable targets; perturbed kernels still equal the oracle in the
interpreter (where the delay compiles to nothing) and the race recorder still
flags the racy ones; the perturbed kernels compile for sm_90 with no GPU.

GPU (``MAMBAFUZZ_DEVICE=cuda pytest -m gpu tests/unit/test_amplify.py``): the
correct kernels never fail under perturbation, and the racy zoo variants that
plain repetition misses corrupt under some perturbation.
"""
import dataclasses
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mambafuzz import contracts
from mambafuzz import kernels  # noqa: E402
from mambafuzz import strategies  # noqa: E402
from mambafuzz.kernels import registry  # noqa: E402
from mambafuzz.kernels.perturb import NO_DELAY, Perturb, launch_args  # noqa: E402
from mambafuzz.cases.batch_memcpy import BatchCopyCase  # noqa: E402
from mambafuzz.cases.postprocess import PostprocessCase
from mambafuzz.cases.state_copy import StateCopyCase
from mambafuzz.contracts import case_from_json  # noqa: E402
from mambafuzz.judge.engine import run_case  # noqa: E402
from mambafuzz.errors import CaseError  # noqa: E402
from mambafuzz.judge.materialize import materialize  # noqa: E402
from mambafuzz.search.reduce import candidates  # noqa: E402
from mambafuzz.oracle import PoolLayout  # noqa: E402
from common import compile_for_sm90  # noqa: E402  (the sm_90 compile helper)

INTERP = kernels.INTERPRETED
interp_only = pytest.mark.skipif(not INTERP, reason="needs TRITON_INTERPRET=1")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)

# ---------------------------------------------------------------- fixed cases
_POOL = PoolLayout("conv_sd", 64, 2, 4 * 8 * 2, 2, state_len=4, dim=8)
BATCH = BatchCopyCase(arena_size=64, copies=((8, 0, 16),), seed=7)
STATE = StateCopyCase(arena_size=64 + 2 * 64 + 64, pools=(_POOL,), block_tables=(((0, 0),),), num_tiles=1,
                      seed=3, src_cols=(0,), dst_cols=(1,), biases=(1,))
POST = PostprocessCase(arena_size=64 + 2 * 64 + 64, pools=(_POOL,), block_tables=(((0, 1),),), num_tiles=2,
                       seed=4, block_size=4, num_computed=(2,), num_scheduled=(3,), num_draft=(2,),
                       num_accepted=(3,), state_idx=(0,))
# Hashes the three cases had before cases grew `perturb` (computed with the
# previous cases.py); they must never drift, or saved crash files are orphaned.
PINNED = {BATCH: "e1196c2960c889a9", STATE: "7021d659257ec18f", POST: "58295b1ca2eab7f7"}
SOME = (1, 2000, 1, 0, 8)


# ---------------------------------------------------------------- Perturb
def test_perturb_validates_and_is_hashable():
    p = Perturb(1, 2000, 3, 42, 8)
    assert p.to_tuple() == (1, 2000, 3, 42, 8) and Perturb.from_tuple(p.to_tuple()) == p
    assert Perturb.from_tuple([1, 2000, 3, 42, 8]) == p and Perturb.from_tuple(p) is p
    assert {p: 1}[Perturb(1, 2000, 3, 42, 8)] == 1 and len({p, Perturb(1, 2000, 3, 42, 8)}) == 1
    assert p.constexprs() == {"DELAY_POS": 1, "DELAY_NS": 1, "SCHEDULE": 1}  # the values ride in the word
    assert Perturb().num_warps == 4 and not Perturb().delays
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.delay_ns = 1
    bad = [dict(position=0), dict(position=3), dict(delay_ns=-1), dict(delay_ns=100_001),
           dict(schedule=4), dict(schedule=-1), dict(seed=-1), dict(seed=2**31), dict(num_warps=3),
           dict(num_warps=32)]
    for kw in bad:
        with pytest.raises(ValueError):
            Perturb(**{**dict(position=1, delay_ns=500, schedule=1), **kw})
    for kw in (dict(position=True), dict(delay_ns=2.0), dict(seed="1"), dict(num_warps=None)):
        with pytest.raises(TypeError):
            Perturb(**{**dict(position=1, delay_ns=500, schedule=1), **kw})
    with pytest.raises(ValueError):
        Perturb.from_tuple((1, 2000, 1, 0))
    with pytest.raises(TypeError):
        Perturb.from_tuple(7)


def test_no_delay_compiles_the_unperturbed_kernel():
    """delay 0 or schedule 0: the constexprs are those of the unperturbed kernel."""
    for p in (Perturb(2, 0, 3, 9, 8), Perturb(2, 8000, 0, 9, 8)):
        assert not p.delays and p.constexprs() == NO_DELAY
    assert launch_args(None, 4) == (NO_DELAY, 0, 4)
    assert launch_args(Perturb(2, 500, 3, 9, 8), 4) == (
        {"DELAY_POS": 2, "DELAY_NS": 1, "SCHEDULE": 1}, 9 | 500 << 31 | 3 << 48 | 1 << 62, 8)


def test_the_runtime_word_packs_delay_schedule_and_seed():
    """One compiled kernel per position and warp count: the rest is a runtime int64, decoded in
    ``kernels.copy.warp_delay`` with the same shifts."""
    from mambafuzz.kernels.perturb import MAX_DELAY_NS, MAX_SEED
    for p in (Perturb(1, 1, 1, 0, 4), Perturb(2, MAX_DELAY_NS, 3, MAX_SEED, 16), Perturb(1, 8000, 2, 12345, 8)):
        w = p.word()
        assert 2**62 <= w < 2**63  # int64 to Triton every time: one signature
        assert (w & (2**31 - 1), (w >> 31) & 0x1FFFF, (w >> 48) & 3) == (p.seed, p.delay_ns, p.schedule)
    assert Perturb(1, 0, 1, 5, 4).word() == 0 and Perturb(1, 500, 0, 5, 4).word() == 0
    assert launch_args((1, 0, 0, 0, 8), 4) == (NO_DELAY, 0, 8)  # warps still chosen


# ---------------------------------------------------------------- cases
@pytest.mark.parametrize("case", [BATCH, STATE, POST], ids=["batch", "state", "post"])
def test_case_json_round_trip_with_and_without_perturb(case):
    assert case.perturb is None and "perturb" not in case.to_json()
    assert case_from_json(json.loads(json.dumps(case.to_json()))) == case
    amp = case.with_perturb(Perturb(2, 500, 3, 77, 8))
    assert amp.perturb == (2, 500, 3, 77, 8) and amp.with_perturb(None) == case
    body = json.loads(json.dumps(amp.to_json()))
    assert body["perturb"] == [2, 500, 3, 77, 8]
    back = case_from_json(body)
    assert back == amp and isinstance(back.perturb, tuple) and back.content_hash() == amp.content_hash()
    assert "perturb: pos 2, 500 ns, schedule 3, seed 77, 8 warps" in amp.describe()
    # an explicit null (hand-written) loads as no perturbation
    assert case_from_json({**case.to_json(), "perturb": None}) == case


@pytest.mark.parametrize("case", [BATCH, STATE, POST], ids=["batch", "state", "post"])
def test_hash_unchanged_for_unperturbed_cases(case):
    assert case.content_hash() == PINNED[case]
    assert case.with_perturb(SOME).content_hash() != PINNED[case]
    assert case.with_perturb(SOME).content_hash() != case.with_perturb((2,) + SOME[1:]).content_hash()


def test_old_crash_file_case_loads_without_perturb():
    old = {"arena_size": 64, "copies": [[8, 0, 16]], "seed": 7, "contract": "batch_memcpy"}
    case = case_from_json(old)
    assert case == BATCH and case.perturb is None and case.content_hash() == PINNED[BATCH]


@pytest.mark.parametrize("bad", [[1, 2, 3], "fast", [1, 2, 3, 4, True], [1, 2.5, 1, 0, 4], {"a": 1}])
def test_malformed_perturb_in_json_is_a_case_error(bad):
    with pytest.raises(CaseError, match="perturb"):
        case_from_json({**BATCH.to_json(), "perturb": bad})


def test_out_of_range_perturb_is_a_case_error_when_materialised():
    with pytest.raises(CaseError, match="perturb"):
        materialize(BATCH.with_perturb((3, 500, 1, 0, 4)), "cpu")


def test_reduction_tries_dropping_the_perturbation_first():
    amp = STATE.with_perturb(SOME)
    assert next(candidates(amp)) == STATE
    assert all(c.perturb is None for c in candidates(STATE))


# ---------------------------------------------------------------- strategies
def _all(profile):
    return st.one_of(*(contracts.strategy(c, profile=profile)
                       for c in ("batch_memcpy", "state_copy", "postprocess")))


CPU_AMP = dataclasses.replace(strategies.CPU, name="cpu-amp", amplify=True)


def test_profiles():
    assert not strategies.CPU.amplify and not strategies.GPU.amplify
    amp = strategies.PROFILES["gpu-amp"]
    assert amp is strategies.GPU_AMP and amp.amplify
    assert dataclasses.replace(amp, name="gpu", amplify=False) == strategies.GPU


@FAST
@given(st.one_of(_all(strategies.CPU), _all(strategies.GPU)))
def test_profiles_without_amplify_never_draw_a_perturbation(case):
    assert case.perturb is None


@FAST
@given(_all(strategies.GPU_AMP))
def test_amplifying_profile_draws_valid_perturbations(case):
    if case.perturb is not None:
        p = Perturb.from_tuple(case.perturb)
        assert p.delay_ns in (0, 500, 2000, 8000) and p.num_warps in (4, 8)
        if p.delay_ns:
            assert p.position in (1, 2) and p.schedule in (1, 2, 3)
            assert p.schedule == 3 or p.seed == 0
        else:
            assert p.to_tuple() == (1, 0, 0, 0, 8)  # warps only: one canonical form
        assert json.loads(json.dumps(case.to_json()))["perturb"] == list(case.perturb)


def test_amplifying_profile_reaches_every_kind_of_perturbation():
    seen = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(strategies.perturbs())
    def collect(p):
        if p is None:
            seen.add("none")
            return
        pos, ns, sched, _, warps = p
        seen.update({f"warps{warps}", f"delay{ns}"})
        if ns:
            seen.update({f"pos{pos}", f"sched{sched}"})

    collect()
    want = {"none", "warps4", "warps8", "pos1", "pos2", "sched1", "sched2", "sched3",
            "delay0", "delay500", "delay2000", "delay8000"}
    assert want <= seen, want - seen


def test_perturbations_shrink_towards_none():
    opts = settings(database=None, max_examples=500, suppress_health_check=list(HealthCheck))
    assert find(strategies.perturbs(), lambda p: True, settings=opts) is None
    # a finding that needs some delay keeps the smallest one, no seed, 4 warps
    assert find(strategies.perturbs(), lambda p: p is not None and p[1] > 0, settings=opts) == (1, 500, 1, 0, 4)
    # ... and a whole case shrinks its perturbation away when it is not needed
    case = find(contracts.strategy("batch_memcpy", profile=CPU_AMP), lambda c: len(c.copies) >= 2,
                settings=opts)
    assert case.perturb is None


# ---------------------------------------------------------------- registry / engine
def test_registry_marks_amplifiable_targets():
    for t in registry.all_targets():
        want = t.kind in ("correct", "zoo") and t.contract not in registry.DECLARED  # the tensor contracts'
        # kernels take no perturb=: on a GPU they get warp delays as a user's kernel does (instrument)
        assert t.amplifiable is want, t.name
        assert bool(getattr(t.fn, "amplifiable", False)) is want, t.name
    with pytest.raises(TypeError):
        registry.Target("x", "batch_memcpy", "user", "full", "", registry.get("torch.batch_memcpy").fn,
                        amplifiable=1)


def _spy(flag):
    calls = []

    def fn(src_ptrs, dst_ptrs, sizes, **kw):
        calls.append(kw)
        registry.get("torch.batch_memcpy").fn(src_ptrs, dst_ptrs, sizes, arena=kw["arena"])
    if flag is not None:
        fn.amplifiable = flag
    return fn, calls


def test_engine_passes_perturb_only_to_amplifiable_targets():
    amp = BatchCopyCase(arena_size=128, copies=((16, 8, 24),), seed=3, perturb=SOME)
    for flag, override, passed in ((True, None, True), (False, None, False), (None, None, False),
                                   (None, True, True), (True, False, False)):
        fn, calls = _spy(flag)
        v = run_case(fn, amp, "cpu", mode="compare", amplifiable=override)
        assert not v.failed, v.summary()
        assert ("perturb" in calls[0]) is passed, (flag, override)
        if passed:
            assert calls[0]["perturb"] == Perturb(*SOME)
    fn, calls = _spy(True)  # an unperturbed case: never perturb=
    run_case(fn, BatchCopyCase(arena_size=128, copies=((16, 8, 24),), seed=3), "cpu")
    assert "perturb" not in calls[0]


def test_torch_targets_run_perturbed_cases_unperturbed():
    for name, case in (("torch.batch_memcpy", BATCH), ("torch.state_copy", STATE)):
        v = run_case(registry.get(name).fn, case.with_perturb(SOME), "cpu", reps=2)
        assert not v.failed, (name, v.summary())


# ---------------------------------------------------------------- kernels in the interpreter
_LEFT = BatchCopyCase(arena_size=4096, copies=((40, 8, 2100), (2300, 2301, 900), (3300, 3300, 64)), seed=5)
_SD_SAME = StateCopyCase(
    arena_size=64 + 2 * 4 * 40 * 2 + 64, pools=(PoolLayout("conv_sd", 64, 2, 4 * 40 * 2, 2, state_len=4, dim=40),),
    block_tables=(((0, 0),),), num_tiles=1, seed=1, src_cols=(0,), dst_cols=(1,), biases=(1,))
_DS_SAME = StateCopyCase(
    arena_size=64 + 2 * 2 * 64 + 64, pools=(PoolLayout("conv_ds", 64, 2, 2 * 64, 1, state_len=64, dim=2),),
    block_tables=(((0, 0),),), num_tiles=1, seed=1, src_cols=(0,), dst_cols=(1,), biases=(9,))
_TEMPORAL = StateCopyCase(
    arena_size=64 + 3 * 104 + 64, pools=(PoolLayout("temporal", 64, 3, 104, 4, inner=(5, 5)),),
    block_tables=(((2, 0, 1),),), num_tiles=3, seed=2, src_cols=(0,), dst_cols=(2,), biases=(1,))
PERTURBS = [(1, 2000, 1, 0, 4), (2, 500, 3, 7, 8), (1, 8000, 2, 0, 8), (1, 0, 0, 0, 8)]


@interp_only
@pytest.mark.parametrize("p", PERTURBS, ids=lambda p: "-".join(map(str, p)))
@pytest.mark.parametrize("name,case", [
    ("triton.batch_memcpy", _LEFT), ("triton.state_copy", _SD_SAME), ("triton.state_copy", _DS_SAME),
    ("triton.state_copy", _TEMPORAL), ("triton.postprocess", POST),
    ("zoo.BM-NOGUARD", _LEFT), ("zoo.SD-SPAN", _SD_SAME), ("zoo.DS-ROW", _DS_SAME)])
def test_perturbed_kernels_equal_the_oracle_in_the_interpreter(name, case, p):
    v = run_case(registry.get(name).fn, case.with_perturb(p), "cpu", reps=2, mode="compare")
    assert not v.failed, v.summary()


@interp_only
@pytest.mark.parametrize("name,case", [("zoo.BM-NOGUARD", _LEFT), ("zoo.SD-SPAN", _SD_SAME),
                                       ("zoo.DS-ROW", _DS_SAME)])
def test_race_recorder_still_flags_racy_variants_when_perturbed(name, case):
    v = run_case(registry.get(name).fn, case.with_perturb((1, 2000, 1, 0, 8)), "cpu", mode="race")
    assert v.kind == "race", v.summary()
    correct = registry.get("triton." + registry.get(name).contract).fn
    assert not run_case(correct, case.with_perturb((1, 2000, 1, 0, 8)), "cpu", mode="race").failed


@interp_only
def test_launchers_take_a_perturb_directly():
    import torch

    from mambafuzz.kernels.batch_memcpy import batch_memcpy
    arena = torch.arange(256, dtype=torch.uint8).repeat(16)
    snap = arena.clone()
    base = arena.data_ptr()
    batch_memcpy(torch.tensor([base + 24]), torch.tensor([base]), torch.tensor([3000]),
                 perturb=Perturb(1, 2000, 3, 5, 8))
    assert torch.equal(arena[:3000], snap[24:3024]) and torch.equal(arena[3000:], snap[3000:])
    with pytest.raises(ValueError):
        batch_memcpy(torch.tensor([base]), torch.tensor([base]), torch.tensor([1]), perturb=(9, 1, 1, 0, 4))


# ---------------------------------------------------------------- compiled, without a GPU
_AMP_COMPILE_CODE = r'''
DELAYS = [{"DELAY_POS": pos, "DELAY_NS": ns, "SCHEDULE": sched}
          for pos in (1, 2) for sched in (1, 2, 3) for ns in (2000,)]
def check(k, consts):
    n = k.asm["ptx"].count("nanosleep.u32")
    assert (n > 0) == (consts["DELAY_NS"] > 0), (consts, n)
for i, d in enumerate([NO_DELAY] + DELAYS):  # every position and schedule, 4 and 8 warps
    c = {"BLOCK": 1024, "SPLIT_BLOCK": 8192, "SPLIT_MIN": 16384, "PART_MAJOR": i % 2 == 0,
         "INTERLEAVE": i % 3 == 0, "UNROLL": 1 << i % 3,
         **{f: f == ("NOGUARD_LEFT" if i % 2 else None) for f in BM_FLAGS}, **d}
    check(comp(_batch_memcpy_kernel, BM_SIG, c, 8 if i % 2 else 4), c)
# as launched: the seed argument is the int64 word that carries delay, schedule and seed
c = {"BLOCK": 1024, "SPLIT_BLOCK": 8192, "SPLIT_MIN": 16384, "PART_MAJOR": False,
     "INTERLEAVE": False, "UNROLL": 1, **{f: False for f in BM_FLAGS},
     "DELAY_POS": 2, "DELAY_NS": 1, "SCHEDULE": 1}
check(comp(_batch_memcpy_kernel, {**BM_SIG, "seed": "i64"}, c, 8), c)
for v, d in zip((None, "SD_SPAN", "DS_ROW"), DELAYS[::2]):
    c = {"BLOCK": 1024, "ROWS": 128, **{f: f == v for f in FLAG_NAMES}, **d}
    check(comp(_state_copy_kernel, SC_SIG, c, 8), c)
for d in DELAYS[2:4]:
    c = {"BLOCK": 1024, "ROWS": 128, "NOOP_SKIP": False, **{f: False for f in FLAG_NAMES}, **d}
    check(comp(_postprocess_kernel, PP_SIG, c, 8), c)
print("compiled")
'''


@pytest.mark.slow
@pytest.mark.matrix
def test_perturbed_kernels_compile_for_sm90_without_a_gpu():
    """Every position and schedule compiles (inline PTX nanosleep, %tid.x, %ntid.x) at 4 and
    8 warps, and only a real delay puts a nanosleep in the PTX."""
    compile_for_sm90(_AMP_COMPILE_CODE)


# ---------------------------------------------------------------- GPU
def _gpu_racy():
    """The hand-built GPU geometries (mambafuzz.racy_cases)."""
    import racy_cases
    return racy_cases


GPU_PERTURBS = [(1, 2000, 1, 0, 4), (1, 2000, 1, 0, 8), (2, 2000, 1, 0, 4), (1, 8000, 2, 0, 4),
                (1, 2000, 3, 12345, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton.batch_memcpy", "triton.state_copy", "triton.postprocess"])
def test_correct_kernels_never_fail_under_perturbation(name):
    gpu_racy = _gpu_racy()
    target = registry.get(name)
    geometries = [(label, make) for label, (contract, make) in gpu_racy.GEOMETRIES.items()
                  if contract == target.contract and not label.startswith("temporal pool past")]
    if name == "triton.state_copy":
        geometries.append(("DS long rows", lambda: gpu_racy.same_block_conv("conv_ds", 64, 1024, 16, 2, 4)))
    bad = []
    for label, make in geometries:
        case = make()
        for p in GPU_PERTURBS:
            v = run_case(target.fn, case.with_perturb(p), "cuda", reps=50, mode="compare")
            if v.failed:
                bad.append(f"{label} {p}: {v.summary()}")
    assert not bad, "\n".join(bad)


RACY_GPU = {
    # zoo id -> (geometry, perturbations to try); any one corrupting is enough
    "zoo.SD-SPAN": (lambda g: g.same_block_conv("conv_sd", 1024, 4, 128, 2, 1),
                    [(1, 2000, 1, 0, 4), (1, 8000, 1, 0, 4), (1, 2000, 1, 0, 8), (1, 2000, 3, 1, 8)]),
    # 0/100 with plain repetition on an H200 (bench/results/gpu_racy_h200.md)
    "zoo.BM-NOGUARD": (lambda g: g.batch_rows(4096, 1 << 10, -8),
                       [(1, 2000, 1, 0, 4), (1, 8000, 1, 0, 4), (1, 2000, 1, 0, 8), (1, 2000, 3, 1, 8)]),
    # the bench DS geometries move 6-8 bytes per row, inside one warp: no lanes of two warps to
    # race.  Long rows (2 KiB, shifted 8 bytes) put a row across every warp.
    "zoo.DS-ROW": (lambda g: g.same_block_conv("conv_ds", 64, 1024, 16, 2, 4),
                   [(1, 2000, 1, 0, 4), (1, 8000, 1, 0, 4), (1, 2000, 1, 0, 8), (1, 2000, 3, 1, 8)]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(RACY_GPU))
def test_racy_variants_corrupt_under_some_perturbation(name):
    make, perturbs = RACY_GPU[name]
    case = make(_gpu_racy())
    fn = registry.get(name).fn
    seen = {}
    for p in perturbs:
        v = run_case(fn, case.with_perturb(p), "cuda", reps=50, mode="compare")
        assert not v.fault, v.fault
        seen[p] = f"{v.failures}/{v.reps}"
        if v.failures:
            break
    assert any(not s.startswith("0/") for s in seen.values()), f"{name}: no corruption under {seen}"

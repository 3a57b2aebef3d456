"""The interpreter mends of mambafuzz.interp: engine idioms get compiled Triton's values on the CPU.

Each test runs a small kernel the way engines write it, inside ``adapters()``
(and some under the race recorder), and compares with a hand-worked or numpy
value of what compiled Triton computes.  Outside the adapters the interpreter
is as Triton left it.  Runs on every supported release (CI: 3.5.1, 3.6.0, 3.9.0).
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":  # pragma: no cover
    pytest.skip("the mends are for Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as interp  # noqa: E402

from mambafuzz.interp import adapters, lowp  # noqa: E402
from mambafuzz.judge import blame  # noqa: E402
from mambafuzz.racecheck import RaceRecorder  # noqa: E402

exp = tl.exp                      # FLA's op.py idiom: a module-level alias used in jit bodies
log = tl.log
NEG_INF: tl.constexpr = float("-inf")
BF16 = lowp.FORMATS["bf16"]
try:
    from triton.language.extra import libdevice as _libdevice  # noqa: F401
    HAS_LIBDEVICE = True
except ImportError:  # pragma: no cover - every supported release ships it
    HAS_LIBDEVICE = False


def bf16_round(values) -> np.ndarray:
    """float64 values rounded once to bf16 (round to nearest, ties to even), as float64."""
    return lowp.decode(lowp.encode(np.asarray(values, dtype=np.float64), BF16), BF16)


# --------------------------------------------------------------------------
# kernels in the engines' idioms
# --------------------------------------------------------------------------
@triton.jit
def pad_mask_store(idx_ptr, out_ptr, n, pad_slot_id, BLOCK: tl.constexpr):
    """vLLM's update kernels: a scalar comparison combined with a block in a mask."""
    offs = tl.arange(0, BLOCK)
    slot = tl.load(idx_ptr)
    mask = (slot != pad_slot_id) & (offs < n)
    tl.store(out_ptr + offs, offs.to(tl.float32) + 1.0, mask=mask)
    keep = tl.where(slot == pad_slot_id, 0.0, offs.to(tl.float32))
    tl.store(out_ptr + BLOCK + offs, keep)


@triton.jit
def aliased_exp(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, exp(v) + log(v))


@triton.jit
def bf16_math(a_ptr, b_ptr, c_ptr, out_ptr, BLOCK: tl.constexpr):
    """bf16 * bf16 + bf16 in bf16, a bf16 comparison, and an fp32 accumulator of bf16 products."""
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    c = tl.load(c_ptr + offs)
    tl.store(out_ptr + offs, a * b + c)                       # bf16 arithmetic, rounded each op
    tl.store(out_ptr + BLOCK + offs, tl.where(a < b, a, b))   # compared as values, not bits
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc += a * b                                              # bf16 product, then fp32 add
    tl.store(out_ptr + 2 * BLOCK + offs, acc.to(tl.bfloat16))


@triton.jit
def cast_down(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16))


@triton.jit
def chunk_offsets(out_ptr, NT, BT: tl.constexpr):
    """FLA's chunk loops: ``i_t.to(tl.int64)`` on a range variable."""
    for i_t in range(NT):
        base = i_t.to(tl.int64) * BT
        tl.store(out_ptr + base + tl.arange(0, BT), tl.full([BT], 1, tl.int32) + i_t)


@triton.jit
def block_and(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs)
    m = (offs < n) and (v > 0)
    tl.store(out_ptr + offs, m.to(tl.int32))


@triton.jit
def bf16_dot_sum(a_ptr, out_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    d = tl.dot(a, a)
    tl.store(out_ptr + r[:, None] * N + r[None, :], d)
    tl.store(out_ptr + N * N + r, tl.sum(a, axis=1).to(tl.float32))


@triton.jit
def fp8_cast(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.float8e4nv))


def _bf16(values) -> torch.Tensor:
    return torch.tensor(np.asarray(values, dtype=np.float32)).to(torch.bfloat16)


def _as64(t: torch.Tensor) -> np.ndarray:
    return t.float().double().numpy()


# --------------------------------------------------------------------------
# each mend, inside the adapters
# --------------------------------------------------------------------------
@pytest.mark.parametrize("slot", [3, -1])
def test_a_scalar_comparison_in_a_block_mask_is_a_bool_mask(slot):
    out = torch.full((16,), -5.0)
    with adapters():
        pad_mask_store[(1,)](torch.tensor([slot], dtype=torch.int32), out, 5, -1, BLOCK=8)
    stored = [1.0, 2.0, 3.0, 4.0, 5.0, -5.0, -5.0, -5.0] if slot != -1 else [-5.0] * 8
    kept = [float(i) for i in range(8)] if slot != -1 else [0.0] * 8
    assert out.tolist() == stored + kept


def test_a_module_level_alias_of_a_tl_function_runs():
    x = torch.tensor([0.5, 1.0, 2.0, 4.0])
    out = torch.zeros(4)
    with adapters():
        aliased_exp[(1,)](x, out, BLOCK=4)
    np.testing.assert_allclose(out.numpy(), np.exp(x.numpy()) + np.log(x.numpy()), rtol=1e-6)
    assert aliased_exp.fn.__globals__["exp"] is exp       # put back when the adapters exit


def test_bf16_arithmetic_is_rounded_values_not_bit_patterns():
    a = [1.5, -3.0, 0.1, 7.0, 1.0 + 2 ** -7, 250.0, -0.5, 3.0]
    b = [2.0, 0.5, -0.3, 7.0, 1.0 + 2 ** -7, 250.0, 0.25, -3.0]
    c = [0.0, 1.0, 0.2, -49.0, 0.0, 1.0, 2.0, 9.0]
    ta, tb, tc = _bf16(a), _bf16(b), _bf16(c)
    out = torch.zeros(24, dtype=torch.bfloat16)
    with adapters():
        bf16_math[(1,)](ta, tb, tc, out, BLOCK=8)
    va, vb, vc = _as64(ta), _as64(tb), _as64(tc)
    got = _as64(out)
    np.testing.assert_array_equal(got[:8], bf16_round(bf16_round(va * vb) + vc))
    np.testing.assert_array_equal(got[8:16], np.where(va < vb, va, vb))
    np.testing.assert_array_equal(got[16:], bf16_round(np.float32(bf16_round(va * vb))))
    assert got[0] == 3.0                  # the interpreter alone multiplies bit patterns: 0.0


def test_an_fp32_to_bf16_cast_rounds_to_nearest_even():
    x = np.array([1.0 + 2 ** -8 + 2 ** -9, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -8 + 2 ** -9),
                  3.0e38, 1e-40, 3.4e38, -2.5], dtype=np.float32)
    out = torch.zeros(8, dtype=torch.bfloat16)
    with adapters():
        cast_down[(1,)](torch.tensor(x), out, BLOCK=8)
    expected = torch.tensor(x).to(torch.bfloat16)     # torch rounds to nearest even, as compiled code does
    assert out.view(torch.int16).tolist() == expected.view(torch.int16).tolist()


def test_a_range_loop_variable_takes_to():
    out = torch.zeros(12, dtype=torch.int32)
    with adapters():
        chunk_offsets[(1,)](out, 3, BT=4)
    assert out.tolist() == [1] * 4 + [2] * 4 + [3] * 4


def test_and_over_blocks_is_elementwise_as_compiled():
    x = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0])
    out = torch.zeros(8, dtype=torch.int32)
    with adapters():
        block_and[(1,)](x, out, 4, BLOCK=8)
    assert out.tolist() == [1, 0, 1, 0, 0, 0, 0, 0]       # Python's `and` alone gives v > 0


def test_bf16_dot_and_sum_use_values():
    rng = np.random.default_rng(0)
    a = _bf16(rng.standard_normal((16, 16)))
    out = torch.zeros(16 * 16 + 16)
    with adapters():
        bf16_dot_sum[(1,)](a, out, N=16)
    va = _as64(a).reshape(16, 16)
    np.testing.assert_allclose(out[:256].numpy().reshape(16, 16), va @ va, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[256:].numpy(), bf16_round(va.sum(axis=1)), rtol=0, atol=0)


def test_an_fp8_cast_rounds_and_saturates():
    x = np.array([1.0, 1.0625, 1.1875, 500.0, -1000.0, 0.001, -0.0, 240.0], dtype=np.float32)
    out = torch.zeros(8, dtype=torch.uint8)
    with adapters():
        fp8_cast[(1,)](torch.tensor(x), out.view(torch.float8_e4m3fn), BLOCK=8)
    expected = lowp.encode(np.clip(x, -448, 448), lowp.FORMATS["fp8e4nv"])
    assert out.tolist() == expected.tolist()
    assert lowp.decode(out.numpy(), lowp.FORMATS["fp8e4nv"])[3:5].tolist() == [448.0, -448.0]


# --------------------------------------------------------------------------
# the race recorder sees the kernel's own lines through the mends
# --------------------------------------------------------------------------
def test_the_recorder_runs_mended_kernels_and_names_kernel_lines():
    x = torch.tensor([0.5, 1.0, 2.0, 4.0])
    out = torch.zeros(4)
    with RaceRecorder({"x": (x.data_ptr(), 16), "out": (out.data_ptr(), 16)}) as rec:
        aliased_exp[(1,)](x, out, BLOCK=4)
    assert rec.hazards == [] and rec.stats["events"] == 2
    np.testing.assert_allclose(out.numpy(), np.exp(x.numpy()) + np.log(x.numpy()), rtol=1e-6)


# --------------------------------------------------------------------------
# outside the adapters: the interpreter as Triton left it
# --------------------------------------------------------------------------
def test_leaving_the_adapters_puts_every_mend_back():
    builder_class = interp.InterpreterBuilder
    names = ("create_fmul", "create_icmpNE", "cast_impl", "create_dot", "create_extern_elementwise")
    before = {n: builder_class.__dict__.get(n) for n in names}
    transformer, cache = interp.FunctionRewriter.ast_transformer, interp.InterpretedFunction.rewritten_fn
    with adapters():
        assert any(builder_class.__dict__.get(n) is not before[n] for n in names)
        assert interp.FunctionRewriter.ast_transformer is not transformer
    assert {n: builder_class.__dict__.get(n) for n in names} == before
    assert interp.FunctionRewriter.ast_transformer is transformer
    assert interp.InterpretedFunction.rewritten_fn is cache
    a, b = _bf16([1.5] * 8), _bf16([2.0] * 8)
    out = torch.zeros(24, dtype=torch.bfloat16)
    bf16_math[(1,)](a, b, _bf16([0.0] * 8), out, BLOCK=8)     # the bare interpreter: bit patterns
    assert out[0].item() != 3.0


# --------------------------------------------------------------------------
# what the mends cannot reach is inconclusive, one line naming it
# --------------------------------------------------------------------------
@triton.jit
def block_pointer_copy(x_ptr, out_ptr, B: tl.constexpr):
    p = tl.make_block_ptr(x_ptr, shape=(B,), strides=(1,), offsets=(0,), block_shape=(B,), order=(0,))
    tl.store(out_ptr + tl.arange(0, B), tl.load(p))


def _classified(kernel, *args, **kw):
    with adapters():
        try:
            kernel[(1,)](*args, **kw)
        except Exception as exc:  # noqa: BLE001 - classified below
            return blame.classify(exc)
    return None


def test_block_pointers_run_where_the_interpreter_has_them_and_are_inconclusive_where_not():
    x, out = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    who = _classified(block_pointer_copy, x, out, B=8)
    if who is None:
        assert out.tolist() == x.tolist()
        return
    assert who.who == blame.INTERPRETER, who
    assert "cannot run block pointers (`tl.make_block_ptr`)" in who.message, who.message
    assert "Triton 3.5 to 3.8 can" in who.message and "\n" not in who.message


@pytest.mark.skipif(not HAS_LIBDEVICE, reason="this Triton has no triton.language.extra.libdevice")
def test_libdevice_runs_its_float_functions_and_names_what_it_cannot():
    from triton.language.extra import libdevice

    @triton.jit
    def device_math(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, libdevice.tanh(v) + libdevice.log1p(v) + libdevice.pow(v, 2.0))

    @triton.jit
    def bessel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, libdevice.j0(tl.load(x_ptr + offs)))

    device_math.fn.__globals__["libdevice"] = libdevice
    x = torch.tensor([0.1, 0.5, 1.0, 2.0])
    out = torch.zeros(4)
    with adapters():
        device_math[(1,)](x, out, BLOCK=4)
    v = x.numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.tanh(v) + np.log1p(v) + v ** 2, rtol=1e-6)
    who = _classified(bessel, x, out, BLOCK=4)
    assert who is not None and who.who == blame.INTERPRETER, who
    assert "libdevice's __nv_j0f" in who.message and "\n" not in who.message, who.message


@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"])
@triton.jit
def tuned_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_an_autotuned_kernel_runs_its_first_config_without_a_gpu():
    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(8)
    with adapters():
        tuned_scale[lambda meta: (triton.cdiv(8, meta["BLOCK"]),)](x, out, 8)
    assert out.tolist() == (2 * x).tolist()
    assert tuned_scale.best_config.kwargs == {"BLOCK": 4}


@triton.jit(do_not_specialize=["addr"])
def address_round_trip(addr, out_ptr):
    """vLLM's raw-address idiom: an int argument cast to a typed pointer (and back, to look at it)."""
    p = addr.to(tl.pointer_type(tl.int32))
    tl.store(out_ptr, p.to(tl.int64))


@pytest.mark.parametrize("addr", [2**31 + 64, 2**32 - 8, 2**40 + 16])
def test_an_int_address_below_4_gib_casts_to_the_same_pointer(addr):
    # a host address in [2^31, 2^32) is a uint32 argument in the interpreter (a heap that low: a non-PIE
    # Python), and viewing it as a pointer failed; compiled code zero-extends it
    out = torch.zeros(1, dtype=torch.int64)
    with adapters():
        address_round_trip[(1,)](addr, out)
    assert int(out[0]) == addr

# --------------------------------------------------------------------------
# launchers that select the tensors' GPU (SGLang's selective_state_update)
# --------------------------------------------------------------------------
def selecting_slot_copy(meta, src_idx, dst_idx, *, arena):
    """An engine-style launcher: selects its tensors' GPU around the launch (index None on a CPU tensor)."""
    from mambafuzz.kernels import slots

    with torch.cuda.device(arena.device.index):
        slots.slot_copy(meta, src_idx, dst_idx, arena=arena)


def test_a_launcher_selecting_its_tensors_cuda_device_runs_on_the_cpu():
    x, out = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    init = torch.cuda.device.__init__
    with adapters():
        for device in (x.device.index, x.device, "cpu"):
            with torch.cuda.device(device):
                tuned_scale[lambda meta: (triton.cdiv(8, meta["BLOCK"]),)](x, out, 8)
            assert out.tolist() == (2 * x).tolist()
    assert torch.cuda.device.__init__ is init   # outside, torch as it was
    if not torch.cuda.is_available():
        with pytest.raises((TypeError, RuntimeError, ValueError)):
            with torch.cuda.device(x.device.index):
                pass
    from mambafuzz import api

    report = api.check(selecting_slot_copy, "slot_copy", device="cpu", max_examples=3, seed=1,
                       crashes_dir=None, database=None)
    assert report.status == "clean", report

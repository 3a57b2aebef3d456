"""The update oracles take torch tensors as well as numpy arrays (``oracle/_xp.py``): on the same inputs
both kinds give the same pools, outputs and bounds, to float64 rounding.  The contracts hand the oracle
tensors on the case's device; the CPU tier checks that path here, the GPU tier on cuda."""
import numpy as np
import pytest
import torch

from mambafuzz.oracle.delta_update import expect_delta_update
from mambafuzz.oracle.ssm_update import expect_ssm_update


def _same(a, b, path=""):
    """Every field of two results equal to float64 rounding (float32 bounds to float32 rounding)."""
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or isinstance(x, list):
            assert x == y, path + name
            continue
        assert isinstance(y, torch.Tensor) or isinstance(x, np.ndarray) and isinstance(y, np.ndarray), name
        y = y.cpu().numpy() if isinstance(y, torch.Tensor) else y
        assert x.shape == y.shape and x.dtype == y.dtype, name
        rtol = 1e-5 if x.dtype == np.float32 else 1e-12
        assert np.allclose(x, y, rtol=rtol, atol=1e-300), (name, np.abs(x - y).max())


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _on(device):
    return lambda a: None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device)


SSM = [  # rows, tokens, heads, groups, spec, extras (z, D, dt_bias, softplus)
    (3, 1, 2, 1, False, True), (4, 3, 4, 2, True, True), (2, 2, 2, 2, True, False),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,tokens,heads,groups,spec,extras", SSM)
def test_ssm_update_tensors_and_arrays_agree(rows, tokens, heads, groups, spec, extras, device):
    _t = _on(device)
    rng = np.random.default_rng(rows * 10 + tokens)
    dim, dstate, cols = 3, 4, tokens
    slots = 1 + 2 * rows * cols
    pool = rng.uniform(-2, 2, (slots, heads, dim, dstate))
    shape = (rows, tokens, heads, dim)
    x, z = rng.standard_normal(shape), rng.standard_normal(shape)
    dt = np.abs(rng.standard_normal(shape)) * 0.5
    A = -np.abs(rng.standard_normal((heads, dim, dstate)))
    B, C = (rng.standard_normal((rows, tokens, groups, dstate)) for _ in range(2))
    D, bias = rng.standard_normal((heads, dim)), np.abs(rng.standard_normal((heads, dim)))
    src = [[1 + b * cols + c for c in range(cols)] for b in range(rows)]
    src[0][0] = -1 if not spec else src[0][0]                       # a pad row in the non-spec batch
    dst = [[1 + rows * cols + b * cols + c for c in range(cols)] for b in range(rows)]
    if spec:
        dst[1][0] = -1                                             # a pad destination: that token stores nothing
    nacc = [1 + b % cols for b in range(rows)] if spec else None
    lens = [tokens] * rows
    kw = dict(D=D if extras else None, z=z if extras else None, dt_bias=bias if extras else None,
              softplus=extras, dst=dst, nacc=nacc, dtype="bfloat16", io_dtype="float16")
    want = expect_ssm_update(pool, x, dt, A, B, C, lens, src, **kw)
    kw.update({k: _t(v) for k, v in kw.items() if isinstance(v, np.ndarray)})
    got = expect_ssm_update(*map(_t, (pool, x, dt, A, B, C)), lens, src, **kw)
    _same(want, got)
    assert got.pool.device.type == device and want.stored.sum() > 0 and want.out_care.any()


DELTA = [  # rows, tokens, spec, kda, beta per V, l2norm, buffer
    (3, 1, False, False, False, False, False), (4, 3, True, True, True, True, True),
    (2, 2, True, False, False, True, True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,tokens,spec,kda,beta_v,l2norm,buffer", DELTA)
def test_delta_update_tensors_and_arrays_agree(rows, tokens, spec, kda, beta_v, l2norm, buffer, device):
    _t = _on(device)
    rng = np.random.default_rng(rows * 10 + tokens)
    heads, hv, kd, vd = 2, 4, 4, 3
    cols = tokens if spec else 1
    slots = 1 + rows * cols
    total = rows * tokens
    pool = rng.standard_normal((slots, hv, vd, kd))
    q, k = rng.standard_normal((total, heads, kd)), rng.standard_normal((total, heads, kd)) / 2
    v = rng.standard_normal((total, hv, vd))
    g = -rng.uniform(0.02, 1.0, (total, hv, kd) if kda else (total, hv))
    beta = rng.uniform(0.05, 1.0, (total, hv, vd) if beta_v else (total, hv))
    idx = [[1 + b * cols + c for c in range(cols)] for b in range(rows)]
    idx[-1][0] = -1 if not spec else idx[-1][0]
    kw = dict(scale=kd ** -0.5, nacc=[1 + b % cols for b in range(rows)] if spec else None, l2norm=l2norm,
              state_dtype="float16", out_dtype="bfloat16")
    steps = max(tokens - 1, 1)
    buf = rng.standard_normal((rows, steps, hv, vd, kd)) if buffer else None
    inter = dict(buffer=buf, inter_idx=list(range(rows))[::-1], cache_steps=steps) if buffer else {}
    cu = [tokens * n for n in range(rows + 1)]
    want = expect_delta_update(pool, q, k, v, g, beta, cu, idx, **kw, **inter)
    if buffer:
        inter["buffer"] = _t(buf)
    got = expect_delta_update(*map(_t, (pool, q, k, v, g, beta)), cu, idx, **kw, **inter)
    _same(want, got)
    assert got.pool.device.type == device and want.stored and want.care.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_pools_values_are_distinct_and_the_same_on_every_device(dtype, device):
    """``slot_values``: a tile plus an offset per slot; every pair of slots (and of heads) differs almost
    everywhere, and the GPU makes the host's bits (a crash file replays the same pool on either)."""
    from mambafuzz.contracts.updates import slot_values

    def make(dev):
        rng = np.random.default_rng(3)
        return slot_values(6, (2, 3, 4), lambda n: rng.standard_normal(n, dtype=np.float32), dtype, dev).cpu()

    pool = make(device)
    bits = torch.int16 if dtype != "float32" else torch.int32
    assert torch.equal(pool.view(bits), make("cpu").view(bits))
    flat = pool.double().reshape(6, -1).numpy()
    same = flat[:, None, :] == flat[None, :, :]
    assert (same.mean(-1)[~np.eye(6, dtype=bool)] < 0.1).all()
    heads = pool.double().reshape(6, 2, -1).numpy()
    assert ((heads[:, 0] == heads[:, 1]).mean(-1) < 0.1).all()

"""In-place outputs (``contracts.Output``): exact, within a tolerance, and masked, judged by hand-worked values."""
import warnings

import numpy as np

from mambafuzz.contracts import Output
from mambafuzz.judge.materialize import Mismatch, differing


def test_an_exact_output_differs_at_every_changed_element():
    out = Output("n", np.array([1, 2, 3], dtype=np.int32))
    assert out.exact
    assert differing(out, np.array([1, 5, 3], dtype=np.int32)).tolist() == [1]


def test_a_tolerance_is_atol_plus_rtol_times_the_expectation():
    out = Output("y", np.array([1.0, 100.0, np.nan], dtype=np.float32), atol=0.01, rtol=0.001)
    assert not out.exact
    # |1.02 - 1| = 0.02 > 0.01 + 0.001; |100.1 - 100| = 0.1 <= 0.01 + 0.1; NaN where NaN is expected is right
    got = np.array([1.02, 100.1, np.nan], dtype=np.float32)
    assert differing(out, got).tolist() == [0]
    assert differing(out, np.array([1.0, 100.0, 0.0], dtype=np.float32)).tolist() == [2]


def test_elements_outside_care_are_never_compared():
    care = np.array([[True, False], [False, True]])
    out = Output("y", np.zeros((2, 2), dtype=np.float32), care=care)
    assert not out.exact  # a masked output cannot ride along as the GPU judge's byte-compared buffer
    assert differing(out, np.array([[0.0, 7.0], [9.0, 0.0]], dtype=np.float32)).tolist() == []
    assert differing(out, np.array([[1.0, 7.0], [9.0, 0.0]], dtype=np.float32)).tolist() == [0]


def test_garbage_floats_are_judged_without_numpy_warnings():
    """An engine's torch.empty output: signalling NaNs and infinities where rows are skipped (and in a wrong one)."""
    snan = np.array([0x7FA00000], dtype=np.uint32).view(np.float32)[0]
    want = np.array([1.0, 2.0, 3.0, 4.0])
    care = np.array([True, False, False, True])
    got = np.array([1.0, snan, np.inf, snan], dtype=np.float32)       # 1, 2 don't care; 3 is wrong
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert differing(Output("out", want, atol=np.full(4, 1e-6), care=care), got).tolist() == [3]
        assert differing(Output("out", want, care=care), got).tolist() == [3]


def test_old_crash_files_accepted_counts_load_as_outputs():
    body = {"count": 0, "total": 10, "first": [], "accepted": [{"request": 3, "expected": 1, "actual": 0}]}
    m = Mismatch.from_json(body)
    assert m.outputs == [{"argument": "num_accepted", "index": 3, "where": "request 3", "expected": 1,
                          "actual": 0}]
    assert "num_accepted[3] (request 3): expected 1, got 0" in m.summary()
    assert Mismatch.from_json(m.to_json()).outputs == m.outputs

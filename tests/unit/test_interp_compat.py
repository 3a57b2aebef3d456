"""The interpreter adapters of mambafuzz.interp (loaded loop bounds on Triton 3.5/3.6).

Triton 3.5 and 3.6 hold a loaded scalar as a shape-(1,) array, their
``tensor.__index__`` is ``int(data)`` (a TypeError for a 1-d array) and
``tl.condition`` has no ``__bool__``; 3.7+ squeeze and define it.  Inside
``interpreter_adapters()`` (and under the race recorder) every release runs
``for i in range(0, n, B)`` and ``while tl.condition(i < n)`` over a loaded
``n``; outside, the interpreter is as Triton left it.  The fake ``_patch_lang``
functions below are shaped like 3.5's (patches for good, returns None) and
3.6's (returns the scope it restores), so both paths run under any release.
"""
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":  # pragma: no cover
    pytest.skip("the adapters are for Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as interp  # noqa: E402

from mambafuzz.judge import blame  # noqa: E402
from mambafuzz.racecheck import RaceRecorder  # noqa: E402
from mambafuzz.interp import adapters as interpreter_adapters  # noqa: E402


@triton.jit
def loaded_range(n_ptr, out_ptr, STEP: tl.constexpr):
    n = tl.load(n_ptr)
    for i in range(0, n, STEP):
        tl.store(out_ptr + i // STEP, i)


@triton.jit
def loaded_tl_range(n_ptr, out_ptr):
    n = tl.load(n_ptr)
    for i in tl.range(1, n):
        tl.store(out_ptr + i, i)


@triton.jit
def loaded_while_condition(n_ptr, out_ptr):
    n = tl.load(n_ptr)
    i = 0
    while tl.condition(i < n):
        tl.store(out_ptr + i, i)
        i += 1


@triton.jit
def copy_one(src_ptr, dst_ptr):
    tl.store(dst_ptr, tl.load(src_ptr))


@triton.jit
def inline_asm_copy(src_ptr, dst_ptr):
    v = tl.load(src_ptr)
    w = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [v], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(dst_ptr, w)


def _launch(kernel, n, dtype=torch.int32, **kw):
    """`kernel` over a bound n loaded from memory; the 6 output slots, -1 where unwritten."""
    out = torch.full((6,), -1, dtype=torch.int32)
    kernel[(1,)](torch.tensor([n], dtype=dtype), out, **kw)
    return out.tolist()


def _interpreter_state():
    """What the adapters may touch: the interpreter's _patch_lang and the two class attributes."""
    return (interp._patch_lang, tl.core.tensor.__dict__.get("__index__"),
            tl.core.condition.__dict__.get("__bool__"))


def _mended(value) -> bool:
    return getattr(value, "mambafuzz_mend", False)


def _bare_range_error():
    """None where this interpreter, unadapted, runs `range` over a loaded bound; else its exception."""
    try:
        assert _launch(loaded_range, 3, STEP=1) == [0, 1, 2, -1, -1, -1]
    except Exception as exc:  # noqa: BLE001 - the interpreter's own failure is what is probed
        return exc
    return None


# --------------------------------------------------------------------------
# the real interpreter of this release
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_a_for_loop_over_a_loaded_bound_runs_inside_the_adapters(dtype):
    with interpreter_adapters():
        assert _launch(loaded_range, 5, dtype, STEP=2) == [0, 2, 4, -1, -1, -1]
        assert _launch(loaded_range, 0, dtype, STEP=1) == [-1] * 6
        assert _launch(loaded_tl_range, 4, dtype) == [-1, 1, 2, 3, -1, -1]


def test_a_while_condition_over_a_loaded_bound_ends_inside_the_adapters():
    """3.5/3.6 alone loop for ever here (tl.condition is always true) and store past `out`."""
    with interpreter_adapters():
        assert _launch(loaded_while_condition, 4) == [0, 1, 2, 3, -1, -1]
        assert _launch(loaded_while_condition, 0) == [-1] * 6


def test_leaving_the_adapters_gives_back_the_interpreter_as_it_was():
    bare = _bare_range_error()
    before = _interpreter_state()
    with interpreter_adapters():
        with interpreter_adapters():  # nested: the inner exit leaves them in place
            assert _launch(loaded_range, 3, STEP=1) == [0, 1, 2, -1, -1, -1]
        assert interp._patch_lang is not before[0]
        assert _launch(loaded_while_condition, 2) == [0, 1, -1, -1, -1, -1]
    after = _interpreter_state()
    assert after[0] is before[0]
    assert not any(_mended(v) for v in after[1:]), after
    assert after[2] is before[2]        # condition.__bool__: none, or the interpreter's own
    # the bare interpreter fails (3.5, 3.6) or runs (3.7+) as it did before
    again = _bare_range_error()
    assert (type(again), str(again)) == (type(bare), str(bare))
    if bare is not None:
        assert "0-dimensional arrays" in str(bare)


def test_a_launch_restores_what_the_interpreter_restores():
    """Where the interpreter restores its patch after a launch (3.6+), the mends go with it."""
    copy_one[(1,)](torch.tensor([1], dtype=torch.int32), torch.zeros(6, dtype=torch.int32))
    restored = "__index__" not in tl.core.tensor.__dict__   # 3.6+; 3.5 keeps its patch
    with interpreter_adapters():
        assert _launch(loaded_range, 2, STEP=1) == [0, 1, -1, -1, -1, -1]
        if restored:
            assert "__index__" not in tl.core.tensor.__dict__
            assert "__bool__" not in tl.core.condition.__dict__


def test_the_race_recorder_runs_a_loaded_bound_and_removes_the_adapters():
    before = _interpreter_state()[0]
    n = torch.tensor([3], dtype=torch.int32)
    out = torch.full((6,), -1, dtype=torch.int32)
    with RaceRecorder({"n": (n.data_ptr(), 4), "out": (out.data_ptr(), 24)}) as rec:
        loaded_range[(1,)](n, out, STEP=1)
    assert out.tolist() == [0, 1, 2, -1, -1, -1]
    assert rec.hazards == [] and rec.stats["events"] == 4          # 1 load, 3 stores
    assert _interpreter_state()[0] is before
    # leaving the recorder by an exception removes them too
    with pytest.raises(ZeroDivisionError):
        with RaceRecorder():
            loaded_range[(1,)](n, out, STEP=1)
            1 / 0
    assert _interpreter_state()[0] is before


# --------------------------------------------------------------------------
# what still cannot run is inconclusive, naming the construct
# --------------------------------------------------------------------------
def _classified(kernel, *args, **kw):
    with interpreter_adapters():
        try:
            kernel[(1,)](*args, **kw)
        except Exception as exc:  # noqa: BLE001 - classified below
            return blame.classify(exc)
    return None


def test_inline_assembly_is_a_known_limit_on_every_release():
    src, dst = torch.tensor([7], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    who = _classified(inline_asm_copy, src, dst)
    assert who is not None and who.who == blame.INTERPRETER, who
    assert who.message.startswith(f"Triton {triton.__version__}'s interpreter cannot run inline assembly "
                                  f"(`tl.inline_asm_elementwise`) ("), who.message
    assert "test_interp_compat.py:" in who.message and "tl.inline_asm_elementwise(" in who.where
    assert who.message.endswith("no release's interpreter can (a --device cuda run checks it): "
                                "inconclusive, not a finding"), who.message
    assert "\n" not in who.message


def test_a_float_bound_the_adapter_leaves_alone_is_still_the_known_range_limit():
    """The adapter mends integer scalars only; 3.7+ run a float bound, 3.5/3.6 stay inconclusive."""
    out = torch.full((6,), -1, dtype=torch.int32)
    who = _classified(loaded_range, torch.tensor([2.5], dtype=torch.float32), out, STEP=1)
    if _bare_range_error() is None:     # 3.7+: int() of the squeezed 2.5
        assert who is None and out.tolist() == [0, 1, -1, -1, -1, -1]
        return
    assert who is not None and who.who == blame.INTERPRETER, who
    assert "cannot run a `for` loop over a bound loaded from memory" in who.message, who.message
    assert "Triton 3.7 and later can" in who.message and "for i in range(" in who.where


# --------------------------------------------------------------------------
# both interpreter shapes, faked (the same tests under every installed release)
# --------------------------------------------------------------------------
def _broken_index(self):
    return int(self.handle.data)     # 3.5/3.6's patch: a TypeError for a shape-(1,) array


class _Scope:
    """Shaped like 3.6's _LangPatchScope."""

    def __init__(self):
        self.changes = []

    def set_attr(self, obj, name, value):
        self.changes.append((obj, name, obj.__dict__.get(name, _Scope)))
        setattr(obj, name, value)

    def restore(self):
        while self.changes:
            obj, name, old = self.changes.pop()
            if old is _Scope:
                delattr(obj, name)
            else:
                setattr(obj, name, old)


def _patch_lang_35(fn):
    tl.core.tensor.__index__ = _broken_index


def _patch_lang_36(fn):
    scope = _Scope()
    scope.set_attr(tl.core.tensor, "__index__", _broken_index)
    return scope


@pytest.fixture
def clean_classes():
    """Put back the two class attributes the fakes and the adapters set."""
    saved = {(cls, name): cls.__dict__.get(name, clean_classes)
             for cls, name in ((tl.core.tensor, "__index__"), (tl.core.condition, "__bool__"))}
    yield
    for (cls, name), value in saved.items():
        if value is clean_classes:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, value)


def _scalar(value, dtype=np.int32):
    return types.SimpleNamespace(handle=types.SimpleNamespace(data=np.array([value], dtype=dtype)))


def test_fake_35_patch_is_mended_and_unmended(monkeypatch, clean_classes):
    monkeypatch.setattr(interp, "_patch_lang", _patch_lang_35)
    tl.core.condition.__dict__.get("__bool__") and delattr(tl.core.condition, "__bool__")
    with interpreter_adapters():
        assert interp._patch_lang(None) is None
        index = tl.core.tensor.__index__
        assert _mended(index) and index(_scalar(7)) == 7 and index(_scalar(1, np.uint64)) == 1
        with pytest.raises(TypeError, match="0-dimensional"):     # not a scalar: the interpreter's own
            index(types.SimpleNamespace(handle=types.SimpleNamespace(data=np.arange(2))))
        assert bool(tl.core.condition(False)) is False and bool(tl.core.condition(True)) is True
        interp._patch_lang(None)                                    # a second launch re-patches: mended
        assert _mended(tl.core.tensor.__index__)
    assert interp._patch_lang is _patch_lang_35
    assert tl.core.tensor.__dict__["__index__"] is _broken_index   # what 3.5's own patch left
    assert "__bool__" not in tl.core.condition.__dict__


def test_fake_36_patch_puts_the_mends_in_its_scope(monkeypatch, clean_classes):
    monkeypatch.setattr(interp, "_patch_lang", _patch_lang_36)
    tl.core.condition.__dict__.get("__bool__") and delattr(tl.core.condition, "__bool__")
    tl.core.tensor.__dict__.get("__index__") and delattr(tl.core.tensor, "__index__")
    with interpreter_adapters():
        scope = interp._patch_lang(None)
        assert [name for _, name, _ in scope.changes] == ["__index__", "__index__", "__bool__"]
        assert tl.core.tensor.__index__(_scalar(5)) == 5 and not bool(tl.core.condition(0))
        scope.restore()                                             # the launch's end
        assert "__index__" not in tl.core.tensor.__dict__ and "__bool__" not in tl.core.condition.__dict__
    assert interp._patch_lang is _patch_lang_36


def test_a_working_interpreter_is_left_alone(monkeypatch, clean_classes):
    """3.7+'s own patch passes the probes: nothing is added to its scope."""
    def patch_lang_39(fn):
        scope = _Scope()
        scope.set_attr(tl.core.tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
        scope.set_attr(tl.core.condition, "__bool__", lambda self: bool(self.condition))
        return scope

    monkeypatch.setattr(interp, "_patch_lang", patch_lang_39)
    with interpreter_adapters():
        scope = interp._patch_lang(None)
        assert len(scope.changes) == 2 and not _mended(tl.core.tensor.__index__)
        scope.restore()

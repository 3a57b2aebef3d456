"""The run's one deadline: every share of ``--time`` is a method of ``control.clock.Deadline``."""
import time

from mambafuzz.control.clock import WITNESS_MIN_SECONDS, WITNESS_SHRINK_PART, Deadline


def test_until_and_ends_by():
    assert Deadline.until(None).end is None and not Deadline.until(None).over()
    assert Deadline.until(time.monotonic() - 1).over() and not Deadline.until(time.monotonic() + 60).over()
    assert Deadline.until(10.0).ends_by(10.0) and not Deadline.until(10.0).ends_by(9.0)
    assert not Deadline().ends_by(1e18)  # no limit never ends


def test_the_shrink_share_is_its_seconds_from_the_first_failure_within_the_run():
    assert Deadline().shrink(100.0, 60.0).end == 160.0              # no --time: --shrink-time alone
    assert Deadline.until(130.0).shrink(100.0, 60.0).end == 130.0   # the run's end cuts it
    assert Deadline.until(500.0).shrink(100.0, 60.0).end == 160.0


def test_the_witness_share():
    assert Deadline().witness(60.0) == (60.0, 60.0 * WITNESS_SHRINK_PART)
    timeout, shrink = Deadline(20.0).started().witness(60.0)
    assert 19.0 < timeout <= 20.0 and shrink == timeout * WITNESS_SHRINK_PART
    assert Deadline(WITNESS_MIN_SECONDS - 1).started().witness(60.0) is None  # too little left to start a child
    assert Deadline().witness(WITNESS_MIN_SECONDS) is None


def test_left():
    assert Deadline().left() is None
    assert Deadline.until(time.monotonic() - 5).left() == 0.0
    assert 9.0 < Deadline(10.0).started().left() <= 10.0

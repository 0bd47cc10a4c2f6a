"""stalls.within: a write that does not return is given up after its deadline, or its grace
after a stop signal (a healthy write under way when the signal comes finishes)."""

import threading
import time

import pytest

from transformer_jax.errors import WriteStalled
from transformer_jax.io import stalls


def stuck(release):
    """A write that returns 1 once ``release`` is set."""
    return lambda: release.wait() and 1


def test_a_write_that_returns_in_time_gives_its_result_or_its_error():
    assert stalls.within(5, "a write", lambda: 7) == 7
    with pytest.raises(ZeroDivisionError):
        stalls.within(5, "a write", lambda: 1 / 0)


def test_a_write_that_does_not_return_is_given_up_at_its_deadline():
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(WriteStalled, match=r"^the write of x did not return within "
                                           r"train.write_timeout_s=0.3 s "):
        stalls.within(0.3, "the write of x", stuck(release))
    assert 0.3 <= time.monotonic() - start < 0.3 + 10 * stalls.POLL_S
    release.set()


def test_a_write_under_way_when_a_signal_comes_finishes_within_the_grace():
    """The run's last checkpoint, or the one before it, in flight when SIGTERM comes: a
    healthy write returns its result and the run stops with it (a signal that came while a
    save waited for the one before it once ended that wait at once, and the run exited 2)."""
    signal = {"name": None}

    def write():
        signal["name"] = "SIGTERM"  # the signal comes once the write has begun
        time.sleep(0.4)
        return 3

    assert stalls.within(5, "the write of x", write, lambda: signal["name"], grace=2) == 3
    # A signal received before the wait began: the same.
    assert stalls.within(5, "the write of x", lambda: time.sleep(0.4) or 4,
                         lambda: "SIGTERM", grace=2) == 4


@pytest.mark.parametrize("before", [False, True])
def test_a_stalled_write_is_given_up_its_grace_after_the_signal(before):
    """A signal during the wait is counted from when it came, one before it from the wait's
    start; either way the write is given up ``grace`` later, long before its deadline."""
    signal = {"name": "SIGINT" if before else None}
    release = threading.Event()

    def write():
        if not before:
            time.sleep(0.3)
            signal["name"] = "SIGTERM"
        release.wait(30)

    start = time.monotonic()
    with pytest.raises(WriteStalled) as stalled:
        stalls.within(20, "the write of x", write, lambda: signal["name"], grace=0.5)
    took = time.monotonic() - start
    release.set()
    came = 0 if before else 0.3
    assert came + 0.5 <= took < came + 0.5 + 10 * stalls.POLL_S
    assert str(stalled.value) == (f"{'SIGINT' if before else 'SIGTERM'} received while the "
                                  "write of x had not returned for 0 s; waited 0.5 s more for "
                                  "it (a stalled disk or file server?): stopped without a new "
                                  "checkpoint")


def test_the_deadline_stands_when_it_comes_before_the_grace_ends():
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(WriteStalled, match="did not return within train.write_timeout_s=0.4 s"):
        stalls.within(0.4, "the write of x", stuck(release), lambda: "SIGTERM", grace=5)
    assert 0.4 <= time.monotonic() - start < 0.4 + 10 * stalls.POLL_S
    release.set()

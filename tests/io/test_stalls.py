"""stalls.within: a write that does not return is given up after its deadline, or at a stop
signal that came while it was waited for; a signal that came before the write began does not
end the wait (its checkpoint is the one being written)."""

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


@pytest.mark.parametrize("earlier, ends_at_once", [
    (stalls.NOW, False),  # the signal was there when the wait began: waited to the deadline
    ("SIGTERM", False),   # it came before the write began
    (None, True),         # none before the write began: this one came during it
])
def test_a_signal_ends_the_wait_unless_it_came_before(earlier, ends_at_once):
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(WriteStalled) as stalled:
        stalls.within(0.5, "the write of x", stuck(release), lambda: "SIGTERM", earlier)
    took = time.monotonic() - start
    release.set()
    if ends_at_once:
        assert str(stalled.value).startswith("SIGTERM received while the write of x had not "
                                             "returned for 0 s ")
        assert took < 0.5
    else:
        assert "did not return within train.write_timeout_s=0.5 s" in str(stalled.value)
        assert took >= 0.5


def test_a_signal_gives_the_write_it_asks_for_its_grace_and_no_more():
    """With ``grace``: a write that returns within it after the signal gives its result; one
    that does not is given up ``grace`` after the signal, before its own deadline."""
    signal = {"name": None}
    release = threading.Event()

    def write():
        signal["name"] = "SIGTERM"  # the signal comes once the write has begun
        release.wait(0.4)
        return 3

    assert stalls.within(5, "the write of x", write, lambda: signal["name"], None, grace=2) == 3
    signal["name"] = None
    start = time.monotonic()
    with pytest.raises(WriteStalled) as stalled:
        stalls.within(5, "the write of x", lambda: signal.update(name="SIGTERM") or
                      release.wait(30), lambda: signal["name"], None, grace=0.5)
    took = time.monotonic() - start
    release.set()
    assert 0.5 <= took < 0.5 + 10 * stalls.POLL_S
    assert str(stalled.value) == ("SIGTERM received while the write of x had not returned for "
                                  "0 s; waited 0.5 s more for it (a stalled disk or file "
                                  "server?): stopped without a new checkpoint")

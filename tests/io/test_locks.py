"""Locks on a local disk and in a bucket (the local GCS server): one holder at a time, a
waiter that says once who it waits for and gives up in time, a bucket lock kept alive by its
heartbeat and taken over when its holder is gone."""

import json
import logging
import os
import socket
import time

import pytest

from transformer_jax.io import locks, storage

ME = f"{socket.gethostname()} pid {os.getpid()}"


@pytest.fixture(params=["local", "bucket"])
def target(request, tmp_path):
    if request.param == "local":
        return tmp_path / "cache.bin"
    return storage.path(f"{request.getfixturevalue('bucket')}/c/cache.bin")


def test_one_holder_at_a_time_and_the_waiter_names_it(target):
    first, second = locks.Lock(target), locks.Lock(target)
    assert first.acquire(timeout_s=5)
    assert locks.lock_path(target).name == ".cache.bin.lock"
    told = []
    start = time.monotonic()
    assert not second.acquire(timeout_s=0.6, waiting=told.append, poll_s=0.1)
    assert 0.6 <= time.monotonic() - start < 5
    assert told == [ME]  # once, naming the holder
    first.release()
    assert second.acquire(timeout_s=5, waiting=told.append)
    assert told == [ME]  # no wait, no second line
    second.release()
    with locks.Lock(target):  # free again
        pass


def test_a_bucket_lock_kept_alive_is_not_taken_and_one_left_behind_is(bucket, caplog):
    target = storage.path(f"{bucket}/c/cache.bin")
    alive = locks.Lock(target, heartbeat_s=0.2)
    assert alive.acquire(timeout_s=5)
    waiter = locks.Lock(target, stale_s=1.0)
    # 2.5 s of waiting: the holder's heartbeat changes the object every 0.2 s, so it never
    # stays unchanged for the waiter's 1 s.
    assert not waiter.acquire(timeout_s=2.5, poll_s=0.1)
    alive.release()
    assert not locks.lock_path(target).exists()  # released: removed
    # A holder killed mid-way leaves its object, with no heartbeat any more.
    locks.lock_path(target).write_bytes(json.dumps(
        {"holder": "gone-host pid 1", "token": "x", "heartbeat": 0}).encode())
    told = []
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert waiter.acquire(timeout_s=10, waiting=told.append, poll_s=0.1)
    assert 1.0 <= time.monotonic() - start < 10
    assert told == ["gone-host pid 1"]
    assert "taking over a lock unchanged for 1 s (its holder, gone-host pid 1, is gone)" \
        in caplog.text
    assert json.loads(locks.lock_path(target).read_bytes())["holder"] == ME
    waiter.release()

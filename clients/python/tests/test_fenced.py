"""Guarded (fenced) writes (section 16)."""

from __future__ import annotations

import time

import pytest

import wirelock
from wirelock import StaleFence


def test_stale_fence_refused(make_client, r):
    a, b = make_client(), make_client()
    old = a.mutex.acquire("res", ttl=0.1)
    time.sleep(0.2)  # the old holder pauses past its TTL
    new = b.mutex.acquire("res", ttl=5.0)
    assert new.fenced_write("{res}:fence", "observe") == 0
    assert new.fenced_write("{res}:fence", "set", ["{res}:data"], ["new"]) == "OK"
    with pytest.raises(StaleFence) as stale:
        old.fenced_write("{res}:fence", "set", ["{res}:data"], ["old"])
    assert stale.value.current == new.fence and stale.value.presented == old.fence
    assert r.get("{res}:data") == "new" and r.get("{res}:fence") == str(new.fence)
    assert new.fenced_write("{res}:fence", "get", ["{res}:data"]) == "new"
    assert new.fenced_write("{res}:fence", "incrby", ["{res}:n"], [5]) == 5
    assert new.fenced_write("{res}:fence", "hset", ["{res}:h"], ["f", "v"]) == 1
    assert new.fenced_write("{res}:fence", "rpush", ["{res}:l"], ["a", "b"]) == 2
    assert new.fenced_write("{res}:fence", "get-set", ["{res}:data"], ["newer"]) == "new"
    assert new.fenced_write("{res}:fence", "del", ["{res}:l", "{res}:h"]) == 2
    new.release()


def test_client_refuses_bad_writes(client, r):
    with pytest.raises(wirelock.InvalidArgument):
        client.fenced_write("g", 5, "set", ["g"], ["x"])  # a write to the guard itself
    with pytest.raises(wirelock.InvalidArgument):
        client.fenced_write("g", -1, "set", ["k"], ["x"])
    with pytest.raises(wirelock.InvalidArgument):
        client.fenced_write("g", 2**64, "set", ["k"], ["x"])
    with pytest.raises(wirelock.InvalidArgument):
        client.fenced_write("g", 5, "lpush", ["k"], ["x"])
    with pytest.raises(wirelock.InvalidArgument):
        client.fenced_write("g", 5, "hset", ["k"], ["f"])
    with pytest.raises(wirelock.InvalidArgument):
        client.fenced_write("g", 5, "incrby", ["k"], ["1e3"])
    assert r.dbsize() == 0
    r.set("g", "abc")
    with pytest.raises(wirelock.WrongType):
        client.fenced_write("g", 5, "set", ["k"], ["x"])


def test_semaphore_and_reader_have_no_exclusive_fence(client):
    rd = client.rwlock.read("x", ttl=1.0)
    with pytest.raises(wirelock.InvalidArgument):
        rd.fenced_write("g", "set", ["k"], ["v"])
    rd.release()

"""Other libraries' key layouts (WIRE.md 18), the namespace rule (2.1.1) and fences for a lock another library holds
(issue 55 §2), with the real python-redis-lock and redis-py's ``Lock``."""

from __future__ import annotations

import json
import time

import pytest
import redis

import wirelock
from wirelock import layouts as L
from wirelock.keys import validate_prefix
from wirelock.scripts import default_scripts_dir

DOC = json.loads((default_scripts_dir().parent / "vectors" / "names.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("entry", DOC["refused"], ids=lambda e: f"{e['layout']}:{e['prefix']}:{e['name']}")
def test_names_json_refused(entry):
    with pytest.raises(wirelock.InvalidArgument) as refused:
        L.peer_keys(entry["layout"], entry["name"], entry["prefix"])
    message = str(refused.value)
    assert f"({entry['clash']} clash)" in message, message
    assert repr(entry["name"]) in message  # the error names the name and its clash


@pytest.mark.parametrize("entry", DOC["accepted"], ids=lambda e: f"{e['layout']}:{e['prefix']}:{e['name']}")
def test_names_json_accepted(entry):
    keys = L.peer_keys(entry["layout"], entry["name"], entry["prefix"])
    assert L.lock_key_clash(entry["prefix"], keys.lock) is None


def test_refused_before_any_io(client, r):
    for layout, name in (("plain", "wlp:wire"), ("plain", "{orders}:fence"), ("python-redis-lock", "{x}:fence")):
        with pytest.raises(wirelock.InvalidArgument):
            client.peer_fence(layout, name, "token")
    for bad in (("nope", "x"), ("plain", ""), ("plain", "a\nb"), ("redisson", "orders")):
        with pytest.raises(wirelock.InvalidArgument):
            client.peer_fence(bad[0], bad[1], "token")
    with pytest.raises(wirelock.InvalidArgument):
        client.peer_fence("plain", "x", "")
    assert r.dbsize() == 0


def test_key_derivation():
    cases = [
        # layout, name, lock key, fencing counter
        ("python-redis-lock", "orders/42", "lock:orders/42", "{lock:orders/42}:fence"),
        ("plain", "orders", "orders", "{orders}:fence"),
        ("redis-py", "orders", "orders", "{orders}:fence"),
        ("pottery", "printer", "redlock:printer", "{redlock:printer}:fence"),
        ("spring:registry", "a", "registry:a", "{registry:a}:fence"),
        ("plain", "order{42}", "order{42}", "order{42}:fence"),  # a hash tag: the lock key is the base
        ("plain", "a}b", "a}b", "a}b:fence"),  # a '}' without a tag: no braces added either
        ("plain", "{}x", "{}x", "{}x:fence"),  # an empty tag is no tag, but the key has a '}'
        ("plain", "x{", "x{", "{x{}:fence"),
        ("python-redis-lock", "a{b}", "lock:a{b}", "lock:a{b}:fence"),
        ("redisson", "orders", "orders", "redisson_lock_token:{orders}"),
        ("redisson", "a{b}", "a{b}", "redisson_lock_token:a{b}"),
    ]
    for layout, name, lock, fence in cases:
        keys = L.peer_keys(layout, name, "wlp:")
        assert (keys.lock, keys.fence) == (lock, fence), (layout, name)
        if keys.base is not None:
            assert keys.awaited == f"{keys.base}:awaited" and keys.waiting == f"{keys.base}:waiting"
            # the counter shares the lock key's Cluster slot whenever the lock key has one to share
            if "}" not in lock or L._has_hash_tag(lock):
                assert wirelock.key_slot(keys.fence) == wirelock.key_slot(lock)
    assert L.peer_lock_key("python-redis-lock", "report", "wlp:") == "lock:report"


def test_namespace_rule_details():
    assert L.lock_key_clash("wlp:", "wlp:wire").kind == "version"
    assert L.lock_key_clash("wlp:", "wlp:sem:{a}").kind == "native"
    assert L.lock_key_clash("wlp:", "wlp:rw:{a}:readers").kind == "native"
    assert L.lock_key_clash("wlp:", "wlp:sem:x") is None  # not a native shape
    assert L.lock_key_clash("wlp:", "a}:tick:7").kind == "beside"
    assert L.lock_key_clash("wlp:", "a}:tick:x") is None
    assert L.lock_key_clash("wlp:", "{a}:given-back").kind == "beside"
    assert L.lock_key_clash("wlp:", "{a}:other") is None
    assert L.lock_key_clash("wlp:", "a:fence") is None  # a base without '}' is never one of ours
    assert L.lock_key_clash("wlp:", "lock-signal:x").kind == "peer"
    assert L.lock_key_clash("app:", "wlp:wire") is None  # another prefix's version key is not this client's
    # A prefix inside another library's keys that our releases write is refused (WIRE.md 2.1).
    for bad in ("lock-signal:", "lock-signal:app:", "redisson_lock_token:"):
        with pytest.raises(wirelock.InvalidArgument):
            validate_prefix(bad)


def test_python_redis_lock_holders_fenced(make_client, redis_url, r):
    """A python-redis-lock holder draws a fence through wirelock and writes through the guard; after its lock expired,
    a second holder draws a higher fence and writes; the first (paused) holder's late write is refused."""
    redis_lock = pytest.importorskip("redis_lock")
    client = make_client()
    peer = redis.Redis.from_url(redis_url)  # python-redis-lock's own connection
    guard, data = "report-totals:guard", "report-totals"

    first = redis_lock.Lock(peer, "report", expire=1)
    assert first.acquire(blocking=False)
    assert r.get("lock:report") == first.id  # its token is its id
    first_fence = client.peer_fence("python-redis-lock", "report", first.id)
    assert r.get("{lock:report}:fence") == str(first_fence)
    assert client.fenced_write(guard, first_fence, "observe") == 0
    assert client.fenced_write(guard, first_fence, "hset", [data], ["by", "first"]) == 1

    time.sleep(1.1)  # the first holder pauses; its lock (EX 1) expires
    with pytest.raises(wirelock.Lost):
        client.peer_fence("python-redis-lock", "report", first.id)  # an expired holder cannot draw a fence
    second = redis_lock.Lock(peer, "report", expire=5)
    assert second.acquire(blocking=False)
    second_fence = client.peer_fence("python-redis-lock", "report", second.id)
    assert second_fence > first_fence
    assert client.fenced_write(guard, second_fence, "observe") == 0
    assert client.fenced_write(guard, second_fence, "hset", [data], ["by", "second"]) == 0

    with pytest.raises(wirelock.StaleFence) as stale:  # the first holder wakes up and writes late
        client.fenced_write(guard, first_fence, "hset", [data], ["by", "first (late)"])
    assert (stale.value.presented, stale.value.current) == (first_fence, second_fence)
    assert r.hgetall(data) == {"by": "second"}
    with pytest.raises(wirelock.Lost):
        client.peer_fence("python-redis-lock", "report", first.id)  # the second holder's key: not first's token
    second.release()
    assert r.exists("lock:report") == 0 and r.get("{lock:report}:fence") == str(second_fence)  # counter kept
    peer.close()


def test_python_redis_lock_with_a_fixed_id_defeats_the_check(make_client, redis_url):
    """Two holders created with one fixed ``id=`` share a token: the fence check cannot tell them apart."""
    redis_lock = pytest.importorskip("redis_lock")
    client = make_client()
    peer = redis.Redis.from_url(redis_url)
    first = redis_lock.Lock(peer, "shared", id="worker", expire=5)
    assert first.acquire(blocking=False)
    peer.delete("lock:shared")  # its lock expires
    second = redis_lock.Lock(peer, "shared", id="worker", expire=5)
    assert second.acquire(blocking=False)
    # The stale holder still draws a fence (a newer one, even): nothing guards against it.
    assert client.peer_fence("python-redis-lock", "shared", first.id) > 0
    second.release()
    peer.close()


def test_redis_py_lock_fenced(make_client, redis_url, r):
    client = make_client()
    peer = redis.Redis.from_url(redis_url)
    first = peer.lock("invoice", timeout=5)
    assert first.acquire(blocking=False)
    token = first.local.token  # bytes, in the thread that acquired
    assert isinstance(token, bytes) and r.get("invoice") == token.decode()
    first_fence = client.peer_fence("redis-py", "invoice", token)
    assert r.get("{invoice}:fence") == str(first_fence)
    client.fenced_write("invoice:guard", first_fence, "set", ["invoice:data"], ["first"])
    r.delete("invoice")  # its lock expires
    second = peer.lock("invoice", timeout=5)
    assert second.acquire(blocking=False)
    second_fence = client.peer_fence("plain", "invoice", second.local.token)
    client.fenced_write("invoice:guard", second_fence, "set", ["invoice:data"], ["second"])
    with pytest.raises(wirelock.StaleFence):
        client.fenced_write("invoice:guard", first_fence, "set", ["invoice:data"], ["first (late)"])
    with pytest.raises(wirelock.Lost):
        client.peer_fence("redis-py", "invoice", token)
    assert r.get("invoice:data") == "second"
    second.release()
    peer.close()

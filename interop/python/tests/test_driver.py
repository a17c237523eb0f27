"""Self-test of peer_driver.py: each Python peer, driven through the protocol, against
a throwaway redis-server. Run: interop/python/.venv/bin/python -m pytest interop/python/tests
"""

import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from peerproc import PY_PEERS, Peer, RedisServer, driver_argv  # noqa: E402

PINNED = {"redis-py": "8.2.0", "python-redis-lock": "4.0.1", "pottery": "3.0.1"}
# python-redis-lock works in whole seconds and refuses an acquire timeout > expire,
# so the tests use TTLs/waits that are valid for every peer.
TTL, WAIT = 10000, 2000


@pytest.fixture(scope="module")
def srv():
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture(params=PY_PEERS)
def pair(request, srv):
    srv.cmd("FLUSHALL")
    a, b = Peer(request.param, srv.url), Peer(request.param, srv.url)
    yield request.param, a, b
    assert a.close() == 0
    assert b.close() == 0


def key_of(peer, name):
    return peer.call({"op": "describe", "name": name})["keys"][0]


def test_ready_reports_pinned_version(pair):
    name, a, _ = pair
    assert a.ready == {**a.ready, "ready": True, "peer": name, "version": PINNED[name]}


def test_describe_keys(pair):
    name, a, _ = pair
    d = a.call({"op": "describe", "name": "res"})
    expected = {"redis-py": ["res"], "python-redis-lock": ["lock:res"], "pottery": ["redlock:res"]}
    assert d["ok"] and d["keys"] == expected[name]
    assert d["lists"] == (["lock-signal:res"] if name == "python-redis-lock" else [])


def test_acquire_extend_release(pair, srv):
    name, a, _ = pair
    key = key_of(a, "r1")
    r = a.call({"op": "acquire", "name": "r1", "ttl_ms": 3000, "wait_ms": 0})
    assert r["acquired"] is True and r["started_ns"] <= r["at_ns"]
    assert 0 < int(srv.cmd("PTTL", key)) <= 3000
    e = a.call({"op": "extend", "name": "r1", "ttl_ms": 8000})
    assert e["extended"] is True, e
    pttl = int(srv.cmd("PTTL", key))
    if name == "pottery":  # extend() re-applies auto_release_time (the acquire's TTL)
        assert e["ttl_ms_effective"] == 3000 and 2000 < pttl <= 3000
    else:
        assert 7000 < pttl <= 8000
    rel = a.call({"op": "release", "name": "r1"})
    assert rel == {**rel, "ok": True, "released": True, "error": None}
    assert srv.cmd("EXISTS", key) == "0"


def test_two_drivers_exclude_each_other(pair):
    _, a, b = pair
    assert a.call({"op": "acquire", "name": "x", "ttl_ms": TTL, "wait_ms": 0})["acquired"]
    assert b.call({"op": "acquire", "name": "x", "ttl_ms": TTL, "wait_ms": 0})["acquired"] is False
    t0 = time.monotonic()
    assert b.call({"op": "acquire", "name": "x", "ttl_ms": TTL, "wait_ms": 1000})["acquired"] is False
    assert time.monotonic() - t0 >= 0.8  # it really waited
    assert a.call({"op": "release", "name": "x"})["released"]
    assert b.call({"op": "acquire", "name": "x", "ttl_ms": TTL, "wait_ms": 0})["acquired"]
    assert b.call({"op": "release", "name": "x"})["released"]


def test_concurrent_cycles_are_mutually_exclusive(pair, srv):
    _, a, b = pair
    req = {"op": "cycles", "name": "cyc", "ttl_ms": TTL, "wait_ms": 5000, "counter": "ctr", "n": 25}
    a.send(req)
    b.send(req)
    ra, rb = a.read(60), b.read(60)
    assert ra["failed_acquires"] == rb["failed_acquires"] == 0
    assert ra["done"] == rb["done"] == 25
    assert int(srv.cmd("GET", "ctr")) == 50  # no lost update
    # Both drivers stamp CLOCK_MONOTONIC: [acquired, release_started] spans must not
    # overlap. (release_done may: the other side can win before our release returns.)
    spans = sorted([(e[0], e[1]) for e in ra["events"]] + [(e[0], e[1]) for e in rb["events"]])
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:]))


def test_waiter_acquires_after_release(pair):
    name, a, b = pair
    assert a.call({"op": "acquire", "name": "w", "ttl_ms": TTL, "wait_ms": 0})["acquired"]
    b.send({"op": "acquire", "name": "w", "ttl_ms": TTL, "wait_ms": WAIT})
    time.sleep(0.3)
    rel = a.call({"op": "release", "name": "w"})
    got = b.read()
    assert got["acquired"] is True
    latency_ms = (got["at_ns"] - rel["at_ns"]) / 1e6
    if name == "python-redis-lock":
        # woken by its BLPOP on lock-signal:<name>, not by polling
        assert got["wait_ms_effective"] == 2000
        assert latency_ms < 100, latency_ms
    else:
        assert latency_ms < 600, latency_ms
    assert b.call({"op": "release", "name": "w"})["released"]


def test_release_of_stolen_lock_reports_error(pair, srv):
    name, a, _ = pair
    key = key_of(a, "s")
    assert a.call({"op": "acquire", "name": "s", "ttl_ms": TTL, "wait_ms": 0})["acquired"]
    srv.cmd("SET", key, "someone-else")
    rel = a.call({"op": "release", "name": "s"})
    expected = {"redis-py": "LockNotOwnedError", "python-redis-lock": "NotAcquired",
                "pottery": "ReleaseUnlockedLock"}[name]
    assert rel["ok"] and rel["released"] is False and rel["error"].startswith(expected + ":")
    assert srv.cmd("GET", key) == "someone-else"
    assert a.call({"op": "describe", "name": "s"})["ok"]  # still alive


def test_hold_replies_twice(pair):
    _, a, b = pair
    a.send({"op": "hold", "name": "h", "ttl_ms": TTL, "wait_ms": 0, "hold_ms": 400})
    first = a.read()
    assert first["acquired"] is True
    assert b.call({"op": "acquire", "name": "h", "ttl_ms": TTL, "wait_ms": 0})["acquired"] is False
    second = a.read()
    assert second["released"] is True
    assert second["release_started_ns"] - first["at_ns"] >= 400_000_000
    assert second["release_started_ns"] <= second["release_done_ns"]


def test_bad_request_keeps_running(pair):
    _, a, _ = pair
    assert a.call({"op": "nope"}) == {"ok": False, "error": "ValueError: unknown op 'nope'"}
    r = a.call({"op": "acquire", "name": "k"})  # missing ttl_ms
    assert r["ok"] is False and r["error"].startswith("KeyError")
    assert a.call({"op": "describe", "name": "k"})["ok"]


@pytest.mark.parametrize("peer", PY_PEERS)
def test_eof_exits_zero(peer, srv):
    p = subprocess.run(driver_argv(peer, srv.url), input="", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    assert p.stdout.count("\n") == 1 and '"ready":true' in p.stdout


# -- bench ------------------------------------------------------------------------------
def bench(peer, **kw):
    req = {"op": "bench", "name": "bn", "ttl_ms": TTL, "wait_ms": 0, "hold_us": 0,
           "n": 50, "duration_ms": 20000, **kw}
    return peer.call(req, timeout=60)


def test_bench_uncontended_cycles(pair, srv):
    _, a, _ = pair
    r = bench(a, n=50)
    assert r["ok"] and r["cycles"] == 50 and r["failed"] == 0, r
    assert "failed_releases" not in r
    assert len(r["acquire_ns"]) == len(r["cycle_ns"]) == 50
    assert all(isinstance(v, int) and v > 0 for v in r["acquire_ns"] + r["cycle_ns"])
    assert all(acq <= cyc for acq, cyc in zip(r["acquire_ns"], r["cycle_ns"]))
    # elapsed runs from the first cycle's start to the last cycle's end
    assert sum(r["cycle_ns"]) <= r["elapsed_ns"] < sum(r["cycle_ns"]) + 1_000_000_000
    assert srv.cmd("EXISTS", key_of(a, "bn")) == "0"  # every cycle released
    # the driver keeps working afterwards and holds nothing
    assert a.call({"op": "release", "name": "bn"})["error"].startswith("NotHeld")


def test_bench_hold_sleeps(pair):
    _, a, _ = pair
    r = bench(a, n=3, hold_us=20000)
    assert r["cycles"] == 3, r
    assert all(c - q >= 20_000_000 for q, c in zip(r["acquire_ns"], r["cycle_ns"]))


def test_bench_duration_caps_the_loop(pair):
    _, a, _ = pair
    r = bench(a, n=10**9, duration_ms=300)
    assert r["failed"] == 0 and r["cycles"] > 10, r
    assert 300_000_000 <= r["elapsed_ns"] < 1_300_000_000


def test_bench_failed_acquire_counts_and_goes_on(pair):
    _, a, b = pair
    assert a.call({"op": "acquire", "name": "bn", "ttl_ms": TTL, "wait_ms": 0})["acquired"]
    r = bench(b, n=5, duration_ms=300)  # W = 0: one try per cycle, each one fails
    assert r["cycles"] == 0 and r["failed"] > 5, r  # n counts successful cycles only
    assert r["acquire_ns"] == r["cycle_ns"] == []
    assert r["elapsed_ns"] >= 300_000_000
    assert a.call({"op": "release", "name": "bn"})["released"]


def test_bench_two_drivers_contend(pair):
    _, a, b = pair
    req = {"op": "bench", "name": "bc", "ttl_ms": TTL, "wait_ms": 5000, "hold_us": 1000,
           "n": 10**9, "duration_ms": 500}
    a.send(req)
    b.send(req)
    ra, rb = a.read(60), b.read(60)
    assert ra["failed"] == rb["failed"] == 0, (ra["failed"], rb["failed"])
    # Polling packages may starve one side for the whole 500 ms, but its pending acquire
    # then wins as soon as the other side stops: both complete at least one cycle.
    assert ra["cycles"] >= 1 and rb["cycles"] >= 1
    assert all(c - q >= 1_000_000 for r in (ra, rb) for q, c in zip(r["acquire_ns"], r["cycle_ns"]))

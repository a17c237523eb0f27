"""The fenced mutex through the client API."""

from __future__ import annotations

import threading
import time

import pytest

import wirelock
from wirelock import Contended, Lost, ReleaseOutcome


def test_exclusion_between_two_clients(make_client, r):
    a, b = make_client(), make_client()
    with a.mutex.acquire("orders", ttl=5.0) as hold:
        assert hold.fence is not None and hold.valid
        assert r.get("wlp:{orders}") is not None
        with pytest.raises(Contended) as refused:
            b.mutex.acquire("orders", ttl=5.0)
        assert 4.0 < refused.value.retry_after <= 5.0
        with pytest.raises(Contended):
            b.mutex.acquire("orders", ttl=5.0, wait=0.2)
    assert hold.outcome is ReleaseOutcome.RELEASED
    with b.mutex.acquire("orders", ttl=5.0) as second:
        assert second.fence > hold.fence
    assert r.exists("wlp:{orders}") == 0


def test_paused_holder_past_ttl(make_client):
    a, b = make_client(), make_client()
    hold = a.mutex.acquire("paused", ttl=0.15)
    time.sleep(0.25)  # no renewal: the key expires on the server
    assert not hold.valid
    with pytest.raises(Lost):
        hold.extend()
    assert hold.lost.is_set()
    assert hold.release() is ReleaseOutcome.ALREADY_EXPIRED

    hold = a.mutex.acquire("paused", ttl=0.15)
    time.sleep(0.25)
    other = b.mutex.acquire("paused", ttl=5.0)
    assert other.fence > hold.fence
    with pytest.raises(Lost) as lost:
        hold.extend()
    assert "another holder" in lost.value.reason
    assert hold.release() is ReleaseOutcome.OWNED_BY_OTHER
    assert hold.release() is ReleaseOutcome.OWNED_BY_OTHER  # idempotent
    assert other.release() is ReleaseOutcome.RELEASED


def test_validity_is_ttl_minus_elapsed_minus_drift(client):
    before = time.monotonic_ns()
    hold = client.mutex.acquire("v", ttl=10.0)
    after = time.monotonic_ns()
    drift = 10_000 * 10_000 + 2_000_000  # ttl/100 + 2 ms, in ns
    assert before <= hold.acquired_ns <= after
    assert hold.valid_until_ns == hold.acquired_ns + 10_000_000_000 - drift
    hold.release()


def test_renewal_keeps_lock_past_ttl(make_client):
    a, b = make_client(), make_client()
    with a.mutex.acquire("renewed", ttl=0.3, renew=True) as hold:
        time.sleep(1.0)
        assert hold.valid and not hold.lost.is_set()
        with pytest.raises(Contended):
            b.mutex.acquire("renewed", ttl=1.0)
    assert hold.outcome is ReleaseOutcome.RELEASED


def test_lost_signal_when_key_deleted(client, r):
    seen = []
    hold = client.mutex.acquire("deleted", ttl=0.3, renew=True, on_lost=seen.append)
    r.delete("wlp:{deleted}")
    assert hold.lost.wait(1.0)
    assert seen == [hold]
    assert "gone" in hold.lost_reason
    with pytest.raises(Lost):
        hold.check()
    assert hold.release() is ReleaseOutcome.ALREADY_EXPIRED


def test_lost_signal_when_taken(client, r):
    hold = client.mutex.acquire("taken", ttl=0.3, renew=True)
    r.set("wlp:{taken}", "someone else", px=5000)
    assert hold.lost.wait(1.0)
    assert "another holder" in hold.lost_reason
    assert hold.release() is ReleaseOutcome.OWNED_BY_OTHER


def test_waiter_woken_by_release_message(make_client, r):
    a, b = make_client(), make_client()
    hold = a.mutex.acquire("wake", ttl=30.0)
    got = {}

    def waiter():
        h = b.mutex.acquire("wake", ttl=5.0, wait=10.0)
        got["at"] = time.monotonic()
        got["hold"] = h

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 3
    while r.zcard("wlp:{wake}:waiting") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.zrange("wlp:{wake}:waiting", 0, -1) == [b.origin]  # lined up once subscribed
    released_at = time.monotonic()
    assert hold.release() is ReleaseOutcome.RELEASED
    t.join(5)
    # Woken by the named message, well before the holder's TTL (30 s) or the safety poll (1 s).
    assert got["at"] - released_at < 0.5
    assert got["hold"].fence > hold.fence
    got["hold"].release()


def test_waiter_without_listener_polls(make_client):
    a, b = make_client(), make_client(listen=False)
    hold = a.mutex.acquire("poll", ttl=0.2)
    started = time.monotonic()
    second = b.mutex.acquire("poll", ttl=1.0, wait=3.0)  # the holder's TTL runs out
    assert time.monotonic() - started < 1.0
    assert second.fence > hold.fence
    second.release()


def test_local_waiters_in_one_process(client):
    results = []
    lock = threading.Lock()
    inside = [0]

    def worker():
        for _ in range(5):
            with client.mutex.acquire("local", ttl=2.0, wait=10.0) as hold:
                with lock:
                    inside[0] += 1
                    assert inside[0] == 1
                results.append(hold.fence)
                time.sleep(0.002)
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == 20 and len(set(results)) == 20


def test_fences_strictly_increase(make_client):
    clients = [make_client() for _ in range(3)]
    fences = []
    for i in range(30):
        with clients[i % 3].mutex.acquire("seq", ttl=1.0, wait=2.0) as hold:
            fences.append(hold.fence)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert fences[0] > 10**15  # the server's clock in µs is the floor


def test_fence_counter_idle_expiry(make_client, r):
    """WIRE.md 5.5: every fence sets the counter's idle expiry (a week by default); ``None`` keeps it for ever; an
    expired counter's next fence is still above every earlier one; an expiry out of range is refused before I/O."""
    with make_client().mutex.acquire("idle", ttl=1.0) as hold:
        first = hold.fence
    week_ms = int(wirelock.DEFAULT_FENCE_COUNTER_EXPIRY * 1000)
    assert week_ms - 60_000 <= r.pttl("wlp:{idle}:fence") <= week_ms
    with make_client(fence_counter_expiry=1.0).mutex.acquire("idle", ttl=1.0) as hold:
        second = hold.fence
        assert 0 < r.pttl("wlp:{idle}:fence") <= 1000
    deadline = time.monotonic() + 10.0
    while r.exists("wlp:{idle}:fence") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.exists("wlp:{idle}:fence") == 0, "the counter outlived its idle expiry"
    kept = make_client(fence_counter_expiry=None)
    with kept.mutex.acquire("idle", ttl=1.0) as hold:
        assert hold.fence > second > first
    assert r.pttl("wlp:{idle}:fence") == -1
    for bad in (0.009, 400 * 24 * 3600.0):
        with pytest.raises(wirelock.InvalidArgument):
            make_client(fence_counter_expiry=bad)


def test_without_fencing_and_label(client, r):
    with client.mutex.acquire("plain", ttl=1.0, fencing=False, label="worker 3") as hold:
        assert hold.fence is None
        value = r.get("wlp:{plain}")
        assert value.endswith(" worker 3") and len(value) == 32 + 9
        assert r.exists("wlp:{plain}:fence") == 0
    assert hold.outcome is ReleaseOutcome.RELEASED


def test_invalid_arguments_refused_before_io(client, r):
    for bad in ("", "a\nb", "x" * 1025, "\x85"):
        with pytest.raises(wirelock.InvalidArgument):
            client.mutex.acquire(bad, ttl=1.0)
    with pytest.raises(wirelock.InvalidArgument):
        client.mutex.acquire("ok", ttl=0.005)
    with pytest.raises(wirelock.InvalidArgument):
        client.mutex.acquire("ok", ttl=86_401.0)
    with pytest.raises(wirelock.InvalidArgument):
        client.mutex.acquire("ok", ttl=1.0, label="bad\tlabel")
    assert r.dbsize() == 0


def test_foreign_holder_without_ttl(client, r):
    r.set("wlp:{foreign}", "not ours")
    with pytest.raises(Contended) as refused:
        client.mutex.acquire("foreign", ttl=1.0)
    assert refused.value.never_expires


def test_wrong_type_counter(client, r):
    r.hset("wlp:{wt}:fence", "x", "1")
    with pytest.raises(wirelock.WrongType):
        client.mutex.acquire("wt", ttl=1.0)
    assert r.exists("wlp:{wt}") == 0


def test_escaped_name(client, r):
    with client.mutex.acquire("a{b}c", ttl=1.0):
        assert r.exists("wlp:{a%7Bb%7Dc}") == 1


def test_named_process_without_waiter_passes_on(make_client, r):
    a, b, c = make_client(), make_client(), make_client()
    hold = a.mutex.acquire("pass", ttl=30.0)
    with pytest.raises(Contended):
        b.mutex.acquire("pass", ttl=1.0, wait=0.3)  # b lined up, then gave up: still first in line
    assert r.zrange("wlp:{pass}:waiting", 0, -1) == [b.origin]
    out = {}

    def waiter():
        out["hold"] = c.mutex.acquire("pass", ttl=5.0, wait=10.0)
        out["at"] = time.monotonic()

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 3
    while r.zcard("wlp:{pass}:waiting") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.zrange("wlp:{pass}:waiting", 0, -1) == [b.origin, c.origin]
    released = time.monotonic()
    hold.release()  # names b, which has no waiter left and passes the wake-up on to c
    t.join(5)
    assert out["at"] - released < 0.5
    out["hold"].release()

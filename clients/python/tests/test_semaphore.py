"""The semaphore through the client API."""

from __future__ import annotations

import threading
import time

import pytest

import wirelock
from wirelock import Contended, LimitMismatch, Lost, ReleaseOutcome


def test_never_exceeds_limit(make_client):
    clients = [make_client() for _ in range(3)]
    limit = 3
    lock = threading.Lock()
    inside = [0]
    peak = [0]
    fences = []
    errors = []

    def worker(client):
        try:
            for _ in range(6):
                with client.semaphore.acquire("pool", limit=limit, ttl=2.0, wait=10.0) as permit:
                    with lock:
                        inside[0] += 1
                        peak[0] = max(peak[0], inside[0])
                        fences.append(permit.fence)
                    assert len(permit.slots) == 1 and 0 <= permit.slots[0] < limit
                    assert client.semaphore.state("pool").held <= limit
                    time.sleep(0.005)
                    with lock:
                        inside[0] -= 1
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(clients[i % 3],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert peak[0] <= limit
    assert len(fences) == 48 and len(set(fences)) == 48


def test_slots_fences_and_refusal(make_client, r):
    a, b = make_client(), make_client()
    p1 = a.semaphore.acquire("s", limit=3, ttl=5.0, n=2)
    assert p1.slots == (0, 1) and p1.fence is not None
    p2 = b.semaphore.acquire("s", limit=3, ttl=5.0)
    assert p2.slots == (2,) and p2.fence > p1.fence
    with pytest.raises(Contended) as refused:
        b.semaphore.acquire("s", limit=3, ttl=5.0)
    assert refused.value.retry_after is not None and refused.value.retry_after <= 5.0
    with pytest.raises(LimitMismatch) as mismatch:
        b.semaphore.acquire("s", limit=4, ttl=5.0)
    assert mismatch.value.stored == 3
    assert a.semaphore.state("s") == wirelock.SemaphoreState(3, 3)
    assert p1.release() is ReleaseOutcome.RELEASED
    p3 = b.semaphore.acquire("s", limit=3, ttl=5.0, wait=1.0)
    assert p3.slots == (0,) and p3.fence > p2.fence
    p2.release(), p3.release()
    assert r.exists("wlp:sem:{s}:permits") == 0 and r.exists("wlp:sem:{s}:fence") == 1


def test_waiter_woken_by_release(make_client):
    a, b = make_client(), make_client()
    held = a.semaphore.acquire("w", limit=1, ttl=30.0)
    out = {}

    def waiter():
        out["permit"] = b.semaphore.acquire("w", limit=1, ttl=5.0, wait=10.0)
        out["at"] = time.monotonic()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    released = time.monotonic()
    held.release()
    t.join(5)
    assert out["at"] - released < 0.5
    out["permit"].release()


def test_expiry_outcomes_and_extend(make_client):
    a, b = make_client(), make_client()
    permit = a.semaphore.acquire("e", limit=1, ttl=0.1)
    time.sleep(0.2)
    # Expired but not purged yet: freed late.
    assert permit.release() is ReleaseOutcome.RELEASED_LATE

    permit = a.semaphore.acquire("e", limit=1, ttl=0.1)
    time.sleep(0.2)
    other = b.semaphore.acquire("e", limit=1, ttl=5.0)  # purges the expired permit
    with pytest.raises(Lost):
        permit.extend()
    assert permit.release() is ReleaseOutcome.ALREADY_EXPIRED
    other.extend(2.0)
    assert other.valid
    assert other.release() is ReleaseOutcome.RELEASED


def test_renewal(make_client):
    a, b = make_client(), make_client()
    with a.semaphore.acquire("renew", limit=1, ttl=0.3, renew=True) as permit:
        time.sleep(0.8)
        assert permit.valid
        with pytest.raises(Contended):
            b.semaphore.acquire("renew", limit=1, ttl=1.0)


def test_arguments(client):
    with pytest.raises(wirelock.InvalidArgument):
        client.semaphore.acquire("x", limit=0, ttl=1.0)
    with pytest.raises(wirelock.InvalidArgument):
        client.semaphore.acquire("x", limit=2, n=3, ttl=1.0)
    with pytest.raises(wirelock.InvalidArgument):
        client.semaphore.acquire("x", limit=10_001, ttl=1.0)

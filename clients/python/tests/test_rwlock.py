"""The read-write lock through the client API."""

from __future__ import annotations

import threading
import time

import pytest

from wirelock import Contended, Lost, ReleaseOutcome


def test_readers_share_writers_exclude(make_client, r):
    a, b, c = make_client(), make_client(), make_client()
    r1 = a.rwlock.read("cfg", ttl=5.0)
    r2 = b.rwlock.read("cfg", ttl=5.0)
    assert r1.epoch == 0 and r2.epoch == 0 and r1.fence is None
    assert c.rwlock.state("cfg").readers == 2
    with pytest.raises(Contended):
        c.rwlock.write("cfg", ttl=5.0)
    r1.release(), r2.release()
    w = c.rwlock.write("cfg", ttl=5.0)
    assert w.fence is not None
    with pytest.raises(Contended):
        a.rwlock.read("cfg", ttl=5.0)
    with pytest.raises(Contended):
        b.rwlock.write("cfg", ttl=5.0)
    assert w.release() is ReleaseOutcome.RELEASED
    r3 = a.rwlock.read("cfg", ttl=5.0)
    assert r3.epoch == w.fence  # the last writer's fence
    w2 = None
    r3.release()
    w2 = b.rwlock.write("cfg", ttl=5.0)
    assert w2.fence > w.fence
    w2.release()


def test_waiting_writer_blocks_new_readers_then_gets_in(make_client):
    a, b, c = make_client(), make_client(), make_client()
    reader = a.rwlock.read("pref", ttl=10.0)
    out = {}

    def writer():
        out["w"] = b.rwlock.write("pref", ttl=5.0, wait=10.0, waiter_ttl=1.0)
        out["at"] = time.monotonic()

    t = threading.Thread(target=writer)
    t.start()
    deadline = time.monotonic() + 3
    while c.rwlock.state("pref").waiting_writers == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.rwlock.state("pref").waiting_writers == 1
    with pytest.raises(Contended):
        c.rwlock.read("pref", ttl=1.0)  # writer preference
    reader.extend()  # a reader already in renews
    released = time.monotonic()
    assert reader.release() is ReleaseOutcome.RELEASED
    t.join(5)
    assert out["at"] - released < 0.5  # told by the last reader's release
    out["w"].release()


def test_writer_gives_up_and_leaves_queue(make_client):
    a, b, c = make_client(), make_client(), make_client()
    reader = a.rwlock.read("leave", ttl=5.0)
    with pytest.raises(Contended):
        b.rwlock.write("leave", ttl=1.0, wait=0.3)
    assert c.rwlock.state("leave").waiting_writers == 0
    c.rwlock.read("leave", ttl=1.0).release()  # readers are not kept out by a writer that left
    reader.release()


def test_expired_holds(make_client):
    a, b = make_client(), make_client()
    w = a.rwlock.write("exp", ttl=0.1)
    time.sleep(0.2)
    with pytest.raises(Lost):
        w.extend()
    assert w.release() is ReleaseOutcome.ALREADY_EXPIRED
    w = a.rwlock.write("exp", ttl=0.1)
    time.sleep(0.2)
    w2 = b.rwlock.write("exp", ttl=5.0)
    assert w.release() is ReleaseOutcome.OWNED_BY_OTHER
    w2.release()
    rd = a.rwlock.read("exp", ttl=0.1)
    time.sleep(0.2)
    assert rd.release() is ReleaseOutcome.ALREADY_EXPIRED  # the readers' key expired with its last reader
    rd = a.rwlock.read("exp", ttl=0.1)
    longer = b.rwlock.read("exp", ttl=5.0)  # keeps the readers' key alive
    time.sleep(0.2)
    with pytest.raises(Lost):
        rd.extend()
    assert rd.release() is ReleaseOutcome.RELEASED_LATE  # expired, not purged yet
    longer.release()


def test_downgrade_and_renewal(make_client):
    a, b = make_client(), make_client()
    w = a.rwlock.write("down", ttl=0.3, renew=True)
    time.sleep(0.6)
    assert w.valid
    rd = w.downgrade()
    assert w.outcome is ReleaseOutcome.RELEASED and rd.epoch == w.fence
    other = b.rwlock.read("down", ttl=1.0)  # readers share with the downgraded holder
    with pytest.raises(Contended):
        b.rwlock.write("down", ttl=1.0)
    rd.release(), other.release()

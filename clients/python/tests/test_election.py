"""Leader election through the client API."""

from __future__ import annotations

import threading
import time

import pytest

from wirelock import Contended, Lost, ReleaseOutcome


def test_one_leader_and_hand_over(make_client):
    clients = [make_client() for _ in range(3)]
    lock = threading.Lock()
    leaders = [0]
    peak = [0]
    terms = []
    errors = []

    def candidate(i):
        try:
            for _ in range(3):
                won = clients[i].election.campaign("compactor", f"node-{i}", f"addr-{i}", lease=2.0, wait=15.0)
                with lock:
                    leaders[0] += 1
                    peak[0] = max(peak[0], leaders[0])
                    terms.append(won.term)
                seen = clients[(i + 1) % 3].election.leader("compactor")
                assert seen is not None and seen.id == f"node-{i}" and seen.term == won.term
                time.sleep(0.01)
                with lock:
                    leaders[0] -= 1
                assert won.resign() is ReleaseOutcome.RELEASED
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert not errors, errors
    assert peak[0] == 1
    assert terms == sorted(terms) and len(set(terms)) == 9


def test_leader_record_proclaim_renew(make_client):
    a, b = make_client(), make_client()
    won = a.election.campaign("e", "node-a", "v1", lease=0.6, renew=True)
    # validity is capped by the renew deadline (2/3 of the lease)
    assert won.valid_until_ns - won.acquired_ns == 400_000_000
    assert a.election.leader("e").value == "v1"
    assert won.proclaim("v2") is True
    assert b.election.leader("e").value == "v2"
    with pytest.raises(Contended):
        b.election.campaign("e", "node-b", lease=1.0)
    time.sleep(1.0)  # past the lease: the renewal keeps it
    assert won.valid and b.election.leader("e").id == "node-a"
    assert won.resign() is ReleaseOutcome.RELEASED
    assert b.election.leader("e") is None


def test_expired_leader(make_client):
    a, b = make_client(), make_client()
    won = a.election.campaign("x", "node-a", lease=0.15)
    time.sleep(0.25)
    assert not won.valid
    with pytest.raises(Lost):
        won.extend()
    nxt = b.election.campaign("x", "node-b", lease=2.0, wait=5.0)
    assert nxt.term > won.term
    assert won.resign() is ReleaseOutcome.OWNED_BY_OTHER
    nxt.resign()

#!/usr/bin/env python3
"""Behaviour probes behind the FINDINGS in ../README.md (re-runnable evidence).

    interop/python/.venv/bin/python interop/tools/probe.py [peer ...]

Starts its own redis-server and, per peer, two driver processes A and B. Prints one
JSON object per probe. Takes about a minute per peer (it waits out some TTLs).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peerproc import NODE_PEERS, PY_PEERS, Peer, RedisServer  # noqa: E402


def ms(a, b):
    return round((b - a) / 1e6, 1)


def show(peer, probe, **kw):
    print(json.dumps({"peer": peer, "probe": probe, **kw}), flush=True)


def key_state(srv, key):
    t = srv.cmd("TYPE", key)
    val = srv.cmd("GET", key) if t == "string" else srv.cmd("HGETALL", key) if t == "hash" else None
    return {"type": t, "value": val, "pttl": int(srv.cmd("PTTL", key))}


def reentry(srv, a, peer, key):
    r1 = a.call({"op": "acquire", "name": "re", "ttl_ms": 5000, "wait_ms": 0})
    r2 = a.call({"op": "acquire", "name": "re", "ttl_ms": 5000, "wait_ms": 0})
    st = key_state(srv, key)
    rel1 = a.call({"op": "release", "name": "re"})
    after1 = key_state(srv, key)
    rel2 = a.call({"op": "release", "name": "re"})
    show(peer, "reentry", first=r1.get("acquired"), second=r2, state_after_second=st,
         release1=rel1.get("error") or "ok", state_after_release1=after1,
         release2=rel2.get("error") or "ok")
    srv.cmd("DEL", key)


def foreign_delete(srv, a, b, peer, key):
    """B waits while A holds; a third party DELs the key: when does B get it?"""
    a.call({"op": "acquire", "name": "fd", "ttl_ms": 10000, "wait_ms": 0})
    b.send({"op": "acquire", "name": "fd", "ttl_ms": 10000, "wait_ms": 5000})
    time.sleep(0.5)
    t_del = time.monotonic_ns()
    srv.cmd("DEL", key)
    rb = b.read(timeout=30)
    ra = a.call({"op": "release", "name": "fd"})  # A's lock is gone (maybe B's now)
    show(peer, "foreign_delete", waiter_acquired=rb["acquired"],
         ms_from_del_to_waiter_return=ms(t_del, rb["at_ns"]),
         waiter_total_wait_ms=ms(rb["started_ns"], rb["at_ns"]), old_holder_release=ra)
    b.call({"op": "release", "name": "fd"})
    srv.cmd("DEL", key)


def expiry_wake(srv, a, b, peer, key):
    """A's lock expires (A never releases); B waits longer than A's TTL."""
    ttl, wait = (3000, 3000) if peer == "python-redis-lock" else (1000, 3000)
    ra = a.call({"op": "acquire", "name": "ex", "ttl_ms": ttl, "wait_ms": 0})
    rb = b.call({"op": "acquire", "name": "ex", "ttl_ms": 5000, "wait_ms": wait})
    expired_at = ra["at_ns"] + ttl * 1_000_000
    show(peer, "expiry_wake", holder_ttl_ms=ttl, waiter_wait_ms=wait, waiter_acquired=rb["acquired"],
         ms_from_expiry_to_waiter_return=ms(expired_at, rb["at_ns"]))
    b.call({"op": "release", "name": "ex"})
    a.call({"op": "release", "name": "ex"})
    srv.cmd("DEL", key)


def wrong_type(srv, a, peer, key):
    hashy = peer == "node-redisson"
    # a) acquire while the key holds the "other" type (a string for the hash-based peer)
    if hashy:
        srv.cmd("SET", key, "someone-else")
    else:
        srv.cmd("HSET", key, "f", "1")
    acq = a.call({"op": "acquire", "name": "wt", "ttl_ms": 5000, "wait_ms": 0})
    show(peer, "acquire_on_foreign_type", foreign="string" if hashy else "hash", reply=acq)
    srv.cmd("DEL", key)
    # b) our key was replaced by someone else's lock of the same type
    a.call({"op": "acquire", "name": "wt", "ttl_ms": 5000, "wait_ms": 0})
    srv.cmd("DEL", key)
    if hashy:
        srv.cmd("HSET", key, "other-uuid:1", "1")
    else:
        srv.cmd("SET", key, "someone-else")
    ext = a.call({"op": "extend", "name": "wt", "ttl_ms": 5000})
    rel = a.call({"op": "release", "name": "wt"})
    show(peer, "same_type_other_owner", extend=ext.get("error") or ext, release=rel.get("error") or rel,
         key_after=key_state(srv, key))
    srv.cmd("DEL", key)
    # c) our key was replaced by a value of the other type
    a.call({"op": "acquire", "name": "wt", "ttl_ms": 5000, "wait_ms": 0})
    srv.cmd("DEL", key)
    if hashy:
        srv.cmd("SET", key, "someone-else")
    else:
        srv.cmd("HSET", key, "f", "1")
    ext = a.call({"op": "extend", "name": "wt", "ttl_ms": 5000})
    rel = a.call({"op": "release", "name": "wt"})
    show(peer, "other_type", extend=ext.get("error") or ext, release=rel.get("error") or rel,
         key_after=key_state(srv, key))
    srv.cmd("DEL", key)


def main(peers):
    srv = RedisServer()
    try:
        for peer in peers:
            a, b = Peer(peer, srv.url), Peer(peer, srv.url)
            try:
                keys = {n: a.call({"op": "describe", "name": n})["keys"][0] for n in ("re", "fd", "ex", "wt")}
                show(peer, "versions", ready=a.ready)
                reentry(srv, a, peer, keys["re"])
                foreign_delete(srv, a, b, peer, keys["fd"])
                expiry_wake(srv, a, b, peer, keys["ex"])
                wrong_type(srv, a, peer, keys["wt"])
            finally:
                a.close()
                b.close()
    finally:
        srv.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or PY_PEERS + NODE_PEERS)

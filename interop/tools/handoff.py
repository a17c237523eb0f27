#!/usr/bin/env python3
"""Reference hand-off latency between two driver processes of the same peer.

    interop/python/.venv/bin/python interop/tools/handoff.py [-n 200] [peer ...]

Per peer, on a fresh redis-server: the holder acquires; the waiter starts a blocking
acquire (wait 5 s); after a random 50-250 ms (so the waiter is already waiting, at a
random phase of any polling loop) the holder releases. Latency = waiter's at_ns (just
after its package returned) - holder's release at_ns (just after the release call
returned). Roles alternate between the two processes. Prints one JSON line per peer.
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peerproc import NODE_PEERS, PY_PEERS, Peer, RedisServer  # noqa: E402


def pct(sorted_vals, p):
    """Nearest-rank percentile."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, int(-(-p * len(sorted_vals) // 100)) - 1))
    return sorted_vals[k]


def measure(peer, n, seed):
    rnd = random.Random(seed)
    srv = RedisServer()
    a, b = Peer(peer, srv.url), Peer(peer, srv.url)
    lat, failures = [], 0
    try:
        for i in range(n):
            holder, waiter = (a, b) if i % 2 == 0 else (b, a)
            h = holder.call({"op": "acquire", "name": "handoff", "ttl_ms": 10000, "wait_ms": 0})
            assert h["acquired"], h
            waiter.send({"op": "acquire", "name": "handoff", "ttl_ms": 10000, "wait_ms": 5000})
            time.sleep(rnd.uniform(0.05, 0.25))
            rel = holder.call({"op": "release", "name": "handoff"})
            assert rel["released"], rel
            w = waiter.read(timeout=30)
            if not w.get("acquired"):
                failures += 1
                continue
            lat.append((w["at_ns"] - rel["at_ns"]) / 1e6)
            r = waiter.call({"op": "release", "name": "handoff"})
            assert r["released"], r
    finally:
        a.close()
        b.close()
        srv.stop()
    lat.sort()
    return {
        "peer": peer, "version": a.ready["version"], "handoffs": len(lat), "waiter_failed": failures,
        "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90), "p99_ms": pct(lat, 99),
        "min_ms": lat[0] if lat else None, "max_ms": lat[-1] if lat else None,
        "mean_ms": round(sum(lat) / len(lat), 3) if lat else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("peers", nargs="*")
    args = ap.parse_args()
    for peer in args.peers or PY_PEERS + NODE_PEERS:
        res = measure(peer, args.n, args.seed)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in res.items()}), flush=True)


if __name__ == "__main__":
    main()

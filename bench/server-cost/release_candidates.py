#!/usr/bin/env python3
"""Server CPU per release, ours against rslock's (issue 51), measured on redis-server alone.

    python3 bench/server-cost/release_candidates.py [--n 200000] [--runs 3]

For each candidate, N held keys are set up (not measured), then released through `redis-cli --pipe`, and the
server's own CPU time (`INFO cpu`) is divided by N, as `fence_candidates.py` does for acquires. Candidates:
rslock's compare-and-delete script (the crate's `UNLOCK_SCRIPT`); the same script called with our four keys and three
arguments, and then also deleting a second (absent) key as ours deletes the mark: where our extra cost comes from;
lock-core's RELEASE script as sent (wire/scripts/release.lua) with nobody waiting (no mark: it publishes nothing);
and the same release when a try left the mark that someone waits (it deletes the mark and publishes, to nobody here).
Then the release in two steps (WIRE.md 8.3.1, issue 58 target 2): rslock's script called with two keys (the
calling convention alone), UNLOCK (wire/scripts/unlock.lua) with nobody waiting, UNLOCK on a marked lock followed
by RELEASE (the contended path: two scripts), and a first step that frees the lock and its mark in one `DEL`
(cheaper, but a call lost after it loses the wake-up: not taken).
"""
import hashlib
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fence_candidates import arguments, cli, cpu, pipe, resp, server  # noqa: E402

RELEASE = open(os.path.join(HERE, "..", "..", "wire", "scripts", "release.lua")).read()
RSLOCK = 'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end'
RSLOCK_DEL_2 = 'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1],KEYS[3]) else return 0 end'
UNLOCK = open(os.path.join(HERE, "..", "..", "wire", "scripts", "unlock.lua")).read()
FREES_FIRST = ("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1], KEYS[2]) "
               "else return 0 end")
SCRIPTS = {"rslock": RSLOCK, "rslock-4-keys": RSLOCK, "rslock-4-keys-del-2": RSLOCK_DEL_2, "ours": RELEASE,
           "ours-awaited": RELEASE, "rslock-2-keys": RSLOCK + " ", "unlock": UNLOCK, "unlock-awaited": UNLOCK,
           "frees-first": FREES_FIRST}
# Each candidate's calls: (script, number of keys). Two keys: the lock and its mark; four: RELEASE's.
CALLS = {"rslock": [("rslock", 1)], "rslock-2-keys": [("rslock-2-keys", 2)], "unlock": [("unlock", 2)],
         "unlock-awaited": [("unlock", 2), ("ours", 4)], "frees-first": [("frees-first", 2)]}
# The candidates that start with the mark set (a waiter tried).
AWAITED = {"ours-awaited", "unlock-awaited"}
TOKEN = "0123456789abcdef0123456789abcdef"


def keys(tag, i):
    base = f"lock:{{{tag}-{i}}}"
    return base, f"{base}:released", f"{base}:awaited", f"{base}:waiting"


def setup(kind, n, tag):
    parts = []
    for i in range(n):
        lock, _, mark, _ = keys(tag, i)
        parts.append(resp("SET", lock, TOKEN, "PX", 60000))
        if kind in AWAITED:
            parts.append(resp("SET", mark, "1", "PX", 60000))
    return b"".join(parts)


def releases(kind, n, tag):
    parts = []
    for i in range(n):
        lock, channel, mark, waiting = keys(tag, i)
        for script, n in CALLS.get(kind, [(kind, 4)]):
            sha = hashlib.sha1(SCRIPTS[script].encode()).hexdigest()
            if n == 1:
                parts.append(resp("EVALSHA", sha, 1, lock, TOKEN))
            elif n == 2:
                parts.append(resp("EVALSHA", sha, 2, lock, mark, TOKEN))
            else:
                parts.append(resp("EVALSHA", sha, 4, lock, channel, mark, waiting, TOKEN, "origin", "0"))
    return b"".join(parts)


def main():
    args = arguments()
    with server() as port:
        for body in set(SCRIPTS.values()):
            cli(port, "SCRIPT", "LOAD", body)
        kinds = list(SCRIPTS)
        results = {k: [] for k in kinds}
        for run in range(args.runs):
            for k in kinds[run % len(kinds):] + kinds[: run % len(kinds)]:
                tag = f"{k}-{run}"
                pipe(port, setup(k, args.n, tag))
                before = cpu(port)
                pipe(port, releases(k, args.n, tag))
                results[k].append((cpu(port) - before) * 1e6 / args.n)
                left = int(cli(port, "DBSIZE").strip())
                if left:
                    raise SystemExit(f"{k}: {left} keys left after the releases (a release did not delete)")
        base = statistics.median(results["rslock"])
        print("| release | server CPU µs per release (median of %d runs, min–max) | × rslock's |" % args.runs)
        print("|---|---|---|")
        for k in kinds:
            m = statistics.median(results[k])
            print(f"| {k} | {m:.2f} ({min(results[k]):.2f}–{max(results[k]):.2f}) | {m / base:.2f} |")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A cross-language soak-test worker on wirelock.

    python soak_worker.py <redis_url> <primitive> <resource> <worker_id> <ttl_ms> <events_path>

primitive: ``mutex``, ``semaphore:<limit>``, ``rwlock`` or ``election``. Loops forever: acquire (waiting up to 10 s;
rwlock: a write hold one time in three, else a read hold), one guarded write (``RPUSH`` of ``"<worker> <fence>"`` to
the list ``<resource>:data``) through the guard ``<resource>:data:fence`` with the hold's fence (exclusive holds only: mutex, rwlock write, election, semaphore with
limit 1; shared holds have no exclusive fence and skip it), hold 5–50 ms, release; then append one JSON line per hold
to ``events_path`` (one ``write`` call per line, unbuffered). Logs go to stderr only.

Times are ``time.monotonic_ns()`` (CLOCK_MONOTONIC): ``acquired_ns`` when the grant's reply arrived, ``released_ns``
just before the release request is sent, ``valid_until_ns`` = the granting request's start + validity (ttl − drift),
``request_ns`` the granting request's start. Environment: ``WIRELOCK_SOAK_GUARD`` / ``WIRELOCK_SOAK_DATA`` override
the guard and data key names (``{resource}`` is replaced by the resource).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys
import time

try:
    import wirelock
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
    import wirelock

import redis.exceptions

log = logging.getLogger("soak_worker")
WAIT = 10.0
RELEASE = {
    wirelock.ReleaseOutcome.RELEASED: "released",
    wirelock.ReleaseOutcome.RELEASED_LATE: "expired",  # freed, but its expiry had passed before the release
    wirelock.ReleaseOutcome.ALREADY_EXPIRED: "expired",
    wirelock.ReleaseOutcome.OWNED_BY_OTHER: "owned_by_other",
}


def usage() -> None:
    print(__doc__.strip().splitlines()[2], file=sys.stderr)
    sys.exit(2)


def parse(argv: list[str]):
    if len(argv) != 7:
        usage()
    _, url, primitive, resource, worker, ttl, events = argv
    limit = None
    if primitive.startswith("semaphore:"):
        try:
            limit = int(primitive.split(":", 1)[1])
        except ValueError:
            usage()
    elif primitive not in ("mutex", "rwlock", "election"):
        usage()
    try:
        ttl_ms = int(ttl)
    except ValueError:
        usage()
    return url, primitive, limit, resource, worker, ttl_ms, events


def main(argv: list[str]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s soak_worker %(message)s")
    url, primitive, limit, resource, worker, ttl_ms, events_path = parse(argv)
    ttl = ttl_ms / 1000
    guard = os.environ.get("WIRELOCK_SOAK_GUARD", "{resource}:data:fence").replace("{resource}", resource)
    data = os.environ.get("WIRELOCK_SOAK_DATA", "{resource}:data").replace("{resource}", resource)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    client = wirelock.Client.from_url(url)
    rng = random.Random()
    events = open(events_path, "ab", buffering=0)  # append mode; every line is one unbuffered write(2)
    log.info("worker %s: %s on %r, ttl %d ms, guard %r, data %r", worker, primitive, resource, ttl_ms, guard, data)

    def acquire():
        if primitive == "mutex":
            return "exclusive", client.mutex.acquire(resource, ttl, wait=WAIT)
        if limit is not None:
            mode = "exclusive" if limit == 1 else "shared"
            return mode, client.semaphore.acquire(resource, limit=limit, ttl=ttl, wait=WAIT)
        if primitive == "rwlock":
            if rng.randrange(3) == 0:
                return "exclusive", client.rwlock.write(resource, ttl=ttl, wait=WAIT)
            return "shared", client.rwlock.read(resource, ttl=ttl, wait=WAIT)
        return "exclusive", client.election.campaign(resource, worker, worker, lease=ttl, wait=WAIT)

    while True:
        try:
            mode, hold = acquire()
        except wirelock.Contended as err:
            log.info("worker %s: no hold within %.0f s (%s)", worker, WAIT, err)
            continue
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as err:
            log.warning("worker %s: acquire failed: %s", worker, err)
            time.sleep(0.2)
            continue
        except wirelock.WireLockError as err:
            log.error("worker %s: acquire refused: %s", worker, err)
            time.sleep(0.5)
            continue
        acquired_ns = time.monotonic_ns()
        write = "none"
        if mode == "exclusive" and hold.fence is not None:
            # The guard is the check: after a pause (SIGSTOP) past the TTL a newer holder's fence refuses this one.
            try:
                # Appended, so the list is the order the guard accepted fences in: a checker reads it back.
                hold.fenced_write(guard, "rpush", [data], [f"{worker} {hold.fence}"])
                write = "accepted"
            except wirelock.StaleFence:
                write = "stale"
            except Exception as err:  # noqa: BLE001 - record what happened
                write = f"error: {err}"
        time.sleep(rng.uniform(0.005, 0.050))
        released_ns = time.monotonic_ns()
        try:
            release = RELEASE[hold.release()]
        except Exception as err:  # noqa: BLE001
            release = f"error: {err}"
        event = {
            "worker": worker,
            "lang": "python",
            "primitive": primitive,
            "mode": mode,
            "acquired_ns": acquired_ns,
            "released_ns": released_ns,
            "valid_until_ns": hold.valid_until_ns,
            "request_ns": hold.acquired_ns,
            "fence": hold.fence,
            "write": write,
            "release": release,
        }
        events.write((json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8"))
        if release != "released" or write not in ("none", "accepted"):
            log.info("worker %s: hold fence=%s write=%s release=%s", worker, hold.fence, write, release)
        # The mutex is not fair: a releaser looping back at once would barge past the waiter its release woke.
        # A short pause between holds lets the woken waiter (possibly another language's) try first.
        time.sleep(rng.uniform(0.001, 0.003))


if __name__ == "__main__":
    sys.exit(main(sys.argv))

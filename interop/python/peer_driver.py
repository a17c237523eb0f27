#!/usr/bin/env python3
"""Peer driver: drives a REAL Python Redis-lock package over a JSON-lines protocol.

    python peer_driver.py <peer> <redis_url>      peer: redis-py | python-redis-lock | pottery

One JSON request per stdin line, one JSON reply per stdout line (flushed); logs go
to stderr. See ../README.md for the protocol and for what each package does on the
wire. This file only adapts the protocol to each package's public API; it never
re-implements any locking logic.

Times are time.monotonic_ns() (CLOCK_MONOTONIC on Linux), emitted as exact JSON
integers.
"""

import json
import logging
import math
import platform
import sys
import time
from importlib.metadata import version as pkg_version

import redis

log = logging.getLogger("peer_driver")


def now_ns():
    return time.monotonic_ns()


def err_text(exc):
    if hasattr(exc, "masters"):
        # pottery's exceptions are dataclasses whose str() dumps every client's repr
        return f"{type(exc).__name__}: key={exc.key!r}"
    return f"{type(exc).__name__}: {exc}"


def ceil_s(ms):
    """Milliseconds -> whole seconds, rounded UP (python-redis-lock takes int seconds)."""
    return int(math.ceil(ms / 1000.0))


class RedisPyPeer:
    """redis-py's redis.lock.Lock, created with Redis.lock(...)."""

    package = "redis"

    def __init__(self, client):
        self.client = client

    def describe(self, name):
        lk = self.client.lock(name)
        return {
            "keys": [lk.name],
            "channels": [],
            "lists": [],
            "notes": "String key = the name itself, value = uuid4().hex (32 lowercase hex chars), "
            "SET NX PX <timeout ms>. Waiters poll SET NX every `sleep` (0.1 s default). "
            "Release/extend are Lua scripts comparing the token (redis/lock.py).",
        }

    def new_lock(self, name, ttl_ms, req):
        # ttl_ms == 0 -> timeout=None: the key gets no expiry at all.
        sleep = req.get("retry_ms", 100) / 1000.0
        return self.client.lock(name, timeout=(ttl_ms / 1000.0) or None, sleep=sleep), {}

    def acquire(self, lk, wait_ms):
        if wait_ms <= 0:
            return lk.acquire(blocking=False), {}
        # Note: redis-py gives up early when the *next* sleep would overshoot the deadline.
        return lk.acquire(blocking=True, blocking_timeout=wait_ms / 1000.0), {}

    def release(self, lk):
        lk.release()  # raises LockNotOwnedError (a LockError) if the token no longer matches

    def extend(self, lk, ttl_ms):
        lk.extend(ttl_ms / 1000.0, replace_ttl=True)  # raises LockNotOwnedError
        return {}


class PythonRedisLockPeer:
    """python-redis-lock (module redis_lock): SET NX EX + BLPOP on a signal list."""

    package = "python-redis-lock"

    def __init__(self, client):
        import redis_lock

        self.mod = redis_lock
        self.client = client

    def describe(self, name):
        lk = self.mod.Lock(self.client, name)
        return {
            "keys": [lk._name],
            "channels": [],
            "lists": [lk._signal],
            "notes": "String key 'lock:<name>', value = base64 of 18 random bytes (24 chars), "
            "SET NX EX <whole seconds>. Waiters BLPOP 'lock-signal:<name>' (timeout = acquire "
            "timeout, else expire, else forever); release runs DEL signal, LPUSH signal 1, "
            "PEXPIRE signal 1000, DEL lock in one script (redis_lock/__init__.py). A waiter is "
            "NOT woken when the key vanishes by expiry or by another library's DEL.",
        }

    def new_lock(self, name, ttl_ms, req):
        # expire is whole seconds; round UP. ttl_ms == 0 -> expire=None (no expiry).
        expire = ceil_s(ttl_ms) if ttl_ms > 0 else None
        lk = self.mod.Lock(self.client, name, expire=expire)
        return lk, {"ttl_ms_effective": expire * 1000 if expire else None}

    def acquire(self, lk, wait_ms):
        if wait_ms <= 0:
            return lk.acquire(blocking=False), {}
        # timeout is whole seconds too (int() inside the package; 0 would mean "forever"),
        # so round UP. The package raises TimeoutTooLarge if timeout > expire.
        # NB: the timeout is per BLPOP, not an overall deadline: each signal that is
        # popped without winning the SET NX restarts a full BLPOP(timeout).
        timeout = ceil_s(wait_ms)
        return lk.acquire(blocking=True, timeout=timeout), {"wait_ms_effective": timeout * 1000}

    def release(self, lk):
        lk.release()  # raises NotAcquired if the value no longer matches

    def extend(self, lk, ttl_ms):
        expire = ceil_s(ttl_ms)
        lk.extend(expire=expire)  # EXPIRE <seconds>; raises NotAcquired / NotExpirable
        return {"ttl_ms_effective": expire * 1000}

    def cleanup(self):
        # The package's own bulk cleanup, which some services call at start-up: a script that runs
        # KEYS 'lock:*' and deletes every match (and its 'lock-signal:' list).
        self.mod.reset_all(self.client)
        return {"cleanup": "redis_lock.reset_all"}


class PotteryPeer:
    """pottery.Redlock with a single master."""

    package = "pottery"

    def __init__(self, client):
        from pottery import Redlock

        self.Redlock = Redlock
        self.client = client

    def describe(self, name):
        lk = self.Redlock(key=name, masters={self.client})
        return {
            "keys": [lk.key],
            "channels": [],
            "lists": [],
            "notes": "String key 'redlock:<name>', value = str(uuid4()) (36 chars with hyphens), "
            "SET NX PX. Waiters poll every random.uniform(0, 0.2) s; every failed attempt also "
            "runs the release script with its fresh uuid. extend() takes no TTL: it resets "
            "PEXPIRE to auto_release_time, at most num_extensions=3 times (pottery/redlock.py).",
        }

    def new_lock(self, name, ttl_ms, req):
        if ttl_ms <= 0:
            raise ValueError("pottery needs ttl_ms > 0 (auto_release_time)")
        lk = self.Redlock(key=name, masters={self.client}, auto_release_time=ttl_ms / 1000.0)
        return lk, {}

    def acquire(self, lk, wait_ms):
        if wait_ms <= 0:
            return lk.acquire(blocking=False), {}
        return lk.acquire(blocking=True, timeout=wait_ms / 1000.0), {}

    def release(self, lk):
        lk.release()  # raises ReleaseUnlockedLock

    def extend(self, lk, ttl_ms):
        # pottery's extend() ignores any requested TTL: it re-applies auto_release_time
        # (the acquire's ttl_ms) and raises TooManyExtensions after 3 extensions.
        lk.extend()
        return {"ttl_ms_effective": int(lk.auto_release_time * 1000)}


PEERS = {"redis-py": RedisPyPeer, "python-redis-lock": PythonRedisLockPeer, "pottery": PotteryPeer}


class Driver:
    def __init__(self, peer_name, url):
        # redis-py 8 defaults socket_timeout to 5 s (redis/_defaults.py). python-redis-lock
        # BLPOPs for up to its timeout (or forever), which would then die with
        # redis.exceptions.TimeoutError; so, as with redis-py <= 7, no socket timeout.
        self.client = redis.Redis.from_url(url, socket_timeout=None)
        self.peer = PEERS[peer_name](self.client)
        self.peer_name = peer_name
        # name -> [package lock object, depth]. While a name is held, a further acquire
        # reuses the same object so the package's own re-entrancy behaviour shows.
        self.held = {}

    # -- building blocks shared by acquire / cycles / hold -------------------------------
    def _acquire(self, name, ttl_ms, wait_ms, req):
        entry = self.held.get(name)
        if entry:
            lk, extra = entry[0], {}
        else:
            lk, extra = self.peer.new_lock(name, ttl_ms, req)
        started = now_ns()
        ok, extra2 = self.peer.acquire(lk, wait_ms)
        at = now_ns()
        ok = bool(ok)
        if ok:
            if entry:
                entry[1] += 1
            else:
                self.held[name] = [lk, 1]
        return {"acquired": ok, "started_ns": started, "at_ns": at, **extra, **extra2}

    def _release(self, name):
        entry = self.held.get(name)
        started = now_ns()
        if entry is None:
            return {"released": False, "error": "NotHeld: driver holds no lock named %r" % name,
                    "started_ns": started, "at_ns": started}
        error = None
        try:
            self.peer.release(entry[0])
        except Exception as exc:  # lost/stolen lock, WRONGTYPE, ... -> report, never crash
            error = err_text(exc)
        at = now_ns()
        entry[1] -= 1
        if entry[1] <= 0 or error is not None:
            del self.held[name]
        return {"released": error is None, "error": error, "started_ns": started, "at_ns": at}

    # -- ops --------------------------------------------------------------------------------
    def op_describe(self, req):
        return self.peer.describe(req["name"])

    def op_acquire(self, req):
        return self._acquire(req["name"], req["ttl_ms"], req.get("wait_ms", 0), req)

    def op_release(self, req):
        return self._release(req["name"])

    def op_cleanup(self, req):
        """The package's own bulk cleanup, if it has one (python-redis-lock's reset_all)."""
        cleanup = getattr(self.peer, "cleanup", None)
        if cleanup is None:
            return {"cleanup": None}
        return cleanup()

    def op_extend(self, req):
        entry = self.held.get(req["name"])
        if entry is None:
            return {"extended": False, "error": "NotHeld: driver holds no lock named %r" % req["name"]}
        started = now_ns()
        try:
            extra = self.peer.extend(entry[0], req["ttl_ms"])
            return {"extended": True, "error": None, "started_ns": started, "at_ns": now_ns(), **extra}
        except Exception as exc:
            return {"extended": False, "error": err_text(exc), "started_ns": started, "at_ns": now_ns()}

    def op_cycles(self, req):
        name, key = req["name"], req["counter"]
        done = failed = failed_releases = 0
        events = []
        for _ in range(req["n"]):
            a = self._acquire(name, req["ttl_ms"], req.get("wait_ms", 0), req)
            if not a["acquired"]:
                failed += 1
                continue
            # Deliberately non-atomic read-modify-write: only the lock protects it.
            value = int(self.client.get(key) or 0)
            self.client.set(key, value + 1)
            r = self._release(name)
            events.append([a["at_ns"], r["started_ns"], r["at_ns"]])
            if r["released"]:
                done += 1
            else:
                failed_releases += 1
                log.warning("cycles: release failed: %s", r["error"])
        return {"done": done, "failed_acquires": failed, "failed_releases": failed_releases,
                "events": events}

    def op_hold(self, req):
        name = req["name"]
        a = self._acquire(name, req["ttl_ms"], req.get("wait_ms", 0), req)
        emit({"ok": True, **a})
        if not a["acquired"]:
            return None  # only one line when not acquired
        time.sleep(req["hold_ms"] / 1000.0)
        r = self._release(name)
        return {"released": r["released"], "error": r["error"],
                "release_started_ns": r["started_ns"], "release_done_ns": r["at_ns"]}

    def op_bench(self, req):
        """acquire -> hold -> release cycles on one name until n cycles are done or
        duration_ms has passed since the first cycle started (checked before each cycle).
        Goes through _acquire/_release, i.e. the very package objects and settings of the
        acquire and release ops. The protocol is in ../README.md ("bench")."""
        name, ttl_ms, wait_ms = req["name"], req["ttl_ms"], req.get("wait_ms", 0)
        hold_s = req.get("hold_us", 0) / 1e6
        n, budget_ns = req["n"], req["duration_ms"] * 1_000_000
        cycles = failed = failed_releases = 0
        release_error = None
        acquire_ns, cycle_ns = [], []
        start = end = None
        while cycles < n:
            t0 = now_ns()
            if start is None:
                start = t0
            elif t0 - start >= budget_ns:
                break
            a = self._acquire(name, ttl_ms, wait_ms, req)
            t1 = now_ns()
            if not a["acquired"]:
                failed += 1
                end = t1
                continue
            if hold_s > 0:
                time.sleep(hold_s)
            r = self._release(name)
            t2 = end = now_ns()
            if not r["released"]:  # the cycle still counts: it did acquire
                failed_releases += 1
                release_error = release_error or r["error"]
            cycles += 1
            acquire_ns.append(t1 - t0)
            cycle_ns.append(t2 - t0)
        reply = {"cycles": cycles, "failed": failed,
                 "elapsed_ns": (end - start) if start is not None else 0,
                 "acquire_ns": acquire_ns, "cycle_ns": cycle_ns}
        if failed_releases:
            reply.update(failed_releases=failed_releases, release_error=release_error)
        return reply


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv):
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format=f"[peer {argv[1] if len(argv) > 1 else '?'}] %(name)s: %(message)s")
    if len(argv) != 3 or argv[1] not in PEERS:
        sys.stderr.write(f"usage: {argv[0]} <{'|'.join(PEERS)}> <redis_url>\n")
        return 2
    drv = Driver(argv[1], argv[2])
    drv.client.ping()
    emit({"ready": True, "peer": argv[1], "version": pkg_version(drv.peer.package),
          "redis_py_version": pkg_version("redis"),
          "runtime": f"{platform.python_implementation()} {platform.python_version()}"})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "quit":
                break  # held locks are NOT released: they expire by their TTL
            handler = getattr(drv, "op_" + str(op), None)
            if handler is None:
                raise ValueError(f"unknown op {op!r}")
            reply = handler(req)
            if reply is not None:
                emit({"ok": True, **reply})
        except Exception as exc:
            log.exception("request failed: %s", line)
            emit({"ok": False, "error": err_text(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

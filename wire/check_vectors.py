#!/usr/bin/env python3
"""Runs the wire test vectors (wire/vectors/*.json) against a Redis-compatible server.

Standard library only. It speaks RESP2 over one TCP connection, runs each case on an empty database (FLUSHALL
between cases: use a server, or a database number, that holds nothing you need), runs scripts with EVALSHA and,
when the server answers NOSCRIPT, once with EVAL and the body of wire/scripts/<name>.lua, and reads TIME around
every step for the `between_server_time_us` matcher.

    python3 wire/check_vectors.py --url redis://127.0.0.1:6379/15
    python3 wire/check_vectors.py --port 6391 wire/vectors/mutex.json --case grant-with-fence -v

Exit status 0 when every case passed, 1 when one failed, 2 for a usage or connection error.
"""

import argparse
import glob
import hashlib
import json
import os
import socket
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
VECTORS = os.path.join(HERE, "vectors")

# What a step may send as a plain command: the subset every runner (the in-memory store included) implements.
COMMANDS = {
    "SET", "GET", "DEL", "EXISTS", "TYPE", "PTTL", "PEXPIRE", "INCRBY", "HSET", "HGET", "HMGET", "HGETALL", "HDEL",
    "HLEN", "HEXISTS", "HINCRBY", "ZADD", "ZSCORE", "ZRANGE", "ZCARD", "ZRANK", "ZREM", "RPUSH", "LPUSH", "LRANGE",
    "LLEN", "TIME",
}
MAX_SLEEP_MS = 300


class ServerError(Exception):
    """An error reply (`-ERR …`)."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class Redis:
    """A minimal RESP2 client: one connection, one command at a time."""

    def __init__(self, host, port, password=None, username=None, db=0, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        if password is not None:
            self.call(*(["AUTH", username, password] if username else ["AUTH", password]))
        if db:
            self.call("SELECT", str(db))

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode("utf-8")
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self.read()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        """One reply: int, str (bulk and status, decoded as UTF-8), None, list, or a ServerError instance."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8")
        if kind == b"-":
            return ServerError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode("utf-8", "surrogateescape")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError("unexpected reply type %r" % line)

    def must(self, *args):
        reply = self.call(*args)
        if isinstance(reply, ServerError):
            raise reply
        return reply

    def time_us(self):
        secs, micros = self.must("TIME")
        return int(secs) * 1000000 + int(micros)


class Scripts:
    """The bodies of wire/scripts/*.lua and their SHA-1s."""

    def __init__(self):
        self.bodies = {}
        for path in glob.glob(os.path.join(SCRIPTS, "*.lua")):
            with open(path, "rb") as f:
                body = f.read()
            self.bodies[os.path.basename(path)[:-4]] = (body, hashlib.sha1(body).hexdigest())

    def run(self, redis, name, keys, argv):
        if name not in self.bodies:
            raise KeyError("no script wire/scripts/%s.lua" % name)
        body, sha = self.bodies[name]
        args = [str(len(keys))] + list(keys) + list(argv)
        reply = redis.call("EVALSHA", sha, *args)
        if isinstance(reply, ServerError) and reply.message.startswith("NOSCRIPT"):
            reply = redis.call("EVAL", body, *args)
        return reply


class Mismatch(Exception):
    pass


def show(value):
    if isinstance(value, ServerError):
        return "error %r" % value.message
    return json.dumps(value, ensure_ascii=False)


def match(expected, actual, ctx, path="reply"):
    """Checks `actual` against the matcher `expected`; raises Mismatch naming where it differs."""

    def fail(why):
        raise Mismatch("%s: %s (expected %s, got %s)" % (path, why, json.dumps(expected, ensure_ascii=False), show(actual)))

    if isinstance(actual, ServerError) and not (isinstance(expected, dict) and ("error_prefix" in expected or "any" in expected or "capture" in expected)):
        fail("an error reply")
    if isinstance(expected, dict):
        if len(expected) != 1:
            fail("a matcher has exactly one key")
        (op, arg), = expected.items()
        if op == "any":
            return
        if op == "capture":
            ctx["captures"][arg] = actual
            return
        if op == "error_prefix":
            if not isinstance(actual, ServerError) or not actual.message.startswith(arg):
                fail("not an error starting with %r" % arg)
            return
        if op == "between":
            lo, hi = arg
            if not (isinstance(actual, int) and lo <= actual <= hi):
                fail("not an integer in [%d, %d]" % (lo, hi))
            return
        if op == "between_server_time_us":
            lo, hi = ctx["time"]
            if not (isinstance(actual, int) and lo <= actual <= hi):
                fail("not an integer within the server's TIME around the step [%d, %d]" % (lo, hi))
            return
        if op in ("gt", "eq"):
            if arg not in ctx["captures"]:
                fail("nothing captured as %r" % arg)
            seen = ctx["captures"][arg]
            if op == "eq":
                if actual != seen or type(actual) is not type(seen):
                    fail("not equal to %s captured as %r" % (show(seen), arg))
                return
            if not (isinstance(actual, int) and isinstance(seen, int) and actual > seen):
                fail("not an integer greater than %s captured as %r" % (show(seen), arg))
            return
        if op == "unordered":
            if not isinstance(actual, list) or len(actual) != len(arg):
                fail("not an array of %d elements" % len(arg))
            left = list(actual)
            for want in arg:
                for i, got in enumerate(left):
                    try:
                        match(want, got, ctx, path)
                    except Mismatch:
                        continue
                    del left[i]
                    break
                else:
                    fail("no element matches %s" % json.dumps(want, ensure_ascii=False))
            return
        fail("unknown matcher %r" % op)
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            fail("not an array of %d elements" % len(expected))
        for i, (want, got) in enumerate(zip(expected, actual)):
            match(want, got, ctx, "%s[%d]" % (path, i))
        return
    if isinstance(expected, bool) or not (expected is None or isinstance(expected, (int, str))):
        fail("a literal is an integer, a string, null or an array")
    if actual != expected or type(actual) is not type(expected):
        fail("differs")


def uses_time(matcher):
    if isinstance(matcher, dict):
        return "between_server_time_us" in matcher or any(uses_time(v) for v in matcher.values())
    if isinstance(matcher, list):
        return any(uses_time(v) for v in matcher)
    return False


def run_case(redis, scripts, case, verbose):
    redis.must("FLUSHALL")
    ctx = {"captures": {}, "time": None}
    for n, step in enumerate(case["steps"], 1):
        if "sleep_ms" in step:
            if step["sleep_ms"] > MAX_SLEEP_MS:
                raise Mismatch("step %d: sleep_ms above %d" % (n, MAX_SLEEP_MS))
            time.sleep(step["sleep_ms"] / 1000.0)
            continue
        timed = uses_time(step.get("reply"))
        before = redis.time_us() if timed else None
        if "command" in step:
            command = step["command"]
            if command[0].upper() not in COMMANDS:
                raise Mismatch("step %d: %s is not a command vectors may use" % (n, command[0]))
            what = " ".join(command)
            actual = redis.call(*command)
        elif "script" in step:
            what = "%s keys=%s argv=%s" % (step["script"], step.get("keys", []), step.get("argv", []))
            actual = scripts.run(redis, step["script"], step.get("keys", []), step.get("argv", []))
        else:
            raise Mismatch("step %d: no command, script or sleep_ms" % n)
        ctx["time"] = (before, redis.time_us()) if timed else None
        if verbose:
            print("    %d. %s -> %s" % (n, what, show(actual)))
        if "reply" in step:
            try:
                match(step["reply"], actual, ctx)
            except Mismatch as err:
                raise Mismatch("step %d (%s): %s" % (n, what, err))


def parse_target(args):
    if args.url:
        url = urllib.parse.urlparse(args.url)
        db = int(url.path.lstrip("/") or 0)
        password = urllib.parse.unquote(url.password) if url.password else None
        username = urllib.parse.unquote(url.username) if url.username else None
        return url.hostname or "127.0.0.1", url.port or 6379, password, username, db
    return args.host, args.port, None, None, args.db


def main():
    parser = argparse.ArgumentParser(description="Run the wire test vectors against a Redis server.")
    parser.add_argument("files", nargs="*", help="vector files (default: every wire/vectors/*.json)")
    parser.add_argument("--url", help="redis://[user:password@]host:port[/db] (overrides --host/--port/--db)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--db", type=int, default=0)
    parser.add_argument("--case", action="append", help="run only the cases with this id (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step and its reply")
    args = parser.parse_args()

    files = args.files or sorted(glob.glob(os.path.join(VECTORS, "*.json")))
    try:
        redis = Redis(*parse_target(args))
    except (OSError, ServerError) as err:
        print("cannot connect: %s" % err, file=sys.stderr)
        return 2
    scripts = Scripts()
    passed = failed = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if "cases" not in doc:
            continue  # names.json: no steps to run
        print("%s (%s, protocol %s)" % (os.path.basename(path), doc.get("primitive"), doc.get("protocol")))
        for case in doc["cases"]:
            if args.case and case["id"] not in args.case:
                continue
            try:
                run_case(redis, scripts, case, args.verbose)
            except Mismatch as err:
                failed += 1
                print("  FAIL %s: %s" % (case["id"], err))
                continue
            passed += 1
            print("  ok   %s" % case["id"])
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

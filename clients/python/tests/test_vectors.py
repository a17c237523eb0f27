"""Runs every case of every wire/vectors/*.json file (but names.json) through wirelock's script loader.

Matchers as wire/README.md defines them: literals (integers, strings, null, arrays element by element) and
``between``, ``between_server_time_us``, ``capture``, ``gt``, ``eq``, ``any``, ``error_prefix``, ``unordered``.
"""

from __future__ import annotations

import json
import time

import pytest
import redis

from wirelock.scripts import PROTOCOL_VERSION, ScriptSet, decode, default_scripts_dir, error_text

VECTORS = default_scripts_dir().parent / "vectors"
COMMANDS = {
    "SET", "GET", "DEL", "EXISTS", "TYPE", "PTTL", "PEXPIRE", "INCRBY", "HSET", "HGET", "HMGET", "HGETALL", "HDEL",
    "HLEN", "HEXISTS", "HINCRBY", "ZADD", "ZSCORE", "ZRANGE", "ZCARD", "ZRANK", "ZREM", "RPUSH", "LPUSH", "LRANGE",
    "LLEN", "TIME",
}
MAX_SLEEP_MS = 300


class ErrorReply:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"error {self.text!r}"


class Mismatch(AssertionError):
    pass


def _cases():
    files = sorted(p for p in VECTORS.glob("*.json") if p.name != "names.json")
    assert files, f"no vector files in {VECTORS}"
    for path in files:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["format"] == 1 and doc["protocol"] == PROTOCOL_VERSION, path
        for case in doc["cases"]:
            yield pytest.param(case, id=f"{path.stem}:{case['id']}")


def match(expected, actual, ctx, path="reply"):
    def fail(why):
        raise Mismatch(f"{path}: {why} (expected {json.dumps(expected, ensure_ascii=False)}, got {actual!r})")

    if isinstance(actual, ErrorReply) and not (
        isinstance(expected, dict) and ({"error_prefix", "any", "capture"} & expected.keys())
    ):
        fail("an error reply")
    if isinstance(expected, dict):
        if len(expected) != 1:
            fail("a matcher has exactly one key")
        ((op, arg),) = expected.items()
        if op == "any":
            return
        if op == "capture":
            ctx["captures"][arg] = actual
            return
        if op == "error_prefix":
            if not (isinstance(actual, ErrorReply) and actual.text.startswith(arg)):
                fail(f"not an error starting with {arg!r}")
            return
        if op == "between":
            lo, hi = arg
            if not (isinstance(actual, int) and lo <= actual <= hi):
                fail(f"not an integer in [{lo}, {hi}]")
            return
        if op == "between_server_time_us":
            lo, hi = ctx["time"]
            if not (isinstance(actual, int) and lo <= actual <= hi):
                fail(f"not within the server's TIME around the step [{lo}, {hi}]")
            return
        if op in ("gt", "eq"):
            if arg not in ctx["captures"]:
                fail(f"nothing captured as {arg!r}")
            seen = ctx["captures"][arg]
            if op == "eq":
                if actual != seen or type(actual) is not type(seen):
                    fail(f"not equal to {seen!r} captured as {arg!r}")
                return
            if not (isinstance(actual, int) and isinstance(seen, int) and actual > seen):
                fail(f"not an integer greater than {seen!r} captured as {arg!r}")
            return
        if op == "unordered":
            if not isinstance(actual, list) or len(actual) != len(arg):
                fail(f"not an array of {len(arg)} elements")
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
                    fail(f"no element matches {json.dumps(want, ensure_ascii=False)}")
            return
        fail(f"unknown matcher {op!r}")
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            fail(f"not an array of {len(expected)} elements")
        for i, (want, got) in enumerate(zip(expected, actual)):
            match(want, got, ctx, f"{path}[{i}]")
        return
    if isinstance(expected, bool) or not (expected is None or isinstance(expected, (int, str))):
        fail("a literal is an integer, a string, null or an array")
    if actual != expected or type(actual) is not type(expected):
        fail("differs")


def uses_time(matcher) -> bool:
    if isinstance(matcher, dict):
        return "between_server_time_us" in matcher or any(uses_time(v) for v in matcher.values())
    if isinstance(matcher, list):
        return any(uses_time(v) for v in matcher)
    return False


@pytest.fixture(scope="module")
def raw(redis_url):
    """A redis-py connection returning replies as they come (no response callbacks, bytes undecoded)."""
    conn = redis.Redis.from_url(redis_url, protocol=2)
    conn.response_callbacks.clear()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def scripts():
    return ScriptSet()  # the client's loader: every file checked against the protocol's SHA-1


def _call(fn):
    try:
        return decode(fn())
    except redis.exceptions.ResponseError as err:
        return ErrorReply(error_text(err))


def _time_us(raw) -> int:
    sec, usec = raw.execute_command("TIME")
    return int(sec) * 1_000_000 + int(usec)


@pytest.mark.parametrize("case", list(_cases()))
def test_vector(case, raw, scripts):
    raw.execute_command("FLUSHALL")
    ctx = {"captures": {}, "time": None}
    for n, step in enumerate(case["steps"], 1):
        if "sleep_ms" in step:
            assert step["sleep_ms"] <= MAX_SLEEP_MS
            time.sleep(step["sleep_ms"] / 1000)
            continue
        timed = uses_time(step.get("reply"))
        before = _time_us(raw) if timed else None
        if "command" in step:
            command = step["command"]
            assert command[0].upper() in COMMANDS, f"step {n}: {command[0]} is not a vector command"
            what = " ".join(command)
            actual = _call(lambda: raw.execute_command(*command))
        elif "script" in step:
            keys, argv = step.get("keys", []), step.get("argv", [])
            what = f"{step['script']} keys={keys} argv={argv}"
            actual = _call(lambda: scripts.run(raw, step["script"], keys, argv))
        else:
            raise AssertionError(f"step {n}: no command, script or sleep_ms")
        ctx["time"] = (before, _time_us(raw)) if timed else None
        if "reply" in step:
            try:
                match(step["reply"], actual, ctx)
            except Mismatch as err:
                raise Mismatch(f"{case['id']} step {n} ({what}): {err}") from None

"""The waiting loop's parity with the Rust engine (issue 54 §4): connection errors retried within the wait budget,
wake-ups a waiter consumed and did not use passed on, release messages read by the grammar of WIRE.md 6.5 (1.1).

Each test raises the safety poll to 10 s, so that only the mechanism under test can wake a waiter in time."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import wirelock
import wirelock._wait


@pytest.fixture(autouse=True)
def slow_safety_poll(monkeypatch):
    monkeypatch.setattr(wirelock._wait, "SAFETY_POLL", 10.0)


def _until(predicate, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def _waiter(client, name, out, key, **kwargs):
    def run():
        try:
            out[key] = client.mutex.acquire(name, ttl=5.0, wait=kwargs.pop("wait", 10.0), **kwargs)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out[key] = err
        out[key + "_at"] = time.monotonic()

    thread = threading.Thread(target=run, name=key, daemon=True)
    thread.start()
    return thread


# -- release messages (WIRE.md 6.5) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", ["registry:a b", "registry:x 0123456789abcdef", "0", "registry:a>b"])
def test_foreign_release_wakes_a_waiter(make_client, r, payload):
    """A payload of none of the four forms is another library's release (Spring's ``<registry key>:<name>``,
    Redisson's ``0``): a broadcast from another process. 1.0 read the first two as ``told`` (waking nobody)."""
    client = make_client()
    r.set("wlp:{spring}", "another library's holder", px=30_000)
    out = {}
    thread = _waiter(client, "spring", out, "hold")
    _until(lambda: r.zrange("wlp:{spring}:waiting", 0, -1) == [client.origin])  # subscribed and lined up
    r.delete("wlp:{spring}")  # the other library releases…
    sent = time.monotonic()
    assert r.publish("wlp:{spring}:released", payload) == 1  # …and announces it its way
    thread.join(5)
    assert isinstance(out["hold"], wirelock.MutexHold), out
    assert out["hold_at"] - sent < 1.0  # the message woke it, not the holder's TTL (30 s) or the poll (10 s)
    out["hold"].release()


def test_own_broadcast_and_other_process_named_wake_nobody(make_client, r):
    """The grammar's other side: our own broadcast and a wake-up naming another process are not for us."""
    client = make_client()
    r.set("wlp:{quiet}", "holder", px=30_000)
    out = {}
    thread = _waiter(client, "quiet", out, "hold", wait=1.5)
    _until(lambda: r.zrange("wlp:{quiet}:waiting", 0, -1) == [client.origin])
    r.delete("wlp:{quiet}")
    r.publish("wlp:{quiet}:released", client.origin)
    r.publish("wlp:{quiet}:released", "0123456789abcdef>fedcba9876543210")
    time.sleep(0.3)
    assert "hold" not in out  # still asleep
    r.publish("wlp:{quiet}:released", "0123456789abcdef")  # another process's broadcast
    thread.join(5)
    assert isinstance(out["hold"], wirelock.MutexHold), out
    out["hold"].release()


# -- connection errors during a wait --------------------------------------------------------------------------------


def _flaky(monkeypatch, client, fail, script="acquire"):
    """Makes ``client``'s tries of ``script`` raise while ``fail(count)`` says so (counting the failures)."""
    real = client._script
    failures = []

    def run(name, keys, args):
        if name == script and fail(len(failures)):
            failures.append(name)
            raise redis.exceptions.ConnectionError("Error 104 while writing to socket. Connection reset by peer.")
        return real(name, keys, args)

    monkeypatch.setattr(client, "_script", run)
    return failures


def test_connection_reset_during_a_wait_is_retried(make_client, monkeypatch):
    a, b = make_client(), make_client()
    hold = a.mutex.acquire("flaky", ttl=0.3)
    failures = _flaky(monkeypatch, b, lambda count: count < 3)
    second = b.mutex.acquire("flaky", ttl=1.0, wait=3.0)
    assert len(failures) == 3
    assert second.fence > hold.fence
    second.release()


def test_a_timeout_during_a_wait_is_retried(make_client, monkeypatch):
    a, b = make_client(), make_client()
    a.mutex.acquire("slow", ttl=0.2)
    real = b._script
    timeouts = []

    def run(name, keys, args):
        if name == "acquire" and not timeouts:
            timeouts.append(name)
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return real(name, keys, args)

    monkeypatch.setattr(b, "_script", run)
    b.mutex.acquire("slow", ttl=1.0, wait=3.0).release()
    assert timeouts == ["acquire"]


def test_the_last_connection_error_is_raised_when_the_budget_runs_out(make_client, monkeypatch):
    client = make_client()
    failures = _flaky(monkeypatch, client, lambda count: True)
    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError, match="reset by peer"):
        client.mutex.acquire("down", ttl=1.0, wait=0.3)  # not Contended: nobody holds it, the server is "down"
    assert time.monotonic() - started >= 0.29
    assert len(failures) > 2  # retried on the backoff within the budget
    failures.clear()
    with pytest.raises(redis.exceptions.ConnectionError):
        client.mutex.acquire("down", ttl=1.0)  # a single try: at once
    assert len(failures) == 1


def test_a_server_that_is_down_fails_the_wait_with_its_error():
    """A real refused connection (no redis-py retry), the version check included."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    conn = redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    client = wirelock.Client(conn, listen=False)
    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError):
        client.semaphore.acquire("pool", limit=2, ttl=1.0, wait=0.3)
    assert 0.29 <= time.monotonic() - started < 2.0
    client.close()
    conn.close()


# -- wake-ups consumed and not used ---------------------------------------------------------------------------------


def _fail_after(monkeypatch, client, armed, thread_name=None):
    """After ``armed`` is set, ``client``'s acquire tries (of the thread ``thread_name``, or any) raise an exception
    that is not a connection error: the waiter leaves with the wake-up it consumed."""
    real = client._script

    def run(name, keys, args):
        if name == "acquire" and armed.is_set() and thread_name in (None, threading.current_thread().name):
            raise RuntimeError("the application gave up")
        return real(name, keys, args)

    monkeypatch.setattr(client, "_script", run)


def test_consumed_wake_up_is_passed_to_the_next_process(make_client, r, monkeypatch):
    a, b, c = make_client(), make_client(), make_client()
    hold = a.mutex.acquire("turn", ttl=30.0)
    armed = threading.Event()
    _fail_after(monkeypatch, b, armed)
    out = {}
    tb = _waiter(b, "turn", out, "b")
    _until(lambda: r.zrange("wlp:{turn}:waiting", 0, -1) == [b.origin])
    tc = _waiter(c, "turn", out, "c")
    _until(lambda: r.zrange("wlp:{turn}:waiting", 0, -1) == [b.origin, c.origin])
    armed.set()
    released = time.monotonic()
    hold.release()  # names b; b's waiter wakes, its try fails: b has no other waiter, so it runs pass-on → c
    tb.join(5)
    assert isinstance(out["b"], RuntimeError), out
    tc.join(5)
    assert isinstance(out["c"], wirelock.MutexHold), out
    # Passed on at once: not when b's channel stops lingering (2 s), nor at c's safety poll (10 s).
    assert out["c_at"] - released < 1.0
    assert r.zrange("wlp:{turn}:waiting", 0, -1) in ([], [c.origin])  # b left the line
    out["c"].release()


def test_consumed_wake_up_is_passed_to_another_local_waiter(make_client, r, monkeypatch):
    a, b = make_client(), make_client()
    hold = a.mutex.acquire("local-turn", ttl=30.0)
    armed = threading.Event()
    _fail_after(monkeypatch, b, armed, thread_name="first")
    out = {}
    first = _waiter(b, "local-turn", out, "first")
    _until(lambda: r.zrange("wlp:{local-turn}:waiting", 0, -1) == [b.origin])
    second = _waiter(b, "local-turn", out, "second")
    time.sleep(0.3)  # the second queues behind the first, tries once, and sleeps
    assert "second" not in out
    armed.set()
    released = time.monotonic()
    hold.release()  # names b: its longest-waiting waiter (the first) wakes, fails, and hands the wake-up on
    first.join(5)
    assert isinstance(out["first"], RuntimeError), out
    second.join(5)
    assert isinstance(out["second"], wirelock.MutexHold), out
    assert out["second_at"] - released < 1.0
    out["second"].release()


def test_wake_up_consumed_then_out_of_budget_after_errors_is_passed_on(make_client, r, monkeypatch):
    """A waiter woken whose tries then fail on connection errors until its budget runs out raises the error and
    passes the wake-up on."""
    a, b, c = make_client(), make_client(), make_client()
    hold = a.mutex.acquire("budget", ttl=30.0)
    armed = threading.Event()
    real = b._script

    def run(name, keys, args):
        if name == "acquire" and armed.is_set():
            raise redis.exceptions.ConnectionError("Connection reset by peer")
        return real(name, keys, args)

    monkeypatch.setattr(b, "_script", run)
    out = {}
    tb = _waiter(b, "budget", out, "b", wait=1.5)
    _until(lambda: r.zrange("wlp:{budget}:waiting", 0, -1) == [b.origin])
    tc = _waiter(c, "budget", out, "c")
    _until(lambda: r.zrange("wlp:{budget}:waiting", 0, -1) == [b.origin, c.origin])
    armed.set()
    hold.release()  # names b, whose tries fail until its 1.5 s are spent
    tb.join(5)
    assert isinstance(out["b"], redis.exceptions.ConnectionError), out
    tc.join(5)
    assert isinstance(out["c"], wirelock.MutexHold), out
    assert out["c_at"] - out["b_at"] < 1.0  # right after b gave up, not at c's poll or b's channel drop
    out["c"].release()

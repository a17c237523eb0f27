"""Fixtures: a throwaway redis-server on a free loopback port for the whole session."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
import redis

import wirelock


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not on PATH")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    probe = redis.Redis.from_url(url)
    for _ in range(200):
        try:
            probe.ping()
            break
        except redis.exceptions.ConnectionError:
            if proc.poll() is not None:
                raise RuntimeError("redis-server exited at start")
            time.sleep(0.025)
    else:
        proc.kill()
        raise RuntimeError("redis-server did not answer")
    probe.close()
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def r(redis_url):
    """A plain redis-py connection on an empty database."""
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    conn.flushall()
    yield conn
    conn.close()


@pytest.fixture
def make_client(redis_url, r):
    """Builds wirelock clients (each with its own pool and listener, like separate processes); closed after."""
    made = []

    def make(**kwargs) -> wirelock.Client:
        client = wirelock.Client.from_url(redis_url, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
        client.redis.close()


@pytest.fixture
def client(make_client):
    return make_client()

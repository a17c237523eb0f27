"""The Python side of examples/examples/with_python.rs: redis-py's own lock, on the same Redis and resource.

    python shared_counter.py REDIS_URL RESOURCE COUNTER N

Adds 1 to COUNTER N times, each read-modify-write under ``redis.lock(RESOURCE)``: redis-py's ``Lock``, unchanged.
The Rust side takes the same lock with ``KeyLayout::plain()``, so neither ever sees the other's update lost.
"""

import sys

import redis


def main(url, resource, counter, n):
    client = redis.Redis.from_url(url)
    client.ping()
    print("ready", flush=True)
    for _ in range(n):
        # timeout: the lock's TTL (always give one: redis-py's default is none, and a crashed holder then blocks
        # the lock forever); sleep: how often a waiter polls (redis-py announces nothing).
        with client.lock(resource, timeout=10, sleep=0.005, blocking_timeout=30):
            value = int(client.get(counter) or 0)
            client.set(counter, value + 1)
    print(f"python: {n} updates under redis-py's lock", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

"""The Python side of examples/examples/with_python.rs: a Python package's own lock, on the same Redis and resource.

    python shared_counter.py REDIS_URL RESOURCE COUNTER N [redis-py | python-redis-lock]

Adds 1 to COUNTER N times, each read-modify-write under the package's lock, unchanged: redis-py's
``redis.lock(RESOURCE)`` (key ``RESOURCE``; the Rust side uses ``KeyLayout::plain()``), or python-redis-lock's
``redis_lock.Lock(client, RESOURCE)`` (key ``lock:RESOURCE``; the Rust side uses ``KeyLayout::python_redis_lock()``).
Neither side ever sees the other's update lost.
"""

import sys

import redis


def lock_for(client, peer, resource):
    if peer == "python-redis-lock":
        import redis_lock

        # expire: the lock's TTL in whole seconds (always give one: its default is none, and a crashed holder then
        # blocks the lock forever). Its waiters block on a signal list, which our release pushes too.
        return redis_lock.Lock(client, resource, expire=10)
    # timeout: the lock's TTL (always give one: redis-py's default is none); sleep: how often a waiter polls
    # (redis-py announces nothing).
    return client.lock(resource, timeout=10, sleep=0.005, blocking_timeout=30)


def main(url, resource, counter, n, peer):
    client = redis.Redis.from_url(url)
    client.ping()
    print("ready", flush=True)
    for _ in range(n):
        with lock_for(client, peer, resource):
            value = int(client.get(counter) or 0)
            client.set(counter, value + 1)
    print(f"python: {n} updates under {peer}'s lock", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "redis-py")

"""The client: the face of the package, wiring the primitives onto one engine (a connection pool, the scripts, the
protocol version check and the release listener; see :mod:`wirelock.connection` and :mod:`wirelock._wait`)."""

from __future__ import annotations

from typing import Any

import redis

from ._wait import Engine
from .connection import DEFAULT_FENCE_COUNTER_EXPIRY, FENCED_WRITES, compatible_version
from .election import Elections
from .keys import DEFAULT_PREFIX
from .mutex import Mutex
from .rwlock import ReadWriteLocks
from .scripts import ScriptSet
from .semaphore import Semaphores

__all__ = ["Client", "FENCED_WRITES", "compatible_version"]


class Client(Engine):
    """A wire-protocol client on one Redis server (single instance or Sentinel master).

    >>> client = Client(redis.Redis(), prefix="app:")
    >>> with client.mutex.acquire("orders", ttl=10.0, wait=5.0) as hold:
    ...     hold.fence

    ``listen=False`` disables the release listener (waiters then poll on a backoff). The client is thread-safe.
    Besides the primitives (``mutex``, ``semaphore``, ``rwlock``, ``election``) it makes guarded writes
    (:meth:`fenced_write`), draws fences for a lock another library holds (:meth:`peer_fence`) and runs the protocol
    version check (:meth:`check_version`).
    """

    def __init__(
        self,
        redis_client: "redis.Redis",
        *,
        prefix: str = DEFAULT_PREFIX,
        scripts: ScriptSet | None = None,
        listen: bool = True,
        operation_timeout: float = 2.0,
        fence_counter_expiry: float | None = DEFAULT_FENCE_COUNTER_EXPIRY,
    ) -> None:
        super().__init__(
            redis_client,
            prefix=prefix,
            scripts=scripts,
            listen=listen,
            operation_timeout=operation_timeout,
            fence_counter_expiry=fence_counter_expiry,
        )
        self.mutex = Mutex(self)
        self.semaphore = Semaphores(self)
        self.rwlock = ReadWriteLocks(self)
        self.election = Elections(self)

    @classmethod
    def from_url(cls, url: str, *, operation_timeout: float = 2.0, **kwargs: Any) -> "Client":
        """A client on ``redis://[user:password@]host:port/db`` with socket timeouts of ``operation_timeout``, speaking
        RESP2 (the protocol's replies are specified in RESP2 terms; redis-py 8 would otherwise negotiate RESP3)."""
        connection = redis.Redis.from_url(
            url, socket_timeout=operation_timeout, socket_connect_timeout=operation_timeout, protocol=2
        )
        return cls(connection, operation_timeout=operation_timeout, **kwargs)

    def __enter__(self) -> "Client":
        return self

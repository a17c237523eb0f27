"""The fenced mutex (WIRE.md section 8)."""

from __future__ import annotations

from collections.abc import Callable

from ._wait import TRANSIENT, Engine, Refusal, give_back, wait_for
from .errors import ReleaseOutcome
from .hold import Hold
from .keys import ResourceKeys, mutex_keys
from .timing import Deadline, now_ns, ttl_ms
from .tokens import new_token

_OUTCOMES = {1: ReleaseOutcome.RELEASED, 0: ReleaseOutcome.ALREADY_EXPIRED, -1: ReleaseOutcome.OWNED_BY_OTHER}


class MutexHold(Hold):
    """A held mutex. ``fence`` is its fencing token (``None`` when acquired without fencing)."""

    kind = "mutex"

    def __init__(self, client, keys: ResourceKeys, token: str, ttl_ms_: int, start_ns: int, fence: int | None):
        super().__init__(client, keys.name, token, ttl_ms_, start_ns, fence)
        self.keys = keys

    def _extend_call(self, ms: int) -> int:
        return self._client._script("extend", [self.keys.lock], [self._token, str(ms)])

    def _release_call(self) -> ReleaseOutcome:
        return _release(self._client, self.keys, self._token)


def _release(client: Engine, keys: ResourceKeys, token: str) -> ReleaseOutcome:
    code = client._script(
        "release", [keys.lock, keys.released, keys.awaited, keys.waiting], [token, client.origin, "0"]
    )
    if code == 1 and client._listener is not None:
        client._listener.wake_local(keys.released)  # our own waiters: the release skipped our origin
    return _OUTCOMES[code]


class Mutex:
    """Fenced mutexes of one client: ``client.mutex.acquire(name, ttl=…)``."""

    def __init__(self, client: Engine) -> None:
        self._client = client

    def keys(self, name: str) -> ResourceKeys:
        return mutex_keys(self._client.prefix, name)

    def acquire(
        self,
        name: str,
        ttl: float,
        *,
        wait: float | None = None,
        fencing: bool = True,
        label: str | None = None,
        renew: bool = False,
        on_lost: Callable[[Hold], None] | None = None,
    ) -> MutexHold:
        """Acquires mutex ``name`` for ``ttl`` seconds.

        ``wait=None`` makes one try; otherwise waits up to ``wait`` seconds (woken by release messages, retrying
        by the holder's TTL and a safety poll). Raises :class:`Contended` when it did not get it, or the last
        connection error (redis-py's ``ConnectionError``/``TimeoutError``, retried within the budget) when the
        budget ran out on one. ``fencing`` draws a fence with the grant. ``label`` is a holder label carried in the
        token. ``renew`` starts the background renewal (every ttl/3); ``on_lost`` is called when it finds the hold
        lost.
        """
        keys = self.keys(name)
        ms = ttl_ms(ttl)
        deadline = Deadline(wait)
        if label is not None:
            new_token(label)  # validates before any I/O
        client = self._client

        def attempt(origin: str | None) -> MutexHold | Refusal:
            token = new_token(label)  # a fresh token for every try
            start = now_ns()
            try:
                if fencing:
                    if origin:
                        reply = client._script(
                            "acquire",
                            [keys.lock, keys.fence, keys.awaited, keys.waiting],
                            [token, str(ms), "1", "", client.fence_idle, origin],
                        )
                    else:
                        reply = client._script(
                            "acquire",
                            [keys.lock, keys.fence, keys.awaited],
                            [token, str(ms), "1", "", client.fence_idle],
                        )
                    granted, fence = reply[0] == 1, (reply[1] if reply[0] == 1 else None)
                    pttl = None if granted else reply[1]
                else:
                    granted = bool(client.redis.set(keys.lock, token, nx=True, px=ms))
                    fence = None
                    pttl = None
                    if not granted:
                        if origin:
                            pttl = client._script("holder", [keys.lock, keys.awaited, keys.waiting], [origin])
                        else:
                            pttl = client._script("holder", [keys.lock, keys.awaited], [])
                        if pttl == -2:
                            return Refusal(again=True)
            except TRANSIENT:
                give_back(f"mutex {name!r}", lambda: _release(client, keys, token), ms)
                raise
            if not granted:
                return Refusal(wait_ms=pttl, never_expires=pttl == -1)
            hold = MutexHold(client, keys, token, ms, start, fence)
            if now_ns() >= hold.valid_until_ns:
                # The grant's validity was spent before its reply arrived: give it back, do not use it.
                give_back(f"mutex {name!r}", hold.release, ms)
                return Refusal(again=False, wait_ms=0)
            return hold

        hold = wait_for(
            client,
            name=name,
            channel=keys.released,
            attempt=attempt,
            deadline=deadline,
            lines_up=True,
            lock=keys.lock,
            waiting=keys.waiting,
            promised=keys.promised,
        )
        assert isinstance(hold, MutexHold)
        hold._arm(renew, on_lost)
        return hold

    def try_acquire(self, name: str, ttl: float, **kwargs) -> MutexHold:
        """One try (``acquire`` with ``wait=None``)."""
        return self.acquire(name, ttl, wait=None, **kwargs)

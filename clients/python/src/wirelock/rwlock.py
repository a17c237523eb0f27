"""The read-write lock (WIRE.md section 13): many readers or one fenced writer, writers first, in arrival order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ._wait import TRANSIENT, Engine, Refusal, give_back, wait_for
from .errors import InvalidArgument, Lost, ReleaseOutcome
from .hold import Hold
from .keys import ResourceKeys, rwlock_keys
from .timing import Deadline, now_ns, ttl_ms
from .tokens import new_token, waiter_id

_OUTCOMES = {
    1: ReleaseOutcome.RELEASED,
    2: ReleaseOutcome.RELEASED_LATE,
    0: ReleaseOutcome.ALREADY_EXPIRED,
    -1: ReleaseOutcome.OWNED_BY_OTHER,
}
MIN_WAITER_TTL_MS = 100


@dataclasses.dataclass(frozen=True)
class ReadWriteState:
    writer: bool
    readers: int
    waiting_writers: int


def _base(keys: ResourceKeys) -> list[str]:
    return [keys.lock, keys.readers, keys.queue, keys.heartbeats]


def _release(client: Engine, keys: ResourceKeys, token: str) -> ReleaseOutcome:
    code = client._script("rw-release", _base(keys) + [keys.released, keys.awaited], [token, client.origin, "0"])
    if code in (1, 2) and client._listener is not None:
        client._listener.wake_local(keys.released)
    return _OUTCOMES[code]


class _RWHold(Hold):
    def __init__(self, client, keys: ResourceKeys, token, ttl_ms_, start_ns, fence):
        super().__init__(client, keys.name, token, ttl_ms_, start_ns, fence)
        self.keys = keys

    def _extend_call(self, ms: int, downgrade: bool = False) -> int:
        return self._client._script(
            "rw-extend",
            _base(self.keys) + [self.keys.released, self.keys.awaited],
            [self._token, str(ms), "1" if downgrade else "0", self._client.origin, "0"],
        )

    def _lost_reason(self, code: int) -> str:
        return "the hold is gone (expired, or taken after expiring)"

    def _release_call(self) -> ReleaseOutcome:
        return _release(self._client, self.keys, self._token)


class ReadHold(_RWHold):
    """A read hold. ``epoch`` is the writers' counter as it stood (the last writer's fence, 0 before any): every
    later writer's fence is above it. A read hold has no fence of its own (``fence`` is ``None``)."""

    kind = "read"

    def __init__(self, client, keys, token, ttl_ms_, start_ns, epoch: int):
        super().__init__(client, keys, token, ttl_ms_, start_ns, None)
        self.epoch = epoch


class WriteHold(_RWHold):
    """A write hold, with its ``fence`` from the read-write lock's own counter."""

    kind = "write"

    def downgrade(self, ttl: float | None = None) -> ReadHold:
        """Turns this write hold into a read hold in one step (this hold then counts as released)."""
        ms = self.ttl_ms if ttl is None else ttl_ms(ttl)
        self.stop_renewal()
        with self._lock:
            if self.outcome is not None:
                raise Lost(self.name, "released")
            start = now_ns()
            if self._extend_call(ms, downgrade=True) != 1:
                self._mark_lost(self._lost_reason(0))
                raise Lost(self.name, self.lost_reason or "lost")
            self.outcome = ReleaseOutcome.RELEASED
            return ReadHold(self._client, self.keys, self._token, ms, start, self.fence or 0)


class ReadWriteLocks:
    """Read-write locks of one client: ``client.rwlock.read(name, ttl=…)``, ``client.rwlock.write(name, ttl=…)``."""

    def __init__(self, client: Engine) -> None:
        self._client = client

    def keys(self, name: str) -> ResourceKeys:
        return rwlock_keys(self._client.prefix, name)

    def read(
        self,
        name: str,
        *,
        ttl: float,
        wait: float | None = None,
        renew: bool = False,
        on_lost: Callable[[Hold], None] | None = None,
    ) -> ReadHold:
        """Joins the readers of ``name`` for ``ttl`` seconds (refused while a writer holds or waits)."""
        keys = self.keys(name)
        ms = ttl_ms(ttl)
        deadline = Deadline(wait)
        client = self._client

        def attempt(_origin: str | None) -> ReadHold | Refusal:
            token = new_token()
            start = now_ns()
            try:
                reply = client._script("rw-read", _base(keys) + [keys.fence, keys.awaited], [token, str(ms), "1"])
            except TRANSIENT:
                give_back(f"read lock {name!r}", lambda: _release(client, keys, token), ms)
                raise
            if reply[0] == 0:
                return Refusal(wait_ms=reply[1] if reply[1] >= 0 else None, never_expires=reply[1] == -1)
            hold = ReadHold(client, keys, token, ms, start, reply[1])
            if now_ns() >= hold.valid_until_ns:
                give_back(f"read lock {name!r}", hold.release, ms)
                return Refusal(wait_ms=0)
            return hold

        hold = wait_for(
            client, name=name, channel=keys.released, attempt=attempt, deadline=deadline, wake_next_on_success=True
        )
        assert isinstance(hold, ReadHold)
        hold._arm(renew, on_lost)
        return hold

    def write(
        self,
        name: str,
        *,
        ttl: float,
        wait: float | None = None,
        waiter_ttl: float = 5.0,
        renew: bool = False,
        on_lost: Callable[[Hold], None] | None = None,
    ) -> WriteHold:
        """Takes the write lock of ``name`` for ``ttl`` seconds. A waiting writer holds a place in the writers'
        queue (kept alive every ``waiter_ttl``/3 by its tries; every process on one name should use the same
        ``waiter_ttl``), which keeps new readers out."""
        keys = self.keys(name)
        ms = ttl_ms(ttl)
        wms = ttl_ms(waiter_ttl, "waiter_ttl")
        if wms < MIN_WAITER_TTL_MS:
            raise InvalidArgument(f"waiter_ttl is at least {MIN_WAITER_TTL_MS} ms")
        deadline = Deadline(wait)
        client = self._client
        fair_keys = [
            keys.lock, keys.fence, keys.queue, keys.heartbeats, keys.released, keys.awaited, keys.grants, keys.readers,
        ]
        state = {"token": new_token(), "placed": False, "tries": 0}

        def drop(token: str) -> None:
            give_back(f"write lock {name!r}", lambda: _release(client, keys, token), max(ms, wms))

        def attempt(_origin: str | None) -> WriteHold | Refusal:
            token = state["token"]  # one token for the whole wait: it is the writer's place in the queue
            waiting = deadline.at is not None and state["tries"] > 0
            state["tries"] += 1
            start = now_ns()
            try:
                reply = client._script(
                    "fair-acquire",
                    fair_keys,
                    # ARGV[10] empty: a read-write lock's counter never expires (its readers read it as their epoch).
                    [token, str(ms), "1", "", str(wms), "1" if waiting else "0", client.origin, "0", "", ""],
                )
            except TRANSIENT:
                # Unsure whether this token holds the lock or a place: give it back, and go on with a new token so
                # that no later try of ours can be granted under the token being given back.
                state["token"], state["placed"] = new_token(), False
                drop(token)
                raise
            state["placed"] = state["placed"] or waiting
            if reply[0] == 1:
                hold = WriteHold(client, keys, token, ms, start, reply[1])
                if now_ns() >= hold.valid_until_ns:
                    state["token"], state["placed"] = new_token(), False
                    drop(token)
                    return Refusal(wait_ms=0)
                return hold
            pttl = reply[1]
            return Refusal(wait_ms=pttl if pttl >= 0 else None, never_expires=pttl == -1)

        try:
            hold = wait_for(
                client,
                name=name,
                channel=keys.released,
                attempt=attempt,
                deadline=deadline,
                waiter_id=lambda: waiter_id(state["token"]),
                max_sleep=wms / 3000,
            )
        except BaseException:
            if state["placed"]:
                drop(state["token"])  # leave the queue: a dead place would keep readers out for a waiter TTL
            raise
        assert isinstance(hold, WriteHold)
        hold._arm(renew, on_lost)
        return hold

    def state(self, name: str) -> ReadWriteState:
        """Whether a writer holds, the live readers and the live waiting writers (read only)."""
        writer, readers, waiting = self._client._script("rw-state", _base(self.keys(name)), [])
        return ReadWriteState(bool(writer), readers, waiting)

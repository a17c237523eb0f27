"""The semaphore (WIRE.md section 12): at most ``limit`` slots held at once, each permit with its own expiry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ._wait import TRANSIENT, Engine, Refusal, give_back, wait_for
from .errors import InvalidArgument, LimitMismatch, ReleaseOutcome
from .hold import Hold
from .keys import ResourceKeys, semaphore_keys
from .timing import Deadline, now_ns, ttl_ms
from .tokens import new_token

MAX_LIMIT = 10_000
_OUTCOMES = {1: ReleaseOutcome.RELEASED, 2: ReleaseOutcome.RELEASED_LATE, 0: ReleaseOutcome.ALREADY_EXPIRED}


@dataclasses.dataclass(frozen=True)
class SemaphoreState:
    """``limit``: the limit its holders use (``None`` when nobody holds a permit); ``held``: slots held by live
    permits."""

    limit: int | None
    held: int


class Permit(Hold):
    """A held semaphore permit: ``slots`` (the numbered slots it holds) and ``fence`` (from the semaphore's own
    counter; the fences one slot sees strictly increase)."""

    kind = "semaphore"

    def __init__(self, client, keys: ResourceKeys, token, ttl_ms_, start_ns, fence, slots: tuple[int, ...], limit: int):
        super().__init__(client, keys.name, token, ttl_ms_, start_ns, fence)
        self.keys = keys
        self.slots = slots
        self.limit = limit

    def _extend_call(self, ms: int) -> int:
        k = self.keys
        return self._client._script("sem-extend", [k.permits, k.slots, k.permit_grants, k.limit], [self._token, str(ms)])

    def _release_call(self) -> ReleaseOutcome:
        return _release(self._client, self.keys, self._token)


def _release(client: Engine, keys: ResourceKeys, token: str) -> ReleaseOutcome:
    code = client._script(
        "sem-release",
        [keys.permits, keys.slots, keys.permit_grants, keys.limit, keys.released, keys.awaited],
        [token, client.origin, "0"],
    )
    if code in (1, 2) and client._listener is not None:
        client._listener.wake_local(keys.released)
    return _OUTCOMES[code]


class Semaphores:
    """Semaphores of one client: ``client.semaphore.acquire(name, limit=…, ttl=…)``."""

    def __init__(self, client: Engine) -> None:
        self._client = client

    def keys(self, name: str) -> ResourceKeys:
        return semaphore_keys(self._client.prefix, name)

    def acquire(
        self,
        name: str,
        *,
        limit: int,
        ttl: float,
        n: int = 1,
        wait: float | None = None,
        fencing: bool = True,
        renew: bool = False,
        on_lost: Callable[[Hold], None] | None = None,
    ) -> Permit:
        """Takes ``n`` of the ``limit`` slots of semaphore ``name`` for ``ttl`` seconds.

        Every client of one semaphore must use the same ``limit`` (:class:`LimitMismatch` otherwise). ``wait``,
        ``renew`` and ``on_lost`` as for the mutex; raises :class:`Contended` when too few slots are free.
        """
        keys = self.keys(name)
        ms = ttl_ms(ttl)
        for what, value in (("limit", limit), ("n", n)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgument(f"{what} is an integer, not {value!r}")
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidArgument(f"a semaphore's limit is 1 to {MAX_LIMIT}, not {limit}")
        if not 1 <= n <= limit:
            raise InvalidArgument(f"n is 1 to the limit ({limit}), not {n}")
        deadline = Deadline(wait)
        client = self._client
        k = [keys.permits, keys.slots, keys.permit_grants, keys.limit, keys.fence, keys.awaited]

        def attempt(_origin: str | None) -> Permit | Refusal:
            token = new_token()
            start = now_ns()
            try:
                reply = client._script(
                    "sem-acquire", k, [token, str(n), str(ms), str(limit), "1" if fencing else "0", "", client.fence_idle]
                )
            except TRANSIENT:
                give_back(f"semaphore {name!r}", lambda: _release(client, keys, token), ms)
                raise
            if reply[0] == -1:
                raise LimitMismatch(name, int(reply[1]), limit)
            if reply[0] == 0:
                wait_ms, free = reply[1], reply[2]
                return Refusal(wait_ms=wait_ms if wait_ms >= 0 else None, wake_next=free > 0)
            fence = reply[1] if reply[1] >= 0 else None
            permit = Permit(client, keys, token, ms, start, fence, tuple(reply[2:]), limit)
            if now_ns() >= permit.valid_until_ns:
                give_back(f"semaphore {name!r}", permit.release, ms)
                return Refusal(wait_ms=0)
            return permit

        permit = wait_for(
            client,
            name=name,
            channel=keys.released,
            attempt=attempt,
            deadline=deadline,
            wake_next_on_success=True,
        )
        assert isinstance(permit, Permit)
        permit._arm(renew, on_lost)
        return permit

    def state(self, name: str) -> SemaphoreState:
        """The stored limit and the slots held by live permits (read only)."""
        keys = self.keys(name)
        limit, held = self._client._script("sem-state", [keys.permits, keys.slots, keys.permit_grants, keys.limit], [])
        return SemaphoreState(None if limit == -1 else limit, held)

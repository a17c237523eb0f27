"""Leader election (WIRE.md section 14): a lock whose grant writes the leader's record and whose fence is the term."""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable

from ._wait import TRANSIENT, Engine, Refusal, give_back, wait_for
from .errors import InvalidArgument, ReleaseOutcome
from .hold import Hold
from .keys import ResourceKeys, mutex_keys
from .timing import Deadline, now_ns, ttl_ms, valid_until_ns
from .tokens import new_token, validate_label

MAX_VALUE = 64 * 1024
_OUTCOMES = {1: ReleaseOutcome.RELEASED, 0: ReleaseOutcome.ALREADY_EXPIRED, -1: ReleaseOutcome.OWNED_BY_OTHER}


@dataclasses.dataclass(frozen=True)
class Leader:
    """The current leader as its record says: candidate ``id``, ``value``, ``term`` and its remaining lease."""

    id: str
    value: str
    term: int
    ttl: float


def _resign(client: Engine, keys: ResourceKeys, token: str, lease_ms: int, grace_ms: int) -> ReleaseOutcome:
    code = client._script(
        "resign",
        [keys.lock, keys.info, keys.released, keys.awaited, keys.leader, keys.given_back, keys.waiting, keys.promised],
        [token, client.origin, "0", str(lease_ms), str(grace_ms)],
    )
    if code == 1 and client._listener is not None:
        client._listener.wake_local(keys.released)
    return _OUTCOMES[code]


class Leadership(Hold):
    """A won election. ``term`` (= ``fence``) strictly increases per election. The leader stops trusting its
    leadership at the earlier of ``start + lease − drift`` and ``start + renew_deadline``."""

    kind = "election"

    def __init__(self, client, keys, token, lease_ms, start_ns, term, candidate, renew_deadline_ms, retry_ms, grace_ms):
        self._renew_deadline_ms = renew_deadline_ms
        super().__init__(client, keys.name, token, lease_ms, start_ns, term)
        self.keys = keys
        self.candidate = candidate
        self._retry_ms = retry_ms
        self._grace_ms = grace_ms

    @property
    def term(self) -> int:
        return self.fence  # type: ignore[return-value]

    def _validity(self, start_ns: int, ms: int) -> int:
        return min(valid_until_ns(start_ns, ms), start_ns + self._renew_deadline_ms * 1_000_000)

    def _default_renew_every(self) -> float:
        return self._retry_ms / 1000

    def _extend_call(self, ms: int) -> int:
        return self._client._script("election-renew", [self.keys.lock, self.keys.info], [self._token, str(ms)])

    def _release_call(self) -> ReleaseOutcome:
        return _resign(self._client, self.keys, self._token, self.ttl_ms, self._grace_ms)

    def resign(self) -> ReleaseOutcome:
        """Gives the leadership up (same as :meth:`release`)."""
        return self.release()

    def proclaim(self, value: str) -> bool:
        """Replaces the leader's value while this leadership holds (observers are told); false when it does not."""
        _check_value(value)
        k = self.keys
        return self._client._script("proclaim", [k.lock, k.info, k.leader], [self._token, value, self._client.origin, "0"]) == 1


def _check_value(value: str) -> None:
    if not isinstance(value, str):
        raise InvalidArgument("a leader's value is a str")
    if len(value.encode("utf-8")) > MAX_VALUE or any(unicodedata.category(ch) == "Cc" for ch in value):
        raise InvalidArgument("a leader's value is at most 64 KiB without control characters")


class Elections:
    """Leader elections of one client: ``client.election.campaign(name, candidate, …)``."""

    def __init__(self, client: Engine) -> None:
        self._client = client

    def keys(self, name: str) -> ResourceKeys:
        return mutex_keys(self._client.prefix, name)

    def campaign(
        self,
        name: str,
        candidate: str,
        value: str = "",
        *,
        lease: float = 15.0,
        renew_deadline: float | None = None,
        retry_period: float | None = None,
        wait: float | None = None,
        renew: bool = False,
        on_lost: Callable[[Hold], None] | None = None,
    ) -> Leadership:
        """Runs for leader of ``name`` as ``candidate`` (1–256 bytes, the token's label) with ``value``.

        Timing defaults to client-go's ratios: lease 15 s, renew deadline 10 s (2/3 of the lease), retry period
        2 s (2/15 of the lease). ``renew`` renews every retry period. ``wait=None`` is one try.
        """
        keys = self.keys(name)
        validate_label(candidate)
        _check_value(value)
        lease_ms = ttl_ms(lease, "lease")
        deadline_ms = ttl_ms(renew_deadline, "renew_deadline") if renew_deadline is not None else lease_ms * 2 // 3
        retry_ms = ttl_ms(retry_period, "retry_period") if retry_period is not None else max(lease_ms * 2 // 15, 10)
        if not retry_ms < deadline_ms <= lease_ms:
            raise InvalidArgument("retry_period < renew_deadline <= lease is required")
        grace_ms = max(retry_ms, 1000) + int(self._client.operation_timeout * 1000)
        deadline = Deadline(wait)
        client = self._client
        elect_keys = [
            keys.lock, keys.fence, keys.awaited, keys.info, keys.leader, keys.given_back, keys.waiting,
            keys.promised, keys.released,
        ]

        def attempt(origin: str | None) -> Leadership | Refusal:
            token = new_token(candidate)
            start = now_ns()
            try:
                reply = client._script(
                    "elect",
                    elect_keys,
                    [
                        token,
                        str(lease_ms),
                        "",
                        candidate,
                        value,
                        client.origin,
                        "0",
                        origin or "",
                        str(grace_ms),
                        client.fence_idle,
                    ],
                )
            except TRANSIENT:
                # Resign notes the token as given back, so a grant still on its way elects nobody.
                give_back(f"election {name!r}", lambda: _resign(client, keys, token, lease_ms, grace_ms), lease_ms)
                raise
            if reply[0] == 0:
                if reply[1] == -2:
                    return Refusal(again=True)
                return Refusal(wait_ms=reply[1] if reply[1] >= 0 else None, never_expires=reply[1] == -1)
            won = Leadership(client, keys, token, lease_ms, start, reply[1], candidate, deadline_ms, retry_ms, grace_ms)
            if now_ns() >= won.valid_until_ns:
                give_back(f"election {name!r}", won.release, lease_ms)
                return Refusal(wait_ms=0)
            return won

        won = wait_for(
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
        assert isinstance(won, Leadership)
        won._arm(renew, on_lost)
        return won

    def leader(self, name: str) -> Leader | None:
        """The current leader of ``name``, or ``None`` (read only)."""
        keys = self.keys(name)
        reply = self._client._script("leader", [keys.lock, keys.info], [])
        if not reply:
            return None
        cid, value, term, pttl = reply
        return Leader(cid, value or "", int(term), max(pttl, 0) / 1000)

"""Client-side time (WIRE.md section 7): validity from a monotonic clock started before the request, with drift."""

from __future__ import annotations

import random
import time

from .errors import InvalidArgument

MIN_TTL_MS = 10  # the protocol allows 1 ms; like the engine, this client refuses TTLs below 10 ms before sending
MAX_TTL_MS = 86_400_000
SAFETY_POLL = 1.0  # seconds: a waiter tries again at least this often even without a message (section 6)

now_ns = time.monotonic_ns  # CLOCK_MONOTONIC


def ttl_ms(ttl: float, what: str = "ttl") -> int:
    """A TTL in seconds as whole milliseconds, checked against the protocol's range."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidArgument(f"{what} is a number of seconds, not {ttl!r}")
    ms = round(ttl * 1000)
    if not MIN_TTL_MS <= ms <= MAX_TTL_MS:
        raise InvalidArgument(f"{what} must be {MIN_TTL_MS} ms to {MAX_TTL_MS} ms, not {ms} ms")
    return ms


def drift_ns(ttl_ms_: int) -> int:
    """``ttl / 100 + 2 ms``, in nanoseconds (exact: no rounding of the 1 %)."""
    return ttl_ms_ * 10_000 + 2_000_000


def valid_until_ns(start_ns: int, ttl_ms_: int) -> int:
    """``start + ttl − drift`` (saturating at ``start``): the monotonic instant until which a grant or extension
    whose request started at ``start_ns`` may be trusted."""
    return start_ns + max(ttl_ms_ * 1_000_000 - drift_ns(ttl_ms_), 0)


class Backoff:
    """Exponential backoff with full jitter: 5 ms doubling to 100 ms (the engine's default retry policy)."""

    def __init__(self, first: float = 0.005, cap: float = 0.100) -> None:
        self._step = first
        self._cap = cap

    def next(self) -> float:
        delay = random.uniform(0, self._step)
        self._step = min(self._step * 2, self._cap)
        return delay


class Deadline:
    """A wait budget on the monotonic clock (``None``: a single try)."""

    def __init__(self, wait: float | None) -> None:
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0):
            raise InvalidArgument(f"wait is a non-negative number of seconds or None, not {wait!r}")
        self.at = None if wait is None else now_ns() + int(wait * 1e9)

    def remaining(self) -> float:
        if self.at is None:
            return 0.0
        return max(self.at - now_ns(), 0) / 1e9

    def expired(self) -> bool:
        return self.remaining() <= 0

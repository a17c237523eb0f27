"""A hold: what an acquisition returns, with its fence, validity, extension, renewal and release."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions

from ._wait import Engine
from .errors import InvalidArgument, Lost, ReleaseOutcome
from .timing import now_ns, ttl_ms, valid_until_ns

log = logging.getLogger("wirelock")

_TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class Hold:
    """One acquisition of a resource. Use it as a context manager (released on exit).

    Attributes:
        name: the resource name.
        fence: the fencing token drawn with the grant (``None`` without one, e.g. a read hold).
        ttl_ms: the TTL (lease) the hold is extended with.
        acquired_ns: the ``time.monotonic_ns()`` instant the granting request started.
        lost: a ``threading.Event`` set when the hold is found lost (an extension found the key gone or taken, or
            the renewal could not extend it before its validity ran out).
        outcome: the :class:`ReleaseOutcome` once released.
    """

    kind = "hold"

    def __init__(self, client: Engine, name: str, token: str, ttl_ms_: int, start_ns: int, fence: int | None) -> None:
        self._client = client
        self.name = name
        self._token = token  # a capability: never logged, never shown
        self.ttl_ms = ttl_ms_
        self.fence = fence
        self.acquired_ns = start_ns
        self._valid_until_ns = self._validity(start_ns, ttl_ms_)
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self.outcome: ReleaseOutcome | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._on_lost: Callable[["Hold"], None] | None = None

    # -- validity ---------------------------------------------------------------------------------------------------

    def _validity(self, start_ns: int, ms: int) -> int:
        return valid_until_ns(start_ns, ms)

    @property
    def valid_until_ns(self) -> int:
        """The monotonic instant (``time.monotonic_ns()``) until which the hold may be trusted."""
        return self._valid_until_ns

    def remaining(self) -> float:
        """Seconds of validity left (0 when spent)."""
        return max(self._valid_until_ns - now_ns(), 0) / 1e9

    @property
    def valid(self) -> bool:
        """Not released, not lost, and within its validity."""
        return self.outcome is None and not self.lost.is_set() and now_ns() < self._valid_until_ns

    def check(self) -> None:
        """Raises :class:`Lost` unless :attr:`valid`."""
        if self.outcome is not None:
            raise Lost(self.name, "released")
        if self.lost.is_set():
            raise Lost(self.name, self.lost_reason or "lost")
        if now_ns() >= self._valid_until_ns:
            raise Lost(self.name, "its validity ran out")

    # -- primitive-specific -----------------------------------------------------------------------------------------

    def _extend_call(self, ms: int) -> int:  # 1 extended, 0 gone, -1 taken
        raise NotImplementedError

    def _release_call(self) -> ReleaseOutcome:
        raise NotImplementedError

    def _lost_reason(self, code: int) -> str:
        return "the key is gone (expired)" if code == 0 else "another holder has it"

    # -- extension and renewal --------------------------------------------------------------------------------------

    def extend(self, ttl: float | None = None) -> None:
        """Extends the hold to ``ttl`` seconds (default: its TTL) from now, owner-checked. The new validity counts
        from this request's start. Raises :class:`Lost` (and sets :attr:`lost`) when the key is gone or taken."""
        ms = self.ttl_ms if ttl is None else ttl_ms(ttl)
        with self._lock:
            if self.outcome is not None:
                raise Lost(self.name, "released")
            if self.lost.is_set():
                raise Lost(self.name, self.lost_reason or "lost")
            start = now_ns()
            code = self._extend_call(ms)
            if code == 1:
                self._valid_until_ns = self._validity(start, ms)
                return
            reason = self._lost_reason(code)
            self._mark_lost(reason)
            raise Lost(self.name, reason)

    def _mark_lost(self, reason: str) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        callback = self._on_lost
        if callback is not None:
            try:
                callback(self)
            except Exception:  # noqa: BLE001
                log.exception("wirelock: on_lost callback failed")

    def start_renewal(self, every: float | None = None, on_lost: Callable[["Hold"], None] | None = None) -> None:
        """Extends the hold in a background thread every ``every`` seconds (default ``ttl/3``) with its TTL.
        When an extension finds the hold gone or taken, or none succeeds before the validity runs out, sets
        :attr:`lost` and calls ``on_lost(hold)``."""
        if on_lost is not None:
            self._on_lost = on_lost
        if self._renewer is not None:
            return
        interval = every if every is not None else self._default_renew_every()
        if interval <= 0:
            raise InvalidArgument("the renewal interval must be positive")
        self._renewer = threading.Thread(
            target=self._renew_loop, args=(interval,), name=f"wirelock-renew-{self.kind}", daemon=True
        )
        self._renewer.start()

    def _arm(self, renew: bool, on_lost: Callable[["Hold"], None] | None, every: float | None = None) -> None:
        if on_lost is not None:
            self._on_lost = on_lost
        if renew:
            self.start_renewal(every)

    def _default_renew_every(self) -> float:
        return self.ttl_ms / 3000

    def _renew_loop(self, interval: float) -> None:
        pause = interval
        while not self._stop.wait(pause):
            try:
                self.extend()
                pause = interval
            except Lost:
                return
            except _TRANSIENT as err:
                left = self.remaining()
                if left <= 0:
                    self._mark_lost(f"its validity ran out while renewal failed ({err})")
                    return
                log.warning("wirelock: renewing %r failed (%s); retrying", self.name, err)
                pause = min(interval, max(left / 3, 0.005))
            except Exception as err:  # noqa: BLE001 - WRONGTYPE, ACL: the hold cannot be kept
                self._mark_lost(f"renewal failed: {err}")
                return

    def stop_renewal(self) -> None:
        self._stop.set()
        thread = self._renewer
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- release ----------------------------------------------------------------------------------------------------

    def release(self) -> ReleaseOutcome:
        """Gives the hold back (owner-checked) and returns what the server found. Idempotent: a second call
        returns the first outcome without I/O."""
        self.stop_renewal()
        with self._lock:
            if self.outcome is None:
                self.outcome = self._release_call()
            return self.outcome

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except Exception:
            if exc_type is None:
                raise
            log.exception("wirelock: release of %r failed while an exception was propagating", self.name)

    # -- fenced writes ----------------------------------------------------------------------------------------------

    def fenced_write(self, guard: str, op: str, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
        """A guarded write (section 16) with this hold's fence: see :meth:`Client.fenced_write`. Raises
        :class:`StaleFence` when a newer holder already wrote through ``guard``."""
        if self.fence is None:
            raise InvalidArgument(f"this {self.kind} hold has no fence")
        return self._client.fenced_write(guard, self.fence, op, keys, args)

    def __repr__(self) -> str:
        state = self.outcome.value if self.outcome else ("lost" if self.lost.is_set() else "held")
        return f"<{type(self).__name__} {self.name!r} fence={self.fence} {state} remaining={self.remaining():.3f}s>"

"""The waiting layer: the :class:`Engine` (a connection with its release listener) every primitive runs on, the
waiter's loop (WIRE.md section 6.6) they share, and the give-back of unsure grants (section 7)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import redis
import redis.exceptions

from .connection import DEFAULT_FENCE_COUNTER_EXPIRY, Connection
from .errors import Contended
from .keys import DEFAULT_PREFIX
from .listener import ReleaseListener
from .scripts import ScriptSet
from .timing import SAFETY_POLL, Backoff, Deadline, now_ns

log = logging.getLogger("wirelock")

TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
"""Errors a wait retries within its budget (the engine's ``Unavailable`` and ``Timeout``): no answer, or a connection
reset or refused. Every other error ends the wait at once."""

# What woke a waiter and is a turn it owes to somebody if it leaves without its try answering (a message's wake-up, or
# one passed on by a local waiter or our own release). A listener's reset and a fair waiter's told/granted are not.
_OWED = ("broadcast", "named", "local", "foreign")
# Wake-ups from a message a semaphore waiter passes on when its try saw room it could not use (never a local one, so
# that two local waiters never wake each other in a loop).
_FROM_A_MESSAGE = ("broadcast", "named", "told", "granted", "foreign")

T = TypeVar("T")


class Engine(Connection):
    """A :class:`~wirelock.connection.Connection` with the process's release listener: what the primitives run on
    (``listen=False``: no listener; waiters then poll on a backoff). :class:`wirelock.Client` is one."""

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
            operation_timeout=operation_timeout,
            fence_counter_expiry=fence_counter_expiry,
        )
        self._listener: ReleaseListener | None = ReleaseListener(self) if listen else None

    @property
    def origin(self) -> str:
        """This process's listener origin (empty without a listener)."""
        return self._listener.origin if self._listener is not None else ""

    def close(self) -> None:
        """Stops the release listener (holds are not released)."""
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclasses.dataclass
class Refusal:
    """A try that did not get the resource.

    ``wait_ms``: the server's hint (holder's PTTL, time until the earliest expiry), ``None`` when it gave none;
    ``never_expires``: the holder has no TTL; ``again``: try again at once (the holder left meanwhile);
    ``wake_next``: room was seen that this waiter could not use (wake the next local waiter).
    """

    wait_ms: int | None = None
    never_expires: bool = False
    again: bool = False
    wake_next: bool = False

    def contended(self, name: str) -> Contended:
        after = self.wait_ms / 1000 if self.wait_ms is not None and self.wait_ms >= 0 else None
        return Contended(name, after, self.never_expires)


def wait_for(
    client: Engine,
    *,
    name: str,
    channel: str,
    attempt: Callable[[str | None], T | Refusal],
    deadline: Deadline,
    lines_up: bool = False,
    lock: str | None = None,
    waiting: str | None = None,
    promised: str | None = None,
    waiter_id: Callable[[], str | None] | None = None,
    max_sleep: float | None = None,
    wake_next_on_success: bool = False,
) -> T:
    """Tries until ``attempt`` returns a hold or the deadline passes (then :class:`Contended`).

    ``attempt(origin)`` makes one try; ``origin`` is the listener's origin only while the release channel's
    subscription is confirmed and ``lines_up`` (the try may then line the process up), else ``None``. The protocol
    version check runs before every try (a no-op once it succeeded).

    A connection error or timeout of a try (:data:`TRANSIENT`) is retried within the budget on the backoff, as the
    engine retries ``Unavailable``/``Timeout``; when the budget runs out after one, that error is raised rather
    than :class:`Contended` (a single try, ``wait=None``, raises it at once). A wake-up this waiter consumed and
    did not turn into an answer (it leaves on an error, an exception, out of budget) is passed on: to another
    local waiter, or, with none, by the ``pass-on`` script (WIRE.md 6.5, 8.7).
    """
    listener = client._listener
    last_error: BaseException | None = None

    def one(origin: str | None) -> T | Refusal | None:
        """One try: its answer, or ``None`` after a transient error (kept in ``last_error``)."""
        nonlocal last_error
        try:
            client.check_version()
            answer = _again(attempt, origin)
        except TRANSIENT as err:
            if deadline.at is None:
                raise
            log.debug("wirelock: transient error while waiting for %r (%s); retrying", name, err)
            last_error = err
            return None
        last_error = None
        return answer

    def out_of_budget(result: Refusal | None) -> BaseException:
        if result is None and last_error is not None:
            return last_error
        return (result or Refusal()).contended(name)

    queued_behind = deadline.at is not None and listener is not None and listener.has_waiters(channel)
    result: T | Refusal | None = None
    if not queued_behind:
        # (1) a first try without an origin
        result = one(None)
        if result is not None and not isinstance(result, Refusal):
            return result
        if deadline.at is None or deadline.expired():
            raise out_of_budget(result)
    backoff = Backoff()
    if listener is None:
        while True:  # no listener: poll on the backoff
            threading.Event().wait(_sleep_for(result, backoff.next(), max_sleep, deadline))
            result = one(None)
            if result is not None and not isinstance(result, Refusal):
                return result
            if deadline.expired():
                raise out_of_budget(result)
    waiter = listener.register(
        channel, lock=lock, waiting=waiting, promised=promised, waiter_id=waiter_id() if waiter_id else None
    )
    owed: str | None = None  # a wake-up consumed and not yet answered by a try
    acquired = False
    try:
        woken_by: str | None = None
        if queued_behind:
            # A newcomer behind local waiters of the same resource tries when woken, or after one backoff step.
            woken_by = waiter.wait(min(0.1, deadline.remaining()))
            owed = woken_by if woken_by in _OWED else None
        else:
            # (2) subscribe; once confirmed, try again at once (a release may have come before the subscription)
            waiter.wait_confirmed(min(1.0, deadline.remaining()))
        while True:
            origin = listener.origin if lines_up and waiter.confirmed else None
            if waiter_id is not None:
                waiter.waiter_id = waiter_id()
            result = one(origin)
            if origin is not None:
                waiter.note_lined_up()
            if result is not None and not isinstance(result, Refusal):
                acquired, owed = True, None
                if wake_next_on_success:
                    listener.wake_local(channel, exclude=waiter)
                return result
            if result is not None:
                owed = None  # the try answered: the wake-up was used (another took the resource first)
                if result.wake_next and woken_by in _FROM_A_MESSAGE:
                    # Room this waiter could not use: pass the wake-up it got from a message to the next local
                    # waiter (only a message's wake-up, so that two local waiters never wake each other in a loop).
                    listener.wake_local(channel, exclude=waiter)
            if deadline.expired():
                raise out_of_budget(result)
            # (3) sleep until a message, the holder's PTTL (+1 ms), the safety poll, or the deadline; after a
            # transient error, or before the subscription is confirmed, on the backoff
            base = SAFETY_POLL if waiter.confirmed and result is not None else backoff.next()
            woken_by = waiter.wait(_sleep_for(result, base, max_sleep, deadline))
            if woken_by in _OWED:
                owed = woken_by
    finally:
        listener.unregister(waiter, acquired=acquired, owed=owed)


def _again(attempt: Callable[[str | None], T | Refusal], origin: str | None) -> T | Refusal:
    # A holder that left between the refusal and its follow-up read: try again at once (a few times).
    for _ in range(3):
        result = attempt(origin)
        if not (isinstance(result, Refusal) and result.again):
            return result
    return result


def _sleep_for(result: Any, base: float, max_sleep: float | None, deadline: Deadline) -> float:
    sleep = base
    if isinstance(result, Refusal) and result.wait_ms is not None and result.wait_ms >= 0:
        sleep = min(sleep, (result.wait_ms + 1) / 1000)
    if max_sleep is not None:
        sleep = min(sleep, max_sleep)
    return max(min(sleep, deadline.remaining()), 0)


def give_back(what: str, call: Callable[[], Any], ttl_ms: int) -> None:
    """Releases a grant we may hold but will not use (section 7): at once, and again in the background while the
    answer is unsure, until the key has expired anyway."""
    try:
        call()
        return
    except TRANSIENT as err:
        log.warning("wirelock: giving back %s failed (%s); retrying in the background", what, err)
    except Exception as err:  # noqa: BLE001
        log.warning("wirelock: giving back %s failed: %s", what, err)
        return
    until = now_ns() + ttl_ms * 1_000_000

    def retry() -> None:
        stop = threading.Event()
        while now_ns() < until:
            if stop.wait(0.1):
                return
            try:
                call()
                return
            except TRANSIENT:
                continue
            except Exception as err:  # noqa: BLE001
                log.warning("wirelock: giving back %s failed: %s", what, err)
                return

    threading.Thread(target=retry, name="wirelock-give-back", daemon=True).start()

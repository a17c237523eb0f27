"""The waiter's loop (WIRE.md section 6.6) shared by every primitive, and the give-back of unsure grants."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis.exceptions

from .errors import Contended
from .hold import Hold
from .timing import SAFETY_POLL, Backoff, Deadline, now_ns

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("wirelock")

TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


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
    client: "Client",
    *,
    name: str,
    channel: str,
    attempt: Callable[[str | None], Hold | Refusal],
    deadline: Deadline,
    lines_up: bool = False,
    lock: str | None = None,
    waiting: str | None = None,
    promised: str | None = None,
    waiter_id: Callable[[], str | None] | None = None,
    max_sleep: float | None = None,
    wake_next_on_success: bool = False,
) -> Hold:
    """Tries until ``attempt`` returns a hold or the deadline passes (then :class:`Contended`).

    ``attempt(origin)`` makes one try; ``origin`` is the listener's origin only while the release channel's
    subscription is confirmed and ``lines_up`` (the try may then line the process up), else ``None``.
    """
    listener = client._listener
    queued_behind = deadline.at is not None and listener is not None and listener.has_waiters(channel)
    result: Hold | Refusal | None = None
    if not queued_behind:
        # (1) a first try without an origin
        result = _again(attempt, None)
        if isinstance(result, Hold):
            return result
        if deadline.at is None or deadline.expired():
            raise result.contended(name)
    backoff = Backoff()
    if listener is None:
        while True:  # no listener: poll on the backoff
            assert isinstance(result, Refusal)
            sleep = _sleep_for(result, backoff.next(), max_sleep, deadline)
            threading.Event().wait(sleep)
            result = _again(attempt, None)
            if isinstance(result, Hold):
                return result
            if deadline.expired():
                raise result.contended(name)
    waiter = listener.register(
        channel, lock=lock, waiting=waiting, promised=promised, waiter_id=waiter_id() if waiter_id else None
    )
    try:
        if queued_behind:
            # A newcomer behind local waiters of the same resource tries when woken, or after one backoff step.
            waiter.wait(min(0.1, deadline.remaining()))
        else:
            # (2) subscribe; once confirmed, try again at once (a release may have come before the subscription)
            waiter.wait_confirmed(min(1.0, deadline.remaining()))
        woken_by: str | None = None
        while True:
            origin = listener.origin if lines_up and waiter.confirmed else None
            if waiter_id is not None:
                waiter.waiter_id = waiter_id()
            result = _again(attempt, origin)
            if origin is not None:
                waiter.note_lined_up()
            if isinstance(result, Hold):
                if wake_next_on_success:
                    listener.wake_local(channel, exclude=waiter)
                return result
            if result.wake_next and woken_by in ("broadcast", "named", "told", "granted"):
                # Room this waiter could not use: pass the wake-up it got from a message to the next local waiter
                # (only a message's wake-up, so that two local waiters never wake each other in a loop).
                listener.wake_local(channel, exclude=waiter)
            if deadline.expired():
                raise result.contended(name)
            # (3) sleep until a message, the holder's PTTL (+1 ms), the safety poll, or the deadline
            base = SAFETY_POLL if waiter.confirmed else backoff.next()
            woken_by = waiter.wait(_sleep_for(result, base, max_sleep, deadline))
    finally:
        listener.unregister(waiter)


def _again(attempt: Callable[[str | None], Hold | Refusal], origin: str | None) -> Hold | Refusal:
    # A holder that left between the refusal and its follow-up read: try again at once (a few times).
    for _ in range(3):
        result = attempt(origin)
        if not (isinstance(result, Refusal) and result.again):
            return result
    return result


def _sleep_for(result: Refusal, base: float, max_sleep: float | None, deadline: Deadline) -> float:
    sleep = base
    if result.wait_ms is not None and result.wait_ms >= 0:
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

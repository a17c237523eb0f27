"""The release listener (WIRE.md section 6): one pub/sub connection per client, waking local waiters on release
messages, passing named wake-ups on when no local waiter is left."""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Callable

import redis.exceptions

from .scripts import decode
from .tokens import new_origin

if TYPE_CHECKING:  # a layer below: counted by the import-graph check, and no cycle
    from .connection import Connection

log = logging.getLogger("wirelock")

LINGER = 2.0  # seconds a channel stays subscribed after its last local waiter left (saves re-subscribing)

# WIRE.md 6.5 (1.1): the four forms, read exactly.
_ORIGIN = r"(?P<origin>[0-9a-f]{16}|force-release|)"
_ID = r"[0-9a-f]{16}"
_BROADCAST = re.compile(_ORIGIN + r"\Z")
_NAMED = re.compile(_ORIGIN + r">(?P<process>" + _ID + r")\Z")
_TOLD = re.compile(_ORIGIN + r" (?P<waiter>" + _ID + r")\Z")
_GRANTED = re.compile(_ORIGIN + r"\+(?P<fence>[0-9]*) (?P<waiter>" + _ID + r")\Z")


def parse_message(payload: str) -> tuple[str, str, str | None, str | None]:
    """Classifies a release message by the grammar of WIRE.md 6.5: ``(kind, origin, process_or_waiter_id, fence)``
    with kind one of ``broadcast``, ``named``, ``told``, ``granted``, or ``foreign`` for a payload that matches none
    of them (another library's release under its layout, e.g. Spring's ``<registry key>:<name>``), which a receiver
    handles as a broadcast from another process. ``fence`` is ``None`` when a grant carries none."""
    match = _BROADCAST.match(payload)
    if match:
        return "broadcast", match["origin"], None, None
    match = _NAMED.match(payload)
    if match:
        return "named", match["origin"], match["process"], None
    match = _TOLD.match(payload)
    if match:
        return "told", match["origin"], match["waiter"], None
    match = _GRANTED.match(payload)
    if match:
        return "granted", match["origin"], match["waiter"], (match["fence"] or None)
    return "foreign", payload, None, None


class Waiter:
    """One local waiter on one channel. ``wait`` sleeps until a message wakes it or the timeout passes."""

    def __init__(self, listener: "ReleaseListener", channel: "_Channel", waiter_id: str | None) -> None:
        self._listener = listener
        self.channel = channel
        self.waiter_id = waiter_id
        self._event = threading.Event()
        self.wake_kind: str | None = None

    @property
    def confirmed(self) -> bool:
        """Whether the server confirmed the subscription (only then may a try carry the origin)."""
        return self.channel.confirmed.is_set()

    def wait_confirmed(self, timeout: float) -> bool:
        return self.channel.confirmed.wait(timeout)

    def wait(self, timeout: float) -> str | None:
        """Sleeps up to ``timeout`` seconds. Returns what woke it (``broadcast``, ``named``, ``told``, ``granted``,
        ``foreign``, ``local``, ``reset``) or ``None`` on timeout, and consumes the wake-up."""
        woken = self._event.wait(max(timeout, 0))
        kind = (self.wake_kind or "local") if woken else None
        self._event.clear()
        self.wake_kind = None
        return kind

    def note_lined_up(self) -> None:
        """A try carried the origin: the process is in the resource's waiting line."""
        self.channel.lined_up = True

    def _wake(self, kind: str) -> None:
        self.wake_kind = kind
        self._event.set()

    @property
    def _pending(self) -> bool:
        return self._event.is_set()


class _Channel:
    def __init__(self, name: str, lock: str | None, waiting: str | None, promised: str | None) -> None:
        self.name = name
        self.lock = lock
        self.waiting = waiting
        self.promised = promised
        self.waiters: list[Waiter] = []
        self.confirmed = threading.Event()
        self.sent = False  # SUBSCRIBE sent
        self.lined_up = False
        self.idle_since = time.monotonic()


class ReleaseListener:
    """Subscribes to release channels for local waiters, on a background thread owning one pub/sub connection."""

    def __init__(self, client: "Connection") -> None:
        self._client = client
        self.origin = new_origin()
        self._cond = threading.Condition()
        self._channels: dict[str, _Channel] = {}
        self._actions: collections.deque[Callable[[], None]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- registration (any thread) --------------------------------------------------------------------------------

    def register(
        self,
        channel: str,
        *,
        lock: str | None = None,
        waiting: str | None = None,
        promised: str | None = None,
        waiter_id: str | None = None,
    ) -> Waiter:
        with self._cond:
            if self._closed:
                raise RuntimeError("the client is closed")
            ch = self._channels.get(channel)
            if ch is None:
                ch = self._channels[channel] = _Channel(channel, lock, waiting, promised)
            else:
                ch.lock = ch.lock or lock
                ch.waiting = ch.waiting or waiting
                ch.promised = ch.promised or promised
            waiter = Waiter(self, ch, waiter_id)
            ch.waiters.append(waiter)
            self._ensure_thread()
            self._cond.notify_all()
            return waiter

    def unregister(self, waiter: Waiter, *, acquired: bool = False, owed: str | None = None) -> None:
        """Takes ``waiter`` off its channel. A wake-up it leaves unused is passed on (WIRE.md 6.5): ``owed``, one it
        consumed and no try of it answered (it leaves on an error, an exception, out of budget), and one that came
        after its last wait (pending). Each goes to another local waiter, or, with none left, to the next process in
        line by ``pass-on`` (a pending wake-up of a waiter that ``acquired``: only one that named this process)."""
        with self._cond:
            ch = waiter.channel
            if waiter in ch.waiters:
                ch.waiters.remove(waiter)
            if not ch.waiters:
                ch.idle_since = time.monotonic()
            if owed is not None:
                self._pass_locked(ch, owed, pass_on=True)
            if waiter._pending:
                kind = waiter.wake_kind or "broadcast"
                waiter._event.clear()
                self._pass_locked(ch, kind, pass_on=not acquired or kind == "named")

    def _pass_locked(self, ch: "_Channel", kind: str, *, pass_on: bool) -> None:
        if kind in ("reset", "told", "granted"):
            return  # not a release's wake-up (a resubscription), or one meant for that waiter id alone
        if self._wake_one_locked(ch, kind):
            return
        if not ch.waiters and pass_on and ch.lock is not None and ch.waiting is not None:
            self._actions.append(lambda c=ch: self._pass_on(c))
            self._cond.notify_all()
            self._ensure_thread()

    def has_waiters(self, channel: str) -> bool:
        with self._cond:
            ch = self._channels.get(channel)
            return bool(ch and ch.waiters)

    def wake_local(self, channel: str, kind: str = "local", exclude: Waiter | None = None) -> bool:
        """Wakes the longest-waiting local waiter of ``channel`` that is not already woken (after a release of our
        own, or a waiter that got in and leaves room)."""
        with self._cond:
            ch = self._channels.get(channel)
            return bool(ch) and self._wake_one_locked(ch, kind, exclude)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # -- internals --------------------------------------------------------------------------------------------------

    def _wake_one_locked(self, ch: _Channel, kind: str, exclude: Waiter | None = None) -> bool:
        for waiter in ch.waiters:
            if waiter is not exclude and not waiter._pending:
                waiter._wake(kind)
                return True
        return False

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=f"wirelock-listener-{self.origin}", daemon=True)
            self._thread.start()

    def _pass_on(self, ch: _Channel) -> None:
        """Hands a wake-up naming this process on (section 8.7)."""
        if ch.lock is None or ch.waiting is None:
            return
        keys = [ch.lock, ch.name, ch.waiting] + ([ch.promised] if ch.promised else [])
        try:
            self._client._script("pass-on", keys, [self.origin, "0"])
        except Exception as err:  # noqa: BLE001 - best effort: the others' safety poll covers a lost pass
            log.warning("wirelock: pass-on for %s failed: %s", ch.lock, err)

    def _dispatch(self, channel: str, payload: str) -> None:
        kind, origin, who, _fence = parse_message(payload)
        with self._cond:
            ch = self._channels.get(channel)
            if ch is None:
                return
            if kind == "broadcast":
                if origin != self.origin:
                    self._wake_one_locked(ch, "broadcast")
            elif kind == "foreign":
                # Another library's release under its layout: a broadcast from another process.
                self._wake_one_locked(ch, "foreign")
            elif kind == "named":
                if who == self.origin and origin != self.origin:
                    if not self._wake_one_locked(ch, "named") and not ch.waiters:
                        self._actions.append(lambda c=ch: self._pass_on(c))
            else:  # told / granted: the waiter with this waiter id tries at once
                for waiter in ch.waiters:
                    if waiter.waiter_id is not None and waiter.waiter_id == who:
                        waiter._wake(kind)
                        break

    def _run(self) -> None:
        pubsub = None
        subscribed: set[str] = set()
        while True:
            try:
                with self._cond:
                    if self._closed:
                        break
                    actions = list(self._actions)
                    self._actions.clear()
                    now = time.monotonic()
                    to_sub = [c for c in self._channels.values() if c.waiters and not c.sent]
                    to_drop = [
                        c
                        for c in self._channels.values()
                        if not c.waiters and c.confirmed.is_set() and now - c.idle_since >= LINGER
                    ]
                    for c in to_drop:
                        del self._channels[c.name]
                    # Channels nobody waits on any more that were never subscribed: just forget them.
                    for name in [n for n, c in self._channels.items() if not c.waiters and not c.sent]:
                        del self._channels[name]
                    if not subscribed and not to_sub and not actions and not to_drop:
                        self._cond.wait(0.5)
                        continue
                for action in actions:
                    action()
                if pubsub is None and (to_sub or subscribed):
                    pubsub = self._client.redis.pubsub(ignore_subscribe_messages=False)
                if to_sub:
                    for c in to_sub:
                        c.sent = True
                    pubsub.subscribe(*[c.name for c in to_sub])
                    subscribed.update(c.name for c in to_sub)
                if to_drop:
                    pubsub.unsubscribe(*[c.name for c in to_drop])
                    for c in to_drop:
                        subscribed.discard(c.name)
                        c.confirmed.clear()
                        if c.lined_up:
                            self._pass_on(c)  # we stop listening while in line: hand the turn on
                if pubsub is not None and (subscribed or pubsub.subscribed):
                    message = pubsub.get_message(timeout=0.02)
                    if message is not None:
                        self._handle(message)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as err:
                log.warning("wirelock: release listener lost its connection (%s); resubscribing", err)
                with self._cond:
                    for c in self._channels.values():
                        c.confirmed.clear()
                        c.sent = False
                        for w in c.waiters:  # they fall back to polling without the origin until resubscribed
                            w._wake("reset")
                subscribed.clear()
                if pubsub is not None:
                    try:
                        pubsub.reset()
                    except Exception:  # noqa: BLE001
                        pass
                    pubsub = None
                time.sleep(0.1)
            except Exception:  # noqa: BLE001 - the listener must not die silently
                log.exception("wirelock: release listener error")
                time.sleep(0.1)
        if pubsub is not None:
            try:
                pubsub.reset()
            except Exception:  # noqa: BLE001
                pass

    def _handle(self, message: dict) -> None:
        kind = decode(message.get("type"))
        channel = decode(message.get("channel"))
        if kind == "subscribe":
            with self._cond:
                ch = self._channels.get(channel)
                if ch is not None and ch.sent:
                    ch.confirmed.set()
        elif kind == "message":
            self._dispatch(channel, decode(message.get("data")))

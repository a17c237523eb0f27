"""Exception classes and typed outcomes of the wirelock client."""

from __future__ import annotations

import enum


class ReleaseOutcome(enum.Enum):
    """What a release (or resignation) found on the server.

    ``RELEASED``: the hold was ours and is gone now.
    ``RELEASED_LATE``: a shared hold (a semaphore permit or a read hold) whose expiry had passed but that nobody had
    purged yet; it is freed now, but the holder was past its expiry.
    ``ALREADY_EXPIRED``: nothing of ours was there any more (the key expired, the permit was purged).
    ``OWNED_BY_OTHER``: another holder had the resource (our hold expired and was taken).
    """

    RELEASED = "released"
    RELEASED_LATE = "released_late"
    ALREADY_EXPIRED = "already_expired"
    OWNED_BY_OTHER = "owned_by_other"


class WireLockError(Exception):
    """Base class of every error this package raises."""


class InvalidArgument(WireLockError, ValueError):
    """An argument the protocol does not allow (a name, prefix, TTL, label, limit or fence): refused before any I/O."""


class ScriptMismatch(WireLockError):
    """A script file on disk is missing or its SHA-1 is not the one of the protocol version this client speaks."""


class ProtocolVersionMismatch(WireLockError):
    """The prefix's protocol version key holds a version of another major (or of no valid form)."""

    def __init__(self, key: str, found: str, ours: str) -> None:
        super().__init__(
            f"protocol version key {key!r} holds {found!r}, this client speaks {ours}: another major version, "
            f"refusing to operate under this prefix"
        )
        self.key = key
        self.found = found
        self.ours = ours


class ForeignKey(WireLockError):
    """A key this protocol keeps for itself (the version key) holds something no client of it wrote."""

    def __init__(self, key: str, holds: str) -> None:
        super().__init__(
            f"a key that is not this library's sits at {key!r} ({holds}); give this library a key prefix of its own"
        )
        self.key = key
        self.holds = holds


class OldPrefixInUse(WireLockError):
    """Clients of an older protocol release hold their locks under the old default prefix ``lock:`` on this server:
    a client on the new default would not exclude them. Pass ``prefix="lock:"`` until every client is upgraded."""

    def __init__(self, key: str, found: str, prefix: str) -> None:
        super().__init__(
            f"clients of an older release hold their locks under the old default prefix {prefix!r} on this server "
            f"(its version key {key!r} holds {found}), where this client would not exclude them: pass "
            f"prefix={prefix!r} until every client is upgraded"
        )
        self.key = key
        self.found = found
        self.prefix = prefix


class WrongType(WireLockError):
    """A key of one of the resource's names holds another type (``WRONGTYPE``): not retryable, nothing written."""


class AclRefused(WireLockError):
    """The server's ACL refused a command (``NOPERM``)."""


class ServerError(WireLockError):
    """Any other error reply of the server."""


class Contended(WireLockError):
    """The resource is held by someone else (a try, or a wait whose budget ran out).

    ``retry_after`` is the server's hint in seconds (the holder's remaining TTL, or the time until the earliest
    permit or reader expires) or ``None`` when there is none; ``never_expires`` is true when the holder's key has no
    expiry (another library's lock).
    """

    def __init__(self, name: str, retry_after: float | None = None, never_expires: bool = False) -> None:
        hint = ""
        if never_expires:
            hint = " (the holder's key has no expiry: a crashed holder blocks it until someone deletes it)"
        elif retry_after is not None:
            hint = f" (retry in {retry_after:.3f} s at the latest)"
        super().__init__(f"{name!r} is held by another holder{hint}")
        self.name = name
        self.retry_after = retry_after
        self.never_expires = never_expires


class LimitMismatch(WireLockError):
    """A semaphore's holders use another limit than the one requested (every client of one semaphore must agree)."""

    def __init__(self, name: str, stored: int, ours: int) -> None:
        super().__init__(f"semaphore {name!r} is used with limit {stored}, this client asked with limit {ours}")
        self.name = name
        self.stored = stored
        self.ours = ours


class Lost(WireLockError):
    """The hold is gone: an extension found the key gone or taken, or its validity ran out."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"the hold on {name!r} is lost: {reason}")
        self.name = name
        self.reason = reason


class StaleFence(WireLockError):
    """A guarded write was refused: the guard already saw a higher fence (a newer holder wrote)."""

    def __init__(self, guard: str, presented: int, current: int) -> None:
        super().__init__(f"fence {presented} refused by guard {guard!r}, which holds {current}")
        self.guard = guard
        self.presented = presented
        self.current = current

"""The client: one Redis connection pool, the scripts, the release listener and the protocol version check."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

import redis
import redis.exceptions

from .errors import (
    AclRefused,
    ForeignKey,
    InvalidArgument,
    OldPrefixInUse,
    ProtocolVersionMismatch,
    StaleFence,
    WrongType,
)
from .keys import DEFAULT_PREFIX, LEGACY_PREFIX, validate_prefix, version_key
from .listener import ReleaseListener
from .scripts import PROTOCOL_MAJOR, PROTOCOL_VERSION, ScriptSet, decode, default_scripts, raise_typed

log = logging.getLogger("wirelock")

_VERSION = re.compile(r"([0-9]+)\.([0-9]+)")
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
FENCED_WRITES = ("get", "set", "get-set", "hset", "del", "incrby", "rpush", "xadd", "observe")


def compatible_version(found: str) -> bool:
    """Whether a version found at the version key is compatible with this client's (same major, as strings)."""
    match = _VERSION.fullmatch(found)
    return bool(match) and match.group(1) == PROTOCOL_MAJOR


class Client:
    """A wire-protocol client on one Redis server (single instance or Sentinel master).

    >>> client = Client(redis.Redis(), prefix="app:")
    >>> with client.mutex.acquire("orders", ttl=10.0, wait=5.0) as hold:
    ...     hold.fence

    ``listen=False`` disables the release listener (waiters then poll on a backoff). The client is thread-safe.
    """

    def __init__(
        self,
        redis_client: "redis.Redis",
        *,
        prefix: str = DEFAULT_PREFIX,
        scripts: ScriptSet | None = None,
        listen: bool = True,
        operation_timeout: float = 2.0,
    ) -> None:
        validate_prefix(prefix)
        self.redis = redis_client
        self.prefix = prefix
        self.scripts = scripts if scripts is not None else default_scripts()
        self.operation_timeout = operation_timeout
        self._listener: ReleaseListener | None = ReleaseListener(self) if listen else None
        self._version_checked: set[str] = set()
        self._version_lock = threading.Lock()
        from .election import Elections
        from .mutex import Mutex
        from .rwlock import ReadWriteLocks
        from .semaphore import Semaphores

        self.mutex = Mutex(self)
        self.semaphore = Semaphores(self)
        self.rwlock = ReadWriteLocks(self)
        self.election = Elections(self)

    @classmethod
    def from_url(cls, url: str, *, operation_timeout: float = 2.0, **kwargs: Any) -> "Client":
        """A client on ``redis://[user:password@]host:port/db`` with socket timeouts of ``operation_timeout``, speaking
        RESP2 (the protocol's replies are specified in RESP2 terms; redis-py 8 would otherwise negotiate RESP3)."""
        connection = redis.Redis.from_url(
            url, socket_timeout=operation_timeout, socket_connect_timeout=operation_timeout, protocol=2
        )
        return cls(connection, operation_timeout=operation_timeout, **kwargs)

    @property
    def origin(self) -> str:
        """This process's listener origin (empty without a listener)."""
        return self._listener.origin if self._listener is not None else ""

    def close(self) -> None:
        """Stops the release listener (holds are not released)."""
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- scripts ----------------------------------------------------------------------------------------------------

    def _script(self, name: str, keys: Sequence[str], args: Sequence[str]) -> Any:
        try:
            return decode(self.scripts.run(self.redis, name, keys, args))
        except redis.exceptions.ResponseError as err:
            raise_typed(err)

    # -- protocol version key -------------------------------------------------------------------------------------

    def check_version(self) -> None:
        """Runs the protocol version check for this client's prefix unless it already succeeded (section
        "Protocol version key"). Raises :class:`ProtocolVersionMismatch` for another major (not remembered: asked
        again next time), :class:`ForeignKey` for a value that is not a version, :class:`WrongType` for a key of
        another type, and, on the default prefix, :class:`OldPrefixInUse` when the old default prefix's version key
        holds a version. Called before every first acquisition."""
        prefix = self.prefix
        if prefix in self._version_checked:
            return
        with self._version_lock:
            if prefix in self._version_checked:
                return
            if prefix == DEFAULT_PREFIX:
                self._check_legacy_prefix()
            key = version_key(prefix)
            try:
                found = self._script("wire-version", [key], [PROTOCOL_VERSION])
            except AclRefused as err:
                log.warning("wirelock: the ACL refuses the protocol version check on %r (%s); skipping it", key, err)
                self._version_checked.add(prefix)
                return
            if found is not None and _VERSION.fullmatch(found) is None:
                # Never the value itself: another library's value there may be its holder's token.
                raise ForeignKey(key, f"a string of {len(found.encode())} bytes that is not a protocol version")
            if found is not None and not compatible_version(found):
                raise ProtocolVersionMismatch(key, found, PROTOCOL_VERSION)
            self._version_checked.add(prefix)

    def _check_legacy_prefix(self) -> None:
        """Reads (never writes) the old default prefix's version key: a version there means clients of an older
        release hold their locks under it."""
        key = version_key(LEGACY_PREFIX)
        try:
            found = self.redis.get(key)
        except redis.exceptions.ResponseError as err:
            try:
                raise_typed(err)
            except (WrongType, AclRefused):
                return  # another library's key of another type, or an ACL without that key: nothing of ours
        if found is None:
            return
        found = found.decode("utf-8", "replace") if isinstance(found, bytes) else str(found)
        if _VERSION.fullmatch(found):
            raise OldPrefixInUse(key, found, LEGACY_PREFIX)

    # -- guarded writes -------------------------------------------------------------------------------------------

    def fenced_write(
        self, guard: str, fence: int, op: str, keys: Sequence[str] = (), args: Sequence[Any] = ()
    ) -> Any:
        """A write that only a holder of the newest fence may make (section 16), in one script with the check.

        ``guard`` remembers the highest fence that wrote through it; ``keys`` are the keys the write touches;
        ``op`` is one of ``get``, ``set``, ``get-set``, ``hset``, ``del``, ``incrby``, ``rpush``, ``xadd``,
        ``observe`` and ``args`` its arguments. Returns the command's reply; raises :class:`StaleFence` when the
        guard holds a higher fence (nothing written), :class:`WrongType` for a guard or data key of another type.
        A read counts as a write: a new holder should ``observe`` right after acquiring.
        """
        keys = list(keys)
        args = [a if isinstance(a, (str, bytes)) else str(a) for a in args]
        _check_fenced_write(guard, fence, op, keys, args)
        reply = self._script("fenced-write", [guard, *keys], [str(fence), op, *args])
        if reply[0] == 1:
            return reply[1]
        raise StaleFence(guard, fence, int(reply[1]))


def _check_fenced_write(guard: str, fence: int, op: str, keys: list[str], args: list[Any]) -> None:
    if not isinstance(guard, str) or not guard:
        raise InvalidArgument("the guard is a non-empty key name")
    if guard in keys:
        raise InvalidArgument(f"a fenced write must not touch its own guard {guard!r}")
    if isinstance(fence, bool) or not isinstance(fence, int) or not 0 <= fence < 2**64:
        raise InvalidArgument(f"a fence is an unsigned 64-bit integer, not {fence!r}")
    if op not in FENCED_WRITES:
        raise InvalidArgument(f"unknown fenced write {op!r} (one of {', '.join(FENCED_WRITES)})")
    one_key = op != "del" and op != "observe"
    if one_key and len(keys) != 1:
        raise InvalidArgument(f"a fenced {op} touches exactly one key")
    if op == "del" and not keys:
        raise InvalidArgument("a fenced del touches at least one key")
    arity = {"get": (0, 0), "observe": (0, 0), "del": (0, 0), "set": (1, 1), "get-set": (1, 1), "incrby": (1, 1)}
    lo, hi = arity.get(op, (1, None))
    if len(args) < lo or (hi is not None and len(args) > hi):
        raise InvalidArgument(f"a fenced {op} takes {lo if lo == hi else f'at least {lo}'} argument(s)")
    if op in ("hset", "xadd") and (len(args) < 2 or len(args) % 2):
        raise InvalidArgument(f"a fenced {op} takes field value pairs")
    if op == "incrby" and not (isinstance(args[0], str) and _INTEGER.fullmatch(args[0])):
        raise InvalidArgument("a fenced incrby takes a decimal integer increment")

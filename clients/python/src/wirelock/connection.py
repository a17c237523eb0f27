"""The wire calls: one Redis connection pool, the scripts run on it, the protocol version check, guarded writes and
fences drawn for a lock another library holds.

This layer knows the vocabulary (errors, keys, layouts, tokens, timing) and the scripts, nothing above: the release
listener and the waiting loop build on a :class:`Connection`, the primitives on those, and :class:`wirelock.Client`
(a :class:`Connection` with its listener and primitives) on everything.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
import redis.exceptions

from .errors import (
    AclRefused,
    ForeignKey,
    InvalidArgument,
    Lost,
    OldPrefixInUse,
    ProtocolVersionMismatch,
    StaleFence,
    WrongType,
)
from .keys import DEFAULT_PREFIX, LEGACY_PREFIX, validate_prefix, version_key
from .layouts import peer_keys
from .scripts import PROTOCOL_MAJOR, PROTOCOL_VERSION, ScriptSet, decode, default_scripts, raise_typed

log = logging.getLogger("wirelock")

_VERSION = re.compile(r"([0-9]+)\.([0-9]+)")
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
FENCED_WRITES = ("get", "hget", "hgetall", "set", "get-set", "hset", "del", "incrby", "rpush", "xadd", "observe")

DEFAULT_FENCE_COUNTER_EXPIRY = 7 * 24 * 3600.0
"""Seconds a fencing counter lives after its last fence (WIRE.md 5.5): a week, the Rust engine's default. An expired
counter's next fence starts again from the server's clock, above every earlier one unless that clock steps back by
more than the expiry."""

RECHECK_AFTER = 300.0
"""Seconds a successful protocol version check is remembered ("Protocol version key": at most five minutes), so that
a version key lost to a ``FLUSHALL``, a failover or an eviction is written again."""


def compatible_version(found: str) -> bool:
    """Whether a version found at the version key is compatible with this client's (same major, as strings)."""
    match = _VERSION.fullmatch(found)
    return bool(match) and match.group(1) == PROTOCOL_MAJOR


class Connection:
    """The wire calls on one Redis server (single instance or Sentinel master): scripts by ``EVALSHA``, the protocol
    version check, guarded writes. Thread-safe. :class:`wirelock.Client` is one, with a release listener and the
    primitives."""

    def __init__(
        self,
        redis_client: "redis.Redis",
        *,
        prefix: str = DEFAULT_PREFIX,
        scripts: ScriptSet | None = None,
        operation_timeout: float = 2.0,
        fence_counter_expiry: float | None = DEFAULT_FENCE_COUNTER_EXPIRY,
    ) -> None:
        validate_prefix(prefix)
        if fence_counter_expiry is not None and not 0.01 <= fence_counter_expiry <= 366 * 24 * 3600.0:
            raise InvalidArgument(
                f"a fencing counter's expiry lies between 10 ms and 366 days, or is None, not {fence_counter_expiry!r}"
            )
        self.fence_idle = "" if fence_counter_expiry is None else str(int(fence_counter_expiry * 1000))
        """The fencing counters' idle expiry in ms as the scripts take it (WIRE.md 5.5), ``""`` for none."""
        self.redis = redis_client
        self.prefix = prefix
        self.scripts = scripts if scripts is not None else default_scripts()
        self.operation_timeout = operation_timeout
        self._version_checked: dict[str, float] = {}  # prefix -> monotonic time of the last successful check
        self._version_lock = threading.Lock()

    # -- scripts ----------------------------------------------------------------------------------------------------

    def _script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        try:
            return decode(self.scripts.run(self.redis, name, keys, args))
        except redis.exceptions.ResponseError as err:
            raise_typed(err)

    # -- protocol version key -------------------------------------------------------------------------------------

    def _version_fresh(self, prefix: str) -> bool:
        checked = self._version_checked.get(prefix)
        return checked is not None and time.monotonic() - checked < RECHECK_AFTER

    def check_version(self) -> None:
        """Runs the protocol version check for this client's prefix unless it succeeded less than five minutes ago
        (section "Protocol version key"). Raises :class:`ProtocolVersionMismatch` for another major (not remembered:
        asked again next time), :class:`ForeignKey` for a value that is not a version, :class:`WrongType` for a key
        of another type, and, on the default prefix, :class:`OldPrefixInUse` when the old default prefix's version
        key holds a version. Called before every acquisition's first try (and again while a wait retries after a
        connection error)."""
        prefix = self.prefix
        if self._version_fresh(prefix):
            return
        with self._version_lock:
            if self._version_fresh(prefix):
                return
            if prefix == DEFAULT_PREFIX:
                self._check_legacy_prefix()
            key = version_key(prefix)
            try:
                found = self._script("wire-version", [key], [PROTOCOL_VERSION])
            except AclRefused as err:
                log.warning("wirelock: the ACL refuses the protocol version check on %r (%s); skipping it", key, err)
                self._version_checked[prefix] = time.monotonic()
                return
            if found is not None and _VERSION.fullmatch(found) is None:
                # Never the value itself: another library's value there may be its holder's token.
                raise ForeignKey(key, f"a string of {len(found.encode())} bytes that is not a protocol version")
            if found is not None and not compatible_version(found):
                raise ProtocolVersionMismatch(key, found, PROTOCOL_VERSION)
            self._version_checked[prefix] = time.monotonic()

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
        ``op`` is one of ``get``, ``hget``, ``hgetall``, ``set``, ``get-set``, ``hset``, ``del``, ``incrby``,
        ``rpush``, ``xadd``, ``observe`` and ``args`` its arguments. :func:`wirelock.keys.guard_for` derives the guard
        every language uses for a data key (section 16.1). Returns the command's reply; raises :class:`StaleFence` when the
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

    # -- fences for a lock another library holds ------------------------------------------------------------------

    def peer_fence(self, layout: str, name: str, token: str | bytes) -> int:
        """Draws a fence for lock ``name`` held under another library's ``layout`` (WIRE.md 18) by the holder whose
        value at the lock key is ``token``: the ``fence`` script (8.6), which advances the layout's fencing counter
        only while the lock key holds ``token``. Present the fence to :meth:`fenced_write`.

        ``layout`` is ``"plain"`` (or ``"redis-py"``: the raw name), ``"python-redis-lock"`` (``lock:<name>``),
        ``"pottery"`` (``redlock:<name>``) or ``"spring:<registry key>"``; ``token`` is the holder's value:
        python-redis-lock's ``Lock.id``, redis-py's ``Lock.local.token``, pottery's ``Redlock._uuid``. One
        server only (not over several Redlock masters). Raises :class:`InvalidArgument` for a name the namespace
        rule refuses (2.1.1) or a layout without a string lock key, :class:`Lost` when the lock key is gone or holds
        another value (the holder's lock expired, or was taken), :class:`WrongType` for a counter that is not an
        integer. Draw one fence per hold and keep it: each call advances the counter.
        """
        keys = peer_keys(layout, name, self.prefix)
        if keys.base is None or keys.fence is None:
            raise InvalidArgument(
                f"layout {layout!r} keeps its lock in a hash (its fences are drawn with the grant, WIRE.md 18): the "
                f"fence script compares a string lock key"
            )
        if isinstance(token, bytes):
            if not token:
                raise InvalidArgument("the holder's token is not empty")
        elif not isinstance(token, str) or not token:
            raise InvalidArgument(f"the holder's token is a non-empty str or bytes, not {token!r}")
        code = self._script("fence", [keys.lock, keys.fence], [token, self.fence_idle])
        if code == 0:
            raise Lost(name, f"the lock key {keys.lock!r} is gone (expired or released)")
        if code == -1:
            raise Lost(name, f"the lock key {keys.lock!r} holds another holder's value")
        return int(code)


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
    arity = {
        "get": (0, 0), "hgetall": (0, 0), "observe": (0, 0), "del": (0, 0),
        "hget": (1, 1), "set": (1, 1), "get-set": (1, 1), "incrby": (1, 1),
    }
    lo, hi = arity.get(op, (1, None))
    if len(args) < lo or (hi is not None and len(args) > hi):
        raise InvalidArgument(f"a fenced {op} takes {lo if lo == hi else f'at least {lo}'} argument(s)")
    if op in ("hset", "xadd") and (len(args) < 2 or len(args) % 2):
        raise InvalidArgument(f"a fenced {op} takes field value pairs")
    if op == "incrby" and not (isinstance(args[0], str) and _INTEGER.fullmatch(args[0])):
        raise InvalidArgument("a fenced incrby takes a decimal integer increment")

"""Other libraries' key layouts (WIRE.md section 18) and the namespace rule that keeps their lock keys off every key of
ours that is not a lock key (WIRE.md 2.1.1).

Under another library's layout the lock key is that library's (``lock:<name>`` for python-redis-lock, the raw name
for redis-py's ``Lock``, …), and the keys this protocol keeps beside it are ``<base>:<suffix>``, where the base is the
lock key when it has a hash tag (or contains ``}``), else ``{<lock key>}``: the fencing counter is ``<base>:fence``.
No escaping is applied to the name.

A name whose lock key under such a layout would be a key of ours that is not a lock key (the version key, the native
key space of the client's prefix, a key beside another lock key, another library's key our releases write) is
refused with :class:`~wirelock.InvalidArgument` naming the clash, before any I/O: two structures on one key corrupt
each other silently.
"""

from __future__ import annotations

import dataclasses
import re

from .errors import InvalidArgument
from .keys import PEER_WRITTEN, _has_control, validate_name, validate_prefix

# Raw layouts: the lock key is <prefix><name>. "redis-py" is an alias of "plain" (redis-py's Lock takes the raw name).
RAW_LAYOUTS: dict[str, str] = {
    "plain": "",
    "redis-py": "",
    "python-redis-lock": "lock:",
    "pottery": "redlock:",
}
"""The raw layouts by name, each with the text its lock keys start with (``spring:<registry key>`` is
``<registry key>:``)."""

REDISSON = "redisson"

# WIRE.md 2.1.1 rule 2: the keys (and channels) this protocol keeps beside a lock key.
AUX_SUFFIXES = (
    "fence", "released", "awaited", "waiting", "queue", "heartbeats", "grants", "info", "leader", "given-back",
    "readers", "permits", "slots", "permit-grants", "limit", "promised",
)
_AUX_WHAT = {
    "fence": "the fencing counter",
    "released": "the release channel",
    "awaited": "the release mark",
    "waiting": "the waiting processes",
    "queue": "a fair lock's queue",
    "heartbeats": "a fair lock's waiter heartbeats",
    "grants": "a fair lock's grants",
    "info": "a job's or an election's record",
    "leader": "an election's channel",
    "given-back": "an election's given-back terms",
    "readers": "a read-write lock's readers",
    "permits": "a semaphore's permits",
    "slots": "a semaphore's slots",
    "permit-grants": "a semaphore's grants",
    "limit": "a semaphore's limit",
    "promised": "an election's promise",
    "tick": "a job's tick record",
}
_TICK = re.compile(r"(.*):tick:([0-9]+)\Z", re.S)


@dataclasses.dataclass(frozen=True)
class Clash:
    """Why a key cannot be a lock key: ``kind`` is ``version`` (the prefix's version key), ``native`` (the native
    key space of the prefix), ``beside`` (a key beside another lock key) or ``peer`` (another library's key this
    protocol writes), as ``wire/vectors/names.json`` names them; ``what`` says it in words."""

    kind: str
    what: str

    def __str__(self) -> str:
        return self.what


def split_aux(key: str) -> tuple[str, str] | None:
    """``(base, suffix)`` when ``key`` is ``<base>:<suffix>`` for a suffix this protocol writes beside a lock key
    (``tick`` for ``tick:<digits>``), else ``None``."""
    tick = _TICK.match(key)
    if tick:
        return tick.group(1), "tick"
    base, sep, suffix = key.rpartition(":")
    if sep and suffix in AUX_SUFFIXES:
        return base, suffix
    return None


def lock_key_clash(native_prefix: str, key: str) -> Clash | None:
    """Why ``key``, the lock key of a name under another library's layout (the client's native prefix being
    ``native_prefix``), cannot be one; ``None`` when it can (WIRE.md 2.1.1)."""
    if key.startswith(native_prefix):
        rest = key[len(native_prefix) :]
        if rest == "wire":
            return Clash("version", f"the protocol version key of prefix {native_prefix!r}")
        for sub in ("sem:", "rw:"):
            if rest.startswith(sub):
                rest = rest[len(sub) :]
                break
        if rest.startswith("{"):
            return Clash("native", f"inside this library's own key space under prefix {native_prefix!r}")
    aux = split_aux(key)
    if aux is not None and "}" in aux[0]:
        return Clash("beside", f"{_AUX_WHAT[aux[1]]} of another lock (a key this library writes beside a lock key)")
    for peer, what in PEER_WRITTEN:
        if key.startswith(peer):
            return Clash("peer", f"{what}, which this library's releases write")
    return None


def check_lock_key(native_prefix: str, name: str, key: str) -> None:
    """Refuses (:class:`InvalidArgument`, naming the clash) ``key`` as the lock key of ``name``."""
    clash = lock_key_clash(native_prefix, key)
    if clash is not None:
        raise InvalidArgument(
            f"the name {name!r} would make the lock key {key!r}, which is {clash} ({clash.kind} clash): two "
            f"structures on one key corrupt each other, so pick another name"
        )


def _has_hash_tag(key: str) -> bool:
    start = key.find("{")
    return start >= 0 and key.find("}", start + 1) > start + 1


def base_of(lock: str) -> str:
    """The base the keys beside a raw lock key are named after: the lock key when it has a hash tag (a suffix keeps
    its slot) or contains ``}``, else ``{<lock key>}`` (whose tag is the whole lock key, which is what it hashes
    by)."""
    if _has_hash_tag(lock) or "}" in lock:
        return lock
    return f"{{{lock}}}"


def _redisson_prefix_name(prefix: str, name: str) -> str:
    # Redisson's prefixName: no added braces when the name contains '{' anywhere.
    return f"{prefix}:{name}" if "{" in name else f"{prefix}:{{{name}}}"


@dataclasses.dataclass(frozen=True)
class PeerKeys:
    """The keys of lock ``name`` under another library's ``layout``: its ``lock`` key, and this protocol's fencing
    counter for it (``fence``), release mark (``awaited``) and waiting set (``waiting``) beside it. ``base`` is
    ``None`` and ``fence`` Redisson's own counter under its layout (its lock is a hash)."""

    layout: str
    name: str
    lock: str
    base: str | None
    fence: str | None

    @property
    def awaited(self) -> str | None:
        return None if self.base is None else f"{self.base}:awaited"

    @property
    def waiting(self) -> str | None:
        return None if self.base is None else f"{self.base}:waiting"


def raw_prefix(layout: str) -> str:
    """The text the lock keys of raw ``layout`` start with; :class:`InvalidArgument` for an unknown layout."""
    if not isinstance(layout, str):
        raise InvalidArgument(f"a layout is a str, not {type(layout).__name__}")
    if layout in RAW_LAYOUTS:
        return RAW_LAYOUTS[layout]
    if layout.startswith("spring:") and len(layout) > len("spring:"):
        registry = layout[len("spring:") :]
        if _has_control(registry):
            raise InvalidArgument(f"registry key {registry!r} contains a control character")
        return f"{registry}:"
    known = ", ".join([*RAW_LAYOUTS, "spring:<registry key>", REDISSON])
    raise InvalidArgument(f"unknown key layout {layout!r} (one of {known})")


def peer_keys(layout: str, name: str, native_prefix: str) -> PeerKeys:
    """The keys of lock ``name`` under another library's ``layout`` (WIRE.md 18), refusing (before any I/O) an
    invalid name, an invalid native prefix, or a name whose lock key the namespace rule refuses (2.1.1).

    >>> peer_keys("python-redis-lock", "orders/42", "wlp:").fence
    '{lock:orders/42}:fence'
    """
    validate_name(name)
    validate_prefix(native_prefix)
    if layout == REDISSON:
        check_lock_key(native_prefix, name, name)
        return PeerKeys(layout, name, name, None, _redisson_prefix_name("redisson_lock_token", name))
    lock = raw_prefix(layout) + name
    check_lock_key(native_prefix, name, lock)
    base = base_of(lock)
    return PeerKeys(layout, name, lock, base, f"{base}:fence")


def peer_lock_key(layout: str, name: str, native_prefix: str) -> str:
    """The lock key of ``name`` under ``layout`` (see :func:`peer_keys`)."""
    return peer_keys(layout, name, native_prefix).lock

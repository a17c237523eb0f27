"""Names, keys and Redis Cluster slots (WIRE.md section 2)."""

from __future__ import annotations

import dataclasses
import unicodedata

from .errors import InvalidArgument

MAX_RESOURCE_NAME = 1024
"""Largest resource name, in UTF-8 bytes."""

DEFAULT_PREFIX = "wlp:"
"""The default key prefix since protocol 1.1 (no other lock library's layout or bulk cleanup reaches it)."""

LEGACY_PREFIX = "lock:"
"""The default key prefix before protocol 1.1: a client on the default prefix that finds a version at this prefix's
version key refuses to operate (:class:`OldPrefixInUse`)."""

PEER_WRITTEN: tuple[tuple[str, str], ...] = (
    ("lock-signal:", "python-redis-lock's release signal list"),
    ("redisson_lock_token:", "Redisson's fencing counter"),
)
"""Other libraries' keys that this protocol writes under their layouts (WIRE.md 2.1, 2.1.1): no key prefix and no lock
key may start with one."""


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def validate_name(name: str) -> None:
    """Refuses (``InvalidArgument``) a resource name that is not 1 to 1024 bytes of UTF-8 without control characters."""
    if not isinstance(name, str):
        raise InvalidArgument(f"a resource name is a str, not {type(name).__name__}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise InvalidArgument(f"resource name {name!r} is not valid UTF-8 ({err.reason})") from None
    if not 1 <= size <= MAX_RESOURCE_NAME:
        raise InvalidArgument(f"a resource name is 1 to {MAX_RESOURCE_NAME} bytes of UTF-8, not {size}")
    if _has_control(name):
        raise InvalidArgument(f"resource name {name!r} contains a control character")


def validate_prefix(prefix: str) -> None:
    """Refuses a key prefix containing ``{``, ``}`` or a control character, or starting with another library's key
    prefix that this protocol writes (``lock-signal:``, ``redisson_lock_token:``); the empty prefix is allowed."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"a key prefix is a str, not {type(prefix).__name__}")
    if "{" in prefix or "}" in prefix or _has_control(prefix):
        raise InvalidArgument(f"key prefix {prefix!r} contains a brace or a control character")
    for peer, what in PEER_WRITTEN:
        if prefix.startswith(peer):
            raise InvalidArgument(f"key prefix {prefix!r} would put this library's keys among {what}s ({peer}…)")
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidArgument(f"key prefix {prefix!r} is not valid UTF-8 ({err.reason})") from None


def escape(name: str) -> str:
    """The hash-tag form of a name: ``%`` → ``%25``, ``{`` → ``%7B``, ``}`` → ``%7D``, every other character kept."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def unescape(tag: str) -> str:
    """Inverse of :func:`escape`; ``ValueError`` for a ``}`` or an unknown ``%`` escape (not a lock key's tag)."""
    out = []
    i = 0
    while i < len(tag):
        ch = tag[i]
        if ch in "{}":
            raise ValueError(f"{tag!r} is not an escaped name: raw {ch!r}")
        if ch == "%":
            code = tag[i + 1 : i + 3]
            decoded = {"25": "%", "7B": "{", "7D": "}"}.get(code)
            if decoded is None:
                raise ValueError(f"{tag!r} is not an escaped name: unknown escape %{code}")
            out.append(decoded)
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def lock_key(prefix: str, name: str) -> str:
    """The lock key ``<prefix>{<escape(name)>}`` (validating both)."""
    validate_prefix(prefix)
    validate_name(name)
    return f"{prefix}{{{escape(name)}}}"


def decode_lock_key(prefix: str, key: str) -> str:
    """The resource name of a lock key under ``prefix``; ``ValueError`` when ``key`` is not one."""
    if not (key.startswith(prefix + "{") and key.endswith("}")):
        raise ValueError(f"{key!r} is not a lock key under prefix {prefix!r}")
    return unescape(key[len(prefix) + 1 : -1])


def crc16_xmodem(data: bytes) -> int:
    """CRC16/XMODEM: polynomial 0x1021, initial value 0, no reflection."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def hash_tag(key: str | bytes) -> bytes:
    """The part of ``key`` Redis Cluster hashes: the text between the first ``{`` and the first ``}`` after it when
    not empty, else the whole key."""
    raw = key.encode("utf-8") if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            return raw[start + 1 : end]
    return raw


#: The longest data key or guard a guarded write takes, in bytes (WIRE.md 16).
MAX_FENCED_KEY = 16 * 1024


def guard_for(data_key: str) -> str:
    """The guard of the data at ``data_key`` (WIRE.md 16.1), in its Redis Cluster slot and shared by every key of
    its hash tag: ``{t}:fence`` for a key with hash tag ``t``; ``{<key>}:fence`` for a key without one and without
    ``}``; any other key (a ``}`` with no tag before it) has none: :class:`InvalidArgument`, name a guard instead."""
    raw = data_key.encode("utf-8") if isinstance(data_key, str) else b""
    if not isinstance(data_key, str) or not raw or len(raw) > MAX_FENCED_KEY:
        raise InvalidArgument(f"a fenced key's name is 1 to {MAX_FENCED_KEY} bytes, not {data_key!r}")
    start = data_key.find("{")
    if start >= 0:
        end = data_key.find("}", start + 1)
        if end > start + 1:
            return "{" + data_key[start + 1 : end] + "}:fence"
    if "}" in data_key:
        raise InvalidArgument(
            f"key {data_key!r} has a '}}' but no hash tag, so no guard derived from it shares its Redis Cluster slot: "
            f"name a guard"
        )
    return "{" + data_key + "}:fence"


def key_slot(key: str | bytes) -> int:
    """The Redis Cluster slot of ``key``."""
    return crc16_xmodem(hash_tag(key)) % 16384


@dataclasses.dataclass(frozen=True)
class ResourceKeys:
    """Every key of one resource under one (effective) prefix: the lock key and its suffixed keys."""

    prefix: str
    name: str
    lock: str

    @classmethod
    def of(cls, prefix: str, name: str) -> "ResourceKeys":
        return cls(prefix, name, lock_key(prefix, name))

    def _k(self, suffix: str) -> str:
        return f"{self.lock}:{suffix}"

    fence = property(lambda self: self._k("fence"))
    released = property(lambda self: self._k("released"))  # the release channel
    awaited = property(lambda self: self._k("awaited"))  # the release mark
    waiting = property(lambda self: self._k("waiting"))
    queue = property(lambda self: self._k("queue"))
    heartbeats = property(lambda self: self._k("heartbeats"))
    grants = property(lambda self: self._k("grants"))
    readers = property(lambda self: self._k("readers"))
    permits = property(lambda self: self._k("permits"))
    slots = property(lambda self: self._k("slots"))
    permit_grants = property(lambda self: self._k("permit-grants"))
    limit = property(lambda self: self._k("limit"))
    info = property(lambda self: self._k("info"))  # election / job record
    leader = property(lambda self: self._k("leader"))  # the election's leader channel
    given_back = property(lambda self: self._k("given-back"))
    promised = property(lambda self: self._k("promised"))

    def tick(self, t: int) -> str:
        return self._k(f"tick:{t}")

    @property
    def slot(self) -> int:
        return key_slot(self.lock)


def mutex_keys(prefix: str, name: str) -> ResourceKeys:
    """Keys of a lock, fair lock, job or election ``name`` under ``prefix``."""
    return ResourceKeys.of(prefix, name)


def semaphore_keys(prefix: str, name: str) -> ResourceKeys:
    """Keys of semaphore ``name``: derived under ``<prefix>sem:``."""
    return ResourceKeys.of(prefix + "sem:", name)


def rwlock_keys(prefix: str, name: str) -> ResourceKeys:
    """Keys of read-write lock ``name``: derived under ``<prefix>rw:``."""
    return ResourceKeys.of(prefix + "rw:", name)


def version_key(prefix: str) -> str:
    """The protocol version key ``<prefix>wire``."""
    validate_prefix(prefix)
    return prefix + "wire"

"""Owner tokens, owner ids, waiter ids and origins (WIRE.md section 3)."""

from __future__ import annotations

import hashlib
import re
import secrets
import unicodedata

from .errors import InvalidArgument

OWNER_ID_LEN = 8
_TOKEN = re.compile(r"[0-9a-f]{32}(?: .+)?\Z", re.S)


def validate_label(label: str) -> None:
    """A holder label (or candidate id) is 1 to 256 bytes of UTF-8 without control characters."""
    if not isinstance(label, str):
        raise InvalidArgument(f"a label is a str, not {type(label).__name__}")
    try:
        size = len(label.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise InvalidArgument(f"label {label!r} is not valid UTF-8 ({err.reason})") from None
    if not 1 <= size <= 256:
        raise InvalidArgument(f"a label is 1 to 256 bytes of UTF-8, not {size}")
    if any(unicodedata.category(ch) == "Cc" for ch in label):
        raise InvalidArgument(f"label {label!r} contains a control character")


def new_token(label: str | None = None) -> str:
    """A fresh owner token: 32 lowercase hex digits (128 bits from ``secrets``, i.e. the OS's CSPRNG, which a
    ``fork()`` cannot duplicate), with ``" <label>"`` appended when a label is given. Draw one per attempt."""
    token = secrets.token_hex(16)
    if label is not None:
        validate_label(label)
        token = f"{token} {label}"
    return token


def owner_id(value: str) -> str:
    """What an inspection shows for a lock value: a token's first 8 hex digits, or ``~`` and the first 8 hex digits of
    the SHA-1 of a value this protocol did not write."""
    if _TOKEN.match(value):
        return value[:OWNER_ID_LEN]
    return "~" + hashlib.sha1(value.encode("utf-8", "surrogateescape")).hexdigest()[:OWNER_ID_LEN]


def waiter_id(token: str) -> str:
    """The first 16 lowercase hex digits of the SHA-1 of the whole token (label included)."""
    return hashlib.sha1(token.encode("utf-8")).hexdigest()[:16]


def new_origin() -> str:
    """A listener's origin: 16 lowercase hex digits of a random 64-bit value."""
    return secrets.token_hex(8)

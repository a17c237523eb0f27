"""The protocol's Lua scripts: loaded from ``wire/scripts/*.lua``, checked against the SHA-1s of protocol 1.2, and
sent with ``EVALSHA``, falling back once to ``EVAL`` on ``NOSCRIPT`` (WIRE.md section 4.1)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import threading
from collections.abc import Sequence
from typing import Any

import redis
import redis.exceptions

from .errors import AclRefused, ScriptMismatch, ServerError, WrongType

PROTOCOL_VERSION = "1.2"
PROTOCOL_MAJOR = "1"

# WIRE.md section 4.2: the scripts of protocol 1.2 and their SHA-1 (the lowercase hex SHA-1 of the file's bytes).
SCRIPT_SHA1: dict[str, str] = {
    "acquire": "c0b9c9d9d1d0550fd36b4403d6a8137d0193b206",
    "elect": "d1cbfe77743543c2c8be786203b6660529ed7dcd",
    "election-renew": "631c59542561ddac6a027fdf4bdd1f138f46e82e",
    "extend": "fdb6c3f04049b296fa97dacf0271bba757f646fa",
    "fair-acquire": "6f0e76cc5ae91323ac522d1e841c3f68e371b31f",
    "fair-release": "5e7cc877bffe9e18517f745451e7d33382266f66",
    "fence": "692e1a0333a4fbc0345d0a21c48fb14a14533cf7",
    "fenced-write": "870f36c089e5dad769239ce46e7d98ab137e27c5",
    "force-release": "17a772bd69c6d9a5bd392aa5113c54d28ed7d277",
    "holder": "b7a97ab326a4542a9e00b96d9bf34c59d57ff2ed",
    "inspect": "9009f06f3e4b5d8426c763e7ad3dd86c9b84fef6",
    "job-finish": "222fbbe63a6723797838b81725b9da9782fcaefa",
    "job-start": "575ca9a21ac5fdb0fe7137b75e561b41876f65fe",
    "leader": "ed308d64ef8719ca302fa21ecc8e2c8bcf23d1d1",
    "multi-acquire": "9e2f5c1348156bb0bee002f0a423d4151a2ec6ed",
    "multi-extend": "a83fb10f158f5b3210f6021b35a9157de061f876",
    "multi-release": "7ba93325ffebe2deaeabb383a8837e3019ddf8c0",
    "pass-on": "77fcd15c9f8792a7e8e17f32682974823f9de0d2",
    "proclaim": "3f06399867bc9fddda9829d6f448ff56dfb248d9",
    "raise-fence": "e16c39e437a0f7d5abd833efbcd690cb922b2518",
    "redisson-acquire": "aa3d7bbf991f29a18649a49f12c7eb31e52259d1",
    "redisson-extend": "3c95bbf9430536b2198577cde465f2351cb4e840",
    "redisson-release": "9ac9cb1f464a3e767a04b25ed93d5d67f5d3efad",
    "release": "78dfde11a9f054dfbad3e9ab064fbd665a0b4449",
    "resign": "b4b40d3ce19d82dead47b53d117a6b3aaae215c0",
    "rw-extend": "e7065b82321d7421414bbd784cf4ac40e204b31f",
    "rw-read": "c081bfa3c4eaf31cc3469728e06f10cbeb2a0fa3",
    "rw-release": "7e97073fb66e973a86891c53ae3c5efebca6e18c",
    "rw-state": "944339cd5e81c67dbf87a3056cdf274a9203c508",
    "sem-acquire": "4b61897ba959f2531f8aef414e0c638d92ed11a0",
    "sem-extend": "b8c60a71676cd456e2752fabe6fde2144b13cdd4",
    "sem-release": "5a20a59acd1a3a26e13e377e313533fbd11a4d5c",
    "sem-state": "9c5266d8a5e426f990706d815458dc1c933f6128",
    "unlock": "6341aea4f8724b0486a3ba023af03d5c6ad5ccee",
    "wire-version": "922cd3c57430c4e6bd723b379359f867b03d0434",
}

# The scripts digest of protocol 1.2 (WIRE.md, Changelog): a check that the table above was copied whole.
SCRIPTS_DIGEST = "b86d05c8ffb39ce4cfc355dad2d02583c8036320"


def scripts_digest(table: dict[str, str] = SCRIPT_SHA1) -> str:
    """SHA-1 of ``"<name> <sha1>\\n"`` over the scripts sorted by name in ascending byte order."""
    lines = "".join(f"{name} {table[name]}\n" for name in sorted(table, key=lambda n: n.encode("utf-8")))
    return hashlib.sha1(lines.encode("utf-8")).hexdigest()


def default_scripts_dir() -> pathlib.Path:
    """``$WIRELOCK_SCRIPTS`` when set, else the repository's ``wire/scripts`` (``src/wirelock/../../../../wire/scripts``)."""
    env = os.environ.get("WIRELOCK_SCRIPTS")
    if env:
        return pathlib.Path(env)
    return (pathlib.Path(__file__).resolve().parent / ".." / ".." / ".." / ".." / "wire" / "scripts").resolve()


def error_text(err: BaseException) -> str:
    """The server's whole error line (``WRONGTYPE …``, ``NOSCRIPT …``, ``ERR …``) from a redis-py exception, which
    strips the error code it maps to a class."""
    message = str(err)
    code = getattr(err, "status_code", None)
    if code:
        return message if message.startswith(code + " ") or message == code else f"{code} {message}"
    # redis-py 5: no status_code; the mapped codes are stripped, unmapped ones kept.
    for cls, name in (
        (redis.exceptions.NoScriptError, "NOSCRIPT"),
        (redis.exceptions.NoPermissionError, "NOPERM"),
        (redis.exceptions.ReadOnlyError, "READONLY"),
        (redis.exceptions.BusyLoadingError, "LOADING"),
    ):
        if isinstance(err, cls):
            return f"{name} {message}"
    first = message.split(" ", 1)[0]
    if first.isupper() and first.isalpha() and len(first) > 2:
        return message
    return f"ERR {message}"


def decode(value: Any) -> Any:
    """A reply with bulk strings as ``str`` (UTF-8, undecodable bytes kept as surrogates), recursively."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def raise_typed(err: redis.exceptions.ResponseError) -> None:
    """Raises the wirelock exception for a script's error reply."""
    text = error_text(err)
    if text.startswith("WRONGTYPE"):
        raise WrongType(text) from err
    if text.startswith("NOPERM"):
        raise AclRefused(text) from err
    raise ServerError(text) from err


class ScriptSet:
    """The protocol's scripts as loaded from a directory, each checked against its protocol SHA-1.

    Construction fails with :class:`ScriptMismatch` when a file is missing or differs: the client speaks one
    protocol version and refuses to start with other scripts.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = pathlib.Path(directory) if directory is not None else default_scripts_dir()
        self._bodies: dict[str, bytes] = {}
        problems = []
        for name, expected in SCRIPT_SHA1.items():
            path = self.directory / f"{name}.lua"
            try:
                body = path.read_bytes()
            except OSError as err:
                problems.append(f"{path}: cannot read ({err.strerror or err})")
                continue
            actual = hashlib.sha1(body).hexdigest()
            if actual != expected:
                problems.append(f"{path}: SHA-1 {actual}, protocol {PROTOCOL_VERSION} requires {expected}")
                continue
            self._bodies[name] = body
        if problems:
            raise ScriptMismatch(
                f"the scripts in {self.directory} are not those of wire protocol {PROTOCOL_VERSION} "
                f"(set WIRELOCK_SCRIPTS to a directory holding them): " + "; ".join(problems)
            )

    def body(self, name: str) -> bytes:
        return self._bodies[name]

    def sha1(self, name: str) -> str:
        return SCRIPT_SHA1[name]

    def run(self, client: "redis.Redis", name: str, keys: Sequence[str], args: Sequence[str]) -> Any:
        """``EVALSHA``, and once ``EVAL`` with the body when the server answers ``NOSCRIPT``. Returns the raw reply;
        error replies raise redis-py's exceptions."""
        if name not in self._bodies:
            raise KeyError(f"no script {name!r} in protocol {PROTOCOL_VERSION}")
        for arg in args:
            if not isinstance(arg, (str, bytes)):
                raise TypeError(f"script arguments are strings, got {arg!r}")
        tail = [str(len(keys)), *keys, *args]
        try:
            return client.execute_command("EVALSHA", SCRIPT_SHA1[name], *tail)
        except redis.exceptions.ResponseError as err:
            if not error_text(err).startswith("NOSCRIPT"):
                raise
        return client.execute_command("EVAL", self._bodies[name], *tail)


_default: ScriptSet | None = None
_default_lock = threading.Lock()


def default_scripts() -> ScriptSet:
    """The scripts of :func:`default_scripts_dir`, loaded and checked once per process."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ScriptSet()
        return _default

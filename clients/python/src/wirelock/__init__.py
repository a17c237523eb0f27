"""wirelock: a Python client for the lock library's Redis wire protocol 1.2 (``WIRE.md``).

It speaks the protocol from its specification only: the scripts of ``wire/scripts`` (checked against the SHA-1s of
protocol 1.2), the keys of section 2, tokens of section 3, validity of section 7, and the primitives mutex (8),
semaphore (12), read-write lock (13), leader election (14) and guarded writes (16), with fences drawn for a lock
another library holds under its key layout (18; :meth:`Client.peer_fence`).

Its modules are layered, each importing only from layers below (``lint-imports`` checks it, see pyproject.toml):
the vocabulary (``errors``, ``keys``, ``layouts``, ``tokens``, ``timing``) → the wire calls (``scripts``,
``connection``) → waiting (``listener``, ``_wait``) → the primitives (``hold``, ``mutex``, ``semaphore``,
``rwlock``, ``election``) → the face (``client``, this package).
"""

from .client import Client
from .connection import compatible_version
from .election import Elections, Leader, Leadership
from .errors import (
    AclRefused,
    Contended,
    ForeignKey,
    InvalidArgument,
    LimitMismatch,
    Lost,
    OldPrefixInUse,
    ProtocolVersionMismatch,
    ReleaseOutcome,
    ScriptMismatch,
    ServerError,
    StaleFence,
    WireLockError,
    WrongType,
)
from .hold import Hold
from .keys import ResourceKeys, key_slot, lock_key, mutex_keys, rwlock_keys, semaphore_keys
from .mutex import Mutex, MutexHold
from .rwlock import ReadHold, ReadWriteLocks, ReadWriteState, WriteHold
from .connection import DEFAULT_FENCE_COUNTER_EXPIRY
from .scripts import PROTOCOL_VERSION, SCRIPT_SHA1, ScriptSet
from .semaphore import Permit, SemaphoreState, Semaphores

__version__ = "0.1.0"

__all__ = [
    "AclRefused", "Client", "Contended", "DEFAULT_FENCE_COUNTER_EXPIRY", "Elections", "ForeignKey", "Hold", "InvalidArgument", "Leader", "Leadership",
    "LimitMismatch", "Lost", "Mutex", "MutexHold", "OldPrefixInUse", "PROTOCOL_VERSION", "Permit", "ProtocolVersionMismatch",
    "ReadHold", "ReadWriteLocks", "ReadWriteState", "ReleaseOutcome", "ResourceKeys", "SCRIPT_SHA1", "ScriptMismatch",
    "ScriptSet", "SemaphoreState", "Semaphores", "ServerError", "StaleFence", "WireLockError", "WriteHold",
    "WrongType", "compatible_version", "key_slot", "lock_key", "mutex_keys", "rwlock_keys", "semaphore_keys",
]

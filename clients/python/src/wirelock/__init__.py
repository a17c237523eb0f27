"""wirelock: a Python client for the lock library's Redis wire protocol 1.0 (``WIRE.md``).

It speaks the protocol from its specification only: the scripts of ``wire/scripts`` (checked against the SHA-1s of
protocol 1.0), the keys of section 2, tokens of section 3, validity of section 7, and the primitives mutex (8),
semaphore (12), read-write lock (13), leader election (14) and guarded writes (16).
"""

from .client import Client, compatible_version
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
from .scripts import PROTOCOL_VERSION, SCRIPT_SHA1, ScriptSet
from .semaphore import Permit, SemaphoreState, Semaphores

__version__ = "0.1.0"

__all__ = [
    "AclRefused", "Client", "Contended", "Elections", "ForeignKey", "Hold", "InvalidArgument", "Leader", "Leadership",
    "LimitMismatch", "Lost", "Mutex", "MutexHold", "OldPrefixInUse", "PROTOCOL_VERSION", "Permit", "ProtocolVersionMismatch",
    "ReadHold", "ReadWriteLocks", "ReadWriteState", "ReleaseOutcome", "ResourceKeys", "SCRIPT_SHA1", "ScriptMismatch",
    "ScriptSet", "SemaphoreState", "Semaphores", "ServerError", "StaleFence", "WireLockError", "WriteHold",
    "WrongType", "compatible_version", "key_slot", "lock_key", "mutex_keys", "rwlock_keys", "semaphore_keys",
]

//! The backend interface: one atomic step per method, no waiting, no policy.
//!
//! Everything that decides (waiting, backoff, validity, fencing across instances, renewal) lives in lock-core and
//! is written once on top of this trait. A backend translates each method into one round trip to its server.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::options::ReplicaAck;
use crate::resource::LockKeys;
use crate::seam::notify::ReleaseHub;
use crate::seam::transport::{Call, Ran, Topology};
use crate::token::Token;

/// One acquire request: set the lock key to `token` with `ttl` only if it is absent.
#[derive(Clone, Copy, Debug)]
pub struct AcquireRequest<'a> {
    /// The keys of the lock.
    pub keys: &'a LockKeys,
    /// The owner token of this acquisition.
    pub token: &'a Token,
    /// Time-to-live, applied with millisecond precision (`PX`).
    pub ttl: Duration,
    /// Whether to advance the fencing counter in the same atomic step and return its new value.
    pub fencing: bool,
    /// With fencing: the floor of the new counter value, `max(counter + 1, floor)`, in place of the store's own
    /// (a Redis store's is its clock in µs). A Redlock ([`Lock::redlock`](crate::Lock::redlock)) passes one value to every instance, so
    /// instances whose counters are in step return equal values and need no write-back. A store may ignore it;
    /// the engine never relies on it for correctness.
    pub fence_floor: Option<u64>,
    /// After a grant, wait for replicas on the same connection (Redis `WAIT`) and apply
    /// [`ReplicaAck::check`] to the count; a store without replicas reports 0.
    pub replicas: Option<ReplicaAck>,
    /// When the lock is held: the [`origin`](ReleaseHub::origin) of the hub to wake when it is released (the
    /// try lines its process up on the server, see [`RELEASE`](crate::backend::scripts::RELEASE)); `None` when the waiter's
    /// process cannot hear releases.
    pub waiting_as: Option<&'a str>,
}

/// What the server did with an [`AcquireRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireReply {
    /// The key was absent and now holds our token. `fence` is the counter after its increment (when fencing).
    Acquired {
        /// The new value of the resource's fencing counter, when fencing was requested.
        fence: Option<u64>,
    },
    /// Someone else holds the key.
    Held {
        /// The holder's remaining time-to-live, when the server reports one.
        ttl: Option<Duration>,
    },
}

/// One all-or-nothing acquire over several resources: each lock key is set to `token` with `ttl` only if every one
/// is free (or already ours), in one atomic step.
#[derive(Clone, Copy, Debug)]
pub struct AcquireAllRequest<'a> {
    /// The resources' keys, deduplicated and sorted; on Redis Cluster all in one slot.
    pub keys: &'a [LockKeys],
    /// The owner token of this acquisition.
    pub token: &'a Token,
    /// Time-to-live of every lock key, applied with millisecond precision.
    pub ttl: Duration,
    /// Whether to advance each resource's fencing counter in the same step and return the new values.
    pub fencing: bool,
    /// As [`AcquireRequest::fence_floor`], for every counter.
    pub fence_floor: Option<u64>,
    /// As [`AcquireRequest::replicas`].
    pub replicas: Option<ReplicaAck>,
    /// As [`AcquireRequest::waiting_as`]: when a resource is held, the process is lined up to be woken by its
    /// release.
    pub waiting_as: Option<&'a str>,
}

/// What the server did with an [`AcquireAllRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireAllReply {
    /// Every key now holds our token; `fences` has each resource's new counter (in the request's order) when
    /// fencing.
    Acquired {
        /// The new fencing counter of each resource, when fencing was requested.
        fences: Vec<Option<u64>>,
    },
    /// The resource at `index` (into the request's keys) is held by someone else; nothing was written.
    Held {
        /// Which resource blocked the acquire.
        index: usize,
        /// Its holder's remaining TTL, when the server reports one.
        ttl: Option<Duration>,
    },
}

/// What a compare-and-delete found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The key held our token and is now deleted.
    Released,
    /// The key was gone: our lock had expired (nobody else held it at that moment).
    AlreadyExpired,
    /// The key holds another owner's token: ours expired and the lock was taken. It was left untouched.
    OwnedByOther,
}

impl ReleaseOutcome {
    /// The `outcome` a release reports in spans and metrics (see [`telemetry`](crate::telemetry)).
    pub(crate) fn label(self) -> &'static str {
        match self {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::AlreadyExpired => "already_expired",
            ReleaseOutcome::OwnedByOther => "owned_by_other",
        }
    }
}

/// What a compare-and-extend found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExtendReply {
    /// The key held our token; its TTL is now the requested one.
    Extended,
    /// The key was gone. It was not recreated.
    Absent,
    /// The key holds another owner's token. It was left untouched.
    OwnedByOther,
}

/// A lock backend: the atomic operations on one server (or one logical deployment such as a cluster).
///
/// Each method is one atomic step on the server and one round trip, and none of them waits for a lock.
/// Implementations must:
/// - bound every call with their own timeout and map client errors to [`LockError`](crate::LockError) with the
///   client error as source (a foreign key type → [`WrongType`](crate::LockError::WrongType), unreachable →
///   [`Unavailable`](crate::LockError::Unavailable), …);
/// - keep fencing counters monotonic across server restarts when they claim to (see the Redis backends);
/// - never hand a connection whose command was cancelled mid-flight back to a pool in an unknown state.
///
/// The conformance suite in `lock-testkit` checks all of it through [`Lock`](crate::Lock).
#[async_trait]
pub trait LockStore: Send + Sync + Debug + 'static {
    /// Sets the lock key to the token with the TTL if absent and, with fencing, advances the fencing counter, in
    /// one atomic step; otherwise reports the holder's remaining TTL.
    ///
    /// # Errors
    /// Typed as the trait docs say; an error raised before the request left must be
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) (the engine then knows nothing was applied).
    ///
    /// # Cancel safety
    /// Must be cancel-safe for the connection: a dropped call may leave the grant applied (the engine releases it by
    /// token), but must never leave a connection out of step (a later call reading this call's reply).
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply>;

    /// Deletes the lock key only if it holds `token`, and publishes a release notification when it did.
    ///
    /// # Errors
    /// Typed as the trait docs say.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire): the release may or may not be applied; the connection stays in step.
    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<ReleaseOutcome>;

    /// Sets the lock key's TTL to `ttl` only if it holds `token`.
    ///
    /// # Errors
    /// Typed as the trait docs say.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<ExtendReply>;

    /// Raises the fencing counter to at least `at_least`, only if the lock key still holds `token`; returns whether
    /// it did. Redlock uses this to make fencing tokens monotonic across quorums.
    ///
    /// # Errors
    /// Typed as the trait docs say; [`WrongType`](crate::LockError::WrongType) for a counter that is not an
    /// integer.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> Result<bool>;

    /// Sets every lock key of `request` to its token, all or none, in one atomic step (see
    /// [`Lock::acquire_all`](crate::Lock::acquire_all)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); the default, for a store without multi-resource operations, is
    /// [`Unsupported`](crate::LockError::Unsupported) (raised before any I/O).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    async fn acquire_all(&self, request: AcquireAllRequest<'_>) -> Result<AcquireAllReply> {
        let _ = request;
        Err(no_multi())
    }

    /// Compare-and-delete of each lock key in `keys`, publishing a release notification for each one deleted.
    /// Returns one outcome per key, in order.
    ///
    /// # Errors
    /// As [`release`](Self::release); the default is [`Unsupported`](crate::LockError::Unsupported).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    async fn release_all(&self, keys: &[LockKeys], token: &Token) -> Result<Vec<ReleaseOutcome>> {
        let _ = (keys, token);
        Err(no_multi())
    }

    /// Sets every lock key's TTL to `ttl` only if every one holds `token` (all or nothing). Returns what each key
    /// held, in order; the TTLs were set only when every reply is [`ExtendReply::Extended`].
    ///
    /// # Errors
    /// As [`extend`](Self::extend); the default is [`Unsupported`](crate::LockError::Unsupported).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    async fn extend_all(&self, keys: &[LockKeys], token: &Token, ttl: Duration) -> Result<Vec<ExtendReply>> {
        let _ = (keys, token, ttl);
        Err(no_multi())
    }

    /// Runs one of lock-core's calls: how the primitives beyond the mutex (the job lock, and those to come) reach
    /// a store. Every [`ScriptStore`](crate::backend::ScriptStore) has it.
    ///
    /// # Errors
    /// As [`ScriptStore::run`](crate::backend::ScriptStore::run); the default, for a store that is not a Redis client, is
    /// [`Unsupported`](crate::LockError::Unsupported) (raised before any I/O).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    async fn call(&self, call: Call<'_>) -> Result<Ran> {
        Err(crate::LockError::Unsupported(
            format!("this store runs no lock-core scripts (asked for {})", call.operation).into(),
        ))
    }

    /// How the backend's keys are spread (on Redis Cluster, one call's keys must share a slot).
    fn topology(&self) -> Topology {
        Topology::Single
    }

    /// What kind of deployment this store talks to, as traces and metrics name it: one of a few fixed words
    /// (`"single"`, `"cluster"`, `"sentinel"`, `"memory"`, …), never an address. The default derives it from
    /// [`topology`](Self::topology).
    fn deployment(&self) -> &'static str {
        match self.topology() {
            Topology::Cluster => "cluster",
            Topology::Single => "single",
        }
    }

    /// The server(s) this store talks to, as `host:port` (comma-separated for several: a Cluster's seed nodes, a
    /// Sentinel deployment's Sentinels), never a credential: what an error's [`Site`](crate::LockError::site) names.
    fn server(&self) -> Option<&str> {
        None
    }

    /// The hub that turns this backend's release notifications into wake-ups, if the backend has notifications.
    /// Waiters without one poll with backoff (and at the holder's remaining TTL).
    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        None
    }

    /// Whether the server executes this store's commands in the order their calls were first polled, across tasks
    /// (one pipelined connection): a call whose future has been polled once and is pending has its command queued
    /// ahead of any call started afterwards. The engine then wakes the next local waiter as soon as a release is
    /// on its way, so that waiter's acquire runs on the server right behind the release: a hand-off costs one
    /// round trip after the release starts instead of two. A store that cannot promise it keeps the default,
    /// `false`, and waiters are woken when the release has completed, as they are on a Redlock. (Were the order
    /// broken, say by a reconnect in between, the early waiter would find the lock still held and wait for the
    /// release's announcement: later, never wrong.)
    fn orders_commands(&self) -> bool {
        false
    }

    /// The longest any call of this store takes to return (a reply or an error), when the store enforces that bound
    /// itself for every call that waits for no replicas ([`AcquireRequest::replicas`] unset): connecting, waiting
    /// for a connection another call is opening, sending, a `NOSCRIPT` retry and the reply all included.
    ///
    /// The engine bounds every call by its operation timeout (or a Redlock's per-instance timeout); where this
    /// bound is no longer than that, it sets no timer of its own around the call, which saves a timer per call
    /// (measured on redis-rs: 12 % more uncontended cycles per second, see docs/benchmarks-history.md). A store that returns
    /// `Some` must keep the promise in every state, or a call may outlive the caller's bound; the default, `None`,
    /// makes the engine time every call.
    fn call_bound(&self) -> Option<Duration> {
        None
    }
}

#[async_trait]
impl<S: LockStore + ?Sized> LockStore for Arc<S> {
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply> {
        (**self).acquire(request).await
    }
    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<ReleaseOutcome> {
        (**self).release(keys, token).await
    }
    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<ExtendReply> {
        (**self).extend(keys, token, ttl).await
    }
    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> Result<bool> {
        (**self).raise_fence(keys, token, at_least).await
    }
    async fn acquire_all(&self, request: AcquireAllRequest<'_>) -> Result<AcquireAllReply> {
        (**self).acquire_all(request).await
    }
    async fn release_all(&self, keys: &[LockKeys], token: &Token) -> Result<Vec<ReleaseOutcome>> {
        (**self).release_all(keys, token).await
    }
    async fn extend_all(&self, keys: &[LockKeys], token: &Token, ttl: Duration) -> Result<Vec<ExtendReply>> {
        (**self).extend_all(keys, token, ttl).await
    }
    async fn call(&self, call: Call<'_>) -> Result<Ran> {
        (**self).call(call).await
    }
    fn topology(&self) -> Topology {
        (**self).topology()
    }
    fn deployment(&self) -> &'static str {
        (**self).deployment()
    }
    fn server(&self) -> Option<&str> {
        (**self).server()
    }
    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        (**self).release_hub()
    }
    fn orders_commands(&self) -> bool {
        (**self).orders_commands()
    }
    fn call_bound(&self) -> Option<Duration> {
        (**self).call_bound()
    }
}

fn no_multi() -> crate::LockError {
    crate::LockError::Unsupported("this store has no multi-resource operations (acquire_all)".into())
}

//! The user-facing traits: [`DistributedLock`] hands out [`LockGuard`]s.
//!
//! Both are object safe, so a framework can hold `Arc<dyn DistributedLock>` and let the application choose the
//! backend (in-memory, redis-rs, fred, Redlock over several servers) at runtime.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::Result;
use crate::lost::LostSignal;
use crate::options::LockOptions;
use crate::seam::store::ReleaseOutcome;
use crate::token::{FencingToken, Token};

/// What a lock implementation can promise beyond the trait's contract, so that a framework holding
/// `Arc<dyn DistributedLock>` can adapt (or refuse) before any I/O.
///
/// ```
/// use lock_core::{DistributedLock, Lock, MemoryStore};
/// let caps = Lock::new(MemoryStore::new()).capabilities();
/// assert!(caps.fencing && caps.election);
/// assert_eq!(caps.min_ttl, lock_core::MIN_TTL);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// A guard dropped without [`release`](LockGuard::release) is released promptly in the background (when a
    /// runtime is available); otherwise the lock lives until its TTL.
    pub release_on_drop: bool,
    /// Acquisitions with fencing on carry [`FencingToken`]s ([`LockGuard::fence`]).
    pub fencing: bool,
    /// The shortest TTL the backend keeps as asked: a shorter one is rounded up (to whole seconds on etcd, whose
    /// leases are counted in seconds and raised to the server's minimum), and the guard's validity follows what
    /// was granted.
    pub min_ttl: Duration,
    /// [`DistributedLock::election`] hands out elections.
    pub election: bool,
}

impl Capabilities {
    /// Capabilities with the given flags, [`MIN_TTL`](crate::MIN_TTL) and no election.
    pub const fn new(release_on_drop: bool, fencing: bool) -> Self {
        Capabilities { release_on_drop, fencing, min_ttl: crate::options::MIN_TTL, election: false }
    }

    /// With `min_ttl` as the shortest TTL kept as asked.
    pub const fn with_min_ttl(mut self, min_ttl: Duration) -> Self {
        self.min_ttl = min_ttl;
        self
    }

    /// With elections (or without).
    pub const fn with_election(mut self, election: bool) -> Self {
        self.election = election;
        self
    }
}

/// A distributed mutual-exclusion lock keyed by resource name.
///
/// ```
/// use lock_core::{DistributedLock, Lock, LockOptions, MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock: Arc<dyn DistributedLock> = Arc::new(Lock::new(MemoryStore::new()));
/// let opts = LockOptions::new(Duration::from_secs(5)).with_wait(Duration::from_secs(1));
///
/// let guard = lock.acquire("invoice/42", &opts).await?;
/// assert!(lock.try_acquire("invoice/42", &opts).await?.is_none());
/// println!("fencing token {}", guard.fence().await?);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait DistributedLock: Send + Sync + Debug {
    /// Tries once, without waiting: `Some(guard)` if the lock was free, `None` if someone holds it. Whatever sits
    /// at the lock key holds it: this library's token, another library's (another language's lock on the same key),
    /// or a key of another type (a Redisson hash).
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) before any I/O for bad input; backend errors
    /// ([`Unavailable`](crate::LockError::Unavailable), [`Timeout`](crate::LockError::Timeout),
    /// [`WrongType`](crate::LockError::WrongType) for a fencing counter or mark of another type, …); [`ValidityExhausted`](crate::LockError::ValidityExhausted)
    /// when the grant arrived too late to be valid (it was given back).
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent releases whatever it may have acquired, in the background.
    async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Box<dyn LockGuard>>>;

    /// Acquires, waiting up to the options' wait budget.
    ///
    /// # Errors
    /// [`Contended`](crate::LockError::Contended) when the budget is spent (or the attempt limit reached); otherwise
    /// as [`try_acquire`](Self::try_acquire). Transient errors are retried within the budget.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Box<dyn LockGuard>>;

    /// What this implementation promises beyond the trait.
    fn capabilities(&self) -> Capabilities;

    /// The election `name` on this lock's backend, with `options` (whose lease is rounded up as TTLs are: see
    /// [`Capabilities::min_ttl`]).
    ///
    /// # Errors
    /// [`Unsupported`](crate::LockError::Unsupported) when the backend has no elections
    /// ([`Capabilities::election`] is false, the default); [`InvalidArgument`](crate::LockError::InvalidArgument)
    /// for a bad name or options. Before any I/O.
    fn election(&self, name: &str, options: crate::ElectionOptions) -> Result<Box<dyn crate::DistributedElection>> {
        let _ = (name, options);
        Err(crate::LockError::Unsupported("this lock's backend has no elections".into()))
    }
}

/// Proof of holding a lock, until it is released, dropped, or lost.
///
/// Dropping a guard releases the lock in the background when a runtime is available (otherwise it expires at its
/// TTL); call [`release`](Self::release) to release it now and learn the outcome.
#[async_trait]
#[must_use = "dropping a guard releases the lock in the background; call `release().await` to know the outcome"]
pub trait LockGuard: Send + Sync + Debug {
    /// The resource name.
    fn resource(&self) -> &str;

    /// The owner token of this acquisition.
    fn token(&self) -> &Token;

    /// The fencing token of this hold: the one drawn with the grant, or, when the acquisition draws it on demand
    /// ([`Fencing::OnDemand`](crate::Fencing::OnDemand), the default for a lock on one resource and one server),
    /// drawn now by one round trip that checks the lock still holds this acquisition's token and advances the
    /// counter in the same step; later calls return the same token without I/O. Pass it to the protected resource
    /// with every write.
    ///
    /// This is the one way to a fence: there is no accessor that answers `None` for "not drawn yet" where code
    /// written for tokens drawn with the grant would read "fencing is off" and write unfenced (the old
    /// `fencing_token()`, removed in 0.2, no longer compiles):
    ///
    /// ```compile_fail
    /// # use lock_core::{Lock, LockOptions, MemoryStore};
    /// # async fn old(lock: Lock) -> lock_core::Result<()> {
    /// let guard = lock.acquire("x", &LockOptions::new(std::time::Duration::from_secs(1))).await?;
    /// let fence = guard.fencing_token().expect("fencing is on by default");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) when the acquisition has no token (fencing off, or a
    /// read hold, whose [`epoch`](crate::ReadGuard::epoch) is another thing); [`Lost`](crate::LockError::Lost) when
    /// drawing found the lock no longer ours (no token is drawn then); backend errors.
    ///
    /// # Cancel safety
    /// Dropping the future may advance the resource's counter without keeping a token; a later call draws another,
    /// still within this hold.
    async fn fence(&self) -> Result<FencingToken>;

    /// The fencing token if it has been drawn already (with the grant, or by an earlier [`fence`](Self::fence)),
    /// without I/O: for a log line or a metric. `None` does not mean that fencing is off; code that protects a
    /// resource calls [`fence`](Self::fence).
    fn drawn_fence(&self) -> Option<FencingToken>;

    /// The monotonic instant until which this holder may trust the lock: `ttl − elapsed − drift`, measured from
    /// before the request that granted (or last extended) it.
    fn valid_until(&self) -> Instant;

    /// Validity left now (zero once lost).
    fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// A cloneable signal that turns lost when this lock is gone.
    fn lost_signal(&self) -> LostSignal;

    /// Whether the lock is lost (the validity deadline passed, an extension found it gone, or it was released).
    fn is_lost(&self) -> bool {
        self.lost_signal().is_lost()
    }

    /// Sets the lock's TTL to `ttl` from now if we still hold it; returns the new validity deadline.
    ///
    /// Never resurrects a lock: an extension after the validity deadline fails without touching the server, and
    /// one that finds the key gone or taken fails and marks the guard lost.
    ///
    /// # Errors
    /// [`Lost`](crate::LockError::Lost) as above; [`InvalidArgument`](crate::LockError::InvalidArgument) for a bad
    /// TTL; backend errors (the lock stays valid until its current deadline).
    ///
    /// # Cancel safety
    /// Dropping the future may leave the extension applied or not; a shorter TTL counts from before it was sent
    /// (the holder's deadline moves first), so the holder never trusts the lock longer than the servers keep it.
    async fn extend(&self, ttl: Duration) -> Result<Instant>;

    /// Releases the lock (compare-and-delete by token) and says what it found.
    ///
    /// # Errors
    /// Backend errors; the lock then expires at its TTL.
    ///
    /// # Cancel safety
    /// Cancel-safe: renewal has stopped and the guard is marked released before the first await; if the future
    /// is dropped before the release completed, the release is sent again in the background.
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome>;
}

#[async_trait]
impl<T: DistributedLock + ?Sized> DistributedLock for Arc<T> {
    async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Box<dyn LockGuard>>> {
        (**self).try_acquire(resource, options).await
    }
    async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Box<dyn LockGuard>> {
        (**self).acquire(resource, options).await
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn election(&self, name: &str, options: crate::ElectionOptions) -> Result<Box<dyn crate::DistributedElection>> {
        (**self).election(name, options)
    }
}

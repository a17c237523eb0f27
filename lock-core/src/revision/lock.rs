//! The lock over a [`RevisionStore`]: [`RevisionLock`] hands out [`RevisionGuard`]s, and is a
//! [`DistributedLock`] like every Redis lock of this library.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::Instrument;

use crate::distributed_lock::{Capabilities, DistributedLock, LockGuard};
use crate::error::{LockError, Result};
use crate::lease::valid_until;
use crate::lost::{LostReason, LostSignal};
use crate::options::{validate_ttl, Fencing, LockOptions};
use crate::revision::names::{queue, DEFAULT_PREFIX};
use crate::revision::queue::{Contender, Join};
use crate::revision::session::{Holding, Limits, Session};
use crate::revision::store::{Order, Range, Revision, RevisionStore};
use crate::rt;
use crate::seam::store::ReleaseOutcome;
use crate::token::{FencingToken, Token};

/// A lock on a revisioned key-value store with leases and watches (etcd, through `lock-etcd`), by etcd's own queue
/// recipe: its keys are those of etcd's `concurrency.Mutex`, so `etcdctl lock` and any client of that package
/// exclude it and are excluded by it. See the [module docs](crate::revision).
///
/// ```
/// use lock_core::revision::RevisionLock;
/// use lock_core::{LockOptions, MemoryRevisionStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock = RevisionLock::new(MemoryRevisionStore::new());
/// let guard = lock.acquire("invoice/42", &LockOptions::new(Duration::from_secs(5))).await?;
/// // The key's revision of creation: strictly increasing per name while the store's data survives.
/// let fence = guard.fence().await?;
/// assert!(lock.try_acquire("invoice/42", &LockOptions::new(Duration::from_secs(5))).await?.is_none());
/// guard.release().await?;
/// # let _ = fence;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RevisionLock {
    store: Arc<dyn RevisionStore>,
    prefix: Arc<str>,
    operation_timeout: Duration,
}

impl std::fmt::Debug for RevisionLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevisionLock")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

impl RevisionLock {
    /// A lock on `store`, under the default prefix [`DEFAULT_PREFIX`](crate::revision::DEFAULT_PREFIX) (`wlp/`).
    pub fn new(store: impl RevisionStore) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A lock on a shared store.
    pub fn from_arc(store: Arc<dyn RevisionStore>) -> Self {
        RevisionLock { store, prefix: DEFAULT_PREFIX.into(), operation_timeout: crate::DEFAULT_OPERATION_TIMEOUT }
    }

    /// Puts every queue under `prefix` (`""`: our lock `N` is `etcdctl lock N`; the default `wlp/`: it is
    /// `etcdctl lock wlp/N`).
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().into();
        self
    }

    /// Bounds each request to the store (default [`DEFAULT_OPERATION_TIMEOUT`](crate::DEFAULT_OPERATION_TIMEOUT)).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The prefix of every queue.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RevisionStore> {
        &self.store
    }

    /// The bound on each request.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// The prefix of `name`'s queue (`<prefix><name>/`, a `/` in the name written `%2F`): what `etcdctl lock`
    /// takes, without its last `/`, to share this lock.
    ///
    /// ```
    /// let lock = lock_core::revision::RevisionLock::new(lock_core::MemoryRevisionStore::new());
    /// assert_eq!(lock.queue("orders")?, "wlp/orders/"); // etcdctl lock wlp/orders
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty, too long or control-character name.
    pub fn queue(&self, name: &str) -> Result<String> {
        queue(&self.prefix, name)
    }

    /// The checks every acquisition makes before any I/O.
    fn check(&self, options: &LockOptions) -> Result<()> {
        options.validate()?;
        if self.operation_timeout.is_zero() {
            return Err(LockError::invalid("operation timeout must be positive"));
        }
        if options.replica_ack().is_some() {
            return Err(LockError::Unsupported(
                "replica acknowledgement is Redis's WAIT: a grant on a consensus store is committed by a majority \
                 of its members before it is answered"
                    .into(),
            ));
        }
        if rt::current().is_none() {
            return Err(LockError::NoRuntime("a lease's keep-alive"));
        }
        Ok(())
    }

    /// Acquires `name`, waiting up to the options' budget (FIFO: contenders are served in the order they joined).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] before any I/O for bad input; [`LockError::Unsupported`] for a replica
    /// acknowledgement; [`LockError::Contended`] when the budget is spent; [`LockError::ValidityExhausted`] when the
    /// grant came too late to be valid (it was given back); the store's errors (`Unavailable`, `Timeout`, `Auth`,
    /// …) that retrying within the budget did not fix.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped acquire revokes its lease in the background, and its key goes with it.
    pub async fn acquire(&self, name: &str, options: &LockOptions) -> Result<RevisionGuard> {
        let span = tracing::debug_span!("lock.acquire", resource = name, backend = "revision");
        match Box::pin(self.take(name, options)).instrument(span).await? {
            Ok(guard) => Ok(guard),
            Err(waited) => Err(LockError::contended(name, waited)),
        }
    }

    /// Tries once: the guard, or `None` when another contender holds `name`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), without `Contended`.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, name: &str, options: &LockOptions) -> Result<Option<RevisionGuard>> {
        // The options as given are checked (an absurd wait budget is still absurd), then tried once.
        self.check(options)?;
        let once = options.clone().with_wait(Duration::ZERO);
        let span = tracing::debug_span!("lock.try_acquire", resource = name, backend = "revision");
        Ok(Box::pin(self.take(name, &once)).instrument(span).await?.ok())
    }

    /// Joins `name`'s queue and waits its turn: the guard, or how long it waited.
    async fn take(&self, name: &str, options: &LockOptions) -> Result<std::result::Result<RevisionGuard, Duration>> {
        self.check(options)?;
        let queue = self.queue(name)?;
        let started = Instant::now();
        let token = Token::generate_for(options);
        let join = Join {
            store: &self.store,
            queue: &queue,
            value: token.as_str().as_bytes(),
            ttl: options.ttl(),
            bound: self.operation_timeout,
            wait: options.wait(),
            retry: options.retry(),
            id: None,
        };
        let contender = match join.run().await.map_err(|err| err.at("acquire", self.store.endpoints()))? {
            Ok(contender) => contender,
            Err(held) => return Ok(Err(held.waited)),
        };
        let Contender { session, key, created } = contender;
        if session.lost.is_lost() {
            // Its validity was spent before we could use it: give it back.
            let _ = session.revoke().await;
            return Err(LockError::ValidityExhausted { resource: name.to_owned(), elapsed: started.elapsed() });
        }
        session.stop_keeping();
        if let Some(renew) = options.auto_renew() {
            let limits = Limits { max_hold: renew.max_hold(), max_renewals: renew.max_renewals() };
            session.keep(renew.interval(session.granted()), Some(Holding { key: key.clone(), created }), limits)?;
        }
        tracing::debug!(resource = name, key, created, "lock acquired");
        let fence = (options.fencing_mode() != Fencing::Off).then(|| FencingToken::new(created.unsigned_abs()));
        Ok(Ok(RevisionGuard {
            resource: name.to_owned(),
            token,
            fence,
            queue,
            key,
            created,
            session,
            extending: futures_util::lock::Mutex::new(()),
        }))
    }
}

#[async_trait]
impl DistributedLock for RevisionLock {
    async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Box<dyn LockGuard>>> {
        Ok(RevisionLock::try_acquire(self, resource, options).await?.map(|g| Box::new(g) as Box<dyn LockGuard>))
    }

    async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Box<dyn LockGuard>> {
        Ok(Box::new(RevisionLock::acquire(self, resource, options).await?))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, true).with_min_ttl(self.store.min_ttl()).with_election(true)
    }

    fn election(&self, name: &str, options: crate::ElectionOptions) -> Result<Box<dyn crate::DistributedElection>> {
        Ok(Box::new(crate::revision::RevisionElection::new(self.clone(), name, options)?))
    }
}

/// A held [`RevisionLock`]: its key `<queue><lease hex>`, first in its queue, and the lease that keeps it.
///
/// Dropping it revokes its lease in the background (its key goes with it); [`release`](Self::release) does it now
/// and says what it found.
#[must_use = "dropping a guard releases the lock in the background; call `release().await` to know the outcome"]
pub struct RevisionGuard {
    resource: String,
    token: Token,
    fence: Option<FencingToken>,
    /// The queue's prefix.
    queue: String,
    key: String,
    created: Revision,
    session: Arc<Session>,
    /// One extension (or release) at a time.
    extending: futures_util::lock::Mutex<()>,
}

impl std::fmt::Debug for RevisionGuard {
    // The token is a capability: never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevisionGuard")
            .field("resource", &self.resource)
            .field("key", &self.key)
            .field("created", &self.created)
            .field("lost", &self.session.lost)
            .finish_non_exhaustive()
    }
}

impl RevisionGuard {
    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The owner token (the key's value).
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The lock's key (`<queue><lease hex>`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease that keeps the key.
    pub fn lease(&self) -> i64 {
        self.session.lease()
    }

    /// The fencing token: the key's revision of creation, which strictly increases per name while the store's
    /// data survives (a store rebuilt from empty data starts its revisions again: see the module docs).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when the lock was taken with fencing off; [`LockError::Lost`] once the lock
    /// is lost.
    ///
    /// # Cancel safety
    /// Cancel-safe: it sends nothing.
    pub async fn fence(&self) -> Result<FencingToken> {
        if let Some(reason) = self.session.lost.reason() {
            return Err(self.lost(reason));
        }
        self.fence.ok_or_else(|| {
            LockError::invalid(format!(
                "no fencing token: the lock on {:?} was acquired with fencing off",
                self.resource
            ))
        })
    }

    /// The fencing token, without I/O (always drawn with the grant here).
    pub fn drawn_fence(&self) -> Option<FencingToken> {
        self.fence
    }

    /// The local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.session.lost.valid_until()
    }

    /// Validity left now.
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// A cloneable lost signal.
    pub fn lost_signal(&self) -> LostSignal {
        self.session.lost.clone()
    }

    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.session.lost.is_lost()
    }

    fn lost(&self, reason: LostReason) -> LockError {
        LockError::Lost { resource: self.resource.clone(), reason }
    }

    /// Keeps the lock for `ttl` from now: a keep-alive of its lease when the store would grant `ttl` as the lease
    /// has it, else a new lease of `ttl` that the key moves to (it keeps its revision of creation, so its place and
    /// its fencing token) before the old lease is revoked.
    ///
    /// # Errors
    /// [`LockError::Lost`] when the lease or the key is gone (the lost signal fires); the store's errors (the lock
    /// stays valid until its current deadline).
    ///
    /// # Cancel safety
    /// A dropped extension to a shorter TTL may have been applied: the holder's deadline moves to it before the
    /// request is sent. A dropped move to a new lease leaves that lease to its TTL.
    pub async fn extend(&self, ttl: Duration) -> Result<Instant> {
        validate_ttl(ttl)?;
        let _serial = self.extending.lock().await;
        if let Some(reason) = self.session.lost.reason() {
            return Err(self.lost(reason));
        }
        let store = &self.session.store;
        let bound = self.session.bound;
        let wanted = store.ttl_for(ttl);
        if wanted == self.session.granted() {
            let until = self.session.refresh().await.map_err(|err| self.named(err))?;
            self.check_key().await?;
            return Ok(until);
        }
        let sent = Instant::now();
        // A shorter lease takes effect once the key moves to it, which a lost reply could hide.
        self.session.lost.shorten(valid_until(sent, wanted));
        let lease = rt::timeout("extend", bound, store.grant(ttl)).await??;
        let moved = store.put_if_created(&self.key, self.token.as_str().as_bytes(), self.created, lease.id);
        match rt::timeout("extend", bound, moved).await {
            Ok(Ok(true)) => {
                let old = self.session.switch(lease, sent);
                if let Err(err) = rt::timeout("extend", bound, store.revoke(old)).await.and_then(|r| r) {
                    tracing::debug!(lease = old, error = %err.report(), "revoking the old lease failed: it expires at its TTL");
                }
                Ok(self.session.lost.valid_until())
            }
            Ok(Ok(false)) => {
                let _ = rt::timeout("extend", bound, store.revoke(lease.id)).await;
                self.session.lost.mark(LostReason::NotHeld);
                Err(self.lost(LostReason::NotHeld))
            }
            Ok(Err(err)) | Err(err) => {
                let _ = rt::timeout("extend", bound, store.revoke(lease.id)).await;
                Err(err.at("extend", store.endpoints()))
            }
        }
    }

    /// Whether the key is still ours; marks the lock lost when it is not.
    async fn check_key(&self) -> Result<()> {
        let (entry, _) = rt::timeout("extend", self.session.bound, self.session.store.get(&self.key)).await??;
        if entry.is_some_and(|e| e.create_revision == self.created) {
            return Ok(());
        }
        self.session.lost.mark(LostReason::NotHeld);
        Err(self.lost(LostReason::NotHeld))
    }

    /// A lost lock's error names the resource.
    fn named(&self, err: LockError) -> LockError {
        match err {
            LockError::Lost { reason, .. } => self.lost(reason),
            other => other.at("extend", self.session.store.endpoints()),
        }
    }

    /// Releases: deletes the key if it is still ours (by its revision of creation), then revokes the lease.
    ///
    /// # Errors
    /// The store's errors; the lease then expires at its TTL.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped release revokes the lease in the background.
    pub async fn release(self) -> Result<ReleaseOutcome> {
        let _serial = self.extending.lock().await;
        let session = self.session.clone();
        session.stop_keeping();
        session.lost.mark(LostReason::Released);
        let deleted = rt::timeout("release", session.bound, session.store.delete_if_created(&self.key, self.created))
            .await
            .and_then(|r| r)
            .map_err(|err| err.at("release", session.store.endpoints()))?;
        session.revoke().await.map_err(|err| err.at("release", session.store.endpoints()))?;
        if deleted {
            return Ok(ReleaseOutcome::Released);
        }
        // Our key is gone; whether someone holds the name now says which way it went.
        let first = Range::new(&self.queue, Order::FirstCreated, 1);
        let (holders, _) = rt::timeout("release", session.bound, session.store.range(first)).await??;
        Ok(if holders.is_empty() { ReleaseOutcome::AlreadyExpired } else { ReleaseOutcome::OwnedByOther })
    }
}

impl Drop for RevisionGuard {
    /// A guard dropped without [`release`](RevisionGuard::release) turns lost at once; its session, dropped with it,
    /// revokes its lease (and key) in the background.
    fn drop(&mut self) {
        self.session.lost.mark(LostReason::Released);
    }
}

#[async_trait]
impl LockGuard for RevisionGuard {
    fn resource(&self) -> &str {
        RevisionGuard::resource(self)
    }
    fn token(&self) -> &Token {
        RevisionGuard::token(self)
    }
    async fn fence(&self) -> Result<FencingToken> {
        RevisionGuard::fence(self).await
    }
    fn drawn_fence(&self) -> Option<FencingToken> {
        RevisionGuard::drawn_fence(self)
    }
    fn valid_until(&self) -> Instant {
        RevisionGuard::valid_until(self)
    }
    fn lost_signal(&self) -> LostSignal {
        RevisionGuard::lost_signal(self)
    }
    async fn extend(&self, ttl: Duration) -> Result<Instant> {
        RevisionGuard::extend(self, ttl).await
    }
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome> {
        RevisionGuard::release(*self).await
    }
}

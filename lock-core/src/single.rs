//! The single-instance lock: one [`LockStore`], `SET NX PX` semantics, fencing, waiting, validity.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::Instrument;

use crate::distributed_lock::{Capabilities, DistributedLock, LockGuard};
use crate::error::{LockError, Result};
use crate::inflight::InFlight;
use crate::lost::{LostReason, LostSignal};
use crate::options::{validate_ttl, LockOptions};
use crate::resource::{validate_prefix, LockKeys, DEFAULT_PREFIX};
use crate::rt::BackgroundTask;
use crate::store::{AcquireReply, AcquireRequest, ExtendReply, LockStore, ReleaseOutcome};
use crate::token::{FencingToken, Token};
use crate::wait::{until_acquired, Attempt};
use crate::watchdog::{self, Renewable};
use crate::{lease, rt};

/// The default bound on one call to the store (acquire, release or extend), on top of the backend's own timeouts.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

/// A distributed lock on one lock server, over any [`LockStore`].
///
/// Cheap to clone (clones share the store). Implements [`DistributedLock`]; its inherent methods return the
/// concrete [`Guard`].
///
/// ```
/// use lock_core::{Lock, LockOptions, MemoryStore, ReleaseOutcome};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock = Lock::new(MemoryStore::new()).with_key_prefix("billing:lock:");
/// let guard = lock.acquire("customer-7", &LockOptions::new(Duration::from_secs(2))).await?;
/// let fence = guard.fencing_token().expect("fencing is on by default");
/// // ... write to the protected resource, passing `fence` along ...
/// # let _ = fence;
/// assert_eq!(guard.release().await?, ReleaseOutcome::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Lock {
    store: Arc<dyn LockStore>,
    prefix: Arc<str>,
    operation_timeout: Duration,
}

impl Lock {
    /// A lock over `store` with the default key prefix (`lock:`) and operation timeout.
    pub fn new(store: impl LockStore) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A lock over a shared store.
    pub fn from_arc(store: Arc<dyn LockStore>) -> Self {
        Lock { store, prefix: DEFAULT_PREFIX.into(), operation_timeout: DEFAULT_OPERATION_TIMEOUT }
    }

    /// Sets the prefix of every key this lock touches. A prefix containing `{` or `}` makes every acquisition fail
    /// with [`LockError::InvalidArgument`].
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().into();
        self
    }

    /// Bounds each call to the store (default [`DEFAULT_OPERATION_TIMEOUT`]).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The store this lock runs on.
    pub fn store(&self) -> &Arc<dyn LockStore> {
        &self.store
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn prepare(&self, resource: &str, options: &LockOptions) -> Result<Arc<LockKeys>> {
        options.validate()?;
        validate_prefix(&self.prefix)?;
        if self.operation_timeout.is_zero() {
            return Err(LockError::invalid("operation timeout must be positive"));
        }
        let keys = LockKeys::new(&self.prefix, resource)?;
        if options.renew_policy().is_some() && rt::current().is_none() {
            return Err(LockError::NoRuntime("auto-renewal"));
        }
        Ok(Arc::new(keys))
    }

    /// Tries once, without waiting. See [`DistributedLock::try_acquire`].
    ///
    /// # Errors
    /// As [`DistributedLock::try_acquire`].
    pub async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Guard>> {
        let keys = self.prepare(resource, options)?;
        let span = tracing::debug_span!("lock.try_acquire", resource, ttl = ?options.ttl());
        match self.attempt(&keys, options).instrument(span).await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Acquires, waiting up to the options' wait budget. See [`DistributedLock::acquire`].
    ///
    /// # Errors
    /// As [`DistributedLock::acquire`].
    pub async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Guard> {
        let keys = self.prepare(resource, options)?;
        let span = tracing::debug_span!("lock.acquire", resource, ttl = ?options.ttl(), wait = ?options.wait_budget());
        let hub = self.store.release_hub().map(|hub| (hub, keys.channel()));
        until_acquired(resource, options, hub, || self.attempt(&keys, options)).instrument(span).await
    }

    /// One try: one round trip.
    async fn attempt(&self, keys: &Arc<LockKeys>, options: &LockOptions) -> Result<Attempt<Guard>> {
        let ttl = options.ttl();
        let inflight = InFlight::new(vec![self.store.clone()], keys.clone(), Token::generate(), self.operation_timeout);
        // The validity clock starts before the request leaves.
        let started = Instant::now();
        let request = AcquireRequest { keys, token: inflight.token(), ttl, fencing: options.fencing_enabled() };
        let reply = rt::timeout("acquire", self.operation_timeout, self.store.acquire(request)).await;
        match reply.and_then(|r| r) {
            Ok(AcquireReply::Acquired { fence }) => {
                let valid_until = lease::valid_until(started, ttl);
                let now = Instant::now();
                if now >= valid_until {
                    inflight.release_now().await;
                    tracing::debug!(resource = keys.resource(), "grant arrived after its validity; given back");
                    return Err(LockError::ValidityExhausted {
                        resource: keys.resource().to_owned(),
                        elapsed: now - started,
                    });
                }
                let token = inflight.disarm();
                tracing::debug!(resource = keys.resource(), fence, "lock acquired");
                let state = Arc::new(GuardState {
                    store: self.store.clone(),
                    keys: keys.clone(),
                    token,
                    fence: fence.map(FencingToken::new),
                    operation_timeout: self.operation_timeout,
                    lost: LostSignal::new(valid_until),
                    extending: futures_util::lock::Mutex::new(()),
                    stopping: AtomicBool::new(false),
                    watchdog: Mutex::new(None),
                });
                if let Some(policy) = options.renew_policy() {
                    let weak: Weak<dyn Renewable> = Arc::downgrade(&state) as Weak<dyn Renewable>;
                    let task = watchdog::start(weak, ttl, policy, started);
                    *state.watchdog.lock().unwrap_or_else(|p| p.into_inner()) = task;
                }
                Ok(Attempt::Acquired(Guard { state, released: false }))
            }
            Ok(AcquireReply::Held { ttl: holder_ttl }) => {
                inflight.disarm();
                tracing::trace!(resource = keys.resource(), ?holder_ttl, "lock held by another owner");
                Ok(Attempt::Held { holder_ttl })
            }
            Err(err) => {
                if err.outcome_unknown() {
                    inflight.release_now().await;
                } else {
                    inflight.disarm();
                }
                Err(err)
            }
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

#[async_trait]
impl DistributedLock for Lock {
    async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Box<dyn LockGuard>>> {
        Ok(Lock::try_acquire(self, resource, options).await?.map(|g| Box::new(g) as Box<dyn LockGuard>))
    }

    async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Box<dyn LockGuard>> {
        Ok(Box::new(Lock::acquire(self, resource, options).await?))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, true)
    }
}

struct GuardState {
    store: Arc<dyn LockStore>,
    keys: Arc<LockKeys>,
    token: Token,
    fence: Option<FencingToken>,
    operation_timeout: Duration,
    lost: LostSignal,
    /// Extensions are serialized so the deadline always matches the last TTL the server applied; release takes it
    /// too, so no extension is in flight when the release is sent.
    extending: futures_util::lock::Mutex<()>,
    /// Set before release: no extension starts after it.
    stopping: AtomicBool,
    watchdog: Mutex<Option<BackgroundTask>>,
}

impl GuardState {
    fn lost_error(&self, reason: LostReason) -> LockError {
        LockError::Lost { resource: self.keys.resource().to_owned(), reason }
    }

    async fn extend(&self, ttl: Duration) -> Result<Instant> {
        validate_ttl(ttl)?;
        let _serial = self.extending.lock().await;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(self.lost_error(LostReason::Released));
        }
        if let Some(reason) = self.lost.reason() {
            return Err(self.lost_error(reason));
        }
        let started = Instant::now();
        let reply =
            rt::timeout("extend", self.operation_timeout, self.store.extend(&self.keys, &self.token, ttl)).await;
        match reply.and_then(|r| r)? {
            ExtendReply::Extended => {
                let until = lease::valid_until(started, ttl);
                self.lost.prolong(until).map_err(|reason| self.lost_error(reason))?;
                tracing::trace!(resource = self.keys.resource(), ?ttl, "lock extended");
                Ok(until)
            }
            ExtendReply::Absent | ExtendReply::OwnedByOther => {
                if self.lost.mark(LostReason::NotHeld) {
                    tracing::warn!(resource = self.keys.resource(), "lock lost: extension found it gone");
                }
                Err(self.lost_error(LostReason::NotHeld))
            }
        }
    }

    /// Stops the watchdog and marks the lock released (synchronous part of release and drop).
    fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.lost.mark(LostReason::Released);
        drop(self.watchdog.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Compare-and-delete, after any extension in flight has finished.
    async fn release(&self) -> Result<ReleaseOutcome> {
        let _serial = self.extending.lock().await;
        let reply = rt::timeout("release", self.operation_timeout, self.store.release(&self.keys, &self.token)).await;
        let outcome = reply.and_then(|r| r)?;
        if outcome == ReleaseOutcome::Released {
            if let Some(hub) = self.store.release_hub() {
                hub.wake_one(self.keys.channel());
            }
        }
        tracing::debug!(resource = self.keys.resource(), ?outcome, "lock released");
        Ok(outcome)
    }
}

#[async_trait]
impl Renewable for GuardState {
    async fn renew(&self, ttl: Duration) -> Result<Instant> {
        self.extend(ttl).await
    }
    fn lost_signal(&self) -> &LostSignal {
        &self.lost
    }
    fn resource(&self) -> &str {
        self.keys.resource()
    }
}

/// A held single-instance lock.
///
/// Release it with [`release`](Self::release). Dropping it instead releases in the background when a runtime is
/// current (tokio, or async-std/smol with their features), and otherwise leaves the lock to expire at its TTL; in
/// both cases its [`LostSignal`] turns lost at once and its renewal watchdog (if any) stops.
#[must_use = "dropping a guard releases the lock in the background; call `release().await` to know the outcome"]
pub struct Guard {
    state: Arc<GuardState>,
    released: bool,
}

impl Guard {
    /// The resource name.
    pub fn resource(&self) -> &str {
        self.state.keys.resource()
    }

    /// The keys this lock holds.
    pub fn keys(&self) -> &LockKeys {
        &self.state.keys
    }

    /// The owner token.
    pub fn token(&self) -> &Token {
        &self.state.token
    }

    /// The fencing token (`None` when fencing was off).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.state.fence
    }

    /// The local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.state.lost.valid_until()
    }

    /// A cloneable lost signal.
    pub fn lost_signal(&self) -> LostSignal {
        self.state.lost.clone()
    }

    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.state.lost.is_lost()
    }

    /// Sets the TTL to `ttl` from now if still held. See [`LockGuard::extend`].
    ///
    /// # Errors
    /// As [`LockGuard::extend`].
    pub async fn extend(&self, ttl: Duration) -> Result<Instant> {
        self.state.extend(ttl).await
    }

    /// Stops renewal, then releases the lock now (compare-and-delete by token). See [`LockGuard::release`].
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        self.released = true;
        self.state.stop();
        self.state.release().await
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.state.stop();
        let state = self.state.clone();
        let spawned = rt::spawn_background(async move {
            if let Err(err) = state.release().await {
                tracing::debug!(resource = state.keys.resource(), error = %err, "release on drop failed; TTL applies");
            }
        });
        match spawned {
            Some(task) => task.detach(),
            None => tracing::warn!(
                resource = self.state.keys.resource(),
                "guard dropped without a runtime to release on; the lock expires at its TTL"
            ),
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("resource", &self.resource())
            .field("token", &self.state.token)
            .field("fence", &self.state.fence)
            .field("lost", &self.state.lost)
            .finish()
    }
}

#[async_trait]
impl LockGuard for Guard {
    fn resource(&self) -> &str {
        Guard::resource(self)
    }
    fn token(&self) -> &Token {
        Guard::token(self)
    }
    fn fencing_token(&self) -> Option<FencingToken> {
        Guard::fencing_token(self)
    }
    fn valid_until(&self) -> Instant {
        Guard::valid_until(self)
    }
    fn lost_signal(&self) -> LostSignal {
        Guard::lost_signal(self)
    }
    async fn extend(&self, ttl: Duration) -> Result<Instant> {
        Guard::extend(self, ttl).await
    }
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome> {
        Guard::release(*self).await
    }
}

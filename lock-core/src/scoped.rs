//! Scoped locking: run a piece of async work while holding a lock, and stop it the moment the lock is lost.

use std::future::Future;

use async_trait::async_trait;

use tracing::Instrument;

use crate::distributed_lock::DistributedLock;
use crate::error::{LockError, Result};
use crate::lost::LostSignal;
use crate::options::{Fencing, LockOptions, RenewPolicy};
use crate::token::FencingToken;

/// What the work inside [`DistributedLockExt::with_lock`] gets to know about its lock.
#[derive(Clone, Debug)]
pub struct LockContext {
    /// The resource name.
    pub resource: String,
    /// The fencing token to pass to the protected resource (`None` only when fencing is off). Drawn before the work
    /// starts (with [`Fencing::OnDemand`], the default, by one round trip): the work has no guard to ask later.
    pub fencing_token: Option<FencingToken>,
    /// Turns lost if the lock is lost while the work runs (the work is also cancelled then).
    pub lost: LostSignal,
}

/// Scoped locking for every [`DistributedLock`], including `dyn DistributedLock`.
///
/// Rustdoc marks this trait "not dyn compatible" (its method is generic over the work), and that is fine: you never
/// hold it as an object. It is implemented for every `DistributedLock`, so it works on the object you do hold: an
/// `Arc<dyn DistributedLock>` gets `with_lock` through the blanket impl (bring this trait into scope).
///
/// ```
/// use lock_core::{DistributedLock, DistributedLockExt, Lock, LockOptions, MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock: Arc<dyn DistributedLock> = Arc::new(Lock::new(MemoryStore::new()));
/// let fence = lock.with_lock("nightly", &LockOptions::new(Duration::from_secs(5)), |ctx| async move {
///     ctx.fencing_token
/// }).await?;
/// assert!(fence.is_some());
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait DistributedLockExt: DistributedLock {
    /// Acquires `resource` (waiting up to the options' budget), runs `work` while renewing the lock, and releases
    /// it afterwards.
    ///
    /// Renewal is on even if `options` did not ask for it (with the default [`RenewPolicy`] then). If the lock is
    /// lost while `work` runs (renewal found it gone, could not reach the server in time, or hit the maximum hold)
    /// `work` is dropped at its next await point and the call returns [`LockError::Lost`].
    ///
    /// ```
    /// use lock_core::{DistributedLockExt, Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let total = lock
    ///     .with_lock("ledger", &LockOptions::new(Duration::from_secs(3)), |ctx| async move {
    ///         // write with ctx.fencing_token ...
    ///         ctx.fencing_token.map_or(0, |f| f.get())
    ///     })
    ///     .await?;
    /// assert!(total > 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Those of [`acquire`](DistributedLock::acquire), and [`LockError::Lost`] when the lock was lost during the
    /// work. A failed release after the work finished is logged, not returned (the lock expires at its TTL and the
    /// work's output is not thrown away).
    ///
    /// # Cancel safety
    /// Dropping the future drops the work at its current await point and releases the lock in the background (the
    /// guard's drop); an acquire still in progress is cancelled as [`acquire`](DistributedLock::acquire) says.
    async fn with_lock<F, Fut, T>(&self, resource: &str, options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let options = match options.auto_renew() {
            Some(_) => options.clone(),
            None => options.clone().with_auto_renew(RenewPolicy::default()),
        };
        let guard = self.acquire(resource, &options).await?;
        // The work gets its fence before it starts: drawn now when it is drawn on demand.
        let fencing_token = match options.fencing_mode() {
            Fencing::Off => None,
            _ => match guard.fence().await {
                Ok(fence) => Some(fence),
                Err(err) => {
                    // Released in the background if this is dropped; the error is what the caller needs.
                    let _ = guard.release().await;
                    return Err(err);
                }
            },
        };
        let lost = guard.lost_signal();
        let ctx = LockContext { resource: resource.to_owned(), fencing_token, lost: lost.clone() };
        // The work future is dropped (by `guard`) before the release is sent.
        let span = tracing::debug_span!("lock.scoped", resource, outcome = tracing::field::Empty);
        let output = lost.guard(work(ctx)).instrument(span.clone()).await;
        span.record("outcome", if output.is_ok() { "ok" } else { "lost" });
        let output = output.map_err(|reason| {
            tracing::warn!(resource, %reason, "lock lost during scoped work; work cancelled");
            LockError::Lost { resource: resource.to_owned(), reason }
        });
        if let Err(err) = guard.release().await {
            tracing::warn!(resource, error = %err.report(), "release after scoped work failed; the lock expires at its TTL");
        }
        output
    }
}

impl<T: DistributedLock + ?Sized> DistributedLockExt for T {}

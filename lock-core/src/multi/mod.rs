//! The multi-resource lock: several resources taken all or nothing, held by one guard.
//!
//! It uses the single lock's keys (`prefix{resource}`, its fencing counter and release channel), so a multi-lock on
//! {A, B} and a single lock on B exclude each other, and each resource's fencing tokens come from one counter
//! whichever kind of lock took it. One atomic script ([`MULTI_ACQUIRE`](crate::backend::scripts::MULTI_ACQUIRE)) takes every
//! resource or none, so no caller ever holds some while it waits for others, and two callers naming the same
//! resources in opposite orders cannot deadlock.
//!
//! Everything else is the single lock's engine, written once: waiting with release notifications (of any of the
//! resources), validity from a monotonic clock started before the request, Redlock (all or nothing on each
//! instance, the usual quorum, fences per resource agreed across the quorum), renewal, the lost signal, and cancel
//! safety (a dropped `acquire_all` releases by token whatever it may have taken).
//!
//! # Redis Cluster
//! One script may touch keys of one hash slot only, and every resource has its own slot (its name is the hash
//! tag). By default ([`CrossSlot::Reject`](crate::CrossSlot::Reject)) resources in several slots are
//! [`LockError::CrossSlot`] before any I/O; [`CrossSlot::Ordered`](crate::CrossSlot::Ordered) takes the slot
//! groups one after another in slot order, giving the earlier groups back when a later one is held.
//!
//! # Starvation
//! A multi-acquire needs every resource free at the same moment: steady traffic on any one of them can keep it
//! waiting for its whole budget. Single locks on the same resources are not held back by a waiting multi-lock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::lock::{Guard, Lock, ReleaseReport};
use crate::engine::primitive::Primitive;
use crate::engine::wait::Attempt;
use crate::error::{LockError, Result};
use crate::lost::LostSignal;
use crate::mutex::MutexTarget;
use crate::options::{LockOptions, RenewPolicy};
use crate::resource::LockKeys;
use crate::seam::store::ReleaseOutcome;
use crate::seam::transport::Topology;
use crate::token::{FencingToken, Token};

impl Lock {
    /// The locks on `resources`, all or nothing, after checking the options, before any I/O.
    fn prepare_all(&self, resources: &[&str], options: &LockOptions) -> Result<Arc<dyn Primitive>> {
        self.check(options)?;
        if options.fair_queue().is_some() {
            return Err(LockError::invalid("a fair queue orders the waiters of one resource; acquire_all has none"));
        }
        let keys = resources.iter().map(|r| self.keys_without_peer_release("a multi-lock", r));
        let keys = keys.collect::<Result<Vec<_>>>()?;
        let clustered = self.stores().iter().any(|s| s.topology() == Topology::Cluster);
        let topology = if clustered { Topology::Cluster } else { Topology::Single };
        Ok(Arc::new(MutexTarget::all(keys, topology, options.cross_slot())?))
    }

    /// Tries once to take every resource in `resources`, all or nothing, without waiting: `Some(guard)` when all
    /// were free, `None` when any one is held (and then none was taken).
    ///
    /// Duplicates are removed and the resources sorted before any I/O.
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = LockOptions::new(Duration::from_secs(5));
    /// let from = lock.acquire("account/7", &opts).await?;
    /// // Account 7 is held: a transfer between 7 and 9 takes neither.
    /// assert!(lock.try_acquire_all(&["account/9", "account/7"], &opts).await?.is_none());
    /// assert!(lock.try_acquire("account/9", &opts).await?.is_some());
    /// # drop(from);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] before any I/O for no resources, more than
    /// [`MAX_RESOURCES`](crate::MAX_RESOURCES), an empty name or bad options; [`LockError::CrossSlot`] before any
    /// I/O on Redis Cluster (see the [module docs](crate::multi)); otherwise as [`Lock::try_acquire`].
    ///
    /// # Cancel safety
    /// As [`Lock::try_acquire`]: whatever a dropped future may have taken is released in the background.
    pub async fn try_acquire_all(&self, resources: &[&str], options: &LockOptions) -> Result<Option<MultiGuard>> {
        let target = self.prepare_all(resources, options)?;
        match Box::pin(self.try_take(&target, options)).await? {
            Attempt::Acquired(guard) => Ok(Some(MultiGuard { guard })),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Takes every resource in `resources`, all or nothing, waiting up to the options' budget: one guard for all.
    ///
    /// While any resource is held the caller holds none of them; it is woken by the release of any of them and
    /// tries again, as a single-lock waiter is.
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore, ReleaseOutcome};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = LockOptions::new(Duration::from_secs(5)).with_wait(Duration::from_secs(1));
    /// let both = lock.acquire_all(&["account/9", "account/7", "account/9"], &opts).await?;
    /// assert_eq!(both.resources(), ["account/7", "account/9"]);
    /// let fence = both.fence_of("account/7"); // pass it to the ledger of account 7
    /// # let _ = fence;
    /// let released = both.release().await?;
    /// assert!(released.all_released());
    /// assert_eq!(released.outcome("account/9"), Some(ReleaseOutcome::Released));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`try_acquire_all`](Self::try_acquire_all), and [`LockError::Contended`] (naming the resources) when the
    /// budget ran out.
    ///
    /// # Cancel safety
    /// As [`Lock::acquire`].
    pub async fn acquire_all(&self, resources: &[&str], options: &LockOptions) -> Result<MultiGuard> {
        let target = self.prepare_all(resources, options)?;
        // Boxed: the waiting loop over a set is large in debug builds, and callers' futures are often polled whole on
        // small thread stacks (`block_on` on a test thread).
        Ok(MultiGuard { guard: Box::pin(self.take(&target, options)).await? })
    }

    /// Takes every resource in `resources` (waiting up to the options' budget), runs `work` while renewing the
    /// locks, and releases them afterwards: the multi-resource [`with_lock`](crate::DistributedLockExt::with_lock).
    ///
    /// Renewal is on even if `options` did not ask for it. If any resource is lost while `work` runs, `work` is
    /// dropped at its next await point and the call returns [`LockError::Lost`].
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = LockOptions::new(Duration::from_secs(3));
    /// let fenced = lock
    ///     .with_all(&["account/7", "account/9"], &opts, |ctx| async move {
    ///         // move money, passing each account's token to its ledger
    ///         ctx.fencing_tokens.iter().filter(|(_, fence)| fence.is_some()).count()
    ///     })
    ///     .await?;
    /// assert_eq!(fenced, 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Those of [`acquire_all`](Self::acquire_all), and [`LockError::Lost`] when a resource was lost during the work.
    /// A failed release after the work is logged, not returned (the locks expire at their TTL).
    ///
    /// # Cancel safety
    /// Dropping the future drops the work at its current await point and releases the locks in the background.
    pub async fn with_all<F, Fut, T>(&self, resources: &[&str], options: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(MultiContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = match options.auto_renew() {
            Some(_) => options.clone(),
            None => options.clone().with_auto_renew(RenewPolicy::default()),
        };
        let guard = self.acquire_all(resources, &options).await?;
        let lost = guard.lost_signal();
        let ctx = MultiContext {
            fencing_tokens: guard.fences().into_iter().map(|(r, f)| (r.to_owned(), f)).collect(),
            lost: lost.clone(),
        };
        let label = guard.guard.target().label().to_owned();
        let output = lost.guard(work(ctx)).await.map_err(|reason| {
            tracing::warn!(resources = label, %reason, "lock lost during scoped work; work cancelled");
            LockError::Lost { resource: label.clone(), reason }
        });
        if let Err(err) = guard.release().await {
            tracing::warn!(resources = label, error = %err.report(), "release after scoped work failed; locks expire at TTL");
        }
        output
    }
}

/// What the work inside [`Lock::with_all`] gets to know about its locks.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MultiContext {
    /// Each resource (deduplicated, sorted) with its fencing token (`None` when fencing is off).
    pub fencing_tokens: Vec<(String, Option<FencingToken>)>,
    /// Turns lost if any resource is lost while the work runs (the work is also cancelled then).
    pub lost: LostSignal,
}

/// Several resources held together ([`Lock::acquire_all`]).
///
/// Extending is all or nothing: if any resource was lost, the guard is lost as a whole and the error names that
/// resource. Release it with [`release`](Self::release); dropping it releases in the background, as a
/// [`Guard`] does.
#[must_use = "dropping a guard releases the locks in the background; call `release().await` to know the outcome"]
#[derive(Debug)]
pub struct MultiGuard {
    guard: Guard,
}

impl MultiGuard {
    /// The resources held, deduplicated and sorted (on Redis Cluster in slot order).
    pub fn resources(&self) -> Vec<&str> {
        self.guard.target().resources().iter().map(LockKeys::resource).collect()
    }

    /// The fencing token of `resource` (`None` when fencing was off, or for a resource this guard does not hold),
    /// drawn with the grant. It comes from the resource's own counter, the one single locks on it use too.
    pub fn fence_of(&self, resource: &str) -> Option<FencingToken> {
        let index = self.guard.target().resources().iter().position(|k| k.resource() == resource)?;
        self.guard.fences().get(index).copied().flatten()
    }

    /// Every resource with its fencing token (drawn with the grant; `None` when fencing was off).
    pub fn fences(&self) -> Vec<(&str, Option<FencingToken>)> {
        self.resources().into_iter().zip(self.guard.fences().iter().copied()).collect()
    }

    /// The resources held, as one name (the names joined), for logs and [`LockGuard`](crate::LockGuard).
    pub fn resource(&self) -> &str {
        self.guard.resource()
    }

    /// The fencing token when the guard holds one resource; a multi-lock has one per resource
    /// ([`fence_of`](Self::fence_of), [`fences`](Self::fences)), so with several this is an error rather than one
    /// of them, which a resource guarded by another would not check.
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) with several resources, or fencing off.
    ///
    /// # Cancel safety
    /// Cancel-safe: the token was drawn with the grant, so nothing is sent.
    pub async fn fence(&self) -> Result<FencingToken> {
        match self.guard.target().resources().len() {
            1 => self.guard.fence().await,
            n => Err(crate::LockError::invalid(format!(
                "a multi-lock of {n} resources has one fencing token per resource: use fence_of(resource) or fences()"
            ))),
        }
    }

    /// The fencing token when the guard holds one resource (see [`fence`](Self::fence)), without I/O.
    pub fn drawn_fence(&self) -> Option<FencingToken> {
        (self.guard.target().resources().len() == 1).then(|| self.guard.drawn_fence()).flatten()
    }

    /// Validity left now (zero once lost).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// The owner token (one for every resource).
    pub fn token(&self) -> &Token {
        self.guard.token()
    }

    /// The local validity deadline of the whole set.
    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// A cloneable lost signal that turns lost when any resource is lost.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Whether the locks are lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Indices (into [`Lock::stores`]) of the instances where every resource was last confirmed.
    pub fn held_instances(&self) -> Vec<usize> {
        self.guard.held_instances()
    }

    /// Sets every resource's TTL to `ttl` from now, if every one is still held (on a quorum).
    ///
    /// # Errors
    /// [`LockError::Lost`] naming a resource that was found gone or taken (the guard is then lost as a whole; no
    /// resource was extended on that instance); otherwise as [`Guard::extend`].
    ///
    /// # Cancel safety
    /// As [`Guard::extend`].
    pub async fn extend(&self, ttl: Duration) -> Result<Instant> {
        self.guard.extend(ttl).await
    }

    /// Stops renewal, then releases every resource on every instance now, announcing each release so its waiters
    /// wake at once.
    ///
    /// # Errors
    /// As [`Guard::release`] (an error only when no instance answered).
    ///
    /// # Cancel safety
    /// As [`Guard::release`].
    pub async fn release(self) -> Result<MultiRelease> {
        let quorum = self.guard.quorum();
        let resources: Vec<String> = self.resources().into_iter().map(str::to_owned).collect();
        let reports = self.guard.release_reports().await?;
        Ok(MultiRelease { reports: resources.into_iter().zip(reports).collect(), quorum })
    }
}

crate::engine::lock::lock_guard_by_inherent_methods!(MultiGuard, |guard: MultiGuard| async move {
    // The trait's one outcome: released only if every resource was; else the first resource's that was not.
    let released = guard.release().await?;
    let outcomes = released.outcomes();
    Ok(outcomes.iter().map(|(_, o)| *o).find(|o| *o != ReleaseOutcome::Released).unwrap_or(ReleaseOutcome::Released))
});

/// What [`MultiGuard::release`] found, per resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiRelease {
    reports: Vec<(String, ReleaseReport)>,
    quorum: usize,
}

impl MultiRelease {
    /// The outcome for `resource` (see [`ReleaseReport::outcome`]), if the guard held it.
    pub fn outcome(&self, resource: &str) -> Option<ReleaseOutcome> {
        self.reports.iter().find(|(r, _)| r == resource).map(|(_, report)| report.outcome(self.quorum))
    }

    /// Every resource with its outcome.
    pub fn outcomes(&self) -> Vec<(&str, ReleaseOutcome)> {
        self.reports.iter().map(|(r, report)| (r.as_str(), report.outcome(self.quorum))).collect()
    }

    /// Every resource with what each instance found.
    pub fn reports(&self) -> &[(String, ReleaseReport)] {
        &self.reports
    }

    /// Whether every resource was still ours and is now released.
    pub fn all_released(&self) -> bool {
        self.outcomes().iter().all(|(_, outcome)| *outcome == ReleaseOutcome::Released)
    }
}

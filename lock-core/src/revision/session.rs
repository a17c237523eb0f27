//! One acquisition's lease: granted for it alone, kept alive in the background while its contender waits and, with
//! auto-renewal, while it holds, and revoked when it is done with (its key goes with it).
//!
//! One lease per acquisition, not one per process as etcd's `Session` shares: each lock keeps the TTL it was asked
//! for, loses its lease alone (a keep-alive that fails costs that lock, not every lock of the process), and a
//! cancelled acquire revokes its own lease without touching the process's other locks; two acquisitions of one name
//! in one process are two contenders with two keys, never one key "held" twice. The price is one request more per
//! acquisition (the grant), measured in the benchmark.
//!
//! Validity is counted on the local monotonic clock from the send instant of the grant or keep-alive whose reply
//! carried the TTL: `ttl − elapsed − drift` ([`lease::valid_until`](crate::lease::valid_until)).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{LockError, Result};
use crate::lease::valid_until;
use crate::lost::{LostReason, LostSignal};
use crate::revision::store::{LeaseId, Revision, RevisionStore};
use crate::rt::{self, BackgroundTask};

/// The longest pause between keep-alive attempts after one failed: a failed keep-alive is retried well inside the
/// validity left.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// What the keeper checks beyond the lease: a holder's own key (an operator's `etcdctl del`, or a forced release,
/// deletes it while the lease lives on).
#[derive(Clone, Debug)]
pub(crate) struct Holding {
    pub(crate) key: String,
    pub(crate) created: Revision,
}

/// When renewal stops on its own.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Limits {
    pub(crate) max_hold: Option<Duration>,
    pub(crate) max_renewals: Option<u32>,
}

/// A lease and its keeper.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) store: Arc<dyn RevisionStore>,
    /// The lease (it changes when an extension to another TTL moves the key to a new lease).
    lease: AtomicI64,
    /// The TTL the store granted.
    granted: Mutex<Duration>,
    pub(crate) lost: LostSignal,
    /// The bound on each request.
    pub(crate) bound: Duration,
    keeper: Mutex<Option<BackgroundTask>>,
    /// At most this much validity from a keep-alive's send instant (an election's renew deadline).
    cap: Mutex<Option<Duration>>,
    /// The send instant of the last grant or keep-alive that succeeded.
    last_sent: Mutex<Instant>,
    /// Set once the lease was revoked (or handed to a release that revokes it): dropping the session then does
    /// nothing more.
    done: AtomicBool,
}

impl Session {
    /// Grants a lease of `ttl` (the store may raise it: validity follows what it granted).
    pub(crate) async fn grant(store: Arc<dyn RevisionStore>, ttl: Duration, bound: Duration) -> Result<Arc<Session>> {
        let started = Instant::now();
        let lease = rt::timeout("grant", bound, store.grant(ttl)).await??;
        Ok(Arc::new(Session {
            store,
            lease: AtomicI64::new(lease.id),
            granted: Mutex::new(lease.ttl),
            lost: LostSignal::new(valid_until(started, lease.ttl)),
            bound,
            keeper: Mutex::new(None),
            cap: Mutex::new(None),
            last_sent: Mutex::new(started),
            done: AtomicBool::new(false),
        }))
    }

    pub(crate) fn lease(&self) -> LeaseId {
        self.lease.load(Ordering::Acquire)
    }

    pub(crate) fn granted(&self) -> Duration {
        *self.granted.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Trusts each keep-alive for at most `cap` from its send instant (an election leader's renew deadline, shorter
    /// than its lease, so that it stops before the store lets anyone else win).
    pub(crate) fn cap_validity(&self, cap: Duration) {
        *self.cap.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cap);
        let sent = *self.last_sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.lost.shorten(sent + cap);
    }

    /// Keeps the lease alive every `interval` until stopped, lost, or `limits` reached, checking `holding`'s key
    /// after each keep-alive when set.
    pub(crate) fn keep(self: &Arc<Self>, interval: Duration, holding: Option<Holding>, limits: Limits) -> Result<()> {
        let weak = Arc::downgrade(self);
        if holding.is_some() {
            // A holder's deadline passing means its renewal failed.
            self.lost.renewed_by_watchdog();
        }
        let task = rt::spawn_background(keep_alive(weak, interval, holding, limits))
            .ok_or(LockError::NoRuntime("lease keep-alive"))?;
        *self.keeper.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
        Ok(())
    }

    /// Stops the keeper (the lease then lives until its TTL from the last keep-alive).
    pub(crate) fn stop_keeping(&self) {
        drop(self.keeper.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        self.lost.left_unrenewed();
    }

    /// One keep-alive now: the lease's new validity, or why it is gone.
    pub(crate) async fn refresh(&self) -> Result<Instant> {
        let sent = Instant::now();
        if rt::timeout("extend", self.bound, self.store.keep_alive(self.lease())).await?? {
            let ttl = self.granted();
            let cap = *self.cap.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let until = cap.map_or(valid_until(sent, ttl), |cap| valid_until(sent, ttl).min(sent + cap));
            self.lost.prolong(until).map_err(lost_error)?;
            *self.last_sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = sent;
            return Ok(until);
        }
        self.lost.mark(LostReason::NotHeld);
        Err(lost_error(LostReason::NotHeld))
    }

    /// Moves this session onto `lease` (granted at `sent` with `ttl`), after the key was moved to it.
    pub(crate) fn switch(&self, lease: crate::revision::store::Lease, sent: Instant) -> LeaseId {
        let old = self.lease.swap(lease.id, Ordering::AcqRel);
        *self.last_sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = sent;
        *self.granted.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = lease.ttl;
        let _ = self.lost.prolong(valid_until(sent, lease.ttl));
        old
    }

    /// Revokes the lease now (its keys go with it), bounded; afterwards dropping the session does nothing.
    pub(crate) async fn revoke(&self) -> Result<()> {
        self.stop_keeping();
        self.done.store(true, Ordering::Release);
        rt::timeout("release", self.bound, self.store.revoke(self.lease())).await?
    }
}

/// The error of a call that found the lock gone.
fn lost_error(reason: LostReason) -> LockError {
    LockError::Lost { resource: String::new(), reason }
}

impl Drop for Session {
    /// A session dropped before its lease was revoked (a cancelled acquire, a guard dropped without release)
    /// revokes it in the background: its key goes with it at once rather than at the TTL. Without a runtime the lease
    /// expires at its TTL.
    fn drop(&mut self) {
        drop(self.keeper.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        if self.done.swap(true, Ordering::AcqRel) {
            return;
        }
        let (store, lease, bound) = (self.store.clone(), self.lease(), self.bound);
        if let Some(task) = rt::spawn_background(async move {
            if let Err(err) = rt::timeout("release", bound, store.revoke(lease)).await.and_then(|r| r) {
                tracing::debug!(lease, error = %err.report(), "revoking a dropped lease failed: it expires at its TTL");
            }
        }) {
            task.detach();
        }
    }
}

/// The keeper: a keep-alive every `interval` (sooner after a failure), each prolonging the lost signal's deadline
/// from its own send instant; the lease gone, the holder's key gone, or a limit reached marks the signal lost and
/// ends it. It holds the session weakly: a dropped session ends it.
async fn keep_alive(session: std::sync::Weak<Session>, interval: Duration, holding: Option<Holding>, limits: Limits) {
    let started = Instant::now();
    let mut renewals = 0u32;
    let mut pause = interval;
    loop {
        if rt::sleep(pause).await.is_err() {
            return;
        }
        let Some(session) = session.upgrade() else { return };
        if session.lost.is_lost() {
            return;
        }
        if holding.is_some() {
            let held_too_long = limits.max_hold.is_some_and(|max| started.elapsed() >= max);
            if held_too_long || limits.max_renewals.is_some_and(|max| renewals >= max) {
                session.lost.mark(LostReason::MaxHoldReached);
                return;
            }
        }
        match session.refresh().await {
            Ok(_) => {
                renewals = renewals.saturating_add(1);
                pause = interval;
            }
            Err(LockError::Lost { .. }) => return,
            Err(err) => {
                // Retried until the deadline passes, when the signal turns lost on its own.
                let left = session.lost.valid_until().saturating_duration_since(Instant::now());
                pause = (left / 4).min(RETRY_PAUSE_MAX).max(Duration::from_millis(10));
                tracing::debug!(error = %err.report(), ?pause, "lease keep-alive failed; retrying");
                continue;
            }
        }
        if let Some(Holding { key, created }) = &holding {
            match rt::timeout("extend", session.bound, session.store.get(key)).await {
                Ok(Ok((Some(entry), _))) if entry.create_revision == *created => {}
                Ok(Ok(_)) => {
                    tracing::warn!(key, "the lock's key is gone while its lease lives (deleted by hand?): lost");
                    session.lost.mark(LostReason::NotHeld);
                    return;
                }
                _ => {}
            }
        }
    }
}

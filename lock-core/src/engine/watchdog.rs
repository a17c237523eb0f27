//! The renewal watchdog: one small task per auto-renewed guard that extends the lock before it expires.
//!
//! The task belongs to the guard: release and drop stop it first (release also waits for an extension in flight,
//! so no extension is sent after the release). It holds only a weak reference, so it can never keep a guard's
//! state alive. It sleeps on the runtime's timer (tokio's wheel, or async-io's single timer thread), so a
//! thousand renewing guards cost a thousand parked futures, not a thousand threads.
//!
//! It turns the guard lost:
//! - when an extension finds the key gone or taken ([`LostReason::NotHeld`], marked by the extension itself);
//! - when extensions keep failing until the validity deadline ([`LostReason::RenewalFailed`], at the deadline);
//! - when the maximum hold time or renewal count is reached ([`LostReason::MaxHoldReached`]).

use std::sync::Weak;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::{select, Either};
use tracing::Instrument;

use crate::error::{LockError, Result};
use crate::lost::{LostReason, LostSignal};
use crate::options::RenewPolicy;
use crate::rt::{self, BackgroundTask};
use crate::telemetry;

/// Shortest pause between retries of a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(5);

/// A held lock the watchdog can extend.
#[async_trait]
pub(crate) trait Renewable: Send + Sync + 'static {
    /// Extends by `ttl`; on success the lost signal's deadline has moved.
    async fn renew(&self, ttl: Duration) -> Result<Instant>;
    /// The holder's lost signal.
    fn lost_signal(&self) -> &LostSignal;
    /// For logs.
    fn resource(&self) -> &str;
    /// For metrics: the primitive's kind.
    fn primitive(&self) -> &'static str;
    /// Counts a loss the watchdog found.
    fn note_lost(&self, reason: LostReason);
}

/// Starts the watchdog for a lock acquired (request started) at `acquired_at`; `None` without a runtime.
///
/// With a `policy` it renews by it, the first time at `first` (a lock granted with a short lease, by a fair
/// queue's release, renews at once), then every interval. Without one it extends the lock to `ttl` once, at
/// `first`, retrying until it succeeds or the validity runs out, and stops (a fair queue's grantee whose lease was
/// shorter than its TTL, see [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE)).
pub(crate) fn start(
    target: Weak<dyn Renewable>,
    ttl: Duration,
    policy: Option<&RenewPolicy>,
    acquired_at: Instant,
    first: Instant,
    span: tracing::Span,
) -> Option<BackgroundTask> {
    // Until its extension succeeds, a once-watchdog is as responsible for the lock as a renewing one: a deadline that
    // passes meanwhile is a failed renewal, whoever reads the signal first.
    if let Some(t) = target.upgrade() {
        t.lost_signal().renewed_by_watchdog();
    }
    let interval = policy.map_or(ttl / 3, |p| p.interval(ttl));
    // A limit past what an `Instant` can hold is no limit (never an overflow panic on user input).
    let hold_until = policy.and_then(RenewPolicy::max_hold).and_then(|limit| acquired_at.checked_add(limit));
    let renewals = match policy {
        Some(p) => Renewals::Policy(p.max_renewals()),
        None => Renewals::Once,
    };
    rt::spawn_background(run(target, ttl, interval, hold_until, renewals, first).instrument(span))
}

/// How many renewals a watchdog sends.
#[derive(Clone, Copy, Debug)]
enum Renewals {
    /// As the policy says: every interval, up to its limit (reached: the lock is given up).
    Policy(Option<u32>),
    /// One successful extension, then the watchdog ends and the lock stays held until its validity.
    Once,
}

async fn run(
    target: Weak<dyn Renewable>,
    ttl: Duration,
    interval: Duration,
    hold_until: Option<Instant>,
    limit: Renewals,
    first: Instant,
) {
    let _count = rt::WatchdogCount::new();
    let Some(lost) = target.upgrade().map(|t| t.lost_signal().clone()) else { return };
    let max_renewals = match limit {
        Renewals::Policy(max) => max,
        Renewals::Once => None,
    };
    let mut renewals: u32 = 0;
    let mut next = first;
    loop {
        let deadline = lost.valid_until();
        let wake = [Some(next), hold_until, Some(deadline)].into_iter().flatten().min().unwrap_or(deadline);
        let pause = wake.saturating_duration_since(Instant::now());
        let slept = async {
            if rt::sleep(pause).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        // The timer is polled first so that, at the validity deadline, a failing renewal is reported as such.
        if let Either::Right(_) = select(std::pin::pin!(slept), std::pin::pin!(lost.lost())).await {
            return;
        }
        let now = Instant::now();
        if hold_until.is_some_and(|h| now >= h) || max_renewals.is_some_and(|m| renewals >= m) {
            if lost.mark(LostReason::MaxHoldReached) {
                if let Some(target) = target.upgrade() {
                    target.note_lost(LostReason::MaxHoldReached);
                    tracing::info!(
                        resource = target.resource(),
                        renewals,
                        "lock renewal stopped: maximum hold reached"
                    );
                }
            }
            return;
        }
        if now >= lost.valid_until() {
            if lost.mark(LostReason::RenewalFailed) {
                if let Some(target) = target.upgrade() {
                    target.note_lost(LostReason::RenewalFailed);
                    tracing::warn!(
                        resource = target.resource(),
                        "lock lost: renewal did not succeed before the validity deadline"
                    );
                }
            }
            return;
        }
        if now < next {
            continue;
        }
        let Some(target) = target.upgrade() else { return };
        let started = Instant::now();
        match target.renew(ttl).await {
            Ok(_) => {
                telemetry::renewal(true, target.primitive());
                if matches!(limit, Renewals::Once) {
                    // Nobody extends it again: from here the lock simply expires.
                    lost.left_unrenewed();
                    return;
                }
                renewals = renewals.saturating_add(1);
                next = started + interval;
            }
            Err(LockError::Lost { .. }) => return,
            Err(err) if err.is_retryable() => {
                telemetry::renewal(false, target.primitive());
                let left = lost.valid_until().saturating_duration_since(Instant::now());
                tracing::debug!(resource = target.resource(), error = %err.report(), ?left, "lock renewal failed; retrying");
                next = Instant::now() + (left / 4).clamp(MIN_RETRY, interval.max(MIN_RETRY));
            }
            Err(err) => {
                telemetry::renewal(false, target.primitive());
                tracing::warn!(resource = target.resource(), error = %err.report(), "lock lost: renewal failed permanently");
                if lost.mark(LostReason::RenewalFailed) {
                    target.note_lost(LostReason::RenewalFailed);
                }
                return;
            }
        }
    }
}

//! What the library reports to an operator: tracing spans and events, and (with the `metrics` feature) metrics
//! through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Nothing is exported by the library itself: install a `tracing` subscriber, and a `metrics` recorder (Prometheus,
//! OTLP, StatsD …) of your choice. Without either, each span and metric costs a relaxed load.
//!
//! # Spans
//! Every span has the fields `resource` (the name, or the names joined by `", "` for a multi-resource lock) and
//! `deployment` (`single`, `sentinel`, `cluster`, `memory` or `redlock`; see [`Lock::deployment`](crate::Lock::deployment)).
//! Every primitive's acquisitions go through one engine, so they have the same spans and metrics: `primitive` says
//! which (`lock`, `fair_lock`, `multi_lock`, `semaphore`, `election`, `job`, `rwlock_read`, `rwlock_write`).
//!
//! | span (level `debug`) | around | more fields |
//! |---|---|---|
//! | `lock.acquire` | every waiting acquire: [`Lock::acquire`](crate::Lock::acquire), `acquire_all`, a semaphore's, a campaign, a read or write | `primitive`, `ttl`, `wait`, `outcome`, `attempts` |
//! | `lock.try_acquire` | every try: [`Lock::try_acquire`](crate::Lock::try_acquire), `try_acquire_all`, a job's start, … | `primitive`, `ttl`, `outcome` |
//! | `lock.held` | a guard's life; its renewal watchdog runs inside it (it follows from the acquire's span) | `fence` |
//! | `lock.extend` | [`Guard::extend`](crate::Guard::extend) and each renewal | `ttl`, `outcome` |
//! | `lock.release` | [`Guard::release`](crate::Guard::release) and the release of a dropped guard | `outcome` |
//! | `lock.scoped` | the work of [`with_lock`](crate::DistributedLockExt::with_lock) | `outcome` |
//! | `lock.inspect`, `lock.force_release` | [`Lock::inspect`](crate::Lock::inspect), [`Lock::force_release`](crate::Lock::force_release) | |
//! | `election.campaign` | [`Election::campaign`](crate::Election::campaign) (the leadership's own spans are the lock's: `lock.held`, `lock.extend`, `lock.release`) | `election`, `id` |
//! | `semaphore.acquire` | [`Semaphore::acquire`](crate::Semaphore::acquire) (a permit's own spans are the lock's) | `semaphore`, `permits` |
//! | `rwlock.read`, `rwlock.write` | [`RwLock::read`](crate::RwLock::read), [`RwLock::write`](crate::RwLock::write) (a hold's own spans are the lock's) | |
//!
//! `outcome` is `acquired`, `held` (a try that found the lock held), `extended`, `released`, `already_expired`,
//! `owned_by_other`, `ok`, or an error's [`kind`](crate::LockError::kind) (`contended`, `timeout`, `unavailable`, …).
//!
//! # Events
//! | level | message starts with | when | fields |
//! |---|---|---|---|
//! | `warn` | `lock held past its TTL` | a release found the lock expired or taken by another owner: the holder overran its TTL, the key safety signal | `resource`, `outcome` |
//! | `warn` | `lock lost` | an extension or renewal found the lock gone, renewal failed until the validity deadline, or failed permanently | `resource`, `reason` or `error` |
//! | `warn` | `lock force-released` | an administrator freed a lock ([`Lock::force_release`](crate::Lock::force_release)) | `resource`, `owner`, `label`, `ttl_left` |
//! | `warn` | `lock lost during scoped work` | scoped work was cancelled because its lock was lost | `resource`, `reason` |
//! | `warn` | `release subscriber disconnected` | a backend's notification connection broke; waiters poll until it is back | `error` |
//! | `warn` | `leadership lost`, `campaign failed` | [`Election::lead`](crate::Election::lead) campaigns again | `election`, `id`, `reason` or `error` |
//! | `info` | `elected` | a campaign won | `election`, `id`, `term` |
//! | `info` | `lock renewal stopped: maximum hold reached` | the watchdog reached the policy's limit | `resource`, `renewals` |
//! | `debug` | `lock acquired`, `lock released`, `lock wait budget spent`, `lock held by another owner` | routine traffic and contention | `resource`, … |
//!
//! # Metrics (feature `metrics`)
//! Names and labels follow Prometheus conventions (base units, `_seconds`, `_total` on counters). Every label has
//! a small fixed set of values; the resource name is added as a `resource` label only after
//! [`label_resources(true)`](label_resources) (for deployments with few names: each name is a new series).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `lock_acquire_duration_seconds` | histogram | `operation` (`acquire`, `try_acquire`), `outcome`, `primitive`, `deployment` | the whole call, waiting included |
//! | `lock_acquire_wait_seconds` | histogram | `outcome`, `primitive`, `deployment` | acquires that found the lock held at least once: the time until granted or given up |
//! | `lock_acquire_attempts` | histogram | `outcome`, `primitive`, `deployment` | tries per acquire (1 when uncontended; a wait in a fair queue counts none) |
//! | `lock_validity_exhausted_total` | counter | `primitive`, `deployment` | grants that arrived after their validity and were given back |
//! | `lock_held` | gauge | `primitive`, `deployment` | holds live in this process (up at the grant, down when the hold's release is done) |
//! | `lock_hold_duration_seconds` | histogram | `primitive`, `deployment` | from the grant to the release (or the drop), per resource |
//! | `lock_releases_total` | counter | `outcome` (`released`, `already_expired`, `owned_by_other`, an error kind), `primitive`, `deployment` | releases, per resource |
//! | `lock_lost_total` | counter | `reason` (`expired`, `not_held`, `renewal_failed`, `max_hold_reached`), `primitive`, `deployment` | holds lost while held |
//! | `lock_renewals_total` | counter | `outcome` (`renewed`, `failed`), `primitive` | the watchdog's extensions (a `failed` one is retried until the deadline) |
//! | `lock_force_releases_total` | counter | `freed` (`true`, `false`) | administrators' forced releases |
//! | `lock_subscriber_reconnects_total` | counter | `backend` | a release-notification connection was re-established |
//! | `lock_command_duration_seconds` | histogram | `backend` (the store's type: `RedisStore`, `FredStore`, `MemoryStore`), `operation`, `outcome` (`ok` or an error kind) | one round trip to one server |

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::lost::LostReason;

static RESOURCE_LABELS: AtomicBool = AtomicBool::new(false);

/// Adds the resource name as a `resource` label to the per-lock metrics (acquire, hold, release, lost), for every
/// lock in this process. Off by default: each name becomes its own time series, which only suits a few names.
///
/// ```
/// lock_core::telemetry::label_resources(true);
/// # lock_core::telemetry::label_resources(false);
/// ```
pub fn label_resources(on: bool) {
    RESOURCE_LABELS.store(on, Ordering::Relaxed);
}

/// Counts a re-established release-notification connection (`backend` is the client crate, e.g. `"redis-rs"`).
/// Backends call it; it records nothing without the `metrics` feature.
pub fn subscriber_reconnected(backend: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lock_subscriber_reconnects_total", "backend" => backend).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}

/// The `reason` a lost lock reports.
pub(crate) fn lost_reason(reason: LostReason) -> &'static str {
    match reason {
        LostReason::Expired => "expired",
        LostReason::NotHeld => "not_held",
        LostReason::RenewalFailed => "renewal_failed",
        LostReason::MaxHoldReached => "max_hold_reached",
        LostReason::Released => "released",
    }
}

#[cfg(feature = "metrics")]
mod record {
    use super::*;
    use metrics::{counter, gauge, histogram, Label};

    fn labels(pairs: &[(&'static str, &'static str)], resource: &str) -> Vec<Label> {
        let mut labels: Vec<Label> = pairs.iter().map(|(k, v)| Label::new(*k, *v)).collect();
        if RESOURCE_LABELS.load(Ordering::Relaxed) {
            labels.push(Label::new("resource", resource.to_owned()));
        }
        labels
    }

    pub(crate) fn acquire(
        operation: &'static str,
        outcome: &'static str,
        primitive: &'static str,
        deployment: &'static str,
        resource: &str,
        elapsed: Duration,
        attempts: Option<u32>,
    ) {
        let base =
            [("operation", operation), ("outcome", outcome), ("primitive", primitive), ("deployment", deployment)];
        histogram!("lock_acquire_duration_seconds", labels(&base, resource)).record(elapsed.as_secs_f64());
        if let Some(attempts) = attempts {
            let base = [("outcome", outcome), ("primitive", primitive), ("deployment", deployment)];
            histogram!("lock_acquire_attempts", labels(&base, resource)).record(f64::from(attempts));
            if attempts > 1 {
                histogram!("lock_acquire_wait_seconds", labels(&base, resource)).record(elapsed.as_secs_f64());
            }
        }
        if outcome == "validity_exhausted" {
            let base = [("primitive", primitive), ("deployment", deployment)];
            counter!("lock_validity_exhausted_total", labels(&base, resource)).increment(1);
        }
    }

    pub(crate) fn release(
        outcome: &'static str,
        primitive: &'static str,
        deployment: &'static str,
        resource: &str,
        held: Duration,
    ) {
        let base = [("primitive", primitive), ("deployment", deployment)];
        histogram!("lock_hold_duration_seconds", labels(&base, resource)).record(held.as_secs_f64());
        let base = [("outcome", outcome), ("primitive", primitive), ("deployment", deployment)];
        counter!("lock_releases_total", labels(&base, resource)).increment(1);
    }

    pub(crate) fn lost(reason: &'static str, primitive: &'static str, deployment: &'static str, resource: &str) {
        let base = [("reason", reason), ("primitive", primitive), ("deployment", deployment)];
        counter!("lock_lost_total", labels(&base, resource)).increment(1);
    }

    pub(crate) fn held(primitive: &'static str, deployment: &'static str, delta: f64) {
        gauge!("lock_held", "primitive" => primitive, "deployment" => deployment).increment(delta);
    }

    pub(crate) fn renewal(renewed: bool, primitive: &'static str) {
        let outcome = if renewed { "renewed" } else { "failed" };
        counter!("lock_renewals_total", "outcome" => outcome, "primitive" => primitive).increment(1);
    }

    pub(crate) fn force_release(freed: bool) {
        counter!("lock_force_releases_total", "freed" => if freed { "true" } else { "false" }).increment(1);
    }

    pub(crate) fn command(backend: &'static str, operation: &'static str, outcome: &'static str, elapsed: Duration) {
        histogram!("lock_command_duration_seconds", "backend" => backend, "operation" => operation, "outcome" => outcome)
            .record(elapsed.as_secs_f64());
    }
}

#[cfg(not(feature = "metrics"))]
#[allow(clippy::missing_const_for_fn)]
mod record {
    use super::*;

    pub(crate) fn acquire(_: &str, _: &str, _: &str, _: &str, _: &str, _: Duration, _: Option<u32>) {}
    pub(crate) fn release(_: &str, _: &str, _: &str, _: &str, _: Duration) {}
    pub(crate) fn lost(_: &str, _: &str, _: &str, _: &str) {}
    pub(crate) fn held(_: &str, _: &str, _: f64) {}
    pub(crate) fn renewal(_: bool, _: &str) {}
    pub(crate) fn force_release(_: bool) {}
    pub(crate) fn command(_: &'static str, _: &'static str, _: &'static str, _: Duration) {}
}

pub(crate) use record::{acquire, command, force_release, held, lost, release, renewal};

/// Whether command latencies are recorded: only with the `metrics` feature (timing a command costs two clock
/// reads, which the hot path does not pay otherwise).
pub(crate) const TIMES_COMMANDS: bool = cfg!(feature = "metrics");

/// The short name of a store type for the `backend` label (`lock_redis_rs::store::RedisStore` → `RedisStore`).
pub(crate) fn backend_name<S: ?Sized>() -> &'static str {
    let full = std::any::type_name::<S>();
    let path = full.split('<').next().unwrap_or(full);
    path.rsplit("::").next().unwrap_or(path)
}

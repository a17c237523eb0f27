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
//! | `job.run`, `job.run_tick` | [`JobLock::run`](crate::JobLock::run), [`JobLock::run_tick`](crate::JobLock::run_tick) (the run's lock has the lock's spans) | `job`, `tick`, `at_most_for` |
//!
//! `outcome` is `acquired`, `held` (a try that found the lock held), `extended`, `released`, `already_expired`,
//! `owned_by_other`, `deleted_while_held`, `ok`, or an error's [`kind`](crate::LockError::kind) (`contended`,
//! `timeout`, `unavailable`, …). `deployment` is a plain string and `fence` a number in every span and event.
//!
//! # Events
//! | level | message starts with | when | fields |
//! |---|---|---|---|
//! | `warn` | `lock held past its TTL` | a release found the lock expired or taken by another owner after its validity ended: the holder overran its TTL, the key safety signal | `resource`, `outcome` |
//! | `warn` | `lock deleted while held` | a release found the lock gone or taken while its validity had not ended: a forced release, another client's delete, or a failover that lost it | `resource`, `outcome` (`deleted_while_held`) |
//! | `warn` | `fenced write refused` | a fenced write carried an older fence than one that wrote ([`FencedResource`](crate::FencedResource), or [`fenced_write`] for your own resource) | `guard`, `operation`, `presented`, `current` |
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
//! | `lock_releases_total` | counter | `outcome` (`released`, `already_expired`, `owned_by_other`, `deleted_while_held`, an error kind), `primitive`, `deployment` | releases, per resource |
//! | `lock_lost_total` | counter | `reason` (`expired`, `not_held`, `renewal_failed`, `max_hold_reached`), `primitive`, `deployment` | holds lost while held |
//! | `lock_renewals_total` | counter | `outcome` (`renewed`, `failed`), `primitive` | the watchdog's extensions (a `failed` one is retried until the deadline) |
//! | `lock_force_releases_total` | counter | `freed` (`true`, `false`) | administrators' forced releases |
//! | `lock_subscriber_reconnects_total` | counter | `backend` (the store's type) | a release-notification connection was re-established |
//! | `lock_command_duration_seconds` | histogram | `backend` (the store's type: `RedisStore`, `FredStore`, `MemoryStore`), `operation`, `outcome` (`ok` or an error kind) | one round trip to one server |
//! | `lock_fenced_writes_total` | counter | `operation`, `outcome` (`written`, `stale_fence`, an error kind) | fenced writes ([`FencedResource`](crate::FencedResource), [`fenced_write`]) |
//!
//! Every metric has a unit and `HELP` text ([`describe_metrics`]).

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

/// Counts a re-established release-notification connection of a store of type `S` (its `backend` label is the
/// store's type name, as in `lock_command_duration_seconds`: `RedisStore`, `FredStore`). Backends call it; it
/// records nothing without the `metrics` feature.
pub fn subscriber_reconnected<S: ?Sized>() {
    #[cfg(feature = "metrics")]
    {
        describe();
        metrics::counter!("lock_subscriber_reconnects_total", "backend" => backend_name::<S>()).increment(1);
    }
}

/// Gives the installed `metrics` recorder every metric's unit and `HELP` text. Call it once after installing the
/// recorder; it is also called by itself before this process's first sample (which a recorder installed later does
/// not see). Without the `metrics` feature it does nothing.
///
/// ```
/// lock_core::telemetry::describe_metrics();
/// ```
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    describe_all();
}

/// [`describe_metrics`], once per process.
#[cfg(feature = "metrics")]
fn describe() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(describe_all);
}

#[cfg(feature = "metrics")]
fn describe_all() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    {
        describe_histogram!(
            "lock_acquire_duration_seconds",
            Unit::Seconds,
            "A whole acquire or try, waiting included, by operation, outcome, primitive and deployment."
        );
        describe_histogram!(
            "lock_acquire_wait_seconds",
            Unit::Seconds,
            "Acquires that found the lock held at least once: the time until granted or given up."
        );
        describe_histogram!(
            "lock_acquire_attempts",
            Unit::Count,
            "Tries per waiting acquire (1 when uncontended; a wait in a fair queue counts none)."
        );
        describe_counter!(
            "lock_validity_exhausted_total",
            Unit::Count,
            "Grants that arrived after their validity (not used; a queued waiter's try keeps them for its next try)."
        );
        describe_gauge!("lock_held", Unit::Count, "Holds live in this process.");
        describe_histogram!(
            "lock_hold_duration_seconds",
            Unit::Seconds,
            "From a grant to its release (or its guard's drop)."
        );
        describe_counter!(
            "lock_releases_total",
            Unit::Count,
            "Releases by outcome: released, already_expired or owned_by_other (the holder overran its validity), \
             deleted_while_held (gone before the validity ended: a forced release, another client), or an error kind."
        );
        describe_counter!("lock_lost_total", Unit::Count, "Holds lost while held, by reason.");
        describe_counter!("lock_renewals_total", Unit::Count, "The renewal watchdog's extensions, by outcome.");
        describe_counter!(
            "lock_force_releases_total",
            Unit::Count,
            "Administrators' forced releases, by whether they freed the name."
        );
        describe_counter!(
            "lock_subscriber_reconnects_total",
            Unit::Count,
            "Release-notification connections re-established, by backend (the store's type)."
        );
        describe_histogram!(
            "lock_command_duration_seconds",
            Unit::Seconds,
            "One round trip to one server, by backend (the store's type), operation and outcome."
        );
        describe_counter!(
            "lock_fenced_writes_total",
            Unit::Count,
            "Fenced writes by operation and outcome: written, stale_fence (refused: a newer holder has written), or an error kind."
        );
    }
}

/// Records the outcome of a fenced write, as [`FencedResource`](crate::FencedResource) does for its own: a write
/// refused because a newer fence has written ([`LockError::StaleFence`](crate::LockError::StaleFence)) is a `warn`
/// event naming `guard` and both fences (a stale holder tried to write: the fence did its job, and someone should
/// know), and every write is counted in `lock_fenced_writes_total` by `operation` and `outcome` (`written`,
/// `stale_fence`, or an error's [`kind`](crate::LockError::kind)). One call for a resource checked outside this
/// library, after its conditional write:
///
/// ```
/// use lock_core::{telemetry, FencingToken, LockError};
///
/// // Zero rows matched `UPDATE accounts SET … WHERE id = $1 AND fence <= $2`: a newer holder has written.
/// let result: Result<(), LockError> = Err(LockError::StaleFence { presented: 7, current: 9 });
/// telemetry::fenced_write("accounts", "sql_update", &result);
/// ```
pub fn fenced_write<T>(guard: &str, operation: &'static str, result: &crate::Result<T>) {
    let outcome = match result {
        Ok(_) => "written",
        Err(crate::LockError::StaleFence { presented, current }) => {
            tracing::warn!(
                guard,
                operation,
                presented,
                current,
                "fenced write refused: a newer holder has written (a stale holder tried to write)"
            );
            "stale_fence"
        }
        Err(err) => err.kind(),
    };
    #[cfg(feature = "metrics")]
    {
        describe();
        metrics::counter!("lock_fenced_writes_total", "operation" => operation, "outcome" => outcome).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (operation, outcome);
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
        super::describe();
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
        super::describe();
        let base = [("primitive", primitive), ("deployment", deployment)];
        histogram!("lock_hold_duration_seconds", labels(&base, resource)).record(held.as_secs_f64());
        let base = [("outcome", outcome), ("primitive", primitive), ("deployment", deployment)];
        counter!("lock_releases_total", labels(&base, resource)).increment(1);
    }

    pub(crate) fn lost(reason: &'static str, primitive: &'static str, deployment: &'static str, resource: &str) {
        super::describe();
        let base = [("reason", reason), ("primitive", primitive), ("deployment", deployment)];
        counter!("lock_lost_total", labels(&base, resource)).increment(1);
    }

    pub(crate) fn held(primitive: &'static str, deployment: &'static str, delta: f64) {
        super::describe();
        gauge!("lock_held", "primitive" => primitive, "deployment" => deployment).increment(delta);
    }

    pub(crate) fn renewal(renewed: bool, primitive: &'static str) {
        super::describe();
        let outcome = if renewed { "renewed" } else { "failed" };
        counter!("lock_renewals_total", "outcome" => outcome, "primitive" => primitive).increment(1);
    }

    pub(crate) fn force_release(freed: bool) {
        super::describe();
        counter!("lock_force_releases_total", "freed" => if freed { "true" } else { "false" }).increment(1);
    }

    pub(crate) fn command(backend: &'static str, operation: &'static str, outcome: &'static str, elapsed: Duration) {
        super::describe();
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

/// Whether durations are recorded at all (a command's latency, an acquire's, a hold's): only with the `metrics`
/// feature. Without it, the durations these functions take are not measured (a clock reading each, on every
/// acquire, command and release).
pub(crate) const RECORDS: bool = cfg!(feature = "metrics");

/// The short name of a store type for the `backend` label (`lock_redis_rs::store::RedisStore` → `RedisStore`).
pub(crate) fn backend_name<S: ?Sized>() -> &'static str {
    let full = std::any::type_name::<S>();
    let path = full.split('<').next().unwrap_or(full);
    path.rsplit("::").next().unwrap_or(path)
}

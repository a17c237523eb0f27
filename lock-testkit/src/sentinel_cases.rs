//! Cases every backend runs against a Sentinel-managed primary ([`RedisSentinel`]): release notifications, a
//! failover under load (the lock keeps working through the same store, calls in flight fail typed and bounded,
//! notifications resume), failover trials with and without replica acknowledgement, a grant lost by a failover
//! (what it does to mutual exclusion and to fencing tokens), and `READONLY` from a demoted primary.
//!
//! Like [`cluster_cases`](crate::cluster_cases), one public async function per case;
//! [`sentinel_tests!`](crate::sentinel_tests) writes one `#[test]` per case for a backend, given an async function
//! that connects its store to a deployment. The cases that kill a primary start a deployment of their own; the
//! others share one per test binary ([`shared`]).
//!
//! Each case is a test: it panics, naming what broke, when the backend does not keep a promise (so no case has an
//! `# Errors` section), and it is not meant to be cancelled except by ending the test.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{Lock, LockError, LockOptions, LockStore, ReleaseOutcome, ReplicaAck};

use crate::cluster_cases::{release_wake_delay, NOTIFIED_WITHIN};
use crate::or_panic::{ms, OrPanic};
use crate::{RedisSentinel, Reply};

/// Connects a backend's store to a Sentinel deployment (the argument of every case). Stores should have a command
/// timeout above the 1 s `WAIT` bound the trials use (3 s works).
pub type StoreFactory =
    dyn Fn(&RedisSentinel) -> Pin<Box<dyn Future<Output = Arc<dyn LockStore>> + Send + '_>> + Send + Sync;

/// Bound on one promotion after the primary is killed (about 2 s when the machine is idle).
const PROMOTION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after a promotion the lock may take to work again through the same store.
const RECOVERY: Duration = Duration::from_secs(20);
/// Trials per mode (without and with `WAIT`) in [`failover_trials_with_and_without_replica_ack`]; they run
/// concurrently, each on its own deployment, so the case takes about one failover.
const TRIALS: usize = 5;
/// The longest a single lock call may take during a failover: the store's bound (connect + command timeout, for
/// stores with a 3 s command timeout) with room for a loaded machine. A call that takes longer hangs.
const CALL_BOUND: Duration = Duration::from_secs(8);

/// The deployment shared by the cases of one test binary.
pub fn shared() -> &'static RedisSentinel {
    RedisSentinel::shared().unwrap_or_else(|err| panic!("redis sentinel: {err}"))
}

/// Runs blocking fixture work (start-up, waiting for a promotion) off the runtime's workers.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.or_panic()
}

/// Kills `deployment`'s primary and waits for the promotion; returns the deployment and how long it took.
async fn fail_over(mut deployment: RedisSentinel) -> (RedisSentinel, Duration) {
    blocking(move || {
        let started = Instant::now();
        deployment.kill_primary_and_wait_for_promotion(PROMOTION_TIMEOUT).or_panic();
        (deployment, started.elapsed())
    })
    .await
}

/// `try_acquire` until it answers (held or granted) or `RECOVERY` has passed; errors in between must be
/// retryable.
async fn try_until_answered(lock: &Lock, name: &str, opts: &LockOptions) -> Option<lock_core::Guard> {
    let deadline = Instant::now() + RECOVERY;
    loop {
        match lock.try_acquire(name, opts).await {
            Ok(outcome) => return outcome,
            Err(err) if err.is_retryable() && Instant::now() < deadline => {
                tracing::info!("{name}: retrying after failover: {err:?}");
                tokio::time::sleep(ms(50)).await;
            }
            Err(err) => panic!("{name}: lock unusable after failover: {err:?}"),
        }
    }
}

/// The token a guard holds, as the server stores it.
fn stored(guard: &lock_core::Guard) -> Reply {
    Reply::Bulk(Some(guard.token().as_str().as_bytes().to_vec()))
}

/// A release wakes a waiter through the store's subscriber on the primary the Sentinels name: with the backoff
/// pinned at 500 ms, only a notification wakes it within 200 ms.
pub async fn release_notification_wakes_waiter(store: &StoreFactory) {
    let deployment = shared();
    let holder = Lock::from_arc(store(deployment).await);
    let waiter = Arc::new(Lock::from_arc(store(deployment).await));
    for i in 0..3 {
        let delay = release_wake_delay(&holder, &waiter, &format!("sentinel-notify-{i}")).await;
        assert!(delay < NOTIFIED_WITHIN, "waiter took {delay:?} after the release; no notification");
    }
}

/// The primary is killed while a worker locks and unlocks: every call returns within 8 s, every error is
/// retryable, and once the replica is promoted the same stores grant locks again and release notifications
/// (through a subscriber that had to find the new primary) wake waiters again.
pub async fn lock_keeps_working_after_failover(store: &StoreFactory) {
    let deployment = blocking(|| RedisSentinel::start().or_panic()).await;
    let lock = Arc::new(Lock::from_arc(store(&deployment).await));
    assert_eq!(lock.deployment(), "sentinel", "what traces and metrics call a Sentinel deployment");
    let waiter = Arc::new(Lock::from_arc(store(&deployment).await));
    // Both stores' subscribers are connected before the failover.
    let delay = release_wake_delay(&lock, &waiter, "before").await;
    assert!(delay < NOTIFIED_WITHIN, "no notification before the failover ({delay:?})");
    let held = lock.acquire("held", &LockOptions::new(ms(30_000))).await.or_panic();

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new((0usize, Vec::<String>::new(), Duration::ZERO)));
    let load = {
        let (lock, stop, seen) = (lock.clone(), stop.clone(), seen.clone());
        tokio::spawn(async move {
            let opts = LockOptions::new(ms(5_000));
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let started = Instant::now();
                let result = match lock.try_acquire(&format!("load-{}", i % 4), &opts).await {
                    Ok(Some(g)) => g.release().await.map(|_| ()),
                    Ok(None) => Ok(()),
                    Err(err) => Err(err),
                };
                let took = started.elapsed();
                let failed = {
                    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                    seen.0 += 1;
                    seen.2 = seen.2.max(took);
                    match result {
                        Err(err) => {
                            assert!(err.is_retryable(), "a call during the failover failed for good: {err:?}");
                            seen.1.push(err.to_string());
                            true
                        }
                        Ok(()) => false,
                    }
                };
                if failed {
                    tokio::time::sleep(ms(20)).await;
                }
            }
        })
    };
    tokio::time::sleep(ms(100)).await;
    let (deployment, took) = fail_over(deployment).await;
    tracing::info!("primary killed, replica promoted in {took:?}");

    let after = try_until_answered(&lock, "after", &LockOptions::new(ms(5_000))).await.or_panic();
    after.release().await.or_panic();
    stop.store(true, Ordering::Relaxed);
    load.await.or_panic();
    let (calls, errors, slowest) = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    println_report(&format!(
        "failover under load: promotion {took:?}; {calls} calls, {} retryable errors (first {:?}), slowest call {slowest:?}",
        errors.len(),
        errors.first()
    ));
    assert!(slowest < CALL_BOUND, "a call took {slowest:?}");

    // Whether the lock held at the kill survived: reported, not asserted (replication is asynchronous).
    let kept = try_until_answered(&lock, "held", &LockOptions::new(ms(5_000))).await;
    tracing::info!("lock held before the kill was {}", if kept.is_some() { "lost" } else { "kept" });
    if let Some(g) = kept {
        g.release().await.or_panic();
    }
    let _ = held.release().await;

    // The subscribers reconnect with backoff (and cannot before the promotion): retry until one wakes a waiter.
    let deadline = Instant::now() + RECOVERY;
    for attempt in 0.. {
        let delay = release_wake_delay(&lock, &waiter, &format!("after-{attempt}")).await;
        if delay < NOTIFIED_WITHIN {
            break;
        }
        assert!(Instant::now() < deadline, "no release notification after the failover (last wake {delay:?})");
    }
    drop(deployment);
}

/// One failover trial: acquire on a fresh deployment, kill the primary at once, wait for the promotion, and look
/// at the promoted replica.
struct Trial {
    /// The grant is missing on the promoted replica.
    missing: bool,
    /// A second grant of the same resource through the same store succeeded while the first was still within
    /// its TTL.
    double_grant: bool,
    /// The fencing tokens of the grant before the failover and of the next grant of the same resource after it.
    fences: (u64, u64),
    failover: Duration,
}

async fn trial(store: &StoreFactory, with_wait: bool, t: usize) -> Trial {
    let deployment = blocking(|| RedisSentinel::start().or_panic()).await;
    let lock = Lock::from_arc(store(&deployment).await);
    let name = format!("trial-{t}");
    // The fence drawn with the grant, so a grant lost in the failover loses its fence with it.
    let mut opts = LockOptions::new(ms(30_000)).with_fencing_mode(lock_core::Fencing::OnAcquire);
    if with_wait {
        opts = opts.with_replica_ack(ReplicaAck::new(1, ms(1_000)));
    }
    // A waiting acquire: a replica that lags past the WAIT timeout is a retryable shortfall.
    let guard = lock.acquire(&name, &opts.with_wait(ms(5_000))).await.or_panic();
    let (deployment, failover) = fail_over(deployment).await;
    let primary = deployment.primary().or_panic();
    let missing = primary.command(&["GET", guard.keys().lock()]).or_panic() != stored(&guard);
    let before = guard.drawn_fence().or_panic().get();
    let plain = LockOptions::new(ms(5_000)).with_fencing_mode(lock_core::Fencing::OnAcquire);
    let (double_grant, next) = match try_until_answered(&lock, &name, &plain).await {
        Some(second) => {
            drop(guard);
            (true, second)
        }
        None => {
            assert_eq!(guard.release().await.or_panic(), ReleaseOutcome::Released);
            (false, lock.try_acquire(&name, &plain).await.or_panic().or_panic())
        }
    };
    let after = next.fence().await.ok().or_panic().get();
    next.release().await.or_panic();
    Trial { missing, double_grant, fences: (before, after), failover }
}

/// Failover trials: 5 per mode, each acquiring on its own deployment and killing the primary right
/// after the grant. Counts how often the grant is missing on the promoted replica (then the same resource is
/// granted a second time) without and with `WAIT` for one replica. Only what must hold is asserted: with `WAIT`
/// nothing is missing, a missing grant always means a double grant, and fencing tokens keep increasing across the
/// failover (all processes share this machine's clock, which the fencing floor follows).
pub async fn failover_trials_with_and_without_replica_ack(store: &StoreFactory) {
    let runs = [false, true].into_iter().flat_map(|wait| (0..TRIALS).map(move |t| (wait, t)));
    let trials =
        futures_util::future::join_all(runs.map(|(wait, t)| async move { (wait, trial(store, wait, t).await) })).await;
    let mut missing = [0usize; 2];
    for (wait, trial) in &trials {
        assert_eq!(trial.missing, trial.double_grant, "a missing grant is exactly a second grant");
        assert!(
            trial.fences.1 > trial.fences.0,
            "fencing token did not increase across the failover: {:?}",
            trial.fences
        );
        missing[usize::from(*wait)] += usize::from(trial.missing);
    }
    let slowest = trials.iter().map(|(_, t)| t.failover).max().unwrap_or_default();
    tracing::info!(
        "sentinel failover trials: grant missing on the promoted replica in {}/{TRIALS} without WAIT, \
         {}/{TRIALS} with WAIT (slowest promotion {slowest:?})",
        missing[0],
        missing[1]
    );
    println_report(&format!(
        "sentinel failover trials: missing {}/{TRIALS} without WAIT, {}/{TRIALS} with WAIT; slowest promotion {slowest:?}",
        missing[0], missing[1]
    ));
    assert_eq!(missing[1], 0, "an acknowledged grant was lost");
}

/// A grant the failover loses, made deterministic: right before the grant the primary starts requiring a password
/// (connections already open, the store's and the Sentinels', stay authenticated) and drops its replica's link, so
/// the replica cannot reconnect; the primary is killed right after the grant. The promoted replica never saw the
/// grant, so the same store grants the resource again: two holders.
///
/// Then the fencing token of the second grant: the counter's last increment was lost with the grant. While the
/// counter follows the servers' clock (the fencing floor), the second token is still above the lost one, because
/// time has passed on this machine's one clock. When the counter is ahead of the promoted replica's clock (here set
/// ahead on purpose, as a primary whose clock ran ahead of its replica's would leave it), the second grant receives
/// the lost grant's token again. Both outcomes are asserted: they are what the scripts do.
pub async fn lost_grant_is_granted_again_and_its_fencing_token_may_repeat(store: &StoreFactory) {
    // Each on its own deployment, concurrently: the case takes one failover.
    futures_util::future::join_all([false, true].map(|counter_ahead| lose_a_grant(store, counter_ahead))).await;
}

async fn lose_a_grant(store: &StoreFactory, counter_ahead: bool) {
    let deployment = blocking(|| RedisSentinel::start().or_panic()).await;
    let lock = Lock::from_arc(store(&deployment).await);
    let name = format!("lost-{counter_ahead}");
    let opts = LockOptions::new(ms(30_000)).with_fencing_mode(lock_core::Fencing::OnAcquire);
    // A first grant creates the counter on both nodes.
    let first = lock.acquire(&name, &opts).await.or_panic();
    let (first_fence, fence_key) = (first.fence().await.ok().or_panic().get(), first.keys().fence().to_owned());
    first.release().await.or_panic();
    let mut conn = crate::Connection::open(deployment.primary().or_panic().addr(), ms(5_000)).or_panic();
    if counter_ahead {
        let far = (first_fence + 1_000_000_000_000).to_string();
        conn.command(&["SET", &fence_key, &far]).or_panic();
    }
    // WAIT covers the writes of its own connection; replication is one ordered stream, so a write here after
    // the store's, acknowledged, means the replica has everything up to it.
    conn.command(&["SET", "lost-marker", "1"]).or_panic();
    assert_eq!(conn.command(&["WAIT", "1", "1000"]).or_panic(), Reply::Int(1));
    conn.command(&["CONFIG", "SET", "requirepass", "cut-off"]).or_panic();
    conn.command(&["CLIENT", "KILL", "TYPE", "replica"]).or_panic();
    let lost = lock.acquire(&name, &opts).await.or_panic();
    let (deployment, _) = fail_over(deployment).await;
    let promoted = deployment.primary().or_panic();
    assert_eq!(promoted.command(&["GET", lost.keys().lock()]).or_panic(), Reply::Bulk(None), "replicated");
    let second = try_until_answered(&lock, &name, &opts).await;
    let second = second.unwrap_or_else(|| panic!("the lost grant was not granted again"));
    let (a, b) = (lost.fence().await.ok().or_panic().get(), second.fence().await.ok().or_panic().get());
    println_report(&format!("lost grant (counter ahead of the clock: {counter_ahead}): fencing token {a} then {b}"));
    if counter_ahead {
        assert_eq!(b, a, "the lost increment is made again: the token repeats");
    } else {
        assert!(b > a, "the clock floor keeps the token above the lost one");
    }
    second.release().await.or_panic();
    drop(lost);
}

/// A store whose connection sits on a primary that is demoted without being disconnected (roles swapped by hand,
/// see [`RedisSentinel::swap_roles_by_hand`]) gets `READONLY` at most once, as a retryable error, and then finds
/// the new primary through the Sentinels.
pub async fn readonly_from_demoted_primary_is_retryable_once(store: &StoreFactory) {
    let mut deployment = blocking(|| RedisSentinel::start().or_panic()).await;
    let lock = Lock::from_arc(store(&deployment).await);
    let opts = LockOptions::new(ms(5_000));
    lock.acquire("before", &opts).await.or_panic().release().await.or_panic();
    let (deployment, promoted) = blocking(move || {
        let promoted = deployment.swap_roles_by_hand(Duration::from_secs(20)).or_panic();
        (deployment, promoted)
    })
    .await;
    assert_eq!(deployment.primary().or_panic().addr(), promoted);
    let mut errors: Vec<LockError> = Vec::new();
    let guard = loop {
        match lock.try_acquire("after", &opts).await {
            Ok(guard) => break guard.or_panic(),
            Err(err) => {
                assert!(err.is_retryable(), "{err:?}");
                errors.push(err);
                assert!(errors.len() <= 1, "READONLY reached the caller more than once: {errors:?}");
            }
        }
    };
    println_report(&format!("after the roles were swapped by hand: {errors:?}"));
    let on_new = deployment.primary().or_panic().command(&["GET", guard.keys().lock()]).or_panic();
    assert_eq!(on_new, stored(&guard), "the grant must be on the new primary");
    guard.release().await.or_panic();
}

/// Prints a measured result (visible with `--nocapture`, and in CI logs of a failing run).
#[allow(clippy::print_stdout)]
fn println_report(line: &str) {
    println!("{line}");
}

/// Fenced writes behind Sentinel: the conformance rules hold on the primary the Sentinels name.
pub async fn fenced_writes_hold_behind_sentinel(store: &StoreFactory) {
    let deployment = shared();
    let subject = crate::Subject::new(Lock::from_arc(store(deployment).await));
    crate::fenced_conformance::fenced_write_refuses_a_holder_whose_lease_ran_out(&subject).await;
    crate::fenced_conformance::fenced_read_modify_write_loses_no_update_in_any_interleaving(&subject).await;
    crate::fenced_conformance::fenced_writes_cancelled_anywhere_keep_the_fence_order(&subject).await;
}

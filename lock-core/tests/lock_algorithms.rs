//! The single-instance algorithm's decisions, driven through a store wrapper that delays, hangs or fails on
//! command. (Backends are proven against real servers in their own crates; this pins down lock-core's part.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{AcquireReply, AcquireRequest, ExtendReply, ReleaseHub};
use lock_core::{
    Lock, LockError, LockKeys, LockOptions, LockStore, LostReason, MemoryStore, ReleaseOutcome, RenewPolicy,
    RetryPolicy, Token,
};

/// What the wrapper does to acquire requests.
#[derive(Debug, Default)]
struct Faults {
    /// Apply the acquire, then hold the reply back this long.
    reply_delay_ms: AtomicUsize,
    /// Apply the acquire, then never reply.
    hang_after_apply: AtomicBool,
    /// Fail this many acquires with `Unavailable` before touching the store.
    unavailable: AtomicUsize,
    /// Hide the release hub (a backend without notifications).
    no_hub: AtomicBool,
    /// Fail every extend with `Unavailable` (a partition after acquire).
    extend_unavailable: AtomicBool,
    /// Extends that reached the store.
    extends: AtomicUsize,
}

#[derive(Debug)]
struct Faulty {
    inner: MemoryStore,
    faults: Arc<Faults>,
    calls: Arc<AtomicUsize>,
}

fn faulty() -> (Lock, MemoryStore, Arc<Faults>, Arc<AtomicUsize>) {
    let inner = MemoryStore::new();
    let faults = Arc::new(Faults::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Faulty { inner: inner.clone(), faults: faults.clone(), calls: calls.clone() };
    (Lock::new(store), inner, faults, calls)
}

#[async_trait]
impl LockStore for Faulty {
    async fn acquire(&self, request: AcquireRequest<'_>) -> lock_core::Result<AcquireReply> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.faults.unavailable.load(Ordering::SeqCst) > 0 {
            self.faults.unavailable.fetch_sub(1, Ordering::SeqCst);
            return Err(LockError::unavailable(std::io::Error::other("connection refused")));
        }
        let reply = self.inner.acquire(request).await?;
        if self.faults.hang_after_apply.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let delay = self.faults.reply_delay_ms.load(Ordering::SeqCst) as u64;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Ok(reply)
    }
    async fn release(&self, keys: &LockKeys, token: &Token) -> lock_core::Result<ReleaseOutcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.release(keys, token).await
    }
    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> lock_core::Result<ExtendReply> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.faults.extends.fetch_add(1, Ordering::SeqCst);
        if self.faults.extend_unavailable.load(Ordering::SeqCst) {
            return Err(LockError::unavailable(std::io::Error::other("partitioned")));
        }
        self.inner.extend(keys, token, ttl).await
    }
    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> lock_core::Result<bool> {
        self.inner.raise_fence(keys, token, at_least).await
    }
    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        if self.faults.no_hub.load(Ordering::SeqCst) {
            None
        } else {
            self.inner.release_hub()
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How late a timer may fire on a loaded machine (as `lock_testkit::conformance::STARVED`).
const STARVED: Duration = Duration::from_secs(1);

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < ms(2_000), "{what} did not happen within 2 s");
        tokio::time::sleep(ms(5)).await;
    }
}

#[tokio::test]
async fn invalid_input_never_reaches_the_store() {
    let (lock, _, _, calls) = faulty();
    assert!(lock.try_acquire("", &LockOptions::default()).await.is_err());
    assert!(lock.acquire("r", &LockOptions::new(Duration::ZERO)).await.is_err());
    let bad_prefix = lock.clone().with_key_prefix("{bad}");
    assert!(bad_prefix.try_acquire("r", &LockOptions::default()).await.is_err());
    let zero_timeout = lock.clone().with_operation_timeout(Duration::ZERO);
    assert!(zero_timeout.try_acquire("r", &LockOptions::default()).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_grant_that_arrives_after_its_validity_is_given_back() {
    let (lock, inner, faults, _) = faulty();
    faults.reply_delay_ms.store(40, Ordering::SeqCst);
    let err = lock.try_acquire("slow", &LockOptions::new(ms(30))).await.err();
    assert!(matches!(err, Some(LockError::ValidityExhausted { .. })), "{err:?}");
    assert_eq!(inner.held_count(), 0, "the late grant must be released, not left to its TTL");
}

#[tokio::test]
async fn a_lost_reply_times_out_and_the_maybe_acquired_lock_is_released() {
    let (lock, inner, faults, _) = faulty();
    let lock = lock.with_operation_timeout(ms(100));
    faults.hang_after_apply.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    let err = lock.try_acquire("lost-reply", &LockOptions::new(Duration::from_secs(30))).await.err();
    assert!(matches!(err, Some(LockError::Timeout { operation: "acquire", .. })), "{err:?}");
    assert!(t0.elapsed() < ms(1_000));
    assert_eq!(inner.held_count(), 0);
}

#[tokio::test]
async fn a_cancelled_acquire_releases_in_the_background() {
    let (lock, inner, faults, _) = faulty();
    faults.hang_after_apply.store(true, Ordering::SeqCst);
    let opts = LockOptions::new(Duration::from_secs(30));
    let attempt = lock.try_acquire("cancelled", &opts);
    assert!(tokio::time::timeout(ms(50), attempt).await.is_err());
    eventually("background release of the cancelled acquire", || inner.held_count() == 0).await;
}

#[tokio::test]
async fn transient_errors_are_retried_within_the_budget_and_reported_by_try() {
    let (lock, _, faults, _) = faulty();
    faults.unavailable.store(1, Ordering::SeqCst);
    let err = lock.try_acquire("flaky", &LockOptions::default()).await.err();
    assert!(matches!(err, Some(LockError::Unavailable { .. })), "{err:?}");
    faults.unavailable.store(2, Ordering::SeqCst);
    let g = lock.acquire("flaky", &LockOptions::default().with_wait(ms(2_000))).await.unwrap();
    assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
    // When the budget runs out on an error, the error is reported, not `Contended`.
    faults.unavailable.store(1_000, Ordering::SeqCst);
    let err = lock.acquire("flaky", &LockOptions::default().with_wait(ms(100))).await.err();
    assert!(matches!(err, Some(LockError::Unavailable { .. })), "{err:?}");
}

#[tokio::test]
async fn without_notifications_a_waiter_wakes_at_the_holders_expiry() {
    let (lock, _, faults, _) = faulty();
    faults.no_hub.store(true, Ordering::SeqCst);
    let slow_polls = RetryPolicy::default().with_min_delay(ms(2_000)).with_max_delay(ms(2_000));
    let holder = lock.try_acquire("expiry", &LockOptions::new(ms(150))).await.unwrap().unwrap();
    let t0 = Instant::now();
    let g =
        lock.acquire("expiry", &LockOptions::new(ms(1_000)).with_wait(ms(5_000)).with_retry(slow_polls)).await.unwrap();
    let waited = t0.elapsed();
    // Below the 2 s poll by far, with a starved scheduler's margin over the 150 ms TTL.
    assert!(waited < ms(150) + STARVED, "waited {waited:?}: the holder's TTL should have woken the waiter");
    drop((holder, g));
}

#[tokio::test]
async fn a_release_wakes_one_waiter_promptly() {
    let (lock, _, _, _) = faulty();
    let slow_polls = RetryPolicy::default().with_min_delay(ms(2_000)).with_max_delay(ms(2_000));
    let opts = LockOptions::new(ms(10_000)).with_wait(ms(5_000)).with_retry(slow_polls);
    let holder = lock.try_acquire("notify", &opts).await.unwrap().unwrap();
    let waiter = {
        let (lock, opts) = (lock.clone(), opts.clone());
        tokio::spawn(async move {
            let g = lock.acquire("notify", &opts).await.unwrap();
            (Instant::now(), g)
        })
    };
    tokio::time::sleep(ms(100)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let (acquired, g) = waiter.await.unwrap();
    // Below the 2 s poll by far.
    assert!(acquired - released < STARVED, "woken {:?} after release", acquired - released);
    g.release().await.unwrap();
}

#[tokio::test]
async fn dropped_guards_leave_no_background_tasks() {
    let (lock, inner, _, _) = faulty();
    for i in 0..200 {
        let g = lock.try_acquire(&format!("drop{i}"), &LockOptions::default()).await.unwrap().unwrap();
        drop(g);
    }
    eventually("all dropped guards released", || inner.held_count() == 0).await;
    // Other tests in this binary spawn too, and the count is the process's: ours must all have finished, and theirs
    // end with them (within the binary's own running time, a few seconds; more on a loaded machine, where 2 s failed
    // beside two CPU burners).
    let t0 = Instant::now();
    while lock_core::backend::live_background_tasks() != 0 {
        assert!(t0.elapsed() < ms(30_000), "background tasks still running after 30 s");
        tokio::time::sleep(ms(5)).await;
    }
}

fn renewing(ttl_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_auto_renew(RenewPolicy::default())
}

#[tokio::test]
async fn renewal_stops_before_release_and_after_drop() {
    let (lock, inner, faults, _) = faulty();
    let g = lock.try_acquire("renew-release", &renewing(90)).await.unwrap().unwrap();
    eventually("a few renewals", || faults.extends.load(Ordering::SeqCst) >= 3).await;
    g.release().await.unwrap();
    let after_release = faults.extends.load(Ordering::SeqCst);
    tokio::time::sleep(ms(200)).await;
    assert_eq!(faults.extends.load(Ordering::SeqCst), after_release, "renewal continued after release");

    let g = lock.try_acquire("renew-drop", &renewing(90)).await.unwrap().unwrap();
    eventually("a renewal", || faults.extends.load(Ordering::SeqCst) > after_release).await;
    drop(g);
    let after_drop = faults.extends.load(Ordering::SeqCst);
    tokio::time::sleep(ms(200)).await;
    assert_eq!(faults.extends.load(Ordering::SeqCst), after_drop, "renewal continued after drop");
    eventually("dropped lock released", || inner.held_count() == 0).await;
}

#[tokio::test]
async fn failing_renewals_report_loss_at_the_validity_deadline_not_after() {
    let (lock, _, faults, _) = faulty();
    let g = lock.try_acquire("renew-partition", &renewing(150)).await.unwrap().unwrap();
    faults.extend_unavailable.store(true, Ordering::SeqCst);
    let reason = g.lost_signal().lost().await;
    let now = Instant::now();
    assert_eq!(reason, LostReason::RenewalFailed);
    assert!(now >= g.valid_until(), "reported before the deadline although the lock might still be held");
    assert!(now - g.valid_until() < STARVED, "reported {:?} after the deadline", now - g.valid_until());
    assert!(faults.extends.load(Ordering::SeqCst) >= 2, "renewal should retry before giving up");
}

#[tokio::test]
async fn a_key_deleted_behind_the_holders_back_is_lost_at_the_next_renewal() {
    let (lock, inner, _, _) = faulty();
    let g = lock.try_acquire("renew-deleted", &renewing(300)).await.unwrap().unwrap();
    assert_eq!(inner.release(g.keys(), g.token()).await.unwrap(), ReleaseOutcome::Released);
    let t0 = Instant::now();
    assert_eq!(g.lost_signal().lost().await, LostReason::NotHeld);
    assert!(t0.elapsed() < ms(100) + STARVED, "noticed only after {:?} (renewal every 100 ms)", t0.elapsed());
}

#[tokio::test]
async fn a_thousand_renewing_guards_all_stay_held() {
    let (lock, inner, faults, _) = faulty();
    let mut guards = Vec::new();
    // A TTL whose renewals (every 500 ms) a starved scheduler survives: 300 ms lost one beside two CPU burners.
    for i in 0..1_000 {
        guards.push(lock.try_acquire(&format!("many{i}"), &renewing(1_500)).await.unwrap().unwrap());
    }
    tokio::time::sleep(ms(2_100)).await;
    assert!(guards.iter().all(|g| !g.is_lost()), "a renewing guard was lost");
    assert_eq!(inner.held_count(), 1_000);
    assert!(faults.extends.load(Ordering::SeqCst) >= 3_000, "expected ~4 renewals per guard");
    for g in guards {
        g.release().await.unwrap();
    }
    assert_eq!(inner.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competitors_that_loop_back_share_the_lock_fairly() {
    let lock = Lock::new(MemoryStore::new());
    let stop = Arc::new(AtomicBool::new(false));
    let competitors: Vec<_> = (0..4)
        .map(|_| {
            let (lock, stop) = (lock.clone(), stop.clone());
            tokio::spawn(async move {
                let opts = LockOptions::new(ms(5_000)).with_wait(ms(5_000));
                let mut won = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let g = lock.acquire("fair", &opts).await.unwrap();
                    tokio::time::sleep(ms(1)).await;
                    g.release().await.unwrap();
                    won += 1;
                }
                won
            })
        })
        .collect();
    tokio::time::sleep(ms(1_000)).await;
    stop.store(true, Ordering::SeqCst);
    let mut wins = Vec::new();
    for c in competitors {
        wins.push(c.await.unwrap());
    }
    let (min, max) = (*wins.iter().min().unwrap(), *wins.iter().max().unwrap());
    assert!(max > 20, "too few hand-offs to judge: {wins:?}");
    assert!(f64::from(min) >= 0.5 * f64::from(max), "a releaser looping back starves the others: {wins:?}");
}

#[tokio::test]
async fn a_replica_shortfall_gives_the_grant_back() {
    use lock_core::{ReplicaAck, Shortfall};
    let (lock, inner, _, _) = faulty();
    let opts = LockOptions::new(ms(5_000)).with_replica_ack(ReplicaAck::new(1, ms(50)));
    let err = lock.try_acquire("replicas", &opts).await.err();
    assert!(matches!(err, Some(LockError::ReplicasShort { acknowledged: 0, required: 1 })), "{err:?}");
    assert_eq!(inner.held_count(), 0, "a grant without enough replicas must be released");
    let accept =
        LockOptions::new(ms(5_000)).with_replica_ack(ReplicaAck::new(1, ms(50)).with_on_shortfall(Shortfall::Accept));
    let g = lock.try_acquire("replicas", &accept).await.unwrap().expect("accepted");
    g.release().await.unwrap();
    let bad = LockOptions::new(ms(100)).with_replica_ack(ReplicaAck::new(1, ms(200)));
    assert!(matches!(lock.try_acquire("replicas", &bad).await, Err(LockError::InvalidArgument(_))));
}

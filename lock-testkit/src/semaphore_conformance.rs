//! The semaphore's conformance cases ([`Semaphore`]): one public async function per case, each taking the
//! [`Subject`] under test, which must wrap a [`lock_core::Lock`] ([`Subject::engine`]).
//!
//! [`conformance_tests!`](crate::conformance_tests) runs them (through [`semaphore_tests!`](crate::semaphore_tests)).
//! They follow the test list of the semaphore study (`shared/research/primitives.md`, section 1.7) within one
//! process; a killed and a paused holder process are in the backends' fault suites. Over Redlock a semaphore is
//! refused, and these cases check only that.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::{join, join_all, select};
use lock_core::{LockError, LockOptions, Permit, ReleaseOutcome, RetryPolicy, Semaphore};

use crate::conformance::{ok, some};
use crate::or_panic::ms;
use crate::runtime::sleep;
use crate::scripted::CancelAfter;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("sem:{case}:{:016x}", rand::random::<u64>())
}

/// The semaphore under test, or `None` over Redlock (where it is refused: see
/// [`semaphore_is_refused_where_it_cannot_hold`]).
fn semaphore(s: &Subject, case: &str, limit: u32) -> Option<Semaphore> {
    (s.engine().stores().len() == 1)
        .then(|| ok(Semaphore::new(s.engine().clone(), &fresh(case), limit), "Semaphore::new"))
}

fn opts(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_wait(ms(wait_ms))
}

/// Test 1: 12 tasks loop acquire / hold / release on a limit of 3: never more than 3 hold at once, 3 do at some
/// point, and nothing is held afterwards.
pub async fn semaphore_never_grants_more_than_its_limit(s: &Subject) {
    let Some(sem) = semaphore(s, "limit", 3) else { return };
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks = (0..12).map(|_| {
        let (sem, holding, most) = (&sem, holding.clone(), most.clone());
        async move {
            for _ in 0..6 {
                let permit = ok(sem.acquire(1, &opts(5_000, 10_000)).await, "acquire");
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                sleep(ms(10)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(ok(permit.release().await, "release"), ReleaseOutcome::Released);
            }
        }
    });
    join_all(tasks).await;
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} held a semaphore of 3 at once");
    assert_eq!(most, 3, "never 3 at once: the semaphore served fewer than its limit");
    assert_eq!(ok(sem.state().await, "state").held, 0, "slots left after every release");
}

/// Numbered slots: a permit of n holds n distinct slots below the limit, two live permits never share one, and
/// over many grants the fencing tokens each slot sees strictly increase.
pub async fn semaphore_slots_are_distinct_and_fence_per_slot(s: &Subject) {
    let Some(sem) = semaphore(s, "slots", 4) else { return };
    let mut last: HashMap<u32, u64> = HashMap::new();
    for round in 0..40u32 {
        let a = ok(sem.acquire(1 + round % 3, &opts(5_000, 1_000)).await, "acquire a");
        let b = some(ok(sem.try_acquire(1, &opts(5_000, 0)).await, "try b"), "a free slot for b");
        let all: Vec<u32> = a.slots().iter().chain(b.slots()).copied().collect();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "round {round}: two permits share a slot: {all:?}");
        assert!(all.iter().all(|s| *s < 4), "round {round}: a slot out of range: {all:?}");
        for permit in [&a, &b] {
            let fence = some(permit.fence().await.ok(), "fencing is on by default").get();
            for slot in permit.slots() {
                if let Some(before) = last.insert(*slot, fence) {
                    assert!(fence > before, "slot {slot}: token {fence} after {before}");
                }
            }
        }
        ok(a.release().await, "release a");
        ok(b.release().await, "release b");
    }
}

/// Test 3 (in one process): a holder whose TTL passes loses its slots to the next acquirer; then its extend is
/// `Lost`, its release says it had expired, and the count does not move (no double free).
pub async fn semaphore_expired_holder_never_frees_twice(s: &Subject) {
    let Some(sem) = semaphore(s, "expired", 2) else { return };
    let old = ok(sem.acquire(2, &opts(80, 0)).await, "acquire");
    sleep(ms(150)).await;
    let next = some(ok(sem.try_acquire(2, &opts(5_000, 0)).await, "try after expiry"), "the expired permits");
    assert!(matches!(old.extend(ms(5_000)).await, Err(LockError::Lost { .. })), "an expired permit was extended");
    assert!(old.is_lost());
    assert_eq!(ok(old.release().await, "stale release"), ReleaseOutcome::AlreadyExpired);
    assert_eq!(ok(sem.state().await, "state").held, 2, "the stale release freed someone else's slots");
    assert!(ok(sem.try_acquire(1, &opts(5_000, 0)).await, "try").is_none(), "a third permit of 2");
    ok(next.release().await, "release");
}

/// A waiter for several permits is woken by a release (its retries are 5 s apart), and gets them all at once.
pub async fn semaphore_release_wakes_a_waiter(s: &Subject) {
    let Some(sem) = semaphore(s, "wake", 2) else { return };
    let holder = ok(sem.acquire(2, &opts(30_000, 0)).await, "acquire");
    let slow =
        opts(30_000, 10_000).with_retry(RetryPolicy::default().with_min_delay(ms(5_000)).with_max_delay(ms(5_000)));
    let waiter = sem.acquire(2, &slow);
    let release = async {
        sleep(ms(50)).await;
        let at = Instant::now();
        ok(holder.release().await, "release");
        at
    };
    let (permit, released) = join(waiter, release).await;
    let permit = ok(permit, "the waiter's acquire");
    assert!(released.elapsed() < ms(2_000), "the waiter was not woken by the release");
    assert_eq!(permit.slots().len(), 2);
    ok(permit.release().await, "release");
}

/// Review finding 9: a release wakes every local waiter it leaves room for, within a round trip, not at their
/// safety poll (20 s here, against the 2 s bound). Three one-slot waiters behind a holder of all three slots all get
/// in when it releases; and a one-slot waiter queued behind a two-slot one gets the slot a release frees, although
/// the waiter woken first (the two-slot one) cannot use it: it passes the wake-up on.
pub async fn semaphore_release_wakes_every_waiter_that_fits(s: &Subject) {
    let Some(sem) = semaphore(s, "every", 3) else { return };
    let patient = || {
        let slow = RetryPolicy::default().with_min_delay(ms(20_000)).with_max_delay(ms(20_000));
        opts(30_000, 30_000).with_retry(slow.with_safety_poll(ms(20_000)))
    };
    let holder = ok(sem.acquire(3, &opts(30_000, 0)).await, "the holder of every slot");
    let waiters = join_all((0..3).map(|i| {
        let (sem, patient) = (&sem, patient());
        async move {
            // Arrive one after the other, so each waits behind the holder (an early arrival only tries sooner).
            sleep(ms(20 * i)).await;
            let permit = ok(sem.acquire(1, &patient).await, "a one-slot waiter");
            (permit, Instant::now())
        }
    }));
    let release = async {
        sleep(ms(300)).await;
        let at = Instant::now();
        ok(holder.release().await, "release");
        at
    };
    let (got, released) = join(waiters, release).await;
    for (permit, at) in got {
        let after = at.saturating_duration_since(released);
        assert!(after < ms(2_000), "a waiter the release left room for got in {after:?} after it");
        ok(permit.release().await, "release");
    }

    let Some(sem) = semaphore(s, "behind", 2) else { return };
    let first = ok(sem.acquire(1, &opts(30_000, 0)).await, "holder 1");
    let second = ok(sem.acquire(1, &opts(30_000, 0)).await, "holder 2");
    let waiting = patient();
    let both = sem.acquire(2, &waiting);
    let one = async {
        sleep(ms(150)).await;
        let permit = ok(sem.acquire(1, &patient()).await, "the one-slot waiter");
        let at = Instant::now();
        // Then the slots go, so the two-slot waiter gets in too.
        ok(permit.release().await, "release");
        ok(second.release().await, "release");
        at
    };
    let release = async {
        sleep(ms(400)).await;
        let at = Instant::now();
        ok(first.release().await, "release");
        at
    };
    let (both, (got_one, released)) = join(both, join(one, release)).await;
    let after = got_one.saturating_duration_since(released);
    assert!(after < ms(2_000), "the one-slot waiter got the freed slot {after:?} after the release");
    let both = ok(both, "the two-slot waiter");
    assert_eq!(both.slots().len(), 2);
    ok(both.release().await, "release");
}

/// Test 5: a client with another limit is refused (typed, nothing taken) while permits are held; once all are
/// released the semaphore forgets its limit.
pub async fn semaphore_limit_mismatch_is_typed(s: &Subject) {
    let Some(sem) = semaphore(s, "mismatch", 3) else { return };
    let other = ok(Semaphore::new(s.engine().clone(), sem.name(), 5), "Semaphore::new");
    let permit = ok(sem.acquire(1, &opts(5_000, 0)).await, "acquire");
    match other.try_acquire(1, &opts(5_000, 0)).await {
        Err(LockError::InvalidArgument(message)) => assert!(message.contains('3'), "{message}"),
        other => panic!("expected a typed limit mismatch, got {other:?}"),
    }
    let state = ok(sem.state().await, "state");
    assert_eq!((state.limit, state.held), (Some(3), 1));
    ok(permit.release().await, "release");
    let fresh =
        some(ok(other.try_acquire(5, &opts(5_000, 0)).await, "try with 5"), "an empty semaphore takes any limit");
    ok(fresh.release().await, "release");
}

/// Test 7: 2 000 acquires cancelled at every point (after 1 to 6 polls, or 2 ms) leave no permit behind once their
/// TTL has passed, and the semaphore then grants its whole limit.
pub async fn semaphore_cancelled_acquires_leave_nothing_behind(s: &Subject) {
    let Some(sem) = semaphore(s, "storm", 3) else { return };
    let options = opts(300, 50);
    for i in 0..2_000u32 {
        let acquire = CancelAfter::new(sem.acquire(1 + i % 2, &options), 1 + i % 6);
        let _ = select(Box::pin(acquire), Box::pin(sleep(ms(2)))).await;
    }
    let started = Instant::now();
    while ok(sem.state().await, "state").held > 0 {
        assert!(started.elapsed() < ms(3_000), "cancelled acquires left permits behind past their TTL");
        sleep(ms(10)).await;
    }
    let all: Permit = some(ok(sem.try_acquire(3, &opts(1_000, 0)).await, "try"), "the whole limit after the storm");
    ok(all.release().await, "release");
}

/// Test 10 and bad input: over Redlock a semaphore cannot be built; a limit of 0 or above the maximum, 0 permits,
/// more permits than the limit and a fair queue are refused before any I/O.
pub async fn semaphore_is_refused_where_it_cannot_hold(s: &Subject) {
    let lock = s.engine().clone();
    let invalid = |r: Result<(), LockError>, what: &str| {
        assert!(matches!(r, Err(LockError::InvalidArgument(_))), "{what}: expected InvalidArgument, got {r:?}");
    };
    if lock.stores().len() > 1 {
        invalid(Semaphore::new(lock, "x", 3).map(drop), "a semaphore over Redlock");
        return;
    }
    invalid(Semaphore::new(lock.clone(), "x", 0).map(drop), "limit 0");
    invalid(Semaphore::new(lock.clone(), "x", lock_core::MAX_PERMITS + 1).map(drop), "limit above the maximum");
    invalid(Semaphore::new(lock.clone(), "", 3).map(drop), "an empty name");
    let sem = ok(Semaphore::new(lock, &fresh("input"), 3), "Semaphore::new");
    invalid(sem.try_acquire(0, &opts(1_000, 0)).await.map(drop), "0 permits");
    invalid(sem.try_acquire(4, &opts(1_000, 0)).await.map(drop), "more permits than the limit");
    invalid(sem.try_acquire(1, &opts(1_000, 0).with_fair_queue(ms(1_000))).await.map(drop), "a fair queue");
}

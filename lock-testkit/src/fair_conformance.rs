//! The fair lock's conformance cases ([`LockOptions::with_fair_queue`]): one public async function per case, each
//! taking the [`Subject`] under test, which must wrap a [`lock_core::Lock`] ([`Subject::engine`]).
//!
//! [`conformance_tests!`](crate::conformance_tests) runs them (through [`fair_tests!`](crate::fair_tests)). They
//! follow the test list of the fair-lock study (`shared/research/primitives.md`, section 4.3) within one process;
//! the cases with waiters in several processes, a killed process and a dropped subscriber connection are in
//! [`server_cases`](crate::server_cases) and the fault suite. Over Redlock a fair queue is refused, and these cases
//! check only that.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::future::{join, join_all, select, Either};
use lock_core::backend::{Call, Reply};
use lock_core::{Lock, LockError, LockOptions, MIN_WAITER_TTL};

use crate::conformance::{ok, some};
use crate::or_panic::ms;
use crate::runtime::sleep;
use crate::scripted::CancelAfter;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("fair:{case}:{:016x}", rand::random::<u64>())
}

/// Fair options: `ttl_ms`, wait `wait_ms`, waiter TTL `waiter_ms`.
fn fair(ttl_ms: u64, wait_ms: u64, waiter_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_wait(ms(wait_ms)).with_fair_queue(ms(waiter_ms))
}

/// The lock under test, or `None` over Redlock (where a fair queue is refused; see
/// [`fair_is_refused_where_it_cannot_hold`]).
fn single(s: &Subject) -> Option<&Lock> {
    let lock = s.engine();
    (lock.stores().len() == 1).then_some(lock)
}

async fn queue_len(lock: &Lock, resource: &str) -> usize {
    ok(lock.fair_queue_len(resource).await, "fair_queue_len")
}

/// Waits (bounded) until `resource`'s queue holds exactly `n` places.
async fn until_queued(lock: &Lock, resource: &str, n: usize) {
    let started = Instant::now();
    loop {
        let len = queue_len(lock, resource).await;
        if len == n {
            return;
        }
        assert!(started.elapsed() < ms(5_000), "the queue of {resource} holds {len} places, expected {n}");
        sleep(ms(2)).await;
    }
}

/// Whether a sorted set exists (Redis deletes an emptied one, so `ZCARD` is 0 exactly when it is gone; the
/// smallest ACL user may send `ZCARD`, not `EXISTS`).
async fn exists(lock: &Lock, key: &str) -> bool {
    let keys = [key];
    let ran = ok(lock.stores()[0].call(Call::plain("inspect", "ZCARD", &keys, &[])).await, "ZCARD");
    ran.reply != Reply::Int(0)
}

/// Test 1: waiters queued one after another are granted in that order, each as the previous one releases.
pub async fn fair_grants_in_arrival_order(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("order");
    let holder = some(ok(lock.try_acquire(&r, &fair(10_000, 0, 2_000)).await, "holder"), "holder");
    let order = Mutex::new(Vec::new());
    let waiters = (0..6).map(|i| {
        let (r, order) = (&r, &order);
        Box::pin(async move {
            // Queue up strictly one after another: waiter i starts once i places are taken.
            until_queued(lock, r, i).await;
            let g = ok(lock.acquire(r, &fair(10_000, 10_000, 2_000)).await, "queued acquire");
            order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            sleep(ms(5)).await;
            ok(g.release().await, "release");
        })
    });
    let release = async {
        until_queued(lock, &r, 6).await;
        ok(holder.release().await, "holder release");
    };
    join(join_all(waiters), Box::pin(release)).await;
    let order = order.into_inner().unwrap_or_else(|p| p.into_inner());
    assert_eq!(order, [0, 1, 2, 3, 4, 5], "grants out of arrival order");
    until_queued(lock, &r, 0).await;
}

/// A release hands the lock to the live head of the queue in the same step: right after the holder's release
/// returns, the lock is held for the head, which was not even polled meanwhile (no try of its own), for no longer
/// than its waiter TTL (a head that died just before its turn costs no more than its place would have). Resumed, the
/// head returns that grant, with a token above the holder's, and is extended to its full TTL in the background.
pub async fn fair_release_grants_the_head(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("grant");
    let waiter_ms = 600;
    let holder = some(ok(lock.try_acquire(&r, &fair(10_000, 0, waiter_ms)).await, "holder"), "holder");
    let before = holder.fence().await.ok();
    let waiting = fair(10_000, 10_000, waiter_ms);
    let mut head = Box::pin(lock.acquire(&r, &waiting));
    // Polled until it holds its place and listens for its turn (and a little more, for its subscription).
    let keys = lock_core::LockKeys::new(lock.key_prefix(), &r).unwrap_or_else(|e| panic!("{e}"));
    let hub = lock.stores()[0].release_hub().cloned();
    let listening = async {
        until_queued(lock, &r, 1).await;
        let started = Instant::now();
        while hub.as_ref().is_some_and(|hub| hub.waiters(keys.channel()) == 0) {
            assert!(started.elapsed() < ms(5_000), "the head never listened");
            sleep(ms(2)).await;
        }
        sleep(ms(50)).await;
    };
    if let Either::Left((result, _)) = select(head.as_mut(), Box::pin(listening)).await {
        panic!("the head returned while the lock was held: {result:?}");
    }
    // The head is not polled again until the grant is seen: nothing of its own can take the lock meanwhile.
    ok(holder.release().await, "holder release");
    let state = ok(lock.inspect(&r).await, "inspect");
    let granted = state.holder().cloned();
    let Some(granted) = granted else { panic!("the release left the lock free instead of granting the head") };
    assert!(granted.ttl.is_some_and(|ttl| ttl <= ms(waiter_ms)), "granted for {:?}, past the waiter TTL", granted.ttl);
    assert_eq!(state.queued(), 0, "the head's place outlived its grant");
    let g = ok(head.await, "the head");
    let owner = granted.owner.unwrap_or_default();
    assert!(!owner.is_empty() && g.token().as_str().starts_with(&owner), "granted to {owner}, not to the head");
    assert!(g.fence().await.ok() > before, "the grant's token {:?} after {before:?}", g.fence().await.ok());
    // Past the lease, still held: extended to its TTL in the background, and the guard knows it.
    sleep(ms(waiter_ms + 200)).await;
    assert!(!g.is_lost(), "the grant was not extended past its lease: {:?}", g.lost_signal().reason());
    assert!(g.valid_until() > Instant::now() + ms(5_000), "the guard's validity stayed at the lease");
    let ttl = ok(lock.inspect(&r).await, "inspect").holder().and_then(|h| h.ttl);
    assert!(ttl > Some(ms(5_000)), "the key's TTL after the extension: {ttl:?}");
    assert_eq!(ok(g.release().await, "release"), lock_core::ReleaseOutcome::Released);
    until_queued(lock, &r, 0).await;
}

/// Fencing on demand with the fair queue: the holder and a queued waiter that was granted on the release acquire
/// without a token and draw theirs when asked, in the order of their holds; a plain acquire with the token in its
/// grant after them gets a higher one.
pub async fn fair_fencing_on_demand_draws_in_hold_order(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("on-demand");
    let lazy = |wait_ms| fair(10_000, wait_ms, 2_000).with_fencing_mode(lock_core::Fencing::OnDemand);
    let holder = some(ok(lock.try_acquire(&r, &lazy(0)).await, "holder"), "holder");
    assert_eq!(holder.drawn_fence(), None, "an on-demand grant carries no token");
    let first = ok(holder.fence().await, "the holder's fence");
    let waiter = async {
        let g = ok(lock.acquire(&r, &lazy(10_000)).await, "queued acquire");
        let fence = ok(g.fence().await, "the waiter's fence");
        ok(g.release().await, "release");
        fence
    };
    let release = async {
        until_queued(lock, &r, 1).await;
        ok(holder.release().await, "holder release");
    };
    let (second, ()) = join(Box::pin(waiter), Box::pin(release)).await;
    assert!(second > first, "the waiter drew {second} after the holder's {first}");
    let eager = fair(10_000, 0, 2_000).with_fencing_mode(lock_core::Fencing::OnAcquire);
    let plain = some(ok(lock.try_acquire(&r, &eager).await, "eager"), "eager");
    assert!(plain.drawn_fence() > Some(second), "a grant's token after the drawn ones must be higher");
    ok(plain.release().await, "release");
    until_queued(lock, &r, 0).await;
}

/// A newcomer never takes a free lock past a queued waiter: a try is refused, and the releaser coming straight back
/// queues behind.
pub async fn fair_newcomer_queues_behind_waiters(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("barge");
    let o = fair(10_000, 10_000, 2_000);
    let holder = some(ok(lock.try_acquire(&r, &o).await, "holder"), "holder");
    let first = Mutex::new(None::<&str>);
    let waiter = async {
        let g = ok(lock.acquire(&r, &o).await, "waiter");
        first.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert("waiter");
        sleep(ms(20)).await;
        ok(g.release().await, "waiter release");
    };
    let releaser = async {
        until_queued(lock, &r, 1).await;
        ok(holder.release().await, "holder release");
        // The lock is free now, or already the waiter's: either way a newcomer does not get it.
        assert!(ok(lock.try_acquire(&r, &o).await, "try past the queue").is_none(), "a try barged past the queue");
        let again = ok(lock.acquire(&r, &o).await, "the releaser again");
        first.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert("releaser");
        ok(again.release().await, "release");
    };
    join(Box::pin(waiter), Box::pin(releaser)).await;
    assert_eq!(*first.lock().unwrap_or_else(|p| p.into_inner()), Some("waiter"), "the releaser barged");
}

/// Test 4: a waiter whose future is dropped leaves the queue at once, and the next waiter is not delayed by it.
pub async fn fair_cancelled_waiter_leaves_at_once(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("cancel");
    // A waiter TTL far beyond the case: only an explicit leave can explain a quick hand-off.
    let o = fair(10_000, 20_000, 20_000);
    let holder = some(ok(lock.try_acquire(&r, &o).await, "holder"), "holder");
    let mut cancelled = Box::pin(lock.acquire(&r, &o));
    if let Either::Left((result, _)) = select(cancelled.as_mut(), Box::pin(until_queued(lock, &r, 1))).await {
        panic!("the waiter returned while the lock was held: {result:?}");
    }
    let next = async {
        let t0 = Instant::now();
        let g = ok(lock.acquire(&r, &o).await, "the waiter behind");
        (t0, Instant::now(), g)
    };
    let cancel = async {
        until_queued(lock, &r, 2).await;
        drop(cancelled);
        until_queued(lock, &r, 1).await;
        let released = Instant::now();
        ok(holder.release().await, "holder release");
        released
    };
    let ((_, granted, g), released) = join(Box::pin(next), Box::pin(cancel)).await;
    let gap = granted.saturating_duration_since(released);
    // Had the cancelled waiter kept its place, the next one would wait until that place expired (20 s after its
    // last heartbeat). Normally the release's announcement wakes it at once; if that is lost (a shared deployment
    // failing over meanwhile), its own next heartbeat (every 20 s / 3) takes the lock: under 10 s either way.
    assert!(gap < ms(10_000), "the waiter behind a cancelled one waited {gap:?} after the release");
    ok(g.release().await, "release");
    until_queued(lock, &r, 0).await;
}

/// A waiter whose wait budget runs out gets `Contended` and leaves the queue.
pub async fn fair_spent_budget_leaves_the_queue(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("budget");
    let holder = some(ok(lock.try_acquire(&r, &fair(10_000, 0, 2_000)).await, "holder"), "holder");
    let err = lock.acquire(&r, &fair(10_000, 150, 2_000)).await.err();
    assert!(matches!(err, Some(LockError::Contended { .. })), "expected Contended, got {err:?}");
    assert_eq!(queue_len(lock, &r).await, 0, "a waiter that gave up kept its place");
    ok(holder.release().await, "release");
}

/// Test 3: live waiters keep their places through a hold several times their waiter TTL (Redisson #3004), and are
/// granted in order.
pub async fn fair_live_waiters_keep_their_place_through_a_long_hold(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("long");
    let waiter_ms = MIN_WAITER_TTL.as_millis() as u64 * 2;
    let holder = some(ok(lock.try_acquire(&r, &fair(10_000, 0, waiter_ms)).await, "holder"), "holder");
    let order = Mutex::new(Vec::new());
    let waiters = (0..2).map(|i| {
        let (r, order) = (&r, &order);
        async move {
            until_queued(lock, r, i).await;
            let g = ok(lock.acquire(r, &fair(10_000, 10_000, waiter_ms)).await, "queued acquire");
            order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            ok(g.release().await, "release");
        }
    });
    let hold = async {
        until_queued(lock, &r, 2).await;
        let until = Instant::now() + ms(waiter_ms * 5);
        while Instant::now() < until {
            assert_eq!(queue_len(lock, &r).await, 2, "a live waiter lost its place during a long hold");
            sleep(ms(20)).await;
        }
        ok(holder.release().await, "holder release");
    };
    join(join_all(waiters), Box::pin(hold)).await;
    assert_eq!(order.into_inner().unwrap_or_else(|p| p.into_inner()), [0, 1]);
}

/// Test 2 in one process: a waiter that stops heartbeating (its future is leaked, as if its process froze for
/// good) is skipped within its waiter TTL plus a heartbeat, and its keys do not outlive the run (test 6).
pub async fn fair_dead_waiter_is_skipped_within_its_waiter_ttl(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("dead");
    let waiter_ms = 300;
    let o = fair(10_000, 10_000, waiter_ms);
    let holder = some(ok(lock.try_acquire(&r, &o).await, "holder"), "holder");
    let mut dead = Box::pin(lock.acquire(&r, &o));
    if let Either::Left((result, _)) = select(dead.as_mut(), Box::pin(until_queued(lock, &r, 1))).await {
        panic!("the waiter returned while the lock was held: {result:?}");
    }
    // Never polled again and never dropped: its place is neither renewed nor given back.
    std::mem::forget(dead);
    let live = async {
        until_queued(lock, &r, 1).await;
        let g = ok(lock.acquire(&r, &o).await, "the live waiter");
        (Instant::now(), g)
    };
    let release = async {
        until_queued(lock, &r, 2).await;
        ok(holder.release().await, "holder release");
        Instant::now()
    };
    let ((granted, g), released) = join(Box::pin(live), Box::pin(release)).await;
    let gap = granted.saturating_duration_since(released);
    // Its place expires at most waiter_ttl after its last heartbeat; the live waiter's next heartbeat (a third of
    // that later at most) removes it and takes the lock.
    assert!(gap < ms(waiter_ms * 2 + 500), "the dead head held the queue for {gap:?}");
    ok(g.release().await, "release");
    let keys = lock_core::LockKeys::new(lock.key_prefix(), &r).unwrap_or_else(|e| panic!("{e}"));
    let (queue, beats) = (format!("{}:queue", keys.lock()), format!("{}:heartbeats", keys.lock()));
    let started = Instant::now();
    while exists(lock, &queue).await || exists(lock, &beats).await {
        assert!(started.elapsed() < ms(waiter_ms * 3), "the queue keys outlived every waiter");
        sleep(ms(20)).await;
    }
}

/// Places whose heartbeats vanished (the heartbeat set deleted by a foreign client) are taken again by their
/// waiters, which keep their tickets: the queue keeps its order.
pub async fn fair_waiters_take_back_places_whose_heartbeats_vanished(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("vanished");
    let waiter_ms = 300;
    let holder = some(ok(lock.try_acquire(&r, &fair(10_000, 0, waiter_ms)).await, "holder"), "holder");
    let order = Mutex::new(Vec::new());
    let waiters = (0..3).map(|i| {
        let (r, order) = (&r, &order);
        Box::pin(async move {
            until_queued(lock, r, i).await;
            let g = ok(lock.acquire(r, &fair(10_000, 10_000, waiter_ms)).await, "queued acquire");
            order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            ok(g.release().await, "release");
        })
    });
    let vanish = async {
        until_queued(lock, &r, 3).await;
        let keys = lock_core::LockKeys::new(lock.key_prefix(), &r).unwrap_or_else(|e| panic!("{e}"));
        let beats = format!("{}:heartbeats", keys.lock());
        let del = [beats.as_str()];
        ok(lock.stores()[0].call(Call::plain("foreign", "DEL", &del, &[])).await, "DEL heartbeats");
        // Within about a heartbeat every waiter has a place again.
        let started = Instant::now();
        while !exists(lock, &beats).await || count(lock, &beats).await < 3 {
            assert!(started.elapsed() < ms(waiter_ms * 3), "the waiters did not take their places back");
            sleep(ms(10)).await;
        }
        ok(holder.release().await, "holder release");
    };
    join(join_all(waiters), Box::pin(vanish)).await;
    assert_eq!(order.into_inner().unwrap_or_else(|p| p.into_inner()), [0, 1, 2], "the queue lost its order");
}

async fn count(lock: &Lock, key: &str) -> i64 {
    let keys = [key];
    let ran = ok(lock.stores()[0].call(Call::plain("inspect", "ZCARD", &keys, &[])).await, "ZCARD");
    ran.reply.as_int().unwrap_or(0)
}

/// Test 5: the holder dies with a queue present (its guard is leaked, never released): the head is granted once
/// the lock's TTL has run out.
pub async fn fair_head_gets_a_lock_whose_holder_died(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("holder-died");
    let holder = some(ok(lock.try_acquire(&r, &fair(400, 0, 2_000)).await, "holder"), "holder");
    let died = Instant::now();
    std::mem::forget(holder);
    let g = ok(lock.acquire(&r, &fair(10_000, 10_000, 2_000)).await, "head");
    let waited = died.elapsed();
    assert!(waited >= ms(350), "granted {waited:?} after the holder died, before its TTL");
    assert!(waited < ms(400 + 2_000), "granted {waited:?} after a 400 ms TTL ran out");
    ok(g.release().await, "release");
}

/// Test 8: fair and plain acquirers on one resource never hold at once.
pub async fn fair_and_plain_acquirers_exclude_each_other(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("mixed");
    let holders = AtomicUsize::new(0);
    let grants = AtomicUsize::new(0);
    let tasks = (0..6).map(|i| {
        let (r, holders, grants) = (&r, &holders, &grants);
        async move {
            let o =
                if i % 2 == 0 { fair(5_000, 10_000, 2_000) } else { LockOptions::new(ms(5_000)).with_wait(ms(10_000)) };
            for _ in 0..5 {
                let g = ok(lock.acquire(r, &o).await, "acquire");
                let held = Holding::enter(holders);
                grants.fetch_add(1, Ordering::SeqCst);
                sleep(ms(2)).await;
                drop(held);
                ok(g.release().await, "release");
            }
        }
    });
    join_all(tasks).await;
    assert_eq!(grants.load(Ordering::SeqCst), 30);
    until_queued(lock, &r, 0).await;
}

/// Cancellation storm: fair waiters dropped at every await point of their acquire, while others wait it out. Every
/// waiter that was not dropped is granted, nobody holds at once, and the queue ends empty (every dropped waiter
/// gave its place back).
pub async fn fair_cancellation_storm(s: &Subject) {
    let Some(lock) = single(s) else { return };
    let r = fresh("storm");
    let o = fair(5_000, 10_000, 20_000);
    let holder = some(ok(lock.try_acquire(&r, &o).await, "holder"), "holder");
    let holders = Arc::new(AtomicUsize::new(0));
    let kept = AtomicUsize::new(0);
    let waiters = (0..24u32).map(|i| {
        let (r, o, holders, kept) = (&r, &o, holders.clone(), &kept);
        async move {
            sleep(ms(u64::from(i % 5))).await;
            let work = async {
                let g = ok(lock.acquire(r, o).await, "storm acquire");
                let held = Holding::enter(&holders);
                sleep(ms(1)).await;
                // Counted out before the release is sent: once it has completed on the server the next holder may
                // be told before this future is polled again.
                drop(held);
                ok(g.release().await, "release");
            };
            // Every third waiter runs to the end; the others are cut off after 1 to 8 polls (some of them may
            // still finish within that).
            let polls = if i % 3 == 0 { u32::MAX } else { 1 + i % 8 };
            let finished = CancelAfter::new(work, polls).await.is_some();
            assert!(finished || polls != u32::MAX, "a waiter that was never cut off did not finish");
            if finished {
                kept.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let release = async {
        sleep(ms(30)).await;
        ok(holder.release().await, "holder release");
    };
    join(join_all(waiters), Box::pin(release)).await;
    assert!(kept.load(Ordering::SeqCst) >= 8, "every waiter that was not cut off was granted");
    // Dropped waiters give their places back in the background.
    until_queued(lock, &r, 0).await;
    let g = some(ok(lock.try_acquire(&r, &o).await, "after the storm"), "after the storm");
    ok(g.release().await, "release");
}

/// One holder counted while it holds (also when its future is dropped mid-hold).
struct Holding<'a>(&'a AtomicUsize);

impl<'a> Holding<'a> {
    fn enter(holders: &'a AtomicUsize) -> Self {
        assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
        Holding(holders)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a fair queue cannot be: over Redlock, for `acquire_all`, or with a waiter TTL below the minimum. Each is
/// refused before any I/O with `InvalidArgument`.
pub async fn fair_is_refused_where_it_cannot_hold(s: &Subject) {
    let lock = s.engine();
    let r = fresh("refused");
    let invalid = |result: Result<(), LockError>, what: &str| {
        assert!(
            matches!(result, Err(LockError::InvalidArgument(_))),
            "{what}: expected InvalidArgument, got {result:?}"
        );
    };
    let short = fair(1_000, 0, MIN_WAITER_TTL.as_millis() as u64 - 1);
    invalid(lock.try_acquire(&r, &short).await.map(drop), "waiter TTL below the minimum");
    invalid(lock.try_acquire_all(&[r.as_str(), "other"], &fair(1_000, 0, 1_000)).await.map(drop), "acquire_all");
    if lock.stores().len() > 1 {
        invalid(lock.acquire(&r, &fair(1_000, 100, 1_000)).await.map(drop), "Redlock");
    }
}

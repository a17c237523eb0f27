//! The conformance suite: one public async function per case, each taking the [`Subject`] under test.
//!
//! [`conformance_tests!`](crate::conformance_tests) writes one `#[test]` per case. Every case uses fresh
//! resource names, so cases run in parallel against one server. Each case says what it proves in its doc.
//!
//! Each case is a test: it panics, naming what broke, when the backend does not keep a promise (so no case has an
//! `# Errors` section), and it is not meant to be cancelled except by ending the test.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, select, Either};
use lock_core::{
    DistributedLock, DistributedLockExt, Fencing, LockError, LockGuard, LockOptions, LostReason, ReleaseOutcome,
    RenewPolicy, RetryPolicy,
};

use crate::checker::{Checker, Hold};
use crate::runtime::sleep;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("conformance:{case}:{:016x}", rand::random::<u64>())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The value, or a panic naming `what` and the error (shared by every conformance module).
#[track_caller]
pub(crate) fn ok<T, E: Debug>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: unexpected error {e:?}"),
    }
}

/// The guard, or a panic naming `what` (shared by every conformance module).
#[track_caller]
pub(crate) fn some<T>(o: Option<T>, what: &str) -> T {
    match o {
        Some(v) => v,
        None => panic!("{what}: expected the lock to be granted, it was held"),
    }
}

async fn try_get(lock: &dyn DistributedLock, resource: &str, o: &LockOptions) -> Option<Box<dyn LockGuard>> {
    ok(lock.try_acquire(resource, o).await, "try_acquire")
}

/// A free lock is granted, a held one is not (no waiting), and release frees it.
pub async fn try_acquire_on_held_lock(s: &Subject) {
    let lock = s.lock();
    let r = fresh("try");
    let a = some(try_get(lock, &r, &s.opts(5000, 0)).await, "first try");
    assert!(try_get(lock, &r, &s.opts(5000, 0)).await.is_none(), "a held lock must not be granted twice");
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
    let b = some(try_get(lock, &r, &s.opts(5000, 0)).await, "try after release");
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// 16 contenders × 8 acquisitions on one resource: the checker finds no overlapping holds and no fencing
/// regression, and every acquisition succeeds within its budget.
pub async fn exclusive_under_contention(s: &Subject) {
    const CONTENDERS: usize = 16;
    const ROUNDS: usize = 8;
    let lock = s.lock();
    let r = fresh("contention");
    let checker = Arc::new(Checker::new());
    let o = s.opts(3000, 20_000);
    let contenders = (0..CONTENDERS).map(|_| {
        let (r, o, checker) = (r.clone(), o.clone(), checker.clone());
        async move {
            for _ in 0..ROUNDS {
                let g = ok(lock.acquire(&r, &o).await, "acquire under contention");
                let start = Instant::now();
                sleep(ms(1)).await;
                checker.record(Hold::of(&*g, start).await);
                assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
            }
        }
    });
    join_all(contenders).await;
    let report = checker.report();
    assert_eq!(report.holds, CONTENDERS * ROUNDS);
    assert!(report.overlaps.is_empty(), "overlapping holds: {:?}", report.overlaps);
    if lock.capabilities().fencing {
        assert!(report.fence_regressions.is_empty(), "fencing regressions: {:?}", report.fence_regressions);
    }
}

/// A waiter gets the lock after the holder releases, not before, and promptly.
pub async fn waiter_acquires_after_release(s: &Subject) {
    let lock = s.lock();
    let r = fresh("waiter");
    let a = some(try_get(lock, &r, &s.opts(10_000, 0)).await, "holder");
    let a_fence = a.fence().await.ok();
    let waiter = async {
        let g = ok(lock.acquire(&r, &s.opts(10_000, 5_000)).await, "waiter");
        (Instant::now(), g)
    };
    let holder = async {
        sleep(s.ms(150)).await;
        let released_at = Instant::now();
        assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
        released_at
    };
    let ((acquired_at, b), released_at) = futures_util::future::join(waiter, holder).await;
    assert!(acquired_at >= released_at, "waiter acquired before the holder released");
    let gap = acquired_at - released_at;
    assert!(gap < s.ms(1000), "waiter took {gap:?} after the release");
    if let (Some(fa), Some(fb)) = (a_fence, b.fence().await.ok()) {
        assert!(fb > fa);
    }
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// How late a timer may fire on a loaded machine (CI runners are shared, and the suite runs beside other work)
/// before a test calls the lock's timing wrong: bounds that check "on time" add this to the lock's own parameters.
pub const STARVED: Duration = Duration::from_secs(1);

/// An exhausted wait budget gives `Contended` within the budget plus a small slack, and no later.
pub async fn wait_budget_exhausted_is_typed(s: &Subject) {
    let lock = s.lock();
    let r = fresh("budget");
    let a = some(try_get(lock, &r, &s.opts(10_000, 0)).await, "holder");
    let t0 = Instant::now();
    let err = lock.acquire(&r, &s.opts(10_000, 300)).await.err();
    let took = t0.elapsed();
    assert!(matches!(err, Some(LockError::Contended { .. })), "expected Contended, got {err:?}");
    assert!(took >= s.ms(299), "gave up early after {took:?}");
    assert!(took <= s.ms(300) + STARVED, "gave up late after {took:?}");
    assert!(err.as_ref().is_some_and(LockError::is_retryable));
    // A zero budget is one try.
    let t0 = Instant::now();
    let err = lock.acquire(&r, &s.opts(10_000, 0)).await.err();
    assert!(matches!(err, Some(LockError::Contended { .. })), "expected Contended, got {err:?}");
    assert!(t0.elapsed() < s.ms(500));
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
}

/// An attempt limit ends the wait before the budget does.
pub async fn attempt_limit_is_respected(s: &Subject) {
    let lock = s.lock();
    let r = fresh("attempts");
    let a = some(try_get(lock, &r, &s.opts(10_000, 0)).await, "holder");
    let policy = RetryPolicy::default().with_min_delay(s.ms(20)).with_max_delay(s.ms(20)).with_max_attempts(Some(3));
    let t0 = Instant::now();
    let err = lock.acquire(&r, &s.opts(10_000, 10_000).with_retry(policy)).await.err();
    assert!(matches!(err, Some(LockError::Contended { .. })), "expected Contended, got {err:?}");
    let took = t0.elapsed();
    // Three tries: the first, an immediate re-poll once subscribed to release notifications (where the backend
    // has them), and one after a 20 ms pause; without notifications, two pauses.
    assert!(took >= s.ms(19), "3 tries with 20 ms pauses took only {took:?}");
    assert!(took < s.ms(2_000), "3 tries took {took:?}");
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
}

/// A holder whose lock expired and was taken by someone else cannot release (or extend) the new holder's lock.
pub async fn stale_release_never_deletes_new_holder(s: &Subject) {
    let lock = s.lock();
    let r = fresh("stale");
    let a = some(try_get(lock, &r, &s.opts(100, 0)).await, "first holder");
    sleep(s.ms(200)).await;
    let b = some(try_get(lock, &r, &s.opts(10_000, 0)).await, "second holder after expiry");
    assert!(a.extend(s.ms(10_000)).await.is_err(), "a stale holder must not extend");
    assert_eq!(ok(a.release().await, "stale release"), ReleaseOutcome::OwnedByOther);
    assert!(try_get(lock, &r, &s.opts(10_000, 0)).await.is_none(), "the new holder's lock must survive");
    ok(b.extend(s.ms(10_000)).await, "new holder extends");
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// Release says what it found: released, or already expired.
pub async fn release_outcomes(s: &Subject) {
    let lock = s.lock();
    let r = fresh("outcomes");
    let a = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "holder");
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
    let b = some(try_get(lock, &r, &s.opts(50, 0)).await, "short holder");
    sleep(s.ms(150)).await;
    assert_eq!(ok(b.release().await, "release after expiry"), ReleaseOutcome::AlreadyExpired);
}

/// A lock nobody releases becomes free when its TTL passes, not before.
pub async fn ttl_expiry_frees_lock(s: &Subject) {
    let lock = s.lock();
    let r = fresh("ttl");
    let a = some(try_get(lock, &r, &s.opts(300, 0)).await, "holder");
    sleep(s.ms(100)).await;
    assert!(try_get(lock, &r, &s.opts(5_000, 0)).await.is_none(), "freed before its TTL");
    sleep(s.ms(300)).await;
    let b = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "after TTL");
    assert!(a.is_lost());
    assert_eq!(ok(a.release().await, "stale release"), ReleaseOutcome::OwnedByOther);
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// Extending a held lock moves its deadline and keeps others out past the original TTL.
pub async fn extend_keeps_lock(s: &Subject) {
    let lock = s.lock();
    let r = fresh("extend");
    let a = some(try_get(lock, &r, &s.opts(300, 0)).await, "holder");
    let first_deadline = a.valid_until();
    sleep(s.ms(150)).await;
    let extended = ok(a.extend(s.ms(2_000)).await, "extend");
    assert!(extended > first_deadline);
    assert_eq!(a.valid_until(), extended);
    sleep(s.ms(350)).await;
    assert!(try_get(lock, &r, &s.opts(5_000, 0)).await.is_none(), "an extended lock was taken");
    assert!(!a.is_lost());
    assert!(a.extend(Duration::ZERO).await.is_err_and(|e| matches!(e, LockError::InvalidArgument(_))));
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
}

/// Extending after expiry fails with `Lost` and never brings the lock back, whether or not someone took it.
pub async fn extend_after_expiry_never_resurrects(s: &Subject) {
    let lock = s.lock();
    // Nobody took it.
    let r = fresh("resurrect-free");
    let a = some(try_get(lock, &r, &s.opts(100, 0)).await, "holder");
    sleep(s.ms(200)).await;
    let err = a.extend(s.ms(10_000)).await.err();
    assert!(matches!(err, Some(LockError::Lost { .. })), "expected Lost, got {err:?}");
    let b = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "the key must not have been recreated");
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
    drop(a);
    // Someone took it.
    let r = fresh("resurrect-taken");
    let a = some(try_get(lock, &r, &s.opts(100, 0)).await, "holder");
    sleep(s.ms(200)).await;
    let b = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "new holder");
    assert!(matches!(a.extend(s.ms(10_000)).await, Err(LockError::Lost { .. })));
    assert!(try_get(lock, &r, &s.opts(5_000, 0)).await.is_none(), "the new holder must keep the lock");
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// The holder's validity deadline is never later than the moment the server lets someone else in, and never
/// later than request start + TTL.
pub async fn validity_ends_before_server_expiry(s: &Subject) {
    let lock = s.lock();
    let r = fresh("validity");
    let ttl = s.ms(300);
    let before = Instant::now();
    let a = some(try_get(lock, &r, &LockOptions::new(ttl).with_wait(Duration::ZERO)).await, "holder");
    let valid_until = a.valid_until();
    assert!(valid_until <= before + ttl, "validity must count from before the request");
    let polling_since = Instant::now();
    let b = loop {
        if let Some(g) = try_get(lock, &r, &s.opts(5_000, 0)).await {
            break g;
        }
        assert!(polling_since.elapsed() < s.ms(5_000), "the lock never expired");
        sleep(s.ms(2)).await;
    };
    let granted_at = Instant::now();
    assert!(valid_until <= granted_at, "holder believed it held the lock until after another owner got it");
    assert!(a.is_lost(), "the holder must see its lock as lost once another owner has it");
    drop(a);
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// Fencing tokens strictly increase across acquisitions of one resource: after release, after expiry, and
/// across resources they are independent.
pub async fn fencing_tokens_strictly_increase(s: &Subject) {
    let lock = s.lock();
    if !lock.capabilities().fencing {
        return;
    }
    let r = fresh("fencing");
    let mut last = None;
    for i in 0..20 {
        let g = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "acquire");
        let fence = g.fence().await.ok().unwrap_or_else(|| panic!("fencing is on by default (acquisition {i})"));
        assert!(last.is_none_or(|l| fence > l), "fence {fence} after {last:?}");
        last = Some(fence);
        assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
    }
    let short = some(try_get(lock, &r, &s.opts(50, 0)).await, "short holder");
    let short_fence = short.fence().await.ok();
    sleep(s.ms(120)).await;
    let next = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "after expiry");
    assert!(next.fence().await.ok() > short_fence && short_fence > last);
    drop(short);
    assert_eq!(ok(next.release().await, "release"), ReleaseOutcome::Released);
}

/// Tokens drawn on demand ([`Fencing::OnDemand`]) and tokens drawn with the grant interleave in the order of the
/// holds: a draw is one step with the check that the lock is still ours. A guard draws once (later calls return
/// the same token), a scoped work gets its token drawn, and over Redlock the token comes with the grant.
pub async fn fencing_on_demand_follows_hold_order(s: &Subject) {
    let lock = s.lock();
    if !lock.capabilities().fencing {
        return;
    }
    let r = fresh("on-demand");
    let lazy = s.opts(5_000, 0).with_fencing_mode(Fencing::OnDemand);
    let mut last = None;
    for i in 0..12 {
        let g = if i % 3 == 0 {
            let g = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "eager holder");
            assert!(g.fence().await.ok().is_some(), "a token drawn with the grant is there at once");
            g
        } else {
            let g = some(try_get(lock, &r, &lazy).await, "lazy holder");
            // `Some` only where the token is drawn with the grant anyway (Redlock).
            let at_grant = g.fence().await.ok();
            let drawn = ok(g.fence().await, "fence");
            assert!(at_grant.is_none_or(|t| t == drawn), "drawn {drawn}, the grant said {at_grant:?}");
            assert_eq!(ok(g.fence().await, "second fence"), drawn, "a guard draws its token once");
            assert_eq!(g.fence().await.ok(), Some(drawn));
            g
        };
        let fence = ok(g.fence().await, "fence");
        assert!(last.is_none_or(|l| fence > l), "hold {i}: token {fence} after {last:?}");
        last = Some(fence);
        assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
    }
    // A lazy holder that never asks leaves the counter alone: the next token is still above the last one drawn.
    let quiet = some(try_get(lock, &r, &lazy).await, "quiet holder");
    assert_eq!(ok(quiet.release().await, "release"), ReleaseOutcome::Released);
    let out = lock.with_lock(&r, &lazy, |ctx| async move { ctx.fencing_token }).await;
    let scoped = some(ok(out, "with_lock"), "the scoped work's token");
    assert!(last.is_none_or(|l| scoped > l), "scoped token {scoped} after {last:?}");
}

/// A holder draws no token once its lock is gone: not after its validity ended (no I/O), not after the server lost
/// it (forced free here, as an expiry during a pause would), and the guard turns lost; the next holder's token is
/// above every earlier one. With fencing off, asking is a typed error.
pub async fn fencing_on_demand_refused_once_the_lock_is_gone(s: &Subject) {
    let lock = s.engine();
    let r = fresh("on-demand-gone");
    let lazy = LockOptions::new(s.ms(30_000)).with_wait(s.ms(0)).with_fencing_mode(Fencing::OnDemand);
    let before = some(ok(lock.try_acquire(&r, &s.opts(5_000, 0)).await, "try"), "first holder");
    let first = before.fence().await.ok();
    ok(before.release().await, "release");

    let stuck = some(ok(lock.try_acquire(&r, &lazy).await, "try"), "lazy holder");
    if stuck.fence().await.ok().is_none() {
        // Drawn later: free the lock under the holder, as an expiry while it was paused would.
        assert!(ok(lock.force_release(&r).await, "force_release").released());
        let next = some(ok(lock.try_acquire(&r, &lazy).await, "try"), "next holder");
        match stuck.fence().await {
            Err(LockError::Lost { reason: LostReason::NotHeld, .. }) => {}
            other => panic!("a holder whose lock is gone drew a token: {other:?}"),
        }
        assert!(stuck.is_lost(), "a refused draw must mark the guard lost");
        let fence = ok(next.fence().await, "the next holder's fence");
        assert!(Some(fence) > first, "token {fence} after {first:?}");
        assert_eq!(ok(stuck.release().await, "stale release"), ReleaseOutcome::OwnedByOther);
        ok(next.release().await, "release");
    } else {
        ok(stuck.release().await, "release");
    }

    let short =
        some(ok(lock.try_acquire(&r, &s.opts(50, 0).with_fencing_mode(Fencing::OnDemand)).await, "try"), "short");
    sleep(s.ms(80)).await;
    if short.fence().await.ok().is_none() {
        match short.fence().await {
            Err(LockError::Lost { .. }) => {}
            other => panic!("a holder past its validity drew a token: {other:?}"),
        }
    }
    drop(short);

    let off = some(ok(lock.try_acquire(&r, &s.opts(5_000, 0).with_fencing(false)).await, "try"), "unfenced");
    assert!(matches!(off.fence().await, Err(LockError::InvalidArgument(_))), "fencing off has no token to draw");
    ok(off.release().await, "release");
}

/// 300 draws cut off at random points (before the request left, in flight, after the reply): a guard that then
/// draws to the end gets a token above every earlier hold's, and every release still frees the lock.
pub async fn cancelled_fence_draws_keep_the_order(s: &Subject) {
    let lock = s.lock();
    if !lock.capabilities().fencing {
        return;
    }
    let r = fresh("on-demand-cancel");
    let lazy = s.opts(5_000, 0).with_fencing_mode(Fencing::OnDemand);
    let mut last = None;
    for i in 0..300u64 {
        let g = some(try_get(lock, &r, &lazy).await, "lazy holder");
        let cut_after = Duration::from_micros((i * 37) % 400);
        match select(Box::pin(g.fence()), Box::pin(sleep(cut_after))).await {
            Either::Left((drawn, _)) => drop(ok(drawn, "fence")),
            Either::Right(_) => {}
        }
        let fence = ok(g.fence().await, "fence after a cut draw");
        assert!(last.is_none_or(|l| fence > l), "draw {i}: token {fence} after {last:?}");
        last = Some(fence);
        assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
    }
    let free = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "the lock after the storm");
    assert!(free.fence().await.ok() > last, "the next grant's token is above the storm's");
    ok(free.release().await, "release");
}

/// With fencing off there is no token and the lock is just as exclusive.
pub async fn fencing_can_be_turned_off(s: &Subject) {
    let lock = s.lock();
    let r = fresh("nofence");
    let o = s.opts(5_000, 0).with_fencing(false);
    let a = some(try_get(lock, &r, &o).await, "holder");
    assert_eq!(a.fence().await.ok(), None);
    assert!(try_get(lock, &r, &o).await.is_none());
    assert!(try_get(lock, &r, &s.opts(5_000, 0)).await.is_none());
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
}

/// Bad input is a typed `InvalidArgument`, returned at once.
pub async fn invalid_inputs_rejected(s: &Subject) {
    let lock = s.lock();
    let r = fresh("invalid");
    let cases: Vec<(&str, String, LockOptions)> = vec![
        ("empty resource", String::new(), s.opts(1_000, 0)),
        ("zero ttl", r.clone(), LockOptions::new(Duration::ZERO)),
        ("ttl below floor", r.clone(), LockOptions::new(ms(1))),
        ("absurd ttl", r.clone(), LockOptions::new(Duration::from_secs(400 * 24 * 3600))),
        ("absurd wait", r.clone(), s.opts(1_000, 0).with_wait(Duration::from_secs(400 * 24 * 3600))),
        ("bad retry", r.clone(), s.opts(1_000, 5_000).with_retry(RetryPolicy::default().with_factor(0.5))),
    ];
    for (what, resource, o) in cases {
        let t0 = Instant::now();
        let e1 = lock.try_acquire(&resource, &o).await.err();
        let e2 = lock.acquire(&resource, &o).await.err();
        assert!(matches!(e1, Some(LockError::InvalidArgument(_))), "{what}: try_acquire gave {e1:?}");
        assert!(matches!(e2, Some(LockError::InvalidArgument(_))), "{what}: acquire gave {e2:?}");
        // Far below the 5 s budget of the cases that wait: refused before any try, not after a wait.
        assert!(t0.elapsed() < STARVED, "{what}: rejecting took {:?}", t0.elapsed());
    }
    // None of them took the lock.
    let g = some(try_get(lock, &r, &s.opts(1_000, 0)).await, "valid acquire after invalid ones");
    assert!(matches!(g.extend(ms(1)).await, Err(LockError::InvalidArgument(_))));
    assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
}

/// Any name the rule admits works (1 to `MAX_RESOURCE_NAME` bytes of UTF-8 without control characters), and names
/// that differ only in escaping are different locks.
pub async fn any_resource_name_works(s: &Subject) {
    let lock = s.lock();
    let base = fresh("names");
    let names = [
        "with spaces and ünïcode",
        "{braced}",
        "}{",
        "}",
        "{",
        "a}b",
        "a%7Db",
        "colons:in:it",
        "wlp:{x}:fence",
        "emoji 🦀🔒",
        "percent %",
    ];
    let mut held = Vec::new();
    for name in names {
        let r = format!("{base}:{name}");
        let g = some(try_get(lock, &r, &s.opts(5_000, 0)).await, name);
        assert_eq!(g.resource(), r);
        assert!(try_get(lock, &r, &s.opts(5_000, 0)).await.is_none(), "{name:?} granted twice");
        held.push(g);
    }
    for g in held {
        assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
    }
}

/// A guard dropped without release frees the lock promptly (or at its TTL where the implementation says it
/// cannot release on drop).
pub async fn dropped_guard_is_freed(s: &Subject) {
    let lock = s.lock();
    let r = fresh("dropped");
    let prompt = lock.capabilities().release_on_drop;
    let ttl = if prompt { s.ms(30_000) } else { s.ms(300) };
    let a = some(try_get(lock, &r, &LockOptions::new(ttl)).await, "holder");
    let signal = a.lost_signal();
    let t0 = Instant::now();
    drop(a);
    assert_eq!(signal.reason(), Some(LostReason::Released));
    let b = ok(lock.acquire(&r, &s.opts(5_000, 3_000)).await, "acquire after drop");
    if prompt {
        assert!(t0.elapsed() < s.ms(2_000), "release on drop took {:?}", t0.elapsed());
    }
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// An acquire future dropped at a random point (while its request is in flight, or while it waits for a holder
/// that releases at a random moment) leaves no lock behind for longer than a short bound, far below its 30 s TTL:
/// the library releases the token it sent.
pub async fn cancelled_acquire_leaves_no_lock(s: &Subject) {
    let lock = s.lock();
    let mut cancelled = 0;
    for i in 0..40u64 {
        let r = fresh(&format!("cancel{i}"));
        let holder = if i % 2 == 0 { Some(some(try_get(lock, &r, &s.opts(30_000, 0)).await, "holder")) } else { None };
        let cut = Duration::from_micros(rand::random::<u64>() % 3_000);
        let release_after = Duration::from_micros(rand::random::<u64>() % 3_000);
        let o = s.opts(30_000, 5_000);
        let contender = async {
            match select(Box::pin(lock.acquire(&r, &o)), Box::pin(sleep(cut))).await {
                Either::Left((result, _)) => Some(ok(result, "uncancelled acquire")),
                Either::Right(((), pending)) => {
                    // Cancel: drop the acquire future wherever it stopped.
                    drop(pending);
                    None
                }
            }
        };
        let releaser = async {
            if let Some(h) = holder {
                sleep(release_after).await;
                assert_eq!(ok(h.release().await, "holder release"), ReleaseOutcome::Released);
            }
        };
        let (won, ()) = futures_util::future::join(contender, releaser).await;
        match won {
            Some(g) => assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released),
            None => {
                cancelled += 1;
                let t0 = Instant::now();
                let g = ok(lock.acquire(&r, &s.opts(5_000, 3_000)).await, "acquire after a cancelled acquire");
                assert!(t0.elapsed() < s.ms(3_000));
                assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
            }
        }
    }
    assert!(cancelled > 0, "no acquire was cancelled; the case proved nothing");
}

/// Without renewal, the lost signal fires at the validity deadline: not before, and not much after (by no more than
/// a starved scheduler delays a timer, [`STARVED`]).
pub async fn lost_signal_fires_at_validity_deadline(s: &Subject) {
    let lock = s.lock();
    let r = fresh("lost");
    let a = some(try_get(lock, &r, &s.opts(200, 0)).await, "holder");
    let signal = a.lost_signal();
    assert!(!signal.is_lost());
    let reason = signal.lost().await;
    let now = Instant::now();
    assert_eq!(reason, LostReason::Expired);
    assert!(now >= a.valid_until(), "lost signal fired before the deadline");
    assert!(now - a.valid_until() < STARVED, "lost signal fired {:?} late", now - a.valid_until());
    assert!(a.is_lost());
    assert_eq!(a.remaining(), Duration::ZERO);
    assert!(matches!(a.extend(s.ms(1_000)).await, Err(LockError::Lost { .. })));
}

/// Releasing turns every clone of the lost signal lost, so work holding a clone stops.
pub async fn release_marks_lost(s: &Subject) {
    let lock = s.lock();
    let r = fresh("release-lost");
    let a = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "holder");
    let signal = a.lost_signal();
    let waiter = async { signal.lost().await };
    let releaser = async {
        sleep(s.ms(20)).await;
        ok(a.release().await, "release")
    };
    let (reason, outcome) = futures_util::future::join(waiter, releaser).await;
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert_eq!(reason, LostReason::Released);
}

/// Every acquisition gets its own owner token of at least 128 random bits.
pub async fn owner_tokens_are_unique(s: &Subject) {
    let lock = s.lock();
    let r = fresh("tokens");
    let mut seen = HashSet::new();
    for _ in 0..50 {
        let g = some(try_get(lock, &r, &s.opts(5_000, 0)).await, "acquire");
        let t = g.token().as_str().to_owned();
        assert!(t.len() >= 32, "token {t:?} is shorter than 128 bits of hex");
        assert!(seen.insert(t), "token reused");
        assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
    }
}

/// With auto-renewal, work lasting 3× the TTL keeps the lock the whole time: a contender polling throughout
/// never gets it, the checker sees no overlap, and the holder is never told it lost the lock.
///
/// The TTL leaves the watchdog about a second of slack per renewal (with a 300 ms TTL, two CPU burners beside the
/// suite starved a renewal past its validity over Redlock): a scheduler starved longer than that costs the lock for
/// real, and the guard says so. The claim here is that renewal keeps a lock at all.
pub async fn auto_renewal_outlives_ttl(s: &Subject) {
    let lock = s.lock();
    let r = fresh("renew");
    // Renewal is what is proved here, not timing: the TTL is 1.5 s, or the backend's smallest.
    let ttl = s.at_least(ms(1_500));
    let a = some(try_get(lock, &r, &LockOptions::new(ttl).with_auto_renew(RenewPolicy::default())).await, "holder");
    let checker = Checker::new();
    let start = Instant::now();
    let mut polls = 0;
    while start.elapsed() < ttl * 3 {
        if let Some(intruder) = try_get(lock, &r, &s.opts(1_000, 0)).await {
            checker.record(Hold { owner: "intruder".into(), fence: None, start: Instant::now(), end: Instant::now() });
            drop(intruder);
        }
        polls += 1;
        sleep(ms(20)).await;
    }
    assert!(!a.is_lost(), "a renewed lock was reported lost: {:?}", a.lost_signal().reason());
    checker.record(Hold { owner: "holder".into(), fence: None, start, end: Instant::now().min(a.valid_until()) });
    let report = checker.report();
    assert!(report.overlaps.is_empty(), "another owner got a renewed lock: {:?}", report.overlaps);
    assert!(polls > 20);
    assert_eq!(ok(a.release().await, "release"), ReleaseOutcome::Released);
    // Released means free, and the watchdog is gone: a short lock taken now expires on time.
    let b = some(try_get(lock, &r, &s.opts(100, 0)).await, "after release");
    sleep(s.ms(250)).await;
    let c = some(try_get(lock, &r, &s.opts(1_000, 0)).await, "a stopped watchdog must not keep the key alive");
    drop(b);
    assert_eq!(ok(c.release().await, "release"), ReleaseOutcome::Released);
}

/// A maximum hold stops renewal and turns the guard lost at that moment (while the last renewal still holds the
/// lock: renewals every third of the TTL leave two thirds of it past the limit), after which a waiter gets the lock.
pub async fn max_hold_stops_renewal(s: &Subject) {
    let lock = s.lock();
    let r = fresh("maxhold");
    let ttl = s.at_least(ms(600));
    let max_hold = ttl * 5 / 3;
    let policy = RenewPolicy::default().with_max_hold(max_hold);
    let t0 = Instant::now();
    let a = some(try_get(lock, &r, &LockOptions::new(ttl).with_auto_renew(policy)).await, "holder");
    let signal = a.lost_signal();
    let reason = signal.lost().await;
    let at = t0.elapsed();
    assert_eq!(reason, LostReason::MaxHoldReached);
    assert!(at >= max_hold - s.ms(10) && at < max_hold + STARVED, "max hold of {max_hold:?} fired after {at:?}");
    assert!(Instant::now() <= a.valid_until() + ttl / 2, "lost fired after the validity deadline");
    let b = ok(lock.acquire(&r, &s.opts(1_000, 5_000)).await, "waiter after max hold");
    // The key stays until the TTL of the last renewal runs out; the waiter tries then at the latest.
    assert!(t0.elapsed() < max_hold + ttl + STARVED, "waiter got the lock only after {:?}", t0.elapsed());
    drop(a);
    assert_eq!(ok(b.release().await, "release"), ReleaseOutcome::Released);
}

/// Scoped locking runs the work with the fencing token and returns its output, and the lock is free afterwards.
pub async fn scoped_work_returns_output(s: &Subject) {
    let lock = s.lock();
    let r = fresh("scoped");
    let pause = s.ms(20);
    let out = lock
        .with_lock(&r, &s.opts(1_000, 1_000), |ctx| async move {
            assert!(!ctx.lost.is_lost());
            sleep(pause).await;
            (ctx.resource, ctx.fencing_token)
        })
        .await;
    let (resource, fence) = ok(out, "with_lock");
    assert_eq!(resource, r);
    if lock.capabilities().fencing {
        assert!(fence.is_some());
    }
    let g = some(try_get(lock, &r, &s.opts(1_000, 0)).await, "free after scoped work");
    assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
}

/// Scoped work is cancelled (its future dropped) when the lock is lost, and the call returns `Lost`.
pub async fn scoped_work_cancelled_on_loss(s: &Subject) {
    struct DropFlag(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let lock = s.lock();
    let r = fresh("scoped-lost");
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let long = s.ms(10_000);
    let ttl = s.at_least(ms(600));
    let max_hold = ttl * 5 / 3;
    let o = LockOptions::new(ttl).with_wait(max_hold).with_auto_renew(RenewPolicy::default().with_max_hold(max_hold));
    let t0 = Instant::now();
    let out = lock
        .with_lock(&r, &o, |_ctx| async move {
            let _flag = flag;
            sleep(long).await;
            "finished"
        })
        .await;
    assert!(matches!(out, Err(LockError::Lost { reason: LostReason::MaxHoldReached, .. })), "got {out:?}");
    assert!(t0.elapsed() < max_hold + STARVED, "work was not cancelled promptly: {:?}", t0.elapsed());
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the work future was not dropped");
}

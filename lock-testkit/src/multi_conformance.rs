//! The multi-resource lock's conformance cases ([`Lock::acquire_all`]): one public async function per case, each
//! taking the [`Subject`] under test, which must wrap a [`Lock`] ([`Subject::engine`]).
//!
//! [`multi_resource_tests!`](crate::multi_resource_tests) writes one `#[test]` per case. The cases follow the test
//! list of the multi-resource study (`shared/research/primitives.md`, section 3.5); the Cluster cases (different
//! slots) are in [`cluster_cases`](crate::cluster_cases). Each case is a test: it panics, naming what broke.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join, join_all, select, Either};
use lock_core::{CrossSlot, Lock, LockError, LockOptions, MultiGuard, ReleaseOutcome, RetryPolicy, MAX_RESOURCES};

use crate::checker::{Checker, Hold};
use crate::conformance::{ok, some};
use crate::or_panic::ms;
use crate::runtime::sleep;
use crate::Subject;

fn fresh(case: &str, n: usize) -> Vec<String> {
    let run = rand::random::<u64>();
    (0..n).map(|i| format!("multi:{case}:{run:016x}:{i}")).collect()
}

fn names(resources: &[String]) -> Vec<&str> {
    resources.iter().map(String::as_str).collect()
}

/// Options for every case: on Redis Cluster the resources of a case live in different slots, so the suite takes
/// them in [`CrossSlot::Ordered`] mode there (a single server ignores the setting); the default mode's refusal is a
/// cluster case of its own.
fn opts(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_wait(ms(wait_ms)).with_cross_slot(CrossSlot::Ordered)
}

/// Whether `resource` is free now: a single try takes it (and gives it back).
async fn is_free(lock: &Lock, resource: &str) -> bool {
    match ok(lock.try_acquire(resource, &opts(5_000, 0)).await, "probe") {
        Some(g) => {
            ok(g.release().await, "probe release");
            true
        }
        None => false,
    }
}

/// Test 1: with B held by a single lock, `try_acquire_all([A, B, C])` returns `None` and takes nothing: A and C
/// are free afterwards (all or nothing), and B is still held by its owner.
pub async fn a_held_resource_blocks_the_set_and_nothing_is_taken(s: &Subject) {
    let lock = s.engine();
    let r = fresh("blocks", 3);
    let b = some(ok(lock.try_acquire(&r[1], &opts(10_000, 0)).await, "hold B"), "hold B");
    for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
        let list: Vec<&str> = order.iter().map(|i| r[*i].as_str()).collect();
        assert!(ok(lock.try_acquire_all(&list, &opts(10_000, 0)).await, "try_acquire_all").is_none());
    }
    let waited = lock.acquire_all(&names(&r), &opts(10_000, 150)).await;
    assert!(matches!(waited, Err(LockError::Contended { .. })), "waiting past the budget: {waited:?}");
    assert!(is_free(lock, &r[0]).await, "A was taken by a refused multi-acquire");
    assert!(is_free(lock, &r[2]).await, "C was taken by a refused multi-acquire");
    assert!(!is_free(lock, &r[1]).await, "B lost its holder");
    assert_eq!(ok(b.release().await, "release B"), ReleaseOutcome::Released);
    let all = some(ok(lock.try_acquire_all(&names(&r), &opts(10_000, 0)).await, "all free"), "all free");
    assert!(ok(all.release().await, "release all").all_released());
}

/// Test 2: two tasks take [A, B] and [B, A] 150 times each, while a third takes A and B singly: everyone finishes
/// (no deadlock, no starvation within the budget), and no two holders of A (or of B) ever overlap.
pub async fn opposite_orders_never_deadlock(s: &Subject) {
    const ROUNDS: usize = 150;
    let lock = s.engine();
    let r = fresh("orders", 2);
    let checkers = [Arc::new(Checker::new()), Arc::new(Checker::new())];
    let o = opts(5_000, 20_000);
    let record = |guard: &MultiGuard, start: Instant| {
        for (i, resource) in r.iter().enumerate() {
            checkers[i].record(Hold {
                owner: guard.token().to_string(),
                fence: guard.fence_of(resource).map(|f| f.get()),
                start,
                end: Instant::now().min(guard.valid_until()),
            });
        }
    };
    let multi = |order: [usize; 2]| {
        let (o, r, record) = (o.clone(), &r, &record);
        async move {
            for _ in 0..ROUNDS {
                let list = [r[order[0]].as_str(), r[order[1]].as_str()];
                let guard = ok(lock.acquire_all(&list, &o).await, "acquire_all in a loop");
                let start = Instant::now();
                record(&guard, start);
                assert!(ok(guard.release().await, "release").all_released());
            }
        }
    };
    let single = async {
        for i in 0..ROUNDS / 3 {
            let resource = &r[i % 2];
            let g = ok(lock.acquire(resource, &o).await, "single acquire in a loop");
            let start = Instant::now();
            checkers[i % 2].record(Hold {
                owner: g.token().to_string(),
                fence: g.fence().await.ok().map(|f| f.get()),
                start,
                end: Instant::now().min(g.valid_until()),
            });
            assert_eq!(ok(g.release().await, "release"), ReleaseOutcome::Released);
        }
    };
    // Boxed: three acquire loops side by side are a large future for a runtime that polls it on the test thread.
    join(join(Box::pin(multi([0, 1])), Box::pin(multi([1, 0]))), Box::pin(single)).await;
    for (i, checker) in checkers.iter().enumerate() {
        let report = checker.report();
        assert!(report.is_clean(), "resource {i}: {report:?}");
    }
}

/// Test 3: the multi-lock uses the single lock's keys: a multi-lock on {A, B} blocks a single lock on A, and a
/// single lock on B blocks a multi-lock on {A, B}; a waiting multi-lock gets the set once B is released.
pub async fn multi_and_single_locks_exclude_each_other(s: &Subject) {
    let lock = s.engine();
    let r = fresh("interop", 2);
    let both = some(ok(lock.try_acquire_all(&names(&r), &opts(10_000, 0)).await, "take {A, B}"), "take {A, B}");
    assert!(ok(lock.try_acquire(&r[0], &opts(10_000, 0)).await, "single A").is_none(), "single A beside {{A, B}}");
    assert!(ok(lock.try_acquire(&r[1], &opts(10_000, 0)).await, "single B").is_none(), "single B beside {{A, B}}");
    assert!(ok(both.release().await, "release").all_released());
    let b = some(ok(lock.try_acquire(&r[1], &opts(10_000, 0)).await, "single B"), "single B");
    assert!(ok(lock.try_acquire_all(&names(&r), &opts(10_000, 0)).await, "multi").is_none(), "{{A, B}} beside B");
    let (list, o) = (names(&r), opts(10_000, 10_000));
    let waiting = lock.acquire_all(&list, &o);
    let releasing = async {
        sleep(ms(100)).await;
        assert_eq!(ok(b.release().await, "release B"), ReleaseOutcome::Released);
    };
    let (got, ()) = join(waiting, releasing).await;
    assert!(ok(ok(got, "waiting multi-acquire").release().await, "release").all_released());
}

/// Test 4 (the part a lock's own API can set up): once the set's validity has passed and another owner took B,
/// `extend` fails with `Lost` and the lost signal has fired; A was not prolonged; the release leaves B's new owner
/// alone and reports it. (That an extend names the stolen resource while the set is still valid is
/// [`server_cases::multi_extend_names_the_stolen_resource`](crate::server_cases::multi_extend_names_the_stolen_resource).)
pub async fn extend_is_all_or_lost_and_names_the_lost_resource(s: &Subject) {
    let lock = s.engine();
    let r = fresh("extend", 2);
    let both = some(ok(lock.try_acquire_all(&names(&r), &opts(200, 0)).await, "take {A, B}"), "take {A, B}");
    ok(both.extend(ms(300)).await, "extend while held");
    sleep(ms(400)).await;
    let thief = some(ok(lock.try_acquire(&r[1], &opts(10_000, 0)).await, "take B after expiry"), "take B");
    assert!(matches!(both.extend(ms(10_000)).await, Err(LockError::Lost { .. })), "extend after losing B");
    assert!(both.is_lost(), "the lost signal did not fire");
    assert!(is_free(lock, &r[0]).await, "A was prolonged by an extend that lost B");
    let released = ok(both.release().await, "release after loss");
    assert_eq!(released.outcome(&r[1]), Some(ReleaseOutcome::OwnedByOther), "B's new owner: {released:?}");
    assert_eq!(ok(thief.release().await, "thief release"), ReleaseOutcome::Released, "B was deleted by the old owner");
}

/// Test 5: each resource's fencing tokens strictly increase across single and multi locks, from one counter.
pub async fn fences_agree_with_single_locks_per_resource(s: &Subject) {
    let lock = s.engine();
    let r = fresh("fences", 3);
    let mut last = [0u64; 3];
    for round in 0..6 {
        if round % 2 == 0 {
            let g = ok(lock.acquire_all(&names(&r), &opts(5_000, 1_000)).await, "multi");
            for (i, resource) in r.iter().enumerate() {
                let fence = g.fence_of(resource).map(|f| f.get()).unwrap_or_else(|| panic!("no fence {i}"));
                assert!(fence > last[i], "resource {i}: {fence} after {}", last[i]);
                last[i] = fence;
            }
            assert!(ok(g.release().await, "release").all_released());
        } else {
            for (i, resource) in r.iter().enumerate() {
                let g = ok(lock.acquire(resource, &opts(5_000, 1_000)).await, "single");
                let fence = g.fence().await.ok().map(|f| f.get()).unwrap_or_else(|| panic!("no fence {i}"));
                assert!(fence > last[i], "resource {i}: single {fence} after {}", last[i]);
                last[i] = fence;
                ok(g.release().await, "release");
            }
        }
    }
    let unfenced = ok(lock.acquire_all(&names(&r), &opts(5_000, 1_000).with_fencing(false)).await, "no fencing");
    assert!(unfenced.fences().iter().all(|(_, f)| f.is_none()));
    assert!(ok(unfenced.release().await, "release").all_released());
}

/// Test 7: duplicates collapse and the list is sorted before any I/O; an empty list, an empty name and more than
/// `MAX_RESOURCES` resources are `InvalidArgument`.
pub async fn duplicates_collapse_and_bad_lists_are_rejected(s: &Subject) {
    let lock = s.engine();
    let r = fresh("dups", 2);
    let list = [r[1].as_str(), r[0].as_str(), r[1].as_str(), r[0].as_str()];
    let g = some(ok(lock.try_acquire_all(&list, &opts(5_000, 0)).await, "duplicates"), "duplicates");
    let mut held = g.resources();
    held.sort_unstable();
    assert_eq!(held, names(&r), "duplicates were not collapsed");
    let released = ok(g.release().await, "release");
    assert_eq!(released.outcomes().len(), 2);
    assert!(released.all_released());
    let invalid = |result: lock_core::Result<Option<MultiGuard>>, what: &str| {
        assert!(matches!(result, Err(LockError::InvalidArgument(_))), "{what}: {result:?}");
    };
    invalid(lock.try_acquire_all(&[], &opts(5_000, 0)).await, "no resources");
    invalid(lock.try_acquire_all(&[r[0].as_str(), ""], &opts(5_000, 0)).await, "an empty name");
    let many = fresh("many", MAX_RESOURCES + 1);
    invalid(lock.try_acquire_all(&names(&many), &opts(5_000, 0)).await, "too many");
    invalid(lock.try_acquire_all(&names(&r), &opts(0, 0)).await, "a zero TTL");
    let most = some(ok(lock.try_acquire_all(&names(&many[..MAX_RESOURCES]), &opts(5_000, 0)).await, "cap"), "cap");
    assert_eq!(ok(most.release().await, "release").outcomes().len(), MAX_RESOURCES);
}

/// A multi-lock's release announces each resource: single-lock waiters on A and on B (whose retry backoff is 3 s)
/// both get their lock within 1.5 s of the release, woken by its notifications. A store without notifications is
/// exempt (its waiters poll).
pub async fn release_wakes_waiters_of_every_resource(s: &Subject) {
    let lock = s.engine();
    if lock.stores().iter().all(|store| store.release_hub().is_none()) {
        return;
    }
    let r = fresh("wake", 2);
    let both = some(ok(lock.try_acquire_all(&names(&r), &opts(20_000, 0)).await, "take {A, B}"), "take {A, B}");
    let slow = RetryPolicy::default().with_min_delay(ms(3_000)).with_max_delay(ms(3_000));
    let o = opts(5_000, 10_000).with_retry(slow);
    let waiter = |resource: &str| {
        let (o, resource) = (o.clone(), resource.to_owned());
        async move {
            let g = ok(lock.acquire(&resource, &o).await, "waiter");
            let at = Instant::now();
            ok(g.release().await, "waiter release");
            at
        }
    };
    let released_at = async {
        sleep(ms(300)).await;
        let at = Instant::now();
        assert!(ok(both.release().await, "release").all_released());
        at
    };
    let (woken, released) = join(join_all([waiter(&r[0]), waiter(&r[1])]), released_at).await;
    for (i, at) in woken.into_iter().enumerate() {
        let after = at.saturating_duration_since(released);
        assert!(after < ms(1_500), "waiter on resource {i} took {after:?}: not woken by the release");
    }
}

/// `with_all` runs the work with a fencing token per resource and releases every resource afterwards.
pub async fn scoped_work_over_several_resources(s: &Subject) {
    let lock = s.engine();
    let r = fresh("scoped", 3);
    let seen = ok(
        lock.with_all(&names(&r), &opts(2_000, 1_000), |ctx| async move {
            ctx.fencing_tokens.iter().map(|(resource, fence)| (resource.clone(), fence.is_some())).collect::<Vec<_>>()
        })
        .await,
        "with_all",
    );
    // Sorted by name on a single server, by slot on Redis Cluster.
    let mut seen = seen;
    seen.sort();
    assert_eq!(seen, r.iter().map(|n| (n.clone(), true)).collect::<Vec<_>>());
    for resource in &r {
        assert!(is_free(lock, resource).await, "{resource} still held after with_all");
    }
}

/// Test 8: a storm of 300 `acquire_all` futures over overlapping sets, each dropped after a random delay (while its
/// request is in flight, or while it waits), with holders coming and going: afterwards every resource is free
/// within a short bound, far below the 30 s TTL (the library released every token it may have placed).
pub async fn cancelled_acquire_all_storm_leaves_nothing(s: &Subject) {
    let lock = s.engine();
    let r = fresh("storm", 4);
    let mut cancelled = 0;
    for round in 0..30u64 {
        let contenders = (0..10u64).map(|i| {
            let set: Vec<&str> =
                (0..4).filter(|j| (round + i) >> j & 1 == 1 || *j == (i % 4) as usize).map(|j| r[j].as_str()).collect();
            let cut = Duration::from_micros(rand::random::<u64>() % 4_000);
            async move {
                let o = opts(30_000, 5_000);
                let acquire = Box::pin(lock.acquire_all(&set, &o));
                let raced = select(acquire, Box::pin(sleep(cut))).await;
                let was_cancelled = match raced {
                    Either::Left((result, _)) => {
                        // Held briefly, then dropped (released in the background) or released.
                        let guard = ok(result, "uncancelled acquire_all");
                        sleep(Duration::from_micros(rand::random::<u64>() % 1_000)).await;
                        if i % 2 == 0 {
                            drop(guard);
                        } else {
                            ok(guard.release().await, "release");
                        }
                        false
                    }
                    Either::Right(((), pending)) => {
                        drop(pending);
                        true
                    }
                };
                was_cancelled
            }
        });
        cancelled += join_all(contenders).await.into_iter().filter(|c| *c).count();
    }
    assert!(cancelled > 0, "no acquire_all was cancelled; the case proved nothing");
    let t0 = Instant::now();
    let all = ok(lock.acquire_all(&names(&r), &opts(5_000, 5_000)).await, "every resource after the storm");
    assert!(t0.elapsed() < ms(5_000), "resources stayed taken for {:?} after the storm", t0.elapsed());
    assert!(ok(all.release().await, "release").all_released());
}

/// Review finding 12: with [`Fencing::OnDemand`](lock_core::Fencing::OnDemand) a multi-lock draws every token with
/// the grant (its guard has no later draw), also when the list names one distinct resource (`[r, r]`, or a
/// computed list of one): each resource has a token, and it is above the last single lock's on that resource.
pub async fn on_demand_fencing_gives_every_resource_a_token(s: &Subject) {
    let lock = s.engine();
    let r = fresh("ondemand", 2);
    let lazy = opts(5_000, 0).with_fencing_mode(lock_core::Fencing::OnDemand);
    let single = ok(lock.acquire(&r[0], &opts(5_000, 0)).await, "single lock");
    let before = some(single.fence().await.ok(), "the single lock's token");
    ok(single.release().await, "release");
    for list in [vec![r[0].as_str(), r[0].as_str()], vec![r[0].as_str()], names(&r)] {
        let guard = ok(lock.acquire_all(&list, &lazy).await, "acquire_all on demand");
        for (resource, token) in guard.fences() {
            let token = some(token, "a multi-lock's token on demand");
            if resource == r[0] {
                assert!(token > before, "{resource}: token {token} not above the single lock's {before}");
            }
        }
        ok(guard.release().await, "release");
        let scoped = ok(lock.with_all(&list, &lazy, |ctx| async move { ctx.fencing_tokens }).await, "with_all");
        assert!(scoped.iter().all(|(_, token)| token.is_some()), "with_all on demand: {scoped:?}");
    }
}

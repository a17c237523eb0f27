//! Cases every backend runs against a real Redis Cluster: many resources over all slots, release notifications
//! from every primary, `SCRIPT FLUSH` on every node, a slot migration and a failover under load.
//!
//! Like the conformance suite, one public async function per case; [`cluster_tests!`](crate::cluster_tests) writes
//! one `#[test]` per case for a backend, given an async function that connects its store to a cluster.
//!
//! Each case is a test: it panics, naming what broke, when the backend does not keep a promise (so no case has an
//! `# Errors` section), and it is not meant to be cancelled except by ending the test.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{
    DistributedLock, Lock, LockError, LockKeys, LockOptions, LockStore, ReleaseOutcome, ReplicaAck, RetryPolicy,
    DEFAULT_PREFIX,
};

use crate::or_panic::{ms, OrPanic};
use crate::{Checker, Hold, RedisCluster, Reply};

/// Connects a backend's store to a cluster (the argument of every case).
pub type StoreFactory =
    dyn Fn(&RedisCluster) -> Pin<Box<dyn Future<Output = Arc<dyn LockStore>> + Send + '_>> + Send + Sync;

/// The cluster shared by the cases of one test binary.
pub fn shared() -> &'static RedisCluster {
    RedisCluster::shared().unwrap_or_else(|err| panic!("redis cluster: {err}"))
}

/// The node serving `resource`'s lock keys.
pub fn owner(cluster: &RedisCluster, resource: &str) -> usize {
    let keys = LockKeys::new(DEFAULT_PREFIX, resource).or_panic();
    cluster.primary_for_key(keys.lock()).or_panic()
}

/// 16 workers over 256 resources spread over every primary (and so over slots all over the key space): every
/// acquisition succeeds (no `CROSSSLOT`, no `MOVED` reaching the caller) and no two holds of one resource overlap.
pub async fn many_resources_over_all_slots_16_workers(store: &StoreFactory) {
    const WORKERS: usize = 16;
    const RESOURCES: usize = 256;
    const ROUNDS: usize = 48;
    let cluster = shared();
    let names: Vec<String> = (0..RESOURCES).map(|i| format!("spread-{i}")).collect();
    let owners: BTreeSet<usize> = names.iter().map(|n| owner(cluster, n)).collect();
    assert_eq!(owners.len(), 3, "resources must cover every primary");
    let lock: Arc<dyn DistributedLock> = Arc::new(Lock::from_arc(store(cluster).await));
    let checkers: Arc<BTreeMap<String, Checker>> =
        Arc::new(names.iter().map(|n| (n.clone(), Checker::new())).collect());
    let names = Arc::new(names);
    let tasks: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (lock, checkers, names) = (lock.clone(), checkers.clone(), names.clone());
            tokio::spawn(async move {
                let opts = LockOptions::new(ms(5_000)).with_wait(ms(10_000));
                for round in 0..ROUNDS {
                    // Workers collide on resources (stride 7 over 256) so that holds really contend.
                    let name = &names[(w * 16 + round * 7) % RESOURCES];
                    let guard = lock.acquire(name, &opts).await.unwrap_or_else(|err| panic!("{name}: {err:?}"));
                    let start = Instant::now();
                    tokio::task::yield_now().await;
                    checkers[name].record(Hold::of(&*guard, start).await);
                    assert_eq!(guard.release().await.or_panic(), ReleaseOutcome::Released);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.or_panic();
    }
    let mut holds = 0;
    for (name, checker) in checkers.iter() {
        let report = checker.report();
        holds += report.holds;
        assert!(report.is_clean(), "{name}: {report:?}");
    }
    assert_eq!(holds, WORKERS * ROUNDS);
}

/// A release on any primary wakes a waiter of another store, whatever the backend listens with: a classic
/// `PUBLISH` is forwarded over the cluster bus to every node, a sharded `SPUBLISH` reaches subscribers of the slot's
/// shard. With the backoff pinned at 500 ms only a notification can wake the waiter within 200 ms.
pub async fn release_notifications_reach_waiters_from_every_primary(store: &StoreFactory) {
    let cluster = shared();
    let holder = Lock::from_arc(store(cluster).await);
    let waiter = Arc::new(Lock::from_arc(store(cluster).await));
    // One resource on each primary.
    let mut per_primary = BTreeMap::new();
    for i in 0.. {
        let name = format!("notify-{i}");
        per_primary.entry(owner(cluster, &name)).or_insert(name);
        if per_primary.len() == 3 {
            break;
        }
    }
    for (primary, name) in per_primary {
        let delay = release_wake_delay(&holder, &waiter, &name).await;
        tracing::info!("{name} on node {primary}: waiter acquired {delay:?} after the release");
        assert!(delay < NOTIFIED_WITHIN, "{name} on node {primary}: waiter took {delay:?}; no notification");
    }
}

/// Releases are announced with sharded pub/sub (`SPUBLISH`, on the shard that owns the lock's slot), never with a
/// classic `PUBLISH`, which the cluster bus broadcasts to every node (see `lock_core::backend::scripts::RELEASE`). Not in
/// [`cluster_tests!`](crate::cluster_tests)'s default list, since a backend may choose classic pub/sub; ours list
/// it. Every case of the calling test binary must use the same backend: no node may have counted a `PUBLISH`.
pub async fn releases_are_announced_on_their_shard_only(store: &StoreFactory) {
    let cluster = shared();
    let lock = Lock::from_arc(store(cluster).await);
    assert_eq!(lock.deployment(), "cluster", "what traces and metrics call a Cluster deployment");
    let before = calls(cluster, "spublish");
    for i in 0..10 {
        let (resource, options) = (format!("sharded-{i}"), LockOptions::new(ms(10_000)));
        let guard = lock.try_acquire(&resource, &options).await.or_panic().or_panic();
        // A try that finds the lock held: the release has someone to tell (an uncontended one announces nothing).
        assert!(lock.try_acquire(&resource, &options).await.or_panic().is_none(), "the lock was held");
        guard.release().await.or_panic();
    }
    assert!(calls(cluster, "spublish") >= before + 10, "every awaited release announces itself with SPUBLISH");
    assert_eq!(calls(cluster, "publish"), 0, "no release may be broadcast with PUBLISH");
}

/// Issue 19 on a cluster: a release, announced with `SPUBLISH` on the lock's shard, names the first waiting process,
/// and that process's waiter takes the lock at once (the waiters' safety poll is 20 s); so on through five
/// processes. (That one process tries per release is counted on a single server, see
/// [`server_cases::a_release_wakes_one_waiting_process`](crate::server_cases::a_release_wakes_one_waiting_process):
/// the other cases of a binary share this cluster, and their scripts would be counted too.)
pub async fn a_release_names_the_waiting_process_on_its_shard(store: &StoreFactory) {
    let cluster = shared();
    let mut locks = Vec::new();
    for _ in 0..=crate::server_cases::HANDED_ON {
        locks.push(Lock::from_arc(store(cluster).await));
    }
    crate::server_cases::hand_on_through_processes(&locks, "one-process-woken", true, None).await;
}

/// Calls of `command` summed over the live nodes (a `redis.call` in a script counts).
fn calls(cluster: &RedisCluster, command: &str) -> u64 {
    (0..cluster.len())
        .filter_map(|i| cluster.node(i))
        .map(|node| node.command_calls().or_panic().get(command).copied().unwrap_or(0))
        .sum()
}

/// A waiter woken by a release notification acquires within this long after the release; polling, pinned at
/// 500 ms by [`release_wake_delay`], cannot.
pub(crate) const NOTIFIED_WITHIN: Duration = Duration::from_millis(200);

/// `holder` takes `name`, a waiter on `waiter` (a lock over another store) starts waiting with its backoff pinned
/// at 500 ms, and the holder releases 150 ms later: how long after the release the waiter acquired. Under
/// [`NOTIFIED_WITHIN`] only a release notification can have woken it.
pub(crate) async fn release_wake_delay(holder: &Lock, waiter: &Arc<Lock>, name: &str) -> Duration {
    let guard = holder.acquire(name, &LockOptions::new(ms(10_000))).await.or_panic();
    let slow = RetryPolicy::default().with_min_delay(ms(500)).with_max_delay(ms(500));
    let opts = LockOptions::new(ms(10_000)).with_wait(ms(5_000)).with_retry(slow);
    let (waiter, n) = (waiter.clone(), name.to_owned());
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(&n, &opts).await.or_panic();
        let acquired = Instant::now();
        guard.release().await.or_panic();
        acquired
    });
    tokio::time::sleep(ms(150)).await;
    let released = Instant::now();
    assert_eq!(guard.release().await.or_panic(), ReleaseOutcome::Released);
    waiting.await.or_panic().saturating_duration_since(released)
}

/// `SCRIPT FLUSH` on every node between acquire, extend and release is invisible: EVALSHA falls back to EVAL.
pub async fn script_flush_on_every_node_is_invisible(store: &StoreFactory) {
    let cluster = shared();
    let lock = Lock::from_arc(store(cluster).await);
    let opts = LockOptions::new(ms(5_000));
    for i in 0..6 {
        let name = format!("flush-{i}");
        cluster.command_all(&["SCRIPT", "FLUSH"]).or_panic();
        let guard = lock.acquire(&name, &opts).await.or_panic();
        cluster.command_all(&["SCRIPT", "FLUSH"]).or_panic();
        guard.extend(ms(5_000)).await.or_panic();
        cluster.command_all(&["SCRIPT", "FLUSH"]).or_panic();
        assert_eq!(guard.release().await.or_panic(), ReleaseOutcome::Released);
    }
}

/// Workers keep locking resources while their slots move to another primary (`ASK` during the move, `MOVED`
/// after): no error reaches a caller, holds never overlap, and fencing tokens keep increasing (the fence key moves
/// with its slot).
pub async fn slot_migration_mid_run_is_invisible(store: &StoreFactory) {
    let cluster = Arc::new(RedisCluster::start().or_panic());
    let from = 0;
    let names: Vec<String> =
        (0..).map(|i| format!("move-{i}")).filter(|n| owner(&cluster, n) == from).take(8).collect();
    let lock: Arc<dyn DistributedLock> = Arc::new(Lock::from_arc(store(&cluster).await));
    let checkers: Arc<BTreeMap<String, Checker>> =
        Arc::new(names.iter().map(|n| (n.clone(), Checker::new())).collect());
    let stop = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (lock, checkers, names, stop) = (lock.clone(), checkers.clone(), names.clone(), stop.clone());
            tokio::spawn(async move {
                let opts = LockOptions::new(ms(5_000)).with_wait(ms(10_000));
                let mut round = w;
                while stop.load(Ordering::Relaxed) == 0 {
                    let name = &names[round % names.len()];
                    round += 1;
                    let guard = lock.acquire(name, &opts).await.unwrap_or_else(|err| panic!("{name}: {err:?}"));
                    let start = Instant::now();
                    tokio::time::sleep(ms(1)).await;
                    checkers[name].record(Hold::of(&*guard, start).await);
                    assert_eq!(
                        guard.release().await.unwrap_or_else(|err| panic!("{name}: {err:?}")),
                        ReleaseOutcome::Released
                    );
                }
            })
        })
        .collect();
    tokio::time::sleep(ms(200)).await;
    let mover = cluster.clone();
    let moved = names.clone();
    tokio::task::spawn_blocking(move || {
        for name in &moved {
            let keys = LockKeys::new(DEFAULT_PREFIX, name).or_panic();
            let slot =
                mover.node(0).or_panic().command(&["CLUSTER", "KEYSLOT", keys.lock()]).or_panic().as_int().or_panic();
            mover.migrate_slot(u16::try_from(slot).or_panic(), 1).or_panic();
        }
    })
    .await
    .or_panic();
    tokio::time::sleep(ms(300)).await;
    stop.store(1, Ordering::Relaxed);
    for worker in workers {
        worker.await.or_panic();
    }
    for name in &names {
        assert_eq!(owner(&cluster, name), 1);
        let report = checkers[name].report();
        assert!(report.holds > 0 && report.is_clean(), "{name}: {report:?}");
    }
}

/// Replica acknowledgement on a cluster with one replica per primary (`WAIT` reaches the grant's shard and only
/// it), then a primary killed right after an acknowledged acquire: once its replica has taken over, new
/// acquisitions on every resource succeed again (the lock "keeps working"), and a release on that shard still
/// wakes another store's waiter by notification, before and after the failover. Whether the lock held at the kill
/// survived is reported, not asserted: `WAIT` narrows the window, replication stays asynchronous.
pub async fn lock_keeps_working_after_primary_killed(store: &StoreFactory) {
    let mut cluster = RedisCluster::builder().with_replicas(1).start().or_panic();
    let lock = Lock::from_arc(store(&cluster).await);
    let name = "failover";
    let victim = owner(&cluster, name);
    // A second store's waiter is woken by a release on the shard that will fail over (this opens its subscriber).
    let waiter = Arc::new(Lock::from_arc(store(&cluster).await));
    let notified = (0..).map(|i| format!("notified-{i}")).find(|r| owner(&cluster, r) == victim).or_panic();
    let delay = release_wake_delay(&lock, &waiter, &notified).await;
    assert!(delay < NOTIFIED_WITHIN, "before the failover: waiter took {delay:?}; no notification");
    // Replica acknowledgement asks the shard that made the grant, and only that shard: with another shard's
    // replica stopped the grant is acknowledged; with its own shard's replica stopped it falls short and is given
    // back (a WAIT sent to another node, or to every primary, would get one of these wrong).
    let replica_of = |primary: usize| {
        let id = cluster.node_id(primary).or_panic().to_owned();
        let view = cluster.view(primary).or_panic();
        let replica = view.iter().find(|v| v.primary_id.as_deref() == Some(&id)).or_panic();
        cluster.index_of(&replica.id).or_panic()
    };
    let other = (victim + 1) % 3;
    let (replica, elsewhere) = (replica_of(victim), replica_of(other));
    // A store may connect what a grant with replica acknowledgement needs at its first one (lock-fred connects
    // clients of its own, a cluster discovery each); with a node stopped that connect can outlast the call's bound
    // (lock-fred: `Timeout` in 2 of 8 runs). It is not what the case measures, so it happens here, with every node
    // up, and not inside the bounded calls below.
    let warm = LockOptions::new(ms(30_000)).with_replica_ack(ReplicaAck::new(1, ms(1_000))).with_wait(ms(5_000));
    lock.acquire(name, &warm).await.or_panic().release().await.or_panic();
    cluster.node_mut(elsewhere).or_panic().pause();
    // A write on the other shard that its stopped replica cannot acknowledge.
    let there = (0..).map(|i| format!("other-shard-{i}")).find(|r| owner(&cluster, r) == other).or_panic();
    let unacked = lock.try_acquire(&there, &LockOptions::new(ms(30_000))).await.or_panic().or_panic();
    let other_shard_down =
        lock.try_acquire(name, &LockOptions::new(ms(30_000)).with_replica_ack(ReplicaAck::new(1, ms(1_000)))).await;
    cluster.node_mut(elsewhere).or_panic().resume();
    other_shard_down.or_panic().or_panic().release().await.or_panic();
    unacked.release().await.or_panic();
    cluster.node_mut(replica).or_panic().pause();
    let short =
        lock.try_acquire(name, &LockOptions::new(ms(30_000)).with_replica_ack(ReplicaAck::new(1, ms(200)))).await;
    cluster.node_mut(replica).or_panic().resume();
    assert!(matches!(short, Err(LockError::ReplicasShort { acknowledged: 0, required: 1 })), "{short:?}");
    let keys = LockKeys::new(DEFAULT_PREFIX, name).or_panic();
    let left = cluster.node(victim).or_panic().command(&["EXISTS", keys.lock()]).or_panic();
    assert_eq!(left, Reply::Int(0), "a short grant is given back");
    let acked = LockOptions::new(ms(30_000)).with_replica_ack(ReplicaAck::new(1, ms(1_000)));
    let held = lock.acquire(name, &acked.with_wait(ms(5_000))).await.or_panic();
    let (cluster, promoted) = tokio::task::spawn_blocking(move || {
        let promoted = cluster.kill_primary_and_wait(victim, Duration::from_secs(30));
        (cluster, promoted)
    })
    .await
    .or_panic();
    let promoted = promoted.or_panic();
    tracing::info!("node {victim} killed, node {promoted} promoted");
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        match lock.try_acquire(name, &LockOptions::new(ms(5_000))).await {
            Ok(outcome) => break outcome,
            Err(err) if Instant::now() < deadline => {
                tracing::info!("retrying after failover: {err:?}");
                tokio::time::sleep(ms(100)).await;
            }
            Err(err) => panic!("lock unusable after failover: {err:?}"),
        }
    };
    tracing::info!(
        "lock held before the kill was {}",
        if after.is_some() { "lost (double grant possible)" } else { "kept" }
    );
    if let Some(g) = after {
        g.release().await.or_panic();
    }
    let _ = held.release().await;
    // Release notifications reach the waiting store's subscriber again, from the promoted primary. That store's
    // subscriber rediscovers the shard on its own schedule (lock-fred's took up to about a second after the other
    // store's commands worked again: its `SSUBSCRIBE` waited for the new slot map, while the waiter polled), so the
    // case asserts recovery within a bound (meanwhile waiters are served by their backoff, within their budget),
    // not the first release after.
    let recovered = Instant::now();
    loop {
        let delay = release_wake_delay(&lock, &waiter, &notified).await;
        if delay < NOTIFIED_WITHIN {
            tracing::info!("notifications back {:?} after the failover", recovered.elapsed());
            break;
        }
        assert!(recovered.elapsed() < ms(10_000), "after the failover: no notification for 10 s ({delay:?})");
    }
    // Every other primary's resources still work too.
    for i in 0..8 {
        let g = lock.acquire(&format!("after-{i}"), &LockOptions::new(ms(5_000)).with_wait(ms(5_000))).await.or_panic();
        g.release().await.or_panic();
    }
    drop(cluster);
}

/// The hash slot of `resource`'s lock key, as the cluster computes it.
fn slot_of(cluster: &RedisCluster, resource: &str) -> i64 {
    let keys = LockKeys::new(DEFAULT_PREFIX, resource).or_panic();
    cluster.node(0).or_panic().command(&["CLUSTER", "KEYSLOT", keys.lock()]).or_panic().as_int().or_panic()
}

/// Whether any node holds a key for `resource` (its lock key).
fn any_lock_key(cluster: &RedisCluster, resource: &str) -> bool {
    let keys = LockKeys::new(DEFAULT_PREFIX, resource).or_panic();
    let owner = cluster.primary_for_key(keys.lock()).or_panic();
    cluster.node(owner).or_panic().command(&["EXISTS", keys.lock()]).or_panic() == Reply::Int(1)
}

/// Test 6 of the multi-resource study, default mode: resources in different slots are `CrossSlot` before any I/O
/// (not a misleading "contended" after retries), no key is written, and the same call with resources that share a
/// slot is one atomic step that works.
pub async fn multi_resource_cross_slot_is_rejected_before_io(store: &StoreFactory) {
    let cluster = shared();
    let lock = Lock::from_arc(store(cluster).await);
    let run = rand::random::<u32>();
    let spread: Vec<String> = (0..3).map(|i| format!("xslot-{run}-{i}")).collect();
    assert!(spread.iter().map(|r| slot_of(cluster, r)).collect::<BTreeSet<_>>().len() > 1);
    let list: Vec<&str> = spread.iter().map(String::as_str).collect();
    let opts = LockOptions::new(ms(5_000)).with_wait(ms(2_000));
    let t0 = Instant::now();
    match lock.acquire_all(&list, &opts).await {
        Err(LockError::CrossSlot { resources, slots }) => {
            assert_eq!(resources.len(), 3);
            assert!(slots > 1);
        }
        other => panic!("resources in several slots: {other:?}"),
    }
    assert!(t0.elapsed() < ms(500), "the refusal waited {:?}: it must come before any I/O", t0.elapsed());
    assert!(!spread.iter().any(|r| any_lock_key(cluster, r)), "a refused multi-acquire wrote a key");
    // Names whose slots agree (found by asking the cluster): one script takes them all.
    let first = format!("same-{run}-0");
    let target = slot_of(cluster, &first);
    let same: Vec<String> = std::iter::once(first)
        .chain((1..200_000).map(|i| format!("same-{run}-{i}")).filter(|r| slot_of(cluster, r) == target).take(2))
        .collect();
    assert_eq!(same.len(), 3, "no three names share a slot");
    let list: Vec<&str> = same.iter().map(String::as_str).collect();
    let guard = lock.try_acquire_all(&list, &opts).await.or_panic().or_panic();
    assert!(same.iter().all(|r| any_lock_key(cluster, r)));
    assert!(guard.release().await.or_panic().all_released());
}

/// Test 6, ordered mode: two workers take the same three resources (each in a different slot, on different
/// primaries) in opposite orders, while single locks take the middle one: all finish, holds of each resource never
/// overlap, and a set found partly held leaves nothing behind.
pub async fn multi_resource_ordered_is_all_or_nothing_under_contention(store: &StoreFactory) {
    const ROUNDS: usize = 40;
    let cluster = shared();
    let lock = Arc::new(Lock::from_arc(store(cluster).await));
    let run = rand::random::<u32>();
    let mut names: Vec<String> = Vec::new();
    for i in 0.. {
        let name = format!("ordered-{run}-{i}");
        if names.iter().all(|n| owner(cluster, n) != owner(cluster, &name)) {
            names.push(name);
        }
        if names.len() == 3 {
            break;
        }
    }
    let checkers: Arc<Vec<Checker>> = Arc::new(names.iter().map(|_| Checker::new()).collect());
    let opts = LockOptions::new(ms(5_000)).with_wait(ms(20_000)).with_cross_slot(lock_core::CrossSlot::Ordered);
    let multi = |reversed: bool| {
        let (lock, checkers, names, opts) = (lock.clone(), checkers.clone(), names.clone(), opts.clone());
        tokio::spawn(async move {
            let mut list: Vec<&str> = names.iter().map(String::as_str).collect();
            if reversed {
                list.reverse();
            }
            for _ in 0..ROUNDS {
                let guard = lock.acquire_all(&list, &opts).await.or_panic();
                let start = Instant::now();
                tokio::time::sleep(ms(1)).await;
                for (i, name) in names.iter().enumerate() {
                    let fence = guard.fence_of(name).map(|f| f.get());
                    let end = Instant::now().min(guard.valid_until());
                    checkers[i].record(Hold { owner: guard.token().to_string(), fence, start, end });
                }
                assert!(guard.release().await.or_panic().all_released());
            }
        })
    };
    let single = {
        let (lock, checkers, middle, opts) = (lock.clone(), checkers.clone(), names[1].clone(), opts.clone());
        tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.acquire(&middle, &opts).await.or_panic();
                let start = Instant::now();
                tokio::time::sleep(ms(1)).await;
                let fence = guard.fence().await.ok().map(|f| f.get());
                checkers[1].record(Hold { owner: guard.token().to_string(), fence, start, end: Instant::now() });
                guard.release().await.or_panic();
            }
        })
    };
    for task in [multi(false), multi(true), single] {
        task.await.or_panic();
    }
    for (i, checker) in checkers.iter().enumerate() {
        let report = checker.report();
        assert!(report.holds > 0 && report.is_clean(), "resource {i}: {report:?}");
    }
    // The middle one held: an ordered set takes nothing, the earlier groups given back.
    let middle = lock.try_acquire(&names[1], &opts).await.or_panic().or_panic();
    let list: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(lock.try_acquire_all(&list, &opts).await.or_panic().is_none());
    assert!(!any_lock_key(cluster, &names[0]) && !any_lock_key(cluster, &names[2]), "a partial set was left");
    middle.release().await.or_panic();
}

/// Fenced writes on Cluster: the conformance rules hold with guards spread over every primary (each guard's writes
/// routed to its slot's owner), and a write to a key outside the guard's slot is refused before any I/O.
pub async fn fenced_writes_run_on_every_primary_and_stay_in_the_guards_slot(store: &StoreFactory) {
    let cluster = shared();
    let lock = Lock::from_arc(store(cluster).await);
    let subject = crate::Subject::new(lock.clone());
    crate::fenced_conformance::fenced_write_refuses_a_holder_whose_lease_ran_out(&subject).await;
    crate::fenced_conformance::fenced_read_modify_write_loses_no_update_in_any_interleaving(&subject).await;
    crate::fenced_conformance::fenced_writes_cancelled_anywhere_keep_the_fence_order(&subject).await;

    let data = store(cluster).await;
    let mut primaries = BTreeSet::new();
    for i in 0..48 {
        let tag = format!("fenced-spread-{i}-{:08x}", rand::random::<u32>());
        let guard = format!("{{{tag}}}:guard");
        primaries.insert(cluster.primary_for_key(&guard).or_panic());
        let r = lock_core::FencedResource::from_arc_with_guard(data.clone(), &guard).or_panic();
        let fence = lock_core::FencingToken::new(10);
        r.set(fence, &format!("{{{tag}}}:v"), "x").await.or_panic();
        match r.set(lock_core::FencingToken::new(9), &format!("{{{tag}}}:v"), "y").await {
            Err(LockError::StaleFence { presented: 9, current: 10 }) => {}
            other => panic!("{guard}: a stale fence on its primary: {other:?}"),
        }
        // A key of its own (no hash tag) is in another slot: refused before any I/O, the guard unchanged.
        match r.set(lock_core::FencingToken::new(11), &format!("elsewhere-{tag}"), "z").await {
            Err(LockError::InvalidArgument(message)) => assert!(message.contains("slot"), "{message}"),
            other => panic!("a key outside the guard's slot: {other:?}"),
        }
        assert_eq!(r.current().await.or_panic(), Some(fence));
        // A key without a hash tag goes with a guard that wraps its name in braces (the module docs' rule).
        let plain = format!("balance-{tag}");
        let beside =
            lock_core::FencedResource::from_arc_with_guard(data.clone(), &format!("{{{plain}}}:guard")).or_panic();
        assert_eq!(beside.incr_by(fence, &plain, 5).await.or_panic(), 5);
        assert_eq!(beside.del(fence, &[&plain]).await.or_panic(), 1);
        r.del(fence, &[&format!("{{{tag}}}:v")]).await.or_panic();
    }
    assert!(primaries.len() > 1, "every guard landed on one primary: the case spreads nothing");
}

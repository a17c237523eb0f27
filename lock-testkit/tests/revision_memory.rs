//! The queue recipe of `lock_core::revision` on the in-memory revision store: every lock and election case any
//! backend passes, on two runtimes, and the recipe's own cases (FIFO, the check after waiting, compaction, an
//! outage during a wait, cancellation, names that would nest).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::{Duration, Instant};

use lock_core::revision::RevisionLock;
use lock_core::{DistributedLock, LockError, LockOptions, MemoryRevisionStore, ReleaseOutcome};
use lock_testkit::Subject;

async fn subject() -> Subject {
    Subject::new(RevisionLock::new(MemoryRevisionStore::new()))
}

mod tokio_runtime {
    use super::*;
    lock_testkit::lock_conformance_tests!(tokio, subject());
    lock_testkit::leader_tests!(tokio, subject());
}

mod smol_runtime {
    use super::*;
    lock_testkit::lock_conformance_tests!(smol, subject());
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Contenders are served in the order they joined (etcd's queue is FIFO by revision of creation).
#[tokio::test]
async fn contenders_are_served_in_the_order_they_joined() {
    let lock = RevisionLock::new(MemoryRevisionStore::new());
    let holder = lock.acquire("fifo", &LockOptions::new(ms(10_000))).await.unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (lock, order) = (lock.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire("fifo", &LockOptions::new(ms(10_000)).with_wait(ms(10_000))).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(ms(5)).await;
            g.release().await.unwrap();
        }));
        // Each joins the queue before the next starts.
        tokio::time::sleep(ms(30)).await;
    }
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

/// Jepsen's etcd 3.4.3 finding, which Debian's etcd 3.4.23 recipe still has: a contender whose key went while it
/// waited (its lease ran out during a pause, or an operator deleted it) must not take its predecessor's deletion
/// for its turn. Here the waiter's key is deleted under it, then the holder releases: the waiter joins again and
/// holds with a key of its own, never without one.
#[tokio::test]
async fn a_contender_whose_key_went_while_waiting_never_holds_without_one() {
    let store = MemoryRevisionStore::new();
    let lock = RevisionLock::new(store.clone());
    let holder = lock.acquire("jepsen", &LockOptions::new(ms(10_000))).await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("jepsen", &LockOptions::new(ms(10_000)).with_wait(ms(5_000))).await }
    });
    tokio::time::sleep(ms(100)).await;
    let queued: Vec<_> = store.keys_under("wlp/jepsen/").into_iter().filter(|e| e.key != holder.key()).collect();
    assert_eq!(queued.len(), 1, "the waiter is queued: {queued:?}");
    assert!(store.delete(&queued[0].key));
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let keys = store.keys_under("wlp/jepsen/");
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].key, guard.key(), "the holder holds with a key of its own, not the one that went");
    assert_ne!(guard.key(), queued[0].key);
    assert_eq!(guard.fence().await.unwrap().get(), keys[0].create_revision.unsigned_abs());
    guard.release().await.unwrap();
}

/// A waiter whose keep-alives fail keeps no stale place: when its lease runs out it joins again, and it holds only
/// with a key its store has.
#[tokio::test]
async fn a_waiter_whose_lease_ran_out_joins_again() {
    let store = MemoryRevisionStore::new();
    let lock = RevisionLock::new(store.clone());
    let holder = lock.acquire("rejoin", &LockOptions::new(ms(10_000))).await.unwrap();
    store.set_keep_alives_failing(true);
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("rejoin", &LockOptions::new(ms(200)).with_wait(ms(5_000))).await }
    });
    tokio::time::sleep(ms(500)).await;
    store.set_keep_alives_failing(false);
    tokio::time::sleep(ms(300)).await;
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let keys = store.keys_under("wlp/rejoin/");
    // While the guard trusts its lock (validity ends before the store's expiry), its key is there, and only it.
    if !guard.is_lost() {
        assert_eq!(keys.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), [guard.key()]);
    }
    guard.release().await.unwrap();
}

/// A watch whose history was compacted away is a re-read, not an error: the waiter still gets the lock.
#[tokio::test]
async fn a_compacted_history_during_a_wait_is_read_again() {
    let store = MemoryRevisionStore::new();
    let lock = RevisionLock::new(store.clone());
    let holder = lock.acquire("compact", &LockOptions::new(ms(10_000))).await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("compact", &LockOptions::new(ms(10_000)).with_wait(ms(5_000))).await }
    });
    tokio::time::sleep(ms(50)).await;
    for i in 0..20 {
        lock.acquire(&format!("noise-{i}"), &LockOptions::new(ms(10_000))).await.unwrap().release().await.unwrap();
    }
    store.compact();
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < ms(2_000));
    guard.release().await.unwrap();
}

/// An outage during a wait (every request fails for a while) is waited out within the budget.
#[tokio::test]
async fn an_outage_during_a_wait_is_waited_out() {
    let store = MemoryRevisionStore::new();
    let lock = RevisionLock::new(store.clone());
    let holder = lock.acquire("outage", &LockOptions::new(ms(10_000))).await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("outage", &LockOptions::new(ms(10_000)).with_wait(ms(5_000))).await }
    });
    tokio::time::sleep(ms(50)).await;
    store.set_available(false);
    tokio::time::sleep(ms(300)).await;
    store.set_available(true);
    holder.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    guard.release().await.unwrap();
}

/// A store that stays down is `Unavailable` once the budget ends, not `Contended`.
#[tokio::test]
async fn a_store_that_stays_down_is_unavailable() {
    let store = MemoryRevisionStore::new();
    let lock = RevisionLock::new(store.clone());
    store.set_available(false);
    let err = lock.acquire("down", &LockOptions::new(ms(1_000)).with_wait(ms(300))).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("acquire"), "{err}");
}

/// Dropped acquires (in flight, or waiting) leave no lease and no key behind.
#[tokio::test]
async fn cancelled_acquires_leave_no_lease_behind() {
    let store = MemoryRevisionStore::new();
    let lock = RevisionLock::new(store.clone());
    let holder = lock.acquire("cancel", &LockOptions::new(ms(30_000))).await.unwrap();
    for i in 0..30u64 {
        let options = LockOptions::new(ms(30_000)).with_wait(ms(5_000));
        let _ = tokio::time::timeout(Duration::from_micros(i * 100), lock.acquire("cancel", &options)).await;
    }
    tokio::time::sleep(ms(50)).await;
    assert_eq!(store.leases(), 1, "only the holder's lease is left");
    assert_eq!(store.keys_under("wlp/cancel/").len(), 1);
    holder.release().await.unwrap();
    assert_eq!(store.leases(), 0);
}

/// A name with `/` has a queue of its own: the lock on `a` never sees the contenders of `a/b`.
#[tokio::test]
async fn names_with_a_slash_do_not_nest() {
    let lock = RevisionLock::new(MemoryRevisionStore::new());
    let nested = lock.acquire("a/b", &LockOptions::new(ms(10_000))).await.unwrap();
    let outer = lock.try_acquire("a", &LockOptions::new(ms(10_000))).await.unwrap();
    assert!(outer.is_some(), "the lock on `a` must not be held by `a/b`'s holder");
    assert_eq!(lock.queue("a/b").unwrap(), "wlp/a%2Fb/");
    outer.unwrap().release().await.unwrap();
    assert_eq!(nested.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Options that mean something only on Redis are refused before any I/O; the election comes from the trait.
#[tokio::test]
async fn redis_only_options_are_unsupported() {
    let lock = RevisionLock::new(MemoryRevisionStore::new());
    let ack = LockOptions::new(ms(1_000)).with_replica_ack(lock_core::ReplicaAck::new(1, ms(100)));
    assert!(matches!(lock.acquire("x", &ack).await, Err(LockError::Unsupported(_))));
    let caps = DistributedLock::capabilities(&lock);
    assert!(caps.election && caps.fencing);
}

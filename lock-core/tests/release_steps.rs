//! The release in two steps (WIRE.md 8.3.1, issue 58 target 2): `unlock` (two keys, one argument) when nobody waits,
//! and `release`, which wakes the waiters, when a waiter elsewhere left the mark. What each path sends, and a release
//! lost between the two calls: the lock stays held, and the drop's release in the background wakes the waiter, which
//! does not sleep its safety poll on a lock nobody holds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{Call, Ran, ReleaseHub, ScriptStore};
use lock_core::{Lock, LockKeys, LockOptions, MemoryStore, RetryPolicy};

/// The safety poll of the waiter: what it would sleep if a wake-up were lost.
const SAFETY_POLL: Duration = Duration::from_secs(6);

/// The TTL of every hold: what the waiter would wait if the lock were left held.
const TTL: Duration = Duration::from_secs(60);

/// A client of a memory store's keyspace that records the scripts it runs and, once asked, never answers its next
/// `release` script: a call lost between `unlock` and `release`.
struct Recording {
    memory: MemoryStore,
    sent: Mutex<Vec<&'static str>>,
    stall_release: AtomicBool,
    stalled: tokio::sync::Notify,
}

impl Recording {
    fn new(memory: MemoryStore) -> Arc<Self> {
        Arc::new(Recording {
            memory,
            sent: Mutex::new(Vec::new()),
            stall_release: AtomicBool::new(false),
            stalled: tokio::sync::Notify::new(),
        })
    }

    /// The release calls sent since the last look.
    fn releases(&self) -> Vec<&'static str> {
        let mut sent = self.sent.lock().unwrap();
        let releases = sent.iter().copied().filter(|op| ["unlock", "release"].contains(op)).collect();
        sent.clear();
        releases
    }
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recording")
    }
}

#[async_trait]
impl ScriptStore for Recording {
    async fn run(&self, call: Call<'_>) -> lock_core::Result<Ran> {
        // An await point before every call, as a network client has: a future polled step by step can be dropped
        // between the two calls of a release (the cancellation storm below).
        tokio::task::yield_now().await;
        self.sent.lock().unwrap().push(call.operation);
        if call.operation == "release" && self.stall_release.swap(false, Ordering::SeqCst) {
            self.stalled.notify_one();
            std::future::pending::<()>().await;
        }
        self.memory.run(call).await
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        self.memory.release_hub()
    }
}

/// A lock over `store` (an `Arc`, so the test keeps a handle on what it records).
fn lock_over(store: &Arc<Recording>) -> Lock {
    Lock::from_arc(store.clone())
}

fn waiting() -> LockOptions {
    LockOptions::new(TTL)
        .with_wait(Duration::from_secs(30))
        .with_retry(RetryPolicy::default().with_safety_poll(SAFETY_POLL))
}

/// Waits until a waiter of `lock`'s process is registered on the channel of `resource`.
async fn registered(lock: &Lock, resource: &str) {
    let hub = lock.stores()[0].release_hub().expect("the memory store has a release hub").clone();
    let channel = LockKeys::new("wlp:", resource).unwrap().channel().to_owned();
    let started = Instant::now();
    while hub.waiters(&channel) < 1 {
        assert!(started.elapsed() < Duration::from_secs(30), "the waiter never registered on {channel}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn each_release_sends_what_its_path_needs() {
    let memory = MemoryStore::new();
    let here = Recording::new(memory.clone());
    let lock = lock_over(&here);
    let elsewhere = Lock::new(memory.peer());

    // Nobody waits: one `unlock`.
    lock.acquire("r", &LockOptions::new(TTL)).await.unwrap().release().await.unwrap();
    assert_eq!(here.releases(), ["unlock"]);

    // A waiter in another process left the mark: `unlock` changes nothing, `release` deletes and wakes it.
    let guard = lock.acquire("r", &LockOptions::new(TTL)).await.unwrap();
    let waiter = {
        let elsewhere = elsewhere.clone();
        tokio::spawn(async move { elsewhere.acquire("r", &waiting()).await })
    };
    registered(&elsewhere, "r").await;
    here.releases();
    guard.release().await.unwrap();
    assert_eq!(here.releases(), ["unlock", "release"]);
    let theirs = waiter.await.unwrap().unwrap();

    // A waiter of this process waits: `release` at once.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("r", &waiting()).await })
    };
    registered(&lock, "r").await;
    theirs.release().await.unwrap();
    let ours = waiter.await.unwrap().unwrap();
    let another = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("r", &waiting()).await })
    };
    // Two of ours on the channel: the holder, which stays registered until it releases, and the new waiter.
    let hub = lock.stores()[0].release_hub().unwrap().clone();
    let channel = LockKeys::new("wlp:", "r").unwrap().channel().to_owned();
    while hub.waiters(&channel) < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    here.releases();
    ours.release().await.unwrap();
    assert_eq!(here.releases(), ["release"]);
    another.await.unwrap().unwrap().release().await.unwrap();
    assert_eq!(memory.held_count(), 0, "a key left behind");
}

#[tokio::test]
async fn a_release_lost_between_its_two_calls_leaves_the_lock_held_and_wakes_the_waiter_from_the_drop() {
    let memory = MemoryStore::new();
    let here = Recording::new(memory.clone());
    let lock = lock_over(&here);
    let elsewhere = Lock::new(memory.peer());
    let keys = LockKeys::new("wlp:", "r").unwrap();

    let guard = lock.acquire("r", &LockOptions::new(TTL)).await.unwrap();
    let token = memory.holder(&keys).expect("held");
    let waiter = {
        let elsewhere = elsewhere.clone();
        tokio::spawn(async move { elsewhere.acquire("r", &waiting()).await })
    };
    registered(&elsewhere, "r").await;

    // The release's `unlock` answers 2 (the waiter's mark), and its `release` is never answered: the caller gives up.
    here.releases();
    here.stall_release.store(true, Ordering::SeqCst);
    let release = tokio::spawn(async move { guard.release().await });
    here.stalled.notified().await;
    assert_eq!(memory.holder(&keys), Some(token), "the lock was given up before the release that wakes its waiters");
    let lost = Instant::now();
    release.abort();
    assert!(release.await.unwrap_err().is_cancelled());

    // The dropped guard releases in the background, `unlock` then `release`, which wakes the waiter.
    let theirs = waiter.await.unwrap().unwrap();
    let took = lost.elapsed();
    assert!(
        took < SAFETY_POLL / 3,
        "the waiter got the lock {took:?} after the release was lost (safety poll {SAFETY_POLL:?})"
    );
    // The lost call's `unlock` and `release`, then the drop's.
    assert_eq!(here.releases(), ["unlock", "release", "unlock", "release"]);
    theirs.release().await.unwrap();
    assert_eq!(memory.held_count(), 0, "a key left behind");
}

#[tokio::test]
async fn a_release_dropped_at_each_of_its_await_points_frees_the_lock_and_wakes_the_waiter() {
    // Whether some drop came between the two calls (`unlock` sent, `release` not).
    let mut between_calls = false;
    for polls in 0..12 {
        let memory = MemoryStore::new();
        let here = Recording::new(memory.clone());
        let lock = lock_over(&here);
        let elsewhere = Lock::new(memory.peer());
        let guard = lock.acquire("r", &LockOptions::new(TTL)).await.unwrap();
        let waiter = {
            let elsewhere = elsewhere.clone();
            tokio::spawn(async move { elsewhere.acquire("r", &waiting()).await })
        };
        registered(&elsewhere, "r").await;
        here.releases();
        // Polled `polls` times (each poll moves it past one await point, or finishes it), then dropped.
        let mut release = Box::pin(guard.release());
        let mut finished = false;
        for _ in 0..polls {
            if futures_util::FutureExt::now_or_never(&mut release).is_some() {
                finished = true;
                break;
            }
        }
        between_calls |= here.releases() == ["unlock"];
        drop(release);
        let dropped = Instant::now();
        let theirs = waiter.await.unwrap().unwrap();
        let took = dropped.elapsed();
        assert!(
            took < SAFETY_POLL / 3,
            "dropped after {polls} polls (finished: {finished}): the waiter got the lock {took:?} later (safety poll \
             {SAFETY_POLL:?})"
        );
        theirs.release().await.unwrap();
        assert_eq!(memory.held_count(), 0, "dropped after {polls} polls: a key left behind");
        if finished {
            assert!(between_calls, "no drop came between `unlock` and `release`");
            return;
        }
    }
    panic!("the release never finished within 12 polls: the storm did not reach its end");
}

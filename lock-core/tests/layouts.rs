//! Another library's key layout (`KeyLayout`), on the in-memory store: the keys a lock writes under each layout,
//! what its release does for the other library's waiters, and the primitives that refuse a layout they cannot serve.
//! The same against the real libraries (PyPI, npm) runs in `lock-redis-rs/tests/interop.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::backend::Reply;
use lock_core::{KeyLayout, Lock, LockError, LockOptions, MemoryStore};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn text(memory: &MemoryStore, args: &[&str]) -> Option<String> {
    memory.command(args).and_then(|reply| reply.as_text().map(str::to_owned))
}

#[tokio::test]
async fn each_layout_writes_the_keys_its_library_reads() {
    let cases = [
        (KeyLayout::plain(), "orders/42", "{orders/42}:fence"),
        (KeyLayout::python_redis_lock(), "lock:orders/42", "{lock:orders/42}:fence"),
        (KeyLayout::pottery(), "redlock:orders/42", "{redlock:orders/42}:fence"),
        (KeyLayout::spring("registry", true), "registry:orders/42", "{registry:orders/42}:fence"),
        (KeyLayout::shedlock("default"), "job-lock:default:orders/42", "{job-lock:default:orders/42}:fence"),
    ];
    for (layout, key, fence) in cases {
        let memory = MemoryStore::new();
        let lock = Lock::new(memory.clone()).with_layout(layout.clone());
        let guard = lock.acquire("orders/42", &LockOptions::new(ms(5_000))).await.unwrap();
        assert_eq!(guard.keys().lock(), key, "{layout:?}");
        assert_eq!(text(&memory, &["GET", key]).as_deref(), Some(guard.token().as_str()), "{layout:?}");
        assert_eq!(guard.keys().fence(), fence, "{layout:?}: the counter shares the lock key's slot");
        guard.fence().await.unwrap();
        assert!(text(&memory, &["GET", fence]).is_some(), "{layout:?}: no fence drawn");
        // Another holder's token at that key holds the lock.
        let other = Lock::new(memory.clone()).with_layout(layout.clone());
        assert!(other.try_acquire("orders/42", &LockOptions::new(ms(5_000))).await.unwrap().is_none());
        guard.release().await.unwrap();
        assert!(text(&memory, &["GET", key]).is_none(), "{layout:?}: the key outlived the release");
    }
}

/// A name with a hash tag of its own keeps it: the counter is named after the lock key, in the same slot.
#[tokio::test]
async fn a_raw_name_with_a_hash_tag_keeps_its_slot() {
    let lock = Lock::new(MemoryStore::new()).with_layout(KeyLayout::plain());
    let guard = lock.acquire("order{42}:lines", &LockOptions::new(ms(5_000))).await.unwrap();
    assert_eq!((guard.keys().lock(), guard.keys().fence()), ("order{42}:lines", "order{42}:lines:fence"));
    guard.release().await.unwrap();
}

/// python-redis-lock's waiters block on `lock-signal:<name>`: our release signals it as its own release does.
#[tokio::test]
async fn a_release_under_python_redis_locks_layout_signals_its_list() {
    let memory = MemoryStore::new();
    let lock = Lock::new(memory.clone()).with_layout(KeyLayout::python_redis_lock());
    let guard = lock.acquire("report", &LockOptions::new(ms(5_000))).await.unwrap();
    assert_eq!(memory.command(&["LLEN", "lock-signal:report"]), Some(Reply::Int(0)));
    guard.release().await.unwrap();
    let signal = memory.command(&["LRANGE", "lock-signal:report", "0", "-1"]);
    assert_eq!(signal, Some(Reply::Array(vec![Reply::Bulk(b"1".to_vec())])), "one signal, as python-redis-lock pushes");
    let pttl = memory.command(&["PTTL", "lock-signal:report"]).and_then(|r| r.as_int()).unwrap();
    assert!((1..=1_000).contains(&pttl), "the signal expires within a second: {pttl}");
}

/// Redisson's layout: a hash at the name, our field holding 1, the lease as its TTL; released by deleting it; the
/// token drawn from Redisson's counter, above a value Redisson's `RFencedLock` left.
#[tokio::test]
async fn redissons_layout_keeps_a_hold_count_and_its_token_counter() {
    let memory = MemoryStore::new();
    memory.command(&["INCRBY", "redisson_lock_token:{orders}", "41"]);
    let lock = Lock::new(memory.clone()).with_layout(KeyLayout::redisson());
    let guard = lock.acquire("orders", &LockOptions::new(ms(5_000))).await.unwrap();
    let field = format!("{}:1", guard.token().as_str());
    assert_eq!(memory.command(&["HGET", "orders", &field]), Some(Reply::Bulk(b"1".to_vec())));
    let pttl = memory.command(&["PTTL", "orders"]).and_then(|r| r.as_int()).unwrap();
    assert!((1..=5_000).contains(&pttl), "{pttl}");
    let fence = guard.fence().await.ok().unwrap().get();
    assert!(fence > 41, "the token is not above Redisson's: {fence}");
    assert_eq!(text(&memory, &["GET", "redisson_lock_token:{orders}"]), Some(fence.to_string()));
    // A Redisson holder (another field) holds it; a name with `{` follows Redisson's rule for the counter.
    let other = Lock::new(memory.clone()).with_layout(KeyLayout::redisson());
    assert!(other.try_acquire("orders", &LockOptions::new(ms(5_000))).await.unwrap().is_none());
    guard.release().await.unwrap();
    assert_eq!(memory.command(&["EXISTS", "orders"]), Some(Reply::Int(0)));
    let braced = other.acquire("a{b}", &LockOptions::new(ms(5_000))).await.unwrap();
    assert!(text(&memory, &["GET", "redisson_lock_token:a{b}"]).is_some(), "Redisson's name rule for `{{`");
    braced.release().await.unwrap();
}

/// A primitive whose release cannot tell another library's waiters refuses a layout that needs it, before any I/O;
/// a semaphore, a read-write lock and an election keep this library's layout.
#[tokio::test]
async fn primitives_refuse_a_layout_they_cannot_serve() {
    let opts = LockOptions::new(ms(5_000));
    for layout in [KeyLayout::python_redis_lock(), KeyLayout::spring("r", true), KeyLayout::redisson()] {
        let lock = Lock::new(MemoryStore::new()).with_layout(layout.clone());
        let multi = lock.try_acquire_all(&["a", "b"], &opts).await.map(drop);
        assert!(matches!(multi, Err(LockError::InvalidArgument(_))), "{layout:?}: {multi:?}");
        let fair = lock.try_acquire("a", &opts.clone().with_fair_queue(ms(3_000))).await.map(drop);
        assert!(matches!(fair, Err(LockError::InvalidArgument(_))), "{layout:?}: {fair:?}");
    }
    let lock = Lock::new(MemoryStore::new()).with_layout(KeyLayout::plain());
    assert!(matches!(lock_core::Semaphore::new(lock.clone(), "s", 2), Err(LockError::InvalidArgument(_))));
    assert!(matches!(lock_core::RwLock::new(lock.clone(), "r"), Err(LockError::InvalidArgument(_))));
    let election = lock_core::Election::new(lock.clone(), "e", lock_core::ElectionOptions::default());
    assert!(matches!(election, Err(LockError::InvalidArgument(_))));
    // The plain layout's multi-lock works (node-redlock's multi-resource lock is the same keys).
    let both = lock.try_acquire_all(&["x", "y"], &opts).await.unwrap().unwrap();
    assert!(both.release().await.unwrap().all_released());
}

/// A waiter under a layout whose library announces nothing polls on its backoff, not its safety poll: a release
/// by that library (here a plain `DEL` of its key) is seen within the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_a_silent_library_polls_on_its_backoff() {
    let memory = MemoryStore::new();
    memory.command(&["SET", "held-by-python", "a-python-token", "PX", "60000"]);
    let lock = Lock::new(memory.clone()).with_layout(KeyLayout::plain());
    let retry = lock_core::RetryPolicy::default().with_max_delay(ms(50)).with_safety_poll(ms(20_000));
    let waiting = LockOptions::new(ms(5_000)).with_wait(ms(10_000)).with_retry(retry);
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("held-by-python", &waiting).await }
    });
    tokio::time::sleep(ms(300)).await;
    let deleted = std::time::Instant::now();
    memory.command(&["DEL", "held-by-python"]);
    let guard = waiter.await.unwrap().unwrap();
    let took = deleted.elapsed();
    assert!(took < ms(2_000), "the waiter slept {took:?}: it trusted its safety poll for a lock nobody announces");
    guard.release().await.unwrap();
}

/// redis-py and python-redis-lock lock without expiry by default: a waiter that gives up on such a key says that a
/// crashed holder blocks it forever; one that gives up on a key with a TTL, or a try that does not wait, does not.
#[tokio::test]
async fn a_waiter_that_gives_up_on_a_key_without_expiry_says_so() {
    let memory = MemoryStore::new();
    let lock = Lock::new(memory.clone()).with_layout(KeyLayout::plain());
    let waiting = LockOptions::new(ms(5_000)).with_wait(ms(50));
    memory.command(&["SET", "invoice-7", "3f2a9c"]);
    let err = lock.acquire("invoice-7", &waiting).await.unwrap_err();
    assert!(matches!(err, LockError::Contended { never_expires: true, .. }), "{err:?}");
    assert!(err.to_string().contains("no expiry"), "{err}");
    memory.command(&["PEXPIRE", "invoice-7", "60000"]);
    let err = lock.acquire("invoice-7", &waiting).await.unwrap_err();
    assert!(matches!(err, LockError::Contended { never_expires: false, .. }), "{err:?}");
    assert!(!err.to_string().contains("no expiry"), "{err}");
    memory.command(&["DEL", "invoice-7"]);
    memory.command(&["SET", "invoice-7", "3f2a9c"]);
    assert_eq!(memory.command(&["PTTL", "invoice-7"]), Some(Reply::Int(-1)));
    let err = lock.acquire("invoice-7", &LockOptions::new(ms(5_000)).with_wait(Duration::ZERO)).await.unwrap_err();
    assert!(matches!(err, LockError::Contended { never_expires: false, .. }), "a try asks nothing more: {err:?}");
}

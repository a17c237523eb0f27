//! No waiter sleeps while what it waits for is free (issue 54, section 2): the cases where two primitives, or a holder
//! and a waiter, meet in one process. Each used to sleep its whole safety poll (or its queue heartbeat) while the lock
//! was free: a newcomer beside a multi-lock waiter blocked by another resource, beside a local holder whose key had
//! expired, a semaphore newcomer for fewer permits than are free beside a local waiter for more, and a queued
//! read-write writer behind a writer that held past its TTL.
//!
//! Time bounds come from the lock's own parameters: the safety poll (and the heartbeat) is set far above what a
//! hand-off takes, and each case asserts the waiter got in well before it, so a starved scheduler still passes while
//! the old rule (which sleeps the whole poll) cannot.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::{Duration, Instant};

use lock_core::{Lock, LockOptions, MemoryStore, RetryPolicy, RwLock, Semaphore};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The safety poll of every waiter here: what the old rule slept while the lock was free.
const SAFETY_POLL: Duration = Duration::from_secs(6);

/// A waiter's options: a long safety poll, so that sleeping it is plain to see.
fn waiting(ttl: Duration) -> LockOptions {
    LockOptions::new(ttl)
        .with_wait(Duration::from_secs(20))
        .with_retry(RetryPolicy::default().with_safety_poll(SAFETY_POLL))
}

/// Waits until `n` waiters of this process are registered on the release channel of `channel`.
async fn registered(lock: &Lock, channel: &str, n: usize) {
    let hub = lock.stores()[0].release_hub().expect("the memory store has a release hub").clone();
    let started = Instant::now();
    while hub.waiters(channel) < n {
        assert!(started.elapsed() < Duration::from_secs(30), "waiter {n} never registered on {channel}");
        tokio::time::sleep(ms(1)).await;
    }
}

/// The bound on getting a free lock: far below the safety poll the old rule slept.
fn quickly(took: Duration, what: &str) {
    assert!(took < SAFETY_POLL / 3, "{what}: {took:?} on a free lock (the safety poll is {SAFETY_POLL:?})");
}

/// (A) A multi-lock waiter on `a` and `b` is blocked by `b`; a newcomer on `a`, which is free, is not held back.
#[tokio::test]
async fn a_newcomer_is_not_held_back_by_a_multi_lock_waiting_for_another_resource() {
    let lock = Lock::new(MemoryStore::new());
    let b = lock.acquire("b", &LockOptions::new(ms(30_000))).await.unwrap();
    let multi = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_all(&["a", "b"], &waiting(ms(30_000))).await })
    };
    registered(&lock, "wlp:{a}:released", 1).await;
    let started = Instant::now();
    let a = lock.acquire("a", &waiting(ms(30_000))).await.unwrap();
    quickly(started.elapsed(), "a newcomer beside a multi-lock waiter");
    a.release().await.unwrap();
    b.release().await.unwrap();
    multi.await.unwrap().unwrap().release().await.unwrap();
}

/// (B) A local holder that had to wait stays registered on the channel; its key expired, so the lock is free.
#[tokio::test]
async fn a_newcomer_is_not_held_back_by_a_local_holder_whose_key_expired() {
    let lock = Lock::new(MemoryStore::new());
    let first = lock.acquire("x", &LockOptions::new(ms(30_000))).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("x", &waiting(ms(200))).await })
    };
    registered(&lock, "wlp:{x}:released", 1).await;
    first.release().await.unwrap();
    // The waiter holds now, stays registered, and does not renew: its key expires.
    let stale = waiter.await.unwrap().unwrap();
    tokio::time::sleep(ms(400)).await;
    assert!(stale.is_lost() || std::time::Instant::now() >= stale.valid_until());
    let started = Instant::now();
    let next = lock.acquire("x", &waiting(ms(30_000))).await.unwrap();
    quickly(started.elapsed(), "a newcomer beside a local holder whose key expired");
    next.release().await.unwrap();
    drop(stale);
}

/// (C) A semaphore waiter for 3 of 3 permits waits while one is taken; a newcomer for 1, with 2 free, gets in.
#[tokio::test]
async fn a_semaphore_newcomer_for_fewer_permits_than_are_free_is_not_held_back() {
    let lock = Lock::new(MemoryStore::new());
    let pool = Semaphore::new(lock.clone(), "pool", 3).unwrap();
    let one = pool.acquire(1, &LockOptions::new(ms(30_000))).await.unwrap();
    let big = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.acquire(3, &waiting(ms(30_000))).await })
    };
    registered(&lock, pool.keys().channel(), 1).await;
    let started = Instant::now();
    let small = pool.acquire(1, &waiting(ms(30_000))).await.unwrap();
    quickly(started.elapsed(), "a semaphore newcomer for 1 with 2 free");
    small.release().await.unwrap();
    one.release().await.unwrap();
    big.await.unwrap().unwrap().release().await.unwrap();
}

/// (D) A writer holds past its TTL without renewing; the queued writer gets in at that expiry, not at its queue's
/// next heartbeat (a third of the waiter TTL, set long here).
#[tokio::test]
async fn a_queued_writer_gets_in_at_the_expiry_ahead_not_at_its_heartbeat() {
    let lock = Lock::new(MemoryStore::new());
    let rw = RwLock::new(lock.clone(), "config").unwrap().with_waiter_ttl(Duration::from_secs(18)).unwrap();
    let ttl = ms(300);
    let first = rw.write(&LockOptions::new(ttl)).await.unwrap();
    let expires = Instant::now() + ttl;
    let second = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write(&waiting(ms(30_000))).await })
    };
    let second = second.await.unwrap().unwrap();
    let late = Instant::now().saturating_duration_since(expires);
    // The heartbeat is 6 s: the old rule got in there.
    quickly(late, "a queued writer behind an expiring writer");
    second.release().await.unwrap();
    drop(first);
}

/// (E) Spring's `RedisLockRegistry` in `PUB_SUB` mode announces a release by publishing the lock key on its channel:
/// a key with a space or a `>` was read as one of this library's named or fair wake-ups, woke nobody, and, the layout
/// counting as heard, the waiter slept its safety poll. Any payload a peer can produce parses one way only now.
#[tokio::test]
async fn a_peers_release_message_with_a_space_or_an_angle_bracket_wakes_a_waiter() {
    for name in ["a b", "a>b", "x y>z", "0123456789abcdef>0123456789abcdef", "0123456789abcdef deadbeefdeadbeef"] {
        let memory = MemoryStore::new();
        let lock = Lock::new(memory.clone()).with_layout(lock_core::KeyLayout::spring("registry", true));
        let key = format!("registry:{name}");
        let channel = format!("registry-channel:{key}");
        memory.command(&["SET", &key, "spring-holder", "PX", "30000"]);
        let waiter = {
            let (lock, name) = (lock.clone(), name.to_owned());
            tokio::spawn(async move { lock.acquire(&name, &waiting(ms(30_000))).await })
        };
        registered(&lock, &channel, 1).await;
        // Spring's release: the key deleted, then the key published on its channel.
        memory.command(&["DEL", &key]);
        let released = Instant::now();
        lock.stores()[0].release_hub().unwrap().deliver(&channel, key.as_bytes());
        let guard = waiter.await.unwrap().unwrap();
        quickly(released.elapsed(), &format!("a waiter hearing Spring's release of {key:?}"));
        guard.release().await.unwrap();
    }
}

/// (F) Found by the composition explorer (seed 777182): readers wait behind a waiting writer (writer-preferring);
/// the writer takes the lock and dies holding it (its key expires, nothing announces). The readers knew only the
/// waiting writer's place's expiry (the waiter TTL), and slept their safety poll; told of the writer's grant, they
/// look again and wait for its hold's expiry.
#[tokio::test]
async fn readers_behind_a_writer_that_dies_holding_get_in_at_its_expiry() {
    let memory = MemoryStore::new();
    let holder_process = Lock::new(memory.clone());
    let rw = RwLock::new(holder_process.clone(), "config").unwrap();
    let reader = rw.read(&LockOptions::new(ms(200))).await.unwrap();
    // The writer queues behind the reader, in another process.
    let writer_process = Lock::new(memory.clone());
    let rw_writer = RwLock::new(writer_process, "config").unwrap();
    let writer = tokio::spawn(async move { rw_writer.write(&waiting(ms(300))).await });
    // Readers in a third process wait behind the waiting writer.
    let readers_process = Lock::new(memory.clone());
    let rw_readers = RwLock::new(readers_process.clone(), "config").unwrap();
    tokio::time::sleep(ms(50)).await;
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let rw = rw_readers.clone();
            tokio::spawn(async move { rw.read(&waiting(ms(30_000))).await })
        })
        .collect();
    reader.release().await.unwrap();
    // The writer gets in, and dies holding: its key expires 300 ms later, announced by nobody.
    let writer = writer.await.unwrap().unwrap();
    let expires = Instant::now() + ms(300);
    std::mem::forget(writer);
    for reader in readers {
        let held = reader.await.unwrap().unwrap();
        quickly(Instant::now().saturating_duration_since(expires), "a reader behind a writer that died holding");
        held.release().await.unwrap();
    }
}

/// (G) The case, found again by the composition explorer (seed 777829): two writers queue behind a writer
/// that dies holding; the first takes the lock at that expiry and dies holding too. The second, which was not the
/// head when it last tried, used to sleep its heartbeat (a third of the waiter TTL, long here) past the first's
/// expiry; now every waiter tries at the expiry it knows, learns the new holder's, and gets in at that.
#[tokio::test]
async fn a_writer_behind_the_head_gets_in_at_each_expiry_ahead() {
    let memory = MemoryStore::new();
    let rw_of = |memory: &MemoryStore| {
        RwLock::new(Lock::new(memory.clone()), "config").unwrap().with_waiter_ttl(Duration::from_secs(18)).unwrap()
    };
    let first = rw_of(&memory).write(&LockOptions::new(ms(300))).await.unwrap();
    std::mem::forget(first);
    let head = {
        let rw = rw_of(&memory);
        tokio::spawn(async move { rw.write(&waiting(ms(300))).await })
    };
    tokio::time::sleep(ms(50)).await;
    let behind = {
        let rw = rw_of(&memory);
        tokio::spawn(async move { rw.write(&waiting(ms(30_000))).await })
    };
    let head = head.await.unwrap().unwrap();
    let expires = Instant::now() + ms(300);
    std::mem::forget(head);
    let last = behind.await.unwrap().unwrap();
    quickly(Instant::now().saturating_duration_since(expires), "a writer behind the head, at the head's expiry");
    last.release().await.unwrap();
}

//! Fencing counters that do not live for ever (issue 58, item 4; WIRE.md 5.5), on a real `redis-server`: every
//! primitive that draws fences from a counter of ours sets the counter's idle expiry at each draw (a week by
//! default), never on a peer's counter (Redisson's) nor a read-write lock's (its readers read it as their epoch); an
//! expired counter's next fence lies above every fence drawn before; an expiry out of range is refused before any
//! write.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::{Duration, Instant};

use lock_core::{
    Election, ElectionOptions, Fencing, JobLock, JobOptions, KeyLayout, Lock, LockError, LockOptions, RwLock,
    Semaphore, DEFAULT_FENCE_COUNTER_EXPIRY,
};
use lock_redis_rs::RedisStore;
use lock_testkit::{RedisServer, Reply};

fn pttl(server: &RedisServer, key: &str) -> i64 {
    match server.command(&["PTTL", key]).unwrap() {
        Reply::Int(ms) => ms,
        other => panic!("PTTL {key}: {other:?}"),
    }
}

/// The counter at `key` lives between a minute short of `expiry` and `expiry`: set by a draw made just now.
fn expires_after(server: &RedisServer, key: &str, expiry: Duration) {
    let left = pttl(server, key);
    let expiry = i64::try_from(expiry.as_millis()).unwrap();
    assert!((expiry - 60_000..=expiry).contains(&left), "{key}: PTTL {left} ms, expected about {expiry} ms");
}

fn options() -> LockOptions {
    LockOptions::new(Duration::from_secs(10))
}

async fn lock_on(server: &RedisServer) -> Lock {
    Lock::new(RedisStore::connect(&server.url()).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fenced_primitive_sets_its_counters_idle_expiry() {
    let server = RedisServer::start().expect("redis-server");
    let lock = lock_on(&server).await;
    let week = DEFAULT_FENCE_COUNTER_EXPIRY;

    let guard = lock.acquire("on-demand", &options()).await.unwrap();
    assert_eq!(pttl(&server, "wlp:{on-demand}:fence"), -2, "no fence drawn yet, no counter");
    guard.fence().await.unwrap();
    expires_after(&server, "wlp:{on-demand}:fence", week);
    guard.release().await.unwrap();

    let eager = options().with_fencing_mode(Fencing::OnAcquire);
    lock.acquire("eager", &eager).await.unwrap().release().await.unwrap();
    expires_after(&server, "wlp:{eager}:fence", week);

    let fair = options().with_fencing_mode(Fencing::OnAcquire).with_fair_queue(Duration::from_secs(5));
    lock.acquire("fair", &fair).await.unwrap().release().await.unwrap();
    expires_after(&server, "wlp:{fair}:fence", week);

    let multi = lock.acquire_all(&["multi-a", "multi-b"], &eager).await.unwrap();
    assert!(multi.fences().iter().all(|(_, fence)| fence.is_some()));
    multi.release().await.unwrap();
    expires_after(&server, "wlp:{multi-a}:fence", week);
    expires_after(&server, "wlp:{multi-b}:fence", week);

    let permits = Semaphore::new(lock.clone(), "permits", 2).unwrap();
    permits.acquire(1, &eager).await.unwrap().release().await.unwrap();
    expires_after(&server, "wlp:sem:{permits}:fence", week);

    let election = Election::new(lock.clone(), "leader", ElectionOptions::default()).unwrap();
    election.campaign("node-a", "10.0.0.1").await.unwrap().resign().await.unwrap();
    expires_after(&server, "wlp:{leader}:fence", week);

    let jobs = JobLock::new(lock.clone());
    jobs.run("nightly", &JobOptions::new(Duration::from_secs(10)), |_| async {}).await.unwrap();
    expires_after(&server, "wlp:{nightly}:fence", week);

    // Never: a read-write lock's counter (an expired one would give readers the epoch 0, older than the last write).
    let rw = RwLock::new(lock.clone(), "doc").unwrap();
    let write = rw.write(&eager).await.unwrap();
    assert!(write.drawn_fence().is_some());
    write.release().await.unwrap();
    assert_eq!(pttl(&server, "wlp:rw:{doc}:fence"), -1, "a read-write lock's counter expires");

    // Never: Redisson's counter, which its own clients count from 1.
    let redisson = lock_on(&server).await.with_layout(KeyLayout::redisson());
    redisson.acquire("account", &eager).await.unwrap().release().await.unwrap();
    assert_eq!(pttl(&server, "redisson_lock_token:{account}"), -1, "Redisson's counter expires");

    // Never, when the lock asks so (protocol 1.1's behaviour).
    let kept = lock_on(&server).await.with_fence_counter_expiry(None);
    kept.acquire("kept", &eager).await.unwrap().release().await.unwrap();
    assert_eq!(pttl(&server, "wlp:{kept}:fence"), -1);

    // A shorter expiry, set by whoever draws last.
    let day = Duration::from_secs(24 * 3600);
    let daily = lock_on(&server).await.with_fence_counter_expiry(Some(day));
    daily.acquire("eager", &eager).await.unwrap().release().await.unwrap();
    expires_after(&server, "wlp:{eager}:fence", day);
}

/// Waits (bounded) until the server no longer has `key`, on its own clock.
async fn until_gone(server: &RedisServer, key: &str, bound: Duration) {
    let started = Instant::now();
    while server.command(&["EXISTS", key]).unwrap() != Reply::Int(0) {
        assert!(started.elapsed() < bound, "{key} outlived its expiry by {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_counter_draws_above_every_earlier_fence() {
    let server = RedisServer::start().expect("redis-server");
    let second = Duration::from_secs(1);
    let lock = lock_on(&server).await.with_fence_counter_expiry(Some(second));
    let eager = options().with_fencing_mode(Fencing::OnAcquire);
    let bound = Duration::from_secs(10);

    // Between holders.
    let first = lock.acquire("orders", &eager).await.unwrap();
    let f1 = first.drawn_fence().unwrap();
    first.release().await.unwrap();
    until_gone(&server, "wlp:{orders}:fence", bound).await;
    let next = lock.acquire("orders", &eager).await.unwrap();
    assert!(next.drawn_fence().unwrap() > f1, "the fence after the counter expired went back");

    // Within one hold that outlives its counter: the fence drawn on demand lies above the earlier holder's.
    next.release().await.unwrap();
    let f2 = lock.acquire("orders", &eager).await.unwrap();
    let f2_fence = f2.drawn_fence().unwrap();
    f2.release().await.unwrap();
    let holder = lock.acquire("orders", &options()).await.unwrap();
    until_gone(&server, "wlp:{orders}:fence", bound).await;
    assert!(holder.fence().await.unwrap() > f2_fence);
    holder.release().await.unwrap();

    // A semaphore's counter, between permits.
    let permits = Semaphore::new(lock.clone(), "exports", 1).unwrap();
    let p1 = permits.acquire(1, &eager).await.unwrap();
    let p1_fence = p1.drawn_fence().unwrap();
    p1.release().await.unwrap();
    until_gone(&server, "wlp:sem:{exports}:fence", bound).await;
    assert!(permits.acquire(1, &eager).await.unwrap().drawn_fence().unwrap() > p1_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_out_of_range_is_refused_before_any_write() {
    let server = RedisServer::start().expect("redis-server");
    for bad in [Duration::from_millis(9), Duration::ZERO, Duration::from_secs(367 * 24 * 3600)] {
        let lock = lock_on(&server).await.with_fence_counter_expiry(Some(bad));
        let err = lock.acquire("orders", &options()).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidArgument { .. }), "{bad:?}: {err:?}");
        assert!(err.to_string().contains("expiry"), "{err}");
        let err = Semaphore::new(lock.clone(), "exports", 1).err().unwrap();
        assert!(matches!(err, LockError::InvalidArgument { .. }), "{bad:?}: {err:?}");
    }
    assert_eq!(server.command(&["DBSIZE"]).unwrap(), Reply::Int(0), "a refused lock wrote");
}

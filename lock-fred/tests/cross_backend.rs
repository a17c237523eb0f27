//! lock-fred and lock-redis-rs on one server are one lock: same keys, same scripts, same release channel.

// The tests print what they measure (timings, INFO commandstats) for the record.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use lock_fred::lock_core::{Lock, LockError, LockKeys, LockOptions, ReleaseOutcome, RetryPolicy};
use lock_fred::FredStore;
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn locks(server: &RedisServer) -> (Lock, Lock) {
    let url = server.url();
    let fred = FredStore::connect(&url).await.unwrap_or_else(|err| panic!("fred: {err:?}"));
    let redis = RedisStore::connect(&url).await.unwrap_or_else(|err| panic!("redis-rs: {err:?}"));
    (Lock::new(fred), Lock::new(redis))
}

/// A lock held through either backend is held for the other, and a release through one frees it for the other.
#[tokio::test]
async fn each_backend_blocks_the_other() {
    let server = RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"));
    let (fred, redis) = locks(&server).await;
    let now = LockOptions::new(ms(5_000)).with_wait(Duration::ZERO);
    let briefly = LockOptions::new(ms(5_000)).with_wait(ms(200));

    for (holder, other, label) in
        [(&redis, &fred, "redis-rs holds, fred waits"), (&fred, &redis, "fred holds, redis-rs waits")]
    {
        let guard = holder
            .try_acquire("shared", &now)
            .await
            .unwrap_or_else(|err| panic!("{label}: {err:?}"))
            .unwrap_or_else(|| panic!("{label}: lock should be free"));
        assert!(
            other.try_acquire("shared", &now).await.unwrap_or_else(|err| panic!("{label}: {err:?}")).is_none(),
            "{label}"
        );
        match other.acquire("shared", &briefly).await {
            Err(LockError::Contended { .. }) => {}
            result => panic!("{label}: expected Contended, got {result:?}"),
        }
        assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("{label}: {err:?}")), ReleaseOutcome::Released);
        let next = other
            .try_acquire("shared", &now)
            .await
            .unwrap_or_else(|err| panic!("{label}: {err:?}"))
            .unwrap_or_else(|| panic!("{label}: released lock should be free for the other backend"));
        assert_eq!(next.release().await.unwrap_or_else(|err| panic!("{label}: {err:?}")), ReleaseOutcome::Released);
    }
}

/// Fencing tokens issued alternately by the two backends for one resource continue one sequence: both advance
/// the same counter key.
#[tokio::test]
async fn fencing_tokens_continue_across_backends() {
    // Far above the clock floor (µs since 1970, ~1.8e15 today), so each acquisition adds exactly 1 to the shared
    // counter; separate counters, or a floor taken instead of the counter, would break the sequence. Below 2^53:
    // the scripts' Lua numbers are doubles.
    const BASE: u64 = 9_000_000_000_000_000;
    let server = RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"));
    let (fred, redis) = locks(&server).await;
    let fence_key = LockKeys::new("wlp:", "fenced").unwrap_or_else(|err| panic!("keys: {err}")).fence().to_owned();
    let set = server.command(&["SET", &fence_key, &BASE.to_string()]);
    assert!(matches!(set, Ok(ref reply) if !reply.is_error()), "{set:?}");
    let opts = LockOptions::new(ms(5_000)).with_wait(ms(2_000));
    let mut fences = Vec::new();
    for round in 0..10 {
        let lock = if round % 2 == 0 { &fred } else { &redis };
        let guard = lock.acquire("fenced", &opts).await.unwrap_or_else(|err| panic!("round {round}: {err:?}"));
        fences.push(guard.fence().await.ok().unwrap_or_else(|| panic!("fencing is on by default")).get());
        guard.release().await.unwrap_or_else(|err| panic!("round {round}: {err:?}"));
    }
    println!("fences (fred, redis-rs, fred, …): {fences:?}");
    let expected: Vec<u64> = (1..=10).map(|i| BASE + i).collect();
    assert_eq!(fences, expected);
}

/// A release through redis-rs wakes a waiter on fred through pub/sub (same channel, and redis-rs's origin is not
/// mistaken for fred's own echo).
#[tokio::test]
async fn redis_rs_release_wakes_fred_waiter() {
    let server = RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"));
    let (fred, redis) = locks(&server).await;
    let guard = redis
        .acquire("wake", &LockOptions::new(ms(10_000)).with_wait(Duration::ZERO))
        .await
        .unwrap_or_else(|err| panic!("redis-rs: {err:?}"));
    let slow = RetryPolicy::default().with_min_delay(ms(500)).with_max_delay(ms(500));
    let opts = LockOptions::new(ms(10_000)).with_wait(ms(5_000)).with_retry(slow);
    let waiting = tokio::spawn(async move {
        let guard = fred.acquire("wake", &opts).await.unwrap_or_else(|err| panic!("fred waiter: {err:?}"));
        let acquired = Instant::now();
        guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
        acquired
    });
    tokio::time::sleep(ms(150)).await;
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}")), ReleaseOutcome::Released);
    let delay = waiting.await.unwrap_or_else(|err| panic!("waiter task: {err}")).saturating_duration_since(released);
    println!("fred waiter acquired {delay:?} after the redis-rs release");
    assert!(delay < ms(200), "fred waiter took {delay:?}");
}

//! The redis-rs backend on a Sentinel-managed primary (`RedisStoreBuilder::sentinel`): one primary, one replica and
//! three Sentinels on loopback. The whole conformance suite against one deployment shared by this test binary,
//! release notifications, a failover under load, failover trials with and without `WAIT`, a grant lost by a
//! failover (and its fencing token), and `READONLY` from a demoted primary.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_redis_rs::lock_core::Lock;
use lock_redis_rs::{RedisStore, RedisStoreBuilder};
use lock_testkit::{conformance_tests, RedisSentinel, Subject};

async fn store(deployment: &RedisSentinel) -> RedisStore {
    RedisStoreBuilder::sentinel(deployment.service_name(), deployment.sentinel_urls())
        // Room for the 1 s WAIT of the failover trials (the bound must stay below the command timeout).
        .with_command_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect: {err:?}"))
}

async fn subject() -> Subject {
    let deployment = lock_testkit::sentinel_cases::shared();
    // The peer is a second process: connections and release subscriptions of its own.
    Subject::new(Lock::new(store(deployment).await)).with_peer(Lock::new(store(deployment).await))
}

conformance_tests!(tokio, subject());
lock_testkit::sentinel_tests!(store);

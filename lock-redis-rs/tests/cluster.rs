//! The redis-rs backend on a real Redis Cluster (`RedisStoreBuilder::cluster`) (3 primaries on loopback): the whole conformance suite against one
//! cluster shared by this test binary, many resources over all slots, release notifications across nodes,
//! `SCRIPT FLUSH` on every node, a slot migration and a failover under load.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_redis_rs::lock_core::Lock;
use lock_redis_rs::{RedisStore, RedisStoreBuilder};
use lock_testkit::{conformance_tests, RedisCluster, Subject};

async fn store(cluster: &RedisCluster) -> RedisStore {
    RedisStoreBuilder::cluster(cluster.urls())
        // A multi-key script on a slot that is being migrated gets TRYAGAIN until the move completes; on a loaded
        // 2-core machine that can outlast the 1 s default.
        .with_command_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect: {err:?}"))
}

async fn subject() -> Subject {
    let deployment = lock_testkit::cluster_cases::shared();
    // The peer is a second process: connections and release subscriptions of its own.
    Subject::new(Lock::new(store(deployment).await)).with_peer(Lock::new(store(deployment).await))
}

conformance_tests!(tokio, subject());
lock_testkit::cluster_tests!(store);
lock_testkit::cluster_tests!(@cases store; releases_are_announced_on_their_shard_only);

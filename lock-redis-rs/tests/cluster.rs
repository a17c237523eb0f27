//! The redis-rs backend on a real Redis Cluster (`RedisStoreConfig::cluster`) (3 primaries on loopback): the whole conformance suite against one
//! cluster shared by this test binary, many resources over all slots, release notifications across nodes,
//! `SCRIPT FLUSH` on every node, a slot migration and a failover under load.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_redis_rs::lock_core::{Lock, LockOptions};
use lock_redis_rs::{RedisStore, RedisStoreConfig};
use lock_testkit::{conformance_tests, RedisCluster, Reply, Subject};

async fn store(cluster: &RedisCluster) -> RedisStore {
    RedisStoreConfig::cluster(cluster.urls())
        // A multi-key script on a slot that is being migrated gets TRYAGAIN until the move completes; on a loaded
        // 2-core machine that can outlast the 1 s default.
        .command_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect: {err:?}"))
}

async fn subject() -> Subject {
    Subject::new(Lock::new(store(lock_testkit::cluster_cases::shared()).await))
}

conformance_tests!(tokio, subject());
lock_testkit::cluster_tests!(store);

/// Calls of `command` on every node of `cluster`, from `INFO commandstats` (a `redis.call` inside a script counts).
fn calls(cluster: &RedisCluster, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    cluster
        .command_all(&["INFO", "commandstats"])
        .unwrap()
        .into_iter()
        .map(|reply| match reply {
            Reply::Bulk(Some(text)) => String::from_utf8_lossy(&text)
                .lines()
                .find_map(|line| line.strip_prefix(&prefix)?.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0),
            other => panic!("INFO: {other:?}"),
        })
        .sum()
}

/// Releases are announced with sharded pub/sub, on the shard that owns the lock's slot, never with a classic
/// `PUBLISH` that the cluster bus broadcasts to every node. Every test of this binary uses this backend on this
/// cluster, so no node may have counted a `PUBLISH` at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_announced_on_their_shard_only() {
    let cluster = lock_testkit::cluster_cases::shared();
    let lock = Lock::new(store(cluster).await);
    let before = calls(cluster, "spublish");
    for i in 0..10 {
        let opts = LockOptions::new(Duration::from_secs(10));
        let guard = lock.try_acquire(&format!("sharded-{i}"), &opts).await.unwrap().expect("free");
        guard.release().await.unwrap();
    }
    assert!(calls(cluster, "spublish") >= before + 10, "every release announces itself with SPUBLISH");
    assert_eq!(calls(cluster, "publish"), 0, "no release may be broadcast with PUBLISH");
}

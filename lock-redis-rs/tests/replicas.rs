//! Replica acknowledgement after acquire (`LockOptions::with_replica_ack`, Redis `WAIT`) against a real primary and
//! replica, and failover trials that count how often a just-granted lock is missing from the replica a failover
//! would promote, with and without it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use std::time::Duration;

use lock_core::{Lock, LockError, LockOptions, ReplicaAck, Shortfall};
use lock_redis_rs::{RedisStore, RedisStoreBuilder};
use lock_testkit::{RedisServer, Reply};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn pair() -> (RedisServer, RedisServer) {
    // Full sync starts at once (the default waits 5 s for more replicas to join the diskless transfer).
    let primary = RedisServer::builder().with_config("repl-diskless-sync-delay", "0").start().unwrap();
    let replica = RedisServer::builder().with_replica_of(&primary).start().unwrap();
    replica.wait_for_link(ms(10_000)).unwrap();
    (primary, replica)
}

/// A store whose command timeout leaves room for a 1 s WAIT (the bound must stay below it).
async fn store(primary: &RedisServer) -> RedisStore {
    RedisStoreBuilder::new(&primary.url()).with_command_timeout(ms(3_000)).connect().await.unwrap()
}

fn ack(timeout_ms: u64) -> ReplicaAck {
    ReplicaAck::new(1, ms(timeout_ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_grant_is_on_the_replica_when_acquire_returns() {
    let (primary, replica) = pair();
    let lock = Lock::new(store(&primary).await);
    for fencing in [true, false] {
        let opts = LockOptions::new(ms(10_000))
            .with_fencing_mode(if fencing { lock_core::Fencing::OnAcquire } else { lock_core::Fencing::Off })
            .with_replica_ack(ack(1_000));
        let g = lock.try_acquire(&format!("acked-{fencing}"), &opts).await.unwrap().expect("free");
        let on_replica = replica.command(&["GET", g.keys().lock()]).unwrap();
        assert_eq!(on_replica, Reply::Bulk(Some(g.token().as_str().as_bytes().to_vec())), "fencing={fencing}");
        g.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortfall_fails_and_gives_the_grant_back_or_is_accepted() {
    let (primary, mut replica) = pair();
    let lock = Lock::new(store(&primary).await);
    replica.pause();
    let err = lock.try_acquire("short", &LockOptions::new(ms(10_000)).with_replica_ack(ack(100))).await.err();
    assert!(matches!(err, Some(LockError::ReplicasShort { acknowledged: 0, required: 1 })), "{err:?}");
    let keys = lock_core::LockKeys::new("wlp:", "short").unwrap();
    assert_eq!(primary.command(&["EXISTS", keys.lock()]).unwrap(), Reply::Int(0), "the short grant must be given back");
    let accepted = LockOptions::new(ms(10_000)).with_replica_ack(ack(100).with_on_shortfall(Shortfall::Accept));
    let g = lock.try_acquire("short", &accepted).await.unwrap().expect("accepted despite the shortfall");
    replica.resume();
    g.release().await.unwrap();
}

/// Failover trials: acquire, then SIGKILL the primary at once and look at what its replica (the one a failover
/// promotes) holds. With `WAIT` the lock is never missing; without it the count is whatever asynchronous
/// replication loses on this machine (reported, not asserted: it may well be 0 on loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_trials_with_and_without_replica_ack() {
    const TRIALS: usize = 15;
    let mut missing = [0usize; 2];
    for (i, with_wait) in [false, true].into_iter().enumerate() {
        for t in 0..TRIALS {
            let (mut primary, replica) = pair();
            let lock = Lock::new(store(&primary).await);
            let mut opts = LockOptions::new(ms(30_000));
            if with_wait {
                opts = opts.with_replica_ack(ack(1_000));
            }
            // A waiting acquire: a replica that lags past the WAIT timeout is a retryable shortfall.
            let g = lock.acquire(&format!("trial-{t}"), &opts.clone().with_wait(ms(5_000))).await.unwrap();
            primary.kill();
            let on_replica = replica.command(&["GET", g.keys().lock()]).unwrap();
            if on_replica != Reply::Bulk(Some(g.token().as_str().as_bytes().to_vec())) {
                missing[i] += 1;
            }
            drop(g);
        }
    }
    println!(
        "failover trials: lock missing on the promoted replica in {}/{TRIALS} without WAIT, {}/{TRIALS} with WAIT",
        missing[0], missing[1]
    );
    assert_eq!(missing[1], 0, "an acknowledged grant was lost");
}

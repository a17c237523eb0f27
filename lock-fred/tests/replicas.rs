//! Replica acknowledgement after acquire (`LockOptions::with_replica_ack`, Redis `WAIT` on the granting connection).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_fred::lock_core::{Lock, LockError, LockOptions, ReplicaAck};
use lock_fred::FredStoreBuilder;
use lock_testkit::{RedisServer, Reply};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_grants_are_on_the_replica_and_a_shortfall_is_given_back() {
    let primary = RedisServer::builder().with_config("repl-diskless-sync-delay", "0").start().unwrap();
    let mut replica = RedisServer::builder().with_replica_of(&primary).start().unwrap();
    replica.wait_for_link(ms(10_000)).unwrap();
    // The WAIT bound must stay below the store's command timeout.
    let store =
        FredStoreBuilder::from_url(&primary.url()).unwrap().with_command_timeout(ms(3_000)).connect().await.unwrap();
    let lock = Lock::new(store);
    for fencing in [true, false] {
        let opts = LockOptions::new(ms(10_000))
            .with_fencing_mode(if fencing {
                lock_fred::lock_core::Fencing::OnAcquire
            } else {
                lock_fred::lock_core::Fencing::Off
            })
            .with_replica_ack(ReplicaAck::new(1, ms(1_000)));
        let g = lock.try_acquire(&format!("acked-{fencing}"), &opts).await.unwrap().expect("free");
        let on_replica = replica.command(&["GET", g.keys().lock()]).unwrap();
        assert_eq!(on_replica, Reply::Bulk(Some(g.token().as_str().as_bytes().to_vec())), "fencing={fencing}");
        g.release().await.unwrap();
    }
    replica.pause();
    let opts = LockOptions::new(ms(10_000)).with_replica_ack(ReplicaAck::new(1, ms(100)));
    let err = lock.try_acquire("short", &opts).await.err();
    replica.resume();
    assert!(matches!(err, Some(LockError::ReplicasShort { acknowledged: 0, required: 1 })), "{err:?}");
    let keys = lock_fred::lock_core::LockKeys::new("wlp:", "short").unwrap();
    assert_eq!(primary.command(&["EXISTS", keys.lock()]).unwrap(), Reply::Int(0), "the short grant must be given back");
}

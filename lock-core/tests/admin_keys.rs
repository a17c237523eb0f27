//! The admin scripts read every primitive's keys of a name at once: none of them may be another primitive's key
//! under the same name (found while writing WIRE.md: the semaphore's grants and the fair queue's shared a name, and
//! a force-release deleted a fair queue's grants).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::backend::Reply;
use lock_core::{Lock, LockOptions, MemoryStore};

#[tokio::test]
async fn a_force_release_keeps_the_fair_queues_grants() {
    let memory = MemoryStore::new();
    let lock = Lock::new(memory.clone());
    let guard = lock.acquire("orders", &LockOptions::new(Duration::from_secs(5))).await.unwrap();
    // A fair waiter's grant record, as `fair-acquire` leaves it under the name's hash tag.
    memory.command(&["HSET", "wlp:{orders}:grants", "0123456789abcdef0123456789abcdef", "1"]);
    memory.command(&["PEXPIRE", "wlp:{orders}:grants", "60000"]);
    let forced = lock.force_release("orders").await.unwrap();
    assert!(forced.released(), "{forced:?}");
    assert_eq!(memory.command(&["EXISTS", "wlp:{orders}:grants"]), Some(Reply::Int(1)), "the fair queue's grants");
    drop(guard);
}

//! The clock assumption of fencing counters that expire (WIRE.md 5.5, FAULTS.md), both ways, on the in-memory
//! store, whose `TIME` can be stepped back: an expired counter's next fence lies above the last one while the server's
//! clock has not stepped back by more than the time since that fence, and below it when the clock stepped back
//! further; a counter that did not expire keeps fences increasing whatever the clock did.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::backend::Reply;
use lock_core::{Fencing, Lock, LockOptions, MemoryStore};

fn eager() -> LockOptions {
    LockOptions::new(Duration::from_secs(10)).with_fencing_mode(Fencing::OnAcquire)
}

async fn fence(lock: &Lock, name: &str) -> u64 {
    let guard = lock.acquire(name, &eager()).await.unwrap();
    let fence = guard.drawn_fence().unwrap().get();
    guard.release().await.unwrap();
    fence
}

/// What a counter's idle expiry does, without waiting for it: the key is gone.
fn expire(store: &MemoryStore, name: &str) {
    assert_eq!(store.command(&["DEL", &format!("wlp:{{{name}}}:fence")]), Some(Reply::Int(1)));
}

#[tokio::test(flavor = "current_thread")]
async fn an_expired_counter_keeps_fences_increasing_unless_the_clock_stepped_back_further() {
    let store = MemoryStore::new();
    let lock = Lock::new(store.clone());

    // The counter expires; the clock moved on: the next fence starts from it, above the last.
    let first = fence(&lock, "steady").await;
    expire(&store, "steady");
    assert!(fence(&lock, "steady").await > first);

    // The clock steps back by a minute, the counter stays: counter + 1 decides, fences still increase.
    let before = fence(&lock, "stepped").await;
    store.step_clock_back(Duration::from_secs(60));
    let kept = fence(&lock, "stepped").await;
    assert_eq!(kept, before + 1, "a counter that did not expire goes on from where it was");

    // The same step back, and the counter expires before the clock catches up: the next fence comes out a minute
    // below the last. This is the assumption WIRE.md 5.5 states (the clock never steps back by more than the
    // expiry, a week by default), measured.
    expire(&store, "stepped");
    let after = fence(&lock, "stepped").await;
    assert!(after < kept, "the fence after a step back beyond the expiry went up: {after} after {kept}");
    let behind = Duration::from_micros(kept - after);
    assert!(behind > Duration::from_secs(59) && behind < Duration::from_secs(61), "{behind:?} behind");
}

//! Waiters of one process take a held lock in the order they started waiting, whatever their tries in between.
//!
//! A waiter listens for the next release before each try (so that a release landing between the try and its sleep
//! still wakes it), and a release wakes the longest-listening waiter. A waiter that tried again without being woken
//! (its first pause behind other waiters ran out, a safety poll, a poll on the backoff) used to listen anew for that
//! try, and so went to the back of the line behind every waiter that came after it: with eight tasks taking turns on
//! one key (the `handoff-8` benchmark), some waited two rounds and the least-served task got 0.72 of the most-served
//! one's turns. A try that was not woken keeps its place now.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{Call, Ran, ReleaseHub, ScriptStore};
use lock_core::{Lock, LockOptions, MemoryStore, Result, RetryPolicy};
use tokio::sync::Notify;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The memory store, telling the test each time an acquire has run.
#[derive(Debug)]
struct Watched {
    inner: MemoryStore,
    acquired: Arc<Notify>,
}

#[async_trait]
impl ScriptStore for Watched {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        let acquire = call.operation == "acquire";
        let ran = self.inner.run(call).await;
        if acquire {
            self.acquired.notify_one();
        }
        ran
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        ScriptStore::release_hub(&self.inner)
    }

    fn orders_commands(&self) -> bool {
        ScriptStore::orders_commands(&self.inner)
    }
}

/// Waits until `n` waiters of this process are registered on the lock's release channels.
async fn registered(lock: &Lock, n: usize) {
    let hub = lock.stores()[0].release_hub().expect("the memory store has a release hub").clone();
    let started = Instant::now();
    while hub.watched_channels().iter().map(|c| hub.waiters(c)).sum::<usize>() < n {
        assert!(started.elapsed() < Duration::from_secs(30), "waiter {n} never registered");
        tokio::time::sleep(ms(1)).await;
    }
}

/// Three waiters queue behind a holder. The second polls every 5 ms (its safety poll) while it waits, the others
/// wait for a wake-up: each of the second's tries finds the lock held, and it must keep the place it came in. The
/// holder releases right after one of those tries (so that no poll takes the freed lock before the woken waiter);
/// the waiters must get the lock in the order they came.
#[tokio::test]
async fn a_waiter_that_tried_without_being_woken_keeps_its_place() {
    let acquired = Arc::new(Notify::new());
    let lock = Arc::new(Lock::new(Watched { inner: MemoryStore::new(), acquired: acquired.clone() }));
    let resource = "waiting-order";
    let held = lock.acquire(resource, &LockOptions::new(ms(30_000))).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let polls = RetryPolicy::default().with_min_delay(ms(5)).with_max_delay(ms(5)).with_safety_poll(ms(5));
    let mut waiters = Vec::new();
    for (i, retry) in [(0, RetryPolicy::default()), (1, polls), (2, RetryPolicy::default())] {
        let options = LockOptions::new(ms(30_000)).with_wait(Duration::from_secs(60)).with_retry(retry);
        let (waiter, order) = (lock.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = waiter.acquire(resource, &options).await.unwrap();
            order.lock().unwrap().push(i);
            guard.release().await.unwrap();
        }));
        registered(&lock, i + 1).await;
    }
    // The second waiter's polls since the third came (the others wait for a wake-up, a second or more away).
    for _ in 0..5 {
        acquired.notified().await;
    }
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2], "the waiters did not get the lock in the order they came");
}

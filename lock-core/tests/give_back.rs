//! A cancelled acquire is given back even when its request reaches the server after the give-back: on a store that
//! does not keep one caller's commands in order (a pool of connections), the acquire may still be on its way on
//! one connection while the give-back, on another, finds nothing to delete.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::Command;
use lock_core::backend::{Call, Ran, ReleaseHub, ScriptStore};
use lock_core::{Lock, LockOptions, MemoryStore, Result};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A store whose acquires reach the server `late` after they were sent, whether or not their caller still waits
/// (as a request already written to one connection of a pool does), while every other call is applied at once.
#[derive(Debug, Clone)]
struct LateAcquires {
    inner: Arc<MemoryStore>,
    late: Duration,
}

#[async_trait]
impl ScriptStore for LateAcquires {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        if call.operation != "acquire" {
            return self.inner.run(call).await;
        }
        let keys: Vec<String> = call.keys.iter().map(|k| (*k).to_owned()).collect();
        let args: Vec<String> = call.args.iter().map(|a| (*a).to_owned()).collect();
        let (operation, command, replicas, late) = (call.operation, call.command, call.replicas, self.late);
        let inner = self.inner.clone();
        let applied = tokio::spawn(async move {
            tokio::time::sleep(late).await;
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let call = match command {
                Command::Script(script) => Call::script(operation, script, &keys, &args),
                Command::Plain(name) => Call::plain(operation, name, &keys, &args),
                other => panic!("a command this store does not know: {other:?}"),
            };
            inner.run(call.with_replicas(replicas)).await
        });
        applied.await.expect("the late acquire ran")
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        ScriptStore::release_hub(&*self.inner)
    }
}

#[tokio::test]
async fn an_acquire_applied_after_its_give_back_is_given_back_again() {
    let store = LateAcquires { inner: Arc::new(MemoryStore::new()), late: ms(30) };
    let bound = ms(200);
    let lock = Lock::new(store).with_operation_timeout(bound);
    let long = LockOptions::new(ms(30_000));
    // The protocol version is asked before the first acquire (and late as well, as an "acquire" call): done first,
    // so the cut below falls on the acquire itself.
    lock.acquire("warm-up", &long).await.unwrap().release().await.unwrap();
    // Cut before the request reaches the server: the give-back finds nothing; the acquire applies 30 ms later.
    assert!(tokio::time::timeout(ms(5), lock.acquire("late", &long)).await.is_err(), "the acquire was not cut");
    tokio::time::sleep(ms(60)).await;
    assert!(lock.inspect("late").await.unwrap().is_held(), "the late acquire did not apply: the case proves nothing");
    // Given back again once the acquire's own call bound has passed, not held for its 30 s TTL.
    let started = Instant::now();
    loop {
        if let Some(guard) = lock.try_acquire("late", &long).await.unwrap() {
            guard.release().await.unwrap();
            break;
        }
        assert!(started.elapsed() < bound * 10, "the cancelled acquire's key was left for its TTL");
        tokio::time::sleep(ms(10)).await;
    }
}

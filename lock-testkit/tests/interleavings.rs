//! Interleavings that the lock engine must survive, each forced with the scripted store (no timing luck): a
//! cancelled give-back, a wake-up swallowed by a waiter that leaves, an early hand-off wake that overtakes its
//! release, Redlock waiters listening on every instance, subscription requests kept in order, and errors after a
//! write was applied. Each test names the finding of the interleavings issue it guards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Lock, LockError, LockOptions, LockStore, Redlock, ReleaseOutcome, RetryPolicy};
use lock_testkit::scripted::{Fault, Gate, Injected, Op, ScriptedServer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until `cond` holds, at most `within`; panics naming `what` otherwise.
async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(ms(2)).await;
    }
}

/// A waiter whose backoff is far longer than any test here: only a wake-up gets it the lock in time.
fn patient() -> LockOptions {
    let slow = RetryPolicy::default().min_delay(ms(20_000)).max_delay(ms(20_000));
    LockOptions::new(ms(30_000)).wait(ms(60_000)).retry(slow)
}

async fn timed<T>(fut: impl Future<Output = T>) -> (T, Duration) {
    let t0 = Instant::now();
    let out = fut.await;
    (out, t0.elapsed())
}

/// Finding 1: a give-back (the release of a grant the acquire cannot use: here a reply lost after the server
/// applied the acquire) whose caller is cancelled before the release reached the server is still sent. The
/// in-flight token stays armed until the release has completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_give_back_still_releases() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client());
    server.once(Op::Acquire, Fault::FailAfter(Injected::Timeout));
    let gate = Gate::new();
    server.once(Op::Release, Fault::Gate(gate.clone()));
    let attempt = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire("give-back", &LockOptions::new(ms(30_000))).await.map(|g| g.is_some()) }
    });
    assert!(gate.wait_arrivals(1, ms(5_000)).await, "the give-back never started");
    assert_eq!(server.memory().held_count(), 1, "the acquire was applied");
    // Cancel the caller while its give-back waits to be sent; that release never reaches the server.
    attempt.abort();
    assert!(attempt.await.unwrap_err().is_cancelled());
    gate.open();
    eventually("the cancelled give-back released the key", ms(2_000), || server.memory().held_count() == 0).await;
}

/// Finding 8 (engine part): an error raised after the server applied the acquire (an `INCRBY` failing after the
/// `SET`, a `WAIT` refused by the ACL) is not "nothing of ours exists": the grant is given back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_the_grant_was_applied_gives_it_back() {
    for injected in [Injected::Auth, Injected::Backend] {
        let server = ScriptedServer::new();
        let lock = Lock::new(server.client());
        server.once(Op::Acquire, Fault::FailAfter(injected));
        let err = lock.try_acquire("applied", &LockOptions::new(ms(30_000))).await.err();
        assert!(err.as_ref().is_some_and(lock_testkit::scripted::is_injected), "{injected:?}: got {err:?}");
        eventually("the applied grant was given back", ms(2_000), || server.memory().held_count() == 0).await;
        // And the lock is usable at once.
        let g = lock.try_acquire("applied", &LockOptions::new(ms(30_000))).await.unwrap().expect("free");
        assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// The errors the scripted store injects are told apart from errors the engine makes up.
#[tokio::test]
async fn injected_errors_are_recognisable() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client());
    server.once(Op::Acquire, Fault::FailBefore(Injected::Unavailable));
    let err = lock.try_acquire("x", &LockOptions::new(ms(1_000))).await.unwrap_err();
    assert!(lock_testkit::scripted::is_injected(&err), "{err:?}");
    assert!(!lock_testkit::scripted::is_injected(&LockError::unavailable(std::io::Error::other("real"))));
}

fn count(server: &ScriptedServer, op: Op) -> usize {
    server.log().iter().filter(|c| c.call.op == op).count()
}

fn keys(resource: &str) -> String {
    lock_core::LockKeys::new(lock_core::DEFAULT_PREFIX, resource).unwrap().channel().to_owned()
}

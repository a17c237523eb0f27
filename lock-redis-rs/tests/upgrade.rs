//! Upgrading a fleet from the old default prefix (`lock:`, before protocol 1.1) to the new one (`wlp:`): processes on
//! the old prefix and a process on the new default share one server and never both hold; the new process refuses
//! with `OldPrefixInUse` until it is given the old prefix, and then excludes them (the guide, chapter 8).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{Lock, LockError, LockOptions, LEGACY_PREFIX};
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;

/// `(acquired, released)` instants of every hold, of every "process".
type Holds = Arc<Mutex<Vec<(Instant, Instant, &'static str)>>>;

/// One process: its own store (connection, subscriber, release hub) and lock, holding `name` again and again for
/// `run`.
async fn process(
    url: String,
    prefix: Option<&'static str>,
    who: &'static str,
    holds: Holds,
    run: Duration,
) -> Vec<LockError> {
    let mut lock = Lock::new(RedisStore::connect(&url).await.unwrap());
    if let Some(prefix) = prefix {
        lock = lock.with_key_prefix(prefix);
    }
    let options = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_millis(200));
    let mut errors = Vec::new();
    let end = Instant::now() + run;
    while Instant::now() < end {
        match lock.acquire("invoice", &options).await {
            Ok(guard) => {
                let acquired = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let released = Instant::now();
                guard.release().await.unwrap();
                holds.lock().unwrap().push((acquired, released, who));
            }
            Err(LockError::Contended { .. }) => {}
            Err(err) => {
                errors.push(err);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_default_processes_never_both_hold() {
    let server = RedisServer::start().expect("redis-server");
    let holds: Holds = Arc::default();
    let run = Duration::from_secs(2);
    // The old fleet: two processes on `lock:` (what an older release's default wrote), already running.
    let old: Vec<_> =
        (0..2).map(|_| tokio::spawn(process(server.url(), Some(LEGACY_PREFIX), "old", holds.clone(), run))).collect();
    let started = Instant::now();
    while server.command(&["EXISTS", "lock:wire"]).unwrap() != lock_testkit::Reply::Int(1) {
        assert!(started.elapsed() < Duration::from_secs(10), "the old fleet never wrote its version key");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A process of the new release on the default prefix, and one given the old prefix explicitly.
    let new = tokio::spawn(process(server.url(), None, "new default", holds.clone(), run));
    let configured = tokio::spawn(process(server.url(), Some("lock:"), "new, old prefix set", holds.clone(), run));
    for task in old {
        assert!(task.await.unwrap().is_empty());
    }
    let refused = new.await.unwrap();
    assert!(configured.await.unwrap().is_empty());

    let holds = holds.lock().unwrap().clone();
    assert!(holds.iter().all(|(_, _, who)| *who != "new default"), "the new default process held beside the old ones");
    assert!(
        !refused.is_empty() && refused.iter().all(|e| matches!(e, LockError::OldPrefixInUse { .. })),
        "{refused:?}"
    );
    assert!(holds.iter().any(|(_, _, who)| *who == "new, old prefix set"), "the configured process never got in");
    let mut sorted = holds.clone();
    sorted.sort_by_key(|(acquired, _, _)| *acquired);
    for pair in sorted.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "two holders at once: {:?} and {:?}", pair[0], pair[1]);
    }
    assert_eq!(server.command(&["EXISTS", "wlp:{invoice}"]).unwrap(), lock_testkit::Reply::Int(0));
}

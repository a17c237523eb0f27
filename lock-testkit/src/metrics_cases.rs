//! A backend's own metrics (the `lock_core::telemetry` list): what only a real connection shows, read from a
//! `metrics-util` debugging recorder installed for the whole test binary (backends record from their own tasks,
//! on any thread, so a thread-local recorder would miss them).
//!
//! Give these cases a test binary of their own: the recorder is process-wide, and every case reads it.

use std::sync::OnceLock;
use std::time::Instant;

use lock_core::{Lock, LockOptions, ReleaseOutcome, RetryPolicy};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use crate::or_panic::{ms, OrPanic};
use crate::runtime::sleep;
use crate::RedisServer;

/// The process-wide debugging recorder, installed on first use.
///
/// # Panics
/// When another recorder was installed first.
pub fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        if recorder.install().is_err() {
            panic!("another metrics recorder is installed in this test binary");
        }
        snapshotter
    })
}

/// The sum of the counters named `name` whose labels include `labels`, as of now.
pub fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    look();
    let seen = seen();
    matching(&seen.counters, name, labels).sum()
}

/// How many histogram samples named `name`, with `labels` among theirs, were recorded so far (a snapshot drains
/// histograms, and every look, `counter`'s included, takes one: the samples are kept here across looks).
pub fn samples(name: &str, labels: &[(&str, &str)]) -> usize {
    look();
    let seen = seen();
    matching(&seen.histograms, name, labels).sum::<u64>().try_into().unwrap_or(usize::MAX)
}

/// What the looks so far have read: counters as of the last look, histogram samples summed over all of them.
#[derive(Default)]
struct Seen {
    counters: std::collections::HashMap<metrics_util::CompositeKey, u64>,
    histograms: std::collections::HashMap<metrics_util::CompositeKey, u64>,
}

fn seen() -> std::sync::MutexGuard<'static, Seen> {
    static SEEN: OnceLock<std::sync::Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes a snapshot and adds it to [`Seen`].
fn look() {
    let snapshot = snapshotter().snapshot().into_vec();
    let mut seen = seen();
    for (key, _, _, value) in snapshot {
        match value {
            DebugValue::Counter(n) => drop(seen.counters.insert(key, n)),
            DebugValue::Histogram(h) => *seen.histograms.entry(key).or_default() += h.len() as u64,
            _ => {}
        }
    }
}

fn matching<'a>(
    values: &'a std::collections::HashMap<metrics_util::CompositeKey, u64>,
    name: &'a str,
    labels: &'a [(&str, &str)],
) -> impl Iterator<Item = u64> + 'a {
    values
        .iter()
        .filter(move |(key, _)| {
            let key = key.key();
            key.name() == name && labels.iter().all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(_, n)| *n)
}

/// A store's subscriber whose connection is killed (`CLIENT KILL TYPE pubsub`) reconnects and counts it in
/// `lock_subscriber_reconnects_total{backend}`; its commands are timed in `lock_command_duration_seconds`, both
/// under the store's type name (one `backend` value per store: review 4); its lock names its deployment.
pub async fn subscriber_reconnects_and_commands_are_counted(lock: &Lock, server: &RedisServer, store_type: &str) {
    let backend = store_type;
    snapshotter();
    assert_eq!(lock.deployment(), "single");
    let before = counter("lock_subscriber_reconnects_total", &[("backend", backend)]);
    let holder = lock.try_acquire("metrics:resub", &LockOptions::new(ms(20_000))).await.or_panic().or_panic();
    let slow = RetryPolicy::default().with_min_delay(ms(2_000)).with_max_delay(ms(2_000));
    let waiting = LockOptions::new(ms(5_000)).with_wait(ms(20_000)).with_retry(slow);
    let waiter = lock.acquire("metrics:resub", &waiting);
    let disturb = async {
        // The waiter subscribes once it found the lock held.
        let started = Instant::now();
        while !lock.inspect("metrics:resub").await.or_panic().awaited() {
            assert!(started.elapsed() < ms(5_000), "the waiter never tried");
            sleep(ms(5)).await;
        }
        sleep(ms(100)).await;
        server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).or_panic();
        let started = Instant::now();
        while counter("lock_subscriber_reconnects_total", &[("backend", backend)]) == before {
            assert!(started.elapsed() < ms(5_000), "no reconnect of the {backend} subscriber was counted");
            sleep(ms(10)).await;
        }
        assert_eq!(holder.release().await.or_panic(), ReleaseOutcome::Released);
    };
    let (guard, ()) = futures_util::future::join(waiter, disturb).await;
    guard.or_panic().release().await.or_panic();
    let timed = samples(
        "lock_command_duration_seconds",
        &[("backend", store_type), ("operation", "acquire"), ("outcome", "ok")],
    );
    assert!(timed >= 2, "{timed} acquire commands timed for {store_type}");
}

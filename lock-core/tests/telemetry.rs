//! What an operator sees: the spans and events (captured by a recording `tracing` layer) and, with the `metrics`
//! feature, the metrics (captured by `metrics-util`'s debugging recorder) that the `telemetry` module documents.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{Call, Ran, ReleaseHub, ScriptStore};
use lock_core::{
    DistributedLockExt, HolderLabel, Lock, LockOptions, LockStore, MemoryStore, ReleaseOutcome, RenewPolicy, Result,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `f` on a current-thread runtime, so that spawned tasks (the watchdog, a dropped guard's release) run on
/// this thread and reach the thread's recorders.
fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
}

#[derive(Clone, Debug, Default)]
struct SpanSeen {
    name: &'static str,
    fields: BTreeMap<String, String>,
    parent: Option<&'static str>,
    /// How many times each field was recorded after the span was created.
    records: BTreeMap<String, usize>,
}

#[derive(Clone, Debug)]
struct EventSeen {
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
    /// The names of the spans the event happened in, outermost first.
    scope: Vec<&'static str>,
}

#[derive(Default)]
struct Log {
    /// Every span, in creation order.
    spans: Vec<SpanSeen>,
    /// The span each live id names: the registry reuses a closed span's id, so a span is kept by its place in
    /// `spans`, not by its id (keyed by id, a `lock.force_release` span was overwritten by a later one).
    live: BTreeMap<u64, usize>,
    events: Vec<EventSeen>,
}

/// A layer that keeps every span (with its recorded fields) and event.
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Log>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recording {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = SpanSeen { name: attrs.metadata().name(), ..SpanSeen::default() };
        attrs.record(&mut Fields(&mut seen.fields));
        seen.parent = ctx.span(id).and_then(|span| span.parent()).map(|parent| parent.name());
        let mut log = self.0.lock().unwrap();
        log.spans.push(seen);
        let place = log.spans.len() - 1;
        log.live.insert(id.into_u64(), place);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        let Some(place) = log.live.get(&id.into_u64()).copied() else { return };
        let mut recorded = BTreeMap::new();
        values.record(&mut Fields(&mut recorded));
        let span = &mut log.spans[place];
        for (field, value) in recorded {
            *span.records.entry(field.clone()).or_default() += 1;
            span.fields.insert(field, value);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let scope = ctx.event_scope(event).map(|scope| scope.from_root().map(|span| span.name()).collect());
        let seen = EventSeen { level: *event.metadata().level(), message, fields, scope: scope.unwrap_or_default() };
        self.0.lock().unwrap().events.push(seen);
    }
}

impl Recording {
    /// Runs `f` with this layer as the thread's subscriber.
    fn capture<T>(&self, f: impl FnOnce() -> T) -> T {
        // `tracing` caches, per callsite and process-wide, whether any subscriber wants it; a callsite first reached
        // on a test thread with no subscriber while the other captures were between registrations was cached as
        // unwanted, and a `lock.force_release` span went unrecorded when the tests ran in parallel. A global
        // subscriber that answers "sometimes" makes every callsite ask the thread's subscriber each time.
        static ASK_EACH_TIME: std::sync::Once = std::sync::Once::new();
        ASK_EACH_TIME.call_once(|| {
            let _ = tracing::subscriber::set_global_default(AskEachTime);
        });
        let subscriber = tracing_subscriber::registry().with(self.clone());
        tracing::subscriber::with_default(subscriber, f)
    }

    fn spans(&self, name: &str) -> Vec<SpanSeen> {
        self.0.lock().unwrap().spans.iter().filter(|s| s.name == name).cloned().collect()
    }

    fn events(&self, level: Level, starting: &str) -> Vec<EventSeen> {
        let log = self.0.lock().unwrap();
        log.events.iter().filter(|e| e.level == level && e.message.starts_with(starting)).cloned().collect()
    }

    /// The one span `name` whose field `field` is `value`; panics listing what was seen otherwise.
    fn span_with(&self, name: &str, field: &str, value: &str) -> SpanSeen {
        let spans = self.spans(name);
        let found: Vec<&SpanSeen> =
            spans.iter().filter(|s| s.fields.get(field).map(String::as_str) == Some(value)).collect();
        match found.as_slice() {
            [one] => (*one).clone(),
            _ => panic!("expected one {name} span with {field}={value}, saw {spans:#?}"),
        }
    }
}

/// The process's global subscriber in these tests: records nothing, and tells `tracing` to ask the thread's own
/// subscriber at every callsite (see [`Recording::capture`]).
struct AskEachTime;

impl Subscriber for AskEachTime {
    fn register_callsite(&self, _: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn acquire_spans_name_the_lock_the_deployment_and_the_outcome() {
    let seen = Recording::default();
    seen.capture(|| {
        run(async {
            let lock = Lock::new(MemoryStore::new());
            let opts = LockOptions::new(ms(5_000)).with_wait(ms(2_000));
            let held = lock.try_acquire("orders", &opts).await.unwrap().unwrap();
            assert!(lock.try_acquire("orders", &opts).await.unwrap().is_none());
            let (waited, released) = tokio::join!(lock.acquire("orders", &opts), async {
                tokio::time::sleep(ms(30)).await;
                held.release().await
            });
            assert_eq!(released.unwrap(), ReleaseOutcome::Released);
            waited.unwrap().release().await.unwrap();
        })
    });
    let tries = seen.spans("lock.try_acquire");
    assert_eq!(tries.len(), 2, "{tries:#?}");
    for span in &tries {
        assert_eq!(span.fields["resource"], "orders");
        assert_eq!(span.fields["deployment"], "memory");
    }
    assert!(tries.iter().any(|s| s.fields["outcome"] == "acquired"), "{tries:#?}");
    assert!(tries.iter().any(|s| s.fields["outcome"] == "held"), "{tries:#?}");
    let waited = seen.span_with("lock.acquire", "outcome", "acquired");
    let attempts: u32 = waited.fields["attempts"].parse().unwrap();
    assert!(attempts >= 2, "an acquire that waited recorded {attempts} attempts");
    let releases = seen.spans("lock.release");
    assert_eq!(releases.len(), 2);
    assert!(releases.iter().all(|s| s.fields["outcome"] == "released" && s.fields["resource"] == "orders"));
    let contention = seen.events(Level::DEBUG, "lock held by another owner");
    assert!(contention.iter().any(|e| e.fields.get("resource").map(String::as_str) == Some("orders")));
    assert!(seen.events(Level::WARN, "").is_empty(), "routine contention warned: {:?}", seen.events(Level::WARN, ""));
}

#[test]
fn a_release_that_finds_the_lock_expired_warns_naming_it() {
    let seen = Recording::default();
    seen.capture(|| {
        run(async {
            let lock = Lock::new(MemoryStore::new());
            let guard = lock.acquire("invoice-9", &LockOptions::new(ms(20))).await.unwrap();
            tokio::time::sleep(ms(60)).await;
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::AlreadyExpired);
        })
    });
    let overran = seen.events(Level::WARN, "lock held past its TTL");
    assert_eq!(overran.len(), 1, "{overran:?}");
    assert_eq!(overran[0].fields["resource"], "invoice-9");
    assert_eq!(overran[0].fields["outcome"], "already_expired");
    let lost = seen.events(Level::WARN, "lock lost");
    assert!(lost.iter().any(|e| e.fields["resource"] == "invoice-9"), "the expiry was not reported as a loss");
    assert_eq!(seen.span_with("lock.release", "resource", "invoice-9").fields["outcome"], "already_expired");
}

#[test]
fn the_watchdog_renews_inside_the_guards_span_and_a_forced_loss_warns_naming_the_lock() {
    let seen = Recording::default();
    seen.capture(|| {
        run(async {
            let lock = Lock::new(MemoryStore::new());
            let opts = LockOptions::new(ms(300))
                .with_auto_renew(RenewPolicy::default().with_interval(ms(50)))
                .with_holder_label(HolderLabel::new("reindexer").unwrap());
            let guard = lock.acquire("index", &opts).await.unwrap();
            tokio::time::sleep(ms(130)).await;
            assert!(lock.inspect("index").await.unwrap().is_held());
            assert!(lock.force_release("index").await.unwrap().released());
            let started = Instant::now();
            while !guard.is_lost() {
                assert!(started.elapsed() < ms(2_000), "the watchdog never found the lock gone");
                tokio::time::sleep(ms(5)).await;
            }
            drop(guard);
        })
    });
    let held = seen.span_with("lock.held", "resource", "index");
    assert_eq!(held.fields["deployment"], "memory");
    let renewals = seen.spans("lock.extend");
    assert!(
        renewals.iter().any(|s| s.parent == Some("lock.held") && s.fields["outcome"] == "extended"),
        "no renewal ran inside the guard's span: {renewals:#?}"
    );
    assert_eq!(seen.span_with("lock.inspect", "resource", "index").fields["deployment"], "memory");
    assert_eq!(seen.span_with("lock.force_release", "resource", "index").fields["deployment"], "memory");
    let forced = seen.events(Level::WARN, "lock force-released");
    assert_eq!(forced.len(), 1, "{forced:?}");
    assert_eq!((forced[0].fields["resource"].as_str(), forced[0].fields["label"].as_str()), ("index", "reindexer"));
    let lost = seen.events(Level::WARN, "lock lost: extension found it gone");
    assert_eq!(lost.len(), 1, "{:?}", seen.events(Level::WARN, ""));
    assert_eq!(lost[0].fields["resource"], "index");
    assert!(lost[0].scope.contains(&"lock.held"), "the loss was not reported inside the guard's span: {lost:?}");
}

#[test]
fn scoped_work_and_redlock_are_traced_with_their_deployment() {
    let seen = Recording::default();
    seen.capture(|| {
        run(async {
            let lock = Lock::new(MemoryStore::new());
            let out = lock.with_lock("report", &LockOptions::new(ms(1_000)), |_| async { 7 }).await.unwrap();
            assert_eq!(out, 7);
            let stores: Vec<Arc<dyn LockStore>> =
                (0..3).map(|_| Arc::new(MemoryStore::new()) as Arc<dyn LockStore>).collect();
            let redlock = Lock::redlock(stores).build().unwrap();
            assert_eq!(redlock.deployment(), "redlock");
            let guard = redlock.try_acquire("shared", &LockOptions::new(ms(1_000))).await.unwrap().unwrap();
            guard.release().await.unwrap();
        })
    });
    assert_eq!(seen.span_with("lock.scoped", "resource", "report").fields["outcome"], "ok");
    assert_eq!(seen.span_with("lock.try_acquire", "resource", "shared").fields["deployment"], "redlock");
}

/// Review 4, finding 12: a lock deleted from under its holder (here by a forced release) is reported as such when
/// the holder releases, not as a holder that overran its TTL; and a multi-lock's release span records its outcome
/// once (finding 13), a lock's fence is a number in its span.
#[test]
fn a_lock_deleted_while_held_is_reported_as_such_not_as_an_overrun() {
    let seen = Recording::default();
    seen.capture(|| {
        run(async {
            let lock = Lock::new(MemoryStore::new());
            let eager = LockOptions::new(ms(30_000)).with_fencing_mode(lock_core::Fencing::OnAcquire);
            let guard = lock.acquire("ledger-3", &eager).await.unwrap();
            assert!(lock.force_release("ledger-3").await.unwrap().released());
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::AlreadyExpired);
            let both = lock.acquire_all(&["a-1", "a-2"], &LockOptions::new(ms(30_000))).await.unwrap();
            assert!(both.release().await.unwrap().all_released());
        })
    });
    let deleted = seen.events(Level::WARN, "lock deleted while held");
    assert_eq!(deleted.len(), 1, "{:?}", seen.events(Level::WARN, ""));
    assert_eq!(deleted[0].fields["resource"], "ledger-3");
    assert!(seen.events(Level::WARN, "lock held past its TTL").is_empty(), "reported as an overrun");
    assert_eq!(seen.span_with("lock.release", "resource", "ledger-3").fields["outcome"], "deleted_while_held");
    let multi = seen.span_with("lock.release", "resource", "a-1, a-2");
    assert_eq!((multi.fields["outcome"].as_str(), multi.records["outcome"]), ("released", 1), "{multi:?}");
    let held = seen.span_with("lock.held", "resource", "ledger-3");
    assert!(held.fields["fence"].parse::<u64>().is_ok(), "the fence is not a number: {held:?}");
    for span in seen.0.lock().unwrap().spans.iter() {
        if let Some(deployment) = span.fields.get("deployment") {
            assert!(!deployment.contains('"'), "{}: deployment {deployment} is quoted", span.name);
        }
    }
}

/// Review 4, finding 11: a fenced write refused as stale is a `warn` event naming the guard and both fences (it
/// was counted as an ordinary `ok`, silently), also through the one call a resource of one's own (SQL) makes.
#[test]
fn a_stale_fenced_write_warns_naming_both_fences() {
    let seen = Recording::default();
    seen.capture(|| {
        run(async {
            let resource = lock_core::FencedResource::with_guard(MemoryStore::new(), "fence:{ledger}").unwrap();
            let (old, new) = (lock_core::FencingToken::new(7), lock_core::FencingToken::new(9));
            resource.set(new, "{ledger}:balance", "10").await.unwrap();
            let refused = resource.set(old, "{ledger}:balance", "0").await;
            assert!(matches!(refused, Err(lock_core::LockError::StaleFence { presented: 7, current: 9 })));
            let sql: Result<()> = Err(lock_core::LockError::StaleFence { presented: 3, current: 4 });
            lock_core::telemetry::fenced_write("accounts", "sql_update", &sql);
        })
    });
    let refused = seen.events(Level::WARN, "fenced write refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    let fields = |i: usize, f: &str| refused[i].fields[f].clone();
    assert_eq!(
        (fields(0, "guard"), fields(0, "presented"), fields(0, "current")),
        ("fence:{ledger}".into(), "7".into(), "9".into())
    );
    assert_eq!((fields(1, "guard"), fields(1, "operation")), ("accounts".into(), "sql_update".into()));
}

/// A store whose replies take `delay` (the grant arrives after its validity).
#[derive(Debug)]
struct Slow {
    inner: MemoryStore,
    delay: Duration,
}

#[async_trait]
impl ScriptStore for Slow {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        let ran = self.inner.run(call).await;
        tokio::time::sleep(self.delay).await;
        ran
    }
    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        ScriptStore::release_hub(&self.inner)
    }
}

#[cfg(feature = "metrics")]
mod metrics_recorded {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    type Entry = (metrics_util::CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue);

    fn find<'a>(snapshot: &'a [Entry], name: &str, labels: &[(&str, &str)]) -> Vec<&'a DebugValue> {
        snapshot
            .iter()
            .filter(|(key, ..)| {
                let key = key.key();
                key.name() == name && labels.iter().all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
            })
            .map(|(.., value)| value)
            .collect()
    }

    fn counter(snapshot: &[Entry], name: &str, labels: &[(&str, &str)]) -> u64 {
        find(snapshot, name, labels).iter().map(|v| if let DebugValue::Counter(n) = v { *n } else { 0 }).sum()
    }

    fn samples(snapshot: &[Entry], name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        find(snapshot, name, labels)
            .iter()
            .flat_map(|v| if let DebugValue::Histogram(h) = v { h.iter().map(|x| x.0).collect() } else { vec![] })
            .collect()
    }

    fn recorded<T>(f: impl FnOnce() -> T) -> (T, Vec<Entry>, Snapshotter) {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let out = metrics::with_local_recorder(&recorder, f);
        (out, snapshotter.snapshot().into_vec(), snapshotter)
    }

    #[test]
    fn every_documented_metric_is_recorded_with_bounded_labels() {
        let ((), snap, _) = recorded(|| {
            run(async {
                let lock = Lock::new(MemoryStore::new());
                let opts = LockOptions::new(ms(5_000)).with_wait(ms(2_000));
                let held = lock.try_acquire("m", &opts).await.unwrap().unwrap();
                assert!(lock.try_acquire("m", &opts).await.unwrap().is_none());
                let (waited, _) = tokio::join!(lock.acquire("m", &opts), async {
                    tokio::time::sleep(ms(30)).await;
                    held.release().await.unwrap();
                });
                waited.unwrap().release().await.unwrap();

                let expired = lock.acquire("m", &LockOptions::new(ms(20))).await.unwrap();
                tokio::time::sleep(ms(50)).await;
                assert_eq!(expired.release().await.unwrap(), ReleaseOutcome::AlreadyExpired);

                let renewed = LockOptions::new(ms(300)).with_auto_renew(RenewPolicy::default().with_interval(ms(40)));
                let guard = lock.acquire("m", &renewed).await.unwrap();
                tokio::time::sleep(ms(100)).await;
                assert!(lock.force_release("m").await.unwrap().released());
                assert!(!lock.force_release("m").await.unwrap().released());
                let started = Instant::now();
                while !guard.is_lost() {
                    assert!(started.elapsed() < ms(2_000), "the watchdog never found the lock gone");
                    tokio::time::sleep(ms(5)).await;
                }
                assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::AlreadyExpired);

                let slow = Lock::new(Slow { inner: MemoryStore::new(), delay: ms(40) });
                let late = slow.try_acquire("m", &LockOptions::new(ms(20))).await;
                assert!(matches!(late, Err(lock_core::LockError::ValidityExhausted { .. })), "{late:?}");

                let fenced = lock_core::FencedResource::with_guard(MemoryStore::new(), "fence:{m}").unwrap();
                fenced.set(lock_core::FencingToken::new(9), "{m}:v", "1").await.unwrap();
                assert!(fenced.set(lock_core::FencingToken::new(8), "{m}:v", "0").await.is_err());
                let taken = lock.acquire("m", &LockOptions::new(ms(30_000))).await.unwrap();
                assert!(lock.force_release("m").await.unwrap().released());
                assert_eq!(taken.release().await.unwrap(), ReleaseOutcome::AlreadyExpired);
                lock_core::telemetry::describe_metrics();
            })
        });
        assert_eq!(counter(&snap, "lock_fenced_writes_total", &[("operation", "set"), ("outcome", "written")]), 1);
        assert_eq!(counter(&snap, "lock_fenced_writes_total", &[("operation", "set"), ("outcome", "stale_fence")]), 1);
        assert_eq!(counter(&snap, "lock_releases_total", &[("outcome", "deleted_while_held")]), 1);
        // Review 4, finding 13: every metric has its HELP text.
        let undescribed: Vec<&str> =
            snap.iter().filter(|(.., help, _)| help.is_none()).map(|(key, ..)| key.key().name()).collect();
        assert!(undescribed.is_empty(), "metrics without a description: {undescribed:?}");
        let memory = ("deployment", "memory");
        let tried = |outcome| {
            samples(
                &snap,
                "lock_acquire_duration_seconds",
                &[("operation", "try_acquire"), ("outcome", outcome), memory],
            )
        };
        assert_eq!(tried("acquired").len(), 1);
        assert_eq!(tried("held").len(), 1);
        let waited = samples(&snap, "lock_acquire_attempts", &[("outcome", "acquired"), memory]);
        assert!(waited.iter().any(|n| *n >= 2.0), "attempts of an acquire that waited: {waited:?}");
        assert!(waited.contains(&1.0), "an uncontended acquire is one attempt: {waited:?}");
        assert_eq!(samples(&snap, "lock_acquire_wait_seconds", &[("outcome", "acquired")]).len(), 1);
        assert!(samples(&snap, "lock_acquire_wait_seconds", &[])[0] >= 0.02, "the wait was at least the 30 ms hold");
        assert_eq!(counter(&snap, "lock_releases_total", &[("outcome", "released"), memory]), 2);
        assert_eq!(counter(&snap, "lock_releases_total", &[("outcome", "already_expired")]), 2);
        assert_eq!(samples(&snap, "lock_hold_duration_seconds", &[memory]).len(), 5);
        assert_eq!(counter(&snap, "lock_lost_total", &[("reason", "expired")]), 1);
        assert_eq!(counter(&snap, "lock_lost_total", &[("reason", "not_held")]), 1);
        assert!(counter(&snap, "lock_renewals_total", &[("outcome", "renewed")]) >= 1);
        assert_eq!(counter(&snap, "lock_force_releases_total", &[("freed", "true")]), 2);
        assert_eq!(counter(&snap, "lock_force_releases_total", &[("freed", "false")]), 1);
        assert_eq!(counter(&snap, "lock_validity_exhausted_total", &[]), 1);
        let acquires = samples(
            &snap,
            "lock_command_duration_seconds",
            &[("backend", "MemoryStore"), ("operation", "acquire"), ("outcome", "ok")],
        );
        assert!(acquires.len() >= 4, "{acquires:?}");
        assert!(!samples(&snap, "lock_command_duration_seconds", &[("backend", "Slow")]).is_empty());
        let with_resource = snap.iter().filter(|(key, ..)| key.key().labels().any(|l| l.key() == "resource")).count();
        assert_eq!(with_resource, 0, "a resource name became a label without the opt-in");

        // The opt-in is process-wide, so it is tried here, after the default was checked (not in a parallel test).
        let ((), snap, _) = recorded(|| {
            run(async {
                lock_core::telemetry::label_resources(true);
                let lock = Lock::new(MemoryStore::new());
                let guard = lock.acquire("few-names", &LockOptions::new(ms(1_000))).await;
                lock_core::telemetry::label_resources(false);
                guard.unwrap().release().await.unwrap();
            })
        });
        let labelled = samples(&snap, "lock_acquire_duration_seconds", &[("resource", "few-names")]);
        assert_eq!(labelled.len(), 1, "the opted-in resource label is missing");
    }

    /// Every kind of primitive, as the `primitive` label and span field name it.
    const KINDS: [&str; 8] =
        ["lock", "fair_lock", "multi_lock", "semaphore", "election", "job", "rwlock_read", "rwlock_write"];

    /// The `lock_held` gauge of `kind` in `entries` (a snapshot swaps every value for zero: the entries of all
    /// snapshots sum to the value).
    fn gauge(entries: &[Entry], kind: &str) -> f64 {
        find(entries, "lock_held", &[("primitive", kind)])
            .iter()
            .map(|v| if let DebugValue::Gauge(g) = v { g.into_inner() } else { 0.0 })
            .sum()
    }

    /// Takes and gives back `kind` twice on `lock` (a try, then a waiting acquire) and returns the `lock_held` gauge
    /// while the second hold was live. A snapshot drains every metric: its entries are kept in `drained`.
    async fn exercise(lock: &Lock, kind: &str, snapshotter: &Snapshotter, drained: &Mutex<Vec<Entry>>) -> f64 {
        let opts = LockOptions::new(ms(5_000)).with_wait(ms(2_000));
        let held_now = || {
            let mut drained = drained.lock().unwrap();
            drained.extend(snapshotter.snapshot().into_vec());
            gauge(&drained, kind)
        };
        match kind {
            "lock" => {
                lock.try_acquire(kind, &opts).await.unwrap().unwrap().release().await.unwrap();
                let guard = lock.acquire(kind, &opts).await.unwrap();
                let held = held_now();
                guard.release().await.unwrap();
                held
            }
            "fair_lock" => {
                let fair = opts.clone().with_fair_queue(ms(1_000));
                lock.try_acquire(kind, &fair).await.unwrap().unwrap().release().await.unwrap();
                let guard = lock.acquire(kind, &fair).await.unwrap();
                let held = held_now();
                guard.release().await.unwrap();
                held
            }
            "multi_lock" => {
                lock.try_acquire_all(&["a", "b"], &opts).await.unwrap().unwrap().release().await.unwrap();
                let guard = lock.acquire_all(&["a", "b"], &opts).await.unwrap();
                let held = held_now();
                guard.release().await.unwrap();
                held
            }
            "semaphore" => {
                let sem = lock_core::Semaphore::new(lock.clone(), kind, 2).unwrap();
                sem.try_acquire(1, &opts).await.unwrap().unwrap().release().await.unwrap();
                let permit = sem.acquire(1, &opts).await.unwrap();
                let held = held_now();
                permit.release().await.unwrap();
                held
            }
            "election" => {
                let options = lock_core::ElectionOptions::default();
                let election = lock_core::Election::new(lock.clone(), kind, options).unwrap();
                election.try_campaign("a", "1").await.unwrap().unwrap().resign().await.unwrap();
                let leadership = election.campaign("a", "1").await.unwrap();
                let held = held_now();
                leadership.resign().await.unwrap();
                held
            }
            "job" => {
                let jobs = lock_core::JobLock::new(lock.clone());
                let options = lock_core::JobOptions::new(ms(5_000));
                let mut held = 0.0;
                let ran = jobs.run(kind, &options, |_| async { held = held_now() }).await.unwrap();
                assert!(matches!(ran, lock_core::JobOutcome::Ran { .. }), "{ran:?}");
                held
            }
            "rwlock_read" => {
                let rw = lock_core::RwLock::new(lock.clone(), kind).unwrap();
                rw.try_read(&opts).await.unwrap().unwrap().release().await.unwrap();
                let guard = rw.read(&opts).await.unwrap();
                let held = held_now();
                guard.release().await.unwrap();
                held
            }
            "rwlock_write" => {
                let rw = lock_core::RwLock::new(lock.clone(), kind).unwrap();
                rw.try_write(&opts).await.unwrap().unwrap().release().await.unwrap();
                let guard = rw.write(&opts).await.unwrap();
                let held = held_now();
                guard.release().await.unwrap();
                held
            }
            other => panic!("no exercise for {other}"),
        }
    }

    /// The engine measures and traces every primitive alike: its acquires (tries and waits), its holds (the gauge
    /// up while held, back to zero after) and its releases, labelled by the primitive's kind, in the same spans.
    #[test]
    fn every_primitive_is_measured_and_traced_alike() {
        let seen = Recording::default();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let drained = Mutex::new(Vec::new());
        let during = seen.capture(|| {
            metrics::with_local_recorder(&recorder, || {
                run(async {
                    let lock = Lock::new(MemoryStore::new());
                    let mut during = Vec::new();
                    for kind in KINDS {
                        during.push((kind, exercise(&lock, kind, &snapshotter, &drained).await));
                    }
                    during
                })
            })
        });
        let mut all = drained.into_inner().unwrap();
        all.extend(snapshotter.snapshot().into_vec());
        for (kind, held) in during {
            let label = ("primitive", kind);
            assert_eq!(held, 1.0, "{kind}: the held gauge while one hold was live");
            assert_eq!(gauge(&all, kind), 0.0, "{kind}: the held gauge after every hold ended");
            let tried = samples(&all, "lock_acquire_duration_seconds", &[("operation", "try_acquire"), label]);
            let waited = samples(&all, "lock_acquire_duration_seconds", &[("operation", "acquire"), label]);
            // A job's run is one try (it never waits); every other kind was tried once and acquired once.
            let (want_tries, want_waits): (usize, usize) = if kind == "job" { (1, 0) } else { (1, 1) };
            assert_eq!((tried.len(), waited.len()), (want_tries, want_waits), "{kind}: acquire durations");
            // A wait in a fair queue counts no tries (its heartbeats are tries too): only the try counts one.
            let attempts: &[f64] =
                if matches!(kind, "job" | "fair_lock" | "rwlock_write") { &[1.0] } else { &[1.0, 1.0] };
            assert_eq!(samples(&all, "lock_acquire_attempts", &[label]), attempts, "{kind}: attempts");
            let holds = (want_tries + want_waits) as u64;
            let hold_samples = if kind == "multi_lock" { 2 * holds } else { holds };
            // A multi-lock's release counts each of its two resources.
            let releases = if kind == "multi_lock" { 2 * holds } else { holds };
            assert_eq!(counter(&all, "lock_releases_total", &[("outcome", "released"), label]), releases, "{kind}");
            assert_eq!(
                samples(&all, "lock_hold_duration_seconds", &[label]).len() as u64,
                hold_samples,
                "{kind}: holds"
            );
            let spans = seen.spans(if kind == "job" { "lock.try_acquire" } else { "lock.acquire" });
            let span = spans.iter().find(|s| s.fields.get("primitive").map(String::as_str) == Some(kind));
            let span = span.unwrap_or_else(|| panic!("{kind}: no acquire span names it: {spans:#?}"));
            assert_eq!(span.fields["outcome"], "acquired", "{kind}");
            assert_eq!(span.fields["deployment"], "memory", "{kind}");
        }
    }
}

//! The lock itself: acquire, extend and release over one [`LockStore`] or a quorum of independent ones.
//!
//! With one instance this is the classic single-Redis lock (one round trip per operation). With several it is
//! Redlock (see [`Lock::redlock`] for the algorithm, the fencing argument and the limits). Both share
//! every line of waiting, validity, cancellation, renewal and loss handling.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tracing::Instrument;

use crate::distributed_lock::LockGuard;
use crate::engine::give_back::{InFlight, Resend, TokenScope};
pub(crate) use crate::engine::instances::Instances;
use crate::engine::instances::PerInstance;
use crate::engine::primitive::{Ask, Grant, Primitive};
use crate::engine::redlock;
use crate::engine::wait::{until_acquired, Attempt, Watches};
use crate::engine::watchdog::{self, Renewable};
use crate::error::{LockError, Result};
use crate::lost::{LostReason, LostSignal};
use crate::options::{validate_ttl, Fencing, LockOptions};
use crate::resource::{validate_prefix, LockKeys, PerResource, DEFAULT_PREFIX};
use crate::rt::BackgroundTask;
use crate::seam::store::{ExtendReply, LockStore, ReleaseOutcome};
use crate::seam::transport::Call;
use crate::token::{FencingToken, Token};
use crate::{rt, telemetry};

/// The `outcome` of a release that found its lock gone or taken while the guard still held it (within its validity):
/// deleted from under it, not overrun.
const DELETED_WHILE_HELD: &str = "deleted_while_held";

/// The instant the version checks' deadlines are counted from (see `Lock::wire_checked`).
fn wire_epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `at` in ms since [`wire_epoch`] (at least 1, so that 0 always means "ask").
fn since_wire_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(wire_epoch()).as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The default bound on one call to one store (acquire, release or extend), on top of the backend's own timeouts.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a resource's fencing counter lives after its last fence by default (see
/// [`Lock::with_fence_counter_expiry`]): a week, so a name locked once leaves no key behind for ever, and an expired
/// counter's next fence stays above every earlier one unless the server's clock steps back by more than a week.
pub const DEFAULT_FENCE_COUNTER_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest and longest idle expiry a fencing counter takes (see [`Lock::with_fence_counter_expiry`]).
const FENCE_COUNTER_EXPIRY_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(366 * 24 * 3600);

/// A distributed lock over one [`LockStore`] ([`Lock::new`]) or a quorum of independent ones
/// ([`Lock::redlock`]).
///
/// Cheap to clone (clones share the stores). Implements [`DistributedLock`](crate::DistributedLock); its inherent methods return the
/// concrete [`Guard`].
///
/// ```
/// use lock_core::{Lock, LockOptions, MemoryStore, ReleaseOutcome};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock = Lock::new(MemoryStore::new()).with_key_prefix("billing:lock:");
/// let guard = lock.acquire("customer-7", &LockOptions::new(Duration::from_secs(2))).await?;
/// let fence = guard.fence().await?; // drawn now: one round trip that checks the hold
/// // ... write to the protected resource, passing `fence` along ...
/// # let _ = fence;
/// assert_eq!(guard.release().await?, ReleaseOutcome::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Lock {
    instances: Arc<Instances>,
    prefix: Arc<str>,
    /// Where its keys live: this library's layout, or another library's (see [`KeyLayout`](crate::KeyLayout)).
    layout: crate::KeyLayout,
    operation_timeout: Duration,
    /// Until when every instance's answer about the protocol version under this prefix holds (see
    /// [`wire`](crate::wire)), in ms since [`wire_epoch`] (0: ask): the one atomic load a try makes for it.
    wire_checked: Arc<AtomicU64>,
    /// The fencing counters' idle expiry in ms as the scripts take it (`None`: for ever), or the out-of-range
    /// duration the caller asked for, refused at the next acquisition.
    fence_idle: std::result::Result<Option<Arc<str>>, Duration>,
}

impl Lock {
    /// A lock on one store with the default key prefix ([`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX), `wlp:`) and
    /// operation timeout.
    pub fn new(store: impl LockStore) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A lock over N independent instances (Redlock): see [`RedlockBuilder`](crate::RedlockBuilder) for the
    /// settings and the [`redlock`](crate::redlock) module for the algorithm and its limits.
    ///
    /// ```
    /// use lock_core::{Lock, LockStore, MemoryStore};
    /// use std::sync::Arc;
    ///
    /// let stores: Vec<Arc<dyn LockStore>> = (0..3).map(|_| Arc::new(MemoryStore::new()) as Arc<dyn LockStore>).collect();
    /// let lock = Lock::redlock(stores).with_quorum(2).build()?;
    /// assert_eq!(lock.quorum(), 2);
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn redlock(stores: Vec<Arc<dyn LockStore>>) -> crate::RedlockBuilder {
        crate::RedlockBuilder::new(stores)
    }

    /// A lock on one shared store.
    pub fn from_arc(store: Arc<dyn LockStore>) -> Self {
        Self::with_instances(Instances {
            stores: vec![store],
            quorum: 1,
            instance_timeout: None,
            wire: Default::default(),
        })
    }

    pub(crate) fn with_instances(instances: Instances) -> Self {
        crate::engine::wait::forward_wake_ups(&instances.stores);
        Lock {
            instances: Arc::new(instances),
            prefix: DEFAULT_PREFIX.into(),
            layout: crate::KeyLayout::native(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            wire_checked: Arc::default(),
            fence_idle: Ok(Some(DEFAULT_FENCE_COUNTER_EXPIRY.as_millis().to_string().into())),
        }
    }

    /// Keeps this lock's keys where another library keeps its own, so that the two exclude (and, where that library
    /// announces its releases, wake) each other: see [`KeyLayout`](crate::KeyLayout) for each library's layout.
    /// The default is this library's own ([`KeyLayout::native`](crate::KeyLayout::native)). A semaphore, a
    /// read-write lock and an election keep the native layout (their constructors refuse another).
    ///
    /// ```
    /// use lock_core::{KeyLayout, Lock, MemoryStore};
    /// let shared_with_python = Lock::new(MemoryStore::new()).with_layout(KeyLayout::python_redis_lock());
    /// # let _ = shared_with_python;
    /// ```
    pub fn with_layout(mut self, layout: crate::KeyLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Where this lock's keys live.
    pub fn layout(&self) -> &crate::KeyLayout {
        &self.layout
    }

    /// The keys of `resource` under this lock's prefix and layout, with its fencing counters' expiry.
    pub(crate) fn keys(&self, resource: &str) -> Result<LockKeys> {
        Ok(LockKeys::for_layout(&self.layout, &self.prefix, resource)?.with_fence_idle(self.fence_idle()?))
    }

    /// The fencing counters' idle expiry as the scripts take it (see [`with_fence_counter_expiry`]).
    ///
    /// [`with_fence_counter_expiry`]: Self::with_fence_counter_expiry
    pub(crate) fn fence_idle(&self) -> Result<Option<&Arc<str>>> {
        match &self.fence_idle {
            Ok(idle) => Ok(idle.as_ref()),
            Err(asked) => Err(LockError::invalid(format!(
                "a fencing counter's expiry must lie between 10 ms and 366 days (asked: {asked:?}); None keeps it"
            ))),
        }
    }

    /// How long a resource's fencing counter lives after the last fence drawn from it (default
    /// [`DEFAULT_FENCE_COUNTER_EXPIRY`], a week); `None` keeps every counter for ever, as protocol 1.1 did.
    ///
    /// Without an expiry, every name ever locked with a fence leaves one small key (a lock per customer over ten
    /// million customers: ten million keys). An expired counter costs no safety: the next fence starts again at the
    /// server's clock in µs (the floor that also survives a restart without persistence), above every fence drawn
    /// before, **as long as the server's clock never steps back by more than the expiry** (a failover to a replica
    /// whose clock is behind), and over Redlock as long as the clients' clocks agree with the servers' within half
    /// of it (see WIRE.md 5.5 and FAULTS.md). The expiry is refreshed at every fence, so a counter in use never
    /// expires, and a hold that outlives its counter draws its next fence anew, above its last. Counters another
    /// library counts from 1 (Redisson's) never expire, nor do a read-write lock's, whose readers read the last
    /// write's fence as their epoch. Each acquisition sends its own expiry, so the last lock to draw sets it. A
    /// short expiry is a tight clock assumption: keep it far above any step your clocks may take.
    ///
    /// An expiry under 10 ms or over 366 days makes every acquisition fail with [`LockError::InvalidArgument`].
    ///
    /// ```
    /// use lock_core::{Lock, MemoryStore};
    /// use std::time::Duration;
    ///
    /// // Per-customer locks over millions of customers: counters unused for a day go.
    /// let lock = Lock::new(MemoryStore::new()).with_fence_counter_expiry(Some(Duration::from_secs(24 * 3600)));
    /// # let _ = lock;
    /// ```
    pub fn with_fence_counter_expiry(mut self, expiry: Option<Duration>) -> Self {
        self.fence_idle = match expiry {
            None => Ok(None),
            Some(d) if FENCE_COUNTER_EXPIRY_RANGE.contains(&d) => Ok(Some(d.as_millis().to_string().into())),
            Some(d) => Err(d),
        };
        self
    }

    /// The keys of `resource` for `what`, a primitive whose release does nothing for another library's waiters:
    /// refused under a layout that needs it (see [`LockKeys::announces_for_a_peer`]).
    pub(crate) fn keys_without_peer_release(&self, what: &str, resource: &str) -> Result<LockKeys> {
        let keys = self.keys(resource)?;
        if keys.announces_for_a_peer() {
            return Err(LockError::invalid(format!(
                "{what} cannot tell another library's waiters of its releases as this key layout needs: use \
                 Lock::acquire, or a layout without announcements (plain, pottery, shedlock)"
            )));
        }
        Ok(keys)
    }

    /// Refuses another library's layout for `what` (a primitive that keeps this library's own).
    pub(crate) fn native_only(&self, what: &str) -> Result<()> {
        if self.layout.is_native() {
            return Ok(());
        }
        Err(LockError::invalid(format!("{what} keeps this library's own key layout: use a Lock without with_layout")))
    }

    /// Sets the prefix of every key this lock touches. A prefix containing `{` or `}` makes every acquisition fail
    /// with [`LockError::InvalidArgument`].
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().into();
        self.wire_checked = Arc::default();
        self
    }

    /// Bounds each call to a store (default [`DEFAULT_OPERATION_TIMEOUT`]).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The stores this lock runs on (one, or the Redlock instances in order).
    pub fn stores(&self) -> &[Arc<dyn LockStore>] {
        &self.instances.stores
    }

    /// How many stores must agree (1 for a single-instance lock).
    pub fn quorum(&self) -> usize {
        self.instances.quorum
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on each call to a store.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// What traces and metrics call this lock's deployment: its store's [`deployment`](LockStore::deployment)
    /// (`single`, `cluster`, `sentinel`, `memory`, …), or `redlock` over several instances.
    pub fn deployment(&self) -> &'static str {
        match self.instances.stores.as_slice() {
            [one] => one.deployment(),
            _ => "redlock",
        }
    }

    pub(crate) fn check(&self, options: &LockOptions) -> Result<()> {
        options.validate()?;
        validate_prefix(&self.prefix)?;
        if self.operation_timeout.is_zero() {
            return Err(LockError::invalid("operation timeout must be positive"));
        }
        if options.auto_renew().is_some() && rt::current().is_none() {
            return Err(LockError::NoRuntime("auto-renewal"));
        }
        Ok(())
    }

    /// Takes `target` once, without waiting: every primitive's try comes through here, so its `lock.try_acquire`
    /// span and its acquire metrics are the same for all, labelled by the primitive's kind.
    pub(crate) async fn try_take(&self, target: &Arc<dyn Primitive>, options: &LockOptions) -> Result<Attempt<Guard>> {
        // Timed only for the metrics (the try's validity has its own clock, started before its request leaves).
        let started = telemetry::RECORDS.then(Instant::now);
        let span = tracing::debug_span!(
            "lock.try_acquire",
            primitive = target.kind().as_str(),
            resource = target.label(),
            deployment = self.deployment(),
            ttl = ?options.ttl(),
            outcome = tracing::field::Empty,
        );
        let result = self.attempt(target, options).instrument(span.clone()).await;
        let outcome = match &result {
            Ok(Attempt::Acquired(_)) => "acquired",
            Ok(Attempt::Held { .. }) => "held",
            Err(err) => err.kind(),
        };
        span.record("outcome", outcome);
        if let Some(started) = started {
            let (kind, resource, elapsed) = (target.kind().as_str(), target.label(), started.elapsed());
            telemetry::acquire("try_acquire", outcome, kind, self.deployment(), resource, elapsed, Some(1));
        }
        result
    }

    /// Takes `target`, waiting up to the options' budget: every primitive's waiting acquire comes through here, so
    /// its `lock.acquire` span and its acquire metrics are the same for all, labelled by the primitive's kind.
    pub(crate) async fn take(&self, target: &Arc<dyn Primitive>, options: &LockOptions) -> Result<Guard> {
        // The wait's budget counts from here (and the metrics' duration).
        let started = Instant::now();
        let span = tracing::debug_span!(
            "lock.acquire",
            primitive = target.kind().as_str(),
            resource = target.label(),
            deployment = self.deployment(),
            ttl = ?options.ttl(),
            wait = ?options.wait(),
            outcome = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        let attempts = AtomicU32::new(0);
        let result = self.wait_for(target, started, options, &attempts).instrument(span.clone()).await;
        let outcome = result.as_ref().map_or_else(LockError::kind, |_| "acquired");
        // A fair wait counts no tries (its heartbeats are tries too, and say nothing about contention).
        let attempts = Some(attempts.load(Ordering::Relaxed)).filter(|n| *n > 0);
        span.record("outcome", outcome);
        if let Some(n) = attempts {
            span.record("attempts", n);
        }
        if telemetry::RECORDS {
            let (kind, resource, elapsed) = (target.kind().as_str(), target.label(), started.elapsed());
            telemetry::acquire("acquire", outcome, kind, self.deployment(), resource, elapsed, attempts);
        }
        result
    }

    /// Tries `target` until acquired or out of budget (see [`acquire`](Self::acquire)), counting the tries in
    /// `attempts`.
    async fn wait_for(
        &self,
        target: &Arc<dyn Primitive>,
        started: Instant,
        options: &LockOptions,
        attempts: &AtomicU32,
    ) -> Result<Guard> {
        // A release notification from any instance, of any of the resources, is a hint to try again; each try polls
        // all of them.
        let stores = &self.instances.stores;
        let waited = match options.fair_queue() {
            Some(waiter_ttl) if target.queued() && !options.wait().is_zero() => {
                // Boxed: the fair wait must not grow every acquire's future (async-std runs tests on small stacks).
                Box::pin(crate::engine::fair::until_granted(self, target, options, waiter_ttl)).await
            }
            _ => {
                let channels: PerResource<&str> = target.resources().iter().map(LockKeys::channel).collect();
                let attempt = || {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    self.attempt(target, options)
                };
                let heard = crate::engine::wait::Heard::of(target.resources());
                // Boxed as the fair wait is: a wait's future holds every try's, and would grow every caller's.
                Box::pin(until_acquired(
                    target.label(),
                    started,
                    options,
                    stores,
                    &channels,
                    heard,
                    target.demand(),
                    attempt,
                ))
                .await
            }
        };
        let (guard, watch) = match waited {
            Err(LockError::Contended { resource, waited, .. }) if !options.wait().is_zero() => {
                let (never_expires, found) = self.why_held(target, options).await;
                return Err(LockError::Contended { resource, waited, never_expires, found });
            }
            other => other?,
        };
        // A holder that had to wait keeps its place on the release channel until it releases: the channel stays
        // subscribed across a hand-off (no UNSUBSCRIBE + SUBSCRIBE each time), and a newcomer (the last holder
        // coming straight back, say) queues behind instead of trying a lock that is held, until the holder's validity
        // deadline (a holder whose key expired holds nobody back).
        if let Some(watch) = &watch {
            watch.acquired(!target.shared(), guard.valid_until());
        }
        *lock_mutex(&guard.state.watch) = watch;
        Ok(guard)
    }

    /// Why the one lock key a wait gave up on stayed taken, asked only when a wait ends in contention so that the
    /// error can say it (a try asks nothing more): `TYPE` and `PTTL` on each instance. Whatever sits at the key holds
    /// the lock (another library's token, a Redisson hash); a value no lock of any library writes (a list, a set,
    /// a sorted set, a stream) is named with its key ("a list sits at `wlp:{customer:9}`"), since no holder's release
    /// will free it; a key without expiry is said to be one (another library's holder that took it without a TTL,
    /// which, crashed, blocks it forever). Any error answers "not known", as the wait's own error stands.
    async fn why_held(&self, target: &Arc<dyn Primitive>, options: &LockOptions) -> (bool, Option<(String, String)>) {
        let [keys] = target.resources() else { return (false, None) };
        let call_keys = [keys.lock()];
        let bound = self.call_timeout(options.ttl());
        let (mut never_expires, mut found) = (false, None);
        for store in &self.instances.stores {
            let call = Call::plain("type", "TYPE", &call_keys, &[]);
            if let Ok(Ok(ran)) = crate::rt::timeout("type", bound, store.call(call)).await {
                if let Some(kind) = ran.reply.as_text().filter(|t| !["none", "string", "hash"].contains(t)) {
                    found = Some((kind.to_owned(), keys.lock().to_owned()));
                }
            }
            let call = Call::plain("pttl", "PTTL", &call_keys, &[]);
            if let Ok(Ok(ran)) = crate::rt::timeout("pttl", bound, store.call(call)).await {
                never_expires |= ran.reply.as_int() == Some(-1);
            }
        }
        (never_expires, found)
    }

    /// The bound on one call to one instance for a lock with `ttl`.
    pub(crate) fn call_timeout(&self, ttl: Duration) -> Duration {
        self.instances.call_timeout(ttl, self.operation_timeout)
    }

    /// The lock server(s).
    pub(crate) fn instances(&self) -> &Arc<Instances> {
        &self.instances
    }

    /// One try: one round trip to each instance, concurrently, plus (Redlock with fencing, when the quorum's counters
    /// disagree) one fence write-back.
    pub(crate) async fn attempt(&self, target: &Arc<dyn Primitive>, options: &LockOptions) -> Result<Attempt<Guard>> {
        self.attempt_as(target, options, None).await
    }

    /// One try; with `queued` (a fair lock's waiter), under its token, taking or keeping its place in the queue
    /// (and renewing its peers') when not granted. A queued try gives nothing back, whatever it may hold (a grant
    /// that failed or came too late to use): its waiter's next try sends the same token and gets the same grant, and
    /// the waiter gives the token back when it stops waiting (see `give_back::may_give_back`).
    pub(crate) async fn attempt_as(
        &self,
        target: &Arc<dyn Primitive>,
        options: &LockOptions,
        queued: Option<crate::engine::fair::Queued<'_>>,
    ) -> Result<Attempt<Guard>> {
        let ttl = options.ttl();
        let inst = &self.instances;
        let n = inst.n();
        let call_timeout = self.call_timeout(ttl);
        // A waiter that queues sends its token with every try: whether this try's grant may be given back is
        // decided by its scope (see `give_back::may_give_back`).
        let (token, scope) = match queued {
            Some(q) => (q.token.clone(), TokenScope::WaitersTry),
            None => (Token::generate_for(options), TokenScope::Try),
        };
        let inflight = InFlight::new(inst.clone(), target.clone(), token, scope, ttl, call_timeout);
        // A token on demand is drawn later by `FENCE`, which needs one instance and the plain lock key; elsewhere it
        // is drawn with the grant.
        let (fencing, on_demand) = match options.fencing_mode() {
            Fencing::OnDemand if n == 1 && target.draws_fence_later() => (false, true),
            mode => (mode != Fencing::Off, false),
        };
        // The validity clock starts before the first request leaves.
        let started = Instant::now();
        let ask = Ask {
            token: inflight.token(),
            ttl,
            fencing,
            // One floor for every instance (see the Redlock docs): instances in step return equal values, and
            // a quorum of equal values needs no write-back.
            fence_floor: (n > 1 && fencing).then(redlock::fence_floor).flatten(),
            replicas: options.replica_ack(),
            queued: queued.map(|q| q.peers),
        };
        let mut tally = Tally::default();
        let wire = (self.layout.is_native() && self.wire_checked.load(Ordering::Relaxed) <= since_wire_epoch(started))
            .then_some(&self.prefix);
        // The calls still unanswered are dropped (cancelled) at the end of this block.
        let answered = {
            let mut replies =
                std::pin::pin!(FanOut::new(inst.stores.iter().enumerate().map(|(i, store)| async move {
                    // Before the first grant under this prefix on this instance: the keys' protocol version
                    // (another major version is refused before anything is written).
                    if let Some(prefix) = wire {
                        if let Err(err) = inst.wire.check(i, store.as_ref(), prefix, n, call_timeout).await {
                            return (i, Err(err));
                        }
                    }
                    let call = target.acquire(store.as_ref(), ask);
                    let replicas = ask.replicas.is_some();
                    (
                        i,
                        bounded("acquire", call_timeout, store.as_ref(), &**target, replicas, call)
                            .await
                            .and_then(|r| r)
                            .map_err(|err| err.at("acquire", store.server())),
                    )
                })));
            while let Some((i, reply)) = replies.as_mut().next().await {
                tally.add(i, reply);
                // Decide as soon as the outcome is known; never wait for the slowest instance.
                if tally.granted.len() >= inst.quorum || tally.granted.len() + replies.len() < inst.quorum {
                    break;
                }
            }
            n - replies.len()
        };
        if wire.is_some() {
            if let Some(until) = inst.wire.checked_until(&self.prefix) {
                self.wire_checked.store(since_wire_epoch(until), Ordering::Relaxed);
            }
        }

        if tally.granted.len() < inst.quorum {
            // Granted somewhere, unanswered, or failed after the request left (a server error after the SET, a
            // refused WAIT, a timeout, a dropped connection): give it back everywhere. Only "held" replies and
            // errors raised before sending mean nothing of ours exists.
            let maybe_ours =
                !tally.granted.is_empty() || answered < n || tally.errors.iter().any(LockError::may_follow_a_write);
            if maybe_ours {
                inflight.release_now().await;
            } else {
                inflight.disarm();
            }
            return tally.failure(target.label(), inst.quorum, n, answered);
        }

        let valid_until = target.valid_until(started, ttl);
        let exhausted = |inflight: InFlight| async move {
            let elapsed = started.elapsed();
            inflight.release_now().await;
            tracing::debug!(resource = target.label(), ?elapsed, "grant arrived after its validity; not used");
            Err(LockError::ValidityExhausted { resource: target.label().to_owned(), elapsed })
        };
        // Per resource: the largest counter any granting instance returned.
        let resources = target.resources().len();
        let fences: PerResource<Option<u64>> = (0..resources)
            .map(|r| tally.granted.iter().filter_map(|(_, f)| f.get(r).copied().flatten()).max())
            .collect();
        if n > 1 && fences.iter().any(Option::is_some) {
            // See the Redlock docs: t = max over the quorum (per resource), written back before use to the granting
            // instances whose counter is below it (none, when the quorum's counters were in step).
            let (at_t, behind): (Vec<_>, Vec<_>) = tally.granted.iter().partition(|(_, f)| *f == fences);
            let raised = if behind.is_empty() {
                0
            } else if Instant::now() >= valid_until {
                // No write-back for a grant that cannot be used any more.
                return exhausted(inflight).await;
            } else {
                raise_fences(inst, &**target, inflight.token(), &fences, call_timeout, &behind).await
            };
            if at_t.len() + raised < inst.quorum {
                if Instant::now() >= valid_until {
                    return exhausted(inflight).await;
                }
                inflight.release_now().await;
                let granted = at_t.len() + raised;
                return Err(LockError::Quorum { granted, required: inst.quorum, total: n });
            }
        }
        // One reading for the last validity check and the guard's clocks (each reading costs; they are microseconds
        // apart at most).
        let now = Instant::now();
        if now >= valid_until {
            return exhausted(inflight).await;
        }
        let token = inflight.disarm();
        let held_on: PerInstance<usize> = tally.granted.iter().map(|(i, _)| *i).collect();
        tracing::debug!(resource = target.label(), fence = fences.first().copied().flatten(), instances = ?held_on, "lock acquired");
        let fences = fences.into_iter().map(|f| f.map(FencingToken::new)).collect();
        let renew_at = options.auto_renew().map(|policy| started + policy.interval(ttl));
        let held = Held { token, fences, on_demand, held_on, valid_until, call_timeout, started, renew_at };
        Ok(Attempt::Acquired(self.hold(target, options, held, now)))
    }

    /// The guard of a lock a fair queue's release granted to our waiter holding `token` (see
    /// [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE)): held from the grant's lease, counted from `granted.since`,
    /// and extended to the full TTL in the background when the lease was shorter. `None` when the announcement
    /// cannot be used (no time to count from, no token where one was asked for, the lease already spent, replica
    /// acknowledgement asked for): the waiter's next try then returns the grant.
    pub(crate) fn granted(
        &self,
        target: &Arc<dyn Primitive>,
        options: &LockOptions,
        token: &Token,
        granted: crate::seam::notify::Granted,
    ) -> Option<Guard> {
        // The release's write was not acknowledged by replicas: a waiter that asked for that claims the grant with a
        // try, whose replica acknowledgement (`WAIT`, after a write of its own) covers the grant before it.
        if options.replica_ack().is_some() {
            return None;
        }
        let since = granted.since?;
        let lease = target.fair_lease(options.ttl())?;
        let (fences, on_demand) = match (options.fencing_mode(), granted.fence) {
            (Fencing::OnAcquire, Some(fence)) => (smallvec::smallvec![Some(FencingToken::new(fence))], false),
            (Fencing::OnAcquire, None) => return None,
            (Fencing::OnDemand, _) => (smallvec::smallvec![None], true),
            (Fencing::Off, _) => (smallvec::smallvec![None], false),
        };
        let valid_until = target.valid_until(since, lease);
        let now = Instant::now();
        if now >= valid_until {
            return None;
        }
        let ttl = options.ttl();
        // A lease shorter than the TTL is extended at once (by the watchdog, once, when nothing renews the lock).
        let renew_at = match options.auto_renew() {
            Some(policy) if lease >= ttl => Some(since + policy.interval(ttl)),
            _ if lease < ttl => Some(now),
            _ => None,
        };
        let fence = fences.first().copied().flatten().map(FencingToken::get);
        tracing::debug!(resource = target.label(), fence, ?lease, "lock granted by a release");
        let call_timeout = self.call_timeout(ttl);
        let held = Held {
            token: token.clone(),
            fences,
            on_demand,
            held_on: smallvec::smallvec![0],
            valid_until,
            call_timeout,
            started: since,
            renew_at,
        };
        Some(self.hold(target, options, held, now))
    }

    /// A guard for a lock just acquired, its validity checked at `now`.
    fn hold(&self, target: &Arc<dyn Primitive>, options: &LockOptions, held: Held, now: Instant) -> Guard {
        let inst = &self.instances;
        let deployment = self.deployment();
        // The guard's own span: the watchdog runs in it, and it lives as long as the guard, so it is not a child of
        // the acquire's span (which would then stay open) but follows from it.
        let fence = held.fences.first().copied().flatten().map(FencingToken::get);
        let span = tracing::debug_span!(parent: None, "lock.held", resource = target.label(), deployment, fence);
        span.follows_from(tracing::Span::current());
        let state = Arc::new(GuardState {
            granted_at: now,
            deployment,
            span,
            instances: inst.clone(),
            call_timeout: held.call_timeout,
            target: target.clone(),
            token: held.token,
            fences: held.fences,
            on_demand: held.on_demand,
            drawn: std::sync::OnceLock::new(),
            lost: LostSignal::new(held.valid_until),
            // The grant was applied before its reply arrived: the key expires within a TTL from now.
            server_expiry: Mutex::new(later(now, options.ttl())),
            held_on: Mutex::new(held.held_on),
            extending: futures_util::lock::Mutex::new(()),
            stopping: AtomicBool::new(false),
            watchdog: Mutex::new(None),
            watch: Mutex::new(None),
            runtime: rt::current(),
        });
        telemetry::held(target.kind().as_str(), deployment, 1.0);
        if let Some(first) = held.renew_at {
            let weak: Weak<dyn Renewable> = Arc::downgrade(&state) as Weak<dyn Renewable>;
            let policy = options.auto_renew();
            let task = watchdog::start(weak, options.ttl(), policy, held.started, first, state.span.clone());
            *lock_mutex(&state.watchdog) = task;
        }
        Guard { state, released: false }
    }
}

/// What a new guard holds (see [`Lock::hold`]).
struct Held {
    token: Token,
    /// Each resource's fencing token, when drawn with the grant.
    fences: PerResource<Option<FencingToken>>,
    on_demand: bool,
    /// The instances that granted it.
    held_on: PerInstance<usize>,
    valid_until: Instant,
    call_timeout: Duration,
    /// When the request that the validity counts from started.
    started: Instant,
    /// When the watchdog first extends it (none: no watchdog).
    renew_at: Option<Instant>,
}

/// `call` (one operation on `target` through `store`) bounded by `after`: by a timer of the engine's, or by the
/// store's own bound when that is no longer and covers the call (one store call, no replica acknowledgement; see
/// [`LockStore::call_bound`]), which saves a timer per call.
fn bounded<F: std::future::Future>(
    operation: &'static str,
    after: Duration,
    store: &dyn LockStore,
    target: &dyn Primitive,
    waits_for_replicas: bool,
    call: F,
) -> rt::Timed<F> {
    let store_bounds_it =
        !waits_for_replicas && target.is_one_call() && store.call_bound().is_some_and(|bound| bound <= after);
    if store_bounds_it {
        rt::untimed(call)
    } else {
        rt::timeout(operation, after, call)
    }
}

pin_project_lite::pin_project! {
    /// Calls to every instance, run concurrently, yielding replies as they arrive. With one instance (the common
    /// case) it is just that one future, polled where it lies: no task set, no allocation, and no copy of its state
    /// (an acquire's call is a few kB).
    #[project = FanOutProj]
    enum FanOut<F: std::future::Future> {
        One { #[pin] call: F, done: bool },
        Many { calls: FuturesUnordered<F> },
    }
}

impl<F: std::future::Future> FanOut<F> {
    fn new(calls: impl ExactSizeIterator<Item = F>) -> Self {
        let mut calls = calls;
        match (calls.len(), calls.next()) {
            (1, Some(call)) => FanOut::One { call, done: false },
            (_, first) => FanOut::Many { calls: first.into_iter().chain(calls).collect() },
        }
    }

    /// The next reply, `None` once every call answered.
    fn next(mut self: Pin<&mut Self>) -> impl std::future::Future<Output = Option<F::Output>> + '_ {
        std::future::poll_fn(move |cx| match self.as_mut().project() {
            FanOutProj::One { done: true, .. } => Poll::Ready(None),
            FanOutProj::One { call, done } => call.poll(cx).map(|reply| {
                *done = true;
                Some(reply)
            }),
            FanOutProj::Many { calls } => calls.poll_next_unpin(cx),
        })
    }

    /// Calls not answered yet.
    fn len(&self) -> usize {
        match self {
            FanOut::One { done, .. } => usize::from(!*done),
            FanOut::Many { calls } => calls.len(),
        }
    }
}

/// Replies of one acquire fan-out.
#[derive(Default)]
struct Tally {
    /// Instances that granted, with the fencing counter of each resource.
    granted: PerInstance<(usize, PerResource<Option<u64>>)>,
    held: usize,
    holder_ttl: Option<Duration>,
    /// The holder's label, when an instance reported one (a job's).
    holder: Option<String>,
    /// Our place in a fair lock's queue.
    place: Option<u64>,
    /// Which resource (index into the target's resources) the first "held" reply named.
    blocked: Option<usize>,
    errors: Vec<LockError>,
}

impl Tally {
    fn add(&mut self, instance: usize, reply: Result<Grant>) {
        match reply {
            Ok(Grant::Acquired { fences }) => self.granted.push((instance, fences)),
            Ok(Grant::Held { index, ttl, holder, place }) => {
                self.holder = self.holder.take().or(holder);
                self.place = self.place.or(place);
                self.blocked = self.blocked.or(Some(index));
                // Which resource of a set blocked it (always 0 for a single lock).
                tracing::trace!(instance, blocked_by = index, "held by another owner");
                self.held += 1;
                self.holder_ttl = match (self.holder_ttl, ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            Err(err) => {
                tracing::debug!(instance, error = %err.report(), "acquire failed on an instance");
                self.errors.push(err);
            }
        }
    }

    /// Why an attempt without quorum failed: contention (retry later), or errors.
    /// The "held" answer these replies add up to.
    fn held<G>(self) -> Attempt<G> {
        Attempt::Held { holder_ttl: self.holder_ttl, holder: self.holder, place: self.place, blocked: self.blocked }
    }

    fn failure<G>(mut self, resource: &str, quorum: usize, n: usize, answered: usize) -> Result<Attempt<G>> {
        if self.held > n - quorum {
            tracing::debug!(resource, holder_ttl = ?self.holder_ttl, "lock held by another owner");
            return Ok(self.held());
        }
        if n == 1 {
            if let Some(err) = self.errors.pop() {
                return Err(err);
            }
        }
        // A foreign key type or bad credentials will not fix themselves: say so rather than "no quorum".
        if let Some(pos) = self.errors.iter().position(|e| !e.is_retryable()) {
            return Err(self.errors.swap_remove(pos));
        }
        if self.held > 0 {
            // Another owner holds it where we could look, and the rest did not answer (or failed): that is
            // contention, to wait out with notifications, not an outage. (The attempt stops as soon as the quorum
            // is out of reach, so the instances left unasked may well say "held" too.)
            tracing::trace!(resource, held = self.held, errors = self.errors.len(), "lock held; others unreachable");
            return Ok(self.held());
        }
        tracing::debug!(resource, granted = self.granted.len(), answered, quorum, "no quorum");
        Err(LockError::Quorum { granted: self.granted.len(), required: quorum, total: n })
    }
}

/// Writes each resource's fencing floor `t[r]` back to the instances that granted below it; returns how many
/// instances accepted every raise they needed.
async fn raise_fences(
    inst: &Instances,
    target: &dyn Primitive,
    token: &Token,
    t: &[Option<u64>],
    call_timeout: Duration,
    granted: &[&(usize, PerResource<Option<u64>>)],
) -> usize {
    let raises =
        granted.iter().filter_map(|(i, got)| Some((inst.stores.get(*i)?, got))).map(|(store, got)| async move {
            for (r, keys) in target.resources().iter().enumerate() {
                let (Some(want), have) = (t.get(r).copied().flatten(), got.get(r).copied().flatten()) else { continue };
                if have == Some(want) {
                    continue;
                }
                let raised =
                    rt::timeout("raise-fence", call_timeout, target.raise_fence(store.as_ref(), keys, token, want));
                let raised = raised.await;
                if !matches!(raised, Ok(Ok(true))) {
                    return false;
                }
            }
            true
        });
    futures_util::future::join_all(raises).await.into_iter().filter(|ok| *ok).count()
}

/// `at + by`; TTLs and timeouts are validated far below what an `Instant` holds, so `at` itself (a resend that
/// stops at once: the TTL applies) is only ever a fallback.
fn later(at: Instant, by: Duration) -> Instant {
    at.checked_add(by).unwrap_or(at)
}

fn lock_mutex<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the value consistent, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("stores", &self.instances.stores)
            .field("quorum", &self.instances.quorum)
            .field("prefix", &self.prefix)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

/// Counts of what a release found on each instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Instances where our key was deleted.
    pub released: usize,
    /// Instances where the key was already gone.
    pub expired: usize,
    /// Instances where another owner's key was found (and left alone).
    pub owned_by_other: usize,
    /// Instances that did not answer.
    pub failed: usize,
}

impl ReleaseReport {
    /// The outcome as one value: `Released` if our key was deleted on a quorum (or anywhere, when no other owner
    /// was seen), `OwnedByOther` if another owner holds it somewhere, else `AlreadyExpired`.
    pub fn outcome(&self, quorum: usize) -> ReleaseOutcome {
        if self.released >= quorum {
            ReleaseOutcome::Released
        } else if self.owned_by_other > 0 {
            ReleaseOutcome::OwnedByOther
        } else if self.released > 0 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::AlreadyExpired
        }
    }
}

struct GuardState {
    /// When the grant arrived (for the hold-time metric).
    granted_at: Instant,
    /// What traces and metrics call the deployment.
    deployment: &'static str,
    /// The guard's span (`lock.held`): the watchdog's renewals run in it.
    span: tracing::Span,
    instances: Arc<Instances>,
    call_timeout: Duration,
    target: Arc<dyn Primitive>,
    token: Token,
    /// Each resource's fencing token, in the target's order, when drawn with the grant.
    fences: PerResource<Option<FencingToken>>,
    /// Whether the (single) token is drawn on demand ([`Fencing::OnDemand`]), into `drawn`.
    on_demand: bool,
    drawn: std::sync::OnceLock<FencingToken>,
    lost: LostSignal,
    /// When our key has expired on every server at the latest, whatever became of the calls that set its TTL: an
    /// extension applied whose reply was lost, or came after the validity deadline, is not counted in `lost`'s
    /// deadline but keeps the key on the server. Only raised. A release that got no answer is sent again until then
    /// (explorer seed 1592592368: it gave up at the validity and left the key for the extension's whole TTL).
    server_expiry: Mutex<Instant>,
    /// Instances where our key was last confirmed (granted, or extended).
    held_on: Mutex<PerInstance<usize>>,
    /// Extensions are serialized so the deadline always matches the last TTL the servers applied; release takes it
    /// too, so no extension is in flight when the release is sent.
    extending: futures_util::lock::Mutex<()>,
    /// Set before release: no extension starts after it.
    stopping: AtomicBool,
    watchdog: Mutex<Option<BackgroundTask>>,
    /// The release-channel registration of a holder that waited (see [`Lock::acquire`]); dropped at release.
    watch: Mutex<Option<Watches>>,
    /// The runtime the lock was acquired on: a release on drop runs there, wherever the guard is dropped (the
    /// store's connections may only work on that runtime).
    runtime: Option<rt::Runtime>,
}

impl GuardState {
    fn lost_error(&self, reason: LostReason) -> LockError {
        LockError::Lost { resource: self.target.label().to_owned(), reason }
    }

    /// The single resource's token, drawn with the grant or on demand.
    fn fencing_token(&self) -> Option<FencingToken> {
        self.fences.first().copied().flatten().or_else(|| self.drawn.get().copied())
    }

    async fn fence(&self) -> Result<FencingToken> {
        if let Some(fence) = self.fencing_token() {
            return Ok(fence);
        }
        if !self.on_demand {
            return Err(LockError::invalid(format!(
                "no fencing token: the lock on {:?} was acquired with fencing off",
                self.target.label()
            )));
        }
        // Serialized with extensions and the release: one draw at a time, none after the release started.
        let _serial = self.extending.lock().await;
        if let Some(fence) = self.drawn.get() {
            return Ok(*fence);
        }
        if self.stopping.load(Ordering::SeqCst) {
            return Err(self.lost_error(LostReason::Released));
        }
        if let Some(reason) = self.lost.reason() {
            return Err(self.lost_error(reason));
        }
        let (Some(store), Some(keys)) = (self.instances.stores.first(), self.target.resources().first()) else {
            return Err(LockError::invalid("no store to draw a fencing token from"));
        };
        let call_keys = [keys.lock(), keys.fence()];
        let args = [self.token.as_str(), keys.fence_idle()];
        let call = Call::script("fence", &crate::seam::scripts::FENCE, &call_keys, &args);
        let ran = bounded("fence", self.call_timeout, store.as_ref(), &*self.target, false, store.call(call))
            .await
            .and_then(|r| r)
            .map_err(|err| err.at("fence", store.server()))?;
        match ran.reply.as_int() {
            Some(drawn) if drawn > 0 => {
                let fence = FencingToken::new(drawn.unsigned_abs());
                tracing::trace!(resource = self.target.label(), %fence, "fencing token drawn");
                Ok(*self.drawn.get_or_init(|| fence))
            }
            Some(0 | -1) => {
                if self.lost.mark(LostReason::NotHeld) {
                    self.note_lost(LostReason::NotHeld);
                    tracing::warn!(
                        resource = self.target.label(),
                        "lock lost: drawing its fencing token found it gone"
                    );
                }
                Err(self.lost_error(LostReason::NotHeld))
            }
            _ => Err(LockError::backend(format!("unexpected reply to the fence script: {:?}", ran.reply))),
        }
    }

    async fn extend(&self, ttl: Duration) -> Result<Instant> {
        let span = tracing::debug_span!(
            "lock.extend",
            resource = self.target.label(),
            deployment = self.deployment,
            ttl = ?ttl,
            outcome = tracing::field::Empty,
        );
        let result = self.extend_now(ttl).instrument(span.clone()).await;
        span.record("outcome", result.as_ref().map_or_else(LockError::kind, |_| "extended"));
        result
    }

    /// Counts a loss this guard's own calls (or its watchdog) detected.
    fn note_lost(&self, reason: LostReason) {
        telemetry::lost(
            telemetry::lost_reason(reason),
            self.target.kind().as_str(),
            self.deployment,
            self.target.label(),
        );
    }

    async fn extend_now(&self, ttl: Duration) -> Result<Instant> {
        validate_ttl(ttl)?;
        let _serial = self.extending.lock().await;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(self.lost_error(LostReason::Released));
        }
        if let Some(reason) = self.lost.reason() {
            return Err(self.lost_error(reason));
        }
        let inst = &self.instances;
        let (n, quorum) = (inst.n(), inst.quorum);
        let started = Instant::now();
        // Whatever its outcome, this extension may be applied up to a call timeout from now.
        self.may_expire_at(later(started, self.call_timeout.saturating_add(ttl)));
        // A shorter TTL takes effect on an instance as soon as its extension is applied, which an error (a lost
        // reply) or a cancellation can hide: from here on the holder trusts the lock only until the earlier of its
        // current deadline and this extension's.
        self.lost.shorten(self.target.valid_until(started, ttl));
        let (mut extended, mut gone, mut errors) = (PerInstance::new(), 0, Vec::new());
        // The resources some instance found gone or taken (a multi-resource lock extends all or nothing).
        let mut missing: Vec<&str> = Vec::new();
        // The calls still unanswered are dropped (cancelled) at the end of this block.
        {
            let mut replies =
                std::pin::pin!(FanOut::new(inst.stores.iter().enumerate().map(|(i, store)| async move {
                    let extend = self.target.extend(store.as_ref(), &self.token, ttl);
                    (
                        i,
                        bounded("extend", self.call_timeout, store.as_ref(), &*self.target, false, extend)
                            .await
                            .and_then(|r| r)
                            .map_err(|err| err.at("extend", store.server())),
                    )
                })));
            while let Some((i, reply)) = replies.as_mut().next().await {
                match reply {
                    Ok(held) if held.iter().all(|r| *r == ExtendReply::Extended) => extended.push(i),
                    Ok(held) => {
                        gone += 1;
                        for (keys, reply) in self.target.resources().iter().zip(&held) {
                            if *reply != ExtendReply::Extended && !missing.contains(&keys.resource()) {
                                missing.push(keys.resource());
                            }
                        }
                    }
                    Err(err) => errors.push(err),
                }
                if extended.len() >= quorum || gone > n - quorum {
                    break;
                }
            }
        }
        if extended.len() >= quorum {
            let until = self.target.valid_until(started, ttl);
            self.lost.prolong(until).map_err(|reason| self.lost_error(reason))?;
            *lock_mutex(&self.held_on) = extended;
            tracing::trace!(resource = self.target.label(), ?ttl, "lock extended");
            return Ok(until);
        }
        if gone > n - quorum {
            if self.lost.mark(LostReason::NotHeld) {
                self.note_lost(LostReason::NotHeld);
                tracing::warn!(resource = self.target.label(), ?missing, "lock lost: extension found it gone");
            }
            // Name the resource that was lost (for a single lock, the resource itself).
            let resource = missing.first().copied().unwrap_or(self.target.label());
            return Err(LockError::Lost { resource: resource.to_owned(), reason: LostReason::NotHeld });
        }
        match errors.pop() {
            Some(err) if n == 1 => Err(err),
            _ => Err(LockError::Quorum { granted: extended.len(), required: quorum, total: n }),
        }
    }

    /// Stops the watchdog and marks the lock released (synchronous part of release and drop). Returns whether the
    /// guard still held it until now: not lost, and within its validity.
    fn stop(&self) -> bool {
        let first = !self.stopping.swap(true, Ordering::SeqCst);
        let lost = self.lost.reason();
        // A deadline that passed unnoticed (no watchdog, no extend) is a loss too; the others were counted where
        // they were found.
        if first && lost == Some(LostReason::Expired) {
            self.note_lost(LostReason::Expired);
            tracing::warn!(resource = self.target.label(), "lock lost: its validity deadline passed while held");
        }
        self.lost.mark(LostReason::Released);
        drop(lock_mutex(&self.watchdog).take());
        drop(lock_mutex(&self.watch).take());
        lost.is_none()
    }

    /// Compare-and-delete on every instance, after any extension in flight has finished: one report per resource.
    /// Traced, counted, and a release that finds the lock expired or taken is a warning: the holder overran its TTL.
    /// `believed`: whether the guard still held it as this release leaves, when the caller knows (it just stopped the
    /// guard); else it is read here.
    async fn release(&self, believed: Option<bool>) -> Result<PerResource<ReleaseReport>> {
        let span = tracing::debug_span!(
            "lock.release",
            resource = self.target.label(),
            deployment = self.deployment,
            outcome = tracing::field::Empty,
        );
        // Read only where it is reported (a clock read of every release otherwise).
        let held = || self.granted_at.elapsed();
        // Whether this guard still believed it held when its release left: not lost before (`stop` marked it
        // released, which a loss found earlier keeps), and within its validity. A release that then finds the lock
        // gone was deleted from under it, not overrun (review 4: a forced release was reported as a holder that
        // overran its TTL).
        let believed = believed.unwrap_or_else(|| {
            self.lost.reason() == Some(LostReason::Released) && Instant::now() < self.lost.valid_until()
        });
        let result = self.release_now().instrument(span.clone()).await;
        let quorum = self.instances.quorum;
        match &result {
            Ok(reports) => {
                // One outcome for the span, however many resources: the first that was not released, else released.
                let mut spanned: Option<&'static str> = None;
                for (keys, report) in self.target.resources().iter().zip(reports) {
                    let outcome = report.outcome(quorum);
                    let name = match outcome {
                        ReleaseOutcome::Released => outcome.label(),
                        _ if believed => DELETED_WHILE_HELD,
                        _ => outcome.label(),
                    };
                    if spanned.is_none_or(|s| s == ReleaseOutcome::Released.label()) {
                        spanned = Some(name);
                    }
                    if telemetry::RECORDS {
                        telemetry::release(name, self.target.kind().as_str(), self.deployment, keys.resource(), held());
                    }
                    match (outcome, believed) {
                        (ReleaseOutcome::Released, _) => {}
                        (_, true) => tracing::warn!(
                            resource = keys.resource(),
                            outcome = name,
                            held = ?held(),
                            "lock deleted while held: the release found it gone or taken before its validity ended \
                             (a forced release, another client's delete, or a failover that lost it)"
                        ),
                        (_, false) => tracing::warn!(
                            resource = keys.resource(),
                            outcome = name,
                            held = ?held(),
                            "lock held past its TTL: the release found it expired or taken by another owner"
                        ),
                    }
                }
                if let Some(outcome) = spanned {
                    span.record("outcome", outcome);
                }
            }
            Err(err) => {
                span.record("outcome", err.kind());
                if telemetry::RECORDS {
                    let (kind, resource) = (self.target.kind().as_str(), self.target.label());
                    telemetry::release(err.kind(), kind, self.deployment, resource, held());
                }
            }
        }
        result
    }

    async fn release_now(&self) -> Result<PerResource<ReleaseReport>> {
        let _serial = self.extending.lock().await;
        let single = self.instances.n() == 1;
        let resources = self.target.resources();
        // Local waiters listen on every instance's hub, so one wake-up per released resource reaches them (more would
        // wake a waiter per instance for one release). It is sent by the instance whose reply makes a quorum of
        // instances free of our key: a waiter woken at the first would try the others before their releases had
        // run, miss the quorum and sleep until its backoff, since the later releases' announcements are our own
        // echoes, which the hubs ignore. (Seen as a rare redlock-5 conformance failure under load.)
        let quorum = self.instances.quorum;
        let freed: PerResource<AtomicUsize> = resources.iter().map(|_| AtomicUsize::new(0)).collect();
        let freed = &freed;
        let releases = self.instances.stores.iter().enumerate().map(|(i, store)| async move {
            (i, self.release_on(store.as_ref(), resources, quorum, freed, single).await)
        });
        let mut reports: PerResource<ReleaseReport> = smallvec::smallvec![ReleaseReport::default(); resources.len()];
        let (mut failed, mut last_error, mut unconfirmed) = (0, None, Vec::new());
        let mut replies = std::pin::pin!(FanOut::new(releases));
        while let Some((i, reply)) = replies.as_mut().next().await {
            match reply {
                Ok(outcomes) => {
                    for (report, outcome) in reports.iter_mut().zip(outcomes) {
                        match outcome {
                            ReleaseOutcome::Released => report.released += 1,
                            ReleaseOutcome::OwnedByOther => report.owned_by_other += 1,
                            _ => report.expired += 1,
                        }
                    }
                }
                Err(err) => {
                    failed += 1;
                    reports.iter_mut().for_each(|report| report.failed += 1);
                    if err.is_retryable() {
                        unconfirmed.push(i);
                    }
                    last_error = Some(err);
                }
            }
        }
        if !unconfirmed.is_empty() {
            self.resend_release(unconfirmed);
        }
        if !self.target.wakes_head_only() {
            // Fewer instances than a quorum answered "free" (the others failed): wake a local waiter anyway, as the
            // first answer would have; its try finds out.
            let hub = self.instances.stores.iter().find_map(|store| store.release_hub());
            for (keys, freed) in resources.iter().zip(freed) {
                let freed = freed.load(Ordering::SeqCst);
                if let (Some(hub), true) = (hub, freed > 0 && freed < quorum) {
                    hub.wake_one(keys.channel());
                }
            }
        }
        tracing::debug!(resource = self.target.label(), ?reports, "lock released");
        match last_error {
            Some(err) if failed == self.instances.n() => Err(err),
            _ => Ok(reports),
        }
    }

    /// Raises [`server_expiry`](Self::server_expiry) to `at`.
    fn may_expire_at(&self, at: Instant) {
        let mut expiry = lock_mutex(&self.server_expiry);
        *expiry = (*expiry).max(at);
    }

    /// Sends the release again, in the background, to the instances at `unconfirmed` whose release got no definite
    /// answer (a timeout, a broken connection: it may never have reached the server), until the key has expired
    /// on the servers anyway (not merely past our validity: see `server_expiry`): a lock nobody holds then keeps
    /// nobody out for the rest of its TTL.
    fn resend_release(&self, unconfirmed: Vec<usize>) {
        let expiry = (*lock_mutex(&self.server_expiry)).max(self.lost.valid_until());
        let until = later(expiry, self.call_timeout.saturating_mul(2));
        let resend = Resend {
            instances: self.instances.clone(),
            target: self.target.clone(),
            token: self.token.clone(),
            scope: TokenScope::Guard,
            timeout: self.call_timeout,
        };
        let given = crate::engine::give_back::GivenBack { failed: unconfirmed, unsure: Vec::new() };
        resend.spawn(self.runtime.as_ref(), given, until);
    }

    /// The release on one store; wakes the next local waiter once its answer frees the lock for it (early, while
    /// the release is queued on one ordered instance: see below).
    async fn release_on(
        &self,
        store: &dyn LockStore,
        resources: &[crate::resource::LockKeys],
        quorum: usize,
        freed: &[AtomicUsize],
        single: bool,
    ) -> Result<PerResource<ReleaseOutcome>> {
        let released = self.release_unlocated(store, resources, quorum, freed, single).await;
        released.map_err(|err| err.at("release", store.server()))
    }

    /// [`release_on`](Self::release_on), its errors not yet saying where they happened.
    async fn release_unlocated(
        &self,
        store: &dyn LockStore,
        resources: &[crate::resource::LockKeys],
        quorum: usize,
        freed: &[AtomicUsize],
        single: bool,
    ) -> Result<PerResource<ReleaseOutcome>> {
        let release = self.target.release(store, &self.token);
        let call = bounded("release", self.call_timeout, store, &*self.target, false, release);
        let Some(hub) = store.release_hub() else {
            return call.await.and_then(|r| r);
        };
        let mut call = std::pin::pin!(call);
        // One instance and one resource only: over Redlock the waiter's acquire also goes to instances whose
        // release may not be queued yet, and would fail there.
        let reply = match resources {
            // A fair lock's release names the head of its queue, which the hub wakes wherever it waits; another
            // local waiter woken here would only be refused.
            [keys] if single && store.orders_commands() && !self.target.wakes_head_only() => {
                match std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
                    // The release command is queued once its call is pending: wake the next local waiter now, so
                    // its acquire is executed right behind the release (see `LockStore::orders_commands`).
                    // Should that acquire overtake the release after all (the command was not queued yet: a
                    // full channel, a spent coop budget), `early` wakes a waiter again when the release has
                    // completed.
                    Poll::Pending => {
                        let early = hub.release_started(keys.channel());
                        let reply = call.await.and_then(|r| r);
                        let released = matches!(reply.as_deref(), Ok([ReleaseOutcome::Released]));
                        if early.is_none() && released {
                            // Nobody waited when the release left; whoever started waiting since gets this one.
                            hub.wake_one(keys.channel());
                        }
                        drop(early);
                        return reply;
                    }
                    Poll::Ready(reply) => reply,
                }
            }
            _ => call.await,
        }
        .and_then(|r| r);
        if let Ok(outcomes) = &reply {
            for ((keys, outcome), freed) in resources.iter().zip(outcomes).zip(freed) {
                if *outcome != ReleaseOutcome::OwnedByOther && freed.fetch_add(1, Ordering::SeqCst) + 1 == quorum {
                    if self.target.wakes_head_only() {
                        // A fair release names its queue's head, which the hub wakes wherever it waits; the waiters
                        // of this process that share the key without queueing (a multi-lock, a plain lock on the
                        // name) hear nothing of it but their own echo, which the hub skips: one of them tries (the
                        // composition explorer found a multi-lock waiter asleep until the holder's TTL).
                        hub.wake_one_unqueued(keys.channel());
                    } else {
                        hub.wake_one(keys.channel());
                    }
                }
            }
        }
        reply
    }
}

#[async_trait]
impl Renewable for GuardState {
    async fn renew(&self, ttl: Duration) -> Result<Instant> {
        self.extend(ttl).await
    }
    fn lost_signal(&self) -> &LostSignal {
        &self.lost
    }
    fn resource(&self) -> &str {
        self.target.label()
    }
    fn primitive(&self) -> &'static str {
        self.target.kind().as_str()
    }
    fn note_lost(&self, reason: LostReason) {
        GuardState::note_lost(self, reason);
    }
}

/// The accessors every wrapper of a [`Guard`] in a field `guard` shares (a permit, a read or write hold):
/// `lost_signal`, `is_lost`, `valid_until` and `extend`, documented for `$what` ("permit", "hold").
macro_rules! guard_accessors {
    ($what:literal) => {
        #[doc = concat!("The name of what this ", $what, " holds.")]
        pub fn resource(&self) -> &str {
            self.guard.resource()
        }

        #[doc = concat!("Validity left now (zero once the ", $what, " is lost).")]
        pub fn remaining(&self) -> std::time::Duration {
            self.guard.remaining()
        }

        #[doc = concat!("The owner token of this ", $what, ": a capability (whoever has it can release or extend the")]
        /// hold), so it is never shown in `Debug` output or logs.
        pub fn token(&self) -> &$crate::Token {
            self.guard.token()
        }

        /// A cloneable lost signal.
        pub fn lost_signal(&self) -> $crate::LostSignal {
            self.guard.lost_signal()
        }

        #[doc = concat!("Whether the ", $what, " is lost.")]
        pub fn is_lost(&self) -> bool {
            self.guard.is_lost()
        }

        /// The local validity deadline.
        pub fn valid_until(&self) -> std::time::Instant {
            self.guard.valid_until()
        }

        #[doc = concat!("Sets the ", $what, "'s own expiry to `ttl` from now, if it still holds.")]
        ///
        /// # Errors
        #[doc = concat!("[`LockError::Lost`](crate::LockError::Lost) when the ", $what, " expired (and its lost signal")]
        /// fires); the store's errors.
        ///
        /// # Cancel safety
        /// As [`Guard::extend`](crate::Guard::extend).
        pub async fn extend(&self, ttl: std::time::Duration) -> $crate::Result<std::time::Instant> {
            self.guard.extend(ttl).await
        }
    };
}
pub(crate) use guard_accessors;

/// `LockGuard` for a guard type whose inherent methods (from [`guard_accessors!`], plus its own `fence`,
/// `drawn_fence` and `release`) are the trait's, so that calling them never needs the trait in scope and a
/// framework can hold any of them as `Box<dyn LockGuard>`.
macro_rules! lock_guard_by_inherent_methods {
    ($guard:ty, $release:expr) => {
        #[async_trait::async_trait]
        impl $crate::LockGuard for $guard {
            fn resource(&self) -> &str {
                <$guard>::resource(self)
            }
            fn token(&self) -> &$crate::Token {
                <$guard>::token(self)
            }
            async fn fence(&self) -> $crate::Result<$crate::FencingToken> {
                <$guard>::fence(self).await
            }
            fn drawn_fence(&self) -> Option<$crate::FencingToken> {
                <$guard>::drawn_fence(self)
            }
            fn valid_until(&self) -> std::time::Instant {
                <$guard>::valid_until(self)
            }
            fn lost_signal(&self) -> $crate::LostSignal {
                <$guard>::lost_signal(self)
            }
            async fn extend(&self, ttl: std::time::Duration) -> $crate::Result<std::time::Instant> {
                <$guard>::extend(self, ttl).await
            }
            async fn release(self: Box<Self>) -> $crate::Result<$crate::ReleaseOutcome> {
                #[allow(clippy::redundant_closure_call)]
                ($release)(*self).await
            }
        }
    };
}
pub(crate) use lock_guard_by_inherent_methods;

/// A held lock.
///
/// Release it with [`release`](Self::release). Dropping it instead releases in the background when a runtime is
/// current (tokio, or async-std/smol with their features), and otherwise leaves the lock to expire at its TTL; in
/// both cases its [`LostSignal`] turns lost at once and its renewal watchdog (if any) stops.
#[must_use = "dropping a guard releases the lock in the background; call `release().await` to know the outcome"]
pub struct Guard {
    state: Arc<GuardState>,
    released: bool,
}

impl Guard {
    /// The resource name.
    pub fn resource(&self) -> &str {
        self.state.target.label()
    }

    /// The keys this lock holds.
    pub fn keys(&self) -> &LockKeys {
        // A `Guard` always holds one resource (a multi-resource lock hands out a `MultiGuard`).
        &self.state.target.resources()[0]
    }

    /// The owner token.
    pub fn token(&self) -> &Token {
        &self.state.token
    }

    /// The fencing token if it has been drawn already (with the grant, or by an earlier [`fence`](Self::fence)),
    /// without I/O. `None` does not mean that fencing is off: code that protects a resource calls
    /// [`fence`](Self::fence). See [`LockGuard::drawn_fence`].
    pub fn drawn_fence(&self) -> Option<FencingToken> {
        self.state.fencing_token()
    }

    /// Validity left now (zero once lost). See [`LockGuard::remaining`].
    pub fn remaining(&self) -> Duration {
        LockGuard::remaining(self)
    }

    /// The fencing token, drawn now if this acquisition draws it on demand ([`Fencing::OnDemand`], the default for
    /// one resource on one server) and has not yet; otherwise the token drawn with the grant, without I/O. See
    /// [`LockGuard::fence`].
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = LockOptions::new(Duration::from_secs(5));
    /// let first = lock.acquire("report", &opts).await?;
    /// assert_eq!(first.drawn_fence(), None); // the acquire was a plain SET NX PX
    /// let a = first.fence().await?; // one round trip: checks the hold, advances the counter
    /// assert_eq!(first.fence().await?, a); // drawn once
    /// first.release().await?;
    ///
    /// let second = lock.acquire("report", &opts).await?;
    /// assert!(second.fence().await? > a);
    /// second.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`InvalidArgument`](LockError::InvalidArgument) when fencing was off; [`Lost`](LockError::Lost) when the
    /// lock is lost, released, or the server no longer holds it for us (the guard is then marked lost, and no token
    /// was drawn); the store's errors.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the counter advanced without a token kept; the next call draws another, also
    /// within this hold. Nothing else is written.
    pub async fn fence(&self) -> Result<FencingToken> {
        self.state.fence().await
    }

    /// The local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.state.lost.valid_until()
    }

    /// A cloneable lost signal.
    pub fn lost_signal(&self) -> LostSignal {
        self.state.lost.clone()
    }

    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.state.lost.is_lost()
    }

    /// Indices (into [`Lock::stores`]) of the instances where the lock was last confirmed: those that granted it,
    /// then those that accepted the latest extension.
    pub fn held_instances(&self) -> Vec<usize> {
        lock_mutex(&self.state.held_on).to_vec()
    }

    /// Sets the TTL to `ttl` from now if still held (on a quorum). See [`LockGuard::extend`].
    ///
    /// # Errors
    /// As [`LockGuard::extend`]; with several instances, [`LockError::Quorum`] when too few answered (the lock
    /// stays valid until its current deadline).
    ///
    /// # Cancel safety
    /// As [`LockGuard::extend`].
    pub async fn extend(&self, ttl: Duration) -> Result<Instant> {
        self.state.extend(ttl).await
    }

    /// Stops renewal, then releases the lock on every instance now. See [`LockGuard::release`].
    ///
    /// # Errors
    /// As [`LockGuard::release`] (an error only when no instance answered).
    ///
    /// # Cancel safety
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<ReleaseOutcome> {
        let quorum = self.state.instances.quorum;
        Ok(self.release_report().await?.outcome(quorum))
    }

    /// Like [`release`](Self::release), with the count of what each instance found.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    pub async fn release_report(self) -> Result<ReleaseReport> {
        Ok(self.release_reports().await?.into_iter().next().unwrap_or_default())
    }

    /// Marks the lock lost (a call found it gone), counting and reporting it once.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        if self.state.lost.mark(reason) {
            self.state.note_lost(reason);
            tracing::warn!(resource = self.resource(), %reason, "lock lost: a call found it gone");
        }
    }

    /// How many instances must agree.
    pub(crate) fn quorum(&self) -> usize {
        self.state.instances.quorum
    }

    /// What this guard holds.
    pub(crate) fn target(&self) -> &dyn Primitive {
        &*self.state.target
    }

    /// Each resource's fencing token, in the target's order.
    pub(crate) fn fences(&self) -> &[Option<FencingToken>] {
        &self.state.fences
    }

    /// Stops renewal and releases: one report per resource.
    pub(crate) async fn release_reports(mut self) -> Result<PerResource<ReleaseReport>> {
        let believed = self.state.stop();
        let reports = self.state.release(Some(believed)).await;
        // Only now: if this future is dropped mid-release, `Drop` still sends a (best-effort) release.
        self.released = true;
        reports
    }
}

/// The held gauge counts a hold until its state is gone: released, or given back by a dropped guard's task.
impl Drop for GuardState {
    fn drop(&mut self) {
        telemetry::held(self.target.kind().as_str(), self.deployment, -1.0);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.state.stop();
        let state = self.state.clone();
        let release = async move {
            if let Err(err) = state.release(None).await {
                tracing::debug!(resource = state.target.label(), error = %err.report(), "release on drop failed; TTL applies");
            }
        };
        let spawned = match &self.state.runtime {
            Some(runtime) => Some(rt::spawn_on(runtime, release)),
            None => rt::spawn_background(release),
        };
        match spawned {
            Some(task) => task.detach(),
            None => tracing::warn!(
                resource = self.state.target.label(),
                "guard dropped without a runtime to release on; the lock expires at its TTL"
            ),
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("resource", &self.resource())
            .field("token", &self.state.token)
            .field("fences", &self.state.fences)
            .field("drawn", &self.state.drawn.get())
            .field("held_on", &self.held_instances())
            .field("lost", &self.state.lost)
            .finish()
    }
}

#[async_trait]
impl LockGuard for Guard {
    fn resource(&self) -> &str {
        Guard::resource(self)
    }
    fn token(&self) -> &Token {
        Guard::token(self)
    }
    fn drawn_fence(&self) -> Option<FencingToken> {
        Guard::drawn_fence(self)
    }
    async fn fence(&self) -> Result<FencingToken> {
        Guard::fence(self).await
    }
    fn valid_until(&self) -> Instant {
        Guard::valid_until(self)
    }
    fn lost_signal(&self) -> LostSignal {
        Guard::lost_signal(self)
    }
    async fn extend(&self, ttl: Duration) -> Result<Instant> {
        Guard::extend(self, ttl).await
    }
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome> {
        Guard::release(*self).await
    }
}

//! Waiting for a held lock: tries spaced by jittered backoff, woken early by release notifications and at the
//! holder's expiry, bounded by the caller's wait budget and attempt limit.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use event_listener::EventListener;
use futures_util::future::{select, select_all, Either};

use crate::error::{LockError, Result};
use crate::options::LockOptions;
use crate::resource::LockKeys;
use crate::seam::notify::{Ahead, Raced, ReleaseHub, ReleaseWatch, Wake};
use crate::seam::scripts;
use crate::seam::store::LockStore;
use crate::seam::transport::{Call, Topology};

/// The result of one try.
pub(crate) enum Attempt<G> {
    /// We hold the lock.
    Acquired(G),
    /// Someone else does; their key expires in `holder_ttl` if the server said, and `holder` names them when the
    /// primitive records a label (a job); `place` is our 0-based place in a fair lock's queue; `blocked` which of
    /// the target's resources was held (a multi-lock's may be another than the one a wake-up was for).
    Held { holder_ttl: Option<Duration>, holder: Option<String>, place: Option<u64>, blocked: Option<usize> },
}

/// One waiter's registrations on the release channels of a lock, one per instance that has notifications and
/// channel (a Redlock waiter hears a release on any of its instances; a multi-resource waiter, a release of any of
/// its resources).
pub(crate) struct Watches {
    watches: Vec<ReleaseWatch>,
    /// Each registration's [`ReleaseWatch::progress`] when the current try started.
    marks: Vec<u64>,
}

impl Watches {
    /// Registers on each of `channels` with every hub of `stores`; `None` when no store has notifications.
    async fn new(stores: &[Arc<dyn LockStore>], channels: &[&str]) -> Option<Self> {
        let hubs = stores.iter().filter_map(|s| s.release_hub());
        let watches = hubs.flat_map(|hub| channels.iter().map(move |channel| hub.watch(channel)));
        let watches = futures_util::future::join_all(watches).await;
        let marks = vec![0; watches.len()];
        (!watches.is_empty()).then_some(Watches { watches, marks })
    }

    /// One registration (a fair-lock waiter's), for the holder to keep like any waiter's.
    pub(crate) fn from_one(watch: ReleaseWatch) -> Self {
        Watches { watches: vec![watch], marks: vec![0] }
    }

    /// Listeners for the next wake-up on any instance (in place *before* a try, see [`ReleaseWatch::listen`]), and
    /// the marks [`held_during`](Self::held_during) compares with.
    ///
    /// A listener of `places` that no wake-up reached yet is kept, not made anew: a release wakes the longest-listening
    /// waiter, so listening anew for a try nobody woke this waiter for (its first pause behind others ran out, a
    /// safety poll) would put it behind every waiter that came after it. With eight tasks taking turns, some waited
    /// two rounds and the least-served got 0.72 of the most-served one's turns (`handoff-8` in BENCHMARKS.md). A kept
    /// listener is as good as a new one for the try: it is registered, so a release during the try reaches it.
    fn before_try(&mut self, places: Option<Listeners>) -> Listeners {
        for (mark, w) in self.marks.iter_mut().zip(&self.watches) {
            *mark = w.progress();
        }
        let mut kept = places.map(|l| l.0).unwrap_or_default().into_iter();
        let listeners = self.watches.iter().map(|w| match kept.next() {
            Some(listener) if listener.is_listening() => listener,
            _ => w.listen(),
        });
        Listeners(listeners.collect())
    }

    /// See [`ReleaseWatch::held_during`]: the registration of a local release that completed during the try (so
    /// the "held" may predate it), if any; else the completions to wait for of those still on their way.
    fn held_during(&self) -> During<'_> {
        // Every registration is asked, so each early release on its way learns that a try raced it.
        let mut completed = None;
        let mut on_its_way = Vec::new();
        for (w, mark) in self.watches.iter().zip(&self.marks) {
            match w.held_during(*mark) {
                Raced::Completed => completed = Some(w),
                Raced::OnItsWay(listener) => on_its_way.push(listener),
                Raced::No => {}
            }
        }
        match completed {
            Some(w) => During::Completed(w),
            None if !on_its_way.is_empty() => During::OnItsWay(on_its_way),
            None => During::Nothing,
        }
    }

    /// Takes a wake-up kept for a newcomer on any instance (see [`ReleaseWatch::take_stored`]): the registration
    /// of the first one taken.
    fn take_stored(&self) -> Option<&ReleaseWatch> {
        self.watches.iter().fold(None, |taken, w| if w.take_stored() { taken.or(Some(w)) } else { taken })
    }

    /// Whether releases reach us on every instance (see [`ReleaseWatch::hears`]).
    fn hear(&self) -> bool {
        self.watches.iter().all(ReleaseWatch::hears)
    }

    fn watch(&self, i: usize) -> Option<&ReleaseWatch> {
        self.watches.get(i)
    }

    /// Whether no other local waiter is registered on any of these channels.
    fn alone(&self) -> bool {
        self.watches.iter().all(|w| w.hub().waiters(w.channel()) <= 1)
    }

    /// Records what the last try found for newcomers to see (see [`ReleaseHub::ahead`]): blocked, asking for
    /// `demand`, on the registrations of `blocked` (the release channel of the resource that held the try, until
    /// `expiry`), and not blocked on every other one (a multi-lock's other resources; with `None`, every one: the
    /// waiter holds the lock, or its try failed).
    fn found(&self, blocked: Option<&str>, demand: u32, expiry: Option<Instant>) {
        self.record(blocked, demand, expiry);
    }

    /// The waiter now holds what it waited for, until `valid_until`: where it excludes every other holder
    /// (`exclusive`: not a semaphore's permit, not a read hold), newcomers queue behind it until then.
    pub(crate) fn acquired(&self, exclusive: bool, valid_until: Instant) {
        for w in &self.watches {
            if exclusive {
                w.holding(valid_until);
            } else {
                w.unblocked();
            }
        }
    }

    /// Records a newcomer queued behind local waiters as blocked on `channels` (see [`ReleaseHub::ahead`]).
    fn blocked_on(&self, channels: &[&str], demand: u32, expiry: Option<Instant>) {
        for w in self.watches.iter().filter(|w| channels.contains(&w.channel())) {
            w.blocked(demand, expiry);
        }
    }

    fn record(&self, blocked: Option<&str>, demand: u32, expiry: Option<Instant>) {
        for w in &self.watches {
            if blocked == Some(w.channel()) {
                w.blocked(demand, expiry);
                if let Some(expiry) = expiry {
                    w.tighten(expiry);
                }
            } else {
                w.unblocked();
            }
        }
    }
}

/// What a try that found the lock held overlapped, over every registration of the waiter.
enum During<'a> {
    Nothing,
    /// A local release completed during the try, on this registration.
    Completed(&'a ReleaseWatch),
    /// Local releases that woke this waiter are on their way: their completions.
    OnItsWay(Vec<EventListener>),
}

/// What a waiter asking for `demand` and arriving on `channels` of `stores` finds, with one lookup per instance and
/// channel: who it should queue behind (see [`ReleaseHub::ahead`]: local waiters blocked by one of these very
/// resources and asking for no more; `None` when there are none, so it tries at once), and whether every instance
/// already hears releases on every one of the channels (see
/// [`Presence::listens`](crate::seam::notify::Presence::listens)).
fn arrival<'c>(
    stores: &[Arc<dyn LockStore>],
    channels: &[&'c str],
    demand: u32,
) -> (Option<(Ahead, Vec<&'c str>)>, bool) {
    let (mut ahead, mut listening) = (None::<Ahead>, !stores.is_empty());
    let mut behind = Vec::new();
    for store in stores {
        let Some(hub) = store.release_hub() else {
            listening = false;
            continue;
        };
        for channel in channels {
            listening &= hub.presence(channel).listens;
            if let Some(found) = hub.ahead(channel, demand) {
                let expiry = match (ahead.and_then(|a| a.expiry), found.expiry) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                ahead = Some(Ahead { expiry });
                if !behind.contains(channel) {
                    behind.push(*channel);
                }
            }
        }
    }
    (ahead.map(|ahead| (ahead, behind)), listening)
}

/// "May this waiter sleep now, and until when": the one rule every waiting loop asks before it sleeps (the plain
/// waiter's, the newcomer's behind local waiters, the fair queue's). A waiter sleeps at most its `poll` (its safety
/// poll when it can count on a wake-up for every release, else its next backoff step; a fair waiter, its heartbeat),
/// at most what the key layout allows, never past the earliest expiry it knows of ahead of it (a holder that dies,
/// or holds past its TTL without renewing, announces nothing: the key is gone by then, and the lock free), and never
/// past its wait budget.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nap {
    /// The longest sleep when nothing else bounds it.
    pub(crate) poll: Duration,
    /// The longest sleep the key layout allows.
    pub(crate) layout_poll: Option<Duration>,
    /// When what holds the resource ahead of this waiter expires at the latest, if it knows.
    pub(crate) expiry_ahead: Option<Instant>,
    /// The end of the wait budget.
    pub(crate) deadline: Instant,
}

impl Nap {
    /// When this waiter wakes at the latest, sleeping from `now`.
    pub(crate) fn until(&self, now: Instant) -> Instant {
        let mut until = now + self.poll;
        if let Some(poll) = self.layout_poll {
            until = until.min(now + poll);
        }
        if let Some(expiry) = self.expiry_ahead {
            // The key is gone by then (Redis expires a key by its expiry's millisecond).
            until = until.min(expiry + Duration::from_millis(1));
        }
        until.min(self.deadline)
    }

    /// How long this waiter sleeps from `now` (see [`until`](Self::until)).
    pub(crate) fn from(&self, now: Instant) -> Duration {
        self.until(now).saturating_duration_since(now)
    }
}

/// Lets the hubs of `stores` pass on wake-ups their process cannot use (see [`ReleaseHub::deliver`]). Done when a
/// lock is built, before any of its tries can line its process up to be woken.
pub(crate) fn forward_wake_ups(stores: &[Arc<dyn LockStore>]) {
    for store in stores {
        if let Some(hub) = store.release_hub() {
            let store = Arc::downgrade(store);
            hub.forward_with(|| Box::new(move |keys| pass_on(&store, keys)));
        }
    }
}

/// How long a pass-on may take (it runs in the background, for waiters of other processes).
const PASS_ON_BOUND: Duration = crate::engine::lock::DEFAULT_OPERATION_TIMEOUT;

/// Passes a wake-up this process cannot use on to the next waiting process (see
/// [`PASS_ON`](crate::backend::scripts::PASS_ON)), in the background: it is called where a message is delivered or a
/// registration dropped, neither of which may wait. Without a runtime (or once the store is gone) the wake-up is
/// dropped, and the other processes' waiters try at their safety poll.
fn pass_on(store: &Weak<dyn LockStore>, keys: LockKeys) {
    let Some(store) = store.upgrade() else { return };
    let task = async move {
        let Some(origin) = store.release_hub().map(|hub| hub.origin().to_owned()) else { return };
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        // An election's promise to this process moves on with the wake-up (a lock has no such key: one `GET`).
        let promised = keys.promised();
        let call_keys = [keys.lock(), keys.channel(), keys.waiting(), promised.as_str()];
        let args = [origin.as_str(), sharded];
        let call = Call::script("pass-on", &scripts::PASS_ON, &call_keys, &args);
        match crate::rt::timeout("pass-on", PASS_ON_BOUND, store.call(call)).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) | Err(err) => {
                tracing::debug!(resource = keys.resource(), error = %err.report(), "a wake-up could not be passed on");
            }
        }
    };
    match crate::rt::spawn_background(task) {
        Some(task) => task.detach(),
        None => tracing::debug!("no runtime to pass a wake-up on"),
    }
}

/// Listeners of one waiter, one per instance; kept from one try to the next until a wake-up reaches them (see
/// [`Watches::before_try`]).
struct Listeners(Vec<Wake>);

impl Listeners {
    /// Waits for a wake-up or `pause`, whichever comes first: `Some(i)` when instance `i`'s hub woke us. The
    /// listeners stay registered in their places for the next try; the one that woke us is spent.
    async fn or_sleep(&mut self, pause: Duration) -> Result<Option<usize>> {
        let sleep = std::pin::pin!(crate::rt::sleep(pause));
        let listeners = &mut self.0;
        let woken = async move {
            match listeners.as_mut_slice() {
                // `select_all` would allocate for the common case of one instance.
                [] => std::future::pending().await,
                [one] => {
                    one.await;
                    0
                }
                many => select_all(many.iter_mut()).await.1,
            }
        };
        match select(std::pin::pin!(woken), sleep).await {
            Either::Left((i, _)) => Ok(Some(i)),
            Either::Right((slept, _)) => slept.map(|()| None),
        }
    }
}

/// A wake-up this waiter consumed and has not yet turned into an answer (the lock acquired, or found held). If
/// the waiter leaves before that (cancelled while its try is on the way, out of budget, a failed try), the
/// wake-up goes to the next waiter on drop, so a release is never lost with a waiter that gave up.
///
/// A waiter that leaves without the lock also wakes the next local waiter when there is one, wake-up owed or not: a
/// newcomer queues behind the local waiters without trying, trusting a release to wake them in turn, and when the
/// waiter ahead leaves without having been woken (cut off mid-try, out of budget) while the lock is free, no release
/// is coming. Found by the schedule explorer: a newcomer slept its whole pause behind a cancelled waiter while the
/// lock was free. The woken waiter's try finds out; at most one extra try per departure.
#[derive(Default)]
pub(crate) struct OwedWake {
    /// The hub and channel the wake-up came from.
    owed: Option<(Arc<ReleaseHub>, String)>,
    /// Where this waiter is registered (its first instance's hub), once it is.
    registered: Option<(Arc<ReleaseHub>, String)>,
}

impl OwedWake {
    pub(crate) fn owe(&mut self, watch: &ReleaseWatch) {
        self.owed = Some((watch.hub().clone(), watch.channel().to_owned()));
    }

    /// Whether a wake-up is owed: the try now on its way was started by one (it is this waiter's turn).
    pub(crate) fn is_owed(&self) -> bool {
        self.owed.is_some()
    }

    /// The try answered: nothing is owed.
    pub(crate) fn settle(&mut self) {
        self.owed = None;
    }

    /// The try answered "held", blocked by the resource whose release channel is `blocked`: settled, and passed on
    /// to another waiter when [`must_pass_on`] says this waiter could not use it. Returns whether it was passed on.
    fn held_by(&mut self, blocked: Option<&str>) -> bool {
        let Some((hub, channel)) = self.owed.take() else { return false };
        let pass = must_pass_on(&channel, blocked);
        if pass {
            tracing::trace!(channel, ?blocked, "woken for a release it could not use (blocked by another); passed on");
            hub.pass_wake_on(&channel);
        }
        pass
    }

    /// The waiter is registered on `watches` from now on: leaving wakes the next local waiter.
    fn registered(&mut self, watches: &Watches) {
        self.registered = watches.watch(0).map(|w| (w.hub().clone(), w.channel().to_owned()));
    }

    /// As [`registered`](Self::registered), for a fair waiter's one registration.
    pub(crate) fn registered_watch(&mut self, watch: &ReleaseWatch) {
        self.registered = Some((watch.hub().clone(), watch.channel().to_owned()));
    }

    /// The waiter got the lock: its return wakes nobody.
    pub(crate) fn acquired(&mut self) {
        self.owed = None;
        self.registered = None;
    }
}

impl Drop for OwedWake {
    fn drop(&mut self) {
        if let Some((hub, channel)) = self.owed.take() {
            tracing::trace!(channel, "waiter left before its try answered; wake-up passed on");
            hub.wake_one(&channel);
        } else if let Some((hub, channel)) = self.registered.take() {
            // Our own registration still counts here (it is dropped after this): more than one means others wait.
            if hub.waiters(&channel) > 1 {
                tracing::trace!(channel, "waiter left without the lock; the next local waiter tries");
                hub.wake_one(&channel);
            }
        }
    }
}

/// Whether a wake-up for a release on `woken` must go on to another waiter after the try it started found the lock
/// held, `blocked` being the release channel of the resource that was held: yes when that is another resource (a
/// multi-lock's other resource). This waiter could not use the release it was woken for, another waiter (of its
/// process, or the next waiting process) may, and no other release is coming for them: without passing it on they
/// sleep to their safety poll (review 4: 860 ms where a hand-off takes 1.7 ms). A try held by the very resource it
/// was woken for lost a race for it, and whoever won will release it in turn: nothing is passed on, so one release
/// costs one try. Leaving without an answer (cancelled, out of budget, an error) always passes it on (see
/// [`OwedWake`]'s `Drop`). The one place this rule lives.
fn must_pass_on(woken: &str, blocked: Option<&str>) -> bool {
    blocked.is_some_and(|blocked| blocked != woken)
}

/// Whether every release of the lock a waiter waits for is published where it listens, and the longest it may
/// sleep between tries: under another library's layout (see [`KeyLayout`](crate::KeyLayout)) that library's
/// releases may reach nothing a waiter can listen to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heard {
    /// Every release is published on the channels (this library's layout, or a peer that publishes there).
    pub(crate) all: bool,
    /// The longest pause between tries, when the layout caps it.
    pub(crate) poll: Option<Duration>,
}

impl Heard {
    /// What `keys` say (every one of a multi-lock's).
    pub(crate) fn of(keys: &[LockKeys]) -> Self {
        Heard { all: keys.iter().all(LockKeys::releases_heard), poll: keys.iter().filter_map(LockKeys::poll).min() }
    }
}

/// Whether a waiter registered on `watches` can count on a wake-up for every release, and so try only when woken or
/// at its safety poll. One whose subscription failed hears nothing, and polls on the backoff as without
/// notifications. So does a Redlock waiter: a quorum can become reachable with nothing to announce it (an instance
/// back up, every contender's minority grant given back after a split vote; a give-back announces nothing to its own
/// process), and the algorithm asks for jittered retries. So does a waiter for a lock another library's clients
/// hold and release without announcing it.
fn hears_every_release(heard: Heard, stores: &[Arc<dyn LockStore>], watches: &Watches) -> bool {
    heard.all && stores.len() == 1 && watches.hear()
}

/// Tries `attempt` until it acquires, the wait budget is spent, or the attempt limit is reached. Returns the
/// guard and, when it had to wait, its registrations on the release channel, for the holder to keep (see
/// [`Lock::acquire`](crate::Lock::acquire)).
///
/// The last try happens at the deadline at the latest; no sleep follows it. Transient errors (see
/// [`LockError::is_retryable`]) are retried like contention; if the budget runs out after one, that error is
/// returned rather than [`LockError::Contended`].
#[allow(clippy::too_many_arguments)]
pub(crate) async fn until_acquired<G, F, Fut>(
    resource: &str,
    started: Instant,
    options: &LockOptions,
    stores: &[Arc<dyn LockStore>],
    channels: &[&str],
    heard: Heard,
    demand: u32,
    mut attempt: F,
) -> Result<(G, Option<Watches>)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    let deadline = started + options.wait();
    let policy = options.retry();
    // Subscribe only once the lock turned out to be held: an uncontended acquire stays one round trip.
    let mut watch: Option<Watches> = None;
    // Declared after `watch`, so dropped before it: a wake-up passed on never reaches our own registration.
    let mut owed = OwedWake::default();
    let mut delays = policy.delays();
    // This waiter's listeners between tries (see `Watches::before_try`): declared after `owed`, so dropped before it.
    let mut places: Option<Listeners> = None;
    // Fairness: a newcomer does not barge past local waiters already queued for this lock (a releaser looping
    // straight back to acquire would otherwise win most hand-offs). It queues behind them and tries when a release
    // wakes it, or when `Nap` says (its safety poll, one backoff step when it cannot count on a wake-up, the expiry
    // ahead). Only behind waiters blocked by this very resource and asking for no more than it does: a multi-lock
    // waiter held by another resource, a holder that stays registered, a semaphore waiter for more permits than are
    // free hold nobody back (each had a newcomer sleep its whole safety poll on a free lock).
    let (ahead, listening) = if options.wait().is_zero() { (None, false) } else { arrival(stores, channels, demand) };
    let queued = ahead.is_some();
    let (ahead, behind) = ahead.map_or((None, Vec::new()), |(ahead, behind)| (Some(ahead), behind));
    // Registered before the first try when local waiters queue for the lock (it queues behind them), or when this
    // process waited for it before and still listens: that try then lines the process up to be woken (one failed
    // try per wait instead of two), and no release can slip past the registration.
    if queued || listening {
        if let Some(mut queue) = Watches::new(stores, channels).await {
            owed.registered(&queue);
            if queued {
                // Listen before looking for a kept wake-up: a waiter leaving on another thread between the look and
                // the listen would keep its wake-up for a newcomer that has already looked, and this one would sleep
                // its whole pause while the lock is free (found by the schedule explorer on a multi-threaded
                // runtime).
                let mut listeners = queue.before_try(None);
                // A release that found nobody listening (its waiter left, or had not started waiting yet) is kept
                // for a newcomer: the lock may be free, and nobody ahead is going to take it, so try at once.
                if let Some(kept) = queue.take_stored() {
                    // Its try is the turn that wake-up gave.
                    owed.owe(kept);
                    tracing::trace!(resource, "a release nobody heard is pending; trying at once");
                } else if queue.alone() {
                    // The waiters it would have queued behind left while it registered (the last one's wake-up, kept
                    // for a newcomer, was dropped as stale when this one registered first): nobody is ahead, try at
                    // once.
                    tracing::trace!(resource, "the local waiters left; trying at once");
                } else {
                    // Behind waiters that hear every release, its turn comes with a wake-up: a try before it (after
                    // one backoff step, as once) found the lock held nearly always, and cost the server a failed
                    // acquire per hand-off (two in three newcomers with eight tasks taking turns). Where a wake-up may
                    // not come (nobody hears, or another library's releases), one backoff step as for any poll.
                    let poll = match hears_every_release(heard, stores, &queue) {
                        true => policy.safety_poll(),
                        false => delays.next().unwrap_or(Duration::from_millis(5)),
                    };
                    let expiry_ahead = ahead.and_then(|a| a.expiry);
                    // Queued behind them, it is blocked where they are: a newcomer after it queues behind it too (it
                    // would otherwise try, and lose, each time the lock changes hands).
                    queue.blocked_on(&behind, demand, expiry_ahead);
                    let nap = Nap { poll, layout_poll: heard.poll, expiry_ahead, deadline };
                    let pause = nap.from(Instant::now());
                    tracing::trace!(resource, ?pause, "queued behind local waiters");
                    if let Some(woke) = listeners.or_sleep(pause).await?.and_then(|i| queue.watch(i)) {
                        owed.owe(woke);
                    }
                }
                places = Some(listeners);
            }
            watch = Some(queue);
        }
    }
    let mut attempts: u32 = 0;
    loop {
        attempts = attempts.saturating_add(1);
        // The completions of local releases that woke this waiter and that its try overtook (see `During`).
        let mut racing: Option<Vec<EventListener>> = None;
        // Listen before trying: a release between the try and the sleep must still wake us.
        let listeners = watch.as_mut().map(|w| w.before_try(places.take()));
        // A wake-up kept because nobody listened when it came (this waiter was registered but still subscribing,
        // between its first try and this one) is this waiter's: with the listeners in place, a later one would
        // have reached them. Its try is then the turn (see `Held` below): should it overtake the release that woke
        // it, it tries again at the release's completion, or the wake-up would wait for a newcomer that may never
        // come while the lock is free (a semaphore waiter woke at its safety poll, 5 s late, on CI).
        if !owed.is_owed() {
            if let Some(kept) = watch.as_ref().and_then(Watches::take_stored) {
                tracing::trace!(resource, "a wake-up nobody heard is pending; this try is our turn");
                owed.owe(kept);
            }
        }
        let mut again = false;
        let (holder_ttl, last_error) = match attempt().await {
            Ok(Attempt::Acquired(guard)) => {
                // The registrations stay as they are until the caller records the hold (`Watches::acquired`): a
                // newcomer arriving in between still queues behind this waiter, whose try it would lose.
                owed.acquired();
                return Ok((guard, watch));
            }
            Ok(Attempt::Held { holder_ttl, blocked, .. }) => {
                let blocked = blocked.and_then(|i| channels.get(i).copied()).or(match channels {
                    [one] => Some(*one),
                    _ => None,
                });
                if let Some(watch) = &watch {
                    // Counted from the reply: the key is gone by then at the latest.
                    watch.found(blocked, demand, holder_ttl.map(|ttl| Instant::now() + ttl));
                }
                // A turn passed on was not this waiter's to keep: nothing to try again for at a release's completion.
                let turn = owed.is_owed() && !owed.held_by(blocked);
                owed.settle();
                // A release of ours completed while this try was on its way (it woke us early and the try overtook
                // it): the "held" may predate the release, so the try did not answer; look again, or pass the
                // wake-up on if we leave now. (While such a release is still on its way, this also asks its
                // completion to wake a waiter.) Only a try a wake-up started had the turn: any other try (a
                // newcomer's first, a safety poll) that meets a local release goes back to listening, since that
                // release wakes the waiter whose turn it is, and a wake-up meant for this one reaches the listener
                // created before the try. Without this, every waiter whose try met a release tried again at its
                // completion, met the next release, and so on: with 1 000 waiters in one process, 55 tries per
                // acquisition.
                let during =
                    if turn { watch.as_ref().map_or(During::Nothing, Watches::held_during) } else { During::Nothing };
                match during {
                    During::Completed(completed) => {
                        owed.owe(completed);
                        tracing::trace!(resource, "a local release completed during the try; trying again");
                        again = true;
                    }
                    During::OnItsWay(completions) => racing = Some(completions),
                    During::Nothing => {}
                }
                (holder_ttl, None)
            }
            Err(err) if err.is_retryable() => {
                tracing::debug!(resource, error = %err.report(), "transient error while waiting for lock");
                if let Some(watch) = &watch {
                    watch.found(None, demand, None);
                }
                (None, Some(err))
            }
            Err(err) => return Err(err),
        };
        let now = Instant::now();
        let exhausted = policy.max_attempts().is_some_and(|limit| attempts >= limit);
        if now >= deadline || exhausted {
            tracing::debug!(resource, attempts, "lock wait budget spent");
            return Err(
                last_error.unwrap_or_else(|| LockError::contended(resource, now.saturating_duration_since(started)))
            );
        }
        if watch.is_none() && last_error.is_none() {
            if let Some(registered) = Watches::new(stores, channels).await {
                owed.registered(&registered);
                watch = Some(registered);
                // A release may have landed before the subscription: look again before sleeping.
                continue;
            }
        }
        if again {
            places = listeners;
            continue;
        }
        // A waiter that listens hears the release: it does not poll on the backoff meanwhile (with eight processes
        // waiting out a 250 ms hold, those polls were two thirds of the server's commands), only on the safety poll.
        let hears = watch.as_ref().is_some_and(|watch| hears_every_release(heard, stores, watch));
        let poll = match (&listeners, &last_error) {
            (Some(_), None) if hears => policy.safety_poll(),
            _ => delays.next().unwrap_or(Duration::from_millis(100)),
        };
        // The holder's key is gone by `now + ttl` at the latest (the TTL was read before the reply came).
        let nap = Nap { poll, layout_poll: heard.poll, expiry_ahead: holder_ttl.map(|ttl| now + ttl), deadline };
        let pause = nap.from(now);
        match listeners {
            Some(mut listeners) => {
                tracing::trace!(resource, ?pause, "waiting for a release");
                if let Some(completions) = racing {
                    // Our turn, taken by a try that overtook the release that woke us: we try again as soon as that
                    // release completes, before the waiters behind us (a wake-up at its completion would go to the
                    // longest-listening waiter, and this one listens anew after its try).
                    let completed = std::pin::pin!(select_all(completions));
                    let woken = match select(completed, std::pin::pin!(listeners.or_sleep(pause))).await {
                        Either::Left(_) => None,
                        Either::Right((woken, _)) => woken?,
                    };
                    if let Some(woke) = woken.and_then(|i| watch.as_ref()?.watch(i)) {
                        owed.owe(woke);
                    }
                    places = Some(listeners);
                    continue;
                }
                let woken = listeners.or_sleep(pause).await?;
                places = Some(listeners);
                tracing::trace!(resource, woken = woken.is_some(), "waiter awake");
                if let Some(woke) = woken.and_then(|i| watch.as_ref()?.watch(i)) {
                    owed.owe(woke);
                }
            }
            None => crate::rt::sleep(pause).await?,
        }
    }
}

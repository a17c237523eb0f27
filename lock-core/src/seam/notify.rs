//! Release notifications: turning "the holder released" into a wake-up for one local waiter.
//!
//! Notifications are a hint, never a source of truth: pub/sub is at-most-once and a release can race a waiter's
//! try. A waiter therefore always re-polls the server when woken, and also wakes at the holder's remaining TTL and
//! at its safety poll ([`RetryPolicy::with_safety_poll`](crate::RetryPolicy::with_safety_poll), 1 s by default).
//!
//! No herd, within a process or across processes. A mutex's release names **one** waiting process (the first its
//! waiters' tries lined up on the server, see [`RELEASE`](crate::backend::scripts::RELEASE)), and that process's hub wakes
//! **one** waiter (the one that has been listening longest). A woken waiter that gives up passes its wake-up on to
//! the next local waiter; a hub named by a release with no waiter left for it passes the wake-up on to the next
//! waiting process ([`PASS_ON`](crate::backend::scripts::PASS_ON)), so a wake-up is lost only with a process that died while
//! it was on its way (its waiters' peers then wait for their safety poll, once).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use event_listener::{Event, EventListener, IntoNotification, Listener};

use crate::error::Result;
use crate::resource::LockKeys;

/// The confirmation of one subscription request: resolves once the server confirmed it, or with the reason it
/// did not (the waiter then polls).
pub type Confirmation = Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>;

/// How a [`ReleaseHub`] asks its backend to follow or stop following a channel.
///
/// A backend implements this over one shared subscriber connection. The hub calls both methods while it holds its
/// own lock, so the requests for one channel are made in the order the hub decided them (the last waiter leaving,
/// then a new one arriving, is unsubscribe then subscribe); the backend must keep that order to the server (a queue
/// to one task does it) and must not block in either call.
pub trait SubscriptionControl: Send + Sync + fmt::Debug + 'static {
    /// Queues a request to deliver the messages of `channel` to the hub; the returned confirmation resolves once
    /// the server confirmed it.
    fn subscribe(&self, channel: &str) -> Confirmation;
    /// Queues a request to stop delivering the messages of `channel` (fire and forget).
    fn unsubscribe(&self, channel: &str);

    /// Whether the hub asks again for a subscription it kept while its channel had no waiter, when a waiter
    /// arrives. A hub stays subscribed to a few idle channels (so a process that waits for one lock again and again
    /// sends no `UNSUBSCRIBE`/`SUBSCRIBE` each time); a backend that cannot tell when the server dropped such a
    /// subscription (a cluster connection resubscribing on its own schedule after a failover) returns `true`, and
    /// each new wait then renews it. Default: `false` (the backend resubscribes every channel the hub names after
    /// a reconnect).
    fn renew_on_reuse(&self) -> bool {
        false
    }
}

/// For stores without a server (the in-memory one): nothing to subscribe to.
#[derive(Debug)]
struct Local;

impl SubscriptionControl for Local {
    fn subscribe(&self, _channel: &str) -> Confirmation {
        Box::pin(std::future::ready(Ok(())))
    }
    fn unsubscribe(&self, _channel: &str) {}
}

struct Channel {
    /// The channel's name (its key in the hub's map).
    name: String,
    event: Event,
    watchers: usize,
    /// Local releases that woke a waiter before they completed (see [`EarlyRelease`]) and have not completed yet.
    releasing: usize,
    /// How many such releases have completed so far.
    completed: u64,
    /// A waiter's try found the lock held while such a release was still on its way: wake it (through
    /// [`completion`](Self::completion)), or one waiter if it left, at the release's completion.
    raced: bool,
    /// Notified when an early-woken local release completes, for the waiters whose try raced it (see
    /// [`ReleaseWatch::held_during`]): they try again at once, keeping their turn.
    completion: Event,
    /// A wake-up found nobody listening (the waiters were between a try and their next wait, or the one woken
    /// left): the next newcomer that would queue behind the waiters tries at once instead.
    stored: bool,
    /// Fair-lock waiters by token: a release names the head of the queue, and only that waiter is woken.
    tokens: HashMap<String, Place>,
    /// The same waiters' tokens by the id announcements name them by ([`waiter_id`]).
    ids: HashMap<String, String>,
    /// The backend was asked to subscribe (and not since to unsubscribe).
    subscribed: bool,
    /// The last subscription request failed (refused by the ACL, no connection): releases are not heard here, so
    /// waiters poll on their backoff rather than trust a wake-up (see [`ReleaseWatch::hears`]).
    deaf: bool,
    /// The server confirmed a subscription to this channel (since the backend was last asked to subscribe).
    confirmed: bool,
    /// Notified for every message on the channel, whoever sent it: observers (an election's) that re-read state
    /// on any change, rather than waiters that take turns.
    any: Event,
    /// How many more times the last wake-up may be passed on to the next local waiter because it left room (see
    /// [`ReleaseHub::pass_room_on`]): the waiters registered when it came, so one release lets each of them try at
    /// most once and the passing ends.
    sweep: usize,
    /// The registrations whose waiter's last try was held by this very resource (see [`ReleaseWatch::blocked`]):
    /// what a newcomer may queue behind. A registration that is not here (a holder's kept one, a multi-lock waiter
    /// blocked by another resource, a waiter between tries) holds nobody back.
    blocked: HashMap<u64, Blocked>,
}

/// A waiter blocked by a channel's resource, or a holder of it that excludes every other (see [`Channel`]'s
/// `blocked`).
#[derive(Clone, Copy, Debug)]
struct Blocked {
    /// How much it asks for (a semaphore's permits; 1 for a lock).
    demand: u32,
    /// When what blocked it expires at the latest, if its try said; a holder's validity deadline.
    expiry: Option<std::time::Instant>,
    /// A holder (that had to wait, so it stays registered), not a waiter: it holds newcomers back only until its
    /// validity deadline (a holder whose key expired holds nobody back).
    holding: bool,
}

/// What a newcomer finds ahead of it on a channel (see [`ReleaseHub::ahead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ahead {
    /// The earliest instant at which what blocks them expires, when one of them knows it.
    pub(crate) expiry: Option<std::time::Instant>,
}

impl Channel {
    fn new(name: &str) -> Self {
        Channel {
            name: name.to_owned(),
            event: Event::new(),
            watchers: 0,
            releasing: 0,
            completed: 0,
            raced: false,
            completion: Event::new(),
            stored: false,
            tokens: HashMap::new(),
            ids: HashMap::new(),
            any: Event::new(),
            sweep: 0,
            subscribed: false,
            deaf: false,
            confirmed: false,
            blocked: HashMap::new(),
        }
    }

    /// Wakes the longest-waiting listener, or keeps the wake-up for the next newcomer when nobody listens.
    fn wake_one(&mut self) {
        self.sweep = self.watchers;
        if self.event.notify(1.additional()) == 0 {
            self.stored = true;
        }
    }

    /// Passes the current wake-up on to the next listening waiter, within the sweep the wake-up allowed.
    fn pass_room_on(&mut self) {
        if self.sweep > 0 {
            self.sweep -= 1;
            self.event.notify(1.additional());
        }
    }

    /// Passes the current wake-up on to another local waiter, within the sweep the wake-up allowed; `false` when
    /// no other waiter is registered or every one had its try (the wake-up then leaves the process). Kept for the
    /// next newcomer when nobody listens at this instant.
    fn pass_to_another(&mut self) -> bool {
        if self.watchers < 2 || self.sweep == 0 {
            return false;
        }
        self.sweep -= 1;
        if self.event.notify(1.additional()) == 0 {
            self.stored = true;
        }
        true
    }
}

/// A fair-lock waiter of this process (see [`ReleaseHub::watch_as`]).
struct Place {
    /// Woken when an announcement names the waiter's token.
    event: Arc<Event>,
    /// Its waiter TTL: places with the same TTL are renewed together (see [`ReleaseWatch::peers`]).
    waiter_ttl: std::time::Duration,
    /// When the last try that renewed this place (its own or a peer's) was sent.
    renewed: Option<std::time::Instant>,
    /// When a peer's try last took this place along to renew (its reply not in yet): tries running at once renew
    /// different places instead of the same ones.
    claimed: Option<std::time::Instant>,
    /// When the waiter's first try was sent: a grant announced to it is counted from here. Any grant to its token
    /// followed that try (a grant needs a place, which a try of its own created), but not necessarily a later one:
    /// a try that finds its place gone (granted, the lease run out) takes a new one, and an announcement that came
    /// late was counted from such a try, past the lease's end (explorer seed 1592592649: two holders).
    first_try: Option<std::time::Instant>,
    /// When the waiter's own loop last ran: peers renew only places whose waiter shows it is still polled, so a
    /// waiter stuck in a future nobody polls loses its place like one whose process died.
    alive: std::time::Instant,
    /// A release granted this waiter the lock (see [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE)).
    granted: Option<Granted>,
}

/// A release message, read one way only (WIRE.md §6.5). This library's forms are built of origins (16 lowercase hex
/// digits, or empty for a client without a listener, or `force-release`), waiter ids (16 lowercase hex digits) and
/// fences (decimal digits), none of which has a `:`, so no other library's payload (Spring's lock key, which always
/// has one; Redisson's `0`) reads as one of them, whatever characters a lock name has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// `<origin>><process>`: a mutex's release naming the first waiting process.
    Named { from: &'a [u8], to: &'a [u8] },
    /// `<origin>[+[<fence>]] <waiter id>`: a fair queue's release waking (and with `+`, granting) one waiter.
    Fair { from: &'a [u8], grant: Option<Grant>, id: &'a [u8] },
    /// `<origin>`: a release by that process.
    Plain { from: &'a [u8] },
    /// Anything else: another library's release.
    Foreign,
}

/// What the `+` of a fair announcement says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// `+<fence>`.
    Fenced(u64),
    /// `+` alone: granted without a fence.
    Unfenced,
    /// `+` and digits that do not fit a fence.
    Unreadable,
}

/// The length of a listener's origin and of a waiter id, in hex digits.
const ID_LEN: usize = 16;

fn is_id(part: &[u8]) -> bool {
    part.len() == ID_LEN && part.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An origin (WIRE.md §3.3): a listener's id, the empty origin of a client without a listener, or the admin's.
fn is_origin(part: &[u8]) -> bool {
    part.is_empty() || part == b"force-release" || is_id(part)
}

impl<'a> Message<'a> {
    /// Reads `payload`.
    pub(crate) fn parse(payload: &'a [u8]) -> Self {
        if is_origin(payload) {
            return Message::Plain { from: payload };
        }
        if let Some(at) = payload.iter().position(|b| *b == b'>') {
            let (from, to) = (&payload[..at], &payload[at + 1..]);
            return if is_origin(from) && is_id(to) { Message::Named { from, to } } else { Message::Foreign };
        }
        let Some(space) = payload.iter().position(|b| *b == b' ') else { return Message::Foreign };
        let (head, id) = (&payload[..space], &payload[space + 1..]);
        if !is_id(id) {
            return Message::Foreign;
        }
        let (from, grant) = match head.iter().position(|b| *b == b'+') {
            None => (head, None),
            Some(plus) => {
                let digits = &head[plus + 1..];
                if !digits.iter().all(u8::is_ascii_digit) {
                    return Message::Foreign;
                }
                let fence = std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok());
                let grant = match fence {
                    Some(fence) => Grant::Fenced(fence),
                    None if digits.is_empty() => Grant::Unfenced,
                    None => Grant::Unreadable,
                };
                (&head[..plus], Some(grant))
            }
        };
        if !is_origin(from) {
            return Message::Foreign;
        }
        Message::Fair { from, grant, id }
    }
}

/// A fair-queue release's grant to one of this process's waiters, as announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The fencing token drawn with the grant, if the waiter asked for one.
    pub(crate) fence: Option<u64>,
    /// When the waiter's first try was sent: any grant to its token came after that try ran (a grant needs a place,
    /// which that try took), so the grant's lease is counted from here. A later try is no bound: one that found the
    /// place gone (granted, the lease run out) took a new one. `None` when the first try is not known yet (the
    /// waiter then tries, and the try returns the grant).
    pub(crate) since: Option<std::time::Instant>,
}

/// Per-store registry of waiters by release channel.
///
/// A backend creates one per store, hands it to lock-core through
/// [`LockStore::release_hub`](crate::LockStore::release_hub), calls [`deliver`](Self::deliver) for every message
/// its subscriber receives, and publishes [`origin`](Self::origin) as the payload of its releases so that the
/// hub can ignore echoes of releases it already announced locally.
pub struct ReleaseHub {
    origin: String,
    control: Box<dyn SubscriptionControl>,
    channels: Mutex<Registry>,
    /// How a wake-up this process cannot use reaches the next waiting process (see [`Self::pass_on`]); set by
    /// lock-core when a waiter first registers, since the hub is created inside the store it would call.
    forward: std::sync::OnceLock<Forward>,
    /// How many waiters are registered on all channels: while none is, no try lines this process up (see
    /// [`lines_up`](Self::lines_up)), and finding that out takes no lock.
    watching: std::sync::atomic::AtomicUsize,
}

/// What a waiter arriving on a channel finds (see [`ReleaseHub::presence`]).
pub(crate) struct Presence {
    /// How many waiters of this process are registered on it.
    pub(crate) waiters: usize,
    /// The server confirmed the subscription and did not refuse it since: releases on it reach this process.
    pub(crate) heard: bool,
    /// This process hears releases on it without a new subscription (it is `heard`, and a new waiter would not
    /// renew it; a channel whose last waiter left stays subscribed for a while, see [`Registry::idle`]). A waiter
    /// registered there before its first try lines the process up with that try (see
    /// [`lines_up`](ReleaseHub::lines_up)), and needs no look again for a release it could have missed.
    pub(crate) listens: bool,
}

/// Runs [`PASS_ON`](crate::backend::scripts::PASS_ON) for a lock, in the background.
pub(crate) type Forward = Box<dyn Fn(LockKeys) + Send + Sync>;

/// How many channels without waiters a hub stays subscribed to (see [`Registry::idle`]).
const LINGERING: usize = 32;

/// The hub's channels, under one lock (so subscribe and unsubscribe requests reach the backend in decision order).
#[derive(Default)]
struct Registry {
    channels: HashMap<String, Arc<Mutex<Channel>>>,
    /// Channels whose last waiter left, oldest first, still subscribed: a process that releases a lock and waits
    /// for it again straight away (every competitor of a contended lock) would otherwise send `UNSUBSCRIBE` and
    /// `SUBSCRIBE` for every acquisition. At most [`LINGERING`]; the oldest is unsubscribed when more go idle.
    idle: std::collections::VecDeque<String>,
}

impl std::ops::Deref for Registry {
    type Target = HashMap<String, Arc<Mutex<Channel>>>;
    fn deref(&self) -> &Self::Target {
        &self.channels
    }
}

impl ReleaseHub {
    /// A hub that follows channels through `control`.
    pub fn new(control: impl SubscriptionControl) -> Arc<Self> {
        Arc::new(ReleaseHub {
            origin: format!("{:016x}", crate::token::random_u128() as u64),
            control: Box::new(control),
            channels: Mutex::new(Registry::default()),
            forward: std::sync::OnceLock::new(),
            watching: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A hub for an in-process store: releases are announced locally only.
    pub fn local() -> Arc<Self> {
        Self::new(Local)
    }

    /// The payload this store's releases publish, so the hub can skip its own echoes.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Whether a try on `channel` should line this process up to be woken by the release (see
    /// [`RELEASE`](crate::backend::scripts::RELEASE)): only while a waiter of ours is registered on it and the server
    /// confirmed the subscription, so that a release that names this process reaches it. A `try_acquire`, a
    /// waiter's first try (before it subscribed) and a waiter that cannot hear releases do not line up: a release
    /// that named them would wake nobody.
    pub(crate) fn lines_up(&self, channel: &str) -> bool {
        self.watching.load(std::sync::atomic::Ordering::Relaxed) > 0 && {
            let presence = self.presence(channel);
            presence.waiters > 0 && presence.heard
        }
    }

    /// Whether a newcomer asking for `demand` should queue behind this process's waiters on `channel`: only behind
    /// those whose last try was held by this very resource and who ask for no more than it does (one that asks for
    /// more may be blocked where the newcomer is not: a semaphore waiter for 3 permits with 2 free), and then until
    /// the earliest expiry they know of. `None`: nobody it should wait behind, so it tries at once.
    pub(crate) fn ahead(&self, channel: &str, demand: u32) -> Option<Ahead> {
        let state = self.channels().get(channel).cloned()?;
        let ch = lock(&state);
        let now = std::time::Instant::now();
        let mut blocking = ch
            .blocked
            .values()
            .filter(|b| if b.holding { b.expiry.is_some_and(|e| e > now) } else { b.demand <= demand })
            .peekable();
        blocking.peek()?;
        // They are all held by the same resource: the earliest expiry any of them saw bounds the wait of each.
        Some(Ahead { expiry: blocking.filter_map(|b| b.expiry).min() })
    }

    /// What a waiter arriving on `channel` finds, in one lookup (see [`Presence`]).
    pub(crate) fn presence(&self, channel: &str) -> Presence {
        self.channels().get(channel).map_or(Presence { waiters: 0, heard: false, listens: false }, |state| {
            let ch = lock(state);
            // Every channel the registry holds is subscribed (an evicted one leaves it).
            let heard = ch.confirmed && !ch.deaf;
            Presence { waiters: ch.watchers, heard, listens: heard && !self.control.renew_on_reuse() }
        })
    }

    /// Installs how wake-ups this process cannot use are passed on (the first call wins).
    pub(crate) fn forward_with(&self, make: impl FnOnce() -> Forward) {
        let _ = self.forward.get_or_init(make);
    }

    /// A release named this process to wake a waiter on `channel`, and none is left: the next waiting process is
    /// woken instead, if the lock is still free.
    fn pass_on(&self, channel: &str) {
        let (Some(forward), Some(keys)) = (self.forward.get(), LockKeys::of_channel(channel)) else {
            tracing::debug!(channel, "a wake-up for a waiter that left could not be passed on");
            return;
        };
        tracing::trace!(channel, "no waiter left for a wake-up; passing it on");
        forward(keys);
    }

    fn channels(&self) -> MutexGuard<'_, Registry> {
        self.channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a waiter on `channel`; the first waiter of a channel subscribes (a failure is logged, not returned:
    /// the waiter then polls).
    ///
    /// # Errors
    /// None: a subscription the backend cannot confirm is logged, and the waiter polls.
    ///
    /// # Cancel safety
    /// Cancel-safe: the registration is made before the first await and undone when its watch is dropped.
    pub async fn watch(self: &Arc<Self>, channel: &str) -> ReleaseWatch {
        self.watch_as(channel, None).await
    }

    /// [`watch`](Self::watch) for a fair-lock waiter holding `token`'s place in the queue: announcements that name
    /// `token` as the head wake this waiter (see [`ReleaseWatch::listen_token`]).
    pub(crate) async fn watch_as(
        self: &Arc<Self>,
        channel: &str,
        token: Option<(&str, std::time::Duration)>,
    ) -> ReleaseWatch {
        let (state, confirmation) = {
            let mut registry = self.channels();
            let state = registry
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| Arc::new(Mutex::new(Channel::new(channel))))
                .clone();
            let subscribe = {
                let mut ch = lock(&state);
                ch.watchers += 1;
                self.watching.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if ch.watchers == 1 {
                    // Back from idle: a wake-up kept while nobody listened is stale (the newcomer tries anyway).
                    ch.stored = false;
                }
                if let Some((token, waiter_ttl)) = token {
                    let place = Place {
                        event: Arc::new(Event::new()),
                        waiter_ttl,
                        renewed: None,
                        claimed: None,
                        first_try: None,
                        alive: std::time::Instant::now(),
                        granted: None,
                    };
                    ch.tokens.insert(token.to_owned(), place);
                    ch.ids.insert(waiter_id(token), token.to_owned());
                }
                let kept = std::mem::replace(&mut ch.subscribed, true);
                !kept || (ch.watchers == 1 && self.control.renew_on_reuse())
            };
            if let Some(at) = registry.idle.iter().position(|c| c == channel) {
                registry.idle.remove(at);
            }
            // Requested under the registry lock, like an unsubscribe (see `Drop`), so the two reach the backend in
            // the order they were decided.
            (state, subscribe.then(|| self.control.subscribe(channel)))
        };
        // Built before the await so that a cancelled subscribe still unregisters.
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let watch = ReleaseWatch {
            hub: self.clone(),
            channel: channel.to_owned(),
            state,
            token: token.map(|(t, _)| t.to_owned()),
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        if let Some(confirmation) = confirmation {
            let confirmed = confirmation.await;
            if let Err(err) = &confirmed {
                tracing::debug!(channel, error = %err.report(), "release notifications unavailable; waiters poll");
            }
            let mut ch = lock(&watch.state);
            ch.deaf = confirmed.is_err();
            ch.confirmed |= confirmed.is_ok();
        }
        watch
    }

    /// Handles one message from the backend's subscriber, read one way only, whatever the payload (WIRE.md §6.5):
    ///
    /// - `<origin> <waiter id>` (a fair lock's release) wakes only the waiter the id names, if it is ours, whichever
    ///   process released; `<origin>+<fence> <waiter id>` (or `<origin>+ <waiter id>`) also tells it that the
    ///   release granted it the lock (see [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE));
    /// - `<origin>><process>` (a mutex's release that names the first waiting process, see
    ///   [`RELEASE`](crate::backend::scripts::RELEASE)) wakes the longest-waiting local waiter if `<process>` is this
    ///   hub, or passes the wake-up on when none is left, and is ignored by every other hub;
    /// - `<origin>` wakes the longest-waiting local waiter unless the release was our own (already woken locally);
    /// - anything else is another library's release (Spring's lock key, Redisson's `0`): it wakes the longest-waiting
    ///   local waiter.
    pub fn deliver(&self, channel: &str, payload: &[u8]) {
        // One lookup per message.
        let state = self.channels().get(channel).cloned();
        match Message::parse(payload) {
            Message::Named { from, to } => {
                if let Some(state) = &state {
                    lock(state).any.notify(usize::MAX);
                }
                if to != self.origin.as_bytes() || from == self.origin.as_bytes() {
                    return;
                }
                let woken = state.is_some_and(|state| {
                    let mut ch = lock(&state);
                    // Nobody listening right now (between tries, or leaving) keeps the wake-up: the next try takes
                    // it, or the last one to leave passes it on (see `Drop for ReleaseWatch`).
                    (ch.watchers > 0).then(|| ch.wake_one()).is_some()
                });
                if !woken {
                    self.pass_on(channel);
                }
            }
            Message::Fair { grant, id, .. } => {
                // Nobody on this channel in this process, nothing to wake.
                let Some(state) = state else { return };
                let mut ch = lock(&state);
                ch.any.notify(usize::MAX);
                let token = std::str::from_utf8(id).ok().and_then(|id| ch.ids.get(id)).cloned();
                if let Some(place) = token.and_then(|token| ch.tokens.get_mut(&token)) {
                    if let Some(fence) = grant {
                        let since = place.first_try;
                        place.granted = match fence {
                            Grant::Fenced(fence) => Some(Granted { fence: Some(fence), since }),
                            Grant::Unfenced => Some(Granted { fence: None, since }),
                            // A fence that does not parse makes the grant unusable from here: the waiter's try
                            // returns it.
                            Grant::Unreadable => Some(Granted { fence: None, since: None }),
                        };
                    }
                    place.event.notify(1);
                }
            }
            Message::Plain { from } => {
                let Some(state) = state else { return };
                let mut ch = lock(&state);
                ch.any.notify(usize::MAX);
                if from != self.origin.as_bytes() {
                    ch.wake_one();
                }
            }
            Message::Foreign => {
                let Some(state) = state else { return };
                let mut ch = lock(&state);
                ch.any.notify(usize::MAX);
                ch.wake_one();
            }
        }
    }

    /// A try found that the place of our fair-lock waiter `token` on `channel` was gone (it expired while the
    /// waiter waited): the waiter is woken to take a new one with a try of its own.
    pub(crate) fn place_lost(&self, channel: &str, token: &str) {
        let Some(state) = self.channels().get(channel).cloned() else { return };
        let mut ch = lock(&state);
        if let Some(place) = ch.tokens.get_mut(token) {
            place.renewed = None;
            place.event.notify(1);
        }
    }

    /// A waiter's try showed that the holds on `channel` leave room for another waiter (a semaphore with free slots
    /// after a grant, or with fewer free slots than this waiter asked for but some): the next local waiter is woken
    /// to try, since one wake-up per release would leave it asleep until its safety poll while it could get in.
    /// Bounded: each wake-up lets every waiter registered when it came try once, then the passing stops.
    pub(crate) fn pass_room_on(&self, channel: &str) {
        let state = self.channels().get(channel).cloned();
        if let Some(state) = state {
            lock(&state).pass_room_on();
        }
    }

    /// A waiter woken for a release on `channel` could not use it (its try was blocked by another resource): the
    /// wake-up goes to another local waiter that has not tried since it came, or, with none, to the next waiting
    /// process ([`PASS_ON`](crate::backend::scripts::PASS_ON), which wakes it only if the lock is free).
    pub(crate) fn pass_wake_on(&self, channel: &str) {
        let state = self.channels().get(channel).cloned();
        let passed = state.is_some_and(|state| lock(&state).pass_to_another());
        if !passed {
            self.pass_on(channel);
        }
    }

    /// Wakes a local waiter on `channel` when one of them does not queue in a fair queue there (a plain or multi-lock
    /// waiter beside fair ones): a fair release announces only its head, and such a waiter hears nothing else.
    pub(crate) fn wake_one_unqueued(&self, channel: &str) {
        let state = self.channels().get(channel).cloned();
        if let Some(state) = state {
            let mut ch = lock(&state);
            if ch.watchers > ch.tokens.len() {
                ch.wake_one();
            }
        }
    }

    /// Wakes the longest-waiting local waiter on `channel`, if any.
    pub fn wake_one(&self, channel: &str) {
        let state = self.channels().get(channel).cloned();
        if let Some(state) = state {
            lock(&state).wake_one();
        }
    }

    /// Wakes the next local waiter on `channel` for a release of ours that is on its way to the server but has not
    /// completed (see [`LockStore::orders_commands`](crate::LockStore::orders_commands)). Should a waiter's try
    /// still find the lock held (the release was not queued yet after all), the returned value wakes a waiter
    /// again when it is dropped, at the release's completion. `None` when nobody waits on `channel`: there is
    /// nobody to wake early, and the caller wakes a waiter at the completion instead (one may have started
    /// waiting meanwhile).
    pub(crate) fn release_started(self: &Arc<Self>, channel: &str) -> Option<EarlyRelease> {
        let state = self.channels().get(channel).cloned()?;
        {
            let mut ch = lock(&state);
            ch.releasing += 1;
            ch.wake_one();
        }
        Some(EarlyRelease { state })
    }

    /// How many local waiters watch `channel` (a holder that had to wait stays registered until it releases).
    pub fn waiters(&self, channel: &str) -> usize {
        let state = self.channels().get(channel).cloned();
        state.map_or(0, |state| lock(&state).watchers)
    }

    /// Whether this process listens on `channel`: a waiter of its own waits for that lock, or one did a short while
    /// ago (a channel whose last waiter left, or whose holder that waited released, stays subscribed for a while).
    /// A release of a lock whose channel nobody here listens on was not contended as far as this process saw, and
    /// tries [`UNLOCK`](crate::backend::scripts::UNLOCK) first.
    pub fn listens_on(&self, channel: &str) -> bool {
        self.channels().contains_key(channel)
    }

    /// Channels with at least one waiter (a backend resubscribes to these after reconnecting).
    pub fn watched_channels(&self) -> Vec<String> {
        self.channels().keys().cloned().collect()
    }
}

/// The id a fair queue's announcements name the waiter holding `token` by: the first 16 hex digits of the SHA-1 of
/// the token as the server holds it (see `waiter_id.lua`, beside the scripts). Only this id is published, never the
/// token: anyone who may `SUBSCRIBE` could otherwise release or extend the waiter's lock once granted.
pub(crate) fn waiter_id(token: &str) -> String {
    let mut id = sha1_smol::Sha1::from(token.as_bytes()).digest().to_string();
    id.truncate(16);
    id
}

fn lock(ch: &Mutex<Channel>) -> MutexGuard<'_, Channel> {
    ch.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl fmt::Debug for ReleaseHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseHub")
            .field("origin", &self.origin)
            .field("channels", &self.channels().len())
            .field("control", &self.control)
            .finish()
    }
}

/// One waiter's registration on a channel; unsubscribes when the last one is dropped.
pub struct ReleaseWatch {
    hub: Arc<ReleaseHub>,
    channel: String,
    state: Arc<Mutex<Channel>>,
    /// A fair-lock waiter's token (see [`ReleaseHub::watch_as`]).
    token: Option<String>,
    /// This registration among the channel's (see [`Channel`]'s `blocked`).
    id: u64,
}

impl ReleaseWatch {
    /// The waiter's last try was held by this channel's resource, asking for `demand`; what held it expires by
    /// `expiry` if the try said: a newcomer asking for as much or more queues behind it (see [`ReleaseHub::ahead`]).
    pub(crate) fn blocked(&self, demand: u32, expiry: Option<std::time::Instant>) {
        lock(&self.state).blocked.insert(self.id, Blocked { demand, expiry, holding: false });
    }

    /// The waiter holds the resource now, excluding every other holder, until `valid_until` as it believes: a
    /// newcomer queues behind it until then (its try would be refused; the release wakes it), and not after (a holder
    /// whose key expired holds nobody back).
    pub(crate) fn holding(&self, valid_until: std::time::Instant) {
        lock(&self.state).blocked.insert(self.id, Blocked { demand: 0, expiry: Some(valid_until), holding: true });
    }

    /// The waiter's try learned that this channel's resource is held until `expiry`: the other local waiters
    /// blocked by it that know no expiry, or a later one (a read-write lock's readers that waited for a writer's
    /// place, which has since become the writer's hold), look again, so each sleeps no longer than the hold. A
    /// waiter woken this way learns the same expiry and wakes nobody: the waking ends.
    pub(crate) fn tighten(&self, expiry: std::time::Instant) {
        // Differences below this are not worth a try.
        const SLACK: std::time::Duration = std::time::Duration::from_millis(20);
        let ch = lock(&self.state);
        let stale = ch
            .blocked
            .iter()
            .filter(|(id, b)| **id != self.id && !b.holding && b.expiry.is_none_or(|e| e > expiry + SLACK))
            .count();
        if stale > 0 {
            ch.event.notify(stale.additional());
        }
    }

    /// The waiter is not blocked by this channel's resource (it holds the lock, another resource held its try, or
    /// its try failed): it holds no newcomer back.
    pub(crate) fn unblocked(&self) {
        lock(&self.state).blocked.remove(&self.id);
    }

    /// Whether releases on this channel reach this process: the server confirmed the subscription and did not
    /// refuse it since. `false` while a request is unanswered (a waiter that registered behind another's request
    /// does not await its answer) or after it failed, and a waiter then polls on its backoff instead of its safety
    /// poll.
    pub(crate) fn hears(&self) -> bool {
        let ch = lock(&self.state);
        ch.confirmed && !ch.deaf
    }

    /// A listener for the next wake-up. Create it *before* polling the server, then await it, so a release that
    /// lands between the poll and the await is not missed. Dropped after it was woken but before it was awaited
    /// (its waiter left), it passes the wake-up on.
    pub(crate) fn listen(&self) -> Wake {
        Wake { listener: Some(lock(&self.state).event.listen()), state: self.state.clone() }
    }

    /// A listener for an announcement naming this waiter's token as the head of a fair lock's queue (pending
    /// forever for a watch without a token). Create it before the try, like [`listen`](Self::listen).
    pub(crate) fn listen_token(&self) -> Option<EventListener> {
        let token = self.token.as_deref()?;
        let event = lock(&self.state).tokens.get(token).map(|p| p.event.clone())?;
        Some(event.listen())
    }

    /// Up to `max` other fair-lock waiters of this process on this channel with the same waiter TTL whose places
    /// were renewed half a heartbeat ago or longer, least recently renewed first: a try renews their places too, so
    /// one process sends about one heartbeat per resource and interval, however many of its waiters queue.
    ///
    /// A place renewed more recently is left out: every try renewing every peer made each try's server work grow
    /// with the waiters (1 000 waiters in one process: 80 `ZADD`s per acquisition). A place is still renewed
    /// within a heartbeat and a quarter (by a peer's try, or its own timer) and lasts three.
    pub(crate) fn peers(&self, max: usize) -> Vec<String> {
        let Some(me) = self.token.as_deref() else { return Vec::new() };
        let ch = &mut *lock(&self.state);
        let Some(ttl) = ch.tokens.get(me).map(|p| p.waiter_ttl) else { return Vec::new() };
        // A live waiter's loop runs at least once per heartbeat (a third of its waiter TTL).
        let now = std::time::Instant::now();
        let live = |p: &Place| now.saturating_duration_since(p.alive) < ttl * 2 / 3;
        let half_heartbeat = ttl / 6;
        let due = |p: &Place| {
            let last = p.renewed.max(p.claimed);
            p.renewed.is_some() && last.is_some_and(|r| now.saturating_duration_since(r) >= half_heartbeat)
        };
        let mut peers: Vec<(String, Option<std::time::Instant>)> = ch
            .tokens
            .iter()
            // A waiter whose place no try has shown yet (registered before its first try) or that lost it has no
            // place to renew: it takes one with a try of its own.
            .filter(|(t, p)| t.as_str() != me && p.waiter_ttl == ttl && live(p) && due(p))
            .map(|(t, p)| (t.clone(), p.renewed))
            .collect();
        peers.sort_by_key(|(_, renewed)| *renewed);
        peers.truncate(max);
        for (token, _) in &peers {
            if let Some(place) = ch.tokens.get_mut(token) {
                place.claimed = Some(now);
            }
        }
        peers.into_iter().map(|(t, _)| t).collect()
    }

    /// Records that a try sent at `at` renewed the places of this waiter and of `peers` (a peer whose place was
    /// gone is woken by the try's caller instead, see [`ReleaseHub::place_lost`]).
    pub(crate) fn renewed(&self, at: std::time::Instant, peers: &[String]) {
        let ch = &mut *lock(&self.state);
        if let Some(place) = self.token.as_ref().and_then(|token| ch.tokens.get_mut(token)) {
            place.renewed = Some(place.renewed.map_or(at, |r| r.max(at)));
        }
        // A peer whose place the try found gone has no renewal time (`place_lost`, during the call), and keeps none
        // until a try of its own: a grant announced to it must not be counted from a try that ran after the grant.
        for token in peers {
            if let Some(place) = ch.tokens.get_mut(token) {
                place.renewed = place.renewed.map(|r| r.max(at));
            }
        }
    }

    /// Records when this waiter's first try was sent (the earliest of the times given): see [`Place`]'s `first_try`.
    pub(crate) fn first_try(&self, at: std::time::Instant) {
        let ch = &mut *lock(&self.state);
        if let Some(place) = self.token.as_ref().and_then(|token| ch.tokens.get_mut(token)) {
            place.first_try = Some(place.first_try.map_or(at, |first| first.min(at)));
        }
    }

    /// Takes the grant a release announced for this waiter, if one came (see [`ReleaseHub::deliver`]).
    pub(crate) fn take_grant(&self) -> Option<Granted> {
        let token = self.token.as_deref()?;
        lock(&self.state).tokens.get_mut(token).and_then(|p| p.granted.take())
    }

    /// Notes that this waiter's loop runs (see [`Place`]'s `alive`).
    pub(crate) fn alive(&self) {
        if let Some(token) = self.token.as_deref() {
            if let Some(place) = lock(&self.state).tokens.get_mut(token) {
                place.alive = std::time::Instant::now();
            }
        }
    }

    /// When this waiter's place was last renewed (by its own try or a peer's).
    pub(crate) fn renewed_at(&self) -> Option<std::time::Instant> {
        let token = self.token.as_deref()?;
        lock(&self.state).tokens.get(token).and_then(|p| p.renewed)
    }

    /// Takes a wake-up that found nobody listening, if one is kept (see [`Channel`]'s `stored`).
    pub(crate) fn take_stored(&self) -> bool {
        std::mem::take(&mut lock(&self.state).stored)
    }

    /// The hub this registration is on.
    /// Resolves at the next message on this channel, whoever sent it (our own releases' echoes included).
    pub(crate) fn listen_any(&self) -> EventListener {
        lock(&self.state).any.listen()
    }

    pub(crate) fn hub(&self) -> &Arc<ReleaseHub> {
        &self.hub
    }

    /// The channel this registration listens on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// How many early-woken local releases have completed: read before a try, then pass to
    /// [`held_during`](Self::held_during) when the try found the lock held.
    pub(crate) fn progress(&self) -> u64 {
        lock(&self.state).completed
    }

    /// After a try (started at `progress`) found the lock held: whether a local release completed meanwhile (the
    /// "held" may predate it: try again now), or is still on its way (the try overtook the release that woke it:
    /// the listener returned wakes this waiter at the release's completion, to try again before the waiters
    /// behind it, whose turn it did not have).
    pub(crate) fn held_during(&self, progress: u64) -> Raced {
        let mut ch = lock(&self.state);
        if ch.completed > progress {
            return Raced::Completed;
        }
        if ch.releasing > 0 {
            tracing::trace!(channel = %ch.name, "a try found the lock held while a local release was on its way");
            ch.raced = true;
            return Raced::OnItsWay(ch.completion.listen());
        }
        Raced::No
    }
}

impl Drop for ReleaseWatch {
    fn drop(&mut self) {
        let mut registry = self.hub.channels();
        let (last, unheard) = {
            let mut ch = lock(&self.state);
            ch.watchers -= 1;
            ch.blocked.remove(&self.id);
            self.hub.watching.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(token) = &self.token {
                ch.tokens.remove(token);
                ch.ids.remove(&waiter_id(token));
            }
            let last = ch.watchers == 0;
            (last, last && std::mem::take(&mut ch.stored))
        };
        if !last {
            return;
        }

        // Stays subscribed while idle (see `Registry::idle`); the oldest idle channel beyond the bound is given up.
        registry.idle.push_back(self.channel.clone());
        let mut evicted = None;
        if registry.idle.len() > LINGERING {
            if let Some(oldest) = registry.idle.pop_front() {
                if let Some(state) = registry.channels.remove(&oldest) {
                    lock(&state).subscribed = false;
                }
                // Under the registry lock: a waiter arriving now subscribes after this (see `watch`).
                self.hub.control.unsubscribe(&oldest);
                evicted = Some(oldest);
            }
        }
        drop(registry);
        if unheard {
            // A wake-up nobody here took (a release named this process, or a waiter that left passed its wake-up
            // on) and nobody is left to take it: another process may be waiting for the lock it announced.
            self.hub.pass_on(&self.channel);
        }
        if let Some(evicted) = evicted {
            // A release that named this process from now on would not reach it: take it out of the line (and wake
            // the next process if the lock is free meanwhile).
            self.hub.pass_on(&evicted);
        }
    }
}

/// What a try that found the lock held overlapped (see [`ReleaseWatch::held_during`]).
pub(crate) enum Raced {
    /// No local release.
    No,
    /// A local release completed during the try.
    Completed,
    /// A local release that woke this waiter is still on its way: the listener hears its completion.
    OnItsWay(EventListener),
}

/// One waiter's listener for the next wake-up on a channel (see [`ReleaseWatch::listen`]).
pub(crate) struct Wake {
    listener: Option<EventListener>,
    state: Arc<Mutex<Channel>>,
}

impl Wake {
    /// Whether this listener has not yet delivered a wake-up: it still holds its place among the waiters (a
    /// wake-up that reached it and has not been awaited yet is delivered at its next poll).
    pub(crate) fn is_listening(&self) -> bool {
        self.listener.is_some()
    }
}

impl std::future::Future for Wake {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let Some(listener) = self.listener.as_mut() else { return std::task::Poll::Ready(()) };
        match Pin::new(listener).poll(cx) {
            std::task::Poll::Ready(()) => {
                self.listener = None;
                std::task::Poll::Ready(())
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        // Woken but never awaited: the waiter left. Pass the wake-up on ourselves (event-listener's own hand-over
        // is silent when nobody else listens yet, and such a wake-up must then be kept for the next newcomer).
        if let Some(listener) = self.listener.take() {
            if listener.discard() {
                lock(&self.state).wake_one();
            }
        }
    }
}

/// A local release that woke a waiter before it completed (see [`ReleaseHub::release_started`]); dropped when the
/// release completed (or was cancelled).
pub(crate) struct EarlyRelease {
    state: Arc<Mutex<Channel>>,
}

impl Drop for EarlyRelease {
    fn drop(&mut self) {
        let mut ch = lock(&self.state);
        ch.releasing = ch.releasing.saturating_sub(1);
        ch.completed += 1;
        // The waiters whose try raced this release try again; if they all left, the next waiter does.
        if std::mem::take(&mut ch.raced) && ch.completion.notify(usize::MAX) == 0 {
            ch.wake_one();
        }
    }
}

impl fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseWatch").field("channel", &self.channel).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Every release message reads one way only (issue 54: a Spring lock key with a space or `>` was read as a fair
    /// or named wake-up and woke nobody): this library's forms are made of origins, ids and digits, and nothing
    /// else matches them.
    #[test]
    fn release_messages_read_one_way_only() {
        let o = "0123456789abcdef";
        let p = "fedcba9876543210";
        assert_eq!(Message::parse(o.as_bytes()), Message::Plain { from: o.as_bytes() });
        let named = format!("{o}>{p}");
        assert_eq!(Message::parse(named.as_bytes()), Message::Named { from: o.as_bytes(), to: p.as_bytes() });
        let fair = format!("{o} {p}");
        assert_eq!(
            Message::parse(fair.as_bytes()),
            Message::Fair { from: o.as_bytes(), grant: None, id: p.as_bytes() }
        );
        let granted = format!("{o}+1796650296369153 {p}");
        assert!(matches!(
            Message::parse(granted.as_bytes()),
            Message::Fair { grant: Some(Grant::Fenced(1796650296369153)), .. }
        ));
        let unfenced = format!("{o}+ {p}");
        assert!(matches!(Message::parse(unfenced.as_bytes()), Message::Fair { grant: Some(Grant::Unfenced), .. }));
        let huge = format!("{o}+99999999999999999999999 {p}");
        assert!(matches!(Message::parse(huge.as_bytes()), Message::Fair { grant: Some(Grant::Unreadable), .. }));
        // A client without a listener (the empty origin) and the admin's force release send the same forms.
        assert_eq!(Message::parse(b""), Message::Plain { from: b"" });
        assert_eq!(Message::parse(b"force-release"), Message::Plain { from: b"force-release" });
        let unnamed = format!(">{p}");
        assert_eq!(Message::parse(unnamed.as_bytes()), Message::Named { from: b"", to: p.as_bytes() });
        let forced = format!("force-release+17 {p}");
        assert!(matches!(
            Message::parse(forced.as_bytes()),
            Message::Fair { from: b"force-release", grant: Some(Grant::Fenced(17)), .. }
        ));
        let told = format!(" {p}");
        assert!(matches!(Message::parse(told.as_bytes()), Message::Fair { from: b"", grant: None, .. }));
        // Other libraries' payloads, and everything near our forms, are foreign releases.
        for foreign in [
            "registry:a b".to_owned(),
            "registry:a>b".to_owned(),
            format!("registry:{o}>{p}"),
            format!("registry:{o} {p}"),
            "0".to_owned(),
            format!("registry:x {p}"),
            format!("registry:x>{p}"),
            format!("{o}>"),
            format!("{o}>{p}x"),
            format!("{o} {p} "),
            format!("{o}x {p}"),
            format!("{o}+12a {p}"),
            o.to_uppercase(),
            format!("{o} "),
            " ".to_owned(),
            "force-release2".to_owned(),
        ] {
            assert_eq!(Message::parse(foreign.as_bytes()), Message::Foreign, "{foreign:?}");
        }
    }

    /// A try takes along only the peers whose places are due (renewed half a heartbeat ago or longer), and two
    /// tries at once take different ones: each try's server work stays bounded however many waiters queue.
    #[tokio::test]
    async fn a_try_renews_only_the_peers_that_are_due_and_not_taken_by_another() {
        let hub = ReleaseHub::local();
        let ttl = Duration::from_millis(600);
        let mut watches = Vec::new();
        for i in 0..4 {
            watches.push(hub.watch_as("c", Some((&format!("w{i}"), ttl))).await);
        }
        let long_ago = std::time::Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
        for w in &watches {
            w.renewed(long_ago, &[]);
        }
        // w0's try takes the other three along; w1's, at the same time, finds them taken.
        let first = watches[0].peers(16);
        assert_eq!(first.len(), 3, "{first:?}");
        assert!(watches[1].peers(16).iter().all(|p| p == "w0"), "a peer taken by a try in flight was taken again");
        // The try's reply renews them: none is due for half a heartbeat (100 ms here).
        watches[0].renewed(std::time::Instant::now(), &first);
        assert!(watches[2].peers(16).iter().all(|p| p == "w0" || p == "w1"));
        tokio::time::sleep(Duration::from_millis(120)).await;
        for w in &watches {
            w.alive();
        }
        assert_eq!(watches[3].peers(16).len(), 3, "due again after half a heartbeat");
    }

    #[tokio::test]
    async fn wakes_one_waiter_per_release_and_skips_own_echo() {
        let hub = ReleaseHub::local();
        let w1 = hub.watch("c").await;
        let w2 = hub.watch("c").await;
        let l1 = w1.listen();
        let l2 = w2.listen();
        hub.deliver("c", hub.origin().as_bytes());
        hub.deliver("c", b"someone-else");
        let first = tokio::time::timeout(Duration::from_millis(100), l1).await;
        assert!(first.is_ok(), "the longest waiter is woken");
        let second = tokio::time::timeout(Duration::from_millis(50), l2).await;
        assert!(second.is_err(), "one release wakes one waiter");
        drop((w1, w2));
        assert_eq!(hub.watched_channels(), ["c"], "an idle channel stays subscribed for a while");
    }

    #[tokio::test]
    async fn a_grant_names_its_token_and_is_counted_from_the_first_try() {
        let hub = ReleaseHub::local();
        let ttl = Duration::from_secs(3);
        let (tok, peer) = ("a".repeat(32), "b".repeat(32));
        let head = hub.watch_as("c", Some((tok.as_str(), ttl))).await;
        let other = hub.watch_as("c", Some((peer.as_str(), ttl))).await;
        let first = std::time::Instant::now();
        head.first_try(first);
        head.renewed(first, &[]);
        // A later try, which may have taken a new place after a grant: never the grant's starting point.
        let later = first + Duration::from_millis(50);
        head.first_try(later);
        head.renewed(later, &[]);
        let listener = head.listen_token().unwrap();
        // Announcements name a waiter by the SHA-1 of its token, never the token (a capability): the token itself
        // names nobody.
        let (id, peer_id) = (waiter_id(&tok), waiter_id(&peer));
        hub.deliver("c", format!("{}+1766000000000001 {tok}", "f".repeat(16)).as_bytes());
        assert_eq!(head.take_grant(), None, "an announcement naming the token itself was taken");
        hub.deliver("c", format!("{}+1766000000000001 {id}", "f".repeat(16)).as_bytes());
        assert!(tokio::time::timeout(Duration::from_millis(100), listener).await.is_ok(), "the grantee is woken");
        assert_eq!(head.take_grant(), Some(Granted { fence: Some(1_766_000_000_000_001), since: Some(first) }));
        assert_eq!(head.take_grant(), None, "a grant is taken once");
        assert_eq!(other.take_grant(), None, "a grant is for its token only");
        // Without a token; a fence too large to be one, which makes the grant unusable from the announcement; and a
        // fence that is no number, which is no announcement of ours at all (WIRE.md §6.5).
        let o = "e".repeat(16);
        hub.deliver("c", format!("{o}+ {id}").as_bytes());
        assert_eq!(head.take_grant(), Some(Granted { fence: None, since: Some(first) }));
        hub.deliver("c", format!("{o}+99999999999999999999999 {id}").as_bytes());
        assert_eq!(head.take_grant(), Some(Granted { fence: None, since: None }));
        hub.deliver("c", format!("{o}+1.7e15 {id}").as_bytes());
        assert_eq!(head.take_grant(), None);
        // A waiter whose first try is not known (a peer's renewals do not tell it) gets no starting point: it tries.
        head.renewed(std::time::Instant::now(), std::slice::from_ref(&peer));
        hub.deliver("c", format!("{o}+ {peer_id}").as_bytes());
        assert_eq!(other.take_grant(), Some(Granted { fence: None, since: None }));
        // A telling announcement carries no grant.
        hub.deliver("c", format!("{o} {id}").as_bytes());
        assert_eq!(head.take_grant(), None);
    }

    #[derive(Debug, Default)]
    struct Recorded(Mutex<Vec<String>>);

    impl SubscriptionControl for Arc<Recorded> {
        fn subscribe(&self, channel: &str) -> Confirmation {
            self.0.lock().unwrap().push(format!("+{channel}"));
            Box::pin(std::future::ready(Ok(())))
        }
        fn unsubscribe(&self, channel: &str) {
            self.0.lock().unwrap().push(format!("-{channel}"));
        }
    }

    #[tokio::test]
    async fn idle_channels_stay_subscribed_up_to_a_bound() {
        let recorded = Arc::new(Recorded::default());
        let hub = ReleaseHub::new(recorded.clone());
        // Waiting for one lock again and again subscribes once.
        for _ in 0..5 {
            drop(hub.watch("again").await);
        }
        assert_eq!(*recorded.0.lock().unwrap(), ["+again"]);
        // More idle channels than the bound: the oldest ones are given up, in order.
        for i in 0..LINGERING {
            drop(hub.watch(&format!("c{i}")).await);
        }
        let log = recorded.0.lock().unwrap().clone();
        assert_eq!(log.last().map(String::as_str), Some("-again"), "{log:?}");
        assert_eq!(hub.watched_channels().len(), LINGERING);
        // A channel back from idle is not subscribed twice.
        let back = hub.watch("c5").await;
        assert_eq!(recorded.0.lock().unwrap().iter().filter(|e| *e == "+c5").count(), 1);
        drop(back);
    }

    /// A control whose one subscription is refused when the test says so (a server whose ACL refuses the channel,
    /// answering after a round trip).
    #[derive(Debug)]
    struct RefusedLater(Mutex<Option<tokio::sync::oneshot::Receiver<()>>>);

    impl SubscriptionControl for Arc<RefusedLater> {
        fn subscribe(&self, _channel: &str) -> Confirmation {
            let answer = self.0.lock().unwrap().take();
            Box::pin(async move {
                if let Some(answer) = answer {
                    let _ = answer.await;
                }
                Err(crate::LockError::unavailable(std::io::Error::other("NOPERM this user has no permissions")))
            })
        }
        fn unsubscribe(&self, _channel: &str) {}
    }

    /// Found by the schedule explorer (seed 1592597547): a fair waiter that registered while its process's
    /// subscription was still unanswered believed it heard releases; the subscription was then refused, and the
    /// waiter, first in the queue of a free lock, let its peers' tries renew its place and never tried again.
    #[tokio::test]
    async fn a_waiter_registered_before_the_subscription_is_answered_does_not_hear() {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let hub = ReleaseHub::new(Arc::new(RefusedLater(Mutex::new(Some(answered)))));
        let mut first = Box::pin(hub.watch_as("c", Some(("a", Duration::from_millis(150)))));
        std::future::poll_fn(|cx| {
            assert!(first.as_mut().poll(cx).is_pending(), "the subscription is not answered yet");
            std::task::Poll::Ready(())
        })
        .await;
        let second = hub.watch_as("c", Some(("b", Duration::from_millis(150)))).await;
        assert!(!second.hears(), "a waiter counted on a subscription nobody has confirmed");
        answer.send(()).unwrap();
        let first = first.await;
        assert!(!first.hears() && !second.hears(), "a refused subscription is heard");
    }

    #[tokio::test]
    async fn a_dropped_woken_listener_passes_the_wakeup_on() {
        let hub = ReleaseHub::local();
        let w1 = hub.watch("c").await;
        let w2 = hub.watch("c").await;
        let l1 = w1.listen();
        let l2 = w2.listen();
        hub.wake_one("c");
        drop(l1);
        let woke = tokio::time::timeout(Duration::from_millis(100), l2).await;
        assert!(woke.is_ok(), "a dead waiter must not swallow the release");
    }
}

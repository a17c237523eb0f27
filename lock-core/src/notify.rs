//! Release notifications: turning "the holder released" into a wake-up for one local waiter.
//!
//! Notifications are a hint, never a source of truth: pub/sub is at-most-once and a release can race a waiter's
//! try. A waiter therefore always re-polls the server when woken, and also wakes at the holder's remaining TTL and
//! at its backoff cap. The hub wakes **one** waiter per release (the one that has been listening longest), which
//! avoids a thundering herd of retries; a woken waiter that gives up passes its wake-up on.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use event_listener::{Event, EventListener, IntoNotification, Listener};

use crate::error::Result;

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
    /// A waiter's try found the lock held while such a release was still on its way: wake one at its completion.
    raced: bool,
    /// A wake-up found nobody listening (the waiters were between a try and their next wait, or the one woken
    /// left): the next newcomer that would queue behind the waiters tries at once instead.
    stored: bool,
    /// Fair-lock waiters by token: a release names the head of the queue, and only that waiter is woken.
    tokens: HashMap<String, Arc<Event>>,
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
            stored: false,
            tokens: HashMap::new(),
        }
    }

    /// Wakes the longest-waiting listener, or keeps the wake-up for the next newcomer when nobody listens.
    fn wake_one(&mut self) {
        if self.event.notify(1.additional()) == 0 {
            self.stored = true;
        }
    }

    /// Nobody uses this state any more: no waiter, no early release on its way.
    fn unused(&self) -> bool {
        self.watchers == 0 && self.releasing == 0
    }
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
    channels: Mutex<HashMap<String, Arc<Mutex<Channel>>>>,
}

impl ReleaseHub {
    /// A hub that follows channels through `control`.
    pub fn new(control: impl SubscriptionControl) -> Arc<Self> {
        Arc::new(ReleaseHub {
            origin: format!("{:016x}", crate::token::random_u128() as u64),
            control: Box::new(control),
            channels: Mutex::new(HashMap::new()),
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

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Arc<Mutex<Channel>>>> {
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
    pub(crate) async fn watch_as(self: &Arc<Self>, channel: &str, token: Option<&str>) -> ReleaseWatch {
        let (state, confirmation) = {
            let mut map = self.channels();
            let state =
                map.entry(channel.to_owned()).or_insert_with(|| Arc::new(Mutex::new(Channel::new(channel)))).clone();
            let first = {
                let mut ch = lock(&state);
                ch.watchers += 1;
                if let Some(token) = token {
                    ch.tokens.insert(token.to_owned(), Arc::new(Event::new()));
                }
                ch.watchers == 1
            };
            // Requested under the map lock, like the unsubscribe of the last waiter leaving (see `Drop`), so the
            // two reach the backend in the order they were decided.
            (state, first.then(|| self.control.subscribe(channel)))
        };
        // Built before the await so that a cancelled subscribe still unregisters.
        let watch =
            ReleaseWatch { hub: self.clone(), channel: channel.to_owned(), state, token: token.map(str::to_owned) };
        if let Some(confirmation) = confirmation {
            if let Err(err) = confirmation.await {
                tracing::debug!(channel, error = %err, "release notifications unavailable; waiters poll");
            }
        }
        watch
    }

    /// Handles one message from the backend's subscriber.
    ///
    /// A payload `<origin> <token>` (a fair lock's release) wakes only the waiter holding `token`, if it is ours,
    /// whichever process released; a payload `<origin>` wakes the longest-waiting local waiter unless the release
    /// was our own (already woken locally).
    pub fn deliver(&self, channel: &str, payload: &[u8]) {
        if let Some(space) = payload.iter().position(|b| *b == b' ') {
            self.wake_token(channel, &payload[space + 1..]);
            return;
        }
        if payload == self.origin.as_bytes() {
            return;
        }
        self.wake_one(channel);
    }

    /// Wakes the fair-lock waiter holding `token` on `channel`, if it is one of ours.
    fn wake_token(&self, channel: &str, token: &[u8]) {
        let Some(state) = self.channels().get(channel).cloned() else { return };
        let event = std::str::from_utf8(token).ok().and_then(|token| lock(&state).tokens.get(token).cloned());
        if let Some(event) = event {
            event.notify(1);
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
        Some(EarlyRelease { hub: self.clone(), state })
    }

    /// How many local waiters watch `channel` (a holder that had to wait stays registered until it releases).
    pub fn waiters(&self, channel: &str) -> usize {
        let state = self.channels().get(channel).cloned();
        state.map_or(0, |state| lock(&state).watchers)
    }

    /// Channels with at least one waiter (a backend resubscribes to these after reconnecting).
    pub fn watched_channels(&self) -> Vec<String> {
        self.channels().keys().cloned().collect()
    }
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
}

impl ReleaseWatch {
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
        let event = lock(&self.state).tokens.get(token).cloned()?;
        Some(event.listen())
    }

    /// Takes a wake-up that found nobody listening, if one is kept (see [`Channel`]'s `stored`).
    pub(crate) fn take_stored(&self) -> bool {
        std::mem::take(&mut lock(&self.state).stored)
    }

    /// The hub this registration is on.
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

    /// After a try (started at `progress`) found the lock held: whether to try again now, because a local release
    /// completed meanwhile (the "held" may predate it). When one is still on its way, its completion is asked to
    /// wake a waiter.
    pub(crate) fn held_during(&self, progress: u64) -> bool {
        let mut ch = lock(&self.state);
        if ch.completed > progress {
            return true;
        }
        if ch.releasing > 0 {
            tracing::trace!(channel = %ch.name, "a try found the lock held while a local release was on its way");
            ch.raced = true;
        }
        false
    }
}

impl Drop for ReleaseWatch {
    fn drop(&mut self) {
        let mut map = self.hub.channels();
        let (last, unused) = {
            let mut ch = lock(&self.state);
            ch.watchers -= 1;
            if let Some(token) = &self.token {
                ch.tokens.remove(token);
            }
            (ch.watchers == 0, ch.unused())
        };
        if last {
            // Kept while an early release is on its way: a waiter arriving meanwhile must share its state (the
            // release's completion wakes waiters whose try it overtook); the release removes it when done.
            if unused {
                map.remove(&self.channel);
            }
            // Under the map lock: a waiter arriving now subscribes after this (see `watch`).
            self.hub.control.unsubscribe(&self.channel);
        }
    }
}

/// One waiter's listener for the next wake-up on a channel (see [`ReleaseWatch::listen`]).
pub(crate) struct Wake {
    listener: Option<EventListener>,
    state: Arc<Mutex<Channel>>,
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
    hub: Arc<ReleaseHub>,
    state: Arc<Mutex<Channel>>,
}

impl Drop for EarlyRelease {
    fn drop(&mut self) {
        let mut map = self.hub.channels();
        let mut ch = lock(&self.state);
        ch.releasing = ch.releasing.saturating_sub(1);
        ch.completed += 1;
        if std::mem::take(&mut ch.raced) {
            ch.wake_one();
        }
        // The last waiter left while this release was on its way (see `ReleaseWatch`'s drop).
        if ch.unused() && map.get(&ch.name).is_some_and(|s| Arc::ptr_eq(s, &self.state)) {
            map.remove(&ch.name);
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
        assert!(hub.watched_channels().is_empty());
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

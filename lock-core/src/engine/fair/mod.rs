//! Waiting in a fair lock's queue (see [`LockOptions::with_fair_queue`]): one place per waiter on the server, kept
//! by heartbeats, and a wake-up only for the waiter whose turn it is.
//!
//! The server decides the order ([`FAIR_ACQUIRE`](crate::backend::scripts::FAIR_ACQUIRE)) and hands the lock over
//! ([`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE) grants it to the live head); this loop only keeps the place,
//! returns a grant it is told of, and otherwise tries when told to. A waiter tries when
//! - a release names its token as the new head without granting it (the hub wakes only that waiter, in whichever
//!   process it waits), or announces a grant the waiter cannot count from (see [`Lock::granted`]);
//! - it is the head and the holder's TTL runs out (a holder that died announces nothing);
//! - its heartbeat is due (every `waiter_ttl / 3`): the heartbeat *is* a try, so a lost announcement costs the head at
//!   most one heartbeat, and a waiter that missed its turn by a pause of its own re-enters at the back.
//!
//! A waiter that stops (out of budget, a failure, its future dropped) gives its place back with the fair release,
//! which also tells the next head when the lock is free.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::{select, Either};

use crate::engine::give_back::{InFlight, TokenScope};
use crate::engine::lock::{Guard, Lock};
use crate::engine::primitive::{announcer, Ask, Grant, Kind, Primitive};
use crate::engine::wait::{Attempt, Watches};
use crate::error::{LockError, Result};
use crate::options::LockOptions;
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::seam::notify::{ReleaseWatch, Wake};
use crate::seam::scripts;
use crate::seam::store::{LockStore, ReleaseOutcome};
use crate::seam::transport::{Call, Reply};
use crate::token::Token;
use event_listener::EventListener;

/// The key of `keys`' fair queue: token → ticket.
pub(crate) fn queue_key(keys: &LockKeys) -> String {
    keys.aux(crate::namespace::Aux::Queue)
}

/// The key of `keys`' fair-queue heartbeats: token → expiry of its place, server ms.
pub(crate) fn heartbeats_key(keys: &LockKeys) -> String {
    keys.aux(crate::namespace::Aux::Heartbeats)
}

/// The key of `keys`' fair-queue grants: token → how a release grants it the lock (see
/// [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE)).
pub(crate) fn grants_key(keys: &LockKeys) -> String {
    keys.aux(crate::namespace::Aux::Grants)
}

/// The queue of a fair lock (see [`LockOptions::with_fair_queue`]), and a read-write lock's writers' queue.
#[derive(Debug)]
pub(crate) struct FairSpec {
    /// `prefix{resource}:queue`: token → ticket.
    queue: String,
    /// `prefix{resource}:heartbeats`: token → expiry of its place, server ms.
    heartbeats: String,
    /// `prefix{resource}:grants`: token → how a release grants it the lock (see
    /// [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE)).
    grants: String,
    /// The waiter TTL, and in ms.
    waiter_ttl: Duration,
    waiter_ttl_ms: String,
}

impl FairSpec {
    /// The queue of `keys`' fair lock, whose places last `waiter_ttl` per heartbeat.
    pub(crate) fn new(keys: &LockKeys, waiter_ttl: Duration) -> Self {
        FairSpec {
            queue: queue_key(keys),
            heartbeats: heartbeats_key(keys),
            grants: grants_key(keys),
            waiter_ttl,
            waiter_ttl_ms: scripts::ttl_millis(waiter_ttl).to_string(),
        }
    }

    /// The queue key (token → ticket) and its heartbeats (token → expiry of the place, server ms).
    pub(crate) fn queue_keys(&self) -> (&str, &str) {
        (&self.queue, &self.heartbeats)
    }

    /// The lease a release grants a waiter of this queue acquiring with `ttl` (see
    /// [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE)): never longer than its waiter TTL, so a head that died just
    /// before its turn holds the lock no longer than its place would have held up the queue.
    pub(crate) fn lease(&self, ttl: Duration) -> Duration {
        ttl.min(self.waiter_ttl)
    }

    /// [`FAIR_ACQUIRE`](crate::backend::scripts::FAIR_ACQUIRE) of `keys` on one store; `readers` is a read-write lock's
    /// readers key, for its writer (whom a release only tells: its grant depends on readers).
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        readers: Option<&str>,
        store: &dyn LockStore,
        ask: Ask<'_>,
    ) -> Result<Grant> {
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let fencing = ask.fencing_flag();
        let floor = ask.floor_arg();
        let queue = if ask.queued.is_some() { "1" } else { "0" };
        let hub = store.release_hub();
        let (origin, sharded) = announcer(store);
        let mut call_keys = vec![
            keys.lock(),
            keys.fence(),
            &self.queue,
            &self.heartbeats,
            keys.channel(),
            keys.awaited(),
            &self.grants,
        ];
        call_keys.extend(readers);
        // How a release grants us the lock when we are the head: a lease of our TTL, or our waiter TTL when that is
        // shorter (see `FAIR_RELEASE`). A read-write lock's writer is only told (its grant depends on readers).
        let grant = match (readers, ask.queued) {
            (None, Some(_)) => {
                let lease = scripts::ttl_millis(self.lease(ask.ttl));
                format!("{lease} {fencing}")
            }
            _ => String::new(),
        };
        let mut args = vec![
            ask.token.as_str(),
            &ttl,
            fencing,
            &floor,
            &self.waiter_ttl_ms,
            queue,
            origin,
            sharded,
            &grant,
            keys.fence_idle(),
        ];
        args.extend(ask.queued.unwrap_or_default().iter().map(String::as_str));
        let call = Call::script("acquire", &scripts::FAIR_ACQUIRE, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let Reply::Array(items) = &ran.reply else { return Err(unexpected(&ran.reply)) };
        let int = |i: usize| items.get(i).and_then(Reply::as_int);
        let grant = match (int(0), items.len(), ask.fencing) {
            (Some(1), 2, true) => {
                Grant::Acquired { fences: smallvec::smallvec![int(1).and_then(|f| u64::try_from(f).ok())] }
            }
            (Some(1), 1, false) => Grant::Acquired { fences: smallvec::smallvec![None] },
            (Some(0), 3.., _) => {
                // Peers whose place was gone: they take a new one with a try of their own.
                for lost in items.iter().skip(3).filter_map(Reply::as_text) {
                    if let Some(hub) = hub {
                        hub.place_lost(keys.channel(), lost);
                    }
                }
                Grant::Held {
                    index: 0,
                    // -2: free, but someone is queued ahead of us.
                    ttl: int(1).and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
                    holder: None,
                    place: int(2).and_then(|p| u64::try_from(p).ok()),
                }
            }
            _ => return Err(unexpected(&ran.reply)),
        };
        ask.check_replicas(&ran, &grant)?;
        Ok(grant)
    }
}

fn unexpected(reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to a fair-lock script: {reply:?}"))
}

/// A fair lock's acquisition: its place in the queue while it waits, then the lock.
#[derive(Debug)]
pub(crate) struct FairTarget {
    keys: [LockKeys; 1],
    fair: FairSpec,
}

impl FairTarget {
    /// `keys`' lock, acquired in the order of a queue of waiters that hold their place for `waiter_ttl` per
    /// heartbeat.
    pub(crate) fn new(keys: LockKeys, waiter_ttl: Duration) -> Self {
        let fair = FairSpec::new(&keys, waiter_ttl);
        FairTarget { keys: [keys], fair }
    }
}

impl FairTarget {
    async fn acquire_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        self.fair.acquire(&self.keys[0], None, store, ask).await
    }

    /// [`FAIR_RELEASE`](crate::backend::scripts::FAIR_RELEASE): the release of a fair lock, and a waiter leaving its queue.
    async fn release_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
        let keys = &self.keys[0];
        let fair = &self.fair;
        let (origin, sharded) = announcer(store);
        let call_keys =
            [keys.lock(), &fair.queue, &fair.heartbeats, keys.channel(), keys.awaited(), keys.fence(), &fair.grants];
        let args = [token.as_str(), origin, sharded, keys.fence_idle()];
        let ran = store.call(Call::script("release", &scripts::FAIR_RELEASE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(code) => Ok(smallvec::smallvec![scripts::parse_release(code)?]),
            None => Err(unexpected(&ran.reply)),
        }
    }
}

#[async_trait]
impl Primitive for FairTarget {
    crate::engine::primitive::scripted_calls!(acquire, mutex_extend, release);

    fn kind(&self) -> Kind {
        Kind::FairLock
    }

    fn resources(&self) -> &[LockKeys] {
        &self.keys
    }

    fn draws_fence_later(&self) -> bool {
        true
    }

    fn queued(&self) -> bool {
        true
    }

    fn fair_lease(&self, ttl: Duration) -> Option<Duration> {
        Some(self.fair.lease(ttl))
    }

    fn wakes_head_only(&self) -> bool {
        true
    }
}

/// Waits in `target`'s queue until granted or out of budget (see [`Lock::acquire`]).
pub(crate) async fn until_granted(
    lock: &Lock,
    target: &Arc<dyn Primitive>,
    options: &LockOptions,
    waiter_ttl: Duration,
) -> Result<(Guard, Option<Watches>)> {
    let resource = target.label();
    let started = Instant::now();
    let deadline = started + options.wait();
    let heartbeat = waiter_ttl / 3;
    let policy = options.retry();
    let mut delays = policy.delays();
    let token = Token::generate_for(options);
    // Our place in the queue, given back if we stop waiting without the lock (armed until granted; a drop gives
    // it back in the background).
    let place = InFlight::new(
        lock.instances().clone(),
        target.clone(),
        token.clone(),
        TokenScope::Waiter,
        options.ttl(),
        lock.call_timeout(options.ttl()),
    );
    let hub = lock.stores().first().and_then(|store| store.release_hub()).cloned();
    let channel = target.resources().first().map(|keys| keys.channel()).unwrap_or_default();
    let mut watch: Option<ReleaseWatch> = None;
    // Declared after `watch`, so dropped before it. A fair waiter leaving without the lock (cut off, out of budget)
    // after a wake-up, or with plain waiters of its process queued behind it (a read-write lock's readers behind
    // its writers), passes a wake-up on as a plain waiter does: the release it consumed may have freed the lock, and
    // nobody else would hear of it. (Found by the schedule explorer: a reader slept its whole pause behind a
    // cancelled waiting writer while the lock was free.)
    let mut owed = crate::engine::wait::OwedWake::default();
    // A process that queued for this lock before and still listens on its channel registers first: its first try
    // takes a place whose announcements already reach it, so the head needs no look again for a grant announced
    // before it listened (with one waiter in each of two processes, that second try was a third of the server's
    // commands).
    if let Some(hub) = hub.as_ref().filter(|hub| hub.presence(channel).listens) {
        let registered = hub.watch_as(channel, Some((token.as_str(), waiter_ttl))).await;
        owed.registered_watch(&registered);
        watch = Some(registered);
    }
    let mut attempts: u32 = 0;
    // When the first try was sent (see `ReleaseWatch::first_try`).
    let mut first_sent: Option<Instant> = None;
    loop {
        // A release that made us the holder said so: no try needed (see `FAIR_RELEASE`).
        if let Some(granted) = watch.as_ref().and_then(ReleaseWatch::take_grant) {
            if let Some(guard) = lock.granted(target, options, &token, granted) {
                let _ = place.disarm();
                owed.acquired();
                return Ok((guard, watch.map(Watches::from_one)));
            }
        }
        attempts = attempts.saturating_add(1);
        // Listen before trying: an announcement between the try and the sleep must still wake us.
        let mut listeners = watch.as_ref().map(|w| (w.listen(), w.listen_token()));
        // This try renews the places of our process's other waiters on this resource too (one heartbeat per process
        // and resource, however many of its waiters queue); not the first, which takes our place: with every waiter
        // of a process coming back for the lock in turn, each would renew all the others every time.
        let peers = match &watch {
            Some(w) if attempts > 1 => w.peers(MAX_PEERS),
            _ => Vec::new(),
        };
        let sent = Instant::now();
        let first_try = *first_sent.get_or_insert(sent);
        if let Some(w) = &watch {
            w.first_try(first_try);
        }
        let queued = Queued { token: &token, peers: &peers };
        let (holder_ttl, rank, last_error) = match Box::pin(lock.attempt_as(target, options, Some(queued))).await {
            Ok(Attempt::Acquired(guard)) => {
                let _ = place.disarm();
                owed.acquired();
                // The waiters of this process that share the key without queueing (a read-write lock's readers,
                // blocked by this writer's place) waited for that place and know no expiry of this hold; the grant's
                // announcement (see `FAIR_ACQUIRE`) is our own echo here, which the hub skips: one of them looks
                // again, and the others learn from it (see `ReleaseHub::tighten`).
                if let Some(hub) = &hub {
                    hub.wake_one_unqueued(channel);
                }
                return Ok((guard, watch.map(Watches::from_one)));
            }
            Ok(Attempt::Held { holder_ttl, place: rank, .. }) => {
                owed.settle();
                if let Some(w) = &watch {
                    w.renewed(sent, &peers);
                }
                (holder_ttl, rank, None)
            }
            Err(err) if err.is_retryable() => {
                tracing::debug!(resource, error = %err.report(), "transient error while queued for a fair lock");
                (None, None, Some(err))
            }
            Err(err) => {
                place.release_now().await;
                return Err(err);
            }
        };
        let now = Instant::now();
        if now >= deadline || policy.max_attempts().is_some_and(|limit| attempts >= limit) {
            tracing::debug!(resource, attempts, "fair lock wait budget spent; leaving the queue");
            place.release_now().await;
            return Err(
                last_error.unwrap_or_else(|| LockError::contended(resource, now.saturating_duration_since(started)))
            );
        }
        if watch.is_none() && last_error.is_none() {
            if let Some(hub) = &hub {
                let registered = hub.watch_as(channel, Some((token.as_str(), waiter_ttl))).await;
                registered.first_try(first_try);
                registered.renewed(sent, &[]);
                owed.registered_watch(&registered);
                if rank == Some(0) {
                    // Next in line: the release that makes it our turn may have been announced before we listened.
                    watch = Some(registered);
                    continue;
                }
                // Further back, the turn comes after at least one more grant and release, announced to us from now
                // on (a hand-off quicker than this registration is caught by the next heartbeat).
                listeners = Some((registered.listen(), registered.listen_token()));
                watch = Some(registered);
            }
        }
        // The head tries when the holder's key is gone at the latest (a holder that died announces nothing); the
        // waiters behind it take their turns after it.
        // Every waiter tries when the holder's key is gone at the latest: a holder that died announces nothing. The
        // head takes the lock then; a waiter behind it (a little later, so the head goes first) learns the new
        // holder's expiry, or that it is now the head, and waits for that in turn: without it, a waiter that became
        // the head while the lock was held slept its heartbeat past the expiry of a holder that died (a read-write
        // lock's writers, found by the composition explorer, seed 777829). A waiter found later than the head while
        // the lock is free (the head was told and takes it in a moment) looks again after one backoff step.
        let expiry_ahead = match (rank, holder_ttl) {
            (Some(0), Some(ttl)) => Some(now + ttl),
            (Some(_), Some(ttl)) => Some(now + ttl + BEHIND_THE_HEAD),
            _ => None,
        };
        let head_due = expiry_ahead.map(|expiry| expiry + Duration::from_millis(1));
        let behind_a_free_lock = matches!(rank, Some(1..)) && holder_ttl.is_none() && last_error.is_none();
        // A waiter that cannot hear releases (its subscription was refused) learns of its turn only by trying: it
        // polls on its backoff, and a peer's renewal of its place does not put its own try off (found by the schedule
        // explorer: a deaf waiter that became the head while peers renewed its place never tried again, and the
        // others queued behind it while the lock was free).
        // Asked again after every pause: a subscription can be refused (or its answer arrive) while the waiter sleeps.
        let deaf = || watch.as_ref().is_some_and(|w| !w.hears());
        let mut pause = heartbeat;
        if last_error.is_some() || deaf() || behind_a_free_lock {
            pause = pause.min(delays.next().unwrap_or(Duration::from_millis(100)));
        }
        loop {
            let nap = crate::engine::wait::Nap { poll: pause, layout_poll: None, expiry_ahead, deadline };
            let pause_now = nap.from(Instant::now());
            tracing::trace!(resource, ?rank, pause = ?pause_now, "queued for a fair lock");
            let woken = sleep_or_wake(listeners.take(), pause_now).await?;
            if let Some(w) = &watch {
                w.alive();
                if woken {
                    owed.owe(w);
                }
            }
            if woken {
                break;
            }
            // Slept the full pause. A peer's try may have renewed our place meanwhile: then no heartbeat of ours is
            // due yet (unless the holder's TTL ran out for the head, or the budget did). Waiters renewed by a peer
            // wait a quarter heartbeat longer than the peer will, so the peer keeps beating for all of them instead
            // of every waiter's timer firing at one instant.
            let now = Instant::now();
            let renewed = watch.as_ref().and_then(ReleaseWatch::renewed_at).filter(|at| *at > sent);
            let next = renewed.map(|at| at + heartbeat + heartbeat / 4);
            match next {
                Some(next) if !deaf() && next > now && head_due.is_none_or(|due| now < due) && now < deadline => {
                    pause = next.saturating_duration_since(now);
                    listeners = watch.as_ref().map(|w| (w.listen(), w.listen_token()));
                }
                _ => break,
            }
        }
    }
}

/// How much later than the head a waiter behind it tries at a holder's expiry: the head takes the lock first, and the
/// waiter's try learns the new holder's expiry instead of finding the lock free with the head ahead of it.
const BEHIND_THE_HEAD: Duration = Duration::from_millis(5);

/// At most this many peers' places renewed by one try (the rest by later tries, least recently renewed first).
const MAX_PEERS: usize = 256;

/// A fair waiter's try: its token, and its peers (see [`ReleaseWatch::peers`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queued<'a> {
    pub(crate) token: &'a Token,
    pub(crate) peers: &'a [String],
}

/// Sleeps for `pause` unless a wake-up comes first (`true`).
async fn sleep_or_wake(listeners: Option<(Wake, Option<EventListener>)>, pause: Duration) -> Result<bool> {
    let Some((channel_wake, token_wake)) = listeners else {
        crate::rt::sleep(pause).await?;
        return Ok(false);
    };
    let sleep = std::pin::pin!(crate::rt::sleep(pause));
    let token_wake = async move {
        match token_wake {
            Some(listener) => listener.await,
            None => std::future::pending().await,
        }
    };
    let (channel_wake, token_wake) = (std::pin::pin!(channel_wake), std::pin::pin!(token_wake));
    match select(select(channel_wake, token_wake), sleep).await {
        Either::Left(_) => Ok(true),
        Either::Right((slept, _)) => slept.map(|()| false),
    }
}

impl Lock {
    /// How many waiters hold a place in `resource`'s fair queue (see [`LockOptions::with_fair_queue`]), as the
    /// server sees it now. A place whose heartbeat expired counts until the next fair try on the resource removes
    /// it.
    ///
    /// ```
    /// use lock_core::{Lock, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// assert_eq!(lock.fair_queue_len("ledger").await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name or a bad prefix; the store's errors (a key of another type
    /// under the queue's name is [`LockError::WrongType`]).
    ///
    /// # Cancel safety
    /// Cancel-safe: a read.
    pub async fn fair_queue_len(&self, resource: &str) -> Result<usize> {
        let queue = queue_key(&self.keys(resource)?);
        let store = self.stores().first().ok_or_else(|| LockError::invalid("a lock without a store"))?;
        let call_keys = [queue.as_str()];
        let call = crate::seam::transport::Call::plain("inspect", "ZCARD", &call_keys, &[]);
        let ran = crate::rt::timeout("inspect", self.operation_timeout(), store.call(call)).await??;
        let len = ran.reply.as_int().and_then(|n| usize::try_from(n).ok());
        len.ok_or_else(|| LockError::backend(format!("unexpected reply to ZCARD: {:?}", ran.reply)))
    }
}

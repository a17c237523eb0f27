//! A writer-preferring read-write lock: many readers or one writer per name, each holder with its own expiry on the
//! server clock, writers served in arrival order and fenced, readers told the epoch of the last write.
//!
//! ```
//! use lock_core::{Lock, LockOptions, MemoryStore, RwLock};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! let config = RwLock::new(Lock::new(MemoryStore::new()), "config")?;
//! let opts = LockOptions::new(Duration::from_secs(30));
//! let a = config.read(&opts).await?;
//! let b = config.read(&opts).await?;
//! assert!(config.try_write(&opts).await?.is_none(), "readers hold");
//! a.release().await?;
//! b.release().await?;
//! let w = config.write(&opts).await?;
//! let token = w.fence().await?;
//! let r = w.downgrade().await?; // atomically: no writer gets in between
//! assert_eq!(r.epoch(), Some(token), "a reader's epoch is the last write's token");
//! # r.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! The writer holds a string key (`prefix:rw:{name}`, `SET … PX` semantics, compare-and-delete release). Readers
//! are members of a sorted set scored by their own expiry on the server's clock (`…:readers`); every script drops
//! the members whose expiry has passed, so a dead reader costs at most its TTL however often the others renew
//! (Redisson's read lock kept a crashed reader alive through another reader's renewal: PR #7098). Waiting writers
//! hold a place in a queue kept by heartbeats, exactly as in a fair lock
//! ([`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)): one heartbeat per process, a dead
//! waiting writer's place lapses after the waiter TTL ([`RwLock::with_waiter_ttl`]), a release wakes only the head
//! writer. Each step is one script with `now` from `TIME`; a retried acquire with the same token gets the same
//! grant. Waiting, cancel safety, renewal and the lost signal are the lock's.
//!
//! The keys use the prefix `prefix` + `rw:`, so `RwLock` and [`Lock`] on the same name are independent; they share
//! the name's hash tag, so a read-write lock works on Redis Cluster.
//!
//! # Fairness
//! **Writer-preferring.** A writer that waits (its place in the queue is live) blocks new readers; readers that hold
//! keep holding until they release or expire, then the head writer gets the lock; writers are served in arrival
//! order. So a steady stream of readers cannot starve a writer, but **readers can starve under an endless stream of
//! writers** (each waiting writer keeps new readers out). A reader that renews forever keeps a writer out forever:
//! bound readers' holds with [`RenewPolicy::max_hold`](crate::RenewPolicy::max_hold) when writers must get in.
//!
//! # Downgrade, and why there is no upgrade
//! [`WriteGuard::downgrade`] turns the write hold into a read hold in one script, so no writer can be granted in
//! between. There is no upgrade from read to write: two readers that both wait to upgrade each wait for the other
//! to leave, and neither does (a deadlock no timeout resolves well). Release the read hold and acquire the write
//! lock instead, and re-check what you read.
//!
//! # Fencing
//! Writers get a fencing token from a counter per name (the lock's rule: strictly increasing, also across a restart
//! without persistence). A reader gets the **epoch**: the counter's current value, the token of the last write (0
//! before any). No writer can be granted while a reader holds, so a write stamped with a token above a reader's
//! epoch proves that reader's hold has ended: a resource can reject a stale reader's result.
//!
//! # One store only
//! [`RwLock::new`] refuses a Redlock: instances that order waiting writers differently, or that each saw a different
//! subset of readers, give no majority argument that excludes a writer from readers (the semaphore's problem), and
//! no test here shows one. Single server, Sentinel and Cluster work.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tracing::Instrument;

use crate::engine::admin::{ExpectedHolder, ForcedRelease, Inspection};
use crate::engine::fair::FairSpec;
use crate::engine::lock::{Guard, Lock};
use crate::engine::primitive::{announcer, Ask, Grant, Kind, Primitive};
use crate::engine::wait::Attempt;
use crate::error::{LockError, Result};
use crate::options::{LockOptions, MIN_WAITER_TTL};
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::seam::scripts;
use crate::seam::store::ReleaseOutcome;
use crate::seam::store::{ExtendReply, LockStore};
use crate::seam::transport::Call;
use crate::token::FencingToken;
use crate::token::Token;

/// How long a waiting writer's place lasts without a heartbeat, unless [`RwLock::with_waiter_ttl`] says otherwise:
/// a writer that died while waiting keeps new readers out for at most this plus one heartbeat (a third of it).
pub const DEFAULT_WAITER_TTL: Duration = Duration::from_secs(5);

/// A read-write lock on one name. Cheap to clone.
#[derive(Clone)]
pub struct RwLock {
    lock: Lock,
    keys: LockKeys,
    waiter_ttl: Duration,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name()).field("waiter_ttl", &self.waiter_ttl).finish()
    }
}

/// What a read-write lock looks like now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwState {
    /// Whether a writer holds it.
    pub writer: bool,
    /// Readers whose expiry lies ahead.
    pub readers: u32,
    /// Waiting writers whose place has not expired.
    pub waiting_writers: u32,
}

impl RwLock {
    /// The read-write lock `name` on `lock`'s store (its key prefix, followed by `rw:`, applies).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, a bad prefix, or a `lock` over several instances (Redlock;
    /// see the module docs), before any I/O.
    pub fn new(lock: Lock, name: &str) -> Result<Self> {
        if lock.stores().len() != 1 {
            return Err(LockError::invalid(
                "a read-write lock needs one store: over Redlock no majority keeps readers and writers apart",
            ));
        }
        lock.native_only("a read-write lock")?;
        // No idle expiry for this counter (WIRE.md 5.5): a reader's epoch is the counter as it stands, and an
        // expired one would read as 0, older than the last write.
        let keys = LockKeys::new(&format!("{}rw:", lock.key_prefix()), name)?;
        Ok(RwLock { lock, keys, waiter_ttl: DEFAULT_WAITER_TTL })
    }

    /// How long a waiting writer's place lasts without a heartbeat (default [`DEFAULT_WAITER_TTL`]; heartbeats come
    /// every third of it). Every process using the name should use the same.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] below [`MIN_WAITER_TTL`] or above [`MAX_TTL`](crate::MAX_TTL).
    pub fn with_waiter_ttl(mut self, waiter_ttl: Duration) -> Result<Self> {
        if waiter_ttl < MIN_WAITER_TTL {
            return Err(LockError::invalid(format!("waiter TTL {waiter_ttl:?} is below {MIN_WAITER_TTL:?}")));
        }
        crate::options::validate_ttl(waiter_ttl)?;
        self.waiter_ttl = waiter_ttl;
        Ok(self)
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.keys.resource()
    }

    /// The keys: the writer's key, fencing counter, channel and release mark (the readers' set and the writers'
    /// queue are named after the writer's key: `:readers`, `:queue`, `:heartbeats`).
    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn prepare(&self, reader: bool, options: &LockOptions) -> Result<(Arc<RwTarget>, LockOptions)> {
        if options.fair_queue().is_some() {
            return Err(LockError::invalid(
                "a read-write lock queues its writers itself: set the waiter TTL with RwLock::with_waiter_ttl",
            ));
        }
        self.lock.check(options)?;
        let target = Arc::new(RwTarget::new(self.keys.clone(), reader, self.waiter_ttl));
        let options = if reader { options.clone() } else { options.clone().with_fair_queue(self.waiter_ttl) };
        Ok((target, options))
    }

    /// Joins the readers, waiting up to the options' budget while a writer holds or waits (woken by the release that
    /// lets readers in, and at the writer's expiry at the latest). The options' TTL is this reader's own expiry.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for bad options or a fair-queue option (before any I/O);
    /// [`LockError::Contended`] when the budget ran out; the store's errors ([`LockError::WrongType`] for a foreign
    /// key at one of the lock's names, nothing written).
    ///
    /// # Cancel safety
    /// Cancel-safe, as [`Lock::acquire`]: a read hold the dropped future may have taken is given back in the
    /// background.
    pub async fn read(&self, options: &LockOptions) -> Result<ReadGuard> {
        let (target, options) = self.prepare(true, options)?;
        let span = tracing::debug_span!("rwlock.read", resource = self.name());
        let guard =
            Box::pin(self.lock.take(&(target.clone() as Arc<dyn Primitive>), &options)).instrument(span).await?;
        self.pass_wake_up_on();
        Ok(ReadGuard { guard })
    }

    /// Joins the readers if no writer holds or waits now.
    ///
    /// # Errors
    /// As [`read`](Self::read), without `Contended`.
    ///
    /// # Cancel safety
    /// As [`read`](Self::read).
    pub async fn try_read(&self, options: &LockOptions) -> Result<Option<ReadGuard>> {
        let (target, options) = self.prepare(true, options)?;
        match self.lock.try_take(&(target.clone() as Arc<dyn Primitive>), &options).await? {
            Attempt::Acquired(guard) => Ok(Some(ReadGuard { guard })),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Takes the write lock, waiting up to the options' budget in the writers' queue: new readers stay out from now
    /// on, the readers that hold finish (or expire), writers before this one go first.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    /// Cancel-safe, as [`Lock::acquire`]: the dropped future's place in the queue (or its grant) is given back in
    /// the background, which lets waiting readers in when no other writer waits.
    pub async fn write(&self, options: &LockOptions) -> Result<WriteGuard> {
        let (target, options) = self.prepare(false, options)?;
        let span = tracing::debug_span!("rwlock.write", resource = self.name());
        let guard =
            Box::pin(self.lock.take(&(target.clone() as Arc<dyn Primitive>), &options)).instrument(span).await?;
        Ok(WriteGuard { guard, target, ttl: options.ttl(), hub_channel: self.wake_up_target() })
    }

    /// Takes the write lock if nobody holds it and no writer waits (a try takes no place in the queue).
    ///
    /// # Errors
    /// As [`write`](Self::write), without `Contended`.
    ///
    /// # Cancel safety
    /// As [`write`](Self::write).
    pub async fn try_write(&self, options: &LockOptions) -> Result<Option<WriteGuard>> {
        let (target, options) = self.prepare(false, options)?;
        match self.lock.try_take(&(target.clone() as Arc<dyn Primitive>), &options).await? {
            Attempt::Acquired(guard) => {
                Ok(Some(WriteGuard { guard, target, ttl: options.ttl(), hub_channel: self.wake_up_target() }))
            }
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// What an operator may know about this lock, as [`Lock::inspect`] reads any name: the writer
    /// ([`Inspection::holder`]), each reader with its own time left ([`Inspection::shared`]), the writers' fencing
    /// counter and their queue. Writes nothing. (A read-write lock's keys live under a prefix of its own, so
    /// `Lock::inspect` of its name does not find it: this does.)
    ///
    /// ```
    /// use lock_core::{HolderRole, Lock, LockOptions, MemoryStore, RwLock};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let rw = RwLock::new(Lock::new(MemoryStore::new()), "config")?;
    /// let reader = rw.read(&LockOptions::new(Duration::from_secs(5))).await?;
    /// let seen = rw.inspect().await?;
    /// assert!(seen.holder().is_none() && seen.shared()[0].role == HolderRole::Reader);
    /// reader.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::inspect`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn inspect(&self) -> Result<Inspection> {
        self.lock.inspect_keys(&self.keys).await
    }

    /// Frees this lock by force, as [`Lock::force_release_expecting`] frees any name: the writer and every reader
    /// ([`ExpectedHolder::Anyone`]), or only the holder the operator was shown ([`ExpectedHolder::Owner`]). Waiting
    /// writers and readers are told at once; the holders are not (their next extension finds the hold gone).
    ///
    /// # Errors
    /// As [`Lock::force_release_expecting`].
    ///
    /// # Cancel safety
    /// As [`Lock::force_release`].
    pub async fn force_release(&self, expected: &ExpectedHolder) -> Result<ForcedRelease> {
        self.lock.force_release_keys(&self.keys, expected).await
    }

    /// Whether a writer holds, how many readers hold, and how many writers wait, read without writing.
    ///
    /// # Errors
    /// The store's errors ([`LockError::WrongType`] for a foreign key at one of the lock's names).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn state(&self) -> Result<RwState> {
        let store = self.lock.stores().first().ok_or_else(|| LockError::invalid("no store"))?;
        let writer = self.keys.lock();
        let (readers, queue, heartbeats) = (
            format!("{writer}:readers"),
            crate::engine::fair::queue_key(&self.keys),
            crate::engine::fair::heartbeats_key(&self.keys),
        );
        let call_keys = [writer, readers.as_str(), &queue, &heartbeats];
        let call = Call::script("rw-state", &scripts::RW_STATE, &call_keys, &[]);
        let reply = self.lock.call_bounded(store.as_ref(), call).await?;
        let ints = reply.as_ints().unwrap_or_default();
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        match ints.as_slice() {
            [writer, readers, waiting] => {
                Ok(RwState { writer: *writer == 1, readers: count(*readers), waiting_writers: count(*waiting) })
            }
            _ => Err(LockError::backend(format!("unexpected reply to the rw-state script: {reply:?}"))),
        }
    }

    /// The hub and channel a grant that lets readers in wakes the next local waiter on.
    fn wake_up_target(&self) -> Option<(Arc<crate::seam::notify::ReleaseHub>, String)> {
        let hub = self.lock.stores().first()?.release_hub()?.clone();
        Some((hub, self.keys.channel().to_owned()))
    }

    /// A reader got in: the next local waiter may too (the hub wakes one waiter per release, and one release can
    /// let every waiting reader in), so it is woken to try; a writer among them finds the lock held and sleeps on.
    fn pass_wake_up_on(&self) {
        if let Some((hub, channel)) = self.wake_up_target() {
            if hub.waiters(&channel) > 0 {
                hub.wake_one(&channel);
            }
        }
    }
}

/// A read hold: released with [`release`](Self::release), or in the background when dropped; renewed by the
/// watchdog when the options asked for it; lost (its signal fires) when its own expiry passes.
#[must_use = "dropping a read guard releases it in the background"]
#[derive(Debug)]
pub struct ReadGuard {
    guard: Guard,
}

impl ReadGuard {
    /// The epoch: the token of the last write before this read (0 before any), `None` when fencing was off. A write
    /// with a higher token proves this hold has ended.
    pub fn epoch(&self) -> Option<FencingToken> {
        self.guard.drawn_fence()
    }

    /// A read hold has no fencing token of its own: its [`epoch`](Self::epoch) is the last write's, which a fenced
    /// resource would accept from a reader as if it were that writer. Always an error, so that code written for
    /// any [`LockGuard`](crate::LockGuard) never writes as a reader.
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument), always.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is sent.
    pub async fn fence(&self) -> Result<FencingToken> {
        Err(crate::LockError::invalid(format!(
            "a read hold of {:?} draws no fencing token (its epoch() is the last write's); take the write lock to write",
            self.guard.resource()
        )))
    }

    /// Always `None` (see [`fence`](Self::fence)).
    pub fn drawn_fence(&self) -> Option<FencingToken> {
        None
    }

    crate::engine::lock::guard_accessors!("hold");

    /// Leaves the readers: `Released`, or `AlreadyExpired` when the hold had expired. The last reader out tells the
    /// head waiting writer.
    ///
    /// # Errors
    /// As [`Guard::release`].
    ///
    /// # Cancel safety
    /// As [`Guard::release`].
    pub async fn release(self) -> Result<ReleaseOutcome> {
        self.guard.release().await
    }
}

crate::engine::lock::lock_guard_by_inherent_methods!(ReadGuard, ReadGuard::release);
crate::engine::lock::lock_guard_by_inherent_methods!(WriteGuard, WriteGuard::release);

/// The write hold: released with [`release`](Self::release), or in the background when dropped; renewed by the
/// watchdog when the options asked for it; lost (its signal fires) when its expiry passes.
#[must_use = "dropping a write guard releases it in the background"]
#[derive(Debug)]
pub struct WriteGuard {
    guard: Guard,
    target: Arc<RwTarget>,
    ttl: Duration,
    hub_channel: Option<(Arc<crate::seam::notify::ReleaseHub>, String)>,
}

impl WriteGuard {
    /// The fencing token, drawn with the grant: strictly increasing per name.
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) when fencing was off.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is sent.
    pub async fn fence(&self) -> Result<FencingToken> {
        self.guard.fence().await
    }

    /// The fencing token (`None` when fencing was off), without I/O.
    pub fn drawn_fence(&self) -> Option<FencingToken> {
        self.guard.drawn_fence()
    }

    crate::engine::lock::guard_accessors!("hold");

    /// Turns the write hold into a read hold in one atomic step (no writer can be granted in between), with the
    /// acquire's TTL from now; waiting readers come in when no writer waits. The read guard's epoch is this write's
    /// fencing token. The renewal watchdog, if any, carries on for the read hold.
    ///
    /// # Errors
    /// [`LockError::Lost`] when the write lock had expired; the store's errors. On an error the guard is dropped,
    /// so whatever the server holds for it (the write lock, or the read hold if the downgrade applied) is released
    /// in the background.
    ///
    /// # Cancel safety
    /// Not resumable: a dropped downgrade drops the guard, which releases whichever hold the server has in the
    /// background.
    pub async fn downgrade(self) -> Result<ReadGuard> {
        // The extension serialises with the watchdog's: whichever runs first downgrades, and the other finds the
        // read hold and renews it.
        self.target.downgrade.store(true, std::sync::atomic::Ordering::SeqCst);
        self.guard.extend(self.ttl).await?;
        if let Some((hub, channel)) = &self.hub_channel {
            // The announcement is our own echo, which this process's hub skips: wake a local reader here.
            if hub.waiters(channel) > 0 {
                hub.wake_one(channel);
            }
        }
        Ok(ReadGuard { guard: self.guard })
    }

    /// Releases the write lock: `Released`, or `AlreadyExpired` / `OwnedByOther` when it had expired (and been
    /// taken). Tells the head waiting writer, or the waiting readers when no writer waits.
    ///
    /// # Errors
    /// As [`Guard::release`].
    ///
    /// # Cancel safety
    /// As [`Guard::release`].
    pub async fn release(self) -> Result<ReleaseOutcome> {
        self.guard.release().await
    }
}

/// A read or write hold's acquisition: read by the read scripts, written by the fair ones with the readers' key;
/// extended and released by the read-write lock's own.
#[derive(Debug)]
pub(crate) struct RwTarget {
    keys: [LockKeys; 1],
    /// `prefix:rw:{name}:readers`: token → expiry, server ms.
    readers: String,
    /// The writers' queue and its heartbeats (as a fair lock's).
    writers: FairSpec,
    /// A reader's hold (the writer's goes through the fair scripts).
    reader: bool,
    /// Set by a downgrade: the next extension turns the write hold into a read hold in one step.
    downgrade: std::sync::atomic::AtomicBool,
}

impl RwTarget {
    /// A reader (`reader`) or writer of `keys`' read-write lock, whose writers queue with `waiter_ttl` per heartbeat.
    fn new(keys: LockKeys, reader: bool, waiter_ttl: Duration) -> Self {
        RwTarget {
            readers: keys.readers(),
            writers: FairSpec::new(&keys, waiter_ttl),
            reader,
            downgrade: std::sync::atomic::AtomicBool::new(false),
            keys: [keys],
        }
    }

    /// The keys every read-write lock script takes first: writer, readers, waiting writers, their heartbeats.
    fn rw_keys(&self) -> [&str; 4] {
        let (queue, heartbeats) = self.writers.queue_keys();
        [self.keys[0].lock(), &self.readers, queue, heartbeats]
    }
}

impl RwTarget {
    /// [`RW_READ`](scripts::RW_READ) for a reader; [`FAIR_ACQUIRE`](scripts::FAIR_ACQUIRE) with the readers' key
    /// for a writer.
    async fn acquire_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.keys[0];
        if !self.reader {
            return self.writers.acquire(keys, Some(&self.readers), store, ask).await;
        }
        let [writer, readers, queue, heartbeats] = self.rw_keys();
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let call_keys = [writer, readers, queue, heartbeats, keys.fence(), keys.awaited()];
        let args = [ask.token.as_str(), &ttl, ask.fencing_flag()];
        let call = Call::script("acquire", &scripts::RW_READ, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let ints = ran.reply.as_ints().unwrap_or_default();
        let grant = match (ints.as_slice(), ask.fencing) {
            ([1, epoch], true) => Grant::Acquired { fences: smallvec::smallvec![u64::try_from(*epoch).ok()] },
            ([1], false) => Grant::Acquired { fences: smallvec::smallvec![None] },
            ([0, wait], _) => Grant::Held {
                index: 0,
                ttl: u64::try_from(*wait).ok().map(Duration::from_millis),
                holder: None,
                place: None,
            },
            _ => return Err(LockError::backend(format!("unexpected reply to the rw-read script: {:?}", ran.reply))),
        };
        ask.check_replicas(&ran, &grant)?;
        Ok(grant)
    }

    /// [`RW_EXTEND`](scripts::RW_EXTEND) (a downgrade when one was asked for).
    async fn extend_on(&self, store: &dyn LockStore, token: &Token, ttl: Duration) -> Result<PerResource<ExtendReply>> {
        let keys = &self.keys[0];
        let [writer, readers, queue, heartbeats] = self.rw_keys();
        let ttl = scripts::ttl_millis(ttl).to_string();
        let downgrade = if self.downgrade.load(std::sync::atomic::Ordering::SeqCst) { "1" } else { "0" };
        let (origin, sharded) = announcer(store);
        let call_keys = [writer, readers, queue, heartbeats, keys.channel(), keys.awaited()];
        let args = [token.as_str(), &ttl, downgrade, origin, sharded];
        let ran = store.call(Call::script("extend", &scripts::RW_EXTEND, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(smallvec::smallvec![ExtendReply::Extended]),
            Some(0) => Ok(smallvec::smallvec![ExtendReply::Absent]),
            _ => Err(LockError::backend(format!("unexpected reply to the rw-extend script: {:?}", ran.reply))),
        }
    }

    /// [`RW_RELEASE`](scripts::RW_RELEASE): a read or write hold, or a waiting writer's place.
    async fn release_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
        let keys = &self.keys[0];
        let [writer, readers, queue, heartbeats] = self.rw_keys();
        let (origin, sharded) = announcer(store);
        let call_keys = [writer, readers, queue, heartbeats, keys.channel(), keys.awaited()];
        let args = [token.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &scripts::RW_RELEASE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(smallvec::smallvec![ReleaseOutcome::Released]),
            Some(0 | 2) => Ok(smallvec::smallvec![ReleaseOutcome::AlreadyExpired]),
            Some(-1) => Ok(smallvec::smallvec![ReleaseOutcome::OwnedByOther]),
            _ => Err(LockError::backend(format!("unexpected reply to the rw-release script: {:?}", ran.reply))),
        }
    }
}

#[async_trait]
impl Primitive for RwTarget {
    crate::engine::primitive::scripted_calls!(acquire, extend, release);

    fn kind(&self) -> Kind {
        if self.reader {
            Kind::Read
        } else {
            Kind::Write
        }
    }

    fn shared(&self) -> bool {
        self.reader
    }

    fn resources(&self) -> &[LockKeys] {
        &self.keys
    }

    /// A writer waits in the writers' queue.
    fn queued(&self) -> bool {
        !self.reader
    }
}

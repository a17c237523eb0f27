//! A counting semaphore whose permits expire one by one: at most `limit` permits of one name are held at once, and a
//! holder that dies costs its permits for one TTL, whoever else renews.
//!
//! ```
//! use lock_core::{Lock, LockOptions, MemoryStore, Semaphore};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! let exports = Semaphore::new(Lock::new(MemoryStore::new()), "exports", 2)?;
//! let opts = LockOptions::new(Duration::from_secs(30));
//! let a = exports.acquire(1, &opts).await?;
//! let b = exports.acquire(1, &opts).await?;
//! assert!(exports.try_acquire(1, &opts).await?.is_none(), "both permits are held");
//! assert_ne!(a.slots(), b.slots()); // numbered slots: 0 and 1
//! a.release().await?;
//! let c = exports.try_acquire(1, &opts).await?;
//! assert_eq!(c.as_ref().map(|p| p.slots()), Some(&[0][..]), "the released slot came back");
//! # b.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! A semaphore's keys live under its own prefix, the lock's followed by `sem:` (as a read-write lock's follow `rw:`):
//! it is another object than a lock of the same name, with a release channel, release mark and fencing counter of its
//! own, so the release of one never wakes the other's waiters (review 4: a lock's release woke a semaphore waiter,
//! which could not use it, and the lock's waiter slept to its safety poll).
//!
//! Each permit is a member of a sorted set scored by its own expiry on the server's clock
//! (`prefix sem:{name}:permits`), and holds numbered slots (`:slots`, slot → token; `:permit-grants`, token → fence and
//! slots). Every script starts by
//! purging the members whose expiry has passed, so nothing leaks and nobody renews anyone else's permit (Redisson's
//! `RPermitExpirableSemaphore` model, with the server's clock instead of the client's). The keys themselves expire a
//! second after the last permit. A retried acquire with the same token returns the same grant. Waiting, cancel
//! safety, renewal (each holder extends only its own member) and the lost signal are the lock's.
//!
//! **Numbered slots and fencing.** A permit holds the lowest free slots, and each grant advances one fencing counter
//! per name (the lock's rule), so the tokens any one slot sees strictly increase: a resource partitioned by slot
//! (worker slot 3 owns partition 3) can reject a stale holder of its slot.
//!
//! **Fairness.** None: a request for several permits waits until that many are free at once, so a stream of
//! single-permit requests can starve it.
//!
//! **Wake-ups.** A release wakes one waiter of each process; a waiter that gets in, or finds some slots free but
//! too few for its request, wakes the next waiter of its process, once per waiter per release, so every waiter the
//! release left room for tries within a round trip rather than at its safety poll.
//!
//! **One store only.** A semaphore over Redlock cannot keep its invariant: "entering a semaphore on a majority of
//! databases does not guarantee that the semaphore's invariant is preserved… on database 1, users A and B have
//! entered. On database 2, users B and C… On database 3, users A and C… all users believe they have entered"
//! (madelson's DistributedLock docs). [`Semaphore::new`] refuses a Redlock. Cluster works (every key shares the
//! name's hash tag).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tracing::Instrument;

use crate::engine::admin::{ExpectedHolder, ForcedRelease, Inspection};
use crate::engine::lock::{Guard, Lock};
use crate::engine::primitive::{announcer, Ask, Grant, Kind, Primitive};
use crate::engine::wait::Attempt;
use crate::error::{LockError, Result};
use crate::options::LockOptions;
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::seam::scripts;
use crate::seam::store::ReleaseOutcome;
use crate::seam::store::{ExtendReply, LockStore};
use crate::seam::transport::{Call, Reply};
use crate::token::FencingToken;
use crate::token::Token;

/// The largest `limit` a semaphore takes (an acquire looks for free slots one by one, so it is bounded).
pub const MAX_PERMITS: u32 = 10_000;

/// A counting semaphore on one name, with `limit` permits. Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    lock: Lock,
    keys: LockKeys,
    names: Arc<[String; 4]>,
    limit: u32,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore").field("name", &self.name()).field("limit", &self.limit).finish()
    }
}

/// What a semaphore looks like now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreState {
    /// The limit its holders use, `None` when nobody holds a permit.
    pub limit: Option<u32>,
    /// Slots held by permits that have not expired.
    pub held: u32,
}

impl Semaphore {
    /// The semaphore `name` with `limit` permits on `lock`'s store (its key prefix applies).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, a bad prefix, a limit of 0 or above [`MAX_PERMITS`], or a
    /// `lock` over several instances (Redlock; see the module docs), before any I/O.
    pub fn new(lock: Lock, name: &str, limit: u32) -> Result<Self> {
        if lock.stores().len() != 1 {
            return Err(LockError::invalid(
                "a semaphore needs one store: over Redlock a majority of instances cannot keep the count",
            ));
        }
        if limit == 0 || limit > MAX_PERMITS {
            return Err(LockError::invalid(format!("a semaphore's limit must be 1 to {MAX_PERMITS}")));
        }
        lock.native_only("a semaphore")?;
        let keys = LockKeys::new(&format!("{}sem:", lock.key_prefix()), name)?.with_fence_idle(lock.fence_idle()?);
        let names = Arc::new(keys.semaphore());
        Ok(Semaphore { lock, keys, names, limit })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.keys.resource()
    }

    /// The keys: its release channel, release mark and fencing counter (the permits' keys are named after
    /// [`LockKeys::lock`]: `:permits`, `:slots`, `:permit-grants`, `:limit`), under the lock's prefix followed by `sem:`.
    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// The limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    fn prepare(&self, permits: u32, options: &LockOptions) -> Result<Arc<PermitTarget>> {
        if permits == 0 || permits > self.limit {
            return Err(LockError::invalid(format!("a permit takes 1 to {} slots of this semaphore", self.limit)));
        }
        if options.fair_queue().is_some() {
            return Err(LockError::invalid("a semaphore has no fair queue"));
        }
        self.lock.check(options)?;
        Ok(Arc::new(PermitTarget {
            keys: [self.keys.clone()],
            names: self.names.clone(),
            limit: self.limit.to_string(),
            permits: permits.to_string(),
            granted: Mutex::new(Vec::new()),
        }))
    }

    /// Takes `permits` slots, waiting up to the options' budget (woken by releases, and at the earliest expiry of
    /// a held permit at the latest). The options' TTL is the permit's own expiry; auto-renewal, fencing and the
    /// retry policy apply as for a lock.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for 0 or more than `limit` permits, a fair-queue option, or bad options (before
    /// any I/O), and when the holders of this name use another limit (nothing is taken); [`LockError::Contended`]
    /// when the budget ran out; the store's errors.
    ///
    /// # Cancel safety
    /// Cancel-safe, as [`Lock::acquire`]: a grant the dropped future may have made is released in the background.
    pub async fn acquire(&self, permits: u32, options: &LockOptions) -> Result<Permit> {
        let target = self.prepare(permits, options)?;
        let span = tracing::debug_span!("semaphore.acquire", semaphore = self.name(), permits);
        let engine: Arc<dyn Primitive> = target.clone();
        let guard = Box::pin(self.lock.take(&engine, options)).instrument(span).await?;
        // Slots may be left for the next local waiter: the release woke only this one (see `pass_room_on`).
        if let Some(hub) = self.lock.stores().first().and_then(|store| store.release_hub()) {
            hub.pass_room_on(self.keys.channel());
        }
        Ok(Permit::new(guard, &target))
    }

    /// Takes `permits` slots if that many are free now.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), without `Contended`.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, permits: u32, options: &LockOptions) -> Result<Option<Permit>> {
        let target = self.prepare(permits, options)?;
        let engine: Arc<dyn Primitive> = target.clone();
        match self.lock.try_take(&engine, options).await? {
            Attempt::Acquired(guard) => Ok(Some(Permit::new(guard, &target))),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// What an operator may know about this semaphore, as [`Lock::inspect`] reads any name: each permit with its
    /// slots and time left ([`Inspection::shared`]) and the fencing counter. Writes nothing.
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore, Semaphore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let pool = Semaphore::new(Lock::new(MemoryStore::new()), "gpu", 4)?;
    /// let permit = pool.acquire(2, &LockOptions::new(Duration::from_secs(5))).await?;
    /// let seen = pool.inspect().await?;
    /// assert_eq!(seen.shared()[0].slots, permit.slots());
    /// permit.release().await?;
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

    /// Frees permits by force, as [`Lock::force_release_expecting`] frees any name: every permit
    /// ([`ExpectedHolder::Anyone`]), or only the one the operator was shown ([`ExpectedHolder::Owner`]); their
    /// slots are free at once and waiters are told. The holders are not (their next extension finds the permit gone).
    ///
    /// # Errors
    /// As [`Lock::force_release_expecting`].
    ///
    /// # Cancel safety
    /// As [`Lock::force_release`].
    pub async fn force_release(&self, expected: &ExpectedHolder) -> Result<ForcedRelease> {
        self.lock.force_release_keys(&self.keys, expected).await
    }

    /// The limit its holders use and how many slots live permits hold, read without writing.
    ///
    /// # Errors
    /// The store's errors ([`LockError::WrongType`] for a foreign key at one of the semaphore's names).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn state(&self) -> Result<SemaphoreState> {
        let store = self.lock.stores().first().ok_or_else(|| LockError::invalid("no store"))?;
        let names = &self.names;
        let call_keys = [names[0].as_str(), &names[1], &names[2], &names[3]];
        let call = Call::script("semaphore-state", &scripts::SEM_STATE, &call_keys, &[]);
        let reply = self.lock.call_bounded(store.as_ref(), call).await?;
        let ints = reply.as_ints().unwrap_or_default();
        match ints.as_slice() {
            [limit, held] => {
                Ok(SemaphoreState { limit: u32::try_from(*limit).ok(), held: u32::try_from(*held).unwrap_or(0) })
            }
            _ => Err(LockError::backend(format!("unexpected reply to the semaphore-state script: {reply:?}"))),
        }
    }
}

/// One permit's acquisition: how many slots of which semaphore, and the slots its grant named.
#[derive(Debug)]
pub(crate) struct PermitTarget {
    keys: [LockKeys; 1],
    /// Expiries, slots, grants, limit (`prefix sem:{name}:…`).
    names: Arc<[String; 4]>,
    limit: String,
    /// How many slots this permit takes.
    permits: String,
    /// The slots granted (set by the grant).
    granted: Mutex<Vec<u32>>,
}

impl PermitTarget {
    /// [`SEM_ACQUIRE`](scripts::SEM_ACQUIRE).
    async fn acquire_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.keys[0];
        let [exp, slots, grants, limit] = &*self.names;
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let floor = ask.floor_arg();
        let call_keys = [exp.as_str(), slots, grants, limit, keys.fence(), keys.awaited()];
        let args =
            [ask.token.as_str(), &self.permits, &ttl, &self.limit, ask.fencing_flag(), &floor, keys.fence_idle()];
        let call = Call::script("acquire", &scripts::SEM_ACQUIRE, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let grant = match parse_acquire(&ran.reply, keys.resource(), &self.limit)? {
            Try::Granted { fence, slots } => {
                *self.granted.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = slots;
                Grant::Acquired { fences: smallvec::smallvec![fence.filter(|_| ask.fencing)] }
            }
            Try::Full { wait, room } => {
                // Free slots too few for this request may fit a smaller one: the next local waiter tries.
                if room {
                    if let Some(hub) = store.release_hub() {
                        hub.pass_room_on(keys.channel());
                    }
                }
                Grant::Held { index: 0, ttl: wait, holder: None, place: None }
            }
        };
        ask.check_replicas(&ran, &grant)?;
        Ok(grant)
    }

    /// [`SEM_EXTEND`](scripts::SEM_EXTEND).
    async fn extend_on(&self, store: &dyn LockStore, token: &Token, ttl: Duration) -> Result<PerResource<ExtendReply>> {
        let [exp, slots, grants, limit] = &*self.names;
        let ttl = scripts::ttl_millis(ttl).to_string();
        let call_keys = [exp.as_str(), slots, grants, limit];
        let args = [token.as_str(), &ttl];
        let ran = store.call(Call::script("extend", &scripts::SEM_EXTEND, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(smallvec::smallvec![ExtendReply::Extended]),
            Some(0) => Ok(smallvec::smallvec![ExtendReply::Absent]),
            _ => Err(LockError::backend(format!("unexpected reply to the semaphore-extend script: {:?}", ran.reply))),
        }
    }

    /// [`SEM_RELEASE`](scripts::SEM_RELEASE).
    async fn release_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
        let keys = &self.keys[0];
        let [exp, slots, grants, limit] = &*self.names;
        let (origin, sharded) = announcer(store);
        let call_keys = [exp.as_str(), slots, grants, limit, keys.channel(), keys.awaited()];
        let args = [token.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &scripts::SEM_RELEASE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(smallvec::smallvec![ReleaseOutcome::Released]),
            // Past its expiry (2), or purged already (0): the holder overran its TTL.
            Some(0 | 2) => Ok(smallvec::smallvec![ReleaseOutcome::AlreadyExpired]),
            _ => Err(LockError::backend(format!("unexpected reply to the semaphore-release script: {:?}", ran.reply))),
        }
    }
}

#[async_trait]
impl Primitive for PermitTarget {
    crate::engine::primitive::scripted_calls!(acquire, extend, release);

    fn kind(&self) -> Kind {
        Kind::Semaphore
    }

    fn demand(&self) -> u32 {
        self.permits.parse().unwrap_or(1)
    }

    fn shared(&self) -> bool {
        true
    }

    fn resources(&self) -> &[LockKeys] {
        &self.keys
    }
}

/// What one [`SEM_ACQUIRE`](scripts::SEM_ACQUIRE) found.
pub(crate) enum Try {
    /// Granted: the fence (when fencing) and the slots.
    Granted { fence: Option<u64>, slots: Vec<u32> },
    /// Too few free slots; the earliest held permit expires in this long (when one does); `room` when some slots
    /// are free all the same (a smaller request could take them).
    Full { wait: Option<Duration>, room: bool },
}

/// Parses [`SEM_ACQUIRE`](scripts::SEM_ACQUIRE)'s reply; another limit is a typed error (nothing was written).
pub(crate) fn parse_acquire(reply: &Reply, name: &str, limit: &str) -> Result<Try> {
    let ints = reply.as_ints().unwrap_or_default();
    match ints.as_slice() {
        [1, fence, slots @ ..] if !slots.is_empty() => {
            let slots =
                slots.iter().map(|s| u32::try_from(*s).map_err(|_| unexpected(reply))).collect::<Result<_>>()?;
            Ok(Try::Granted { fence: u64::try_from(*fence).ok(), slots })
        }
        [0, wait, free @ ..] if free.len() <= 1 => Ok(Try::Full {
            wait: u64::try_from(*wait).ok().map(Duration::from_millis),
            room: free.first().is_some_and(|free| *free > 0),
        }),
        [-1, stored] => Err(LockError::invalid(format!(
            "semaphore {name:?} is held with a limit of {stored}, and this client says {limit}"
        ))),
        _ => Err(unexpected(reply)),
    }
}

fn unexpected(reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to the semaphore-acquire script: {reply:?}"))
}

/// Permits held: released with [`release`](Self::release), or in the background when dropped; renewed by the
/// watchdog when the options asked for it; lost (its signal fires) when its own expiry passes.
#[must_use = "dropping a permit releases it in the background"]
#[derive(Debug)]
pub struct Permit {
    guard: Guard,
    slots: Vec<u32>,
}

crate::engine::lock::lock_guard_by_inherent_methods!(Permit, Permit::release);

impl Permit {
    fn new(guard: Guard, target: &PermitTarget) -> Self {
        let slots = target.granted.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        Permit { guard, slots }
    }

    /// The numbered slots this permit holds (in `0..limit`).
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// The grant's fencing token, drawn with the grant: the tokens any one slot sees strictly increase.
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) when fencing was off.
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is sent.
    pub async fn fence(&self) -> Result<FencingToken> {
        self.guard.fence().await
    }

    /// The grant's fencing token (`None` when fencing was off), without I/O.
    pub fn drawn_fence(&self) -> Option<FencingToken> {
        self.guard.drawn_fence()
    }

    crate::engine::lock::guard_accessors!("permit");

    /// Gives the slots back: `Released`, or `AlreadyExpired` when the permit had expired (its slots may have gone to
    /// someone else; the count is never raised by a permit it no longer holds).
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

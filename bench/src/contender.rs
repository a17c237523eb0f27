//! The contenders: our two backends (single instance or Redlock), the floor, the hand-written pub/sub waiter and
//! rslock, behind one interface so every scenario runs the same loop over each of them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use lock_core::backend::{AcquireReply, AcquireRequest};
use lock_core::{
    Fencing, Guard, Lock, LockKeys, LockOptions, LockStore, ReleaseOutcome, RenewPolicy, Token, DEFAULT_PREFIX,
};
use rslock::LockManager;

use crate::floor::{self, Floor, FloorHeld, PubSubWaiter};
use crate::floor_fred::FredFloor;
use crate::peers;

/// TTL of every lock the scenarios take, except renewal's: long enough never to expire during a measurement.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// Commands that only run inside lock-core's scripts (ACQUIRE, HOLDER, RELEASE, PASS_ON, EXTEND, RAISE_FENCE, the
/// line-up of waiting processes): our backends send nothing but `EVALSHA` (and `SCRIPT LOAD`, `SUBSCRIBE`,
/// `UNSUBSCRIBE`, `PING`).
const CORE_NESTED: &[&str] =
    &["get", "set", "del", "publish", "pexpire", "time", "incrby", "type", "pttl", "zscore", "zadd", "zrange", "zrem"];

/// The same without fencing, where acquire is a plain `SET NX PX` the client sends itself (counted as sent; so is
/// the `SET` of the release mark inside `HOLDER`, which the counts cannot tell apart).
const CORE_NESTED_NOFENCE: &[&str] =
    &["get", "del", "publish", "pexpire", "time", "type", "pttl", "zscore", "zadd", "zrange", "zrem"];

/// What a fair lock's scripts call besides [`CORE_NESTED`]'s commands (see `lock_core::backend::scripts::FAIR_ACQUIRE`).
const CORE_NESTED_FAIR: &[&str] = &[
    "get",
    "set",
    "del",
    "publish",
    "pexpire",
    "time",
    "incrby",
    "type",
    "pttl",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zscore",
    "zrank",
    "pexpireat",
    "hset",
    "hget",
    "hdel",
];

/// The wait of the [`Contender::core_default`] contenders.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// The waiter TTL of the fair contenders.
pub(crate) const WAITER_TTL: Duration = Duration::from_secs(3);

/// Which of our backends, with its default settings or (diagnostic rows only) another pool size.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    RedisRs,
    Fred,
    RedisRsPool(usize),
    FredPool(usize),
}

impl Backend {
    pub(crate) async fn store(self, url: &str) -> anyhow::Result<Arc<dyn LockStore>> {
        Ok(match self {
            Backend::RedisRs => Arc::new(lock_redis_rs::RedisStore::connect(url).await.context("redis-rs store")?),
            Backend::Fred => Arc::new(lock_fred::FredStore::connect(url).await.context("fred store")?),
            Backend::RedisRsPool(n) => Arc::new(
                lock_redis_rs::RedisStoreBuilder::new(url)
                    .with_pool_size(n)
                    .connect()
                    .await
                    .context("redis-rs store")?,
            ),
            Backend::FredPool(n) => Arc::new(
                lock_fred::FredStoreBuilder::from_url(url)?.with_pool_size(n).connect().await.context("fred store")?,
            ),
        })
    }
}

/// The client a contender measures.
// One value per contender, built once: boxing the lock would only add an indirection to the measured loop.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Client {
    /// lock-core's [`Lock`] over our backend(s), acquiring with `options`; with `draw`, asking each acquisition for
    /// its fencing token (drawn then when the options say [`Fencing::OnDemand`]).
    Core { lock: Lock, options: LockOptions, draw: bool },
    /// Bare commands.
    Floor(Floor),
    /// Bare fred commands.
    FredFloor(FredFloor),
    /// The calls lock-core's lock makes (acquire without fencing, release), straight to our backend's
    /// [`LockStore`]: the backend's cost without the engine around it (guard, validity, lost signal, spans).
    Store(Arc<dyn LockStore>),
    /// Bare commands, with one pub/sub subscription per waiter in contended scenarios.
    PubSub(Floor),
    /// rslock.
    Rslock(LockManager),
}

/// A named client and the commands that, for it, run only inside scripts.
#[derive(Clone)]
pub(crate) struct Contender {
    pub(crate) name: String,
    pub(crate) client: Client,
    pub(crate) nested: &'static [&'static str],
}

/// A held lock of any contender.
pub(crate) enum Held {
    Core(Guard),
    Floor(FloorHeld),
    Store(LockKeys, Token),
    Rslock(rslock::Lock),
}

impl Contender {
    /// Our backend on one server (N = 1) or Redlock over several, with default options except `fencing`.
    pub(crate) async fn core(name: &str, backend: Backend, urls: &[String], fencing: bool) -> anyhow::Result<Self> {
        let mut stores = Vec::new();
        for url in urls {
            stores.push(backend.store(url).await?);
        }
        let lock = match stores.as_slice() {
            [one] => Lock::from_arc(one.clone()),
            _ => Lock::redlock(stores).build().context("building the Redlock")?,
        };
        Ok(Contender::core_over(name, lock, fencing))
    }

    /// `lock` (over any stores) with default options except `fencing`.
    pub(crate) fn core_over(name: &str, lock: Lock, fencing: bool) -> Self {
        let options = LockOptions::new(TTL).with_fencing_mode(if fencing {
            lock_core::Fencing::OnAcquire
        } else {
            lock_core::Fencing::Off
        });
        let nested = if fencing { CORE_NESTED } else { CORE_NESTED_NOFENCE };
        Contender { name: name.to_owned(), client: Client::Core { lock, options, draw: false }, nested }
    }

    /// Our backend on one server with fencing on demand ([`Fencing::OnDemand`]): the acquire is a plain
    /// `SET NX PX`; with `draw`, every acquisition then asks for its token (one `FENCE` script more).
    pub(crate) async fn core_on_demand(name: &str, backend: Backend, url: &str, draw: bool) -> anyhow::Result<Self> {
        let options = LockOptions::new(TTL).with_fencing_mode(Fencing::OnDemand);
        let nested = if draw { CORE_NESTED } else { CORE_NESTED_NOFENCE };
        Contender::core_single(name, backend, url, options, draw, nested).await
    }

    /// Our backend on one server with the default options and a wait of [`DEFAULT_WAIT`]: what an application
    /// that writes `LockOptions::new(ttl).with_wait(…)` and `acquire` runs (issue 58's harness).
    pub(crate) async fn core_default(name: &str, backend: Backend, url: &str) -> anyhow::Result<Self> {
        let options = LockOptions::new(TTL).with_wait(DEFAULT_WAIT);
        Contender::core_single(name, backend, url, options, false, CORE_NESTED_NOFENCE).await
    }

    /// Our backend on one server with a fair queue ([`LockOptions::with_fair_queue`], waiter TTL [`WAITER_TTL`]).
    pub(crate) async fn core_fair(name: &str, backend: Backend, url: &str) -> anyhow::Result<Self> {
        let options = LockOptions::new(TTL).with_fair_queue(WAITER_TTL);
        Contender::core_single(name, backend, url, options, false, CORE_NESTED_FAIR).await
    }

    /// Our lock over one store of `backend` on `url`, acquiring with `options` (and, with `draw`, drawing each
    /// acquisition's fence).
    async fn core_single(
        name: &str,
        backend: Backend,
        url: &str,
        options: LockOptions,
        draw: bool,
        nested: &'static [&'static str],
    ) -> anyhow::Result<Self> {
        let lock = Lock::from_arc(backend.store(url).await?);
        Ok(Contender { name: name.to_owned(), client: Client::Core { lock, options, draw }, nested })
    }

    /// Our backend's [`LockStore`] on one server, called without the lock around it (see [`Client::Store`]); a
    /// diagnostic, not a target: with the floor of the same client library, it splits our gap to that floor into
    /// the backend's share and the engine's.
    pub(crate) async fn store(name: &str, backend: Backend, url: &str) -> anyhow::Result<Self> {
        Ok(Contender::over_store(name, backend.store(url).await?))
    }

    /// The calls of [`Client::Store`] to any store.
    pub(crate) fn over_store(name: &str, store: Arc<dyn LockStore>) -> Self {
        Contender { name: name.to_owned(), client: Client::Store(store), nested: CORE_NESTED_NOFENCE }
    }

    pub(crate) async fn floor(name: &str, urls: &[String]) -> anyhow::Result<Self> {
        let floor = Floor::connect(urls, TTL).await?;
        Ok(Contender { name: name.to_owned(), client: Client::Floor(floor), nested: floor::NESTED })
    }

    /// The floor's commands sent by bare fred (see [`FredFloor`]).
    pub(crate) async fn floor_fred(name: &str, url: &str) -> anyhow::Result<Self> {
        let floor = FredFloor::connect(url, TTL).await?;
        Ok(Contender { name: name.to_owned(), client: Client::FredFloor(floor), nested: floor::NESTED })
    }

    /// The floor acquiring with lock-core's fenced script: how much of our gap to the floor is fencing's own
    /// server-side work (a diagnostic, not a target).
    /// The floor with no response timeout on its connection (see [`Floor::connect_unbounded`]).
    pub(crate) async fn floor_unbounded(name: &str, urls: &[String]) -> anyhow::Result<Self> {
        let floor = Floor::connect_unbounded(urls, TTL).await?;
        Ok(Contender { name: name.to_owned(), client: Client::Floor(floor), nested: floor::NESTED })
    }

    pub(crate) async fn floor_fenced(name: &str, urls: &[String]) -> anyhow::Result<Self> {
        let floor = Floor::connect(urls, TTL).await?.fenced();
        Ok(Contender { name: name.to_owned(), client: Client::Floor(floor), nested: CORE_NESTED })
    }

    pub(crate) async fn pubsub(name: &str, url: &str) -> anyhow::Result<Self> {
        let floor = Floor::connect(&[url.to_owned()], TTL).await?;
        Ok(Contender { name: name.to_owned(), client: Client::PubSub(floor), nested: floor::NESTED })
    }

    pub(crate) fn rslock(name: &str, urls: &[String], retry: Option<(u32, Duration)>) -> anyhow::Result<Self> {
        let manager = peers::manager(urls, retry)?;
        Ok(Contender { name: name.to_owned(), client: Client::Rslock(manager), nested: peers::NESTED })
    }

    /// Acquires `key` in one try; the scenarios that call this use fresh keys, so "held" is an error.
    pub(crate) async fn lock(&self, key: &str) -> anyhow::Result<Held> {
        let held = match &self.client {
            Client::Core { lock, options, draw } => match Self::core_acquire(lock, key, options).await? {
                Some(guard) if *draw => {
                    guard.fence().await?;
                    Some(Held::Core(guard))
                }
                guard => guard.map(Held::Core),
            },
            Client::Floor(floor) | Client::PubSub(floor) => floor.try_lock(key).await?.map(Held::Floor),
            Client::FredFloor(floor) => floor.try_lock(key).await?.map(Held::Floor),
            Client::Store(store) => {
                let keys = LockKeys::new(DEFAULT_PREFIX, key)?;
                let token = Token::generate();
                let request = AcquireRequest {
                    keys: &keys,
                    token: &token,
                    ttl: TTL,
                    fencing: false,
                    fence_floor: None,
                    replicas: None,
                    waiting_as: None,
                };
                match store.acquire(request).await? {
                    AcquireReply::Acquired { .. } => Some(Held::Store(keys, token)),
                    _ => None,
                }
            }
            // rslock's `lock` is one attempt plus its own retries; on a free key the first attempt wins.
            Client::Rslock(manager) => Some(Held::Rslock(manager.lock(key, TTL).await?)),
        };
        held.with_context(|| format!("{}: fresh key {key} was held", self.name))
    }

    /// One try, or (options with a wait) a waiting acquire, which on a fresh key is granted at its first try.
    async fn core_acquire(lock: &Lock, key: &str, options: &LockOptions) -> lock_core::Result<Option<Guard>> {
        if options.wait().is_zero() {
            lock.try_acquire(key, options).await
        } else {
            lock.acquire(key, options).await.map(Some)
        }
    }

    /// Releases a lock taken by [`lock`](Self::lock) and checks that it was still ours.
    pub(crate) async fn unlock(&self, held: Held) -> anyhow::Result<()> {
        let ok = match (&self.client, held) {
            (Client::Core { .. }, Held::Core(guard)) => guard.release().await? == ReleaseOutcome::Released,
            (Client::Floor(floor) | Client::PubSub(floor), Held::Floor(held)) => floor.unlock(held).await?,
            (Client::FredFloor(floor), Held::Floor(held)) => floor.unlock(held).await?,
            (Client::Store(store), Held::Store(keys, token)) => {
                store.release(&keys, &token).await? == ReleaseOutcome::Released
            }
            (Client::Rslock(manager), Held::Rslock(lock)) => {
                // rslock's release reports nothing; it is best effort by design.
                manager.unlock(&lock).await;
                true
            }
            _ => bail!("{}: released a lock of another contender", self.name),
        };
        if !ok {
            bail!("{}: release found the lock gone", self.name);
        }
        Ok(())
    }

    /// One competitor of a contended scenario (its own pub/sub subscription for the pub/sub waiter; a shared
    /// client otherwise).
    pub(crate) async fn competitor(&self, key: &str, wait: Duration) -> anyhow::Result<Competitor> {
        Ok(match &self.client {
            Client::Core { lock, options, .. } => {
                Competitor::Core { lock: lock.clone(), options: Box::new(options.clone().with_wait(wait)) }
            }
            Client::PubSub(floor) => {
                Competitor::PubSub(Box::new(floor.pubsub_waiter(&format!("{key}:released")).await?))
            }
            Client::Rslock(manager) => Competitor::Rslock(manager.clone()),
            Client::Floor(_) | Client::FredFloor(_) | Client::Store(_) => {
                bail!("{}: bare commands have no waiting acquire", self.name)
            }
        })
    }

    /// Options for auto-renewed guards with `ttl` (renewal scenario; our backends only).
    pub(crate) fn renewing(&self, ttl: Duration) -> anyhow::Result<(Lock, LockOptions)> {
        let (lock, options) = self.core_lock()?;
        Ok((lock, options.with_ttl(ttl).with_auto_renew(RenewPolicy::default())))
    }

    /// Our lock and its options (scenarios that call more of its API than a cycle: multi-locks, renewal).
    pub(crate) fn core_lock(&self) -> anyhow::Result<(Lock, LockOptions)> {
        match &self.client {
            Client::Core { lock, options, .. } => Ok((lock.clone(), options.clone())),
            _ => bail!("{}: not one of our locks", self.name),
        }
    }
}

/// One task competing for a contended lock.
pub(crate) enum Competitor {
    Core { lock: Lock, options: Box<LockOptions> },
    PubSub(Box<PubSubWaiter>),
    Rslock(LockManager),
}

/// A lock a competitor holds.
pub(crate) enum CompetitorHeld {
    Core(Guard),
    Floor(FloorHeld),
    Rslock(rslock::LockGuard),
}

impl Competitor {
    /// Waits for the lock (the caller bounds the wait with a timeout).
    pub(crate) async fn acquire(&mut self, key: &str) -> anyhow::Result<CompetitorHeld> {
        Ok(match self {
            Competitor::Core { lock, options } => CompetitorHeld::Core(lock.acquire(key, options).await?),
            Competitor::PubSub(waiter) => CompetitorHeld::Floor(waiter.acquire(key).await?),
            // rslock's `acquire` loops until it holds the lock.
            Competitor::Rslock(manager) => CompetitorHeld::Rslock(manager.acquire(key, TTL).await?),
        })
    }

    pub(crate) async fn release(&mut self, held: CompetitorHeld) -> anyhow::Result<()> {
        let ok = match (self, held) {
            (Competitor::Core { .. }, CompetitorHeld::Core(guard)) => {
                guard.release().await? == ReleaseOutcome::Released
            }
            (Competitor::PubSub(waiter), CompetitorHeld::Floor(held)) => waiter.release(held).await?,
            (Competitor::Rslock(_), CompetitorHeld::Rslock(guard)) => {
                guard.release().await;
                true
            }
            _ => bail!("released a lock of another kind of competitor"),
        };
        if !ok {
            bail!("release found the contended lock gone");
        }
        Ok(())
    }
}

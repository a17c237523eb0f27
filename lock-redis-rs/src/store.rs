//! [`RedisStore`]: the [`LockStore`] operations as Lua scripts sent by `EVALSHA`, one round trip each.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use deadpool::managed;
use lock_core::scripts;
use lock_core::{
    AcquireReply, AcquireRequest, ExtendReply, LockError, LockKeys, LockStore, ReleaseHub, ReleaseOutcome, Result,
    Token,
};
use redis::{AsyncConnectionConfig, Client, FromRedisValue, RedisError, Script, ScriptInvocation};

use crate::error::{self, Deadlines};
use crate::pool::{Connector, Pool};
use crate::rt;
use crate::subscriber::Subscriber;

/// Pool size of a store built from a URL, unless set with [`RedisStoreConfig::pool_size`].
pub const DEFAULT_POOL_SIZE: usize = 16;
/// Bound on one command's reply, unless set with [`RedisStoreConfig::command_timeout`].
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on opening one connection, unless set with [`RedisStoreConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The lock scripts of lock-core, with their SHA1 digests computed once.
struct Scripts {
    acquire: Script,
    release: Script,
    extend: Script,
    raise_fence: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(scripts::ACQUIRE),
    release: Script::new(scripts::RELEASE),
    extend: Script::new(scripts::EXTEND),
    raise_fence: Script::new(scripts::RAISE_FENCE),
});

/// Settings for a [`RedisStore`]: where the server is, how many pooled connections, and the timeouts.
///
/// ```no_run
/// use lock_redis_rs::RedisStoreConfig;
/// use std::time::Duration;
///
/// # async fn run() -> lock_redis_rs::lock_core::Result<()> {
/// let store = RedisStoreConfig::new("redis://127.0.0.1:6379")
///     .pool_size(4)
///     .command_timeout(Duration::from_millis(500))
///     .connect_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisStoreConfig {
    client: std::result::Result<Client, RedisError>,
    pool_size: usize,
    deadlines: Deadlines,
}

impl RedisStoreConfig {
    /// Settings for the server at `url` (`redis://[user:password@]host[:port][/db]`, `rediss://`, `unix://`; see
    /// [`redis::Client::open`]). A malformed URL is reported by [`connect`](Self::connect).
    pub fn new(url: &str) -> Self {
        Self::with_client(Client::open(url))
    }

    /// Settings for the server `client` points at.
    pub fn from_client(client: Client) -> Self {
        Self::with_client(Ok(client))
    }

    fn with_client(client: std::result::Result<Client, RedisError>) -> Self {
        RedisStoreConfig {
            client,
            pool_size: DEFAULT_POOL_SIZE,
            deadlines: Deadlines { command: DEFAULT_COMMAND_TIMEOUT, connect: DEFAULT_CONNECT_TIMEOUT },
        }
    }

    /// Sets the most connections the store's own pool opens (default [`DEFAULT_POOL_SIZE`]). Each command holds one
    /// only for its own round trip, never while a lock is awaited, so a small pool serves many waiters.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Sets the bound on one command's reply (default [`DEFAULT_COMMAND_TIMEOUT`]).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.deadlines.command = timeout;
        self
    }

    /// Sets the bound on opening one connection, handshake included (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.deadlines.connect = timeout;
        self
    }

    fn validate(&self) -> Result<Client> {
        if self.deadlines.command.is_zero() || self.deadlines.connect.is_zero() {
            return Err(LockError::invalid("redis command and connect timeouts must be positive"));
        }
        self.client.clone().map_err(|err| error::from_redis(err, "connect", None, self.deadlines.connect))
    }

    /// Builds the store with a pool of its own and checks that the server answers `PING`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a malformed URL, a pool size of zero or a zero timeout;
    /// [`LockError::Unavailable`] when the server cannot be reached; [`LockError::Auth`] when it refuses the
    /// credentials; [`LockError::Timeout`] when it does not answer in time; [`LockError::NoRuntime`] outside a
    /// runtime this crate was built for.
    pub async fn connect(self) -> Result<RedisStore> {
        let client = self.validate()?;
        if self.pool_size == 0 {
            return Err(LockError::invalid("redis pool size must be at least 1"));
        }
        let d = self.deadlines;
        let connections =
            AsyncConnectionConfig::new().set_connection_timeout(Some(d.connect)).set_response_timeout(Some(d.command));
        // No pool timeouts: every store call is bounded as a whole (see `Inner::eval`), on whatever runtime runs it.
        let pool = managed::Pool::builder(Connector::new(client.clone(), connections))
            .max_size(self.pool_size)
            // Hand out the most recently used connection: busy connections stay under the idle-check threshold
            // (no PING), and the rest idle until they are checked or needed.
            .queue_mode(managed::QueueMode::Lifo)
            .build()
            .map_err(LockError::backend)?;
        let store = RedisStore::assemble(Pool::Own(pool), client, d);
        // Boxed: opening a redis-rs connection is a large future (tens of KB in debug builds), and callers'
        // futures, which are often moved around whole on small thread stacks by `block_on`, should not carry it.
        Box::pin(store.ping()).await?;
        Ok(store)
    }

    /// Builds the store over a pool the caller already has; the configured client is used only for the
    /// notification subscriber, and the pool size setting is ignored. Nothing is sent until the store is used.
    ///
    /// `deadpool_redis::Pool` checks every connection it hands out with `UNWATCH` + `PING`, one more round trip per
    /// command; a store built by [`connect`](Self::connect) avoids that.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a malformed URL or a zero timeout.
    pub fn build_with_pool(self, pool: deadpool_redis::Pool) -> Result<RedisStore> {
        let client = self.validate()?;
        Ok(RedisStore::assemble(Pool::Shared(pool), client, self.deadlines))
    }
}

/// A [`LockStore`] on one Redis server (or one primary), over redis-rs with pooled connections.
///
/// Cheap to clone: clones share the pool and the notification subscriber. See the [crate docs](crate) for the
/// keys, scripts, round trips and errors.
#[derive(Clone, Debug)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    deadlines: Deadlines,
    /// Owns the subscriber control, which owns the subscriber task: dropping the last store clone stops it.
    hub: Arc<ReleaseHub>,
}

impl RedisStore {
    /// Connects to the server at `url` with the default settings (see [`RedisStoreConfig`]).
    ///
    /// ```no_run
    /// # async fn run() -> lock_redis_rs::lock_core::Result<()> {
    /// let store = lock_redis_rs::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let lock = lock_redis_rs::lock_core::Lock::new(store);
    /// # let _ = lock;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`RedisStoreConfig::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        RedisStoreConfig::new(url).connect().await
    }

    /// A store over the caller's `deadpool_redis` pool, with `subscriber` (a client for the same server) used for
    /// the release-notification connection, and the default timeouts. See [`RedisStoreConfig::build_with_pool`].
    pub fn from_pool(pool: deadpool_redis::Pool, subscriber: Client) -> Self {
        RedisStore::assemble(
            Pool::Shared(pool),
            subscriber,
            Deadlines { command: DEFAULT_COMMAND_TIMEOUT, connect: DEFAULT_CONNECT_TIMEOUT },
        )
    }

    fn assemble(pool: Pool, client: Client, deadlines: Deadlines) -> Self {
        let hub = Subscriber::hub(client, deadlines);
        RedisStore { inner: Arc::new(Inner { pool, deadlines, hub }) }
    }

    /// How many connections the pool holds and how many are in use.
    pub fn pool_status(&self) -> deadpool_redis::Status {
        self.inner.pool.status()
    }

    async fn ping(&self) -> Result<()> {
        let d = self.inner.deadlines;
        let call = async {
            let mut conn = self.inner.pool.get().await.map_err(|err| error::from_pool(err, "connect", d))?;
            redis::cmd("PING")
                .query_async::<()>(conn.connection())
                .await
                .map_err(|err| error::from_redis(err, "connect", None, d.command))
        };
        rt::timeout("connect", d.connect + d.command, call).await?
    }
}

impl Inner {
    /// Runs one script on one pooled connection: one round trip (three after a `NOSCRIPT`, which redis-rs answers
    /// with `SCRIPT LOAD` and a second `EVALSHA`).
    ///
    /// Bounded as a whole by connect + command timeout, so waiting for a free connection or opening one cannot
    /// hang a call. Cancel-safe (see the `pool` module).
    async fn eval<T: FromRedisValue>(
        &self,
        operation: &'static str,
        keys: &LockKeys,
        invocation: ScriptInvocation<'static>,
    ) -> Result<T> {
        let d = self.deadlines;
        let call = async {
            let mut conn = self.pool.get().await.map_err(|err| error::from_pool(err, operation, d))?;
            match invocation.invoke_async(conn.connection()).await {
                Ok(value) => Ok(value),
                Err(err) => {
                    if error::breaks_connection(&err) {
                        conn.discard();
                    }
                    Err(error::from_redis(err, operation, Some(keys), d.command))
                }
            }
        };
        rt::timeout(operation, d.connect + d.command, call).await?
    }
}

#[async_trait]
impl LockStore for RedisStore {
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply> {
        let keys = request.keys;
        let mut invocation = SCRIPTS.acquire.prepare_invoke();
        invocation
            .key(keys.lock())
            .key(keys.fence())
            .arg(request.token.as_str())
            .arg(scripts::ttl_millis(request.ttl))
            .arg(if request.fencing { "1" } else { "0" });
        let reply: Vec<i64> = self.inner.eval("acquire", keys, invocation).await?;
        scripts::parse_acquire(&reply, request.fencing)
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<ReleaseOutcome> {
        let mut invocation = SCRIPTS.release.prepare_invoke();
        invocation.key(keys.lock()).key(keys.channel()).arg(token.as_str()).arg(self.inner.hub.origin());
        scripts::parse_release(self.inner.eval("release", keys, invocation).await?)
    }

    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<ExtendReply> {
        let mut invocation = SCRIPTS.extend.prepare_invoke();
        invocation.key(keys.lock()).arg(token.as_str()).arg(scripts::ttl_millis(ttl));
        scripts::parse_extend(self.inner.eval("extend", keys, invocation).await?)
    }

    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> Result<bool> {
        let mut invocation = SCRIPTS.raise_fence.prepare_invoke();
        invocation.key(keys.lock()).key(keys.fence()).arg(token.as_str()).arg(at_least);
        scripts::parse_raise_fence(self.inner.eval("raise_fence", keys, invocation).await?)
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        Some(&self.inner.hub)
    }
}

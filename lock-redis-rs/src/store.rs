//! [`RedisStore`]: lock-core's calls (its Lua scripts by `EVALSHA`, or one plain command) over redis-rs, one round
//! trip each.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::scripts;
use lock_core::backend::Command;
use lock_core::backend::{Call, Ran, ReleaseHub, Reply, ScriptStore, Topology};
use lock_core::{LockError, ReplicaAck, Result};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, IntoConnectionInfo,
    RedisError, ServerErrorKind, TlsMode,
};

use crate::error::{self, Deadlines};
use crate::pool::{ClusterNodes, ClusterPool, Endpoint, Multiplexed, Pool, Pooled, Sentinels};
use crate::subscriber::Subscriber;
use crate::tls::{self, TlsOptions};
use lock_core::backend::rt;

/// Connections of a store built from a URL, unless set with [`RedisStoreBuilder::with_pool_size`]. One multiplexed
/// connection pipelines the commands of every task, which is what a single-threaded Redis serves best.
pub const DEFAULT_POOL_SIZE: usize = 1;
/// Bound on one command's reply, unless set with [`RedisStoreBuilder::with_command_timeout`].
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on opening one connection, unless set with [`RedisStoreBuilder::with_connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Shortest wait (ms) before the cluster connection retries a command (`TRYAGAIN`, a failed node).
const CLUSTER_RETRY_WAIT_MIN_MS: u64 = 5;
/// Longest such wait (ms).
const CLUSTER_RETRY_WAIT_MAX_MS: u64 = 100;

/// How many connections a store holds and how many are in use ([`RedisStore::pool_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStatus {
    /// The most connections the store opens.
    pub max_size: usize,
    /// Connections open now.
    pub size: usize,
    /// Connections free for a command now (a store's own multiplexed connections are always free).
    pub available: usize,
    /// Commands waiting for a connection.
    pub waiting: usize,
}

/// Settings for a [`RedisStore`]: where the server is, how many pooled connections, and the timeouts.
///
/// ```no_run
/// use lock_redis_rs::RedisStoreBuilder;
/// use std::time::Duration;
///
/// # async fn run() -> lock_redis_rs::lock_core::Result<()> {
/// let store = RedisStoreBuilder::new("redis://127.0.0.1:6379")
///     .with_pool_size(4)
///     .with_command_timeout(Duration::from_millis(500))
///     .with_connect_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `connect().await`"]
pub struct RedisStoreBuilder {
    target: Target,
    pool_size: usize,
    deadlines: Deadlines,
    tls: TlsOptions,
    primary: PrimaryAccess,
}

/// What a store connects to. URLs are kept parsed: redis-rs's `ConnectionInfo` redacts passwords in `Debug`.
#[derive(Clone, Debug)]
enum Target {
    /// One server.
    Server(std::result::Result<ConnectionInfo, UrlError>),
    /// One server, through a client the caller built.
    Client(Box<Client>),
    /// A Redis Cluster, through these seed nodes.
    Cluster(std::result::Result<Vec<ConnectionInfo>, UrlError>),
    /// The primary Sentinels monitor as `service`.
    Sentinel { service: String, sentinels: std::result::Result<Vec<ConnectionInfo>, UrlError> },
}

/// How a Sentinel store reaches the data nodes: credentials, TLS and database of the primary.
#[derive(Clone, Default)]
struct PrimaryAccess {
    username: Option<String>,
    password: Option<String>,
    tls: bool,
    db: i64,
}

impl fmt::Debug for PrimaryAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrimaryAccess")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("db", &self.db)
            .finish()
    }
}

/// The URL schemes redis-rs reads (`redis::IntoConnectionInfo` for `&str`).
const SCHEMES: &[&str] = &["redis", "rediss", "valkey", "valkeys", "redis+unix", "valkey+unix", "unix"];

/// A URL redis-rs did not parse: its error, and the part that is wrong when [`server_url::check`] can name it
/// (redis-rs says only "did not parse").
///
/// [`server_url::check`]: lock_core::backend::server_url::check
#[derive(Clone, Debug)]
struct UrlError {
    client: RedisError,
    part: Option<String>,
}

impl UrlError {
    fn into_lock_error(self, d: Deadlines) -> LockError {
        match self.part {
            Some(part) => LockError::invalid(part),
            None => error::from_redis(self.client, "connect", None, d.connect),
        }
    }
}

/// `url` as redis-rs reads it; a URL it refuses is explained by its part when that can be named.
fn parse(url: &str) -> std::result::Result<ConnectionInfo, UrlError> {
    url.into_connection_info().map_err(|client| {
        let part = match lock_core::backend::server_url::check(url, SCHEMES) {
            Err(LockError::InvalidArgument(part)) => Some(part.into_owned()),
            _ => None,
        };
        UrlError { client, part }
    })
}

fn parse_all<I, S>(urls: I, none: &'static str) -> std::result::Result<Vec<ConnectionInfo>, UrlError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let nodes = urls.into_iter().map(|url| parse(url.as_ref())).collect::<std::result::Result<Vec<_>, _>>()?;
    if nodes.is_empty() {
        return Err(UrlError { client: RedisError::from((ErrorKind::InvalidClientConfig, none)), part: None });
    }
    Ok(nodes)
}

impl RedisStoreBuilder {
    /// Settings for the server at `url` (`redis://[user:password@]host[:port][/db]`, `rediss://` for TLS,
    /// `unix://`; see [`redis::Client::open`]). A malformed URL is reported by [`connect`](Self::connect).
    pub fn new(url: &str) -> Self {
        Self::with_target(Target::Server(parse(url)))
    }

    /// Settings for the server `client` points at (with the TLS settings of that client; the store's own
    /// [`ca_certificate`](Self::with_ca_certificate) and [`client_certificate`](Self::with_client_certificate) do not apply).
    pub fn from_client(client: Client) -> Self {
        Self::with_target(Target::Client(Box::new(client)))
    }

    /// Settings for a Redis Cluster reached through any of `urls` (seed nodes; the rest of the topology is
    /// discovered). Commands go over one redis-rs cluster connection (`redis::cluster_async`), which routes each
    /// script by its first key's slot (all keys of one lock share a hash tag), follows `MOVED`/`ASK` and retries
    /// `TRYAGAIN` by itself; the pool size does not apply. Releases are announced with sharded pub/sub (`SPUBLISH`,
    /// Redis 7.0+), which stays on the shard that owns the lock's slot instead of being broadcast to every node, and
    /// heard over a second cluster connection that `SSUBSCRIBE`s each watched channel on its shard and resubscribes
    /// after reconnects and slot moves; a notification missed meanwhile costs a waiter at most its safety poll.
    ///
    /// The credentials and TLS of the first URL (`rediss://user:password@…`) apply to every node.
    ///
    /// ```no_run
    /// # async fn run() -> lock_redis_rs::lock_core::Result<()> {
    /// let store = lock_redis_rs::RedisStoreBuilder::cluster(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"])
    ///     .connect()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cluster<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::with_target(Target::Cluster(parse_all(urls, "a cluster needs at least one seed node")))
    }

    /// Settings for the primary that the Sentinels at `sentinel_urls` monitor as `service_name` (Redis Sentinel:
    /// a primary with replicas, failed over by the Sentinels).
    ///
    /// Every connection the store opens (one per [`pool_size`](Self::with_pool_size) slot, and the notification
    /// subscriber's) goes to the primary the Sentinels name at that moment, which redis-rs confirms with `ROLE`.
    /// After a failover the connections to the old primary break (it died, or the Sentinels disconnected its
    /// clients when they demoted it): the command that was in flight fails as
    /// [`Unavailable`](LockError::Unavailable) or [`Timeout`](LockError::Timeout), both retryable, and the next
    /// command asks the Sentinels again. A connection that answers `READONLY` (its node was demoted without
    /// disconnecting it) is dropped the same way. While the Sentinels name no primary that is up (between the
    /// primary's failure and the promotion, about `down-after-milliseconds` plus a second or two), calls fail with
    /// `Unavailable`; a waiting acquire retries them within its wait budget. Each lookup is bounded by the
    /// [`connect_timeout`](Self::with_connect_timeout).
    ///
    /// Credentials and TLS in the Sentinel URLs (`rediss://user:password@host:port`; those of the first URL) are
    /// used for the Sentinels. The primary is reached with [`primary_credentials`](Self::with_primary_credentials),
    /// [`primary_tls`](Self::with_primary_tls) and [`primary_db`](Self::with_primary_db) (default: no credentials, plain TCP,
    /// database 0); the certificates of [`ca_certificate`](Self::with_ca_certificate) and
    /// [`client_certificate`](Self::with_client_certificate) apply to both.
    ///
    /// What Sentinel guarantees for a lock (asynchronous replication: a failover can lose a just-granted lock and
    /// the last fencing-counter increment) is in the [crate docs](crate#redis-sentinel).
    ///
    /// ```no_run
    /// # async fn run() -> lock_redis_rs::lock_core::Result<()> {
    /// let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"];
    /// let store = lock_redis_rs::RedisStoreBuilder::sentinel("mymaster", sentinels)
    ///     .with_primary_credentials(Some("locker"), "secret")
    ///     .connect()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn sentinel<I, S>(service_name: &str, sentinel_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let sentinels = parse_all(sentinel_urls, "Sentinel needs at least one sentinel URL");
        Self::with_target(Target::Sentinel { service: service_name.to_owned(), sentinels })
    }

    fn with_target(target: Target) -> Self {
        RedisStoreBuilder {
            target,
            pool_size: DEFAULT_POOL_SIZE,
            deadlines: Deadlines { command: DEFAULT_COMMAND_TIMEOUT, connect: DEFAULT_CONNECT_TIMEOUT },
            tls: TlsOptions::default(),
            primary: PrimaryAccess::default(),
        }
    }

    /// Sets how many multiplexed connections the store opens (default [`DEFAULT_POOL_SIZE`]); commands are spread
    /// over them round robin, and every connection is shared by all concurrent commands (pipelined). No command
    /// holds a connection while a lock is awaited, so any size serves any number of waiters.
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Sets the bound on one command's reply (default [`DEFAULT_COMMAND_TIMEOUT`]).
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.deadlines.command = timeout;
        self
    }

    /// Sets the bound on opening one connection, handshake included (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.deadlines.connect = timeout;
        self
    }

    /// Trusts the CA certificate(s) in `pem` for TLS connections (`rediss://`) instead of the platform's roots:
    /// for servers whose certificate a private CA signed. Needs a TLS feature (see the [crate docs](crate#tls)).
    pub fn with_ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca = Some(pem.into());
        self
    }

    /// Presents `cert_pem` (with its private key `key_pem`) to servers that require client certificates (mutual
    /// TLS, `tls-auth-clients yes`). Needs a TLS feature; the key never appears in `Debug` output.
    pub fn with_client_certificate(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Behind Sentinel: authenticates to the primary as `username` (an ACL user; `None` for the `default` user
    /// and `requirepass`) with `password`. Ignored by other deployments, whose URLs carry their credentials.
    pub fn with_primary_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.primary.username = username.map(str::to_owned);
        self.primary.password = Some(password.to_owned());
        self
    }

    /// Behind Sentinel: reaches the primary over TLS (the Sentinels name its address; the certificates of
    /// [`ca_certificate`](Self::with_ca_certificate) and [`client_certificate`](Self::with_client_certificate) apply).
    pub fn with_primary_tls(mut self, tls: bool) -> Self {
        self.primary.tls = tls;
        self
    }

    /// Behind Sentinel: the database the locks live in on the primary (default 0).
    pub fn with_primary_db(mut self, db: i64) -> Self {
        self.primary.db = db;
        self
    }

    fn check_timeouts(&self) -> Result<()> {
        let in_range = |t: Duration| !t.is_zero() && t <= lock_core::MAX_WAIT;
        if !in_range(self.deadlines.command) || !in_range(self.deadlines.connect) {
            return Err(LockError::invalid(format!(
                "redis command and connect timeouts must be in (0, {:?}]",
                lock_core::MAX_WAIT
            )));
        }
        Ok(())
    }

    /// A client for one server, with the TLS settings.
    fn server_client(&self, info: &std::result::Result<ConnectionInfo, UrlError>) -> Result<Client> {
        let d = self.deadlines;
        let info = info.clone().map_err(|err| err.into_lock_error(d))?;
        tls::check_tls_intent(&self.tls, &[tls::is_tls(info.addr())])?;
        let client = match self.tls.certificates()? {
            #[cfg(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls"))]
            Some(certs) => Client::build_with_tls(info, certs),
            #[cfg(not(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls")))]
            Some(never) => match never {},
            None => Client::open(info),
        };
        client.map_err(|err| error::from_redis(err, "connect", None, d.connect))
    }

    /// Builds the store with a pool of its own and checks that the server answers `PING`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a malformed URL, a pool size of zero, a zero or absurd timeout, or TLS
    /// settings in a build without a TLS feature; [`LockError::Unavailable`] when the server cannot be reached;
    /// [`LockError::Auth`] when it refuses the credentials; [`LockError::Tls`] when the TLS handshake fails (an
    /// unknown CA, an expired certificate, one for another host, a client certificate the server rejects);
    /// [`LockError::Timeout`] when it does not answer in time; [`LockError::NoRuntime`] outside a runtime this
    /// crate was built for.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops the connections opened so far.
    pub async fn connect(self) -> Result<RedisStore> {
        let server = self.server();
        // Boxed as a trait object: callers' futures neither carry the connecting future nor re-derive its `Send`
        // bound, which is deep enough to exceed the compiler's recursion limit in a caller's crate.
        let connecting: std::pin::Pin<Box<dyn std::future::Future<Output = Result<RedisStore>> + Send>> =
            Box::pin(self.connect_unlocated());
        match connecting.await {
            Ok(store) => Ok(store.named(server)),
            Err(err) => Err(err.at("connect", server.as_deref())),
        }
    }

    /// The server(s) the store will talk to, as `host:port` (comma-separated: a Cluster's seed nodes, the
    /// Sentinels), for errors to name; never a credential.
    fn server(&self) -> Option<String> {
        let addrs = |infos: &[ConnectionInfo]| infos.iter().map(|i| i.addr().to_string()).collect::<Vec<_>>().join(",");
        match &self.target {
            Target::Server(Ok(info)) => Some(info.addr().to_string()),
            Target::Client(client) => Some(client.get_connection_info().addr().to_string()),
            Target::Cluster(Ok(seeds)) => Some(addrs(seeds)),
            Target::Sentinel { service, sentinels: Ok(sentinels) } => {
                Some(format!("{service} via {}", addrs(sentinels)))
            }
            _ => None,
        }
    }

    /// [`connect`](Self::connect), its errors not yet naming the server.
    async fn connect_unlocated(self) -> Result<RedisStore> {
        self.check_timeouts()?;
        if self.pool_size == 0 {
            return Err(LockError::invalid("redis pool size must be at least 1"));
        }
        tls::install_crypto_provider();
        let d = self.deadlines;
        let endpoint = match &self.target {
            Target::Cluster(seeds) => {
                let seeds = seeds.clone().map_err(|err| err.into_lock_error(d))?;
                let nodes = ClusterNodes::new(seeds, self.tls.clone());
                let cluster = nodes
                    .builder()?
                    .connection_timeout(d.connect)
                    .response_timeout(d.command)
                    // redis-rs waits at least 1.28 s before retrying a TRYAGAIN (slot migration) or a lost node by
                    // default, longer than a whole store call may take; these waits are brief and the store's own
                    // bound still caps the total.
                    .min_retry_wait(CLUSTER_RETRY_WAIT_MIN_MS)
                    .max_retry_wait(CLUSTER_RETRY_WAIT_MAX_MS)
                    .retry_wait_formula(CLUSTER_RETRY_WAIT_MIN_MS, 2)
                    .build()
                    .map_err(|err| error::from_redis(err, "connect", None, d.connect))?;
                // Boxed for the same reason as the ping below. Bounded: discovery may try every seed node.
                let connect = Box::pin(cluster.get_async_connection());
                let conn = rt::timeout("connect", d.call(), connect)
                    .await?
                    .map_err(|err| error::from_redis(err, "connect", None, d.connect))?;
                let pool = Pool::Cluster(Arc::new(ClusterPool::new(conn, cluster)));
                let store = RedisStore::assemble(pool, Subscriber::sharded_hub(nodes, d), d);
                Box::pin(store.ping()).await?;
                return Ok(store);
            }
            Target::Server(info) => Endpoint::server(self.server_client(info)?),
            Target::Client(client) => {
                if self.tls.is_set() {
                    return Err(LockError::invalid("set TLS certificates on the redis::Client given to from_client"));
                }
                Endpoint::server((**client).clone())
            }
            Target::Sentinel { service, sentinels } => {
                let sentinels = sentinels.clone().map_err(|err| err.into_lock_error(d))?;
                let client = self.sentinel_client(service, &sentinels)?;
                Endpoint::Sentinel(Arc::new(Sentinels::new(client, service.clone(), d.connect)))
            }
        };
        let connections =
            AsyncConnectionConfig::new().set_connection_timeout(Some(d.connect)).set_response_timeout(Some(d.command));
        let conns = Multiplexed::new(endpoint.clone(), connections, self.pool_size, d.connect);
        let store = RedisStore::assemble(Pool::Own(Arc::new(conns)), Subscriber::hub(endpoint, d), d);
        // Boxed: opening a redis-rs connection is a large future (tens of KB in debug builds), and callers'
        // futures, which are often moved around whole on small thread stacks by `block_on`, should not carry it.
        if let Err(err) = Box::pin(store.ping()).await {
            return Err(self.explain_failed_tls(err).await);
        }
        Ok(store)
    }

    /// A first connection over TLS that failed without a TLS error (a server without TLS on that port never answers
    /// the handshake, which looked like a retryable timeout) is a [`LockError::Tls`] saying so, when a plain-text
    /// probe finds a Redis server there.
    /// Likewise a first plain-text connection the server dropped is a [`LockError::Tls`] saying that the server
    /// speaks TLS there, when a TLS hello gets a TLS answer ([`lock_core::backend::tls_only_server`]).
    async fn explain_failed_tls(&self, err: LockError) -> LockError {
        let Target::Server(Ok(info)) = &self.target else { return err };
        if let Some(not_redis) = error::not_redis(&err, info.addr()) {
            return not_redis;
        }
        if !matches!(err, LockError::Timeout { .. } | LockError::Unavailable { .. } | LockError::Backend { .. }) {
            return err;
        }
        let mismatch = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                lock_core::backend::tls_only_server(host, *port, self.deadlines.connect).await
            }
            tls => tls::plain_text_server(tls, self.deadlines.connect).await,
        };
        mismatch.unwrap_or(err)
    }

    /// The redis-rs Sentinel client: the first URL's credentials for the Sentinels, [`PrimaryAccess`] for the
    /// primary, the certificates for both.
    fn sentinel_client(&self, service: &str, sentinels: &[ConnectionInfo]) -> Result<SentinelClient> {
        let d = self.deadlines;
        // The Sentinels' URLs must agree among themselves; the primary's TLS is `with_primary_tls`.
        let sentinel_tls: Vec<bool> = sentinels.iter().map(|info| tls::is_tls(info.addr())).collect();
        tls::check_tls_intent(&TlsOptions::default(), &sentinel_tls)?;
        let any_tls = sentinel_tls.first().copied().unwrap_or(false) || self.primary.tls;
        tls::check_tls_intent(&self.tls, &[any_tls])?;
        let invalid = |err| error::from_redis(err, "connect", None, d.connect);
        let addresses = sentinels.iter().map(|info| info.addr().clone());
        let mut builder =
            SentinelClientBuilder::new(addresses, service, SentinelServerType::Master).map_err(invalid)?;
        if let Some(first) = sentinels.first() {
            let settings = first.redis_settings();
            if let Some(username) = settings.username() {
                builder = builder.set_client_to_sentinel_username(username);
            }
            if let Some(password) = settings.password() {
                builder = builder.set_client_to_sentinel_password(password);
            }
            if matches!(first.addr(), ConnectionAddr::TcpTls { .. }) {
                builder = builder.set_client_to_sentinel_tls_mode(TlsMode::Secure);
            }
        }
        let primary = &self.primary;
        if let Some(username) = &primary.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &primary.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if primary.tls {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
        }
        builder = builder.set_client_to_redis_db(primary.db);
        match self.tls.certificates()? {
            #[cfg(any(feature = "tls-rustls", feature = "smol-tls-rustls"))]
            Some(certs) => {
                builder =
                    builder.set_client_to_sentinel_certificates(certs.clone()).set_client_to_redis_certificates(certs);
            }
            #[cfg(all(feature = "tls-native-tls", not(any(feature = "tls-rustls", feature = "smol-tls-rustls"))))]
            Some(_) => {
                return Err(LockError::invalid("custom certificates behind Sentinel need the tls-rustls feature"));
            }
            #[cfg(not(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls")))]
            Some(never) => match never {},
            None => {}
        }
        builder.build().map_err(invalid)
    }

    /// Builds the store over a pool the caller already has; the configured URL is used only for the notification
    /// subscriber, and the pool size setting is ignored. Nothing is sent until the store is used.
    ///
    /// `deadpool_redis::Pool` checks every connection it hands out with `UNWATCH` + `PING`, one more round trip per
    /// command; a store built by [`connect`](Self::connect) avoids that.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a malformed URL, a zero timeout, or a [`cluster`](Self::cluster) or
    /// [`sentinel`](Self::sentinel) configuration.
    #[cfg(feature = "deadpool-redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "deadpool-redis")))]
    pub fn build_with_pool(self, pool: deadpool_redis::Pool) -> Result<RedisStore> {
        self.check_timeouts()?;
        tls::install_crypto_provider();
        let client = match &self.target {
            Target::Cluster(_) => {
                return Err(LockError::invalid("a cluster store uses its own cluster connection, not a pool"));
            }
            Target::Sentinel { .. } => {
                return Err(LockError::invalid("a Sentinel store opens its own connections to the current primary"));
            }
            Target::Server(info) => self.server_client(info)?,
            Target::Client(client) => (**client).clone(),
        };
        let hub = Subscriber::hub(Endpoint::server(client), self.deadlines);
        Ok(RedisStore::assemble(Pool::Shared(pool), hub, self.deadlines).named(self.server()))
    }
}

/// A [`ScriptStore`] (and so a [`LockStore`](lock_core::LockStore)) on one Redis server (or one primary, found through Sentinel with
/// [`RedisStoreBuilder::sentinel`]) over redis-rs with pooled connections, or on a Redis Cluster over a redis-rs
/// cluster connection ([`RedisStoreBuilder::cluster`]).
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
    /// The server(s), as errors name them (`host:port`; no credential).
    server: Option<String>,
    /// Owns the subscriber control, which owns the subscriber task: dropping the last store clone stops it.
    hub: Arc<ReleaseHub>,
}

impl RedisStore {
    /// Connects to the server at `url` with the default settings (see [`RedisStoreBuilder`]).
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
    /// As [`RedisStoreBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future closes what it opened.
    pub async fn connect(url: &str) -> Result<Self> {
        RedisStoreBuilder::new(url).connect().await
    }

    /// A store over the caller's `deadpool_redis` pool, with `subscriber` (a client for the same server) used for
    /// the release-notification connection, and the default timeouts. See [`RedisStoreBuilder::build_with_pool`].
    #[cfg(feature = "deadpool-redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "deadpool-redis")))]
    pub fn from_pool(pool: deadpool_redis::Pool, subscriber: Client) -> Self {
        let deadlines = Deadlines { command: DEFAULT_COMMAND_TIMEOUT, connect: DEFAULT_CONNECT_TIMEOUT };
        let server = Some(subscriber.get_connection_info().addr().to_string());
        let hub = Subscriber::hub(Endpoint::server(subscriber), deadlines);
        RedisStore::assemble(Pool::Shared(pool), hub, deadlines).named(server)
    }

    fn assemble(pool: Pool, hub: Arc<ReleaseHub>, deadlines: Deadlines) -> Self {
        RedisStore { inner: Arc::new(Inner { pool, deadlines, server: None, hub }) }
    }

    /// The same store, naming `server` in its errors (set once, before the store is shared).
    fn named(mut self, server: Option<String>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.server = server;
        }
        self
    }

    /// How many connections the store holds and how many are in use.
    pub fn pool_status(&self) -> PoolStatus {
        let status = self.inner.pool.status();
        PoolStatus {
            max_size: status.max_size,
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        }
    }

    /// Checks that the server answers and is recent enough for the scripts (`INFO server`, one round trip).
    async fn ping(&self) -> Result<()> {
        let d = self.inner.deadlines;
        let call = async {
            let mut conn = self.inner.pool.get().await.map_err(|err| error::from_pool(err, "connect", d))?;
            let mut info = redis::cmd("INFO");
            info.arg("server");
            conn.query::<redis::Value>(&info).await.map_err(|err| error::from_redis(err, "connect", None, d.command))
        };
        // A cluster connection asks every primary and answers with a map of node to reply.
        let replies = match rt::timeout("connect", d.call(), call).await?? {
            redis::Value::Map(nodes) => nodes.into_iter().map(|(_, info)| info).collect(),
            one => vec![one],
        };
        let cluster = matches!(self.inner.pool, Pool::Cluster(_));
        for reply in replies {
            if let Ok(info) = String::from_redis_value(reply) {
                scripts::require_version(&info, cluster)?;
            }
        }
        Ok(())
    }
}

impl Inner {
    /// Runs `work` on one connection: bounded (by connect + command timeout), errors typed, a connection whose
    /// transport failed dropped.
    async fn on_connection<T>(
        &self,
        call: &Call<'_>,
        work: impl AsyncFnOnce(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let d = self.deadlines;
        let operation = call.operation;
        let run = async {
            let conn = self.pool.get().await.map_err(|err| error::from_pool(err, operation, d))?;
            run_on(conn, call, d, work).await
        };
        match self.pool {
            // Already bounded: opening a connection by the connection timeout, each command by the response
            // timeout (redis-rs's own); a second timer per call would only cost.
            Pool::Own(_) => run.await,
            // Waiting for a caller's pool, or cluster retries, are not: bound the call as a whole.
            #[cfg(feature = "deadpool-redis")]
            Pool::Shared(_) => rt::timeout(operation, d.call(), run).await?,
            Pool::Cluster(_) => rt::timeout(operation, d.call(), run).await?,
        }
    }
}

impl Inner {
    /// Runs `work` (a grant and its `WAIT`) on a connection nothing else uses meanwhile (see
    /// [`Pool::get_exclusive`]), bounded as a whole by connect + two command timeouts (the `WAIT`'s own bound is
    /// shorter than one).
    async fn on_exclusive<T>(
        &self,
        call: &Call<'_>,
        work: impl AsyncFnOnce(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let d = self.deadlines;
        let operation = call.operation;
        let run = async {
            let conn = self.pool.get_exclusive().await.map_err(|err| error::from_pool(err, operation, d))?;
            run_on(conn, call, d, work).await
        };
        rt::timeout(operation, d.call().saturating_add(d.command), run).await?
    }
}

/// Runs `work` on `conn`, types its error, and drops a connection whose transport failed; an exclusive connection
/// goes back to its pool only after a reply (see [`Pooled::done`]).
async fn run_on<T>(
    mut conn: Pooled,
    call: &Call<'_>,
    d: Deadlines,
    work: impl AsyncFnOnce(&mut Pooled) -> redis::RedisResult<T>,
) -> Result<T> {
    match work(&mut conn).await {
        Ok(reply) => {
            conn.done();
            Ok(reply)
        }
        Err(err) => {
            if err.is_timeout() {
                conn.timed_out();
            } else if error::breaks_connection(&err) {
                conn.discard();
            } else {
                conn.done();
            }
            Err(error::from_redis(err, call.operation, Some(call), d.command))
        }
    }
}

/// Sends `call`: a plain command, or `EVALSHA` and, after a `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`), the
/// body once with `EVAL`, which also caches it again: two round trips then, and never a `NOSCRIPT` for the caller.
/// Sends `call` on `conn`: one command, bounded by the connection's response timeout (`command`), and after a
/// `NOSCRIPT` the script's body, within what is left of that one bound (see [`RedisStore::call_bound`]).
async fn send(conn: &mut Pooled, call: &Call<'_>, command: Duration) -> redis::RedisResult<redis::Value> {
    // Sized up front: writing arguments into a default `Cmd` grows its buffers several times per call.
    let words = call.keys.len().saturating_add(call.args.len());
    let bytes: usize = call.keys.iter().chain(call.args).map(|w| w.len()).sum();
    let sized = |verb: &str, extra: usize| {
        let mut cmd = redis::Cmd::with_capacity(words.saturating_add(3), bytes.saturating_add(extra));
        cmd.arg(verb);
        cmd
    };
    let script = |verb: &str, script: &str| {
        let mut cmd = sized(verb, script.len().saturating_add(32));
        cmd.arg(script).arg(call.keys.len()).arg(call.keys).arg(call.args);
        cmd
    };
    match call.command {
        Command::Plain(name) => {
            let mut cmd = sized(name, name.len());
            cmd.arg(call.keys).arg(call.args);
            conn.query(&cmd).await
        }
        Command::Script(body) => {
            let started = std::time::Instant::now();
            let reply = conn.query(&script("EVALSHA", body.sha1())).await;
            if matches!(&reply, Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
                let left = command.saturating_sub(started.elapsed());
                return match rt::timeout("eval", left, conn.query(&script("EVAL", body.body()))).await {
                    Ok(reply) => reply,
                    Err(err) => {
                        Err(RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, err.to_string())))
                    }
                };
            }
            reply
        }
        // A command lock-core added after this backend was written.
        _ => Err(RedisError::from((ErrorKind::Client, "lock-core asked for a command this backend cannot send"))),
    }
}

/// A redis-rs reply in lock-core's type.
fn reply(value: redis::Value) -> redis::RedisResult<Reply> {
    use redis::Value as V;
    Ok(match value {
        V::Nil => Reply::Nil,
        V::Int(n) => Reply::Int(n),
        V::BulkString(bytes) => Reply::Bulk(bytes),
        V::SimpleString(text) => Reply::Status(text),
        V::Okay => Reply::Status("OK".to_owned()),
        V::Array(items) | V::Set(items) => Reply::Array(items.into_iter().map(reply).collect::<Result<_, _>>()?),
        V::Boolean(b) => Reply::Int(i64::from(b)),
        V::ServerError(err) => return Err(err.into()),
        other => {
            return Err(RedisError::from((ErrorKind::Client, "unexpected reply type", format!("{other:?}"))));
        }
    })
}

/// `WAIT replicas timeout` on the connection that made the grant (WAIT covers that connection's writes only).
///
/// On a cluster it goes to the primary of the lock key's slot, over the same per-node connection as the grant:
/// redis-rs would send a keyless `WAIT` to every primary and keep the smallest count, so any other shard's missing
/// replica would fail the grant.
async fn wait_replicas(conn: &mut Pooled, ack: &ReplicaAck, lock_key: &str) -> redis::RedisResult<i64> {
    let timeout_ms = u64::try_from(ack.timeout().as_millis()).unwrap_or(u64::MAX).max(1);
    let mut wait = redis::cmd("WAIT");
    wait.arg(ack.replicas()).arg(timeout_ms);
    match conn.cluster() {
        Some(cluster) => {
            let shard = Route::with_key(lock_key, SlotAddr::Master);
            let reply =
                cluster.route_command(wait, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(shard)));
            Ok(i64::from_redis_value(reply.await?)?)
        }
        None => conn.query(&wait).await,
    }
}

#[async_trait]
impl ScriptStore for RedisStore {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        if call.replicas.is_some_and(|ack| ack.timeout() >= self.inner.deadlines.command) {
            // WAIT must answer within the connection's response timeout, or the grant's outcome is lost.
            return Err(LockError::invalid("replica_ack timeout must be shorter than the store's command timeout"));
        }
        let work = async |conn: &mut Pooled| {
            let answer = reply(send(conn, &call, self.inner.deadlines.command).await?)?;
            let acknowledged = match (call.wait_after(&answer), call.route_key()) {
                (Some(ack), Some(key)) => Some(wait_replicas(conn, &ack, key).await?),
                _ => None,
            };
            Ok(Ran::acknowledged(answer, acknowledged))
        };
        // A call that may WAIT gets a connection of its own: the WAIT blocks its connection on the server, and
        // counts that connection's writes only.
        if call.replicas.is_some() {
            self.inner.on_exclusive(&call, work).await
        } else {
            self.inner.on_connection(&call, work).await
        }
    }

    /// Connect timeout plus command timeout: a connection not open yet is opened (or waited for) within the first,
    /// the command (and a `NOSCRIPT` retry) answers within the second, and a caller's pool or a cluster is bounded
    /// by a timer of the store's own.
    fn call_bound(&self) -> Option<Duration> {
        Some(self.inner.deadlines.call())
    }

    fn server(&self) -> Option<&str> {
        self.inner.server.as_deref()
    }

    fn deployment(&self) -> &'static str {
        match &self.inner.pool {
            Pool::Cluster(_) => "cluster",
            Pool::Own(conns) if conns.follows_primary() => "sentinel",
            _ => "single",
        }
    }

    fn topology(&self) -> Topology {
        if matches!(self.inner.pool, Pool::Cluster(_)) {
            Topology::Cluster
        } else {
            Topology::Single
        }
    }

    /// One shared multiplexed connection (the default pool size) sends every command through one ordered queue.
    fn orders_commands(&self) -> bool {
        matches!(&self.inner.pool, Pool::Own(conns) if conns.is_single())
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        Some(&self.inner.hub)
    }
}

//! Where each command gets its connection.
//!
//! Stores this crate builds keep a few redis-rs `MultiplexedConnection`s (one by default) and give every command a
//! clone of one of them, round robin. A multiplexed connection pipelines: the commands of many concurrent tasks
//! share its socket, many per write and per read, as on the raw connection a hand-written client would use. An
//! exclusive checkout per command (what a deadpool of connections does) would allow one command in flight per
//! connection and cost a syscall pair per command on both sides. A connection whose transport failed is dropped
//! from its slot ([`Pooled::discard`]); the next command on that slot opens a new one.
//!
//! Through Sentinel ([`Endpoint::Sentinel`]), a slot's connection is opened to the primary the Sentinels name at
//! that moment, so the first command after a failover (whose old connection broke, or was closed by the Sentinels
//! when they demoted its server) reaches the promoted replica. A connection that answers `READONLY` is on a node
//! that is no longer the primary without having been disconnected (demoted by hand, or the Sentinels' view
//! changed under it): it is dropped as well, so that error reaches a caller once, as a retryable
//! `Unavailable`, and the next command asks the Sentinels again.
//!
//! A `deadpool_redis::Pool` the caller already has is used as it is (exclusive checkout, and its `UNWATCH` + `PING`
//! on every checkout).
//!
//! # Cancel safety
//! A command future may be dropped at any point (a caller's timeout or `select!`), and its connection keeps serving
//! other commands. That is safe because redis-rs's `MultiplexedConnection` is cancel-safe, as its documentation
//! states and as its source (redis 1.8, `aio/multiplexed_connection.rs`) shows: a request is handed whole, with a
//! oneshot for its reply, to the connection's driver task through a channel; the driver writes it and matches
//! replies to requests strictly in order; a reply whose caller has gone is read and dropped, and a request whose
//! caller went away before the driver picked it up is not sent at all. So the next command on the connection reads
//! its own reply, never a stale one.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockError;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind};

use lock_core::backend::rt;

/// Where the connections of a store (and its notification subscriber) go.
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// One server, always the same (boxed: a `Client` is a few hundred bytes, the other variant a pointer).
    Server(Box<Client>),
    /// The primary a set of Sentinels names for a service, asked again for every new connection.
    Sentinel(Arc<Sentinels>),
}

/// A redis-rs Sentinel client and the bound on one lookup.
pub(crate) struct Sentinels {
    /// Behind an async mutex because a lookup needs `&mut` (it caches its connections to the Sentinels); lookups
    /// are rare (one per reconnect), so serializing them costs nothing.
    client: futures_util::lock::Mutex<SentinelClient>,
    service: String,
    lookup_timeout: Duration,
}

impl Sentinels {
    pub(crate) fn new(client: SentinelClient, service: String, lookup_timeout: Duration) -> Self {
        Sentinels { client: futures_util::lock::Mutex::new(client), service, lookup_timeout }
    }

    /// A client for the current primary. redis-rs asks the Sentinels (up to three at once) for the primaries they
    /// consider up, and checks with `ROLE` that the one named really is a primary, so a demoted node is never
    /// returned. Its own timeouts bound each step but add up over several Sentinels; this caps the whole lookup
    /// at the connect timeout.
    async fn primary(&self) -> RedisResult<Client> {
        let lookup = async { self.client.lock().await.async_get_client().await };
        match rt::timeout("connect", self.lookup_timeout, lookup).await {
            Ok(found) => found,
            Err(LockError::Timeout { .. }) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no primary found through the Sentinels in time",
            ))),
            Err(other) => Err(RedisError::from((ErrorKind::Client, "sentinel lookup failed", other.to_string()))),
        }
    }
}

impl Endpoint {
    pub(crate) fn server(client: Client) -> Self {
        Endpoint::Server(Box::new(client))
    }

    /// A client for the server commands should go to now.
    pub(crate) async fn client(&self) -> RedisResult<Client> {
        match self {
            Endpoint::Server(client) => Ok((**client).clone()),
            // Boxed: the lookup is a large future (it may open connections to several Sentinels and the primary),
            // and the callers' futures (the subscriber's task, a slot's reconnect) should not carry it inline.
            Endpoint::Sentinel(sentinels) => Box::pin(sentinels.primary()).await,
        }
    }

    fn follows_primary(&self) -> bool {
        matches!(self, Endpoint::Sentinel(_))
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Server(client) => f.debug_tuple("Server").field(client).finish(),
            Endpoint::Sentinel(s) => f.debug_struct("Sentinel").field("service", &s.service).finish_non_exhaustive(),
        }
    }
}

/// The shared connections of a store built from a URL, or through Sentinel.
pub(crate) struct Multiplexed {
    endpoint: Endpoint,
    config: AsyncConnectionConfig,
    slots: Vec<Slot>,
    next: AtomicUsize,
    /// Bound on getting a connection that is not open yet, as a whole (see [`Multiplexed::get`]).
    connect_timeout: Duration,
    /// Connections for a grant followed by `WAIT` (see [`Exclusive`]), opened on first use.
    exclusive: Option<deadpool::managed::Pool<ServerConnections>>,
}

/// How many grants with a replica `WAIT` one store runs at once; more wait for a connection (within their call's
/// bound). Each holds its connection for at most the `WAIT`'s timeout.
pub(crate) const EXCLUSIVE_CONNECTIONS: usize = 8;

/// Opens connections to a store's server (through Sentinel: its current primary) for [`Exclusive`] use.
pub(crate) struct ServerConnections {
    endpoint: Endpoint,
    config: AsyncConnectionConfig,
}

impl deadpool::managed::Manager for ServerConnections {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        let client = Box::pin(self.endpoint.client()).await?;
        Box::pin(client.get_multiplexed_async_connection_with_config(&self.config)).await
    }

    async fn recycle(&self, _: &mut MultiplexedConnection, _: &deadpool::managed::Metrics) -> RecycleResult {
        // A connection in doubt never comes back (see `Exclusive`); the rest are fine.
        Ok(())
    }
}

/// Opens cluster connections for [`Exclusive`] use.
pub(crate) struct ClusterConnections {
    client: ClusterClient,
}

impl deadpool::managed::Manager for ClusterConnections {
    type Type = ClusterConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<ClusterConnection, RedisError> {
        Box::pin(self.client.get_async_connection()).await
    }

    async fn recycle(&self, _: &mut ClusterConnection, _: &deadpool::managed::Metrics) -> RecycleResult {
        Ok(())
    }
}

type RecycleResult = deadpool::managed::RecycleResult<RedisError>;

/// A pool of at most [`EXCLUSIVE_CONNECTIONS`]; `None` should deadpool refuse to build one (it only refuses
/// timeouts without a runtime, and none are configured), and the grants then share the store's connections.
fn exclusive_pool<M: deadpool::managed::Manager>(manager: M) -> Option<deadpool::managed::Pool<M>> {
    deadpool::managed::Pool::builder(manager).max_size(EXCLUSIVE_CONNECTIONS).build().ok()
}

/// The seed nodes of a Redis Cluster and the TLS settings for every node: what the store's connection and its
/// subscriber's are built from.
#[derive(Clone, Debug)]
pub(crate) struct ClusterNodes {
    seeds: Vec<redis::ConnectionInfo>,
    tls: crate::tls::TlsOptions,
}

impl ClusterNodes {
    pub(crate) fn new(seeds: Vec<redis::ConnectionInfo>, tls: crate::tls::TlsOptions) -> Self {
        ClusterNodes { seeds, tls }
    }

    /// A cluster client builder for these seeds, with the certificates (the seeds' URLs say whether to use TLS; see
    /// [`check_tls_intent`](crate::tls::check_tls_intent) for the rule).
    pub(crate) fn builder(&self) -> lock_core::Result<redis::cluster::ClusterClientBuilder> {
        let tls: Vec<bool> = self.seeds.iter().map(|seed| crate::tls::is_tls(seed.addr())).collect();
        crate::tls::check_tls_intent(&self.tls, &tls)?;
        let builder = redis::cluster::ClusterClientBuilder::new(self.seeds.clone());
        match self.tls.certificates()? {
            #[cfg(any(feature = "tls-rustls", feature = "smol-tls-rustls"))]
            Some(certs) => Ok(builder.certs(certs)),
            #[cfg(all(feature = "tls-native-tls", not(any(feature = "tls-rustls", feature = "smol-tls-rustls"))))]
            Some(_) => Err(LockError::invalid("custom certificates on a cluster need the tls-rustls feature")),
            #[cfg(not(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls")))]
            Some(never) => match never {},
            None => Ok(builder),
        }
    }
}

/// A Redis Cluster: the connection every command shares, and connections for [`Exclusive`] use.
pub(crate) struct ClusterPool {
    shared: ClusterConnection,
    exclusive: Option<deadpool::managed::Pool<ClusterConnections>>,
}

impl ClusterPool {
    pub(crate) fn new(shared: ClusterConnection, client: ClusterClient) -> Self {
        ClusterPool { shared, exclusive: exclusive_pool(ClusterConnections { client }) }
    }
}

#[derive(Default)]
struct Slot {
    conn: Mutex<Option<MultiplexedConnection>>,
    /// Serializes reconnects, so a burst of commands after a failure opens one connection, not one each.
    connecting: futures_util::lock::Mutex<()>,
    /// Commands that timed out since this slot's connection last replied (see [`Multiplexed::timed_out`]).
    timeouts: AtomicUsize,
}

impl Multiplexed {
    /// Whether the connections go to the primary that Sentinels name.
    pub(crate) fn follows_primary(&self) -> bool {
        self.endpoint.follows_primary()
    }

    pub(crate) fn new(
        endpoint: Endpoint,
        config: AsyncConnectionConfig,
        size: usize,
        connect_timeout: Duration,
    ) -> Self {
        let exclusive = exclusive_pool(ServerConnections { endpoint: endpoint.clone(), config: config.clone() });
        Multiplexed {
            endpoint,
            config,
            slots: (0..size.max(1)).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
            connect_timeout,
            exclusive,
        }
    }

    fn cached(slot: &Slot) -> Option<MultiplexedConnection> {
        slot.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn get(&self) -> Result<(MultiplexedConnection, usize), RedisError> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let slot = &self.slots[index];
        if let Some(conn) = Self::cached(slot) {
            return Ok((conn, index));
        }
        // Bounded as a whole by the connect timeout: the wait for another call that is opening this slot's
        // connection, the Sentinel lookup and our own connect. Each has its own bound, but calls queued behind failing
        // connects would add them up; the store promises every call within connect + command timeout
        // (`RedisStore::call_bound`), and the engine sets no timer of its own relying on it.
        let open = async {
            let _turn = slot.connecting.lock().await;
            if let Some(conn) = Self::cached(slot) {
                return Ok::<_, RedisError>(conn);
            }
            // Boxed: opening a connection is a large future, and the fast path above should not carry it.
            let client = Box::pin(self.endpoint.client()).await?;
            let conn = Box::pin(client.get_multiplexed_async_connection_with_config(&self.config)).await?;
            *slot.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
            Ok(conn)
        };
        let conn = match rt::timeout("connect", self.connect_timeout, open).await {
            Ok(opened) => opened?,
            Err(LockError::Timeout { .. }) => {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no connection to the server within the connect timeout",
                )))
            }
            Err(other) => return Err(RedisError::from((ErrorKind::Client, "connect failed", other.to_string()))),
        };
        Ok((conn, index))
    }

    /// Whether every command goes over one connection (and so reaches the server in the order it was issued).
    pub(crate) fn is_single(&self) -> bool {
        self.slots.len() == 1
    }

    fn discard(&self, index: usize) {
        if let Some(slot) = self.slots.get(index) {
            *slot.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
            slot.timeouts.store(0, Ordering::Relaxed);
        }
    }

    /// A command on slot `index` timed out. The connection is kept after one timeout: redis-rs matches replies to
    /// requests in order and drops the late reply, so the connection stays in step, and the commands after it keep
    /// their order (which the early hand-off of [`LockStore::orders_commands`](lock_core::LockStore) relies on;
    /// reconnecting would let a later command overtake an earlier one). A second timeout with no reply in between
    /// means the connection is dead or black-holed: it is dropped, and the next command opens a new one (through
    /// Sentinel, to the primary named then).
    fn timed_out(&self, index: usize) {
        if let Some(slot) = self.slots.get(index) {
            if slot.timeouts.fetch_add(1, Ordering::Relaxed) >= 1 {
                self.discard(index);
            }
        }
    }

    /// Slot `index`'s connection replied.
    fn replied(&self, index: usize) {
        if let Some(slot) = self.slots.get(index) {
            if slot.timeouts.load(Ordering::Relaxed) != 0 {
                slot.timeouts.store(0, Ordering::Relaxed);
            }
        }
    }

    fn status(&self) -> deadpool::Status {
        let open = self.slots.iter().filter(|s| Self::cached(s).is_some()).count();
        deadpool::Status { max_size: self.slots.len(), size: open, available: self.slots.len(), waiting: 0 }
    }
}

/// The connections a store sends its commands on.
#[derive(Clone)]
pub(crate) enum Pool {
    /// Built by this crate from a URL: shared multiplexed connections.
    Own(Arc<Multiplexed>),
    /// The caller's `deadpool_redis` pool.
    #[cfg(feature = "deadpool-redis")]
    Shared(deadpool_redis::Pool),
    /// A Redis Cluster. redis-rs's cluster connection is itself multiplexed over one connection per node and
    /// follows `MOVED`/`ASK` and retries `TRYAGAIN` by itself, so it needs no pool: every command uses a clone.
    Cluster(Arc<ClusterPool>),
}

pub(crate) type PoolError = deadpool::managed::PoolError<RedisError>;

impl Pool {
    /// A connection for one command (for the caller's pool: checked out until the returned value is dropped).
    pub(crate) async fn get(&self) -> Result<Pooled, PoolError> {
        Ok(match self {
            Pool::Own(conns) => {
                let (conn, index) = conns.get().await.map_err(PoolError::Backend)?;
                Pooled::Own(conn, conns.clone(), index)
            }
            // Boxed: deadpool's get future holds the future that opens a connection (tens of KB); inline, it
            // would make every store call's future that large, allocated and moved on every call (measured: a
            // 21.5 KB box per acquire and per release, the client's top cost in `memmove`).
            #[cfg(feature = "deadpool-redis")]
            Pool::Shared(pool) => Pooled::Shared(Box::pin(pool.get()).await?),
            Pool::Cluster(cluster) => Pooled::Cluster(cluster.shared.clone()),
        })
    }

    /// A connection no other command uses until this one is done: for a grant followed by `WAIT`, which blocks its
    /// connection on the server for up to its timeout (on the shared pipelined connection it would hold up every
    /// other command of the store). A caller's pool already checks connections out exclusively.
    pub(crate) async fn get_exclusive(&self) -> Result<Pooled, PoolError> {
        Ok(match self {
            Pool::Own(conns) => match &conns.exclusive {
                Some(exclusive) => Pooled::Exclusive(Exclusive::new(Box::pin(exclusive.get()).await?)),
                None => self.get().await?,
            },
            Pool::Cluster(cluster) => match &cluster.exclusive {
                Some(exclusive) => Pooled::ExclusiveCluster(Exclusive::new(Box::pin(exclusive.get()).await?)),
                None => self.get().await?,
            },
            #[cfg(feature = "deadpool-redis")]
            Pool::Shared(_) => self.get().await?,
        })
    }

    pub(crate) fn status(&self) -> deadpool::Status {
        match self {
            Pool::Own(conns) => conns.status(),
            #[cfg(feature = "deadpool-redis")]
            Pool::Shared(pool) => pool.status(),
            // One shared cluster connection, never exhausted.
            Pool::Cluster(_) => deadpool::Status { max_size: 1, size: 1, available: 1, waiting: 0 },
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Pool::Own(_) => "multiplexed",
            #[cfg(feature = "deadpool-redis")]
            Pool::Shared(_) => "deadpool_redis",
            Pool::Cluster(_) => "cluster",
        };
        f.debug_struct("Pool").field("kind", &kind).field("status", &self.status()).finish()
    }
}

/// A connection checked out for one grant and its `WAIT`. It goes back to its pool only when the work on it ended
/// ([`done`](Self::done)); dropped earlier (the caller was cancelled while the `WAIT` was pending on the server), it
/// is closed instead, so the next grant never queues behind an abandoned `WAIT`.
pub(crate) struct Exclusive<M: deadpool::managed::Manager> {
    conn: Option<deadpool::managed::Object<M>>,
    done: bool,
}

impl<M: deadpool::managed::Manager> Exclusive<M> {
    fn new(conn: deadpool::managed::Object<M>) -> Self {
        Exclusive { conn: Some(conn), done: false }
    }

    fn get(&mut self) -> Option<&mut M::Type> {
        self.conn.as_deref_mut()
    }
}

impl<M: deadpool::managed::Manager> Drop for Exclusive<M> {
    fn drop(&mut self) {
        if let (Some(conn), false) = (self.conn.take(), self.done) {
            drop(deadpool::managed::Object::take(conn));
        }
    }
}

/// The connection one command uses.
pub(crate) enum Pooled {
    Own(MultiplexedConnection, Arc<Multiplexed>, usize),
    #[cfg(feature = "deadpool-redis")]
    Shared(deadpool_redis::Connection),
    Cluster(ClusterConnection),
    Exclusive(Exclusive<ServerConnections>),
    ExclusiveCluster(Exclusive<ClusterConnections>),
}

impl Pooled {
    /// Sends `cmd` and reads its reply.
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Pooled::Own(conn, conns, index) => {
                let reply = cmd.query_async(conn).await;
                if let Err(err) = &reply {
                    if err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) && conns.endpoint.follows_primary() {
                        // This node is no longer the primary: open the next connection to the one the Sentinels
                        // name now (see the module docs).
                        conns.discard(*index);
                    }
                }
                reply
            }
            #[cfg(feature = "deadpool-redis")]
            Pooled::Shared(conn) => cmd.query_async(&mut **conn).await,
            Pooled::Cluster(conn) => cmd.query_async(conn).await,
            Pooled::Exclusive(conn) => match conn.get() {
                Some(conn) => cmd.query_async(conn).await,
                None => Err(closed()),
            },
            Pooled::ExclusiveCluster(conn) => match conn.get() {
                Some(conn) => cmd.query_async(conn).await,
                None => Err(closed()),
            },
        }
    }

    /// The cluster connection, for a command routed by hand.
    pub(crate) fn cluster(&mut self) -> Option<&mut ClusterConnection> {
        match self {
            Pooled::Cluster(conn) => Some(conn),
            Pooled::ExclusiveCluster(conn) => conn.get(),
            _ => None,
        }
    }

    /// The work on this connection ended with a reply: an exclusive connection may serve the next grant.
    pub(crate) fn done(&mut self) {
        match self {
            Pooled::Own(_, conns, index) => conns.replied(*index),
            Pooled::Exclusive(conn) => conn.done = true,
            Pooled::ExclusiveCluster(conn) => conn.done = true,
            #[cfg(feature = "deadpool-redis")]
            Pooled::Shared(_) => {}
            Pooled::Cluster(_) => {}
        }
    }

    /// The work on this connection timed out (see [`Multiplexed::timed_out`] for a store's own connections). A
    /// caller's pooled connection is dropped, as before; an exclusive one is closed (its `WAIT` may be pending).
    pub(crate) fn timed_out(self) {
        match self {
            Pooled::Own(_, conns, index) => conns.timed_out(index),
            other => other.discard(),
        }
    }

    /// Stops using the connection (its transport failed): the next command opens a new one.
    pub(crate) fn discard(self) {
        match self {
            Pooled::Own(_, conns, index) => conns.discard(index),
            #[cfg(feature = "deadpool-redis")]
            Pooled::Shared(conn) => drop(deadpool_redis::Connection::take(conn)),
            // The cluster connection reconnects to a failed node by itself; dropping this clone is enough.
            Pooled::Cluster(conn) => drop(conn),
            // Not marked done: closed on drop.
            Pooled::Exclusive(conn) => drop(conn),
            Pooled::ExclusiveCluster(conn) => drop(conn),
        }
    }
}

fn closed() -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, "connection already closed"))
}

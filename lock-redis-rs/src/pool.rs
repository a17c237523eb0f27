//! Where each command gets its connection: a deadpool pool of redis-rs multiplexed connections.
//!
//! Pools this crate builds use [`Connector`], not `deadpool_redis::Manager`: the latter recycles every connection it
//! hands out with `UNWATCH` + `PING`, one extra round trip per command, which would turn the one-round-trip acquire
//! into two. [`Connector`] pings only a connection that sat unused for [`IDLE_CHECK_AFTER`], and the store drops a
//! connection whose transport failed instead of returning it ([`Pooled::discard`]). A `deadpool_redis::Pool` that
//! the caller already has is used as it is, ping included.
//!
//! # Cancel safety
//! A command future may be dropped at any point (a caller's timeout or `select!`), and its connection then goes back
//! to the pool. That is safe because redis-rs's `MultiplexedConnection` is cancel-safe, as its documentation states
//! and as its source (redis 1.8, `aio/multiplexed_connection.rs`) shows: a request is handed whole, with a oneshot
//! for its reply, to the connection's driver task through a channel; the driver writes it and matches replies to
//! requests strictly in order; a reply whose caller has gone is read and dropped, and a request whose caller went
//! away before the driver picked it up is not sent at all. So the next command on the connection reads its own
//! reply, never a stale one.

use std::fmt;
use std::time::Duration;

use deadpool::managed::{self, Metrics, Object, RecycleResult};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, RedisError, RedisResult};

/// A pooled connection unused for longer than this is pinged before it is handed out; fresher ones are not (a
/// dead one then fails its command once and is dropped, see [`Pooled::discard`]).
pub(crate) const IDLE_CHECK_AFTER: Duration = Duration::from_secs(1);

/// The deadpool manager of the pools this crate builds.
pub(crate) struct Connector {
    client: Client,
    config: AsyncConnectionConfig,
}

impl Connector {
    pub(crate) fn new(client: Client, config: AsyncConnectionConfig) -> Self {
        Connector { client, config }
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector").field("client", &self.client).finish_non_exhaustive()
    }
}

impl managed::Manager for Connector {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        self.client.get_multiplexed_async_connection_with_config(&self.config).await
    }

    async fn recycle(&self, conn: &mut MultiplexedConnection, metrics: &Metrics) -> RecycleResult<RedisError> {
        // `last_used` counts from the last checkout. A connection in steady use skips the round trip.
        if metrics.last_used() >= IDLE_CHECK_AFTER {
            redis::cmd("PING").query_async::<()>(conn).await?;
        }
        Ok(())
    }
}

/// The connections a store sends its commands on.
#[derive(Clone)]
pub(crate) enum Pool {
    /// Built by this crate from a URL.
    Own(managed::Pool<Connector>),
    /// The caller's `deadpool_redis` pool.
    Shared(deadpool_redis::Pool),
    /// A Redis Cluster. redis-rs's cluster connection is itself multiplexed over one connection per node and
    /// follows `MOVED`/`ASK` and retries `TRYAGAIN` by itself, so it needs no pool: every command uses a clone.
    Cluster(ClusterConnection),
}

pub(crate) type PoolError = managed::PoolError<RedisError>;

impl Pool {
    /// Checks a connection out; it goes back when the returned value is dropped.
    pub(crate) async fn get(&self) -> Result<Pooled, PoolError> {
        Ok(match self {
            Pool::Own(pool) => Pooled::Own(pool.get().await?),
            Pool::Shared(pool) => Pooled::Shared(pool.get().await?),
            Pool::Cluster(conn) => Pooled::Cluster(conn.clone()),
        })
    }

    pub(crate) fn status(&self) -> deadpool::Status {
        match self {
            Pool::Own(pool) => pool.status(),
            Pool::Shared(pool) => pool.status(),
            // One shared cluster connection, never exhausted.
            Pool::Cluster(_) => deadpool::Status { max_size: 1, size: 1, available: 1, waiting: 0 },
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Pool::Own(_) => "own",
            Pool::Shared(_) => "deadpool_redis",
            Pool::Cluster(_) => "cluster",
        };
        f.debug_struct("Pool").field("kind", &kind).field("status", &self.status()).finish()
    }
}

/// One checked-out connection.
pub(crate) enum Pooled {
    Own(Object<Connector>),
    Shared(deadpool_redis::Connection),
    Cluster(ClusterConnection),
}

impl Pooled {
    /// Sends `cmd` and reads its reply.
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Pooled::Own(obj) => cmd.query_async(&mut **obj).await,
            Pooled::Shared(conn) => cmd.query_async(&mut **conn).await,
            Pooled::Cluster(conn) => cmd.query_async(conn).await,
        }
    }

    /// Removes the connection from its pool and closes it, instead of handing it out again.
    pub(crate) fn discard(self) {
        match self {
            Pooled::Own(obj) => drop(Object::take(obj)),
            Pooled::Shared(conn) => drop(deadpool_redis::Connection::take(conn)),
            // The cluster connection reconnects to a failed node by itself; dropping this clone is enough.
            Pooled::Cluster(conn) => drop(conn),
        }
    }
}

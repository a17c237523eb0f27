//! [`FredStore`]: lock-core's calls ([`ScriptStore`]) over a fred [`Pool`], and its builder.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fred::bytes::Bytes;
use fred::bytes_utils::Str;
use fred::clients::{Client, ExclusivePool, SubscriberClient, WithOptions};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::{ClientLike, EventInterface, ServerInterface};
use fred::prelude::{Builder, Config, Options, Pool, ReconnectPolicy, ServerConfig, Value};
use fred::types::{ClusterHash, ConnectHandle, CustomCommand, InfoKind};
use lock_core::backend::Command;
use lock_core::backend::{scripts, Call, Ran, ReleaseHub, Reply, ScriptStore, Topology};
use lock_core::{LockError, ReplicaAck, Result};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error;
use crate::subscriber::{apply_subscriptions, deliver_messages, Subscriptions};

/// The bound on one store call unless [`FredStoreBuilder::with_command_timeout`] says otherwise.
///
/// Below lock-core's [`DEFAULT_OPERATION_TIMEOUT`](lock_core::DEFAULT_OPERATION_TIMEOUT), so that with default
/// settings the store's own, more precise error ([`Unavailable`](LockError::Unavailable) when fred knows the
/// connection is down) arrives before the lock's generic timeout.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Clients in a pool the store builds itself. Each fred client is one multiplexed, pipelining connection, and one
/// is what a single-threaded Redis serves best (measured in BENCHMARKS.md: 16 tasks on distinct keys ran 53 k
/// cycles/s with one client, 39 k with four).
pub const DEFAULT_POOL_SIZE: usize = 1;

/// A [`ScriptStore`] (and so a [`LockStore`](lock_core::LockStore)) on one Redis deployment (standalone, Sentinel or Cluster) through a fred [`Pool`].
///
/// Cheap to clone; clones share the pool, the subscriber and the [`ReleaseHub`]. When the last clone is dropped
/// the store's background tasks stop and the subscriber (and a pool the store built itself) disconnect.
///
/// ```no_run
/// use lock_fred::{FredStore, FredStoreBuilder};
/// use std::time::Duration;
///
/// # #[tokio::main]
/// # async fn main() -> lock_fred::lock_core::Result<()> {
/// let quick = FredStore::connect("redis://127.0.0.1:6379").await?;
/// let tuned = FredStoreBuilder::from_url("redis://127.0.0.1:6379")?
///     .with_pool_size(8)
///     .with_command_timeout(Duration::from_millis(300))
///     .connect()
///     .await?;
/// # let _ = (quick, tuned);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FredStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    subscriber: SubscriberClient,
    hub: Arc<ReleaseHub>,
    command_timeout: Duration,
    /// A cluster store: releases go out with `SPUBLISH` and the subscriber uses `SSUBSCRIBE`.
    sharded: bool,
    /// What traces and metrics call the deployment (read once: the client's config is cloned to be read).
    deployment: &'static str,
    /// The server(s), as errors name them (`host:port`; no credential).
    server: Option<String>,
    /// Whether the pool was built here (and is ours to disconnect) or handed in by the caller.
    owns_pool: bool,
    /// Clients for a grant followed by `WAIT` (see [`FredStore::exclusive`]), connected on first use.
    exclusive: tokio::sync::OnceCell<ExclusivePool>,
    connections: Vec<ConnectHandle>,
    tasks: Vec<JoinHandle<()>>,
}

impl FredStore {
    /// Connects a pool of [`DEFAULT_POOL_SIZE`] clients and a subscriber to the server at `url` (any URL fred's
    /// [`Config::from_url`] accepts, including `redis-sentinel://` and `redis-cluster://`).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a URL fred rejects; [`LockError::Unavailable`],
    /// [`LockError::Timeout`] or [`LockError::Auth`] when the first connection fails.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future closes what it opened.
    pub async fn connect(url: &str) -> Result<Self> {
        FredStoreBuilder::from_url(url)?.connect().await
    }

    /// A store over a pool the caller already connected (`init()`ed). The store adds its own subscriber client,
    /// built from the pool's configuration; the pool's settings are left as they are. See
    /// [`FredStoreBuilder::from_pool`] to choose the command timeout.
    ///
    /// # Errors
    /// As [`FredStoreBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future closes the subscriber it opened; the pool is the caller's.
    pub async fn from_pool(pool: Pool) -> Result<Self> {
        FredStoreBuilder::from_pool(pool).connect().await
    }

    /// The pool that runs the lock scripts.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The client that receives release notifications (one per store).
    pub fn subscriber(&self) -> &SubscriberClient {
        &self.inner.subscriber
    }

    /// The bound on each call to the server.
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// A client nothing else uses until the returned value is dropped, for a grant followed by `WAIT`: the `WAIT`
    /// blocks its connection on the server for up to its timeout, and on the store's shared, pipelined clients it
    /// would hold up every other command. The clients (at most [`EXCLUSIVE_CLIENTS`], configured like the pool's)
    /// connect on first use.
    async fn exclusive(&self) -> Result<ExclusiveClient> {
        let timeout = self.inner.command_timeout;
        let pool = self
            .inner
            .exclusive
            .get_or_try_init(|| async {
                let client = self.inner.pool.next();
                let mut builder = Builder::from_config(client.client_config());
                builder.set_performance_config(client.perf_config());
                builder.set_connection_config(client.connection_config().clone());
                if let Some(policy) = client.client_reconnect_policy() {
                    builder.set_policy(policy);
                }
                let pool = builder
                    .build_exclusive_pool(EXCLUSIVE_CLIENTS)
                    .map_err(|err| error::from_fred(err, "connect", timeout))?;
                let connection = pool.init().await.map_err(|err| error::from_fred(err, "connect", timeout))?;
                // The connection tasks end when the pool's clients quit (with the store, see `Drop`).
                drop(connection);
                Ok::<_, LockError>(pool)
            })
            .await?;
        Ok(ExclusiveClient { client: Some(pool.acquire().await), done: false })
    }

    /// Runs `call` on `client` (so that a following `WAIT` covers the same connection), bounded by the command
    /// timeout, retrying what a cluster rejected without running it.
    ///
    /// The bound is a deadline handed down to fred: every command carries the time left as its own timeout (fred's
    /// `timeout` option, which replaces the pool's default), so the timer fred starts for each command is the only
    /// one. A timer of ours around the whole call as well bounded nothing more and cost about 2 % of the client
    /// CPU of a lock cycle (issue 21: 16 tasks on distinct keys, four alternating runs; tokio registers and removes
    /// every timer under its driver's lock).
    async fn send(&self, client: &Client, call: &Call<'_>) -> Result<Value> {
        let after = self.inner.command_timeout;
        let timed_out = || LockError::timeout(call.operation, after);
        let deadline = Deadline::after(after);
        let mut pause = CLUSTER_RETRY_PAUSE;
        loop {
            match send(client, call, &deadline).await {
                // A cluster rejected the call without running it: its keys are split by a slot migration in
                // progress (TRYAGAIN), or the slot's primary is failing over (CLUSTERDOWN). Retrying is safe and
                // the condition is short-lived; the deadline bounds the retries.
                Err(err) if has_code(&err, "TRYAGAIN") || has_code(&err, "CLUSTERDOWN") => {
                    tracing::debug!(operation = call.operation, error = %err, "cluster busy; retrying");
                    let left = deadline.left().ok_or_else(timed_out)?;
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(CLUSTER_RETRY_PAUSE_MAX);
                }
                // fred's timeout leaves the connection in step: its router still reads the reply and discards it.
                Err(err) => return Err(error::not_connected(error::from_call(err, call, after), client)),
                Ok(reply) => return Ok(reply),
            }
        }
    }

    /// `WAIT` on `client`, on a cluster at the shard of the call's key (the grant's connection): fred would send a
    /// keyless `WAIT` to any node, whose replicas say nothing about this grant.
    async fn wait_replicas(&self, client: &Client, call: &Call<'_>, ack: ReplicaAck) -> Result<i64> {
        let timeout_ms = i64::try_from(ack.timeout().as_millis()).unwrap_or(i64::MAX).max(1);
        let on_shard = client
            .with_options(&Options { cluster_hash: call.route_key().map(|key| key.into()), ..Options::default() });
        let after = self.inner.command_timeout.saturating_add(ack.timeout());
        tokio::time::timeout(after, on_shard.wait::<i64>(i64::from(ack.replicas()), timeout_ms))
            .await
            .map_err(|_| LockError::timeout(call.operation, after))?
            .map_err(|err| error::from_call(err, call, after))
    }
}

/// Sends `call` once, each command within the time `deadline` leaves: a plain command, or `EVALSHA` and, after a
/// `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`), the body once with `EVAL`, which also caches it again, so no
/// `NOSCRIPT` reaches the caller even when another flush lands between two calls (a `SCRIPT LOAD` + `EVALSHA`
/// retry could lose that race).
async fn send(client: &Client, call: &Call<'_>, deadline: &Deadline) -> std::result::Result<Value, FredError> {
    let words = Words::of(call);
    match call.command {
        Command::Plain(name) => {
            let command = CustomCommand::new_static(name, ClusterHash::FirstKey, false);
            deadline.bound(client)?.custom::<Value, _>(command, words.slices().map(Value::Bytes).collect()).await
        }
        Command::Script(script) => match script_call(client, deadline, "EVALSHA", script.sha1(), &words).await {
            Err(err) if has_code(&err, "NOSCRIPT") => {
                script_call(client, deadline, "EVAL", script.body(), &words).await
            }
            other => other,
        },
        // A command lock-core added after this backend was written.
        _ => Err(FredError::new(ErrorKind::InvalidCommand, "lock-core asked for a command this backend cannot send")),
    }
}

/// `EVALSHA sha` or `EVAL body` (`name`, `head`) with the call's keys and arguments, as a custom command: fred 10.1's
/// `evalsha` and `eval` on a client with options (`WithOptions`) drop the options (it does not implement the Lua
/// interface, so the call goes to the bare client) and with them the command's timeout
/// (<https://github.com/aembke/fred.rs/issues/353>, open).
async fn script_call(
    client: &Client,
    deadline: &Deadline,
    name: &'static str,
    head: &'static str,
    words: &Words<'_>,
) -> std::result::Result<Value, FredError> {
    // The first key's slot: fred routes a custom command by a slot given as `Custom` only (any other policy hashes
    // the first string argument, here the SHA-1, and the command reaches its node through a redirection, after
    // commands sent later: the order a give-back relies on is lost).
    let route = words.keys.first().map_or(ClusterHash::Random, |key| ClusterHash::from(key.as_bytes()));
    let command = CustomCommand::new_static(name, route, false);
    deadline.bound(client)?.custom::<Value, _>(command, script_args(head, words)?).await
}

/// A script command's arguments: `head` (the SHA-1 or the body), the number of keys, the keys, the arguments.
fn script_args(head: &'static str, words: &Words<'_>) -> std::result::Result<Vec<Value>, FredError> {
    let keys = i64::try_from(words.keys.len())
        .map_err(|_| FredError::new(ErrorKind::InvalidArgument, "more keys than a script takes"))?;
    let mut args = Vec::with_capacity(2 + words.keys.len() + words.args.len());
    args.push(Value::String(Str::from_static(head)));
    args.push(Value::Integer(keys));
    args.extend(words.slices().map(Value::Bytes));
    Ok(args)
}

/// When a store call must have returned (see [`FredStore::send`]).
struct Deadline(Option<Instant>);

impl Deadline {
    /// `after` from now (the builder keeps it within `MAX_WAIT`; one the clock cannot represent is no deadline).
    fn after(after: Duration) -> Self {
        Deadline(Instant::now().checked_add(after))
    }

    /// The time left, `None` once it has passed.
    fn left(&self) -> Option<Duration> {
        match self.0 {
            Some(at) => at.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()),
            None => Some(lock_core::MAX_WAIT),
        }
    }

    /// `client` with the time left as its commands' timeout, or fred's timeout error once none is left.
    fn bound(&self, client: &Client) -> std::result::Result<WithOptions<Client>, FredError> {
        let left = self.left().ok_or_else(|| FredError::new(ErrorKind::Timeout, "the call's deadline passed"))?;
        Ok(client.with_options(&Options { timeout: Some(left), ..Options::default() }))
    }
}

/// A call's keys and arguments copied into one shared buffer, each handed to fred as a slice of it.
///
/// fred takes its arguments by value and clones each one again into the frame it writes. Built one by one from
/// `&str`, each argument cost about three allocations (its buffer, its string, and the promotion of that buffer
/// when fred cloned it); slices of one shared buffer are cloned by a reference count, so a call costs two (the
/// buffer, and its promotion at the first slice) and fred's argument lists.
struct Words<'c> {
    buffer: Bytes,
    keys: &'c [&'c str],
    args: &'c [&'c str],
}

impl<'c> Words<'c> {
    fn of(call: &Call<'c>) -> Self {
        let words = call.keys.iter().chain(call.args);
        let mut buffer = Vec::with_capacity(words.clone().map(|word| word.len()).sum());
        words.for_each(|word| buffer.extend_from_slice(word.as_bytes()));
        Words { buffer: Bytes::from(buffer), keys: call.keys, args: call.args }
    }

    /// Every key, then every argument, as a slice of the buffer.
    fn slices(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.keys.iter().chain(self.args).scan(0, |start, word| {
            let end = *start + word.len();
            let slice = self.buffer.slice(*start..end);
            *start = end;
            Some(slice)
        })
    }
}

/// A fred reply in lock-core's type. fred turns simple strings (`OK`) and bulk strings alike into
/// [`Value::String`]; lock-core reads both the same way.
fn reply(value: Value) -> Result<Reply> {
    Ok(match value {
        Value::Null => Reply::Nil,
        Value::Integer(n) => Reply::Int(n),
        Value::String(text) => Reply::Bulk(text.as_bytes().to_vec()),
        Value::Bytes(bytes) => Reply::Bulk(bytes.to_vec()),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply).collect::<Result<_>>()?),
        other => return Err(LockError::backend(format!("unexpected reply type: {other:?}"))),
    })
}

/// How many grants with a replica `WAIT` one store runs at once; more wait for a client (within their call's
/// bound).
pub const EXCLUSIVE_CLIENTS: usize = 8;

/// A client checked out for one grant and its `WAIT`. Dropped before the work ended (the caller was cancelled
/// while the `WAIT` was pending on the server), it is reconnected before anyone else gets it, so the next grant
/// never queues behind an abandoned `WAIT`.
struct ExclusiveClient {
    client: Option<tokio::sync::OwnedMutexGuard<Client>>,
    done: bool,
}

impl Drop for ExclusiveClient {
    fn drop(&mut self) {
        if let (Some(client), false) = (self.client.take(), self.done) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                // The guard moves into the task: the client stays checked out until it has reconnected.
                runtime.spawn(async move {
                    if let Err(err) = client.force_reconnection().await {
                        tracing::debug!(error = %err, "reconnecting a client whose WAIT was abandoned failed");
                    }
                });
            }
        }
    }
}

/// First pause before retrying a script a cluster rejected as busy (`TRYAGAIN`, `CLUSTERDOWN`).
const CLUSTER_RETRY_PAUSE: Duration = Duration::from_millis(5);
/// Longest pause between such retries.
const CLUSTER_RETRY_PAUSE_MAX: Duration = Duration::from_millis(100);

/// Whether a server error carries `code` (fred keeps the server's message in the details, or in the text).
fn has_code(err: &fred::error::Error, code: &str) -> bool {
    err.details().starts_with(code) || err.to_string().contains(code)
}

#[async_trait]
impl ScriptStore for FredStore {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        if call.replicas.is_some_and(|ack| ack.timeout() >= self.inner.command_timeout) {
            // WAIT must answer within fred's command timeout, or the grant's outcome is lost.
            return Err(LockError::invalid("replica_ack timeout must be shorter than the store's command timeout"));
        }
        // A call that may WAIT gets a client of its own (see `exclusive`): the WAIT blocks its connection on the
        // server, and counts that connection's writes only.
        let mut exclusive = match call.replicas {
            Some(_) => Some(self.exclusive().await?),
            None => None,
        };
        let client = match exclusive.as_ref().and_then(|e| e.client.as_deref()) {
            Some(client) => client,
            None => self.inner.pool.next_connected(),
        };
        let answer = reply(self.send(client, &call).await?)?;
        let acknowledged = match call.wait_after(&answer) {
            Some(ack) => Some(self.wait_replicas(client, &call, ack).await?),
            None => None,
        };
        if let Some(exclusive) = exclusive.as_mut() {
            exclusive.done = true;
        }
        Ok(Ran::acknowledged(answer, acknowledged))
    }

    /// The command timeout: a call without a replica acknowledgement returns within it, a `NOSCRIPT` retry and a
    /// busy cluster's retries included (each command carries the time left as its timeout; fred reconnects in the
    /// background, and a command sent meanwhile waits within that time).
    fn call_bound(&self) -> Option<Duration> {
        Some(self.inner.command_timeout)
    }

    fn deployment(&self) -> &'static str {
        self.inner.deployment
    }

    fn server(&self) -> Option<&str> {
        self.inner.server.as_deref()
    }

    fn topology(&self) -> Topology {
        if self.inner.sharded {
            Topology::Cluster
        } else {
            Topology::Single
        }
    }

    /// A pool of one client (the default) writes every command through that client's one ordered queue.
    fn orders_commands(&self) -> bool {
        self.inner.pool.size() == 1
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        Some(&self.inner.hub)
    }
}

impl fmt::Debug for FredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FredStore")
            .field("pool", &self.inner.pool)
            .field("subscriber", &self.inner.subscriber.id())
            .field("command_timeout", &self.inner.command_timeout)
            .field("hub", &self.inner.hub)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let connections = std::mem::take(&mut self.connections);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to say goodbye on: stop the connection tasks outright.
            connections.iter().for_each(JoinHandle::abort);
            return;
        };
        let subscriber = self.subscriber.clone();
        let pool = self.owns_pool.then(|| self.pool.clone());
        let exclusive = self.exclusive.take();
        let timeout = self.command_timeout;
        runtime.spawn(async move {
            // QUIT lets the server close the connections cleanly and ends fred's reconnect loops; bounded because
            // a dead server never answers.
            let quit = async {
                let _ = subscriber.quit().await;
                if let Some(pool) = pool {
                    let _ = pool.quit().await;
                }
                if let Some(exclusive) = exclusive {
                    let _ = exclusive.quit().await;
                }
            };
            let _ = tokio::time::timeout(timeout, quit).await;
            connections.iter().for_each(JoinHandle::abort);
        });
    }
}

enum Source {
    Config(Box<Config>),
    Builder(Box<Builder>),
    Pool(Pool),
}

/// Builds a [`FredStore`] from a URL, a fred [`Config`] or [`Builder`], or an existing [`Pool`].
///
/// What the builder sets on fred, and why:
///
/// | source | pool | command timeout | reconnect policy | `max_command_attempts` | connect/internal timeouts |
/// |---|---|---|---|---|---|
/// | URL, [`Config`] | built, [`pool_size`](Self::with_pool_size) clients | set | exponential, forever | 1 (cluster: 1 + redirections) | = command timeout |
/// | [`Builder`] | built, [`pool_size`](Self::with_pool_size) clients | set | yours | yours | yours |
/// | [`Pool`] | yours, untouched | bounded by the store only | yours | yours | yours |
///
/// One attempt per command matters for a lock: if fred resends an acquire whose connection broke after the
/// server applied it, the second reply says "held" (by us) and the lock stays taken until its TTL; a resent release
/// reports the lock as already expired. With one attempt the broken call fails as
/// [`Unavailable`](LockError::Unavailable) and lock-core releases by token whatever may have been acquired.
///
/// On a Redis Cluster fred spends one attempt per `MOVED`/`ASK` redirection, so there the store allows
/// `1 + max_redirections` attempts: redirections after a resharding or failover stay invisible, at the price that a
/// command whose connection broke mid-flight may be resent (the liveness cost above, never a double grant).
/// Scripts a cluster rejects without running them (`TRYAGAIN` during a slot migration, `CLUSTERDOWN` during a
/// failover) are retried by the store within the command timeout.
///
/// The subscriber client is always the store's own, built from the pool's configuration, with the command timeout
/// and (when the pool has none) the reconnect policy above.
#[must_use = "a builder does nothing until `connect().await`"]
pub struct FredStoreBuilder {
    source: Source,
    pool_size: usize,
    command_timeout: Duration,
    tls: crate::tls::TlsOptions,
}

impl FredStoreBuilder {
    /// Starts from a URL (see [`Config::from_url`]).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when fred cannot parse the URL, and for a TLS URL (`rediss://`,
    /// `rediss-cluster://`, `rediss-sentinel://`) in a build without the `tls-rustls` or `tls-native-tls` feature:
    /// fred would connect over plain TCP and send the URL's password in clear.
    pub fn from_url(url: &str) -> Result<Self> {
        // Checked first: fred names an internal kind (`RelativeUrlWithoutBase`, `InvalidPort`), and takes a scheme it
        // does not know (`http://`) as plain TCP.
        lock_core::backend::server_url::check(url, &crate::tls::SCHEMES)?;
        crate::tls::refuse_tls_url_without_tls(url, crate::tls::BUILT_WITH_TLS)?;
        let config = Config::from_url(url).map_err(|err| error::from_fred(err, "connect", DEFAULT_COMMAND_TIMEOUT))?;
        Ok(Self::from_config(config))
    }

    /// Starts from a fred [`Config`] (server, credentials, TLS, Sentinel or Cluster), used as given.
    pub fn from_config(config: Config) -> Self {
        Self::with_source(Source::Config(Box::new(config)))
    }

    /// Starts from a Redis Sentinel deployment: the primary that the Sentinels at `sentinels` (host and port of
    /// each) monitor as `service_name`. The same as [`from_config`](Self::from_config) with
    /// [`ServerConfig::new_sentinel`].
    ///
    /// fred asks the first Sentinel it can reach for the primary's address and checks with `ROLE` that it is a
    /// primary, on the first connection and on every reconnect, for the pool's clients and the store's subscriber
    /// alike. After a failover the old connections break (the primary died, or the Sentinels disconnected its
    /// clients when they demoted it); the call in flight fails as [`Unavailable`](LockError::Unavailable) or
    /// [`Timeout`](LockError::Timeout) (retryable), and fred reconnects, with the reconnect policy the table below
    /// describes, to the primary the Sentinels name then. A `READONLY` reply (the node was demoted without
    /// disconnecting its clients) also makes fred reconnect, and reaches the caller once, as `Unavailable`.
    ///
    /// Sentinel authentication is not set here: with the same password on Sentinels and data nodes, put it in a
    /// [`Config`] and use [`from_config`](Self::from_config) (fred then uses it for both), or enable fred's
    /// `sentinel-auth` feature for separate credentials. What Sentinel guarantees for a lock is in the
    /// [crate docs](crate#redis-sentinel).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> lock_fred::lock_core::Result<()> {
    /// let sentinels = [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26379)];
    /// let store = lock_fred::FredStoreBuilder::sentinel("mymaster", sentinels).connect().await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn sentinel<I, H>(service_name: &str, sentinels: I) -> Self
    where
        I: IntoIterator<Item = (H, u16)>,
        H: Into<String>,
    {
        let hosts = sentinels.into_iter().collect();
        Self::from_config(Config { server: ServerConfig::new_sentinel(hosts, service_name), ..Config::default() })
    }

    /// Starts from a fred [`Builder`]. Its performance, connection and reconnect settings are kept, except the
    /// default command timeout, which becomes [`command_timeout`](Self::with_command_timeout).
    pub fn from_builder(builder: Builder) -> Self {
        Self::with_source(Source::Builder(Box::new(builder)))
    }

    /// Starts from a pool the caller built and connected; its settings are not changed.
    /// [`pool_size`](Self::with_pool_size) does not apply.
    pub fn from_pool(pool: Pool) -> Self {
        Self::with_source(Source::Pool(pool))
    }

    fn with_source(source: Source) -> Self {
        FredStoreBuilder {
            source,
            pool_size: DEFAULT_POOL_SIZE,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            tls: crate::tls::TlsOptions::default(),
        }
    }

    /// Sets the number of clients (connections) in a pool the store builds (default [`DEFAULT_POOL_SIZE`]).
    pub fn with_pool_size(mut self, clients: usize) -> Self {
        self.pool_size = clients;
        self
    }

    /// Sets the bound on each call to the server (default [`DEFAULT_COMMAND_TIMEOUT`]).
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Trusts the CA certificate(s) in `pem` for TLS connections instead of the platform's roots (for servers whose
    /// certificate a private CA signed), and connects over TLS. Applies to a URL or [`Config`] source (for a
    /// [`Builder`] or [`Pool`], configure TLS on it). Needs the `tls-rustls` or `tls-native-tls` feature.
    pub fn with_ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca = Some(pem.into());
        self
    }

    /// Presents `cert_pem` (with its private key `key_pem`) to servers that require client certificates (mutual
    /// TLS). As [`ca_certificate`](Self::with_ca_certificate) for where it applies; the key never appears in `Debug`.
    pub fn with_client_certificate(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Connects the pool (unless given one) and the subscriber, and starts the notification tasks.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a zero pool size or command timeout, or a configuration fred rejects;
    /// [`LockError::Unavailable`], [`LockError::Timeout`] or [`LockError::Auth`] when a first connection fails
    /// (fred bounds each connection attempt by its connect timeout).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops the clients it built (their connection tasks end with them).
    pub async fn connect(self) -> Result<FredStore> {
        let server = match &self.source {
            Source::Pool(pool) => server_of(&pool.next().client_config()),
            Source::Builder(builder) => builder.get_config().and_then(server_of),
            Source::Config(config) => server_of(config),
        };
        // Boxed as a trait object: a caller's future carries neither the connecting future nor its deep `Send` proof.
        let connecting: std::pin::Pin<Box<dyn std::future::Future<Output = Result<FredStore>> + Send>> =
            Box::pin(self.connect_unlocated());
        connecting.await.map_err(|err| err.at("connect", server.as_deref()))
    }

    /// [`connect`](Self::connect), its errors not yet naming the server.
    async fn connect_unlocated(self) -> Result<FredStore> {
        let FredStoreBuilder { source, pool_size, command_timeout: timeout, tls } = self;
        if timeout.is_zero() || timeout > lock_core::MAX_WAIT {
            return Err(LockError::invalid(format!("command timeout must be in (0, {:?}]", lock_core::MAX_WAIT)));
        }
        if pool_size == 0 {
            return Err(LockError::invalid("pool size must be at least 1"));
        }
        if tls.is_set() && !matches!(source, Source::Config(_)) {
            return Err(LockError::invalid(
                "TLS certificates apply to a URL or Config source; set them on your Builder or Pool",
            ));
        }
        let mut tls_endpoint = None;
        let mut server = None;
        let mut password_check = None;
        let mut plain_endpoint = None;
        let mut builder = match source {
            Source::Pool(pool) => return start(pool, false, Vec::new(), timeout).await,
            Source::Builder(builder) => *builder,
            Source::Config(mut config) => {
                tls.apply(&mut config)?;
                tls_endpoint = crate::tls::tls_endpoint(&config);
                if let ServerConfig::Centralized { server: one } = &config.server {
                    server = Some(format!("{}:{}", one.host, one.port));
                    if tls_endpoint.is_none() {
                        plain_endpoint = Some((one.host.to_string(), one.port));
                        // fred drops a server's refusal of a password it does not need (`called without any password
                        // configured`) as a warning; redis-rs reports it, and so does this store (a password for a
                        // server without one is most likely the wrong server).
                        if let (None, Some(password)) = (&config.username, &config.password) {
                            password_check = Some((one.host.to_string(), one.port, password.to_string()));
                        }
                    }
                }
                let clustered = matches!(config.server, ServerConfig::Clustered { .. });
                let mut builder = Builder::from_config(*config);
                builder.set_policy(default_policy()).with_connection_config(|c| {
                    // fred counts every MOVED/ASK redirection as another write attempt, so on a cluster one attempt
                    // would turn each redirection (after a resharding or failover) into an error for the caller.
                    // Allow one attempt per redirection there, accepting the rare resend described above.
                    c.max_command_attempts = if clustered { 1 + c.max_redirections } else { 1 };
                    c.connection_timeout = timeout;
                    c.internal_command_timeout = timeout;
                });
                builder
            }
        };
        builder.with_performance_config(|p| p.default_command_timeout = timeout);
        let pool = builder.build_pool(pool_size).map_err(|err| error::from_fred(err, "connect", timeout))?;
        let connected = match pool.init().await {
            Ok(connection) => match password_check {
                Some((host, port, password))
                    if crate::auth::password_unneeded(&host, port, &password, timeout).await =>
                {
                    let _ = tokio::time::timeout(timeout, pool.quit()).await;
                    let server = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
                    Err(LockError::auth(crate::auth::UnneededPassword { server }))
                }
                _ => start(pool, true, vec![connection], timeout).await,
            },
            Err(err) => {
                let _ = tokio::time::timeout(timeout, pool.quit()).await;
                // A reply fred cannot decode as the Redis protocol: the server on that port speaks another.
                match (err.kind(), server) {
                    (fred::error::ErrorKind::Protocol, Some(server)) => {
                        Err(LockError::backend(lock_core::backend::NotRedis { server }))
                    }
                    _ => Err(error::from_fred(err, "connect", timeout)),
                }
            }
        };
        match (connected, tls_endpoint) {
            // A first TLS connection that failed without a TLS error: a server without TLS on that port never
            // answers the handshake, which looked like a retryable timeout.
            (
                Err(err @ (LockError::Timeout { .. } | LockError::Unavailable { .. } | LockError::Backend { .. })),
                Some((host, port)),
            ) => Err(crate::tls::plain_text_server(&host, port, timeout).await.unwrap_or(err)),
            // A first plain-text connection the server dropped: a server speaking TLS there answers a TLS hello.
            (Err(err @ LockError::Unavailable { .. }), None) => match plain_endpoint {
                Some((host, port)) => {
                    Err(lock_core::backend::tls_only_server(&host, port, timeout).await.unwrap_or(err))
                }
                None => Err(err),
            },
            (outcome, _) => outcome,
        }
    }
}

/// The server(s) a configuration names, as `host:port` (comma-separated: a Cluster's seed nodes, the Sentinels),
/// never a credential.
fn server_of(config: &Config) -> Option<String> {
    let hosts = |hosts: &[fred::types::config::Server]| {
        hosts.iter().map(|s| format!("{}:{}", s.host, s.port)).collect::<Vec<_>>().join(",")
    };
    match &config.server {
        ServerConfig::Centralized { server } => Some(format!("{}:{}", server.host, server.port)),
        ServerConfig::Clustered { hosts: seeds, .. } => Some(hosts(seeds)),
        ServerConfig::Sentinel { hosts: sentinels, service_name, .. } => {
            Some(format!("{service_name} via {}", hosts(sentinels)))
        }
        #[allow(unreachable_patterns)] // `Unix` exists only with fred's `unix-sockets` feature
        _ => None,
    }
}

/// Reconnect policy of pools built from a URL or [`Config`], and of a subscriber whose pool has none: retry
/// forever (a lock server that comes back must be usable again), from 10 ms up to 1 s apart.
fn default_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 10, 1_000, 2)
}

/// Connects the store's subscriber next to `pool` and starts the notification tasks.
async fn start(
    pool: Pool,
    owns_pool: bool,
    mut connections: Vec<ConnectHandle>,
    timeout: Duration,
) -> Result<FredStore> {
    // On a cluster, releases are announced on their shard only (see `lock_core::backend::scripts::RELEASE`).
    let sharded = pool.next().is_clustered();
    let deployment = if sharded {
        "cluster"
    } else if pool.next().client_config().server.is_sentinel() {
        "sentinel"
    } else {
        "single"
    };
    let subscriber = subscriber_for(&pool, timeout);
    // Taken before subscribing to anything: a broadcast receiver only sees messages sent after it exists.
    let messages = subscriber.message_rx();
    let checked = async {
        let connection = subscriber.init().await.map_err(|err| error::from_fred(err, "connect", timeout))?;
        connections.push(connection);
        // A server too old for the scripts is a clear error now rather than a script error at the first lock.
        let info = tokio::time::timeout(timeout, pool.next().info::<String>(Some(InfoKind::Server)))
            .await
            .map_err(|_| LockError::timeout("connect", timeout))?
            .map_err(|err| error::from_fred(err, "connect", timeout))?;
        scripts::require_version(&info, sharded)
    };
    if let Err(err) = checked.await {
        if owns_pool {
            let _ = tokio::time::timeout(timeout, pool.quit()).await;
        }
        let _ = tokio::time::timeout(timeout, subscriber.quit()).await;
        connections.iter().for_each(JoinHandle::abort);
        return Err(err);
    }
    let (ops, requests) = mpsc::unbounded_channel();
    let hub = ReleaseHub::new(Subscriptions::new(ops, timeout));
    // Plain tokio tasks (fred runs only on tokio anyway), aborted when the store's last clone drops.
    let tasks = vec![
        tokio::spawn(apply_subscriptions(subscriber.clone(), requests, sharded)),
        tokio::spawn(deliver_messages(messages, hub.clone())),
    ];
    let server = server_of(&pool.next().client_config());
    Ok(FredStore {
        inner: Arc::new(Inner {
            pool,
            subscriber,
            hub,
            command_timeout: timeout,
            sharded,
            deployment,
            server,
            owns_pool,
            exclusive: tokio::sync::OnceCell::new(),
            connections,
            tasks,
        }),
    })
}

/// The store's own subscriber, configured like the pool's clients except: it fails fast on its first connection
/// (so `connect` reports a server it cannot reach instead of waiting), none of its timeouts exceeds the command
/// timeout, and it reconnects even when the pool was given no policy.
fn subscriber_for(pool: &Pool, timeout: Duration) -> SubscriberClient {
    let client = pool.next();
    let mut config = client.client_config();
    config.fail_fast = true;
    let mut performance = client.perf_config();
    performance.default_command_timeout = timeout;
    let mut connection = client.connection_config().clone();
    connection.connection_timeout = connection.connection_timeout.min(timeout);
    connection.internal_command_timeout = connection.internal_command_timeout.min(timeout);
    let policy = client.client_reconnect_policy().unwrap_or_else(default_policy);
    SubscriberClient::new(config, Some(performance), Some(connection), Some(policy))
}

impl fmt::Debug for FredStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Config(_) => "config",
            Source::Builder(_) => "builder",
            Source::Pool(_) => "pool",
        };
        f.debug_struct("FredStoreBuilder")
            .field("source", &source)
            .field("pool_size", &self.pool_size)
            .field("command_timeout", &self.command_timeout)
            .field("tls", &self.tls)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_calls_keys_then_its_arguments_byte_for_byte() {
        let keys = ["wlp:{ré}", ""];
        let args = ["tok€n", "", "10000"];
        let call = Call::plain("acquire", "SET", &keys, &args);
        let words = Words::of(&call);
        let as_text = |bytes: Bytes| String::from_utf8(bytes.to_vec()).unwrap();
        let sent: Vec<String> = script_args("sha", &words)
            .unwrap()
            .into_iter()
            .map(|value| match value {
                Value::Bytes(bytes) => as_text(bytes),
                Value::String(text) => text.to_string(),
                Value::Integer(n) => n.to_string(),
                other => panic!("an argument sent as {other:?}"),
            })
            .collect();
        let expected = ["sha", "2"].into_iter().chain(keys).chain(args).collect::<Vec<_>>();
        assert_eq!(sent, expected);
        let plain: Vec<String> = words.slices().map(as_text).collect();
        assert_eq!(plain, keys.iter().chain(&args).copied().collect::<Vec<_>>());
    }
}

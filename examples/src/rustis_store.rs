//! A backend over a third Redis client, [rustis](https://docs.rs/rustis), written as a backend author would: from
//! the docs of [`ScriptStore`] and `lock-testkit` alone. It is the proof that the seam asks nothing else: with
//! these ~250 lines every primitive of lock-core runs on rustis, and `examples/tests/rustis_conformance.rs` passes
//! the whole conformance suite on a real `redis-server`. One server (or a primary): no Cluster routing, no TLS.
//!
//! ```no_run
//! use examples::rustis_store::RustisStore;
//! use lock_core::{Lock, LockOptions};
//! use std::time::Duration;
//!
//! // `url` names your server; the tests pass the one `lock_testkit::RedisServer` started on a free port.
//! async fn report(url: &str) -> lock_core::Result<()> {
//! let lock = Lock::new(RustisStore::connect(url).await?);
//! let guard = lock.acquire("reports/daily", &LockOptions::new(Duration::from_secs(10))).await?;
//! guard.release().await?;
//! Ok(())
//! }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use lock_core::backend::server_error::ServerErrorKind;
use lock_core::backend::{Call, Confirmation, Ran, ReleaseHub, Reply, ScriptStore, SubscriptionControl};
use lock_core::backend::{Command, NotRedis};
use lock_core::{LockError, Result};
use rustis::client::{Client, Config, PubSubSplitSink, ServerConfig};
use rustis::resp::{cmd, CommandBuilder, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long one call (or one subscription) may take before it is reported as [`LockError::Timeout`].
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// A [`ScriptStore`] over one rustis client (multiplexed: it keeps one caller's commands in order on one
/// connection), with a second client for release notifications.
pub struct RustisStore {
    client: Client,
    hub: Arc<ReleaseHub>,
    /// The subscriber's two tasks, stopped with the store.
    tasks: Vec<JoinHandle<()>>,
    /// `host:port`, as errors name the server.
    server: String,
}

impl RustisStore {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`).
    ///
    /// # Errors
    /// [`LockError::Unavailable`] when the server cannot be reached, [`LockError::Auth`] when it refuses the
    /// credentials, [`LockError::Timeout`] after 2 s.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped connect leaves nothing behind.
    pub async fn connect(url: &str) -> Result<Self> {
        // rustis's own parse errors name no part of the URL; lock-core's check names the scheme, host or port.
        lock_core::backend::server_url::check(url, &["redis"])?;
        let config: Config = url.parse().map_err(|err| LockError::invalid(format!("the server URL: {err}")))?;
        let ServerConfig::Standalone { host, port } = config.server.clone() else {
            return Err(LockError::invalid("this example backend connects to one server (redis://host:port)"));
        };
        let server = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        // Boxed: a caller's future does not carry the connecting future's whole state.
        let connecting: std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self>> + Send>> =
            Box::pin(Self::connect_unlocated(config, host, port, server.clone()));
        connecting.await.map_err(|err| err.at("connect", Some(&server)))
    }

    /// [`connect`](Self::connect), its errors not yet naming the server.
    async fn connect_unlocated(config: Config, host: String, port: u16, server: String) -> Result<Self> {
        let password = config.password.clone().filter(|_| config.username.is_none());
        let client = match bounded("connect", Client::connect(config.clone())).await {
            Ok(client) => client,
            // A first reply that is not RESP (an HTTP server on that port, say): one line saying so.
            Err(LockError::Backend { source, .. }) if source.to_string().starts_with("client error: protocol") => {
                return Err(LockError::backend(NotRedis { server }));
            }
            // A plain-text connection the server dropped: a server speaking TLS there answers a TLS hello.
            Err(err @ LockError::Unavailable { .. }) => {
                return Err(lock_core::backend::tls_only_server(&host, port, CALL_TIMEOUT).await.unwrap_or(err));
            }
            Err(err) => return Err(err),
        };
        // A password the server does not need is most likely the wrong server: the other backends say `Auth`.
        if let Some(password) = password {
            let auth = cmd("AUTH").arg(password);
            if let Ok(Err(err)) = tokio::time::timeout(CALL_TIMEOUT, client.send::<Value>(auth, None)).await {
                let message = err.to_string();
                if message.contains("called without any password configured") {
                    return Err(LockError::auth(UnneededPassword { server }));
                }
            }
        }
        let subscriber = bounded("connect", Client::connect(config)).await?;
        let (sink, mut messages) = subscriber.create_pub_sub().split();
        let (requests, queue) = mpsc::unbounded_channel();
        let hub = ReleaseHub::new(Subscriptions { requests });
        let deliver = {
            let hub = hub.clone();
            tokio::spawn(async move {
                while let Some(Ok(message)) = messages.next().await {
                    hub.deliver(&String::from_utf8_lossy(message.channel()), message.payload());
                }
            })
        };
        let tasks = vec![tokio::spawn(apply(sink, queue)), deliver];
        Ok(RustisStore { client, hub, tasks, server })
    }
}

/// The source of the [`LockError::Auth`] for a password sent to a server that has none.
#[derive(Debug)]
struct UnneededPassword {
    server: String,
}

impl fmt::Display for UnneededPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the server at {} has no password, and this one was configured: is it the right server?", self.server)
    }
}

impl std::error::Error for UnneededPassword {}

impl Drop for RustisStore {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl fmt::Debug for RustisStore {
    // The client's configuration holds the password: none of it is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RustisStore").finish_non_exhaustive()
    }
}

#[async_trait]
impl ScriptStore for RustisStore {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        let reply = match call.command {
            Command::Script(script) => {
                let mut sent = self.send(command("EVALSHA", script.sha1(), &call), &call).await?;
                if matches!(&sent, Err(err) if ServerErrorKind::of(&err.to_string()) == ServerErrorKind::NoScript) {
                    // The cache lost the script (a restart, `SCRIPT FLUSH`): send the body once.
                    sent = self.send(command("EVAL", script.body(), &call), &call).await?;
                }
                reply(sent.map_err(|err| mapped(err, &call))?, &call)?
            }
            Command::Plain(name) => {
                let plain = call.keys.iter().chain(call.args).fold(cmd(name), |c, arg| c.arg(*arg));
                reply(self.send(plain, &call).await?.map_err(|err| mapped(err, &call))?, &call)?
            }
            // Refused before any I/O: the engine then knows nothing was applied.
            other => return Err(LockError::invalid(format!("a command this backend does not send: {other:?}"))),
        };
        // `WAIT` on the connection that wrote the grant. This client multiplexes one connection, so the count
        // covers our write (and maybe others', which only makes it wait for more).
        let replicas = match call.wait_after(&reply) {
            Some(ack) => {
                let timeout_ms = u64::try_from(ack.timeout().as_millis()).unwrap_or(u64::MAX);
                let wait = cmd("WAIT").arg(ack.replicas()).arg(timeout_ms);
                let bound = ack.timeout().saturating_add(CALL_TIMEOUT);
                let counted = tokio::time::timeout(bound, self.client.send::<Value>(wait, None)).await;
                match counted.map_err(|_| LockError::timeout(call.operation, bound))? {
                    Ok(Value::Integer(count)) => Some(count),
                    Ok(other) => return Err(LockError::backend(format!("unexpected reply to WAIT: {other:?}"))),
                    Err(err) => return Err(mapped(err, &call)),
                }
            }
            None => None,
        };
        Ok(Ran::acknowledged(reply, replicas))
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        Some(&self.hub)
    }

    fn server(&self) -> Option<&str> {
        Some(&self.server)
    }

    fn orders_commands(&self) -> bool {
        // One multiplexed connection: commands reach the server in the order they were sent.
        true
    }

    fn call_bound(&self) -> Option<Duration> {
        Some(CALL_TIMEOUT)
    }
}

impl RustisStore {
    /// Sends one command, bounded: the client's answer, or the timeout.
    async fn send(&self, command: CommandBuilder, call: &Call<'_>) -> Result<rustis::Result<Value>> {
        let sent = tokio::time::timeout(CALL_TIMEOUT, self.client.send::<Value>(command, None)).await;
        sent.map_err(|_| LockError::timeout(call.operation, CALL_TIMEOUT))
    }
}

/// `EVALSHA sha …` or `EVAL body …`: `numkeys`, the keys, then the arguments.
fn command(name: &'static str, script: &str, call: &Call<'_>) -> CommandBuilder {
    let head = cmd(name).arg(script).arg(call.keys.len());
    let with_keys = call.keys.iter().fold(head, |c, key| c.key(*key));
    call.args.iter().fold(with_keys, |c, arg| c.arg(*arg))
}

/// A rustis value as lock-core's reply (RESP3 types folded into RESP2's, as a script's reply reads in either).
fn reply(value: Value, call: &Call<'_>) -> Result<Reply> {
    Ok(match value {
        Value::Null => Reply::Nil,
        Value::Integer(n) => Reply::Int(n),
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Double(d) => Reply::Bulk(d.to_string().into_bytes()),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::SimpleString(status) => Reply::Status(status),
        Value::Array(items) | Value::Set(items) | Value::Push(items) => {
            Reply::Array(items.into_iter().map(|item| reply(item, call)).collect::<Result<_>>()?)
        }
        Value::Map(pairs) => {
            Reply::Array(pairs.into_iter().flat_map(|(k, v)| [reply(k, call), reply(v, call)]).collect::<Result<_>>()?)
        }
        Value::Error(err) => {
            let message = err.to_string();
            return Err(ServerErrorKind::of(&message).into_lock_error(&message, Some(call), Box::new(err)));
        }
    })
}

/// A rustis error as lock-core's: the server's replies through lock-core's one classification, the rest by what
/// the client says happened.
fn mapped(err: rustis::Error, call: &Call<'_>) -> LockError {
    use rustis::ErrorKind;
    match err.kind() {
        ErrorKind::Redis(_) => {
            let message = err.to_string();
            ServerErrorKind::of(&message).into_lock_error(&message, Some(call), Box::new(err))
        }
        // The connection is gone (or never answered): the server may come back, as with the other backends.
        ErrorKind::IO(_) | ErrorKind::Timeout(_) | ErrorKind::DisconnectedByPeer => LockError::unavailable(err),
        _ => LockError::backend(err),
    }
}

/// Bounds a connect by [`CALL_TIMEOUT`].
async fn bounded<T>(operation: &'static str, fut: impl std::future::Future<Output = rustis::Result<T>>) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Err(_) => Err(LockError::timeout(operation, CALL_TIMEOUT)),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => {
            let message = err.to_string();
            Err(match ServerErrorKind::of(&message) {
                ServerErrorKind::Other if matches!(err.kind(), rustis::ErrorKind::Client(_)) => LockError::backend(err),
                ServerErrorKind::Other => LockError::unavailable(err),
                kind => kind.into_lock_error(&message, None, Box::new(err)),
            })
        }
    }
}

/// A request to the task that owns the subscriptions.
enum Request {
    Subscribe(String, oneshot::Sender<Result<()>>),
    Unsubscribe(String),
}

/// The hub's handle on the subscriber: requests queue to one task, which applies them in the hub's order.
#[derive(Debug)]
struct Subscriptions {
    requests: mpsc::UnboundedSender<Request>,
}

impl SubscriptionControl for Subscriptions {
    fn subscribe(&self, channel: &str) -> Confirmation {
        let (done, confirmed) = oneshot::channel();
        let queued = self.requests.send(Request::Subscribe(channel.to_owned(), done));
        Box::pin(async move {
            let gone = || LockError::unavailable("the store's subscriber has stopped");
            queued.map_err(|_| gone())?;
            match tokio::time::timeout(CALL_TIMEOUT, confirmed).await {
                Err(_) => Err(LockError::timeout("subscribe", CALL_TIMEOUT)),
                Ok(confirmed) => confirmed.map_err(|_| gone())?,
            }
        })
    }

    fn unsubscribe(&self, channel: &str) {
        // Fails only once the store (and its subscriber) is gone.
        let _ = self.requests.send(Request::Unsubscribe(channel.to_owned()));
    }
}

/// Applies the hub's requests one at a time, in order (rustis resubscribes them after a reconnect).
async fn apply(mut sink: PubSubSplitSink, mut queue: mpsc::UnboundedReceiver<Request>) {
    while let Some(request) = queue.recv().await {
        match request {
            Request::Subscribe(channel, done) => {
                let subscribed = sink.subscribe(channel.as_str()).await.map_err(LockError::unavailable);
                // The waiter may have stopped waiting for the confirmation; that is fine.
                let _ = done.send(subscribed);
            }
            Request::Unsubscribe(channel) => {
                if let Err(err) = sink.unsubscribe(channel.as_str()).await {
                    tracing::debug!(channel, error = %err, "unsubscribe failed");
                }
            }
        }
    }
}

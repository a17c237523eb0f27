//! Release notifications: one pub/sub connection per store, owned by one background task.
//!
//! The [`ReleaseHub`] asks for channels through [`SubscriptionControl`]; the requests go to the task over one
//! ordered queue, so a subscribe and a later unsubscribe of the same channel reach the server in that order. The
//! task passes every message to [`ReleaseHub::deliver`]. Notifications are only hints (lock-core's waiters also
//! poll), so nothing here ever fails an acquire: errors are logged and, at worst, waiters poll until the task has
//! reconnected and resubscribed.
//!
//! Through Sentinel, every (re)connection asks the Sentinels for the current primary rather than subscribing on
//! any node of the deployment. A replica would receive the releases too (`PUBLISH` is replicated), but only while
//! its replication link is up, and with its lag; on the primary a subscriber hears a release as soon as it
//! happens. A failover breaks the subscriber's connection (its server died, or the Sentinels disconnected the
//! clients of the node they demoted), and the reconnect finds the promoted replica.
//!
//! On Redis Cluster the releases are announced with `SPUBLISH` (see [`lock_core::backend::scripts::RELEASE`] for why) and
//! heard through a second redis-rs cluster connection (RESP3) that `SSUBSCRIBE`s each channel on the shard that owns
//! its slot; redis-rs routes those subscriptions, follows the slot map and resubscribes after a reconnect by
//! itself, and hands every message to [`ReleaseHub::deliver`] from its connection driver.
//!
//! The task starts with the first subscription (a store whose locks never wait opens no pub/sub connection) and
//! lives inside the hub, which lives inside the store: dropping the last clone of the store cancels it.

use std::fmt;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use futures_channel::{mpsc, oneshot};
use futures_util::future::{self, Either};
use futures_util::stream::{self, StreamExt};
use lock_core::backend::{spawn_background, BackgroundTask, Confirmation, ReleaseHub, SubscriptionControl};
use lock_core::{LockError, Result};
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};

use crate::error::{self, Deadlines};
use crate::pool::{ClusterNodes, Endpoint};
use lock_core::backend::rt;

/// First pause before reconnecting a lost subscriber connection; doubles on each failure up to the cap.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Longest pause between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

enum Request {
    Subscribe(String, oneshot::Sender<Result<()>>),
    Unsubscribe(String),
}

#[derive(Default)]
struct State {
    requests: Option<mpsc::UnboundedSender<Request>>,
    task: Option<BackgroundTask>,
}

/// Where a subscriber listens.
#[derive(Clone, Debug)]
enum Target {
    /// One server (or the primary Sentinel names): classic `SUBSCRIBE` on one pub/sub connection.
    Node(Endpoint),
    /// A Redis Cluster reached through these seed nodes: `SSUBSCRIBE` per channel on its shard.
    Shards(ClusterNodes),
}

/// The [`SubscriptionControl`] of a [`RedisStore`](crate::RedisStore)'s hub.
pub(crate) struct Subscriber {
    target: Target,
    deadlines: Deadlines,
    /// The hub this control belongs to, for the task (weak: the hub owns this control, which owns the task).
    hub: Arc<OnceLock<Weak<ReleaseHub>>>,
    state: Mutex<State>,
}

impl Subscriber {
    /// A release hub whose subscriptions go over one pub/sub connection to `endpoint`'s server.
    pub(crate) fn hub(endpoint: Endpoint, deadlines: Deadlines) -> Arc<ReleaseHub> {
        Self::hub_on(Target::Node(endpoint), deadlines)
    }

    /// A release hub for a Redis Cluster: sharded subscriptions over a cluster connection to `nodes`.
    pub(crate) fn sharded_hub(nodes: ClusterNodes, deadlines: Deadlines) -> Arc<ReleaseHub> {
        Self::hub_on(Target::Shards(nodes), deadlines)
    }

    fn hub_on(target: Target, deadlines: Deadlines) -> Arc<ReleaseHub> {
        let slot = Arc::new(OnceLock::new());
        let hub = ReleaseHub::new(Subscriber { target, deadlines, hub: slot.clone(), state: Mutex::default() });
        // Set once, right here: nothing can have read the slot yet.
        let _ = slot.set(Arc::downgrade(&hub));
        hub
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `request` for the task; with `start`, starts the task first when none is running.
    fn send(&self, request: Request, start: bool) -> Result<()> {
        let mut state = self.state();
        let request = match &state.requests {
            Some(queue) => match queue.unbounded_send(request) {
                Ok(()) => return Ok(()),
                // The task is gone (its runtime shut down, or it found none to sleep on): start another here.
                Err(err) => err.into_inner(),
            },
            None => request,
        };
        if !start {
            return Ok(());
        }
        let (queue, requests) = mpsc::unbounded();
        let hub = self.hub.get().cloned().unwrap_or_default();
        let task = match &self.target {
            Target::Node(endpoint) => spawn_background(run(endpoint.clone(), hub, requests, self.deadlines)),
            Target::Shards(nodes) => spawn_background(run_sharded(nodes.clone(), hub, requests, self.deadlines)),
        }
        .ok_or(LockError::NoRuntime("release notifications"))?;
        queue.unbounded_send(request).map_err(|_| LockError::unavailable("release subscriber stopped"))?;
        state.requests = Some(queue);
        state.task = Some(task);
        Ok(())
    }
}

impl fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber")
            .field("target", &self.target)
            .field("running", &self.state().task.is_some())
            .finish()
    }
}

impl SubscriptionControl for Subscriber {
    /// The cluster connection resubscribes by itself after a failover, on its own schedule (the subscription of an
    /// idle channel can stay on the old node for seconds); a new wait asks for it again.
    fn renew_on_reuse(&self) -> bool {
        matches!(self.target, Target::Shards(_))
    }

    fn subscribe(&self, channel: &str) -> Confirmation {
        let (done, confirmed) = oneshot::channel();
        let queued = self.send(Request::Subscribe(channel.to_owned(), done), true);
        // The task answers within its own bounds (connect, then one command); this covers the rest.
        let bound = self.deadlines.call();
        Box::pin(async move {
            queued?;
            match rt::timeout("subscribe", bound, confirmed).await? {
                Ok(result) => result,
                Err(oneshot::Canceled) => Err(LockError::unavailable("release subscriber stopped")),
            }
        })
    }

    fn unsubscribe(&self, channel: &str) {
        // Without a running task there is no subscription to end.
        if let Err(err) = self.send(Request::Unsubscribe(channel.to_owned()), false) {
            tracing::debug!(channel, error = %err, "unsubscribe not sent");
        }
    }
}

/// The task: (re)connect, resubscribe, serve requests and messages; back off after each failure.
async fn run(endpoint: Endpoint, hub: Weak<ReleaseHub>, mut requests: mpsc::UnboundedReceiver<Request>, d: Deadlines) {
    let mut backoff = RECONNECT_MIN;
    // Releases can only have been missed once a connection was lost (see `open`).
    let mut reconnecting = false;
    loop {
        match open(&endpoint, &hub, d, reconnecting).await {
            Ok((sink, messages)) => {
                backoff = RECONNECT_MIN;
                if reconnecting {
                    lock_core::telemetry::subscriber_reconnected::<crate::RedisStore>();
                }
                reconnecting = true;
                match serve(sink, messages, &hub, &mut requests, d).await {
                    Exit::StoreGone => return,
                    Exit::Lost(err) => tracing::warn!(error = %err, "release subscriber disconnected; waiters poll"),
                }
            }
            Err(err) => tracing::debug!(error = %err, ?backoff, "release subscriber cannot connect; retrying"),
        }
        if !back_off(&mut backoff, &mut requests).await {
            return;
        }
    }
}

/// The task of a cluster store: connect (retrying with backoff), then apply the requests in order. The cluster
/// connection reconnects, follows slot moves and resubscribes by itself, so this task never reconnects it.
async fn run_sharded(
    nodes: ClusterNodes,
    hub: Weak<ReleaseHub>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    d: Deadlines,
) {
    let mut backoff = RECONNECT_MIN;
    let mut retried = false;
    let mut conn = loop {
        match open_sharded(&nodes, &hub, d, retried).await {
            Ok(conn) => break conn,
            Err(err) => tracing::debug!(error = %err, ?backoff, "release subscriber cannot connect; retrying"),
        }
        if !back_off(&mut backoff, &mut requests).await {
            return;
        }
        retried = true;
    };
    while let Some(request) = requests.next().await {
        match request {
            Request::Subscribe(channel, done) => {
                let result = confirm("subscribe", d, conn.ssubscribe(&channel)).await;
                if let Err(err) = &result {
                    tracing::debug!(channel, error = %err, "sharded subscribe failed; waiters poll");
                }
                let _ = done.send(result);
            }
            Request::Unsubscribe(channel) => {
                if let Err(err) = confirm("unsubscribe", d, conn.sunsubscribe(&channel)).await {
                    tracing::debug!(channel, error = %err, "sharded unsubscribe failed");
                }
            }
        }
    }
}

/// Opens the subscriber's cluster connection (RESP3, which sharded subscriptions need) and subscribes to every
/// channel that has waiters, within the connect deadline; with `missed` (earlier tries failed), wakes one waiter
/// per channel as `open` does.
async fn open_sharded(
    nodes: &ClusterNodes,
    hub: &Weak<ReleaseHub>,
    d: Deadlines,
    missed: bool,
) -> Result<ClusterConnection> {
    let listener = hub.clone();
    let client = nodes
        .builder()?
        .use_protocol(redis::ProtocolVersion::RESP3)
        .connection_timeout(d.connect)
        .response_timeout(d.command)
        .push_sender(move |push: PushInfo| {
            deliver_sharded(&listener, push);
            Ok::<(), std::convert::Infallible>(())
        })
        .build()
        .map_err(|err| error::from_redis(err, "connect", None, d.connect))?;
    let connect = async {
        // Boxed: opening a cluster connection is a large future.
        let mut conn = Box::pin(client.get_async_connection()).await?;
        let channels = hub.upgrade().map(|hub| hub.watched_channels()).unwrap_or_default();
        // One at a time: the channels of one SSUBSCRIBE must share a slot.
        for channel in &channels {
            conn.ssubscribe(channel).await?;
        }
        Ok((conn, channels))
    };
    let (conn, channels) = rt::timeout("connect", d.call(), connect)
        .await?
        .map_err(|err| error::from_redis(err, "connect", None, d.connect))?;
    // As in `open`: a release announced before these subscriptions is lost, so one waiter per channel polls now.
    if let Some(hub) = hub.upgrade().filter(|_| missed) {
        for channel in &channels {
            hub.wake_one(channel);
        }
    }
    Ok(conn)
}

/// Hands a sharded message (`smessage channel payload`) to the hub; other pushes (subscription confirmations) carry
/// nothing for it.
fn deliver_sharded(hub: &Weak<ReleaseHub>, push: PushInfo) {
    if push.kind != PushKind::SMessage {
        return;
    }
    if let ([Value::BulkString(channel), Value::BulkString(payload)], Some(hub)) = (push.data.as_slice(), hub.upgrade())
    {
        if let Ok(channel) = std::str::from_utf8(channel) {
            hub.deliver(channel, payload);
        }
    }
}

/// Connects (through Sentinel: to the primary named now) and subscribes to every channel that has waiters, within
/// the connect deadline. With `missed` (a connection was lost before), wakes one waiter per channel.
async fn open(
    endpoint: &Endpoint,
    hub: &Weak<ReleaseHub>,
    d: Deadlines,
    missed: bool,
) -> Result<(PubSubSink, PubSubStream)> {
    let connect = async {
        let (mut sink, messages) = endpoint.client().await?.get_async_pubsub().await?.split();
        let channels = hub.upgrade().map(|hub| hub.watched_channels()).unwrap_or_default();
        if !channels.is_empty() {
            sink.subscribe(&channels).await?;
            tracing::debug!(channels = channels.len(), "release subscriber resubscribed");
        }
        Ok((sink, messages, channels))
    };
    let (sink, messages, channels) = rt::timeout("connect", d.connect, connect)
        .await?
        .map_err(|err| error::from_redis(err, "connect", None, d.connect))?;
    // A release published while we were away is lost: let one waiter per channel poll now rather than at its
    // safety poll. On the first connection nothing was missed (each waiter polls once right after subscribing),
    // and a wake-up then would only cost a waiter a try.
    if let Some(hub) = hub.upgrade().filter(|_| missed) {
        for channel in &channels {
            hub.wake_one(channel);
        }
    }
    Ok((sink, messages))
}

enum Exit {
    /// The store (and its hub) is gone: the task ends.
    StoreGone,
    /// The connection failed: reconnect.
    Lost(LockError),
}

enum Event {
    Message(redis::Msg),
    Closed,
    Request(Request),
    StoreGone,
}

/// Serves one connection until it fails or the store is gone.
async fn serve(
    mut sink: PubSubSink,
    messages: PubSubStream,
    hub: &Weak<ReleaseHub>,
    requests: &mut mpsc::UnboundedReceiver<Request>,
    d: Deadlines,
) -> Exit {
    let messages = messages.map(Event::Message).chain(stream::once(future::ready(Event::Closed)));
    let requests = requests.by_ref().map(Event::Request).chain(stream::once(future::ready(Event::StoreGone)));
    let mut events = stream::select(messages, requests);
    // While a (un)subscribe awaits its confirmation, messages wait in redis-rs's unbounded buffer.
    while let Some(event) = events.next().await {
        let failure = match event {
            Event::Message(msg) => match hub.upgrade() {
                Some(hub) => {
                    hub.deliver(msg.get_channel_name(), msg.get_payload_bytes());
                    None
                }
                None => return Exit::StoreGone,
            },
            Event::Request(Request::Subscribe(channel, done)) => {
                let result = confirm("subscribe", d, sink.subscribe(&channel)).await;
                let failure = result.as_ref().err().map(ToString::to_string);
                // The waiter may have given up already; it polls either way.
                let _ = done.send(result);
                failure
            }
            Event::Request(Request::Unsubscribe(channel)) => {
                confirm("unsubscribe", d, sink.unsubscribe(&channel)).await.err().map(|err| err.to_string())
            }
            Event::Closed => Some("connection closed".to_owned()),
            Event::StoreGone => return Exit::StoreGone,
        };
        if let Some(reason) = failure {
            return Exit::Lost(LockError::unavailable(reason));
        }
    }
    Exit::StoreGone
}

/// Awaits a server confirmation within the command deadline.
async fn confirm(
    operation: &'static str,
    d: Deadlines,
    request: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> Result<()> {
    rt::timeout(operation, d.command, request).await?.map_err(|err| error::from_redis(err, operation, None, d.command))
}

/// Waits out `backoff` (refusing subscriptions meanwhile) and doubles it up to the cap. Returns `false` when the
/// task should end.
async fn back_off(backoff: &mut Duration, requests: &mut mpsc::UnboundedReceiver<Request>) -> bool {
    let go_on = refuse_during(rt::sleep(*backoff), requests).await;
    *backoff = (*backoff * 2).min(RECONNECT_MAX);
    go_on
}

/// Waits for `pause` while refusing subscriptions at once (the hub's list is resubscribed after reconnecting, so
/// a refused channel is not forgotten). Returns `false` when the task should end.
async fn refuse_during(
    pause: impl std::future::Future<Output = Result<()>>,
    requests: &mut mpsc::UnboundedReceiver<Request>,
) -> bool {
    let mut pause = pin!(pause);
    loop {
        match future::select(pause.as_mut(), requests.next()).await {
            Either::Left((Ok(()), _)) => return true,
            Either::Left((Err(err), _)) => {
                tracing::warn!(error = %err, "release subscriber stops; waiters poll");
                return false;
            }
            Either::Right((Some(Request::Subscribe(_, done)), _)) => {
                let _ = done.send(Err(LockError::unavailable("release subscriber is reconnecting")));
            }
            Either::Right((Some(Request::Unsubscribe(_)), _)) => {}
            Either::Right((None, _)) => return false,
        }
    }
}

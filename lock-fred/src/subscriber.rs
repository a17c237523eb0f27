//! Release notifications: one fred [`SubscriberClient`] per store feeding lock-core's [`ReleaseHub`].
//!
//! Two tasks share the subscriber: one applies subscribe/unsubscribe requests in the order the hub issued them
//! (the [`SubscriptionControl`] contract) and resubscribes after reconnects; the other hands every message to the
//! hub. They are separate so that a slow `SUBSCRIBE` never delays the delivery of a release.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::error::Error as FredError;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::Message;
use lock_core::backend::{Confirmation, ReleaseHub, SubscriptionControl};
use lock_core::{LockError, Result};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::error;

/// A request to the task that owns the subscriptions.
pub(crate) enum Op {
    Subscribe(String, oneshot::Sender<Result<(), FredError>>),
    Unsubscribe(String),
}

/// The hub's handle on the subscriber: queues requests to [`apply_subscriptions`].
#[derive(Debug)]
pub(crate) struct Subscriptions {
    ops: mpsc::UnboundedSender<Op>,
    timeout: Duration,
}

impl Subscriptions {
    pub(crate) fn new(ops: mpsc::UnboundedSender<Op>, timeout: Duration) -> Self {
        Subscriptions { ops, timeout }
    }
}

fn shut_down() -> LockError {
    LockError::unavailable("the store's release subscriber has shut down")
}

impl SubscriptionControl for Subscriptions {
    fn subscribe(&self, channel: &str) -> Confirmation {
        let (done, confirmed) = oneshot::channel();
        let queued = self.ops.send(Op::Subscribe(channel.to_owned(), done)).map_err(|_| shut_down());
        let timeout = self.timeout;
        Box::pin(async move {
            queued?;
            // Bounded here too: the request may queue behind others while the server is unreachable, and a waiter
            // must not start late because of a hint. A request that times out is still applied, in order.
            match tokio::time::timeout(timeout, confirmed).await {
                Err(_) => Err(LockError::timeout("subscribe", timeout)),
                Ok(Err(_)) => Err(shut_down()),
                Ok(Ok(reply)) => reply.map_err(|err| error::from_fred(err, "subscribe", timeout)),
            }
        })
    }

    fn unsubscribe(&self, channel: &str) {
        // Fails only once the store is gone, and its subscriber with it.
        let _ = self.ops.send(Op::Unsubscribe(channel.to_owned()));
    }
}

/// Applies subscription requests one at a time, in order, and restores them after every reconnect. With `sharded`
/// (a cluster store, whose releases are announced with `SPUBLISH`; see [`lock_core::backend::scripts::RELEASE`]) it uses
/// `SSUBSCRIBE`/`SUNSUBSCRIBE`, which fred routes to the shard that owns each channel's slot.
pub(crate) async fn apply_subscriptions(
    subscriber: SubscriberClient,
    mut ops: mpsc::UnboundedReceiver<Op>,
    sharded: bool,
) {
    // The channels waiters want, confirmed or not. fred's `manage_subscriptions` would resubscribe only confirmed
    // channels, and from another task that can race an unsubscribe; doing it here keeps one order for everything.
    let mut wanted = BTreeSet::new();
    let mut reconnects = subscriber.reconnect_rx();
    loop {
        tokio::select! {
            op = ops.recv() => match op {
                Some(Op::Subscribe(channel, done)) => {
                    wanted.insert(channel.clone());
                    // The waiter may have stopped waiting for the confirmation; that is fine.
                    let _ = done.send(subscribe(&subscriber, sharded, channel).await);
                }
                Some(Op::Unsubscribe(channel)) => {
                    wanted.remove(&channel);
                    let result = if sharded {
                        subscriber.sunsubscribe(channel.clone()).await
                    } else {
                        subscriber.unsubscribe(channel.clone()).await
                    };
                    if let Err(err) = result {
                        tracing::debug!(channel, error = %err, "unsubscribe failed; a reconnect will drop it");
                    }
                }
                // The hub (and the store) is gone.
                None => break,
            },
            event = reconnects.recv() => match event {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    lock_core::telemetry::subscriber_reconnected::<crate::FredStore>();
                    // A new connection starts with no subscriptions.
                    for channel in &wanted {
                        if let Err(err) = subscribe(&subscriber, sharded, channel.clone()).await {
                            tracing::warn!(channel, error = %err, "resubscribing after reconnect failed; waiters poll");
                        }
                    }
                }
                // The subscriber quit.
                Err(RecvError::Closed) => break,
            },
        }
    }
}

/// One channel at a time: the channels of one `SSUBSCRIBE` must share a slot.
///
/// Returns once the server has applied the subscription. fred answers a `SUBSCRIBE` without waiting for the
/// server's reply (it drops subscription replies as out-of-band frames), so on a loaded machine a release published
/// right after reached nobody in 234 of 2 000 tries, and a waiter that had "subscribed" and looked again slept to
/// its safety poll (a resignation handed over in 5 s instead of 2 ms). A `PING` on the same connection is answered
/// only after the server ran the `SUBSCRIBE` before it. (`SSUBSCRIBE`'s reply is a normal reply in fred, so that it
/// can follow a redirection, and needs no `PING`: on a cluster the `PING` might not even use its connection.)
async fn subscribe(subscriber: &SubscriberClient, sharded: bool, channel: String) -> Result<(), FredError> {
    if sharded {
        subscriber.ssubscribe(channel).await
    } else {
        subscriber.subscribe(channel).await?;
        subscriber.ping::<()>(None).await
    }
}

/// Hands every message the subscriber receives to the hub.
pub(crate) async fn deliver_messages(mut messages: broadcast::Receiver<Message>, hub: Arc<ReleaseHub>) {
    loop {
        match messages.recv().await {
            Ok(message) => {
                // The payload is the releasing store's origin (hex text); fred gives it as a string or bytes.
                let text;
                let payload = match message.value.as_bytes() {
                    Some(bytes) => bytes,
                    None => {
                        text = message.value.as_str().unwrap_or_default();
                        text.as_bytes()
                    }
                };
                hub.deliver(&message.channel, payload);
            }
            Err(RecvError::Lagged(missed)) => {
                // Some releases were dropped from fred's buffer: wake one waiter per channel to re-poll rather
                // than let them sleep out their safety poll.
                tracing::debug!(missed, "release notifications lagged; waking waiters to re-poll");
                for channel in hub.watched_channels() {
                    hub.wake_one(&channel);
                }
            }
            Err(RecvError::Closed) => break,
        }
    }
}

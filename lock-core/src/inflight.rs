//! Cancel safety for acquire: the token of a request that may have been applied is released, never forgotten.
//!
//! From the moment an acquire request is sent until its reply is read, the server may hold our token. If the
//! caller's future is dropped in that window (a `select!`, a timeout), or the reply is lost, the library still knows
//! the token and releases it by compare-and-delete instead of leaving the lock to its TTL.

use std::sync::Arc;
use std::time::Duration;

use crate::lock::Instances;
use crate::store::LockStore;
use crate::target::Target;
use crate::token::Token;

/// An acquire in flight on one or more stores. Releases on drop unless [`disarm`](Self::disarm)ed.
pub(crate) struct InFlight {
    instances: Arc<Instances>,
    target: Arc<Target>,
    token: Token,
    timeout: Duration,
    armed: bool,
    /// Where a release on drop runs (the runtime the request was sent from).
    runtime: Option<crate::rt::Runtime>,
}

impl InFlight {
    pub(crate) fn new(instances: Arc<Instances>, target: Arc<Target>, token: Token, timeout: Duration) -> Self {
        InFlight { instances, target, token, timeout, armed: true, runtime: crate::rt::current() }
    }

    pub(crate) fn token(&self) -> &Token {
        &self.token
    }

    /// The outcome is known: nothing to clean up.
    pub(crate) fn disarm(mut self) -> Token {
        self.armed = false;
        self.token.clone()
    }

    /// Releases what may have been acquired, waiting for it (bounded), so the next try does not find our own key.
    ///
    /// Stays armed until the release has completed: if this future is dropped first (the caller was cancelled),
    /// the release may never have been sent (a client drops a request whose caller is gone), so `Drop` sends
    /// it again in the background.
    pub(crate) async fn release_now(mut self) {
        release_all(&self.instances.stores, &self.target, &self.token, self.timeout).await;
        self.armed = false;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let instances = self.instances.clone();
        let target = self.target.clone();
        let token = self.token.clone();
        let timeout = self.timeout;
        let release = async move { release_all(&instances.stores, &target, &token, timeout).await };
        let spawned = match &self.runtime {
            Some(runtime) => Some(crate::rt::spawn_on(runtime, release)),
            None => crate::rt::spawn_background(release),
        };
        match spawned {
            Some(task) => task.detach(),
            None => tracing::warn!(
                resource = self.target.label(),
                "acquire cancelled without a runtime to release on; the lock expires at its TTL"
            ),
        }
    }
}

/// Compare-and-delete `token` on every store concurrently; errors are logged (the TTL is the fallback).
///
/// On one instance the key it deletes was the lock itself, which waiters may have seen held: the next local waiter
/// is woken. Over Redlock it is at most a minority grant, which held nobody back (the lock as a whole was never
/// ours), and waking would only send a waiter (often the caller itself, listening while it tries) into a try that
/// the real holder still blocks.
pub(crate) async fn release_all(stores: &[Arc<dyn LockStore>], target: &Target, token: &Token, timeout: Duration) {
    let single = stores.len() == 1;
    let releases = stores.iter().map(|store| async move {
        match crate::rt::timeout("release", timeout, target.release(store.as_ref(), token)).await {
            Ok(Ok(outcomes)) => {
                let hub = store.release_hub().filter(|_| single);
                for (keys, outcome) in target.resources().iter().zip(outcomes) {
                    if let (Some(hub), crate::ReleaseOutcome::Released) = (hub, outcome) {
                        hub.wake_one(keys.channel());
                    }
                }
            }
            Ok(Err(err)) | Err(err) => {
                tracing::debug!(resource = target.label(), error = %err.report(), "best-effort release failed; TTL applies")
            }
        }
    });
    futures_util::future::join_all(releases).await;
}

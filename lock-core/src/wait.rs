//! Waiting for a held lock: tries spaced by jittered backoff, woken early by release notifications and at the
//! holder's expiry, bounded by the caller's wait budget and attempt limit.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{select, Either};

use crate::error::{LockError, Result};
use crate::notify::{ReleaseHub, ReleaseWatch};
use crate::options::LockOptions;

/// The result of one try.
pub(crate) enum Attempt<G> {
    /// We hold the lock.
    Acquired(G),
    /// Someone else does; their key expires in `holder_ttl` if the server said.
    Held { holder_ttl: Option<Duration> },
}

/// Tries `attempt` until it acquires, the wait budget is spent, or the attempt limit is reached. Returns the
/// guard and, when it had to wait, its registration on the release channel, for the holder to keep (see
/// [`Lock::acquire`](crate::Lock::acquire)).
///
/// The last try happens at the deadline at the latest; no sleep follows it. Transient errors (see
/// [`LockError::is_retryable`]) are retried like contention; if the budget runs out after one, that error is
/// returned rather than [`LockError::Contended`].
pub(crate) async fn until_acquired<G, F, Fut>(
    resource: &str,
    options: &LockOptions,
    hub: Option<(&Arc<ReleaseHub>, &str)>,
    mut attempt: F,
) -> Result<(G, Option<ReleaseWatch>)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    let started = Instant::now();
    let deadline = started + options.wait_budget();
    let policy = options.retry_policy();
    // Subscribe only once the lock turned out to be held: an uncontended acquire stays one round trip.
    let mut watch = None;
    let mut delays = policy.delays();
    // Fairness: a newcomer does not barge past local waiters already queued for this lock (a releaser looping
    // straight back to acquire would otherwise win most hand-offs). It queues behind them and tries when a release
    // wakes it, or after one backoff step at the latest.
    if let Some((hub, channel)) = hub {
        if !options.wait_budget().is_zero() && hub.waiters(channel) > 0 {
            let queued = hub.watch(channel).await;
            let listener = queued.listen();
            let pause = delays.next().unwrap_or(Duration::from_millis(5)).min(options.wait_budget());
            let sleep = crate::rt::sleep(pause);
            if let Either::Right((slept, _)) = select(listener, std::pin::pin!(sleep)).await {
                slept?;
            }
            watch = Some(queued);
        }
    }
    let mut attempts: u32 = 0;
    loop {
        attempts = attempts.saturating_add(1);
        // Listen before trying: a release between the try and the sleep must still wake us.
        let listener = watch.as_ref().map(ReleaseWatch::listen);
        let (holder_ttl, last_error) = match attempt().await {
            Ok(Attempt::Acquired(guard)) => return Ok((guard, watch)),
            Ok(Attempt::Held { holder_ttl }) => (holder_ttl, None),
            Err(err) if err.is_retryable() => {
                tracing::debug!(resource, error = %err, "transient error while waiting for lock");
                (None, Some(err))
            }
            Err(err) => return Err(err),
        };
        let now = Instant::now();
        let exhausted = policy.attempt_limit().is_some_and(|limit| attempts >= limit);
        if now >= deadline || exhausted {
            tracing::debug!(resource, attempts, "lock wait budget spent");
            return Err(last_error.unwrap_or_else(|| LockError::Contended {
                resource: resource.to_owned(),
                waited: now.saturating_duration_since(started),
            }));
        }
        if watch.is_none() && last_error.is_none() {
            if let Some((hub, channel)) = hub {
                watch = Some(hub.watch(channel).await);
                // A release may have landed before the subscription: look again before sleeping.
                continue;
            }
        }
        let mut pause = delays.next().unwrap_or(Duration::from_millis(100));
        if let Some(ttl) = holder_ttl {
            // The holder's key is gone by then at the latest.
            pause = pause.min(ttl + Duration::from_millis(1));
        }
        pause = pause.min(deadline.saturating_duration_since(now));
        let sleep = crate::rt::sleep(pause);
        match listener {
            Some(listener) => {
                if let Either::Right((slept, _)) = select(listener, std::pin::pin!(sleep)).await {
                    slept?;
                }
            }
            None => sleep.await?,
        }
    }
}

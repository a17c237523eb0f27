//! etcd's queue recipe (`client/v3/concurrency`), written once for the lock and the election: a contender puts its
//! key `<queue><lease hex>` under a lease of its own, in one transaction that also reads the first key of the queue
//! by revision of creation; the first holds. A contender behind watches the deletion of the key created just before
//! its own (no herd: one watcher per key, FIFO by revision), then looks again.
//!
//! Two things etcd's 3.4 recipe (what Debian's `etcdctl lock` and the server's lock service run) does not do, and
//! this one does:
//!
//! - **After waiting, it checks that its own key still exists with its revision** (etcd's fix #11408 for Jepsen's
//!   finding #11456, shipped from 3.5): a contender whose lease ran out while it waited would otherwise take the
//!   deletion of its predecessor for its turn, and hold with no key at all. Here it joins again with a new lease
//!   while its wait budget lasts.
//! - **It watches from the revision of the read that found the predecessor** (never from "now", etcd's revision 0),
//!   so a deletion between the read and the watch is replayed, and a compacted history is a re-read, not an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{select, Either};
use futures_util::StreamExt;

use crate::error::{LockError, Result};
use crate::options::RetryPolicy;
use crate::revision::names::{contender, id_key};
use crate::revision::session::{Limits, Session};
use crate::revision::store::{Change, Order, Range, Revision, RevisionStore};
use crate::rt;

/// A contender first in its queue: its lease (kept alive while it waited), its key and its place.
#[derive(Debug)]
pub(crate) struct Contender {
    pub(crate) session: Arc<Session>,
    pub(crate) key: String,
    pub(crate) created: Revision,
}

/// Someone else held the queue for the whole budget (or, for a try, at once).
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) waited: Duration,
}

/// What joining a queue needs.
pub(crate) struct Join<'a> {
    pub(crate) store: &'a Arc<dyn RevisionStore>,
    /// The queue's prefix (`<prefix><name>/`).
    pub(crate) queue: &'a str,
    /// The contender key's value (a lock's token, a candidate's value).
    pub(crate) value: &'a [u8],
    pub(crate) ttl: Duration,
    /// The bound on each request.
    pub(crate) bound: Duration,
    pub(crate) wait: Duration,
    pub(crate) retry: &'a RetryPolicy,
    /// An election candidate's id, written beside the queue under the same lease before joining
    /// ([`id_key`](crate::revision::names::id_key)).
    pub(crate) id: Option<&'a [u8]>,
}

/// How a wait for one's turn ended.
enum Turn {
    Mine,
    /// The contender's lease is gone (its keep-alives failed): join again.
    LeaseLost,
    TimedOut,
}

impl Join<'_> {
    /// Joins the queue and waits for its turn within the budget: the contender, first in the queue, or [`Held`].
    ///
    /// # Errors
    /// The store's errors that retrying does not fix, or the last transient one when the budget ends on it.
    ///
    /// # Cancel safety
    /// Dropping the future drops the contender's session, which revokes its lease (and key) in the background.
    pub(crate) async fn run(self) -> Result<std::result::Result<Contender, Held>> {
        let started = Instant::now();
        let mut deadline = started.checked_add(self.wait).unwrap_or(started + crate::options::MAX_WAIT);
        if let Some(tries) = self.retry.max_attempts() {
            // A contender does not poll (it watches its predecessor), so an attempt limit is the time its tries
            // would have spent pausing: the first `tries − 1` delays of the policy.
            let pauses: Duration = self.retry.delays().take(tries.saturating_sub(1) as usize).sum();
            deadline = deadline.min(started + pauses);
        }
        let mut pause = Pause::new(self.retry, deadline);
        let session = loop {
            match Session::grant(self.store.clone(), self.ttl, self.bound).await {
                Ok(session) => break session,
                Err(err) => pause.after(err, "granting a lease").await?,
            }
        };
        match self.attempt(session, &mut pause).await? {
            Some(contender) => Ok(Ok(contender)),
            None => Ok(Err(Held { waited: started.elapsed() })),
        }
    }

    /// One contender on `session`'s lease (and, when that lease runs out while it waits, on new ones): `Some`
    /// when it is first (now, or after waiting), `None` when the budget ran out.
    async fn attempt(&self, mut session: Arc<Session>, pause: &mut Pause<'_>) -> Result<Option<Contender>> {
        loop {
            let lease = session.lease();
            let key = contender(self.queue, lease);
            // Retried on the same lease and key: the transaction is idempotent (a key of ours that exists keeps its
            // place), so a reply lost after the store applied it costs nothing.
            let enqueued = loop {
                let step = async {
                    if let Some(id) = self.id {
                        let key = id_key(self.queue, lease);
                        rt::timeout("acquire", self.bound, self.store.put_if_created(&key, id, 0, lease)).await??;
                    }
                    let enqueue = self.store.enqueue(&key, self.value, lease, self.queue);
                    rt::timeout("acquire", self.bound, enqueue).await?
                };
                match step.await {
                    Ok(enqueued) => break enqueued,
                    Err(err) => {
                        if let Err(err) = pause.after(err, "joining the queue").await {
                            let _ = session.revoke().await;
                            return Err(err);
                        }
                    }
                }
            };
            let created = enqueued.create_revision;
            let contender = Contender { session, key, created };
            if enqueued.first.is_none_or(|first| first.create_revision == created) {
                return Ok(Some(contender));
            }
            if pause.spent() {
                // A try (or a budget spent meanwhile): leave the queue at once.
                let _ = contender.session.revoke().await;
                return Ok(None);
            }
            let granted = contender.session.granted();
            contender.session.keep(granted / 3, None, Limits::default())?;
            match self.until_turn(&contender, pause).await {
                Ok(Turn::Mine) => match self.still_queued(&contender).await {
                    Ok(true) => return Ok(Some(contender)),
                    Ok(false) => tracing::debug!(key = contender.key, "our key went while we waited: joining again"),
                    Err(err) => {
                        let _ = contender.session.revoke().await;
                        return Err(err);
                    }
                },
                Ok(Turn::LeaseLost) => {
                    tracing::debug!(key = contender.key, "our lease ran out while we waited: joining again");
                }
                Ok(Turn::TimedOut) => {
                    let _ = contender.session.revoke().await;
                    return Ok(None);
                }
                Err(err) => {
                    let _ = contender.session.revoke().await;
                    return Err(err);
                }
            }
            // Our place is gone with our key: a new lease joins at the end of the queue.
            drop(contender);
            if pause.spent() {
                return Ok(None);
            }
            session = loop {
                match Session::grant(self.store.clone(), self.ttl, self.bound).await {
                    Ok(session) => break session,
                    Err(err) => pause.after(err, "granting a lease").await?,
                }
            };
        }
    }

    /// Waits until no key created before ours is left (or the lease is lost, or the deadline passes). A read that
    /// fails for a while (the store restarting, no leader) is retried in place: the contender keeps its key and its
    /// place, which its keeper keeps alive meanwhile.
    async fn until_turn(&self, me: &Contender, pause: &mut Pause<'_>) -> Result<Turn> {
        loop {
            if pause.spent() {
                return Ok(Turn::TimedOut);
            }
            if me.session.lost.is_lost() {
                return Ok(Turn::LeaseLost);
            }
            // The newest key created before ours: our predecessor.
            let ahead = Range::new(self.queue, Order::LastCreated, 1).created_by(me.created.saturating_sub(1));
            let (keys, revision) = match rt::timeout("acquire", self.bound, self.store.range(ahead)).await {
                Ok(Ok(read)) => read,
                Ok(Err(err)) | Err(err) => {
                    pause.after(err, "reading the queue").await?;
                    continue;
                }
            };
            let Some(predecessor) = keys.into_iter().next() else { return Ok(Turn::Mine) };
            let mut changes = self.store.watch(&predecessor.key, false, revision.saturating_add(1));
            let budget = pause.left();
            let timer = std::pin::pin!(rt::sleep(budget));
            let lost = std::pin::pin!(me.session.lost.lost());
            let mut ends = select(timer, lost);
            loop {
                match select(changes.next(), &mut ends).await {
                    Either::Right((Either::Left(_), _)) => return Ok(Turn::TimedOut),
                    Either::Right((Either::Right(_), _)) => return Ok(Turn::LeaseLost),
                    Either::Left((Some(Ok(Change::Delete { .. } | Change::Compacted { .. })), _)) => break,
                    Either::Left((Some(Ok(Change::Put(_))), _)) => continue,
                    Either::Left((Some(Err(err)), _)) => {
                        // A broken watch: read again after a pause (the member may be restarting).
                        pause.after(err, "watching the predecessor").await?;
                        break;
                    }
                    Either::Left((None, _)) => {
                        rt::sleep(Duration::from_millis(50).min(pause.left())).await?;
                        break;
                    }
                }
            }
        }
    }

    /// Whether our key still exists with its revision (its lease did not run out while we waited).
    async fn still_queued(&self, me: &Contender) -> Result<bool> {
        let (entry, _) = rt::timeout("acquire", self.bound, self.store.get(&me.key)).await??;
        Ok(entry.is_some_and(|entry| entry.create_revision == me.created))
    }
}

/// The retries within a wait budget: a transient error pauses (the policy's backoff, never past the deadline) and is
/// retried; any other error, or a transient one when the budget is spent, ends the wait.
struct Pause<'a> {
    delays: Box<dyn Iterator<Item = Duration> + Send + 'a>,
    max: Duration,
    deadline: Instant,
}

impl<'a> Pause<'a> {
    fn new(retry: &'a RetryPolicy, deadline: Instant) -> Self {
        Pause { delays: Box::new(retry.delays()), max: retry.max_delay(), deadline }
    }

    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn spent(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Pauses before retrying after `err`, or returns it when it is not transient or the budget is spent.
    async fn after(&mut self, err: LockError, doing: &str) -> Result<()> {
        if !err.is_retryable() || self.spent() {
            return Err(err);
        }
        let pause = self.delays.next().unwrap_or(self.max).min(self.left());
        tracing::debug!(doing, error = %err.report(), ?pause, "transient error; retrying within the wait budget");
        rt::sleep(pause).await
    }
}

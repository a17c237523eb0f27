//! The election over a [`RevisionStore`](crate::backend::RevisionStore), by etcd's recipe
//! (`concurrency.Election`): a candidate's key `<queue><lease hex>` holds its value, the first key by revision of
//! creation leads, its revision of creation is the term. `etcdctl elect` (and any client of etcd's `concurrency`
//! package) campaigns in the same queue.
//!
//! The candidate's id, which etcd's recipe does not have, is kept beside the queue under the same lease
//! (`<prefix><name>%ids/<lease hex>`, outside every queue): observers of ours read it; a leader elected by another
//! client has none, and is named by its lease id in hex.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::stream::{self, BoxStream, StreamExt};

use crate::distributed_election::{DistributedElection, LeaderGuard};
use crate::election::{check_id, check_value, ElectionOptions, LeaderInfo};
use crate::error::{LockError, Result};
use crate::lost::{LostReason, LostSignal};
use crate::options::{RetryPolicy, MAX_WAIT};
use crate::revision::lock::RevisionLock;
use crate::revision::names::id_key;
use crate::revision::queue::{Contender, Join};
use crate::revision::session::{Holding, Limits};
use crate::revision::store::{Order, Range, Revision};
use crate::rt;
use crate::seam::store::ReleaseOutcome;
use crate::token::FencingToken;

/// An election on a [`RevisionLock`]'s store. Cheap to clone.
///
/// ```
/// use lock_core::revision::{RevisionElection, RevisionLock};
/// use lock_core::{ElectionOptions, MemoryRevisionStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock = RevisionLock::new(MemoryRevisionStore::new());
/// let election = RevisionElection::new(lock, "compactor", ElectionOptions::default())?;
/// let leader = election.campaign("replica-a", "10.0.0.7:9000").await?;
/// let seen = election.leader().await?.map(|l| (l.id, l.value));
/// assert_eq!(seen, Some(("replica-a".to_owned(), "10.0.0.7:9000".to_owned())));
/// leader.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RevisionElection {
    lock: RevisionLock,
    name: String,
    queue: String,
    options: ElectionOptions,
}

impl RevisionElection {
    /// The election `name` on `lock`'s store and prefix (`etcdctl elect <prefix><name>` campaigns in it), with
    /// `options`: the lease is the candidate's lease TTL (rounded up to whole seconds on etcd), a leader keeps it
    /// alive every retry period and stops trusting itself when no keep-alive succeeded for the renew deadline.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a bad name or options, before any I/O.
    pub fn new(lock: RevisionLock, name: &str, options: ElectionOptions) -> Result<Self> {
        options.validate()?;
        let queue = lock.queue(name)?;
        Ok(RevisionElection { lock, name: name.to_owned(), queue, options })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns as `id` with `value` until elected (a day at most), FIFO among candidates.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a bad id or value (before any I/O); the store's errors;
    /// [`LockError::Contended`] after a day.
    ///
    /// # Cancel safety
    /// Cancel-safe: the dropped candidacy's lease is revoked in the background.
    pub async fn campaign(&self, id: &str, value: &str) -> Result<RevisionLeadership> {
        match Box::pin(self.join(id, value, MAX_WAIT)).await? {
            Some(leader) => Ok(leader),
            None => Err(LockError::contended(self.name.clone(), MAX_WAIT)),
        }
    }

    /// Campaigns once: the leadership if elected now, `None` if another candidate leads.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign), without `Contended`.
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self, id: &str, value: &str) -> Result<Option<RevisionLeadership>> {
        Box::pin(self.join(id, value, Duration::ZERO)).await
    }

    async fn join(&self, id: &str, value: &str, wait: Duration) -> Result<Option<RevisionLeadership>> {
        check_id(id)?;
        check_value(value)?;
        let store = self.lock.store();
        let retry = RetryPolicy::default().with_max_delay(self.options.retry_period());
        let join = Join {
            store,
            queue: &self.queue,
            value: value.as_bytes(),
            ttl: self.options.lease(),
            bound: self.lock.operation_timeout(),
            wait,
            retry: &retry,
            id: Some(id.as_bytes()),
        };
        let contender = match join.run().await.map_err(|err| err.at("campaign", store.endpoints()))? {
            Ok(contender) => contender,
            Err(_) => return Ok(None),
        };
        let Contender { session, key, created } = contender;
        session.stop_keeping();
        session.cap_validity(self.options.renew_deadline());
        let holding = Holding { key: key.clone(), created };
        session.keep(self.options.retry_period(), Some(holding), Limits::default())?;
        tracing::info!(election = self.name, id, term = created, "elected");
        Ok(Some(RevisionLeadership { election: self.name.clone(), key, created, session }))
    }

    /// Who leads now, if anyone: the first candidate by revision of creation.
    ///
    /// # Errors
    /// The store's errors.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        Ok(self.leader_at().await?.0)
    }

    /// The leader and the store's revision when it was read.
    async fn leader_at(&self) -> Result<(Option<LeaderInfo>, Revision)> {
        let store = self.lock.store();
        let bound = self.lock.operation_timeout();
        let first = Range::new(&self.queue, Order::FirstCreated, 1);
        let (keys, revision) = rt::timeout("leader", bound, store.range(first)).await??;
        let Some(entry) = keys.into_iter().next() else { return Ok((None, revision)) };
        let (id, remaining) = futures_util::future::join(
            rt::timeout("leader", bound, store.get(&id_key(&self.queue, entry.lease))),
            rt::timeout("leader", bound, store.time_to_live(entry.lease)),
        )
        .await;
        let id = match id?? {
            (Some(id), _) => String::from_utf8_lossy(&id.value).into_owned(),
            // Another client's candidate (`etcdctl elect`, Go's `concurrency.Election`): named by its lease.
            (None, _) => format!("{:x}", entry.lease),
        };
        let info = LeaderInfo {
            id,
            value: String::from_utf8_lossy(&entry.value).into_owned(),
            term: FencingToken::new(entry.create_revision.unsigned_abs()),
            remaining: remaining??.unwrap_or_default(),
        };
        Ok((Some(info), revision))
    }

    /// Every change of leader or of its value, starting with the current one; `None` while nobody leads. It
    /// reads again on every change in the queue (a watch from the revision it last read), so no change between two
    /// reads is missed.
    pub fn observe(&self) -> BoxStream<'static, Result<Option<LeaderInfo>>> {
        let start = Observer { election: self.clone(), last: None, from: None, failed: false };
        stream::unfold(start, |mut st| async move {
            loop {
                if st.failed {
                    // After an error, pause before reading again (the store may be restarting).
                    let _ = rt::sleep(st.election.options.retry_period()).await;
                    st.failed = false;
                }
                if let Some(from) = st.from {
                    // Wait for any change in the queue after what we read.
                    let mut changes = st.election.lock.store().watch(&st.election.queue, true, from.saturating_add(1));
                    match changes.next().await {
                        Some(Ok(_)) => {}
                        Some(Err(err)) => {
                            (st.from, st.failed) = (None, true);
                            return Some((Err(err), st));
                        }
                        None => st.failed = true,
                    }
                }
                match st.election.leader_at().await {
                    Err(err) => {
                        (st.from, st.failed) = (None, true);
                        return Some((Err(err), st));
                    }
                    Ok((info, revision)) => {
                        st.from = Some(revision);
                        let seen = info.as_ref().map(|l| (l.id.clone(), l.value.clone(), l.term));
                        if st.last.as_ref() != Some(&seen) {
                            st.last = Some(seen);
                            return Some((Ok(info), st));
                        }
                        // Unchanged (a waiting candidate joined or left): watch again from here.
                    }
                }
            }
        })
        .boxed()
    }
}

/// What an observer remembers between two changes.
struct Observer {
    election: RevisionElection,
    /// The last leader it reported (id, value, term), once it reported one.
    last: Option<Option<(String, String, FencingToken)>>,
    /// The revision of its last read: it watches from the next one.
    from: Option<Revision>,
    failed: bool,
}

#[async_trait]
impl DistributedElection for RevisionElection {
    fn name(&self) -> &str {
        RevisionElection::name(self)
    }
    async fn campaign(&self, id: &str, value: &str) -> Result<Box<dyn LeaderGuard>> {
        Ok(Box::new(RevisionElection::campaign(self, id, value).await?))
    }
    async fn try_campaign(&self, id: &str, value: &str) -> Result<Option<Box<dyn LeaderGuard>>> {
        Ok(RevisionElection::try_campaign(self, id, value).await?.map(|l| Box::new(l) as Box<dyn LeaderGuard>))
    }
    async fn leader(&self) -> Result<Option<LeaderInfo>> {
        RevisionElection::leader(self).await
    }
    fn observe(&self) -> BoxStream<'static, Result<Option<LeaderInfo>>> {
        RevisionElection::observe(self)
    }
}

/// Leading a [`RevisionElection`]: the candidate's key, first in the queue, and its lease, kept alive every retry
/// period. Dropping it resigns in the background (its lease is revoked).
#[derive(Debug)]
#[must_use = "dropping a leadership resigns it"]
pub struct RevisionLeadership {
    election: String,
    key: String,
    created: Revision,
    session: std::sync::Arc<crate::revision::session::Session>,
}

impl RevisionLeadership {
    /// The election's name.
    pub fn election(&self) -> &str {
        &self.election
    }

    /// The term: the leader key's revision of creation.
    pub fn term(&self) -> FencingToken {
        FencingToken::new(self.created.unsigned_abs())
    }

    /// The leader's key (`<queue><lease hex>`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Until when this leader may act: the start of its last successful keep-alive plus the renew deadline.
    pub fn valid_until(&self) -> Instant {
        self.session.lost.valid_until()
    }

    /// Fires when the leadership is lost.
    pub fn lost_signal(&self) -> LostSignal {
        self.session.lost.clone()
    }

    /// Whether the leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.session.lost.is_lost()
    }

    /// Replaces the value, only while the key is still this leader's (by its revision of creation).
    ///
    /// # Errors
    /// [`LockError::NotLeader`] when it is not (the lost signal fires); [`LockError::InvalidArgument`] for a bad
    /// value; the store's errors.
    ///
    /// # Cancel safety
    /// The value may or may not have been replaced; proclaim again.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        let not_leader = || LockError::NotLeader { election: self.election.clone() };
        if self.session.lost.is_lost() {
            return Err(not_leader());
        }
        let (store, bound) = (&self.session.store, self.session.bound);
        let put = store.put_if_created(&self.key, value.as_bytes(), self.created, self.session.lease());
        if rt::timeout("proclaim", bound, put).await?.map_err(|err| err.at("proclaim", store.endpoints()))? {
            return Ok(());
        }
        self.session.lost.mark(LostReason::NotHeld);
        Err(not_leader())
    }

    /// Resigns: deletes the key if still this leader's, then revokes the lease.
    ///
    /// # Errors
    /// The store's errors; the leadership then ends at its lease.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped resignation revokes the lease in the background.
    pub async fn resign(self) -> Result<ReleaseOutcome> {
        let session = self.session.clone();
        session.stop_keeping();
        session.lost.mark(LostReason::Released);
        let deleted = rt::timeout("resign", session.bound, session.store.delete_if_created(&self.key, self.created))
            .await
            .and_then(|r| r)
            .map_err(|err| err.at("resign", session.store.endpoints()))?;
        session.revoke().await.map_err(|err| err.at("resign", session.store.endpoints()))?;
        Ok(if deleted { ReleaseOutcome::Released } else { ReleaseOutcome::AlreadyExpired })
    }
}

impl Drop for RevisionLeadership {
    /// A leadership dropped without [`resign`](RevisionLeadership::resign) turns lost at once; its session, dropped
    /// with it, revokes its lease (and key) in the background.
    fn drop(&mut self) {
        self.session.lost.mark(LostReason::Released);
    }
}

#[async_trait]
impl LeaderGuard for RevisionLeadership {
    fn election(&self) -> &str {
        RevisionLeadership::election(self)
    }
    fn term(&self) -> FencingToken {
        RevisionLeadership::term(self)
    }
    fn valid_until(&self) -> Instant {
        RevisionLeadership::valid_until(self)
    }
    fn lost_signal(&self) -> LostSignal {
        RevisionLeadership::lost_signal(self)
    }
    async fn proclaim(&self, value: &str) -> Result<()> {
        RevisionLeadership::proclaim(self, value).await
    }
    async fn resign(self: Box<Self>) -> Result<ReleaseOutcome> {
        RevisionLeadership::resign(*self).await
    }
}

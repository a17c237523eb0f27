//! The election traits: [`DistributedElection`] hands out [`LeaderGuard`]s, on Redis ([`Election`](crate::Election))
//! and on a consensus store ([`RevisionElection`](crate::revision::RevisionElection), etcd's own recipe), so that a
//! framework can hold `Box<dyn DistributedElection>` and let the application choose the backend.

use std::fmt::Debug;
use std::time::Instant;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;

use crate::election::{Election, LeaderInfo, Leadership};
use crate::error::Result;
use crate::lost::LostSignal;
use crate::seam::store::ReleaseOutcome;
use crate::token::FencingToken;

/// One election on one name: candidates campaign, one leads at a time with a **term** that fences, observers see
/// who leads (and that nobody does).
///
/// ```
/// use lock_core::{DistributedLock, ElectionOptions, Lock, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let lock: Box<dyn DistributedLock> = Box::new(Lock::new(MemoryStore::new()));
/// let election = lock.election("compactor", ElectionOptions::default())?;
/// let leader = election.campaign("replica-a", "10.0.0.7:9000").await?;
/// let seen = election.leader().await?.map(|l| (l.id, l.term));
/// assert_eq!(seen, Some(("replica-a".to_owned(), leader.term())));
/// leader.resign().await?;
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait DistributedElection: Send + Sync + Debug {
    /// The election's name.
    fn name(&self) -> &str;

    /// Campaigns as `id` with `value` until elected.
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::LockError::InvalidArgument) for a bad id or value, before any I/O; the backend's
    /// errors; [`Contended`](crate::LockError::Contended) after a day without being elected.
    ///
    /// # Cancel safety
    /// Cancel-safe: a candidacy the dropped future may have won is given back in the background.
    async fn campaign(&self, id: &str, value: &str) -> Result<Box<dyn LeaderGuard>>;

    /// Campaigns once: the leadership if elected now, `None` if another candidate leads.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign), without `Contended`.
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    async fn try_campaign(&self, id: &str, value: &str) -> Result<Option<Box<dyn LeaderGuard>>>;

    /// Who leads now, if anyone.
    ///
    /// # Errors
    /// The backend's errors.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    async fn leader(&self) -> Result<Option<LeaderInfo>>;

    /// Every change of leader (and of its value), starting with the current one; `None` while nobody leads.
    fn observe(&self) -> BoxStream<'static, Result<Option<LeaderInfo>>>;
}

/// Proof of leading an election, until resigned, dropped or lost.
#[async_trait]
pub trait LeaderGuard: Send + Sync + Debug {
    /// The election's name.
    fn election(&self) -> &str;

    /// This leadership's term: strictly greater than every earlier leader's of this election while the backend's
    /// data survives. Pass it with every write the leader makes.
    fn term(&self) -> FencingToken;

    /// Until when this leader may act, by its own monotonic clock.
    fn valid_until(&self) -> Instant;

    /// Fires when the leadership is lost.
    fn lost_signal(&self) -> LostSignal;

    /// Whether the leadership is lost.
    fn is_lost(&self) -> bool {
        self.lost_signal().is_lost()
    }

    /// Replaces the leader's value, only while still the leader.
    ///
    /// # Errors
    /// [`NotLeader`](crate::LockError::NotLeader) when the leadership is lost; the backend's errors.
    ///
    /// # Cancel safety
    /// The value may or may not have been replaced; proclaim again.
    async fn proclaim(&self, value: &str) -> Result<()>;

    /// Resigns: observers see it, and a waiting candidate is elected.
    ///
    /// # Errors
    /// The backend's errors; the leadership then ends at its lease.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped resignation is finished in the background.
    async fn resign(self: Box<Self>) -> Result<ReleaseOutcome>;
}

#[async_trait]
impl DistributedElection for Election {
    fn name(&self) -> &str {
        Election::name(self)
    }
    async fn campaign(&self, id: &str, value: &str) -> Result<Box<dyn LeaderGuard>> {
        Ok(Box::new(Election::campaign(self, id, value).await?))
    }
    async fn try_campaign(&self, id: &str, value: &str) -> Result<Option<Box<dyn LeaderGuard>>> {
        Ok(Election::try_campaign(self, id, value).await?.map(|l| Box::new(l) as Box<dyn LeaderGuard>))
    }
    async fn leader(&self) -> Result<Option<LeaderInfo>> {
        Election::leader(self).await
    }
    fn observe(&self) -> BoxStream<'static, Result<Option<LeaderInfo>>> {
        Election::observe(self).boxed()
    }
}

#[async_trait]
impl LeaderGuard for Leadership {
    fn election(&self) -> &str {
        Leadership::election(self)
    }
    fn term(&self) -> FencingToken {
        Leadership::term(self)
    }
    fn valid_until(&self) -> Instant {
        Leadership::valid_until(self)
    }
    fn lost_signal(&self) -> LostSignal {
        Leadership::lost_signal(self)
    }
    async fn proclaim(&self, value: &str) -> Result<()> {
        Leadership::proclaim(self, value).await
    }
    async fn resign(self: Box<Self>) -> Result<ReleaseOutcome> {
        Leadership::resign(*self).await
    }
}

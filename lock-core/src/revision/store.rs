//! The raw interface a revisioned key-value store with leases and watches implements (etcd; the in-memory
//! [`MemoryRevisionStore`](crate::MemoryRevisionStore)): each method is one request to the store, so a backend is a
//! thin translation to its client, and the recipes (the queue lock, the election) are written once, in
//! [`revision`](crate::revision).
//!
//! The model is etcd's: every write stamps the store-wide **revision** (a counter that only grows while the store's
//! data survives); a key remembers the revision that **created** it until it is deleted (a put on an existing key
//! keeps it); a **lease** is granted with a TTL, kept alive by its holder, and deletes the keys attached to it when it
//! expires or is revoked; a **watch** reports a key's puts and deletes from a revision on, including the ones that
//! happened before it was created, unless that history was compacted.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::BoxStream;

use crate::error::Result;

/// A store-wide revision (etcd's `int64`; positive once anything was written).
pub type Revision = i64;

/// A lease id, as the store granted it (etcd's are positive `int64`s).
pub type LeaseId = i64;

/// One key as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: Vec<u8>,
    /// The revision that created it (kept by later puts).
    pub create_revision: Revision,
    /// The lease it is attached to (0: none).
    pub lease: LeaseId,
}

impl Entry {
    /// An entry (for backends building one from their client's type).
    pub fn new(key: impl Into<String>, value: impl Into<Vec<u8>>, create_revision: Revision, lease: LeaseId) -> Self {
        Entry { key: key.into(), value: value.into(), create_revision, lease }
    }
}

/// A granted lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// Its id.
    pub id: LeaseId,
    /// The TTL the store granted: the one asked for rounded up to the store's granularity, or raised to its minimum
    /// (etcd raises a TTL below `1.5 × election timeout` silently).
    pub ttl: Duration,
}

impl Lease {
    /// A lease (for backends).
    pub fn new(id: LeaseId, ttl: Duration) -> Self {
        Lease { id, ttl }
    }
}

/// What [`RevisionStore::enqueue`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// Whether the key was created now (`false`: it existed, and `mine` is what it holds).
    pub created: bool,
    /// The key's revision of creation: its place in the queue.
    pub create_revision: Revision,
    /// The first key under the queue's prefix by revision of creation (the holder), if any.
    pub first: Option<Entry>,
    /// The store's revision when the request was applied.
    pub revision: Revision,
}

impl Enqueued {
    /// What an enqueue found (for backends).
    pub fn new(created: bool, create_revision: Revision, first: Option<Entry>, revision: Revision) -> Self {
        Enqueued { created, create_revision, first, revision }
    }
}

/// Which end of a queue a [`Range`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Order {
    /// Oldest first (ascending revision of creation).
    FirstCreated,
    /// Newest first (descending revision of creation).
    LastCreated,
}

/// A read of the keys under a prefix, ordered by revision of creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Range<'a> {
    /// Every key starting with this.
    pub prefix: &'a str,
    /// Which end first.
    pub order: Order,
    /// At most this many keys (0: all).
    pub limit: usize,
    /// Only keys created at or before this revision (etcd's `max_create_revision`), when set.
    pub created_by: Option<Revision>,
}

impl<'a> Range<'a> {
    /// The first `limit` keys under `prefix` in `order`.
    pub fn new(prefix: &'a str, order: Order, limit: usize) -> Self {
        Range { prefix, order, limit, created_by: None }
    }

    /// Only the keys created at or before `revision`.
    pub fn created_by(mut self, revision: Revision) -> Self {
        self.created_by = Some(revision);
        self
    }
}

/// One change a watch reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A key was written (created, or its value or lease changed).
    Put(Entry),
    /// A key was deleted (by a delete, or because its lease ended), at `revision`.
    Delete {
        /// The key.
        key: String,
        /// The revision of the delete.
        revision: Revision,
    },
    /// The history the watch should have started from was compacted away: what changed before `revision` is lost,
    /// so the watcher reads the state again and watches from there.
    Compacted {
        /// The store's compaction point.
        revision: Revision,
    },
}

/// A revisioned key-value store with leases and watches: the raw interface under
/// [`RevisionLock`](crate::revision::RevisionLock) and [`RevisionElection`](crate::revision::RevisionElection).
///
/// Every method is one request (a transaction where the recipe needs several operations applied together); none
/// waits, retries or times out on its own: the recipes bound each call by their operation timeout and decide what
/// to retry. Errors are [`LockError`](crate::LockError)s as the store's client saw them: `Unavailable` for a store
/// that cannot be reached or has no leader, `Timeout`, `Auth` for refused credentials or permissions,
/// `InvalidArgument`, `Backend` for the rest.
#[async_trait]
pub trait RevisionStore: Send + Sync + Debug + 'static {
    /// The store's endpoints, as errors name them (`host:port`, comma-separated; never a credential).
    fn endpoints(&self) -> Option<&str> {
        None
    }

    /// The smallest TTL the store keeps as asked (etcd: its minimum lease TTL, whole seconds, found at connect).
    fn min_ttl(&self) -> Duration;

    /// The TTL a grant of `ttl` would keep: `ttl` rounded up to whole seconds (etcd's lease unit), at least
    /// [`min_ttl`](Self::min_ttl). A store with another unit says so here.
    fn ttl_for(&self, ttl: Duration) -> Duration {
        let whole = Duration::from_secs(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)));
        whole.max(self.min_ttl())
    }

    /// Grants a lease of `ttl` (the store may round it up, never down: [`Lease::ttl`] says what it granted).
    async fn grant(&self, ttl: Duration) -> Result<Lease>;

    /// Refreshes `lease` to the full TTL it was granted with: `false` when the lease is gone (expired or revoked).
    async fn keep_alive(&self, lease: LeaseId) -> Result<bool>;

    /// The time `lease` has left on the store's clock, `None` when it is gone.
    async fn time_to_live(&self, lease: LeaseId) -> Result<Option<Duration>>;

    /// Revokes `lease`, deleting every key attached to it. A lease already gone is not an error.
    async fn revoke(&self, lease: LeaseId) -> Result<()>;

    /// The queue recipe's first request, as one transaction: if `key` does not exist, put `value` at it under
    /// `lease`; either way read `key`'s revision of creation and the first key under `queue` by revision of
    /// creation.
    async fn enqueue(&self, key: &str, value: &[u8], lease: LeaseId, queue: &str) -> Result<Enqueued>;

    /// The keys `range` selects, and the store's revision when it read them.
    async fn range(&self, range: Range<'_>) -> Result<(Vec<Entry>, Revision)>;

    /// `key`, if it exists, and the store's revision when it read it.
    async fn get(&self, key: &str) -> Result<(Option<Entry>, Revision)>;

    /// Writes `value` at `key` under `lease` if `key` still has revision of creation `created` (the key keeps it):
    /// whether it did.
    async fn put_if_created(&self, key: &str, value: &[u8], created: Revision, lease: LeaseId) -> Result<bool>;

    /// Deletes `key` if it still has revision of creation `created`: whether it did.
    async fn delete_if_created(&self, key: &str, created: Revision) -> Result<bool>;

    /// The changes to `key` (or, with `prefix`, to every key starting with it) from revision `from` on, including
    /// those made before the watch was set up. The stream ends, or yields an error, when the watch breaks (a
    /// connection lost, a member restarting): the watcher reads the state again and watches anew.
    fn watch(&self, key: &str, prefix: bool, from: Revision) -> BoxStream<'static, Result<Change>>;
}

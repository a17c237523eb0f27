//! A [`RevisionStore`] in this process's memory, with etcd's semantics (revisions, revisions of creation kept by
//! puts, leases that delete their keys, watches that replay history from a revision): the recipes' unit tests and
//! doc examples run on it, and a framework's own tests can.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::stream::{self, BoxStream, StreamExt};

use crate::error::{LockError, Result};
use crate::revision::store::{Change, Enqueued, Entry, Lease, LeaseId, Order, Range, Revision, RevisionStore};

/// How many changes the store remembers for watches.
const HISTORY: usize = 1 << 16;

/// A [`RevisionStore`] in memory. A clone is the same store (another client of it, as a second process would be).
///
/// Leases count in milliseconds here (etcd's count in whole seconds: [`with_lease_unit`](Self::with_lease_unit)
/// makes this store do the same), and expire on the monotonic clock: an expired lease's keys are deleted, and their
/// deletions reported to watchers, as soon as anything looks (every request, and every watch that waits).
///
/// ```
/// use lock_core::revision::RevisionLock;
/// use lock_core::{LockOptions, MemoryRevisionStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let store = MemoryRevisionStore::new();
/// let lock = RevisionLock::new(store.clone());
/// let guard = lock.acquire("job", &LockOptions::new(Duration::from_secs(1))).await?;
/// assert_eq!(store.keys_under("wlp/job/").len(), 1);
/// guard.release().await?;
/// assert!(store.keys_under("wlp/job/").is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryRevisionStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: event_listener::Event,
    unit: Duration,
    min_ttl: Duration,
}

#[derive(Debug, Default)]
struct State {
    revision: Revision,
    compacted: Revision,
    next_lease: LeaseId,
    keys: BTreeMap<String, Entry>,
    leases: HashMap<LeaseId, (Duration, Instant)>,
    /// Every change, in revision order, after `compacted`.
    history: Vec<(Revision, Change)>,
    unavailable: bool,
    keep_alives_fail: bool,
}

impl Default for MemoryRevisionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryRevisionStore {
    /// An empty store whose leases count in milliseconds, at least [`MIN_TTL`](crate::MIN_TTL).
    pub fn new() -> Self {
        Self::with_lease_unit(Duration::from_millis(1), crate::options::MIN_TTL)
    }

    /// An empty store whose leases count in `unit`s (a TTL rounded up to one), at least `min_ttl` (etcd: whole
    /// seconds, at least `1.5 ×` its election timeout).
    pub fn with_lease_unit(unit: Duration, min_ttl: Duration) -> Self {
        let state = State { next_lease: 0x694d_0000, ..State::default() };
        MemoryRevisionStore {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                changed: event_listener::Event::new(),
                unit: unit.max(Duration::from_nanos(1)),
                min_ttl,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        let mut st = self.shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.expire(Instant::now()) {
            self.shared.changed.notify(usize::MAX);
        }
        st
    }

    /// The state for a request: an error while the store is "down".
    fn request(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.state();
        if st.unavailable {
            return Err(LockError::unavailable("the in-memory revision store is down (set_available(false))"));
        }
        Ok(st)
    }

    /// The keys under `prefix` (for tests).
    pub fn keys_under(&self, prefix: &str) -> Vec<Entry> {
        self.state()
            .keys
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// How many leases are alive (for tests: a cancelled acquire leaves none).
    pub fn leases(&self) -> usize {
        self.state().leases.len()
    }

    /// Makes every request fail with `Unavailable` (or work again), as a store that is down.
    pub fn set_available(&self, available: bool) {
        self.state().unavailable = !available;
        self.shared.changed.notify(usize::MAX);
    }

    /// Makes every keep-alive fail with `Unavailable` (or work again): leases then run out, as a holder's do when
    /// its keep-alives cannot reach the store.
    pub fn set_keep_alives_failing(&self, failing: bool) {
        self.state().keep_alives_fail = failing;
    }

    /// Drops the history before the current revision, as etcd's compaction does: a watch from before it is told
    /// [`Change::Compacted`].
    pub fn compact(&self) {
        let mut st = self.state();
        st.compacted = st.revision;
        st.history.clear();
    }

    /// Deletes `key` as an operator's `etcdctl del` would (for tests).
    pub fn delete(&self, key: &str) -> bool {
        let mut st = self.state();
        let deleted = st.delete(key);
        drop(st);
        self.shared.changed.notify(usize::MAX);
        deleted
    }

    /// Lets every lease run out now (for tests: the holders froze past their TTL).
    pub fn expire_all_leases(&self) {
        let mut st = self.state();
        let now = Instant::now();
        for (_, expires) in st.leases.values_mut() {
            *expires = now;
        }
        st.expire(now);
        drop(st);
        self.shared.changed.notify(usize::MAX);
    }
}

impl State {
    fn bump(&mut self) -> Revision {
        self.revision = self.revision.saturating_add(1);
        // Bounded history, as etcd's auto-compaction bounds its own: the older half goes.
        if self.history.len() >= HISTORY {
            let cut = self.history.len() / 2;
            self.compacted = self.history.get(cut.saturating_sub(1)).map_or(self.compacted, |(rev, _)| *rev);
            self.history.drain(..cut);
        }
        self.revision
    }

    fn delete(&mut self, key: &str) -> bool {
        if self.keys.remove(key).is_none() {
            return false;
        }
        let revision = self.bump();
        self.history.push((revision, Change::Delete { key: key.to_owned(), revision }));
        true
    }

    /// Ends the leases that ran out, with their keys: whether anything changed.
    fn expire(&mut self, now: Instant) -> bool {
        let ended: Vec<LeaseId> = self.leases.iter().filter(|(_, (_, at))| *at <= now).map(|(id, _)| *id).collect();
        for lease in &ended {
            self.end(*lease);
        }
        !ended.is_empty()
    }

    fn end(&mut self, lease: LeaseId) {
        self.leases.remove(&lease);
        let keys: Vec<String> = self.keys.values().filter(|e| e.lease == lease).map(|e| e.key.clone()).collect();
        for key in keys {
            self.delete(&key);
        }
    }

    fn put(&mut self, key: &str, value: &[u8], lease: LeaseId) {
        let revision = self.bump();
        let created = self.keys.get(key).map_or(revision, |e| e.create_revision);
        let entry = Entry::new(key, value, created, lease);
        self.keys.insert(key.to_owned(), entry.clone());
        self.history.push((revision, Change::Put(entry)));
    }

    fn select(&self, range: Range<'_>) -> Vec<Entry> {
        let mut found: Vec<Entry> = self
            .keys
            .range(range.prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(range.prefix))
            .map(|(_, e)| e.clone())
            .filter(|e| range.created_by.is_none_or(|max| e.create_revision <= max))
            .collect();
        found.sort_by_key(|e| e.create_revision);
        if range.order == Order::LastCreated {
            found.reverse();
        }
        if range.limit > 0 {
            found.truncate(range.limit);
        }
        found
    }
}

#[async_trait]
impl RevisionStore for MemoryRevisionStore {
    fn endpoints(&self) -> Option<&str> {
        Some("memory")
    }

    fn min_ttl(&self) -> Duration {
        self.shared.min_ttl
    }

    fn ttl_for(&self, ttl: Duration) -> Duration {
        let unit = self.shared.unit.as_nanos().max(1);
        let units = ttl.as_nanos().div_ceil(unit);
        let rounded = Duration::from_nanos(u64::try_from(units.saturating_mul(unit)).unwrap_or(u64::MAX));
        rounded.max(self.shared.min_ttl)
    }

    async fn grant(&self, ttl: Duration) -> Result<Lease> {
        let ttl = self.ttl_for(ttl);
        let mut st = self.request()?;
        st.next_lease = st.next_lease.saturating_add(1);
        let id = st.next_lease;
        st.leases.insert(id, (ttl, Instant::now() + ttl));
        Ok(Lease::new(id, ttl))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool> {
        let mut st = self.request()?;
        if st.keep_alives_fail {
            return Err(LockError::unavailable("keep-alives fail (set_keep_alives_failing(true))"));
        }
        Ok(st.leases.get_mut(&lease).map(|(ttl, expires)| *expires = Instant::now() + *ttl).is_some())
    }

    async fn time_to_live(&self, lease: LeaseId) -> Result<Option<Duration>> {
        let st = self.request()?;
        Ok(st.leases.get(&lease).map(|(_, expires)| expires.saturating_duration_since(Instant::now())))
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        let mut st = self.request()?;
        st.end(lease);
        drop(st);
        self.shared.changed.notify(usize::MAX);
        Ok(())
    }

    async fn enqueue(&self, key: &str, value: &[u8], lease: LeaseId, queue: &str) -> Result<Enqueued> {
        let mut st = self.request()?;
        if !st.leases.contains_key(&lease) {
            return Err(LockError::backend(format!("lease {lease:x} not found")));
        }
        let created = !st.keys.contains_key(key);
        if created {
            st.put(key, value, lease);
        }
        let mine = st.keys.get(key).map_or(0, |e| e.create_revision);
        let first = st.select(Range::new(queue, Order::FirstCreated, 1)).into_iter().next();
        let revision = st.revision;
        drop(st);
        self.shared.changed.notify(usize::MAX);
        Ok(Enqueued::new(created, mine, first, revision))
    }

    async fn range(&self, range: Range<'_>) -> Result<(Vec<Entry>, Revision)> {
        let st = self.request()?;
        Ok((st.select(range), st.revision))
    }

    async fn get(&self, key: &str) -> Result<(Option<Entry>, Revision)> {
        let st = self.request()?;
        Ok((st.keys.get(key).cloned(), st.revision))
    }

    async fn put_if_created(&self, key: &str, value: &[u8], created: Revision, lease: LeaseId) -> Result<bool> {
        let mut st = self.request()?;
        if st.keys.get(key).map_or(0, |e| e.create_revision) != created {
            return Ok(false);
        }
        if !st.leases.contains_key(&lease) {
            return Err(LockError::backend(format!("lease {lease:x} not found")));
        }
        st.put(key, value, lease);
        drop(st);
        self.shared.changed.notify(usize::MAX);
        Ok(true)
    }

    async fn delete_if_created(&self, key: &str, created: Revision) -> Result<bool> {
        let mut st = self.request()?;
        if st.keys.get(key).map(|e| e.create_revision) != Some(created) {
            return Ok(false);
        }
        st.delete(key);
        drop(st);
        self.shared.changed.notify(usize::MAX);
        Ok(true)
    }

    fn watch(&self, key: &str, prefix: bool, from: Revision) -> BoxStream<'static, Result<Change>> {
        let watched = move |k: &str, key: &str| if prefix { k.starts_with(key) } else { k == key };
        stream::unfold((self.clone(), key.to_owned(), from), move |(store, key, from)| async move {
            loop {
                let (listener, next_expiry) = {
                    let st = store.state();
                    if st.unavailable {
                        // A broken watch: the stream ends, and the watcher reads again.
                        return None;
                    }
                    if from <= st.compacted {
                        let revision = st.compacted;
                        return Some((
                            Ok(Change::Compacted { revision }),
                            (store.clone(), key, revision.saturating_add(1)),
                        ));
                    }
                    let hit = st.history.iter().find(|(rev, change)| {
                        *rev >= from
                            && match change {
                                Change::Put(e) => watched(&e.key, &key),
                                Change::Delete { key: k, .. } => watched(k, &key),
                                Change::Compacted { .. } => false,
                            }
                    });
                    if let Some((rev, change)) = hit {
                        let next = rev.saturating_add(1);
                        return Some((Ok(change.clone()), (store.clone(), key, next)));
                    }
                    let listener = store.shared.changed.listen();
                    (listener, st.leases.values().map(|(_, at)| *at).min())
                };
                let wait =
                    next_expiry.map_or(Duration::from_secs(3600), |at| at.saturating_duration_since(Instant::now()));
                let sleep = std::pin::pin!(crate::rt::sleep(wait.max(Duration::from_millis(1))));
                futures_util::future::select(listener, sleep).await;
            }
        })
        .boxed()
    }
}

//! An in-process backend: the same semantics as the Redis backends, for single-process programs and for
//! framework authors' unit tests.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::Result;
use crate::notify::ReleaseHub;
use crate::resource::LockKeys;
use crate::store::{AcquireReply, AcquireRequest, ExtendReply, LockStore, ReleaseOutcome};
use crate::token::Token;

/// How many operations between sweeps of expired entries (so abandoned keys do not accumulate).
const SWEEP_EVERY: u64 = 1024;

/// A [`LockStore`] in this process's memory.
///
/// Expiry uses the monotonic clock. Fencing counters start at 1 per store and live as long as it does: they are
/// meaningful only inside this process, which is also the only place the lock is. Releases wake local waiters
/// directly.
///
/// ```
/// use lock_core::{Lock, LockOptions, MemoryStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let store = MemoryStore::new();
/// let lock = Lock::new(store.clone());
/// let g = lock.acquire("job", &LockOptions::new(Duration::from_secs(1))).await?;
/// assert_eq!(store.held_count(), 1);
/// g.release().await?;
/// assert_eq!(store.held_count(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    hub: Arc<ReleaseHub>,
}

#[derive(Default)]
struct State {
    locks: HashMap<String, Entry>,
    fences: HashMap<String, u64>,
    operations: u64,
}

struct Entry {
    token: Token,
    expires: Instant,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore { state: Arc::new(Mutex::new(State::default())), hub: ReleaseHub::local() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the maps consistent, so a poisoned lock is still usable.
        let mut st = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        st.operations += 1;
        if st.operations.is_multiple_of(SWEEP_EVERY) {
            let now = Instant::now();
            st.locks.retain(|_, e| e.expires > now);
        }
        st
    }

    /// Number of unexpired locks (for tests: "no keys left behind").
    pub fn held_count(&self) -> usize {
        let now = Instant::now();
        self.state().locks.values().filter(|e| e.expires > now).count()
    }

    /// The owner token the lock on `keys` holds, if held (for tests: whose key was left behind).
    pub fn holder(&self, keys: &LockKeys) -> Option<Token> {
        let now = Instant::now();
        self.state().locks.get(keys.lock()).filter(|e| e.expires > now).map(|e| e.token.clone())
    }

    /// Remaining TTL of the lock on `keys`, if held (for tests).
    pub fn ttl_of(&self, keys: &LockKeys) -> Option<Duration> {
        let now = Instant::now();
        self.state().locks.get(keys.lock()).filter(|e| e.expires > now).map(|e| e.expires - now)
    }
}

/// When a key set at `now` with `ttl` expires; a TTL too long to represent (a direct caller's `Duration::MAX`) is
/// capped at the longest TTL a lock accepts rather than overflowing.
fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl).or_else(|| now.checked_add(crate::MAX_TTL)).unwrap_or(now)
}

/// The live entry under `key`, dropping it if expired.
fn live<'a>(st: &'a mut State, key: &str, now: Instant) -> Option<&'a mut Entry> {
    if st.locks.get(key).is_some_and(|e| e.expires <= now) {
        st.locks.remove(key);
    }
    st.locks.get_mut(key)
}

#[async_trait]
impl LockStore for MemoryStore {
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply> {
        let now = Instant::now();
        let mut st = self.state();
        if let Some(entry) = live(&mut st, request.keys.lock(), now) {
            return Ok(AcquireReply::Held { ttl: Some(entry.expires - now) });
        }
        st.locks.insert(
            request.keys.lock().to_owned(),
            Entry { token: request.token.clone(), expires: expiry(now, request.ttl) },
        );
        let fence = request.fencing.then(|| {
            let counter = st.fences.entry(request.keys.fence().to_owned()).or_insert(0);
            *counter = (*counter + 1).max(request.fence_floor.unwrap_or(0));
            *counter
        });
        drop(st);
        if let Some(ack) = request.replicas {
            // An in-process store has no replicas.
            ack.check(0)?;
        }
        Ok(AcquireReply::Acquired { fence })
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<ReleaseOutcome> {
        let now = Instant::now();
        let mut st = self.state();
        let outcome = match live(&mut st, keys.lock(), now) {
            None => ReleaseOutcome::AlreadyExpired,
            Some(entry) if entry.token != *token => ReleaseOutcome::OwnedByOther,
            Some(_) => {
                st.locks.remove(keys.lock());
                ReleaseOutcome::Released
            }
        };
        Ok(outcome)
    }

    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<ExtendReply> {
        let now = Instant::now();
        let mut st = self.state();
        Ok(match live(&mut st, keys.lock(), now) {
            None => ExtendReply::Absent,
            Some(entry) if entry.token != *token => ExtendReply::OwnedByOther,
            Some(entry) => {
                entry.expires = expiry(now, ttl);
                ExtendReply::Extended
            }
        })
    }

    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> Result<bool> {
        let now = Instant::now();
        let mut st = self.state();
        let ours = live(&mut st, keys.lock(), now).is_some_and(|e| e.token == *token);
        if ours {
            let counter = st.fences.entry(keys.fence().to_owned()).or_insert(0);
            *counter = (*counter).max(at_least);
        }
        Ok(ours)
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        Some(&self.hub)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("held", &self.held_count()).finish()
    }
}

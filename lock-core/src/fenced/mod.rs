//! Fenced writes: a write to your own Redis keys that the server refuses when a newer holder has written.
//!
//! A lease cannot stop a holder that pauses after its last check (a GC pause, `SIGSTOP`, a slow link): its lease
//! expires, another process takes the lock, and the old holder wakes up and writes. The cure is a resource that
//! checks the fencing token. A [`FencedResource`] is such a resource on Redis: a **guard** key remembers the
//! highest fence that wrote through it, and every write presents its holder's fence and runs in one script with the
//! check. A fence at least the guard's is applied and becomes the guard's; a lower one is refused with
//! [`LockError::StaleFence`] and changes nothing.
//!
//! ```
//! use lock_core::fenced::FencedResource;
//! use lock_core::{Lock, LockError, LockOptions, MemoryStore};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! let store = MemoryStore::new();
//! let lock = Lock::new(store.clone());
//! let orders = FencedResource::new(store, "{orders}:total")?; // guard: {orders}:fence
//!
//! let options = LockOptions::new(Duration::from_secs(5));
//! let old = lock.acquire("orders", &options).await?;
//! let old_fence = old.fence().await?;
//! old.release().await?; // ... say this holder paused here instead, and its lease ran out ...
//! let new = lock.acquire("orders", &options).await?;
//! let new_fence = new.fence().await?;
//!
//! let total = orders.get(new_fence, "{orders}:total").await?; // a read records the fence too
//! assert_eq!(total, None);
//! orders.set(new_fence, "{orders}:total", "42").await?;
//! // The old holder wakes up and writes: refused, and the total stays 42.
//! match orders.set(old_fence, "{orders}:total", "41").await {
//!     Err(LockError::StaleFence { presented, current }) => assert!(presented < current),
//!     other => panic!("a stale write went through: {other:?}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Choosing the guard
//! One guard per thing a lock protects, written by every write to it: once a holder has written any of its keys,
//! an older holder can write none of them (a guard per key would let the old holder overwrite a key the new one
//! only read). [`FencedResource::new`] derives it from a data key as every language does ([`guard_for`], WIRE.md
//! 16.1), in the data's Redis Cluster slot: keys `{orders}:total` and `{orders}:items` share guard
//! `{orders}:fence`; a key without a hash tag, such as `balance`, gets `{balance}:fence`, which hashes as `balance`
//! does. So a Python or Node writer of the same data finds the same guard without agreeing on a name.
//! [`FencedResource::with_guard`] names one instead (all writers must then name the same). On Redis Cluster a
//! write to a key in another slot than the guard's is refused before any I/O.
//!
//! The guard never expires: it is your data's history, and a guard that vanished would let a stale holder write
//! once more. Delete it with the data. On a restart without persistence it goes with the data it guards; after a
//! failover it travels with it too (the script's writes replicate as one unit), so data and guard always agree.
//!
//! # Permissions
//! The script runs as the store's user, on your keys: with Redis ACLs that user needs `EVALSHA` and `EVAL`, and on
//! the guard's and the data's keys `GET` and `SET` (the guard) plus the commands of the writes it makes (`HSET`,
//! `DEL`, `INCRBY`, `RPUSH`, `XADD`). The lock's own minimal rules do not cover data keys; a refused write is
//! [`LockError::Auth`] and writes nothing.
//!
//! # Which fence
//! Every primitive hands one out: [`Guard::fence`](crate::Guard::fence) (drawn at the first call, or with the grant),
//! a multi-lock's per resource, a permit's (one guard
//! per slot: the permits of different slots are meant to write side by side), a write lock's, an election's term,
//! a job run's. Fences of one lock only: a guard compares numbers, and another lock's are unrelated to them.
//!
//! # Observe right after acquiring
//! A new holder's first step should be [`observe`](FencedResource::observe) (or a read through
//! [`get`](FencedResource::get)): it records the new fence at once, so an older holder that paused is refused from
//! that moment rather than only from the new holder's first write, which may come much later.
//!
//! # Outside Redis
//! The same rule works in any store that can compare and write in one step. SQL:
//! `UPDATE accounts SET balance = $3, fence = $2 WHERE id = $1 AND fence <= $2`, where zero rows updated means a
//! newer holder has written (the `examples` crate runs this against SQLite). An object store: write only if the
//! fence in the object's metadata is not above yours, with the store's conditional put.
//!
//! # Errors and retries
//! A timed-out or cut-off write may have been applied. Retrying with the same fence is safe for
//! [`set`](FencedResource::set), [`hset`](FencedResource::hset), [`del`](FencedResource::del), the reads
//! ([`get`](FencedResource::get), [`hget`](FencedResource::hget), [`hgetall`](FencedResource::hgetall)) and
//! [`observe`](FencedResource::observe) (applying them twice is applying them once), not for
//! [`incr_by`](FencedResource::incr_by), [`rpush`](FencedResource::rpush), [`xadd`](FencedResource::xadd) or
//! [`get_set`](FencedResource::get_set).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::lock::DEFAULT_OPERATION_TIMEOUT;
use crate::error::{LockError, Result};
use crate::seam::store::LockStore;
use crate::seam::transport::{Call, Reply, Topology};
use crate::token::FencingToken;

pub use crate::seam::scripts::FENCED_WRITE;

/// The longest key name a fenced write accepts, in bytes.
pub const MAX_KEY: usize = 16 * 1024;

/// The most fields, values or keys one fenced write takes (each is a script argument).
pub const MAX_ITEMS: usize = 1024;

/// Keys of yours that only the holder of the newest fence may write: see the [module docs](self).
///
/// Cheap to clone (clones share the store).
#[derive(Clone)]
pub struct FencedResource {
    store: Arc<dyn LockStore>,
    guard: Arc<str>,
    operation_timeout: Duration,
}

impl fmt::Debug for FencedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedResource")
            .field("guard", &self.guard)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

/// One write, as the script takes it.
struct Write<'a> {
    operation: &'static str,
    name: &'static str,
    keys: &'a [&'a str],
    args: Vec<&'a str>,
}

impl FencedResource {
    /// The resource of the data at `data_key` (and of every key that shares its hash tag) on `store`, guarded by
    /// the guard every language derives for it ([`guard_for`]: `{orders}:total` → `{orders}:fence`, `balance` →
    /// `{balance}:fence`), so that writers in every language protect each other without agreeing on a name.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a key [`guard_for`] refuses (empty, longer than [`MAX_KEY`], or a `}`
    /// without a hash tag: name a guard with [`with_guard`](Self::with_guard)).
    pub fn new(store: impl LockStore, data_key: &str) -> Result<Self> {
        Self::from_arc(Arc::new(store), data_key)
    }

    /// As [`new`](Self::new), on a shared store (for instance [`Lock::stores`](crate::Lock::stores)' first).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn from_arc(store: Arc<dyn LockStore>, data_key: &str) -> Result<Self> {
        Self::from_arc_with_guard(store, &guard_for(data_key)?)
    }

    /// The resource whose guard is the key `guard` on `store`, named by the caller: every writer of the data, in
    /// every language, must then name the same guard (WIRE.md 16.1). Prefer [`new`](Self::new).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty guard name or one longer than [`MAX_KEY`].
    pub fn with_guard(store: impl LockStore, guard: &str) -> Result<Self> {
        Self::from_arc_with_guard(Arc::new(store), guard)
    }

    /// As [`with_guard`](Self::with_guard), on a shared store.
    ///
    /// # Errors
    /// As [`with_guard`](Self::with_guard).
    pub fn from_arc_with_guard(store: Arc<dyn LockStore>, guard: &str) -> Result<Self> {
        check_key(guard)?;
        Ok(FencedResource { store, guard: guard.into(), operation_timeout: DEFAULT_OPERATION_TIMEOUT })
    }

    /// Bounds each call to the store (default [`DEFAULT_OPERATION_TIMEOUT`]).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The guard's key.
    pub fn guard(&self) -> &str {
        &self.guard
    }

    /// `GET key`, if `fence` is not stale, recording `fence`: from then on no older holder can change what this
    /// one read. A read-modify-write under a lock reads with this and writes with [`set`](Self::set); a read that
    /// records nothing would let an older holder's write land between this holder's read and its write, and be
    /// overwritten (a lost update the guard cannot see).
    ///
    /// # Errors
    /// As [`set`](Self::set).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the fence recorded; retrying it is safe.
    pub async fn get(&self, fence: FencingToken, key: &str) -> Result<Option<String>> {
        let keys = [key];
        let write = Write { operation: "fenced-get", name: "get", keys: &keys, args: Vec::new() };
        optional_text(self.apply(fence, write).await?)
    }

    /// `SET key value`, if `fence` is not stale.
    ///
    /// # Errors
    /// [`LockError::StaleFence`] when a newer fence has written (nothing changed); [`LockError::WrongType`] when the
    /// guard or `key` holds a value of another type; [`LockError::InvalidArgument`] for a bad key (see
    /// [`MAX_KEY`]) or, on Redis Cluster, a key outside the guard's slot, before any I/O; the store's errors.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the write applied; retrying it with the same fence is safe.
    pub async fn set(&self, fence: FencingToken, key: &str, value: &str) -> Result<()> {
        let keys = [key];
        self.apply(fence, Write { operation: "fenced-set", name: "set", keys: &keys, args: vec![value] })
            .await
            .map(drop)
    }

    /// `SET key value GET`, if `fence` is not stale: the value it replaced, `None` when there was none.
    ///
    /// # Errors
    /// As [`set`](Self::set).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the write applied; a retry then returns the value it wrote.
    pub async fn get_set(&self, fence: FencingToken, key: &str, value: &str) -> Result<Option<String>> {
        let keys = [key];
        let write = Write { operation: "fenced-get-set", name: "get-set", keys: &keys, args: vec![value] };
        optional_text(self.apply(fence, write).await?)
    }

    /// `HGET key field`, if `fence` is not stale, recording `fence` (as [`get`](Self::get)): the read of a
    /// read-modify-write of a hash.
    ///
    /// # Errors
    /// As [`set`](Self::set).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the fence recorded; retrying it is safe.
    pub async fn hget(&self, fence: FencingToken, key: &str, field: &str) -> Result<Option<String>> {
        let keys = [key];
        let write = Write { operation: "fenced-hget", name: "hget", keys: &keys, args: vec![field] };
        optional_text(self.apply(fence, write).await?)
    }

    /// `HGETALL key`, if `fence` is not stale, recording `fence` (as [`get`](Self::get)): every field and value,
    /// in the server's order.
    ///
    /// # Errors
    /// As [`set`](Self::set).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the fence recorded; retrying it is safe.
    pub async fn hgetall(&self, fence: FencingToken, key: &str) -> Result<Vec<(String, String)>> {
        let keys = [key];
        let write = Write { operation: "fenced-hgetall", name: "hgetall", keys: &keys, args: Vec::new() };
        let reply = self.apply(fence, write).await?;
        let Reply::Array(items) = &reply else { return Err(unexpected(&reply)) };
        let texts: Option<Vec<String>> = items.iter().map(Reply::to_text_lossy).collect();
        let texts = texts.filter(|t| t.len() % 2 == 0).ok_or_else(|| unexpected(&reply))?;
        let mut pairs = Vec::with_capacity(texts.len() / 2);
        let mut texts = texts.into_iter();
        while let (Some(field), Some(value)) = (texts.next(), texts.next()) {
            pairs.push((field, value));
        }
        Ok(pairs)
    }

    /// `HSET key field value …`, if `fence` is not stale: how many fields were new.
    ///
    /// # Errors
    /// As [`set`](Self::set); [`LockError::InvalidArgument`] for no fields or more than [`MAX_ITEMS`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the write applied; retrying it with the same fence is safe.
    pub async fn hset(&self, fence: FencingToken, key: &str, fields: &[(&str, &str)]) -> Result<u64> {
        check_items(fields.len())?;
        let keys = [key];
        let args = fields.iter().flat_map(|(field, value)| [*field, *value]).collect();
        let reply = self.apply(fence, Write { operation: "fenced-hset", name: "hset", keys: &keys, args }).await?;
        count(&reply)
    }

    /// `DEL key …`, if `fence` is not stale: how many keys existed.
    ///
    /// # Errors
    /// As [`set`](Self::set); [`LockError::InvalidArgument`] for no keys or more than [`MAX_ITEMS`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the write applied; retrying it with the same fence is safe.
    pub async fn del(&self, fence: FencingToken, keys: &[&str]) -> Result<u64> {
        check_items(keys.len())?;
        let reply = self.apply(fence, Write { operation: "fenced-del", name: "del", keys, args: Vec::new() }).await?;
        count(&reply)
    }

    /// `INCRBY key by`, if `fence` is not stale: the new value.
    ///
    /// # Errors
    /// As [`set`](Self::set); a key that holds no integer is the store's error, and nothing changes.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the increment applied: do not retry it blindly.
    pub async fn incr_by(&self, fence: FencingToken, key: &str, by: i64) -> Result<i64> {
        let keys = [key];
        let by = by.to_string();
        let write = Write { operation: "fenced-incrby", name: "incrby", keys: &keys, args: vec![by.as_str()] };
        let reply = self.apply(fence, write).await?;
        reply.as_int().ok_or_else(|| unexpected(&reply))
    }

    /// `RPUSH key value …` (append to a list), if `fence` is not stale: the list's new length.
    ///
    /// # Errors
    /// As [`set`](Self::set); [`LockError::InvalidArgument`] for no values or more than [`MAX_ITEMS`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the values appended: do not retry it blindly.
    pub async fn rpush(&self, fence: FencingToken, key: &str, values: &[&str]) -> Result<u64> {
        check_items(values.len())?;
        let keys = [key];
        let write = Write { operation: "fenced-rpush", name: "rpush", keys: &keys, args: values.to_vec() };
        count(&self.apply(fence, write).await?)
    }

    /// `XADD key * field value …` (append an entry to a stream, its ID chosen by the server), if `fence` is not
    /// stale: the new entry's ID. Consumers of the stream then see only entries of holders that were current when
    /// they wrote, in fence order; put the fence in a field when they need to tell holders apart.
    ///
    /// # Errors
    /// As [`set`](Self::set); [`LockError::InvalidArgument`] for no fields or more than [`MAX_ITEMS`].
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the entry appended: do not retry it blindly (a retry appends a
    /// second entry; give entries an idempotency field if consumers must drop duplicates).
    ///
    /// ```
    /// # use lock_core::fenced::FencedResource;
    /// # use lock_core::{Lock, LockOptions, MemoryStore};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let store = MemoryStore::new();
    /// let lock = Lock::new(store.clone());
    /// let events = FencedResource::new(store, "{orders}:events")?;
    /// let guard = lock.acquire("orders", &LockOptions::new(Duration::from_secs(5))).await?;
    /// let fence = guard.fence().await?;
    /// let fence_text = fence.get().to_string();
    /// let id = events.xadd(fence, "{orders}:events", &[("event", "shipped"), ("fence", &fence_text)]).await?;
    /// assert!(id.contains('-'), "a stream entry ID: {id}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn xadd(&self, fence: FencingToken, key: &str, fields: &[(&str, &str)]) -> Result<String> {
        check_items(fields.len())?;
        let keys = [key];
        let args = fields.iter().flat_map(|(field, value)| [*field, *value]).collect();
        let reply = self.apply(fence, Write { operation: "fenced-xadd", name: "xadd", keys: &keys, args }).await?;
        reply.to_text_lossy().ok_or_else(|| unexpected(&reply))
    }

    /// Records `fence` without writing, if it is not stale. A holder that reads before it writes calls this
    /// first: from then on no older holder can write what it read.
    ///
    /// # Errors
    /// [`LockError::StaleFence`] when a newer fence has written; [`LockError::WrongType`] for a guard of another
    /// type; the store's errors.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the fence recorded; retrying it is safe.
    pub async fn observe(&self, fence: FencingToken) -> Result<()> {
        let write = Write { operation: "fenced-observe", name: "observe", keys: &[], args: Vec::new() };
        self.apply(fence, write).await.map(drop)
    }

    /// The highest fence this resource has accepted, `None` before the first write.
    ///
    /// # Errors
    /// [`LockError::WrongType`] for a guard of another type; the store's errors.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn current(&self) -> Result<Option<FencingToken>> {
        let keys = [&*self.guard];
        let call = Call::plain("fenced-current", "GET", &keys, &[]);
        let ran = crate::rt::timeout("fenced-current", self.operation_timeout, self.store.call(call)).await??;
        match &ran.reply {
            Reply::Nil => Ok(None),
            reply => {
                reply.as_text().and_then(parse_fence).map(|fence| Some(FencingToken::new(fence))).ok_or_else(|| {
                    LockError::WrongType {
                        key: self.guard.to_string(),
                        source: format!("fence guard {} holds a value that is not a fence", self.guard).into(),
                    }
                })
            }
        }
    }

    async fn apply(&self, fence: FencingToken, write: Write<'_>) -> Result<Reply> {
        let operation = write.name;
        let result = self.apply_unrecorded(fence, write).await;
        crate::telemetry::fenced_write(&self.guard, operation, &result);
        result
    }

    async fn apply_unrecorded(&self, fence: FencingToken, write: Write<'_>) -> Result<Reply> {
        for key in write.keys {
            check_key(key)?;
            if *key == &*self.guard {
                return Err(LockError::invalid(format!("a fenced write to its own guard {key:?}")));
            }
        }
        if self.store.topology() == Topology::Cluster {
            let slot = crate::resource::slot(&self.guard);
            if let Some(key) = write.keys.iter().find(|key| crate::resource::slot(key) != slot) {
                return Err(LockError::invalid(format!(
                    "key {key:?} is in another Redis Cluster slot than its fence guard {:?}: give them one hash tag",
                    self.guard
                )));
            }
        }
        let presented = fence.get().to_string();
        let mut keys = Vec::with_capacity(write.keys.len().saturating_add(1));
        keys.push(&*self.guard);
        keys.extend_from_slice(write.keys);
        let mut args = Vec::with_capacity(write.args.len().saturating_add(2));
        args.push(presented.as_str());
        args.push(write.name);
        args.extend_from_slice(&write.args);
        let call = Call::script(write.operation, &FENCED_WRITE, &keys, &args);
        let ran = crate::rt::timeout(write.operation, self.operation_timeout, self.store.call(call)).await??;
        match ran.reply {
            Reply::Array(items) => {
                let mut items = items.into_iter();
                match (items.next().as_ref().and_then(Reply::as_int), items.next(), items.next()) {
                    (Some(1), Some(reply), None) => Ok(reply),
                    (Some(0), Some(current), None) => {
                        let current = current.as_text().and_then(parse_fence);
                        match current {
                            Some(current) => Err(LockError::StaleFence { presented: fence.get(), current }),
                            None => Err(LockError::backend(format!(
                                "unexpected guard in the fenced-write script's refusal: {current:?}"
                            ))),
                        }
                    }
                    _ => Err(LockError::backend("unexpected reply to the fenced-write script")),
                }
            }
            other => Err(unexpected(&other)),
        }
    }
}

/// The guard of the data at `data_key`, as every language derives it (WIRE.md 16.1): in the key's Redis Cluster
/// slot, one per hash tag, so every key of one piece of data (`{orders}:total`, `{orders}:items`) shares it.
///
/// - A key with a hash tag `t` (the bytes between its first `{` and the first `}` after it, when there are any):
///   `{t}:fence`.
/// - A key without one and without `}`: `{<key>}:fence`, whose tag is the whole key, so it hashes as the key does.
/// - Any other key (a `}` without a tag before it, as in `a}b` or `{}x`) has no guard in its slot this way:
///   refused; name one with [`FencedResource::with_guard`].
///
/// ```
/// use lock_core::fenced::guard_for;
///
/// assert_eq!(guard_for("{orders}:total").unwrap(), "{orders}:fence");
/// assert_eq!(guard_for("{orders}:items").unwrap(), "{orders}:fence");
/// assert_eq!(guard_for("balance").unwrap(), "{balance}:fence");
/// assert!(guard_for("a}b").is_err());
/// ```
///
/// # Errors
/// [`LockError::InvalidArgument`] for an empty key, one longer than [`MAX_KEY`], or one with no guard in its slot.
pub fn guard_for(data_key: &str) -> Result<String> {
    check_key(data_key)?;
    let tag = data_key.find('{').and_then(|open| {
        let rest = &data_key[open + 1..];
        rest.find('}').map(|close| &rest[..close]).filter(|tag| !tag.is_empty())
    });
    match tag {
        Some(tag) => Ok(format!("{{{tag}}}:fence")),
        None if !data_key.contains('}') => Ok(format!("{{{data_key}}}:fence")),
        None => Err(LockError::invalid(format!(
            "key {data_key:?} has a '}}' but no hash tag, so no guard derived from it shares its Redis Cluster slot: \
             name one with FencedResource::with_guard"
        ))),
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(LockError::invalid(format!("a fenced key's name must be 1 to {MAX_KEY} bytes")));
    }
    Ok(())
}

fn check_items(n: usize) -> Result<()> {
    if n == 0 || n > MAX_ITEMS {
        return Err(LockError::invalid(format!("a fenced write takes 1 to {MAX_ITEMS} items")));
    }
    Ok(())
}

/// A fence as the guard holds it: a decimal `u64`.
fn parse_fence(text: &str) -> Option<u64> {
    text.parse().ok()
}

fn optional_text(reply: Reply) -> Result<Option<String>> {
    match reply {
        Reply::Nil => Ok(None),
        reply => reply.to_text_lossy().map(Some).ok_or_else(|| unexpected(&reply)),
    }
}

fn count(reply: &Reply) -> Result<u64> {
    reply.as_int().and_then(|n| u64::try_from(n).ok()).ok_or_else(|| unexpected(reply))
}

fn unexpected(reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to the fenced-write script: {reply:?}"))
}

#[cfg(test)]
mod tests;

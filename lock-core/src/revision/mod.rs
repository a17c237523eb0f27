//! Locks and elections on a consensus store (etcd), by etcd's own recipes, written once over the small
//! [`RevisionStore`](crate::backend::RevisionStore) interface that `lock-etcd` translates to etcd's client (and
//! [`MemoryRevisionStore`] implements in memory).
//!
//! ```
//! use lock_core::revision::RevisionLock;
//! use lock_core::{DistributedLock, LockOptions, MemoryRevisionStore};
//! use std::{sync::Arc, time::Duration};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! // With lock-etcd: `RevisionLock::new(lock_etcd::EtcdStore::connect(&["127.0.0.1:2379"]).await?)`.
//! let lock: Arc<dyn DistributedLock> = Arc::new(RevisionLock::new(MemoryRevisionStore::new()));
//! let guard = lock.acquire("invoice/42", &LockOptions::new(Duration::from_secs(5))).await?;
//! println!("fence {}", guard.fence().await?);
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The keys are etcd's
//! A lock (or an election) on `N` is a queue of keys `<prefix><N>/<lease id in hex>`, one per contender, each put
//! under the contender's lease; the first by revision of creation holds (leads); a contender behind watches the
//! deletion of the one just ahead of it. These are the keys of etcd's `concurrency.Mutex` and `concurrency.Election`
//! (Go), `etcdctl lock` and `etcdctl elect`, and the server's lock service, so each excludes the others both ways:
//! our lock `N` under the default prefix `wlp/` is `etcdctl lock wlp/N`; with `with_key_prefix("")` it is
//! `etcdctl lock N`. A `/` in a name is written `%2F` (etcd's recipe reads a queue as every key under its prefix,
//! so `a`'s queue would otherwise hold `a/b`'s contenders). The lock's key holds its 128-bit owner token;
//! `etcdctl lock` writes an empty value, which holds the lock just as well.
//!
//! # What we chose, and why
//! - **One lease per acquisition** (etcd's `Session` shares one per process): each lock keeps the TTL it was
//!   asked for and loses its lease alone; a cancelled acquire revokes its own lease and key without touching the
//!   process's other locks; two acquisitions of one name in one process are two contenders, never one key held
//!   twice. It costs a request more per acquisition (the grant).
//! - **TTLs are rounded up, not refused**: etcd counts leases in whole seconds and raises a TTL below its minimum
//!   (`1.5 ×` the election timeout, 2 s by default) silently. A framework passes the same TTL to every backend, and
//!   refusing 500 ms here would break code that works on Redis for a choice that costs no safety: the guard's
//!   validity is counted from what the store granted ([`Lease::ttl`](crate::backend::Lease)), never from what was
//!   asked, and only a crashed holder blocks longer. [`Capabilities::min_ttl`](crate::Capabilities) says what
//!   the store keeps as asked.
//! - **Validity** is counted on the local monotonic clock from the send instant of the grant or keep-alive whose
//!   reply carried the TTL: `ttl − elapsed − drift`. A keep-alive that fails (no reply within the validity left, a
//!   lease the store no longer has) and a key deleted while its lease lives (`etcdctl del`) turn the lost signal;
//!   a lock without auto-renewal keeps its lease alive while it waits, then lets it run out at its TTL.
//! - **After waiting, a contender checks that its own key is still there** (etcd's fix for Jepsen's finding on
//!   3.4.3, which Debian's etcd 3.4.23 does not have); a contender whose lease ran out joins again.
//! - **Release deletes the key only if it is still ours by its revision of creation** (the fenced delete etcd's
//!   upstream #22082 proposes), then revokes the lease.
//! - **The fencing token is the key's revision of creation**, which etcd's users fence with
//!   (`Compare(CreateRevision(key), "=", rev)`): strictly increasing per name while a quorum's data survives. A
//!   single member restarted with an emptied data directory, or a cluster rebuilt from empty ones, starts its
//!   revisions again at 1, and fences go back: a backup restored, or the data kept, keeps them (FAULTS.md has the
//!   test that shows it).
//! - **What does not fit**: a read-write lock, a semaphore, Redlock, and guarded writes on Redis are this
//!   library's Redis scripts; they take a Redis [`Lock`](crate::Lock) and so cannot be built on a
//!   `RevisionLock`. Options that mean something only on Redis (a replica acknowledgement) are refused with
//!   [`Unsupported`](crate::LockError::Unsupported) before any I/O; a fair queue is what etcd's queue is anyway.
//!
//! # Where the recipes live
//! Here, in lock-core, over [`RevisionStore`](crate::backend::RevisionStore): the algorithm (queueing, waiting,
//! the post-wait check, validity, cancel safety) is written once, proven on the in-memory store by the same suites
//! and on etcd by lock-etcd's, and a second consensus backend would be a translation of a dozen requests, as a Redis
//! backend is of `ScriptStore`.

mod election;
mod lock;
mod memory;
mod names;
mod queue;
mod session;
pub(crate) mod store;

pub use election::{RevisionElection, RevisionLeadership};
pub use lock::{RevisionGuard, RevisionLock};
pub use memory::MemoryRevisionStore;
pub use names::DEFAULT_PREFIX;

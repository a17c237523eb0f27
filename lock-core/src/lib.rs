//! Traits and client-independent algorithms for correct distributed locks on Redis.
//!
//! `lock-core` holds everything that does not depend on a Redis client, for two audiences in two places:
//!
//! - **the crate root** holds what an application or a framework writes: the traits [`DistributedLock`] and
//!   [`LockGuard`] (object safe: hold an `Arc<dyn DistributedLock>` and swap backends at runtime), the [`Lock`] and
//!   every primitive on the same engine, their options, guards, errors and operations;
//! - **[`backend`]** holds what a backend author needs (as `opendal::raw` does): [`backend::ScriptStore`] (run one
//!   of lock-core's calls: a script by `EVALSHA`, or one plain command), implemented by `lock-redis-rs`, `lock-fred`
//!   and the in-memory [`MemoryStore`] (which runs the same Lua scripts in an embedded Lua), the Lua
//!   [`backend::scripts`] every Redis backend sends, the release hub and the runtime abstraction.
//!
//! The [`Lock`] acquires as one atomic `SET NX PX` (plus a fencing counter, or the token drawn only when asked:
//! [`Fencing::OnDemand`]), waits for release notifications (one waiter per release and process, no barging past
//! queued waiters; a safety poll, and jittered backoff where nothing is heard), counts validity
//! `ttl − elapsed − drift` from a monotonic clock started before the request, releases by compare-and-delete and
//! extends by compare-and-extend, on one store or over N independent ones with [`Lock::redlock`] (quorum,
//! per-instance timeouts, fencing tokens kept monotonic across quorums; see the [`redlock`] module). Renewal for long
//! work ([`LockOptions::with_auto_renew`], [`RenewPolicy`]), scoped locking ([`DistributedLockExt::with_lock`]) and
//! the [`LostSignal`] come with every guard; the [`multi`]-resource lock ([`Lock::acquire_all`]), the [`job`] lock,
//! the [`election`], the [`semaphore`] and the [`rwlock`] run on the same engine.
//!
//! ```
//! use lock_core::{Lock, LockOptions, MemoryStore};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! let lock = Lock::new(MemoryStore::new());
//! let opts = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(2));
//! let guard = lock.acquire("reports/daily", &opts).await?;
//! let fence = guard.fence().await?; // drawn on first use; pass it to whatever the lock protects
//! // Do the work; pass `fence` to whatever the lock protects; stop if `guard.is_lost()`.
//! # let _ = fence;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Which type to use
//!
//! | you want… | use |
//! |---|---|
//! | a lock on one Redis (or Cluster, Sentinel) | [`Lock::new`] with a store from `lock-redis-rs` or `lock-fred` |
//! | a lock over N independent Redis (Redlock) | [`Lock::redlock`]`(stores).build()?` |
//! | to accept any lock in a library | `Arc<dyn` [`DistributedLock`]`>` (implemented by [`Lock`]); guards are `Box<dyn` [`LockGuard`]`>` |
//! | the concrete guard with Redlock details | [`Guard`] (what [`Lock::acquire`] returns) |
//! | work that runs only while the lock is held | [`DistributedLockExt::with_lock`] |
//! | several resources at once, all or nothing | [`Lock::acquire_all`] → [`MultiGuard`], or [`Lock::with_all`] |
//! | one leader among replicas, with a fencing term | [`Election::campaign`] / [`Election::lead`] → [`Leadership`] |
//! | at most N holders at once across replicas, each expiring on its own | [`Semaphore::acquire`] → [`Permit`] |
//! | many readers or one writer, writers first, a dead reader costing one TTL | [`RwLock::read`] / [`RwLock::write`] → [`ReadGuard`] / [`WriteGuard`] |
//! | a scheduled job that one replica runs, the others skip | [`JobLock::run`] / [`JobLock::run_tick`] |
//! | writes to your Redis keys that a paused, stale holder cannot make | [`FencedResource`] (see [`fenced`]) |
//! | to see who holds a lock, or free a stuck one | [`Lock::inspect`], [`Lock::force_release`] (and `lockctl`, in `lock-redis-rs`); label holders with [`LockOptions::with_holder_label`] |
//! | traces and metrics | the spans and events listed in [`telemetry`]; its metrics with the `metrics` feature |
//! | tests without Redis | [`MemoryStore`] |
//! | to write a backend | implement [`backend::ScriptStore`], prove it with `lock-testkit`'s `conformance_tests!` (the [`backend`] module) |
//!
//! # Runtimes
//! Features pick the runtimes lock-core can sleep, time out and spawn on: `rt-tokio` (default), `rt-async-std`,
//! `rt-smol`. tokio is used when a tokio runtime is current; otherwise async-std's or smol's executor with
//! `async-io` timers. async-std is discontinued upstream; its support here means code that runs when the caller's
//! executor is async-std. With no usable runtime, operations that must wait return [`LockError::NoRuntime`]
//! instead of panicking, and a dropped guard is left to expire at its TTL.
//!
//! # Deployments and what each guarantees
//! The same [`Lock`] runs on each; the backend's store picks the deployment (`lock-redis-rs`:
//! `RedisStoreBuilder::{new, cluster, sentinel}`; `lock-fred`: `FredStoreBuilder::{from_url, from_config, sentinel}`).
//! Each row is tested on real servers by the backends' `tests/` (conformance suite plus the `lock-testkit` cluster
//! and Sentinel cases).
//!
//! | deployment | mutual exclusion holds while… | fencing tokens |
//! |---|---|---|
//! | one Redis | the server keeps its data (a restart without persistence frees every lock) | strictly increase per resource, also across a restart that lost the counter (time floor, clock not stepped back) |
//! | [`Lock::redlock`] over N independent Redis | a majority is up and no instance restarts empty inside a holder's quorum | strictly increase across quorums (quorum write-back) |
//! | Redis Cluster | the slot's primary keeps its data; a failover right after a grant can lose it (asynchronous replication) | strictly increase while the primary keeps its data; after a failover that lost a grant, only the time floor keeps them above the lost one |
//! | Sentinel (primary + replicas) | as Cluster, for the one primary | as Cluster: a token can repeat after a failover that lost a grant when the old primary's clock ran ahead of the new one's by more than the failover took |
//!
//! [`LockOptions::with_replica_ack`] (Redis `WAIT`) narrows the failover window on Cluster and Sentinel; it does not close
//! it. The fencing token checked at the protected resource is the protection in every row.
//!
//! # Safety model
//! A lease lock cannot by itself protect against a holder that pauses (GC, swap, `SIGSTOP`) past its validity:
//! use the [`FencingToken`] of each acquisition at the protected resource ([`FencedResource`] does so for Redis
//! keys; the [`fenced`] module shows the rule for SQL and object stores), and watch the [`LostSignal`].
//!
//! # Feature flags
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without `memory` (the default), the docs still name `MemoryStore`, which their examples run on: those links
// have no target then. Built with every feature (docs.rs, CI), every link is checked.
#![cfg_attr(not(feature = "memory"), allow(rustdoc::broken_intra_doc_links))]
#![deny(missing_docs)]

pub mod backend;
mod distributed_election;
mod distributed_lock;
pub mod election;
mod engine;
mod error;
pub mod fenced;
pub mod guide;
mod holder;
pub mod job;
pub mod layout;
pub mod lease;
mod lost;
#[cfg(feature = "memory")]
mod memory;
pub mod multi;
mod mutex;
pub mod namespace;
mod options;
mod redisson;
mod resource;
pub mod revision;
mod rt;
pub mod rwlock;
mod scoped;
mod seam;
pub mod semaphore;
pub mod telemetry;
mod token;
pub mod wire;

pub use engine::redlock;

pub use distributed_election::{DistributedElection, LeaderGuard};
pub use distributed_lock::{Capabilities, DistributedLock, LockGuard};
pub use election::{Election, ElectionOptions, LeaderContext, LeaderInfo, Leadership, MAX_LEADER_VALUE};
pub use engine::admin::{ExpectedHolder, Forced, ForcedRelease, Holder, HolderRole, Inspection, LockState};
pub use engine::lock::{Guard, Lock, ReleaseReport, DEFAULT_FENCE_COUNTER_EXPIRY, DEFAULT_OPERATION_TIMEOUT};
pub use error::{LockError, Report, Result, Site};
pub use fenced::FencedResource;
pub use holder::{HolderLabel, OWNER_ID_LEN};
pub use job::{JobContext, JobLock, JobOptions, JobOutcome, LastRun, RunOutcome, MAX_HOLDER_LABEL};
pub use layout::KeyLayout;
pub use lost::{LostReason, LostSignal};
#[cfg(feature = "memory")]
pub use memory::MemoryStore;
pub use multi::{MultiContext, MultiGuard, MultiRelease};
pub use mutex::MAX_RESOURCES;
pub use options::{
    CrossSlot, Fencing, LockOptions, RenewPolicy, ReplicaAck, RetryPolicy, Shortfall, MAX_TTL, MAX_WAIT, MIN_TTL,
    MIN_WAITER_TTL,
};
pub use redlock::RedlockBuilder;
pub use resource::{LockKeys, DEFAULT_PREFIX, LEGACY_PREFIX, MAX_RESOURCE_NAME};
pub use revision::MemoryRevisionStore;
pub use rwlock::{ReadGuard, RwLock, RwState, WriteGuard};
pub use scoped::{DistributedLockExt, LockContext};
// The store a `Lock` runs on (what the backends build, and what `Lock::redlock` takes several of) is named by
// applications too; the rest of a backend's interface is in `backend`.
pub use seam::store::{LockStore, ReleaseOutcome};
pub use semaphore::{Permit, Semaphore, SemaphoreState, MAX_PERMITS};
pub use token::{FencingToken, Token};

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

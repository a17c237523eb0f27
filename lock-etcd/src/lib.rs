//! A distributed lock and leader election on **etcd**, by etcd's own recipes, behind the same traits as this
//! library's Redis locks (`DistributedLock`, `LockGuard`, `DistributedElection`, `LeaderGuard`).
//!
//! ```no_run
//! use lock_core::{DistributedLock, LockOptions};
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> lock_core::Result<()> {
//! let lock = lock_etcd::connect(&["127.0.0.1:2379"]).await?;
//! let guard = lock.acquire("reports/daily", &LockOptions::new(Duration::from_secs(10))).await?;
//! let fence = guard.fence().await?; // the key's revision of creation
//! // … write, passing `fence` …
//! guard.release().await?;
//! # let _ = fence;
//! # Ok(())
//! # }
//! ```
//!
//! This crate is the translation of lock-core's [`RevisionStore`](lock_core::backend::RevisionStore) (a dozen
//! requests) to [etcd-client](https://docs.rs/etcd-client); the recipes (queueing by revision of creation, waiting
//! on the predecessor's deletion, the check after waiting that etcd 3.4 lacks, leases and their validity, cancel
//! safety) are lock-core's [`revision`](lock_core::revision) module, where their design is written down.
//!
//! # Building
//! etcd-client compiles etcd's protobuf definitions at build time with **`protoc`**: install it first
//! (`apt-get install protobuf-compiler libprotobuf-dev` on Debian and Ubuntu, `brew install protobuf` on macOS), or
//! point `PROTOC` at one (libprotobuf-dev holds the well-known types etcd's protos import).
//!
//! # The keys are etcd's
//! Our lock `N` is the queue `wlp/N/` (`etcdctl lock wlp/N`; with
//! [`with_key_prefix("")`](lock_core::revision::RevisionLock::with_key_prefix), `etcdctl lock N`), one key
//! `wlp/N/<lease id in hex>` per contender. `etcdctl lock`, `etcdctl elect`, Go's `concurrency` package and the
//! server's lock service exclude our locks and are excluded by them; the tests drive the real `etcdctl`.
//!
//! # What a consensus store gives, and what it does not
//! A grant is committed by a majority of members before it is answered, so a member's failure (the leader's
//! included) loses no held lock, where a Redis primary that fails over can lose one written just before (its
//! replication is asynchronous). It does not stop a holder that pauses past its lease from acting on the lock:
//! fence your writes with [`fence`](lock_core::LockGuard::fence), the key's revision of creation (FAULTS.md and the
//! guide's "Redis or etcd" chapter measure both).
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub use lock_core;

pub mod endpoints;
mod error;
mod store;

pub use error::NoSpace;
pub use store::{EtcdStore, EtcdStoreBuilder, DEFAULT_CONNECT_TIMEOUT};

use lock_core::revision::RevisionLock;

/// Connects to `endpoints` and returns a lock on them, under the default prefix (`wlp/`).
///
/// # Errors
/// As [`EtcdStoreBuilder::connect`].
///
/// # Cancel safety
/// Cancel-safe.
pub async fn connect<E: AsRef<str>>(endpoints: &[E]) -> lock_core::Result<RevisionLock> {
    Ok(RevisionLock::new(EtcdStore::connect(endpoints).await?))
}

/// The README's examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

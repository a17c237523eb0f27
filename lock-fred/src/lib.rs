//! A distributed lock on Redis over the [`fred`] client and its connection pool, with the semantics of `lock-core`.
//!
//! ```no_run
//! use lock_fred::lock_core::{Lock, LockOptions};
//! use lock_fred::FredStore;
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> lock_fred::lock_core::Result<()> {
//! let store = FredStore::connect("redis://127.0.0.1:6379").await?;
//! let lock = Lock::new(store);
//! let opts = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(2));
//! let guard = lock.acquire("reports/daily", &opts).await?;
//! let fence = guard.fence().await?;
//! // ... do the work, passing `fence` to the resource the lock protects ...
//! # let _ = fence;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! This crate only translates lock-core's [`ScriptStore`](lock_core::backend::ScriptStore) interface (run one script or
//! command, hear releases) to fred: waiting, validity, renewal and fencing rules all live in [`lock_core`], and the
//! Lua scripts are [`lock_core::backend::scripts`], the same text the `lock-redis-rs` backend sends. Both backends therefore interoperate on the same keys.
//!
//! # Runtime: tokio only
//! fred requires tokio (its connections and tasks run on it), so this crate offers no other runtime and has no
//! runtime features. Create and use a [`FredStore`] inside a tokio runtime.
//!
//! # What goes over the wire
//! - acquire: one `EVALSHA` of [`ACQUIRE`](lock_core::backend::scripts::ACQUIRE) (`SET NX PX` plus the fencing counter);
//! - release: one `EVALSHA` of [`RELEASE`](lock_core::backend::scripts::RELEASE) (compare-and-delete, then, when a try found
//!   the lock held, `PUBLISH` on the resource's release channel, naming the first waiting process, whose store alone
//!   wakes a waiter; on a cluster `SPUBLISH`, which stays on the lock's shard, heard with `SSUBSCRIBE`);
//! - extend: one `EVALSHA` of [`EXTEND`](lock_core::backend::scripts::EXTEND) (compare-and-`PEXPIRE`).
//!
//! A lock cycle is therefore two round trips. When the server answers `NOSCRIPT` (after a restart, a failover or
//! `SCRIPT FLUSH`) the store sends the script body once with `EVAL`, which also caches it again, so the caller
//! never sees `NOSCRIPT`, even when another flush lands between two calls.
//!
//! Waiters are woken by release notifications received on **one** shared fred
//! [`SubscriberClient`](fred::clients::SubscriberClient) per store; notifications are only a hint (a waiter always
//! re-polls the server, at the latest after its safety poll, and polls with backoff if notifications are
//! unavailable). No pooled connection is held while waiting. One limit: fred 10 reports a `SUBSCRIBE` that the
//! server's ACL refused (a user without the lock's channels, `&wlp:*`) as a success, so this store cannot tell its
//! waiters that they hear nothing; they then take a released lock at their safety poll
//! (`RetryPolicy::with_safety_poll`, 1 s by default) rather than their backoff. Such a process also lines up to be
//! woken by releases it never hears, so a release that names it costs the waiters of *other* processes a safety
//! poll too (see [`RELEASE`](lock_core::backend::scripts::RELEASE)). Grant the channels (the guide's minimal ACL line, chapter 10, does)
//! or shorten the safety poll.
//!
//! # Keys
//! Every lock on resource `r` uses `wlp:{r}` (the owner token, with the lock's TTL), `wlp:{r}:fence` and the
//! channel `wlp:{r}:released` (see [`LockKeys`](lock_core::LockKeys)). The fencing counter is one small key per
//! resource **with no TTL**, so that fencing tokens keep increasing across acquisitions; turn fencing off with
//! [`LockOptions::with_fencing(false)`](lock_core::LockOptions::with_fencing) and acquire never creates it.
//!
//! # Deployments
//! fred's [`Config`](fred::prelude::Config) is passed through untouched, including Sentinel
//! ([`ServerConfig::Sentinel`](fred::prelude::ServerConfig), see [Redis Sentinel](#redis-sentinel)) and Cluster
//! configurations: all keys of one lock share a hash tag and are listed in `KEYS[]`, so the scripts run on one
//! cluster slot.
//!
//! # Redis Sentinel
//! [`FredStoreBuilder::sentinel`] (or [`FredStoreBuilder::from_config`] with a
//! [`ServerConfig::Sentinel`](fred::prelude::ServerConfig) of your own) connects the pool and the store's
//! subscriber to the primary the Sentinels name, checked with `ROLE`, and fred asks again on every reconnect. After
//! a failover the call in flight fails as `Unavailable` or `Timeout` (retryable; a waiting acquire retries it) and
//! the next calls reach the promoted replica; a `READONLY` reply makes fred reconnect (its
//! `custom-reconnect-errors` feature, which this crate enables) and reaches the caller once, as `Unavailable`. The
//! subscriber subscribes on the primary, where releases are published, not on a replica that hears them only while
//! its replication link is up.
//!
//! What Sentinel guarantees for a lock, tested in `tests/sentinel.rs` (cases in `lock_testkit::sentinel_cases`):
//! replication is asynchronous, so a primary that dies right after a grant can lose it and the promoted replica
//! grants the resource again (lost in 2 to 4 of 5 trials per run on loopback without `WAIT`);
//! [`LockOptions::with_replica_ack`](lock_core::LockOptions::with_replica_ack) narrows that (0 lost with it) but cannot
//! close it. **A fencing token can repeat after such a failover**: the counter's last increment is lost with the
//! grant, and the next grant's `max(counter + 1, server clock in µs)` on the promoted replica is above the lost
//! token only if that server's clock has passed it (true on one machine, not when the old primary's clock ran
//! ahead of the replica's by more than the failover took). The tests show the exact repeat with a counter set
//! ahead of the clock.
//!
//! A grant with replica acknowledgement runs on a client of its own (the `WAIT` blocks its connection), from up to
//! [`EXCLUSIVE_CLIENTS`] that connect at the store's first such grant, inside that call's bound (a cluster
//! discovery per client; 9 ms against 1 ms for later grants on loopback). While a cluster node is stopped (frozen,
//! not down) that first connect can outlast the bound and the grant ends in `Timeout` (retryable; a waiting acquire
//! retries it).
//!
//! # TLS
//! Off by default. `tls-rustls` (rustls with its `ring` provider) or `tls-native-tls` (the platform's library)
//! turn on fred's TLS: `rediss://` URLs connect over TLS trusting the platform's roots, and
//! [`FredStoreBuilder::with_ca_certificate`] / [`FredStoreBuilder::with_client_certificate`] give a private CA and a client
//! certificate (mutual TLS) for a URL or `Config` source. A refused certificate is
//! [`LockError::Tls`](lock_core::LockError::Tls) from `connect`.
//!
//! # Errors
//! fred errors become [`LockError`](lock_core::LockError)s with the fred error as their source: `WRONGTYPE` →
//! `WrongType`, I/O, connection and cancellation errors, `READONLY`/`LOADING`/`MASTERDOWN` and no primary found
//! through Sentinel → `Unavailable`, timeouts → `Timeout`, authentication → `Auth`, anything else → `Backend`.
//! Every call is bounded by the store's command timeout ([`FredStoreBuilder::with_command_timeout`]).
//!
//! # Feature flags
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod auth;
mod error;
mod store;
mod subscriber;
mod tls;

pub use store::{FredStore, FredStoreBuilder, DEFAULT_COMMAND_TIMEOUT, DEFAULT_POOL_SIZE, EXCLUSIVE_CLIENTS};

pub use fred;
pub use lock_core;

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

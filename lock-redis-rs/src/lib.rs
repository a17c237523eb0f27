//! A distributed lock on Redis for the [`redis`] crate, with pooled connections and fencing tokens.
//!
//! [`RedisStore`] implements lock-core's [`ScriptStore`](lock_core::backend::ScriptStore), the transport every primitive of
//! lock-core runs on (and so its [`LockStore`](lock_core::LockStore)); wrap it in a [`Lock`](lock_core::Lock) to
//! acquire, extend and release:
//!
//! ```no_run
//! use lock_redis_rs::lock_core::{Lock, LockOptions};
//! use lock_redis_rs::RedisStore;
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> lock_redis_rs::lock_core::Result<()> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! let lock = Lock::new(store);
//! let options = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(5));
//! let guard = lock.acquire("reports/daily", &options).await?;
//! let fence = guard.fence().await?; // drawn on first use; pass it to what the lock protects
//! // ... work; stop if `guard.is_lost()` ...
//! # let _ = fence;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What goes over the wire
//! Every operation is one Lua script from [`lock_core::backend::scripts`], sent with `EVALSHA`: acquire, release and extend
//! are one round trip each, so an uncontended lock cycle costs exactly two. When the server does not know a script
//! (after a restart, a failover or `SCRIPT FLUSH`) it answers `NOSCRIPT`, and the store sends the body once with
//! `EVAL` (which caches it again): invisible to the caller, even when another flush lands in between.
//!
//! The keys of one lock share the hash tag `{resource}` (see [`LockKeys`](lock_core::LockKeys)) and are all passed
//! in `KEYS[]`, so the scripts are valid on Redis Cluster:
//!
//! | key | holds |
//! |---|---|
//! | `wlp:{resource}` | the owner token, with the lock's TTL |
//! | `wlp:{resource}:fence` | the fencing counter: **one small key per resource, with no TTL** |
//! | `wlp:{resource}:released` | the channel a release publishes on |
//!
//! # Fencing tokens
//! With fencing on (the default), acquiring advances the resource's counter in the same atomic step and the guard
//! carries the new value. The counter is raised to at least the server's clock in microseconds, so tokens keep
//! increasing when a server without persistence restarts and loses the counter. The counter key never expires:
//! if you lock many short-lived resource names and do not need tokens, turn fencing off per acquisition with
//! [`LockOptions::with_fencing(false)`](lock_core::LockOptions::with_fencing); acquire is then a plain `SET NX PX`
//! (followed, only when it fails, by a small script that reports the holder's remaining TTL or a foreign key type)
//! and the counter key is never created.
//!
//! # Waiting
//! A waiter sleeps between tries and is woken early by the holder's release, which the release script publishes.
//! Each store has **one** subscriber connection, outside the pool, opened when the first waiter needs it and
//! closed when the last clone of the store is dropped; a lost subscriber connection is reopened with backoff and
//! resubscribed. On Redis Cluster the release is announced with `SPUBLISH` on the lock's shard and heard through
//! a cluster connection that `SSUBSCRIBE`s each channel there (see [`RedisStoreBuilder::cluster`]). Pub/sub is
//! at-most-once, so a notification is only a hint: waiters also wake at the holder's remaining TTL and at their
//! safety poll (`RetryPolicy::with_safety_poll`), and subscriber trouble is logged (with `tracing`), never
//! returned.
//!
//! # TLS
//! Off by default; the features pick the TLS library (none is forced on users who do not need one):
//!
//! | feature | TLS library | runtime | trusts by default |
//! |---|---|---|---|
//! | `tls-rustls` | rustls with the `ring` provider | tokio | the platform's roots |
//! | `smol-tls-rustls` | rustls with `ring` | smol, async-std | the platform's roots |
//! | `tls-rustls-webpki-roots` | rustls | tokio | also Mozilla's bundled roots |
//! | `tls-native-tls` | the platform's (OpenSSL on Linux) | tokio | the platform's roots |
//!
//! A `rediss://` URL connects over TLS; [`RedisStoreBuilder::with_ca_certificate`] trusts a private CA and
//! [`RedisStoreBuilder::with_client_certificate`] presents a client certificate (mutual TLS), for a single server, every
//! node of a cluster, and the Sentinels and the primary behind Sentinel. A refused certificate is
//! [`LockError::Tls`](lock_core::LockError::Tls) from `connect`; TLS settings in a build without a TLS feature are
//! [`InvalidArgument`](lock_core::LockError::InvalidArgument) naming the features. With rustls, the store makes
//! `ring` the process's default crypto provider when none is installed (redis-rs builds its TLS configuration with
//! the process default).
//!
//! # Connections and timeouts
//! A store built from a URL keeps one multiplexed connection (or [`pool_size`](RedisStoreBuilder::with_pool_size) of
//! them, round robin) and gives every command a clone: the commands of all concurrent tasks are pipelined on it, as
//! on a hand-written client's connection. No command holds a connection while a lock is awaited, so one connection
//! serves any number of waiters. A command that is cancelled leaves the connection usable, because redis-rs
//! multiplexed connections match replies to requests themselves; a connection whose transport failed is dropped and
//! the next command opens a new one (so after a server restart one command fails with `Unavailable`, which a
//! waiting acquire retries). Every store call is bounded by [`connect_timeout`](RedisStoreBuilder::with_connect_timeout)
//! + [`command_timeout`](RedisStoreBuilder::with_command_timeout).
//!
//! Build a store from a URL ([`RedisStore::connect`], [`RedisStoreBuilder`]) or over a `deadpool_redis::Pool` you
//! already have (`RedisStore::from_pool`, feature `deadpool-redis`); such a pool checks every connection out exclusively and checks it with
//! `UNWATCH` + `PING`, which costs one more round trip per command.
//!
//! # Redis Sentinel
//! [`RedisStoreBuilder::sentinel`] takes the service name and the Sentinels' URLs. Every connection the store opens
//! (its multiplexed connections and the notification subscriber's) goes to the primary the Sentinels name at that
//! moment, confirmed with `ROLE`; after a failover the old connections break, the call in flight fails as
//! `Unavailable` or `Timeout` (retryable: a waiting acquire retries it), and the next one finds the promoted replica.
//! A connection that answers `READONLY` is dropped, so that error reaches a caller once. The subscriber also asks
//! the Sentinels again on every reconnect, and subscribes on the primary rather than a replica: the release is
//! published there, and a replica would hear it only while its replication link is up.
//!
//! What a Sentinel deployment guarantees for a lock, tested in `tests/sentinel.rs` (cases in
//! `lock_testkit::sentinel_cases`):
//! - **Replication is asynchronous**: a primary that dies right after a grant can take the grant with it, and the
//!   promoted replica then grants the same resource to someone else (two holders). Killing the primary right after
//!   the grant lost it on the promoted replica in 0 to 4 of 5 trials per run on loopback.
//! - [`LockOptions::with_replica_ack`](lock_core::LockOptions::with_replica_ack) (`WAIT`) makes acquire return only once a
//!   replica has the grant: 0 lost in every run. It narrows the window, it does not close it (a replica that
//!   acknowledged may not be the one promoted, and a shortfall can be accepted by policy).
//! - **Fencing tokens can repeat after a failover that lost a grant.** The counter is replicated like the lock key,
//!   so the failover loses its last increment too, and the next grant computes `max(counter + 1, server clock in
//!   µs)` on the promoted replica. That is above the lost token only if the promoted server's clock has passed the
//!   lost token's value: true on one machine (tokens follow the clock), not when the old primary's clock ran ahead
//!   of the replica's by more than the failover took, or the counter was otherwise ahead of the clock. Then the
//!   lost token is handed out again, or a lower one (the tests show the exact repeat with a counter set ahead of
//!   the clock). A grant acknowledged with `WAIT` by the replica that is promoted carries its increment along.
//!
//! Credentials and TLS in the Sentinel URLs are used for the Sentinels. The primary is reached with what
//! [`RedisStoreBuilder::with_primary_credentials`], [`with_primary_tls`](RedisStoreBuilder::with_primary_tls) and
//! [`with_primary_db`](RedisStoreBuilder::with_primary_db) say (by default: no credentials, plain TCP, database 0);
//! the certificates of [`with_ca_certificate`](RedisStoreBuilder::with_ca_certificate) and
//! [`with_client_certificate`](RedisStoreBuilder::with_client_certificate) apply to both.
//!
//! # Errors
//! Errors are [`LockError`](lock_core::LockError)s with the redis error as their source: a key of another type
//! (`WRONGTYPE`) is `WrongType` naming the key; a refused, broken or reset connection, a server that is loading
//! or read-only, no primary that the Sentinels consider up, or a closed pool is `Unavailable`; a missed deadline is
//! `Timeout`; `NOAUTH`, `WRONGPASS` and `NOPERM` are `Auth`; anything else is `Backend`.
//!
//! # Runtimes
//! Feature `tokio` (default) runs on tokio; feature `smol` on smol; feature `async-std` under async-std's executor
//! (redis-rs drives its connections with smol's reactor there, which async-std shares). With several enabled,
//! tokio is used when a tokio runtime is current.
//!
//! # Feature flags
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod error;
mod pool;
mod store;
mod subscriber;
mod tls;

pub use store::{
    PoolStatus, RedisStore, RedisStoreBuilder, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE,
};

#[cfg(feature = "deadpool-redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "deadpool-redis")))]
pub use deadpool_redis;
pub use lock_core;
pub use redis;

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

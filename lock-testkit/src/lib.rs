//! Test support for lock backends: the conformance suite, real `redis-server` fixtures, and a
//! mutual-exclusion checker.
//!
//! A backend proves itself with one macro call in its own `tests/` directory (the shape of object_store's shared
//! test functions): start whatever the backend needs, wrap the lock in a [`Subject`], and let
//! [`conformance_tests!`] write one `#[test]` per case.
//!
//! ```no_run
//! // tests/conformance.rs of a third-party backend
//! use lock_core::Lock;
//! use lock_testkit::{conformance_tests, RedisServer, Subject};
//!
//! async fn subject() -> Subject {
//!     let server = RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"));
//!     let store = lock_core::MemoryStore::new(); // your store, connected to `server.url()`
//!     let peer = store.peer(); // a second one connected to it: another process, for the cross-process cases
//!     Subject::new(Lock::new(store)).with_peer(Lock::new(peer)).keep(server)
//! }
//!
//! conformance_tests!(tokio, subject());
//! # fn main() {}
//! ```
//!
//! The first argument picks the runtime the cases run on: `tokio` (multi-threaded), `async_std` or `smol`.
//!
//! Beyond the conformance suite:
//! - [`server_tests!`], [`cluster_tests!`], [`sentinel_tests!`]: the cases a Redis backend runs against a real single
//!   server, Cluster or Sentinel deployment, given a function that connects its store;
//! - [`scripted`]: a store whose calls can be gated, delayed, failed before or after they apply, or hung, and whose
//!   notifications can be dropped or delayed, to force an interleaving in a few lines (wrap your own store with
//!   [`scripted::ScriptedServer::over`]);
//! - [`explorer`]: seeded random schedules of acquire, cancel, release, drop, renewal and expiry over scripted
//!   stores, checked for the lock's promises after each one;
//! - the fault harness ([`proxy`], [`worker`], [`history`], [`FencedCounter`]) behind the fault suite;
//! - [`primitive_checker`]: a history checker for each primitive's safety rule (fenced mutex, semaphore limit,
//!   read-write exclusion, one leader per term, a job tick at most once), and [`broken`]: stores that break each
//!   rule on purpose, on which the checkers prove they find the breach.
//!
//! The crate builds on every platform `redis-server` runs on; the parts that stop, resume or signal processes
//! (Cluster and Sentinel cases, worker processes, the cross-process history, [`RedisServer::pause`]) are Unix-only.
//!
//! # Feature flags
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod admin_conformance;
pub mod broken;
pub mod checker;
mod cluster;
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub mod cluster_cases;
pub mod composition;
pub mod conformance;
pub mod election_cases;
pub mod election_conformance;
mod etcd;
pub mod explorer;
pub mod fair_conformance;
pub mod fenced_conformance;
pub mod foreign_conformance;
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub mod history;
pub mod job_conformance;
pub mod leader_conformance;
#[cfg(feature = "metrics")]
pub mod metrics_cases;
pub mod multi_conformance;
mod or_panic;
mod oracle;
pub mod primitive_checker;
pub mod proxy;
mod resp;
pub mod runtime;
pub mod rwlock_cases;
pub mod rwlock_conformance;
pub mod scripted;
pub mod semaphore_cases;
pub mod semaphore_conformance;
mod sentinel;
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub mod sentinel_cases;
mod server;
pub mod server_cases;
mod server_features;
mod tls;
pub mod tls_cases;
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub mod wire_vectors;
pub mod worker;

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use lock_core::{DistributedLock, Lock};

pub use checker::{Checker, Hold, Report};

/// Whether `key` is one a lock keeps on purpose, without a TTL: a fencing counter (`…:fence`, which must outlive every
/// lock for tokens to keep increasing) or the protocol version of a prefix (`<prefix>wire`, see
/// [`lock_core::wire`]). Every other key a lock writes expires. What "no key left behind" checks skip.
pub fn lasting_key(key: &str) -> bool {
    key.ends_with(":fence") || (key.ends_with("wire") && !key.contains('{'))
}

/// Paths the macros use; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use lock_core::{LockStore, Result};
}
pub use cluster::{NodeView, RedisCluster, RedisClusterBuilder, SLOTS};
pub use etcd::{etcd_binary, etcdctl_binary, EtcdBuilder, EtcdServer};
pub use oracle::{CounterClient, FencedCounter, WriteOutcome};
pub use proxy::{Direction, DirectionFaults, FaultProxy};
pub use resp::{command as send_command, Connection, Reply};
pub use sentinel::{RedisSentinel, RedisSentinelBuilder};
pub use server::{find_binary, redis_server_binary, Persistence, RedisServer, RedisServerBuilder, ServerError};
pub use server_features::{report_skip, server_supports_tls, skip_without_tls};
pub use tls::{ServerCertificate, TestCertificates};

/// The lock under test, plus whatever must live as long as the test (servers, clients).
pub struct Subject {
    lock: Arc<dyn DistributedLock>,
    /// The same lock as lock-core's engine, when it is one: the primitives beyond the mutex are its methods.
    engine: Option<Lock>,
    keep: Vec<Box<dyn Any + Send>>,
    /// Why the cases are skipped, when the fixture cannot run here (see [`Subject::skipped`]).
    skip: Option<String>,
    /// Whether the lock's user may touch keys of its own choosing (see [`Subject::without_data_keys`]).
    data_keys: bool,
    /// The same servers' lock in a second process (see [`Subject::with_peer`]).
    peer: Option<Lock>,
}

impl Subject {
    /// Wraps the lock under test.
    pub fn new(lock: impl DistributedLock + 'static) -> Self {
        let engine = (&lock as &dyn Any).downcast_ref::<Lock>().cloned();
        Subject { engine, ..Self::from_arc(Arc::new(lock)) }
    }

    /// Wraps a shared lock under test.
    pub fn from_arc(lock: Arc<dyn DistributedLock>) -> Self {
        Subject { lock, engine: None, keep: Vec::new(), skip: None, data_keys: true, peer: None }
    }

    /// A subject whose cases are skipped, each saying why on the terminal (see [`report_skip`]): what a
    /// conformance subject returns when its fixture cannot run on this machine (TLS on a server built without it).
    ///
    /// ```
    /// # async fn subject() -> lock_testkit::Subject {
    /// if !lock_testkit::server_supports_tls() {
    ///     return lock_testkit::Subject::skipped("the server was built without TLS");
    /// }
    /// # unimplemented!()
    /// # }
    /// ```
    pub fn skipped(reason: impl Into<String>) -> Self {
        Subject { skip: Some(reason.into()), ..Self::new(Lock::new(lock_core::MemoryStore::new())) }
    }

    /// A subject whose user may touch only the lock's own keys (an ACL user with exactly the rules a lock needs,
    /// such as [`server_cases::MINIMAL_ACL_RULES`]): the cases that write data keys of their own
    /// ([`fenced_conformance`]) are skipped, saying why. Fenced writes run as the caller's user, on the caller's
    /// keys, and need that user's data permissions.
    pub fn without_data_keys(mut self) -> Self {
        self.data_keys = false;
        self
    }

    /// Adds the lock of a second process on the same servers: a [`Lock`] over stores of its own (its own
    /// connections and release subscriptions; [`MemoryStore::peer`](lock_core::MemoryStore::peer) in memory). The
    /// cases of what crosses processes (a release waking a waiter of another process, for every primitive) run on
    /// it; without one they are skipped, saying why.
    ///
    /// A Redis backend connects a second store to the same URL; in memory:
    ///
    /// ```
    /// use lock_core::{Lock, MemoryStore};
    /// use lock_testkit::Subject;
    ///
    /// let store = MemoryStore::new();
    /// let subject = Subject::new(Lock::new(store.clone())).with_peer(Lock::new(store.peer()));
    /// assert!(subject.peer().is_some());
    /// ```
    pub fn with_peer(mut self, peer: Lock) -> Self {
        self.peer = Some(peer);
        self
    }

    /// The second process's lock, when the subject has one (see [`Subject::with_peer`]).
    pub fn peer(&self) -> Option<&Lock> {
        self.peer.as_ref()
    }

    /// Whether the lock's user may touch keys of the cases' choosing (see [`Subject::without_data_keys`]).
    pub fn data_keys(&self) -> bool {
        self.data_keys
    }

    /// Why this subject's cases are skipped, when they are.
    pub fn skip_reason(&self) -> Option<&str> {
        self.skip.as_deref()
    }

    /// Keeps `value` alive until the test ends (a [`RedisServer`], say).
    pub fn keep(mut self, value: impl Any + Send) -> Self {
        self.keep.push(Box::new(value));
        self
    }

    /// The lock under test.
    pub fn lock(&self) -> &dyn DistributedLock {
        &*self.lock
    }

    /// The lock under test, shared.
    pub fn shared(&self) -> Arc<dyn DistributedLock> {
        self.lock.clone()
    }

    /// How much slower than a Redis lock the subject's times run: `ceil(min_ttl / 50 ms)` of its
    /// [`Capabilities::min_ttl`](lock_core::Capabilities) (1 on Redis and in memory; 20 on an etcd member whose
    /// smallest lease is 1 s). The lock cases ([`conformance`]) were written with 50 ms as their shortest TTL; they
    /// multiply every TTL, pause and bound by this, so that an etcd lease (whole seconds, at least its server's
    /// minimum) is kept exactly as asked and each case proves the same thing.
    pub fn time_scale(&self) -> u32 {
        let min = self.lock.capabilities().min_ttl.as_millis();
        u32::try_from(min.div_ceil(50)).unwrap_or(u32::MAX).max(1)
    }

    /// `n` ms, scaled by [`time_scale`](Self::time_scale).
    pub fn ms(&self, n: u64) -> std::time::Duration {
        std::time::Duration::from_millis(n).saturating_mul(self.time_scale())
    }

    /// `d`, or the backend's smallest TTL ([`Capabilities::min_ttl`](lock_core::Capabilities)) if that is longer:
    /// for a case whose times are ratios of one TTL, not absolute.
    pub fn at_least(&self, d: std::time::Duration) -> std::time::Duration {
        d.max(self.lock.capabilities().min_ttl)
    }

    /// Options with a TTL and a wait budget of `ttl_ms` and `wait_ms`, scaled by [`time_scale`](Self::time_scale).
    pub fn opts(&self, ttl_ms: u64, wait_ms: u64) -> lock_core::LockOptions {
        lock_core::LockOptions::new(self.ms(ttl_ms)).with_wait(self.ms(wait_ms))
    }

    /// The lock under test as lock-core's [`Lock`], for the cases of the primitives beyond the mutex (a subject
    /// built with [`Subject::new`] from a `Lock` has one).
    ///
    /// # Panics
    /// When the subject is not a `Lock`.
    pub fn engine(&self) -> &Lock {
        match &self.engine {
            Some(lock) => lock,
            None => panic!("these cases need a lock_core::Lock: build the Subject with Subject::new(Lock::new(store))"),
        }
    }
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject").field("lock", &self.lock).field("kept", &self.keep.len()).finish()
    }
}

/// Writes one `#[test]` per conformance case: the mutex's ([`conformance`]) and every other primitive's
/// ([`multi_resource_tests!`], [`job_tests!`]), so a backend that runs this one macro is proven for each primitive lock-core adds.
///
/// `conformance_tests!(RUNTIME, SUBJECT)`: `RUNTIME` is `tokio`, `async_std` or `smol` (see [`runtime`]);
/// `SUBJECT` is an expression that evaluates, inside the runtime, to a future of [`Subject`] wrapping a
/// [`lock_core::Lock`]. It is evaluated once per case, so each case gets its own subject (for example its own
/// server). Every case is bounded by [`runtime::CASE_TIMEOUT`]. `conformance_tests!(@cases RUNTIME, SUBJECT; case,
/// …)` writes only the named mutex cases.
#[macro_export]
macro_rules! conformance_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::conformance_tests!(@cases $runtime, $subject; fencing_on_demand_refused_once_the_lock_is_gone);
        $crate::lock_conformance_tests!($runtime, $subject);
        $crate::multi_resource_tests!($runtime, $subject);
        $crate::job_tests!($runtime, $subject);
        $crate::fair_tests!($runtime, $subject);
        $crate::admin_tests!($runtime, $subject);
        $crate::election_tests!($runtime, $subject);
        $crate::leader_tests!($runtime, $subject);
        $crate::semaphore_tests!($runtime, $subject);
        $crate::rwlock_tests!($runtime, $subject);
        $crate::fenced_tests!($runtime, $subject);
        $crate::foreign_tests!($runtime, $subject);
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per case of [`conformance`] that holds for any [`DistributedLock`](lock_core::DistributedLock)
/// (not only lock-core's Redis engine): what a backend of another kind (`lock-etcd`) runs. Times are the subject's
/// ([`Subject::time_scale`]).
#[macro_export]
macro_rules! lock_conformance_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::conformance_tests!(@cases $runtime, $subject;
            try_acquire_on_held_lock,
            exclusive_under_contention,
            waiter_acquires_after_release,
            wait_budget_exhausted_is_typed,
            attempt_limit_is_respected,
            stale_release_never_deletes_new_holder,
            release_outcomes,
            ttl_expiry_frees_lock,
            extend_keeps_lock,
            extend_after_expiry_never_resurrects,
            validity_ends_before_server_expiry,
            fencing_tokens_strictly_increase,
            fencing_on_demand_follows_hold_order,
            cancelled_fence_draws_keep_the_order,
            fencing_can_be_turned_off,
            invalid_inputs_rejected,
            any_resource_name_works,
            dropped_guard_is_freed,
            cancelled_acquire_leaves_no_lock,
            lost_signal_fires_at_validity_deadline,
            release_marks_lost,
            owner_tokens_are_unique,
            auto_renewal_outlives_ttl,
            max_hold_stops_renewal,
            scoped_work_returns_output,
            scoped_work_cancelled_on_loss,
        );
    };
}

/// One `#[test]` per case of a conformance module, each on `$runtime` with its own subject (skipped, saying why,
/// when the subject says so): what every conformance macro's `@cases` arm expands to.
#[doc(hidden)]
#[macro_export]
macro_rules! __subject_cases {
    ($module:ident; $runtime:ident, $subject:expr; $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                $crate::runtime::$runtime(async {
                    let subject: $crate::Subject = $subject.await;
                    if let Some(reason) = subject.skip_reason() {
                        $crate::report_skip(stringify!($case), reason);
                        return;
                    }
                    $crate::$module::$case(&subject).await;
                });
            }
        )*
    };
}

/// Writes one `#[test]` per case of [`leader_conformance`]: the elections any backend's
/// [`DistributedLock::election`](lock_core::DistributedLock::election) hands out.
#[macro_export]
macro_rules! leader_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::__subject_cases!(leader_conformance; $runtime, $subject;
            one_leader_at_a_time_and_terms_increase,
            leader_and_observers_see_the_leader_and_its_value,
            a_waiting_candidate_is_elected_when_the_leader_resigns,
            bad_candidates_are_refused_before_any_io
        );
    };
}

/// Writes one `#[test]` per multi-resource lock case of [`multi_conformance`].
///
/// `multi_resource_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a
/// [`lock_core::Lock`] ([`Subject::engine`]).
#[macro_export]
macro_rules! multi_resource_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::multi_resource_tests!(@cases $runtime, $subject;
            a_held_resource_blocks_the_set_and_nothing_is_taken,
            opposite_orders_never_deadlock,
            multi_and_single_locks_exclude_each_other,
            extend_is_all_or_lost_and_names_the_lost_resource,
            fences_agree_with_single_locks_per_resource,
            duplicates_collapse_and_bad_lists_are_rejected,
            release_wakes_waiters_of_every_resource,
            scoped_work_over_several_resources,
            cancelled_acquire_all_storm_leaves_nothing,
            on_demand_fencing_gives_every_resource_a_token,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(multi_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per election case of [`election_conformance`] ([`conformance_tests!`] includes them).
///
/// `election_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! election_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::election_tests!(@cases $runtime, $subject;
            election_elects_one_and_terms_increase,
            election_resign_hands_over_at_once,
            election_observers_see_every_change_and_no_leader,
            election_lost_leader_cannot_proclaim,
            election_lead_campaigns_again_after_a_loss,
            election_cancelled_campaigns_leave_nothing_behind,
            election_a_cut_off_candidate_keeps_no_claim,
            election_refuses_bad_input_before_io,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(election_conformance; $runtime, $subject; $($case),*);
    };
}

/// Defines `fn $name(url)`, a [`server_cases::UrlFactory`] over `$connect` (an `async fn(&str) ->
/// lock_core::Result<S>`, `S` a store): what the process-case macros hand their cases.
#[doc(hidden)]
#[macro_export]
macro_rules! __url_factory {
    ($name:ident, $connect:path) => {
        fn $name(
            url: ::std::string::String,
        ) -> ::std::pin::Pin<
            ::std::boxed::Box<
                dyn ::std::future::Future<
                        Output = $crate::__private::Result<::std::sync::Arc<dyn $crate::__private::LockStore>>,
                    > + ::std::marker::Send,
            >,
        > {
            ::std::boxed::Box::pin(async move {
                $connect(&url)
                    .await
                    .map(|store| ::std::sync::Arc::new(store) as ::std::sync::Arc<dyn $crate::__private::LockStore>)
            })
        }
    };
}

/// Writes a primitive's cross-process cases for a backend: the worker entry `$worker` (which does nothing in a
/// normal test run), the blocking cases and the async ones (on tokio), each calling `$module::case(&$connect)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __process_cases {
    ($module:ident, $connect:ident, $worker:ident; blocking: $($blocking:ident),*; async: $($case:ident),* $(,)?) => {
        /// The entry point of the cases' worker processes (does nothing in a normal test run).
        #[test]
        fn $worker() {
            $crate::$module::worker(&$connect);
        }
        $(
            #[test]
            fn $blocking() {
                $crate::$module::$blocking(&$connect);
            }
        )*
        $(
            #[test]
            fn $case() {
                $crate::runtime::tokio(async {
                    $crate::$module::$case(&$connect).await;
                });
            }
        )*
    };
}

/// Writes the cross-process election cases of [`election_cases`] for a backend, and the `election_worker` entry
/// their worker processes run. Invoke it at the root of its own test binary (the workers select their entry by
/// that exact name).
///
/// `election_fault_tests!(CONNECT)`: `CONNECT` is an `async fn(&str) -> lock_core::Result<S>` (`S` a
/// [`LockStore`](lock_core::LockStore)), as for [`server_tests!`]; give it a short command timeout (the cases
/// partition and pause servers).
#[macro_export]
macro_rules! election_fault_tests {
    ($connect:path) => {
        $crate::__url_factory!(__election_connect, $connect);
        $crate::__process_cases!(election_cases, __election_connect, election_worker;
            blocking: soak_five_candidates_in_three_processes_under_kills_and_pauses;
            async:
            resign_hands_over_across_processes_in_about_one_round_trip,
            a_killed_leader_is_replaced_within_lease_and_retry_period,
            a_paused_leader_stopped_before_another_was_elected,
            terms_increase_across_a_restart_without_persistence,
            a_partitioned_candidate_never_returns_ok_without_the_key,
        );
    };
}

/// Writes the cross-process semaphore cases of [`semaphore_cases`] for a backend, and the `semaphore_worker` entry
/// their worker processes run. Invoke it at the root of its own test binary (the workers select their entry by
/// that exact name). `semaphore_fault_tests!(CONNECT)`, as [`election_fault_tests!`].
#[macro_export]
macro_rules! semaphore_fault_tests {
    ($connect:path) => {
        $crate::__url_factory!(__semaphore_connect, $connect);
        $crate::__process_cases!(semaphore_cases, __semaphore_connect, semaphore_worker;
            blocking: soak_holders_in_three_processes_under_kills_and_pauses;
            async:
            a_killed_holder_s_permits_return_within_its_ttl,
            a_paused_holder_never_frees_twice,
            a_retried_acquire_returns_the_same_grant,
            ten_thousand_cancelled_acquires_leave_nothing_behind,
        );
    };
}

/// Writes the cross-process read-write lock cases of [`rwlock_cases`] for a backend, and the `rwlock_worker` entry
/// their worker processes run. Invoke it at the root of its own test binary (the workers select their entry by
/// that exact name). `rwlock_fault_tests!(CONNECT)`, as [`election_fault_tests!`].
#[macro_export]
macro_rules! rwlock_fault_tests {
    ($connect:path) => {
        $crate::__url_factory!(__rwlock_connect, $connect);
        $crate::__process_cases!(rwlock_cases, __rwlock_connect, rwlock_worker;
            blocking: soak_readers_and_writers_in_three_processes_under_kills_and_pauses;
            async:
            a_killed_reader_costs_its_own_ttl_while_others_renew,
            a_killed_waiting_writer_stops_blocking_readers,
            a_paused_writer_never_frees_others,
            a_retried_acquire_returns_the_same_grant,
            ten_thousand_cancelled_acquires_leave_nothing_behind,
        );
    };
}

/// Writes one `#[test]` per case of [`foreign_conformance`] ([`conformance_tests!`] includes them): whatever another
/// library leaves at a lock's key holds the lock. `foreign_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the
/// subject must wrap a [`lock_core::Lock`] ([`Subject::engine`]).
#[macro_export]
macro_rules! foreign_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::foreign_tests!(@cases $runtime, $subject;
            a_foreign_holder_of_any_type_holds_the_lock,
            a_waiter_takes_the_lock_when_the_foreign_holder_expires,
            a_release_or_extension_that_finds_a_foreign_holder_is_typed,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(foreign_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per fenced-write case of [`fenced_conformance`] ([`conformance_tests!`] includes them).
///
/// `fenced_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! fenced_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::fenced_tests!(@cases $runtime, $subject;
            fenced_write_refuses_a_holder_whose_lease_ran_out,
            fenced_read_modify_write_loses_no_update_in_any_interleaving,
            fenced_writes_take_every_primitives_fence,
            fenced_writes_cancelled_anywhere_keep_the_fence_order,
            fenced_write_of_another_type_is_typed_and_fences_compare_exactly,
            fenced_stream_appends_only_current_holders_in_fence_order,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(fenced_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per semaphore case of [`semaphore_conformance`] ([`conformance_tests!`] includes them).
///
/// `semaphore_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! semaphore_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::semaphore_tests!(@cases $runtime, $subject;
            semaphore_never_grants_more_than_its_limit,
            semaphore_slots_are_distinct_and_fence_per_slot,
            semaphore_expired_holder_never_frees_twice,
            semaphore_release_wakes_a_waiter,
            semaphore_release_wakes_every_waiter_that_fits,
            semaphore_limit_mismatch_is_typed,
            semaphore_cancelled_acquires_leave_nothing_behind,
            semaphore_is_refused_where_it_cannot_hold,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(semaphore_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per read-write lock case of [`rwlock_conformance`] ([`conformance_tests!`] includes them).
///
/// `rwlock_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! rwlock_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::rwlock_tests!(@cases $runtime, $subject;
            rw_never_mixes_readers_and_a_writer,
            rw_waiting_writer_is_not_starved_by_readers,
            rw_dead_reader_costs_its_own_ttl_while_others_renew,
            rw_downgrade_is_atomic_and_lets_readers_in,
            rw_writers_are_fenced_and_readers_get_the_epoch,
            rw_write_release_lets_every_waiting_reader_in,
            rw_cancelled_waiting_writer_lets_held_back_readers_in,
            rw_expired_holds_are_lost_and_never_free_others,
            rw_cancelled_acquires_leave_nothing_behind,
            rw_is_refused_where_it_cannot_hold,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(rwlock_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per operator case of [`admin_conformance`] ([`conformance_tests!`] includes them).
///
/// `admin_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! admin_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::admin_tests!(@cases $runtime, $subject;
            inspect_shows_holder_ttl_fence_and_label,
            labelled_locks_keep_release_and_extend_semantics,
            inspect_reports_that_someone_waits,
            force_release_frees_wakes_and_keeps_the_fence,
            force_release_of_a_free_lock_frees_nothing,
            force_release_spares_a_holder_other_than_the_one_shown,
            force_release_hands_a_fair_lock_to_the_head,
            admin_calls_refuse_an_empty_name,
            every_primitive_refuses_a_name_outside_the_rule,
            every_primitive_is_inspected_and_force_released_alike,
            every_primitive_wakes_its_next_waiter_at_release,
            every_primitive_wakes_a_waiter_of_another_process_at_release,
            every_primitive_fences_alike,
            every_primitive_bounds_the_wait_of_its_last_waiter,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(admin_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per fair-lock case of [`fair_conformance`] ([`conformance_tests!`] includes them).
///
/// `fair_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! fair_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::fair_tests!(@cases $runtime, $subject;
            fair_grants_in_arrival_order,
            fair_release_grants_the_head,
            fair_newcomer_queues_behind_waiters,
            fair_cancelled_waiter_leaves_at_once,
            fair_spent_budget_leaves_the_queue,
            fair_live_waiters_keep_their_place_through_a_long_hold,
            fair_dead_waiter_is_skipped_within_its_waiter_ttl,
            fair_head_gets_a_lock_whose_holder_died,
            fair_waiters_take_back_places_whose_heartbeats_vanished,
            fair_and_plain_acquirers_exclude_each_other,
            fair_cancellation_storm,
            fair_fencing_on_demand_draws_in_hold_order,
            fair_is_refused_where_it_cannot_hold,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(fair_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per job-lock case of [`job_conformance`] ([`conformance_tests!`] includes them).
///
/// `job_tests!(RUNTIME, SUBJECT)`, as [`conformance_tests!`]; the subject must wrap a [`lock_core::Lock`]
/// ([`Subject::engine`]).
#[macro_export]
macro_rules! job_tests {
    ($runtime:ident, $subject:expr) => {
        $crate::job_tests!(@cases $runtime, $subject;
            job_runs_once_among_concurrent_replicas,
            job_at_least_for_keeps_the_job_after_a_short_run,
            job_whose_process_died_runs_again_after_at_most_for,
            job_overrun_without_keep_alive_is_cancelled,
            job_keep_alive_holds_a_long_run,
            job_tick_runs_once_per_tick,
            job_fencing_tokens_increase_and_agree_with_the_lock,
            job_bad_options_are_rejected,
            job_last_run_records_each_ending,
            job_cancelled_run_storm_leaves_the_job_free,
        );
    };
    (@cases $runtime:ident, $subject:expr; $($case:ident),* $(,)?) => {
        $crate::__subject_cases!(job_conformance; $runtime, $subject; $($case),*);
    };
}

/// Writes one `#[test]` per Redis Cluster case of [`cluster_cases`], for a backend.
///
/// `cluster_tests!(connect)`: `connect` is an `async fn(&RedisCluster) -> S` where `S: LockStore`, connecting the
/// backend's store to the given cluster. Cases run on a multi-threaded tokio runtime; the cluster-wide ones share
/// one cluster per test binary ([`cluster_cases::shared`]). Unix only.
#[macro_export]
macro_rules! cluster_tests {
    ($connect:path) => {
        $crate::cluster_tests!(@cases $connect;
            many_resources_over_all_slots_16_workers,
            release_notifications_reach_waiters_from_every_primary,
            script_flush_on_every_node_is_invisible,
            slot_migration_mid_run_is_invisible,
            lock_keeps_working_after_primary_killed,
            multi_resource_cross_slot_is_rejected_before_io,
            multi_resource_ordered_is_all_or_nothing_under_contention,
            a_release_names_the_waiting_process_on_its_shard,
            fenced_writes_run_on_every_primary_and_stay_in_the_guards_slot,
        );
    };
    (@cases $connect:path; $($case:ident),* $(,)?) => {
        $crate::__fixture_cases!(cluster_cases, $connect; $($case),*);
    };
}

/// Writes one `#[test]` per Sentinel case of [`sentinel_cases`], for a backend.
///
/// `sentinel_tests!(connect)`: `connect` is an `async fn(&RedisSentinel) -> S` where `S: LockStore`, connecting the
/// backend's store to the given deployment (through its Sentinels). Cases run on a multi-threaded tokio runtime;
/// the ones that kill a primary start a deployment of their own, the others share one per test binary
/// ([`sentinel_cases::shared`]). Unix only.
#[macro_export]
macro_rules! sentinel_tests {
    ($connect:path) => {
        $crate::sentinel_tests!(@cases $connect;
            release_notification_wakes_waiter,
            lock_keeps_working_after_failover,
            failover_trials_with_and_without_replica_ack,
            lost_grant_is_granted_again_and_its_fencing_token_may_repeat,
            readonly_from_demoted_primary_is_retryable_once,
            fenced_writes_hold_behind_sentinel,
        );
    };
    (@cases $connect:path; $($case:ident),* $(,)?) => {
        $crate::__fixture_cases!(sentinel_cases, $connect; $($case),*);
    };
}

/// Writes one `#[test]` per case of [`server_cases`], for a Redis backend.
///
/// `server_tests!(connect)`: `connect` is an `async fn(&str) -> lock_core::Result<S>` where `S: LockStore`,
/// connecting the backend's store to the server at the given URL (which may carry credentials). Cases run on a
/// multi-threaded tokio runtime, each with a server of its own.
#[macro_export]
macro_rules! server_tests {
    ($connect:path) => {
        $crate::server_tests!(@cases $connect;
            replica_wait_does_not_block_other_resources,
            a_wait_refused_by_the_acl_gives_the_grant_back,
            a_fence_counter_incrby_refuses_leaves_no_key,
            a_missing_acl_permission_is_auth_naming_it_and_leaves_no_key,
            a_wrong_password_is_auth_within_the_connect_timeout,
            multi_extend_names_the_stolen_resource,
            job_finish_never_touches_the_next_runs_lock,
            job_at_least_for_is_kept_on_the_server_clock,
            fair_waiters_of_one_process_share_their_heartbeats,
            fair_waiters_coming_back_renew_only_their_own_places,
            a_release_announces_itself_only_when_someone_tried,
            a_release_mark_the_acl_refuses_is_auth_not_wrongtype,
            a_listening_waiter_does_not_poll_while_the_lock_is_held,
            a_waiter_the_acl_keeps_off_the_channels_still_takes_a_released_lock,
            a_release_wakes_one_waiting_process,
            every_error_says_its_cause_once,
            every_server_error_kind_is_typed,
            a_fenced_write_the_acl_refuses_is_auth_and_writes_nothing,
            a_woken_waiter_blocked_by_something_else_passes_the_wake_up_on,
            announcements_and_debug_output_never_show_a_token,
            a_bad_url_names_its_part_and_a_server_that_is_not_redis_says_so,
            a_confirmed_subscription_hears_the_next_release,
            a_refused_connection_is_unavailable_naming_the_server,
            a_server_gone_is_unavailable_within_one_bound,
            a_password_to_a_server_without_one_is_auth,
            an_error_returned_from_main_prints_one_readable_line,
            a_key_of_another_type_at_a_lock_key_is_said_to_be_one,
        );
    };
    (@cases $connect:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::runtime::tokio(async {
                    $crate::server_cases::$case(&|url: ::std::string::String| {
                        ::std::boxed::Box::pin(async move {
                            $connect(&url)
                                .await
                                .map(|store| ::std::sync::Arc::new(store) as ::std::sync::Arc<dyn $crate::__private::LockStore>)
                        })
                    })
                    .await;
                });
            }
        )*
    };
}

/// Writes one `#[test]` per error-parity case of [`server_cases`] (issue 54 §3: the same failure is the same error,
/// within the same bound, on every backend), for a Redis backend; [`server_tests!`] includes them.
///
/// `parity_tests!(connect)`, with `connect` as for [`server_tests!`].
#[macro_export]
macro_rules! parity_tests {
    ($connect:path) => {
        $crate::server_tests!(@cases $connect;
            a_refused_connection_is_unavailable_naming_the_server,
            a_server_gone_is_unavailable_within_one_bound,
            a_password_to_a_server_without_one_is_auth,
            a_wrong_password_is_auth_within_the_connect_timeout,
            an_error_returned_from_main_prints_one_readable_line,
            a_bad_url_names_its_part_and_a_server_that_is_not_redis_says_so,
        );
    };
}

/// Writes one `#[test]` per case of [`tls_cases`], for a Redis backend built with TLS.
///
/// `tls_tests!(connect)`: `connect` is an `async fn(tls_cases::TlsConnect) -> lock_core::Result<S>` where
/// `S: LockStore`, connecting the backend's store over TLS as the argument says. Cases run on a multi-threaded tokio
/// runtime, each with servers of its own.
#[macro_export]
macro_rules! tls_tests {
    ($connect:path) => {
        $crate::tls_tests!(@cases $connect;
            mutual_tls_with_a_client_certificate_works,
            refused_certificates_are_typed_errors_within_the_connect_timeout,
            a_tls_url_to_a_plain_server_is_a_tls_error,
            a_plain_url_to_a_tls_server_is_a_tls_error,
            certificates_with_a_plain_url_are_refused,
        );
    };
    (@cases $connect:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::runtime::tokio(async {
                    $crate::tls_cases::$case(&|how: $crate::tls_cases::TlsConnect| {
                        ::std::boxed::Box::pin(async move {
                            $connect(how)
                                .await
                                .map(|store| ::std::sync::Arc::new(store) as ::std::sync::Arc<dyn $crate::__private::LockStore>)
                        })
                    })
                    .await;
                });
            }
        )*
    };
}

/// One `#[test]` per case of a fixture's case module (`cluster_cases`, `sentinel_cases`), each case given a
/// factory that connects the backend's store to the fixture; not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __fixture_cases {
    ($module:ident, $connect:path; $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                $crate::runtime::tokio(async {
                    $crate::$module::$case(&|fixture| {
                        ::std::boxed::Box::pin(async move {
                            ::std::sync::Arc::new($connect(fixture).await)
                                as ::std::sync::Arc<dyn $crate::__private::LockStore>
                        })
                    })
                    .await;
                });
            }
        )*
    };
}

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

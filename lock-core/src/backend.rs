//! What a backend author needs: the small raw interface under the application API (as `opendal::raw` is under
//! `opendal::Operator`). An application or a framework never names anything here; [`crate::guide::backends`] is
//! the entry.
//!
//! A Redis backend implements [`ScriptStore`]: run one of lock-core's [`Call`]s (a [`Script`] by `EVALSHA`, or one
//! plain command) and hand back the [`Reply`] in lock-core's own type, with a [`ReleaseHub`] that turns the release
//! notifications its subscriber receives into wake-ups. Every `ScriptStore` is a [`LockStore`], the engine's view of
//! a store, so every primitive of lock-core runs on it without a line of backend code; `lock-testkit`'s
//! `conformance_tests!` proves it.
//!
//! ```
//! use async_trait::async_trait;
//! use lock_core::backend::{Call, Ran, ScriptStore, Topology};
//! use lock_core::Result;
//!
//! /// A backend that forwards every call to the in-memory store (a real one sends it to its server).
//! #[derive(Debug)]
//! struct Forwarding(lock_core::MemoryStore);
//!
//! #[async_trait]
//! impl ScriptStore for Forwarding {
//!     async fn run(&self, call: Call<'_>) -> Result<Ran> {
//!         self.0.run(call).await
//!     }
//!     fn topology(&self) -> Topology {
//!         Topology::Single
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! let lock = lock_core::Lock::new(Forwarding(lock_core::MemoryStore::new()));
//! let guard = lock.acquire("orders", &lock_core::LockOptions::new(std::time::Duration::from_secs(5))).await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

pub use crate::error::{is_tls_answer, AclRefusal, BoxError, NotRedis, PlainTextServer, TlsOnlyServer, TLS_PROBE};
pub use crate::options::validate_ttl;
pub use crate::resource::validate_prefix;
pub use crate::revision::store::{Change, Enqueued, Entry, Lease, LeaseId, Order, Range, Revision, RevisionStore};
pub use crate::rt::{live_background_tasks, live_renewal_tasks, spawn_background, BackgroundTask};
pub use crate::seam::notify::{Confirmation, ReleaseHub, ReleaseWatch, SubscriptionControl};
pub use crate::seam::store::{
    AcquireAllReply, AcquireAllRequest, AcquireReply, AcquireRequest, ExtendReply, LockStore,
};
pub use crate::seam::tls_probe::tls_only_server;
pub use crate::seam::transport::{Call, Command, Ran, Reply, Script, ScriptStore, Topology};
pub use crate::seam::{scripts, server_error, server_url};

/// Sleep, time out and spawn on whichever enabled runtime is current: lock-core's runtime abstraction, so that a
/// backend times out and spawns exactly as the engine does.
///
/// tokio is used when a tokio runtime is current on this thread. Otherwise, with `rt-async-std` or `rt-smol`,
/// timers come from `async-io` (the reactor async-std and smol share, which also runs outside their executors) and
/// tasks go to async-std's or smol's global executor. With none of these, operations that need a runtime return
/// [`LockError::NoRuntime`](crate::LockError::NoRuntime) instead of panicking; so do timers on a tokio runtime built
/// without `enable_time()` (tokio itself would panic there).
pub mod rt {
    pub use crate::rt::{compiled, sleep, timeout, Timed};
}

//! The seam between the engine and a Redis client: what a backend implements ([`transport::ScriptStore`]: run one
//! of lock-core's calls), the engine's view of any store ([`store::LockStore`], with the lock's own calls in
//! [`mutex_calls`]), the scripts every backend sends, how a server's error reply is read, and the hub that turns
//! release notifications into wake-ups.
//!
//! Nothing here knows a primitive beyond the lock's own calls; the engine (`crate::engine`) and the primitives sit
//! above it.

pub(crate) mod mutex_calls;
pub(crate) mod notify;
pub mod scripts;
pub mod server_error;
pub mod server_url;
pub(crate) mod store;
pub mod tls_probe;
pub mod transport;

//! An instance `lockctl` could not connect to, standing in its place: over a Redlock the other instances still
//! answer, and this one's error is shown for it.

use async_trait::async_trait;
use lock_redis_rs::lock_core::backend::{Call, Ran, ScriptStore};
use lock_redis_rs::lock_core::{LockError, Result};

/// Answers every call with the error its connection failed with.
#[derive(Debug)]
pub(crate) struct Unreachable {
    /// The instance (its URL without credentials) and why it could not be reached.
    pub(crate) why: String,
}

#[async_trait]
impl ScriptStore for Unreachable {
    async fn run(&self, _call: Call<'_>) -> Result<Ran> {
        Err(LockError::unavailable(self.why.clone()))
    }
}

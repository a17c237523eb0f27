//! Stores that break one safety rule on purpose, so that a history checker can show it has teeth: the real engine
//! runs on a [`BrokenStore`], and the [`primitive_checker`](crate::primitive_checker) for the rule it breaks must
//! find the breach in what the test recorded (and find none on a healthy store).
//!
//! ```
//! use lock_core::{Lock, LockOptions};
//! use lock_testkit::broken::{Breakage, BrokenStore};
//! use std::time::Duration;
//!
//! # lock_testkit::runtime::tokio(async {
//! let lock = Lock::new(BrokenStore::new(Breakage::GrantsTwice));
//! let opts = LockOptions::new(Duration::from_secs(5));
//! let a = lock.try_acquire("r", &opts).await?.expect("free");
//! let b = lock.try_acquire("r", &opts).await?.expect("granted twice: the store is broken");
//! # drop((a, b));
//! # Ok::<(), lock_core::LockError>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use lock_core::backend::Command;
use lock_core::backend::{Call, Ran, ReleaseHub, Reply, ScriptStore};
use lock_core::{MemoryStore, Result};

/// Which rule a [`BrokenStore`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Breakage {
    /// Every acquire is granted: the keys that would refuse it (a lock's key, a semaphore's holders and slots, an
    /// election's key) are deleted first. Breaks mutual exclusion and a semaphore's limit.
    GrantsTwice,
    /// Every grant carries the first fence the store granted for its key (a lock's fence, a permit's, an election's
    /// term). Breaks the increasing-fence rule and one-leader-per-term.
    ReusesFences,
    /// A read hold is forgotten as soon as it is granted. Breaks a read-write lock's exclusion.
    ForgetsReaders,
    /// A scheduled job's record and ticks are forgotten before each start. Breaks at-most-once per tick.
    ForgetsTicks,
}

/// An in-memory store (the same scripts as Redis) that breaks one rule: see [`Breakage`].
#[derive(Debug)]
pub struct BrokenStore {
    inner: MemoryStore,
    breakage: Breakage,
    first_fences: Mutex<HashMap<String, i64>>,
}

impl BrokenStore {
    /// A fresh store that breaks `breakage`'s rule.
    pub fn new(breakage: Breakage) -> Self {
        BrokenStore { inner: MemoryStore::new(), breakage, first_fences: Mutex::new(HashMap::new()) }
    }

    fn delete(&self, keys: &[&str]) {
        if !keys.is_empty() {
            let mut command = vec!["DEL"];
            command.extend_from_slice(keys);
            self.inner.command(&command);
        }
    }
}

#[async_trait]
impl ScriptStore for BrokenStore {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        let script = match call.command {
            Command::Script(script) => script.name(),
            _ => "",
        };
        let acquire = call.operation == "acquire";
        match self.breakage {
            Breakage::GrantsTwice if acquire => {
                // The lock key (and a semaphore's holders and slots, which its first two keys are).
                let count = if script == "sem-acquire" { 2 } else { 1 };
                self.delete(call.keys.get(..count).unwrap_or_default());
            }
            Breakage::ForgetsTicks if acquire && script == "job-start" => {
                self.delete(call.keys.get(2..).unwrap_or_default());
            }
            _ => {}
        }
        let mut ran = self.inner.run(call).await?;
        let granted = ran.reply.is_grant();
        match self.breakage {
            Breakage::ReusesFences if acquire && granted => {
                if let Reply::Array(items) = &mut ran.reply {
                    if let (Some(Reply::Int(fence)), Some(key)) = (items.get_mut(1), call.route_key()) {
                        let mut first = self.first_fences.lock().unwrap_or_else(|p| p.into_inner());
                        *fence = *first.entry(format!("{script} {key}")).or_insert(*fence);
                    }
                }
            }
            Breakage::ForgetsReaders if acquire && granted && script == "rw-read" => {
                // The readers' hash is the read script's second key.
                self.delete(call.keys.get(1..2).unwrap_or_default());
            }
            _ => {}
        }
        Ok(ran)
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        self.inner.release_hub()
    }

    fn deployment(&self) -> &'static str {
        "broken"
    }
}

//! Models of the coordination protocols, checked with [stateright] over every interleaving of their actions
//! within small bounds. Each model shares `lock-core`'s arithmetic instead of restating it: validity is
//! [`lock_core::lease::valid_until`] of the instant a request started, and the fencing rule is the acquire
//! script's ([`next_fence`]).
//!
//! | model | what it explores |
//! |---|---|
//! | [`single`] | two clients, one server: a lock with fencing, a fenced resource, lost requests and replies, pauses, restarts with the server's clock stepped back |
//! | [`fair`] | three clients of a fair lock: tickets, places kept by heartbeats, hand-off to the live head, crashes |
//! | [`holders`] | three clients of a semaphore, a read-write lock or an election: per-holder expiry, renewals, crashes, retries with the same token |
//! | [`redlock`] | two clients, three instances: quorum grants, the fence write-back, orphan requests, restarts with and without persistence, a client clock that lags |
//!
//! Each model has switches that re-introduce known bugs; the tests show the checker finds each.

#![deny(missing_docs)]

pub mod fair;
pub mod holders;
pub mod redlock;
pub mod single;

pub use single::{Config, LockModel};

use std::time::Duration;

/// One tick of the model's clock.
pub const TICK: Duration = Duration::from_millis(100);

/// The models' clock: ticks of [`TICK`] from an origin, and lock-core's validity arithmetic on them.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: std::time::Instant,
}

impl Clock {
    /// A clock whose tick 0 is now.
    pub fn new() -> Self {
        Clock { base: std::time::Instant::now() }
    }

    /// The last millisecond (since tick 0) a grant of `ttl_ticks` requested at tick `started` is trusted, by
    /// [`lock_core::lease::valid_until`], exactly as the engine computes it.
    pub fn valid_until_ms(&self, ttl_ticks: u8, started: u8) -> u64 {
        let ttl = TICK * u32::from(ttl_ticks);
        let until = lock_core::lease::valid_until(self.base + TICK * u32::from(started), ttl);
        u64::try_from(until.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// The fencing counter's next value (the acquire script's rule): `max(counter + 1, floor)`, where the floor is the
/// server's clock in µs; without a floor, `counter + 1`.
pub fn next_fence(counter: u64, floor: Option<u64>) -> u64 {
    let next = counter.saturating_add(1);
    floor.map_or(next, |floor| next.max(floor))
}

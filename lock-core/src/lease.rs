//! Validity arithmetic: how long a lock granted by the server may be trusted by its holder.
//!
//! The holder starts its monotonic clock *before* sending the request, so everything the request spent on the
//! wire or in a queue is subtracted: validity = `ttl − elapsed − drift`, with drift = `ttl·1% + 2 ms` for the
//! difference between the server's and our clock rates and the server's expiry granularity. All of it saturates:
//! a validity that would go negative is zero, and such a grant is given back instead of used.

use std::time::{Duration, Instant};

/// The drift allowance for a TTL: `ttl / 100 + 2 ms`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(lock_core::lease::drift(Duration::from_secs(10)), Duration::from_millis(102));
/// ```
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The instant until which a lock granted with `ttl` to a request started at `started` is valid.
///
/// ```
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let until = lock_core::lease::valid_until(t0, Duration::from_secs(1));
/// assert_eq!(until - t0, Duration::from_millis(988));
/// ```
pub fn valid_until(started: Instant, ttl: Duration) -> Instant {
    started + ttl.saturating_sub(drift(ttl))
}

/// Validity left at `now` for a grant of `ttl` requested at `started` (zero once used up).
pub fn remaining(started: Instant, ttl: Duration, now: Instant) -> Duration {
    valid_until(started, ttl).saturating_duration_since(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_subtracts_elapsed_and_drift_and_saturates() {
        let t0 = Instant::now();
        let ttl = Duration::from_millis(100);
        assert_eq!(remaining(t0, ttl, t0), Duration::from_millis(97));
        assert_eq!(remaining(t0, ttl, t0 + Duration::from_millis(50)), Duration::from_millis(47));
        assert_eq!(remaining(t0, ttl, t0 + Duration::from_secs(5)), Duration::ZERO);
        // The smallest TTL still leaves a positive window.
        assert!(remaining(t0, crate::MIN_TTL, t0) > Duration::ZERO);
    }
}

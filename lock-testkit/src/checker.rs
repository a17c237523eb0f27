//! A mutual-exclusion checker: records who believed they held a lock when, and finds overlaps and fencing
//! regressions by the fenced-mutex rule of [`primitive_checker::mutex`](crate::primitive_checker::mutex).
//!
//! One machine has one monotonic clock shared by every thread and process, so intervals recorded with
//! [`Instant`] by concurrent holders can be compared directly.

use std::sync::Mutex;
use std::time::Instant;

/// One holder's belief: it held the lock from `start` to `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Who held it (the owner token, or any label).
    pub owner: String,
    /// The fencing token of the acquisition, if any.
    pub fence: Option<u64>,
    /// When the acquire returned.
    pub start: Instant,
    /// When the holder stopped relying on the lock: the start of its release, or its validity deadline if that
    /// came first.
    pub end: Instant,
}

impl Hold {
    /// The hold of `guard` from `start` (when its acquire returned) until now, or its validity deadline if that
    /// came first: call it right before releasing. Its fence is drawn now if it is drawn on demand and was not yet
    /// (while the lock is held, so it is this hold's), and none is recorded when drawing found the lock gone.
    pub async fn of(guard: &dyn lock_core::LockGuard, start: Instant) -> Hold {
        let fence = guard.fence().await.ok().map(|f| f.get());
        Hold { owner: guard.token().to_string(), fence, start, end: Instant::now().min(guard.valid_until()) }
    }

    /// As [`of`](Self::of), with the fence only if it was drawn already: no I/O, for a harness that controls every
    /// call the lock makes (the schedule explorer, the model replays).
    pub fn as_drawn(guard: &dyn lock_core::LockGuard, start: Instant) -> Hold {
        let fence = guard.drawn_fence().map(|f| f.get());
        Hold { owner: guard.token().to_string(), fence, start, end: Instant::now().min(guard.valid_until()) }
    }
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Holds recorded.
    pub holds: usize,
    /// Pairs of holds whose intervals intersect.
    pub overlaps: Vec<(Hold, Hold)>,
    /// Pairs where a later hold carried a fencing token not greater than an earlier one's.
    pub fence_regressions: Vec<(Hold, Hold)>,
}

impl Report {
    /// No overlap and no fencing regression.
    pub fn is_clean(&self) -> bool {
        self.overlaps.is_empty() && self.fence_regressions.is_empty()
    }
}

/// Collects [`Hold`]s from any number of tasks and checks them.
///
/// ```
/// use lock_testkit::{Checker, Hold};
/// use std::time::{Duration, Instant};
///
/// let c = Checker::new();
/// let t = Instant::now();
/// let ms = Duration::from_millis;
/// c.record(Hold { owner: "a".into(), fence: Some(1), start: t, end: t + ms(10) });
/// c.record(Hold { owner: "b".into(), fence: Some(2), start: t + ms(10), end: t + ms(20) });
/// assert!(c.report().is_clean());
/// c.record(Hold { owner: "c".into(), fence: Some(3), start: t + ms(15), end: t + ms(30) });
/// assert_eq!(c.report().overlaps.len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct Checker {
    holds: Mutex<Vec<Hold>>,
}

impl Checker {
    /// An empty checker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one hold.
    pub fn record(&self, hold: Hold) {
        self.holds.lock().unwrap_or_else(|p| p.into_inner()).push(hold);
    }

    /// Checks everything recorded so far.
    ///
    /// A hold that ends where it starts (or before) is empty: its validity had run out by the time its holder
    /// looked (a process paused between its acquire's return and its first timestamp), so the holder never acted
    /// under it, and it neither overlaps another hold nor orders their tokens. It still counts in
    /// [`Report::holds`].
    pub fn report(&self) -> Report {
        let holds = self.holds.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let sorted = crate::primitive_checker::by_start(&holds);
        let pairs = |found: Vec<(&Hold, &Hold)>| found.into_iter().map(|(a, b)| (a.clone(), b.clone())).collect();
        Report {
            holds: holds.len(),
            overlaps: pairs(crate::primitive_checker::overlapping_pairs(&sorted)),
            fence_regressions: pairs(crate::primitive_checker::fence_regressions(&sorted)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn finds_fence_regressions_and_contained_overlaps() {
        let c = Checker::new();
        let t = Instant::now();
        let ms = Duration::from_millis;
        c.record(Hold { owner: "a".into(), fence: Some(5), start: t, end: t + ms(100) });
        // Entirely inside a's interval, and a lower fence.
        c.record(Hold { owner: "b".into(), fence: Some(4), start: t + ms(10), end: t + ms(20) });
        // After b but still inside a.
        c.record(Hold { owner: "c".into(), fence: Some(6), start: t + ms(30), end: t + ms(40) });
        let r = c.report();
        assert_eq!(r.holds, 3);
        assert_eq!(r.overlaps.len(), 2);
        assert_eq!(r.fence_regressions.len(), 1);
        assert!(!r.is_clean());
    }

    /// The semaphore soak's false alarm (CI, seed 10466495297621805984): a worker paused after its acquire
    /// returned took its first timestamp after the permit had expired and been granted again; its belief, clamped
    /// to start where it ended, sat inside the next holder's with a lower token. It held nothing.
    #[test]
    fn an_empty_hold_overlaps_nothing_and_orders_no_token() {
        let c = Checker::new();
        let t = Instant::now();
        let ms = Duration::from_millis;
        c.record(Hold { owner: "next".into(), fence: Some(9), start: t, end: t + ms(50) });
        c.record(Hold { owner: "paused".into(), fence: Some(8), start: t + ms(48), end: t + ms(48) });
        let r = c.report();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.holds, 2);
        // A hold of any length there is still a breach.
        c.record(Hold { owner: "late".into(), fence: Some(7), start: t + ms(40), end: t + ms(41) });
        let r = c.report();
        assert_eq!((r.overlaps.len(), r.fence_regressions.len()), (1, 1), "{r:?}");
    }
}

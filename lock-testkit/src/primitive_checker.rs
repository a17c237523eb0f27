//! History checkers for every primitive: given the grants a test recorded (who believed it held what, when, with
//! which fence), each checker finds the breaches of one primitive's safety rule.
//!
//! | checker | rule (after Jepsen's fenced-mutex and `lock-set` checkers) |
//! |---|---|
//! | [`mutex`] | no two holds overlap; each grant's fence is above every earlier grant's |
//! | [`semaphore`] | at most `limit` permits held at any instant; a slot is held by one permit at a time, its fences increasing |
//! | [`rwlock`] | no writer beside a reader or another writer; writers' fences increasing |
//! | [`election`] | one leader at a time and per term; terms increasing |
//! | [`job_ticks`] | each tick runs at most once; runs never overlap |
//!
//! A hold's interval is the holder's belief: from when its acquire returned to the start of its release, or its
//! validity deadline if that came first ([`Hold::of`]). One machine has one monotonic clock, so holds recorded by
//! tasks and processes compare directly. [`broken`](crate::broken) has a store for each rule that breaks it on
//! purpose: the checkers' tests run the real engine on it and must find the breach.
//!
//! ```
//! use lock_testkit::primitive_checker::mutex;
//! use lock_testkit::Hold;
//! use std::time::{Duration, Instant};
//!
//! let t = Instant::now();
//! let hold = |owner: &str, fence: u64, from: u64, to: u64| Hold {
//!     owner: owner.into(),
//!     fence: Some(fence),
//!     start: t + Duration::from_millis(from),
//!     end: t + Duration::from_millis(to),
//! };
//! assert!(mutex(&[hold("a", 1, 0, 10), hold("b", 2, 10, 20)]).is_clean());
//! let findings = mutex(&[hold("a", 1, 0, 10), hold("b", 1, 5, 20)]);
//! assert_eq!(findings.problems.len(), 2, "{findings:?}"); // an overlap, and a fence not above the earlier one
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use crate::Hold;

/// What a checker found: one line per breach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// The breaches, each naming the holds involved.
    pub problems: Vec<String>,
}

impl Findings {
    /// No breach.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn add(&mut self, problem: String) {
        self.problems.push(problem);
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.problems.is_empty() {
            return f.write_str("no breach");
        }
        write!(f, "{} breaches: {}", self.problems.len(), self.problems.join("; "))
    }
}

fn name(hold: &Hold) -> String {
    match hold.fence {
        Some(fence) => format!("{} (fence {fence})", hold.owner),
        None => hold.owner.clone(),
    }
}

fn overlap(a: &Hold, b: &Hold) -> bool {
    a.start < b.end && b.start < a.end
}

/// Holds in the order their acquires returned, without empty ones.
///
/// A hold that ends where it starts (or before) is empty: its validity had run out by the time its holder looked (a
/// process paused between its acquire's return and its first timestamp), so the holder never acted under it, and
/// it neither overlaps another hold nor orders their fences.
pub(crate) fn by_start<'a>(holds: impl IntoIterator<Item = &'a Hold>) -> Vec<&'a Hold> {
    let mut sorted: Vec<&Hold> = holds.into_iter().filter(|h| h.end > h.start).collect();
    sorted.sort_by_key(|h| h.start);
    sorted
}

/// Pairs of overlapping holds among `holds` (sorted by start), each pair once, earlier first.
pub(crate) fn overlapping_pairs<'a>(holds: &[&'a Hold]) -> Vec<(&'a Hold, &'a Hold)> {
    let mut pairs = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        // Sorted by start: once one starts after `a` ends, every later one does too.
        for b in holds.iter().skip(i + 1).take_while(|b| b.start < a.end) {
            pairs.push((*a, *b));
        }
    }
    pairs
}

/// Each grant whose fence is not above every earlier grant's (grants sorted by when their acquires returned),
/// paired with the earlier grant of the highest fence.
pub(crate) fn fence_regressions<'a>(holds: &[&'a Hold]) -> Vec<(&'a Hold, &'a Hold)> {
    let mut regressions = Vec::new();
    let mut highest: Option<&Hold> = None;
    for hold in holds {
        let Some(fence) = hold.fence else { continue };
        match highest {
            Some(before) if before.fence.is_some_and(|f| fence <= f) => regressions.push((before, *hold)),
            _ => highest = Some(*hold),
        }
    }
    regressions
}

fn overlaps(what: &str, holds: &[&Hold], findings: &mut Findings) {
    for (a, b) in overlapping_pairs(holds) {
        findings.add(format!("{what}: {} and {} held at once", name(a), name(b)));
    }
}

fn increasing(what: &str, holds: &[&Hold], findings: &mut Findings) {
    for (before, hold) in fence_regressions(holds) {
        findings.add(format!("{what}: {} granted after {}", name(hold), name(before)));
    }
}

/// The fenced-mutex rule: no two holds overlap, and each grant's fence is above every earlier grant's.
pub fn mutex(holds: &[Hold]) -> Findings {
    let mut findings = Findings::default();
    let sorted = by_start(holds);
    overlaps("mutex", &sorted, &mut findings);
    increasing("mutex", &sorted, &mut findings);
    findings
}

/// A semaphore's rule: at most `limit` slots held at any instant, each slot by one permit at a time, and the fences
/// each slot sees increasing. `permits` pairs each permit's hold with the slots it held.
pub fn semaphore(limit: usize, permits: &[(Vec<u32>, Hold)]) -> Findings {
    let mut findings = Findings::default();
    // Sweep: +n at a start, −n at an end; ends first at one instant (a hold ending as another starts is no overlap).
    let mut events: Vec<(Instant, bool, usize, &Hold)> = Vec::new();
    for (slots, hold) in permits {
        events.push((hold.start, true, slots.len(), hold));
        events.push((hold.end, false, slots.len(), hold));
    }
    events.sort_by_key(|(at, starts, _, _)| (*at, *starts));
    let mut held = 0usize;
    for (_, starts, n, hold) in events {
        if starts {
            held = held.saturating_add(n);
            if held > limit {
                findings.add(format!("semaphore: {held} slots of {limit} held once {} started", name(hold)));
            }
        } else {
            held = held.saturating_sub(n);
        }
    }
    let mut per_slot: BTreeMap<u32, Vec<&Hold>> = BTreeMap::new();
    for (slots, hold) in permits {
        for slot in slots {
            per_slot.entry(*slot).or_default().push(hold);
        }
    }
    for (slot, holds) in per_slot {
        let sorted = by_start(holds);
        overlaps(&format!("semaphore slot {slot}"), &sorted, &mut findings);
        increasing(&format!("semaphore slot {slot}"), &sorted, &mut findings);
    }
    findings
}

/// A read-write lock's rule: no writer beside a reader or another writer, and writers' fences increasing.
pub fn rwlock(reads: &[Hold], writes: &[Hold]) -> Findings {
    let mut findings = Findings::default();
    let writers = by_start(writes);
    overlaps("rwlock writers", &writers, &mut findings);
    increasing("rwlock writers", &writers, &mut findings);
    for w in &writers {
        for r in reads.iter().filter(|r| overlap(w, r)) {
            findings.add(format!("rwlock: writer {} beside reader {}", name(w), name(r)));
        }
    }
    findings
}

/// An election's rule: one leader at a time, one leader per term (the hold's fence), terms increasing.
pub fn election(leaderships: &[Hold]) -> Findings {
    let mut findings = Findings::default();
    let sorted = by_start(leaderships);
    overlaps("election", &sorted, &mut findings);
    increasing("election terms", &sorted, &mut findings);
    let mut owners: BTreeMap<u64, &Hold> = BTreeMap::new();
    for hold in &sorted {
        let Some(term) = hold.fence else { continue };
        if let Some(first) = owners.get(&term) {
            if first.owner != hold.owner {
                findings.add(format!("election: term {term} led by {} and by {}", first.owner, hold.owner));
            }
        } else {
            owners.insert(term, hold);
        }
    }
    findings
}

/// A scheduled job's rule: each tick runs at most once, and runs never overlap. `runs` pairs each run's hold with
/// its tick.
pub fn job_ticks(runs: &[(u64, Hold)]) -> Findings {
    let mut findings = Findings::default();
    let mut seen: BTreeMap<u64, &Hold> = BTreeMap::new();
    for (tick, hold) in runs {
        if let Some(first) = seen.get(tick) {
            findings.add(format!("job: tick {tick} ran twice, by {} and by {}", name(first), name(hold)));
        } else {
            seen.insert(*tick, hold);
        }
    }
    let sorted = by_start(runs.iter().map(|(_, hold)| hold));
    overlaps("job", &sorted, &mut findings);
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t: Instant, owner: &str, fence: u64, from: u64, to: u64) -> Hold {
        Hold {
            owner: owner.into(),
            fence: Some(fence),
            start: t + Duration::from_millis(from),
            end: t + Duration::from_millis(to),
        }
    }

    #[test]
    fn each_rule_holds_for_a_clean_history_and_names_each_breach() {
        let t = Instant::now();
        let clean = [at(t, "a", 1, 0, 10), at(t, "b", 2, 10, 20), at(t, "c", 3, 25, 30)];
        assert!(mutex(&clean).is_clean());
        assert!(election(&clean).is_clean());
        assert!(rwlock(&[at(t, "r", 0, 20, 25)], &clean).is_clean());
        assert!(job_ticks(&[(1, clean[0].clone()), (2, clean[1].clone())]).is_clean());
        let permits =
            [(vec![0], at(t, "a", 1, 0, 10)), (vec![1], at(t, "b", 2, 5, 15)), (vec![0], at(t, "c", 3, 10, 20))];
        assert!(semaphore(2, &permits).is_clean(), "{}", semaphore(2, &permits));

        assert_eq!(semaphore(1, &permits).problems.len(), 2, "{}", semaphore(1, &permits));
        let same_slot = [(vec![0], at(t, "a", 5, 0, 10)), (vec![0], at(t, "b", 4, 5, 15))];
        assert_eq!(semaphore(2, &same_slot).problems.len(), 2, "{}", semaphore(2, &same_slot));
        let reader = at(t, "r", 0, 5, 12);
        assert_eq!(rwlock(std::slice::from_ref(&reader), &clean).problems.len(), 2, "the reader overlaps a and b");
        let twice = [at(t, "a", 7, 0, 10), at(t, "b", 7, 20, 30)];
        let findings = election(&twice);
        assert_eq!(findings.problems.len(), 2, "{findings}"); // a term not above, and two leaders of term 7
        assert_eq!(job_ticks(&[(1, clean[0].clone()), (1, clean[2].clone())]).problems.len(), 1);
    }
}

//! A history of what lock holders did and believed, recorded by any number of worker processes, and the checks
//! run over it.
//!
//! One machine has one monotonic clock (`CLOCK_MONOTONIC`) for every process, so events recorded by different
//! workers are stamped with [`monotonic_nanos`] and compared directly. Each worker appends to its own file (no
//! locking between processes); [`History::load`] merges them.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checker::{Checker, Hold, Report};
pub use crate::oracle::WriteOutcome;

/// Nanoseconds on this machine's monotonic clock (the clock [`Instant`] uses on Linux), comparable across
/// processes.
pub fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we pass and has no other effect.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The monotonic-clock reading of an [`Instant`] of this process.
pub fn instant_nanos(at: Instant) -> u64 {
    let now = Instant::now();
    let base = monotonic_nanos();
    if at <= now {
        base.saturating_sub((now - at).as_nanos() as u64)
    } else {
        base.saturating_add((at - now).as_nanos() as u64)
    }
}

/// The `Instant` of a monotonic-ns stamp taken by any process on this machine (the inverse of [`instant_nanos`]).
pub fn nanos_instant(nanos: u64) -> Instant {
    let now = Instant::now();
    let base = monotonic_nanos();
    if nanos <= base {
        now.checked_sub(Duration::from_nanos(base - nanos)).unwrap_or(now)
    } else {
        now + Duration::from_nanos(nanos - base)
    }
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The worker acquired with `token`; it may trust the lock until `valid_until` (monotonic ns).
    Acquired {
        /// Owner token.
        token: String,
        /// Fencing token, 0 when fencing is off.
        fence: u64,
        /// Validity deadline, monotonic ns.
        valid_until: u64,
    },
    /// The worker stopped relying on the lock (release started).
    Released {
        /// Owner token.
        token: String,
    },
    /// The worker learned the lock was lost.
    Lost {
        /// Owner token.
        token: String,
    },
    /// An extension reached the store.
    Extended {
        /// Owner token.
        token: String,
    },
    /// A fenced write to the protected resource.
    Write {
        /// Owner token.
        token: String,
        /// Fencing token sent with the write.
        fence: u64,
        /// What the resource answered.
        outcome: WriteOutcome,
    },
}

/// One stamped event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Monotonic ns.
    pub at: u64,
    /// Which worker.
    pub worker: u32,
    /// What.
    pub kind: EventKind,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.at, self.worker)?;
        match &self.kind {
            EventKind::Acquired { token, fence, valid_until } => write!(f, "acquired {token} {fence} {valid_until}"),
            EventKind::Released { token } => write!(f, "released {token}"),
            EventKind::Lost { token } => write!(f, "lost {token}"),
            EventKind::Extended { token } => write!(f, "extended {token}"),
            EventKind::Write { token, fence, outcome } => {
                let o = match outcome {
                    WriteOutcome::Accepted => "accepted",
                    WriteOutcome::Rejected => "rejected",
                    WriteOutcome::LostUpdate => "lost-update",
                };
                write!(f, "write {token} {fence} {o}")
            }
        }
    }
}

fn parse(line: &str) -> Option<Event> {
    let mut it = line.split_whitespace();
    let at = it.next()?.parse().ok()?;
    let worker = it.next()?.parse().ok()?;
    let kind = it.next()?;
    let token = it.next()?.to_owned();
    let kind = match kind {
        "acquired" => {
            EventKind::Acquired { token, fence: it.next()?.parse().ok()?, valid_until: it.next()?.parse().ok()? }
        }
        "released" => EventKind::Released { token },
        "lost" => EventKind::Lost { token },
        "extended" => EventKind::Extended { token },
        "write" => {
            let fence = it.next()?.parse().ok()?;
            let outcome = match it.next()? {
                "accepted" => WriteOutcome::Accepted,
                "rejected" => WriteOutcome::Rejected,
                "lost-update" => WriteOutcome::LostUpdate,
                _ => return None,
            };
            EventKind::Write { token, fence, outcome }
        }
        _ => return None,
    };
    Some(Event { at, worker, kind })
}

/// Appends one worker's events to its file (flushed per event, so a killed worker loses nothing it recorded).
#[derive(Debug)]
pub struct Recorder {
    worker: u32,
    out: BufWriter<File>,
}

impl Recorder {
    /// Opens (appending) the history file of `worker` in `dir`.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(dir: &Path, worker: u32) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(History::file(dir, worker))?;
        Ok(Recorder { worker, out: BufWriter::new(file) })
    }

    /// Records `kind` now.
    ///
    /// # Errors
    /// When the write fails.
    pub fn record(&mut self, kind: EventKind) -> io::Result<()> {
        let event = Event { at: monotonic_nanos(), worker: self.worker, kind };
        writeln!(self.out, "{event}")?;
        self.out.flush()
    }
}

/// The merged history of a run.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Every event, in time order.
    pub events: Vec<Event>,
}

/// What the history checker found.
#[derive(Clone, Debug, Default)]
pub struct HistoryReport {
    /// Holds by belief, overlaps and fencing regressions among acquisitions.
    pub holds: Report,
    /// Writes the resource accepted.
    pub accepted_writes: usize,
    /// Writes the resource rejected as stale.
    pub rejected_writes: usize,
    /// Accepted writes that overwrote someone else's write (lost updates).
    pub lost_updates: usize,
    /// Accepted writes made by a holder after its own validity deadline, release or loss, while a later holder
    /// already had the lock (stale writes that got through).
    pub stale_writes_accepted: usize,
    /// Extensions that reached the store after their holder released.
    pub extends_after_release: usize,
}

impl HistoryReport {
    /// No overlap, no regression, no lost update, no stale write accepted, no extension after release.
    pub fn is_clean(&self) -> bool {
        self.holds.is_clean()
            && self.lost_updates == 0
            && self.stale_writes_accepted == 0
            && self.extends_after_release == 0
    }
}

impl History {
    /// Where `worker`'s events go in `dir`.
    pub fn file(dir: &Path, worker: u32) -> PathBuf {
        dir.join(format!("worker-{worker}.history"))
    }

    /// Loads and merges every history file in `dir`.
    ///
    /// # Errors
    /// When the directory or a file cannot be read.
    pub fn load(dir: &Path) -> io::Result<Self> {
        let mut events = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "history") {
                for line in BufReader::new(File::open(&path)?).lines() {
                    // A worker killed mid-write leaves at most one torn last line; skip it.
                    if let Some(event) = parse(&line?) {
                        events.push(event);
                    }
                }
            }
        }
        events.sort_by_key(|e| e.at);
        Ok(History { events })
    }

    /// Runs every check.
    pub fn check(&self) -> HistoryReport {
        use std::collections::HashMap;
        // For each token: when its hold began, its deadline, and when the holder stopped believing.
        struct Belief {
            worker: u32,
            fence: u64,
            start: u64,
            valid_until: u64,
            stopped: Option<u64>,
            released: Option<u64>,
        }
        let mut beliefs: HashMap<&str, Belief> = HashMap::new();
        let mut report = HistoryReport::default();
        for e in &self.events {
            match &e.kind {
                EventKind::Acquired { token, fence, valid_until } => {
                    beliefs.insert(
                        token,
                        Belief {
                            worker: e.worker,
                            fence: *fence,
                            start: e.at,
                            valid_until: *valid_until,
                            stopped: None,
                            released: None,
                        },
                    );
                }
                EventKind::Released { token } | EventKind::Lost { token } => {
                    if let Some(b) = beliefs.get_mut(token.as_str()) {
                        b.stopped = Some(b.stopped.map_or(e.at, |s| s.min(e.at)));
                        if matches!(e.kind, EventKind::Released { .. }) {
                            b.released = Some(e.at);
                        }
                    }
                }
                _ => {}
            }
        }
        let checker = Checker::new();
        for (token, b) in &beliefs {
            let end = b.stopped.map_or(b.valid_until, |s| s.min(b.valid_until));
            checker.record(Hold {
                owner: format!("{}:{token}", b.worker),
                fence: (b.fence > 0).then_some(b.fence),
                start: nanos_instant(b.start),
                end: nanos_instant(end.max(b.start)),
            });
        }
        report.holds = checker.report();
        for e in &self.events {
            match &e.kind {
                EventKind::Write { token, outcome, .. } => {
                    match outcome {
                        WriteOutcome::Accepted => report.accepted_writes += 1,
                        WriteOutcome::Rejected => report.rejected_writes += 1,
                        WriteOutcome::LostUpdate => {
                            report.accepted_writes += 1;
                            report.lost_updates += 1;
                        }
                    }
                    if *outcome != WriteOutcome::Rejected {
                        if let Some(b) = beliefs.get(token.as_str()) {
                            let believed_until = b.stopped.map_or(b.valid_until, |s| s.min(b.valid_until));
                            let later_holder = beliefs.values().any(|o| o.start > b.start && o.start < e.at);
                            if e.at > believed_until && later_holder {
                                report.stale_writes_accepted += 1;
                            }
                        }
                    }
                }
                EventKind::Extended { token }
                    if beliefs.get(token.as_str()).and_then(|b| b.released).is_some_and(|r| e.at > r) =>
                {
                    report.extends_after_release += 1;
                }
                _ => {}
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_finds_violations() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Recorder::open(dir.path(), 1).unwrap();
        let mut b = Recorder::open(dir.path(), 2).unwrap();
        let far = monotonic_nanos() + 60_000_000_000;
        a.record(EventKind::Acquired { token: "ta".into(), fence: 5, valid_until: far }).unwrap();
        b.record(EventKind::Acquired { token: "tb".into(), fence: 4, valid_until: far }).unwrap();
        a.record(EventKind::Write { token: "ta".into(), fence: 5, outcome: WriteOutcome::LostUpdate }).unwrap();
        a.record(EventKind::Released { token: "ta".into() }).unwrap();
        a.record(EventKind::Extended { token: "ta".into() }).unwrap();
        let report = History::load(dir.path()).unwrap().check();
        assert_eq!(report.holds.holds, 2);
        assert_eq!(report.holds.overlaps.len(), 1);
        assert_eq!(report.holds.fence_regressions.len(), 1);
        assert_eq!(report.lost_updates, 1);
        assert_eq!(report.extends_after_release, 1);
        assert!(!report.is_clean());
    }

    #[test]
    fn instants_convert_both_ways() {
        let now = Instant::now();
        let back = nanos_instant(instant_nanos(now));
        let diff = if back > now { back - now } else { now - back };
        assert!(diff < Duration::from_millis(1));
    }
}

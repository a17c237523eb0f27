//! A schedule explorer: thousands of seeded random schedules of acquire, try, cancel at a random await point,
//! release, drop, extend, renewal and expiry, over [scripted stores](crate::scripted) that delay, fail (before or
//! after applying) or hang calls and drop or delay notifications, each checked against the promises the lock makes.
//!
//! After every schedule it checks:
//! - **no panic** in any actor;
//! - **no false error**: every error an operation returned is one the schedule can explain (contention, a lost
//!   lock, an injected fault or the timeout it caused, a missed quorum), never `WrongType`, `InvalidArgument`,
//!   `NoRuntime` or a `Backend`/`Auth` error nobody injected;
//! - **mutual exclusion and fencing**: no two holds overlap, fencing tokens increase ([`Checker`]);
//! - **no guard believes in a lock the servers no longer keep**: while a lock's (or a writer's) guard is neither
//!   lost nor past its validity, and no extension of it is on its way, a quorum of servers hold its key under its
//!   token (checked every few ms, so a give-back or resend that deleted a live grant is caught whether or not
//!   another actor took the lock meanwhile);
//! - **no key left behind**: once every guard is gone, every lock key is released promptly (its TTL is far
//!   longer than the bound), unless the schedule made a release of that very token fail before it applied;
//! - **no renewal left running**: no extension reaches a server after the actors finished;
//! - **no waiter asleep while the lock is free**: a waiting acquire never sleeps past a bound while no key is held
//!   (tight when the schedule cannot hide a wake-up, the backoff cap when errors, expiring holders or Redlock can,
//!   the safety poll when notifications are lost);
//! - **subscriptions match waiters**: a channel with local waiters is subscribed at the server, and nothing stays
//!   subscribed at the end.
//!
//! Three in ten schedules exercise the read-write lock ([`RwLock`]) instead of the mutex: sessions read or
//! write (a writer may downgrade), and the checks become: no writer's hold beside any other hold, writers' tokens
//! increasing, no reader that started after a write ended with an older epoch, no read hold, write hold or waiting
//! writer's place left behind, and no waiter asleep while neither a writer nor a live reader holds.
//!
//! Of the mutex schedules on one instance, four in ten queue their waiters ([`LockOptions::with_fair_queue`]), and a
//! quarter of their holders' pauses last 100–250 ms, past the lease a release grants its queue's head (the waiter
//! TTL, 150 ms): the checks add no place left in the queue, and queue keys that always expire.
//!
//! A quarter of the schedules (a stream of their own) get **late replies and resets**: three in ten acquires are
//! applied at once and answered 15–39 ms later (within the call bound, past the validity of the 20–40 ms TTLs most
//! of their sessions take), and each release of a token whose acquire replied late fails before it applies with
//! probability 0.6, as a connection reset would, so give-backs are resent in the background; most of these
//! schedules' waiters retry on the library's default backoff, so a waiter's next try races its last try's resends.
//!
//! One schedule in five shortens the **fencing counters' idle expiry** from a week to 10–40 ms, so counters expire on
//! the servers' own clocks between holders, within holds and between a grant and its retry, on every instance (WIRE.md
//! 5.5): fences must still increase.
//!
//! One schedule in ten runs on servers that refuse every subscription (as an ACL without the lock's channels would):
//! no waiter hears a release, so each must poll on its backoff rather than trust its safety poll (the loose bound).
//!
//! Two in ten run a **semaphore** of two permits: sessions take one or two permits by try, wait or renewal; the checks
//! are per slot (no two permits on one slot at once, tokens increasing per slot), no permit left behind, and no
//! waiter asleep while no permit is held.
//!
//! Of the other mutex schedules, four in ten take another primitive on the same name (drawn from a stream of their
//! own, so every schedule that is not one of these is what it was before they came):
//! - **multi-lock**: sessions take the name together with a second one ([`Lock::acquire_all`], either order) or
//!   alone as a lock; the checks hold per name (no two holds of either at once, tokens increasing per name), and
//!   neither name's key is left behind;
//! - **election**: sessions campaign (try, or wait within their budget) and lead, renewing in the background, then
//!   resign or drop; the checks: one leader at a time, terms increasing, no leader key left, no renewal after the
//!   end, no candidate asleep while nobody leads;
//! - **job lock**: sessions run one of three ticks ([`JobLock::run_tick`]); the checks: runs never overlap, tokens
//!   increase, no tick's work starts twice, no job key left behind.
//!
//! A failing schedule is reported with its seed; [`Explorer::replay`] runs that seed alone. See
//! `lock-testkit/tests/explore.rs` for the environment variables that run millions.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::{select, Either};
use futures_util::stream::{self, StreamExt};
use lock_core::{
    Election, ElectionOptions, Fencing, Guard, JobContext, JobLock, JobOptions, JobOutcome, Lock, LockError, LockKeys,
    LockOptions, LockStore, LostSignal, ReadGuard, RenewPolicy, RetryPolicy, RwLock, Semaphore, WriteGuard,
    DEFAULT_PREFIX,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::checker::{Checker, Hold};
use crate::runtime::sleep;
use crate::scripted::{is_injected, CancelAfter, Delivery, Fault, Injected, Op, ScriptedServer, ScriptedStore};

const RESOURCE: &str = "explored";
/// The second name a multi-lock schedule's sessions take with [`RESOURCE`].
const OTHER: &str = "explored-too";
/// The ticks a job schedule's runs choose from.
const TICKS: u64 = 3;
/// Shortest backoff between tries of a waiting acquire: long, so a waiter that relies on it is seen.
const MIN_DELAY: Duration = Duration::from_millis(150);
/// Longest backoff.
const MAX_DELAY: Duration = Duration::from_millis(300);
/// How long a waiter that listens for releases sleeps without one: beyond the loose bound, so a waiter that trusts a
/// wake-up no release will send is seen; only schedules that lose or delay notifications may rely on it.
const SAFETY_POLL: Duration = Duration::from_millis(1_000);
/// Bound on one store call (a hung call times out after it).
const CALL_TIMEOUT: Duration = Duration::from_millis(40);
/// A "long" TTL: far beyond every bound below, so a key that stays is a leak, not an unexpired lock.
const LONG_TTL: Duration = Duration::from_secs(3);
/// How long a key may outlive every guard (background releases run meanwhile).
const SETTLE: Duration = Duration::from_millis(600);
/// Free-while-waiting bound when nothing in the schedule can hide a wake-up.
/// A lost wake-up leaves a listening waiter asleep until its safety poll (1 s); a prompt one took 123 ms on a
/// loaded machine (three test lanes beside two CPU burners), past the 120 ms this bound once was.
const TIGHT_BOUND: Duration = Duration::from_millis(400);
/// Free-while-waiting bound where a wake-up may be owed to the backoff (errors, expiring holders, Redlock's split
/// votes): the backoff cap, jittered, plus slack.
const LOOSE_BOUND: Duration = Duration::from_millis(800);
/// Free-while-waiting bound where notifications are lost or delayed: the safety poll plus slack.
const LOST_NOTE_BOUND: Duration = Duration::from_millis(1_500);

/// How a session gets the lock.
#[derive(Clone, Copy, Debug)]
enum Take {
    Try,
    Wait { budget_ms: u64 },
    Renewing { budget_ms: u64 },
}

/// Where an operation is cut off.
#[derive(Clone, Copy, Debug)]
enum Cancel {
    Never,
    AfterPolls(u32),
    AfterMicros(u64),
}

/// What a holder does while it holds.
#[derive(Clone, Copy, Debug)]
enum Work {
    Sleep { micros: u64 },
    Extend { ttl_ms: u64 },
}

/// How a session ends.
#[derive(Clone, Copy, Debug)]
enum End {
    Release { cancel: Cancel },
    Drop,
}

#[derive(Clone, Debug)]
struct Session {
    take: Take,
    ttl: Duration,
    cancel: Cancel,
    work: Vec<Work>,
    end: End,
    /// In a read-write schedule: whether this session writes, and (a writer) downgrades after its work.
    role: Role,
    /// With fencing on demand: draw the token (cut off at this point), before the work or after it.
    draw: Option<(Cancel, DrawAt)>,
}

/// When a session with fencing on demand draws its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DrawAt {
    BeforeWork,
    /// After the work: a session that slept past its TTL finds its lock gone.
    AfterWork,
}

/// What a session takes: the mutex, a read or write hold, or permits of the semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The mutex (a schedule of the lock).
    Lock,
    Read,
    Write {
        downgrade: bool,
    },
    /// This many permits of the semaphore.
    Permits(u32),
    /// [`RESOURCE`] and [`OTHER`] with one multi-lock, [`OTHER`] named first or second.
    Both {
        other_first: bool,
    },
    /// A candidacy in the election named [`RESOURCE`].
    Lead,
    /// A run of the job named [`RESOURCE`] for this tick.
    Tick(u64),
}

/// The primitive a mutex schedule's sessions take instead of (or, for the multi-lock, beside) the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Other {
    Nothing,
    Multi,
    Election,
    Job,
}

/// The semaphore's limit in these schedules.
const SEM_LIMIT: u32 = 2;

#[derive(Clone, Debug)]
struct Actor {
    process: usize,
    start_micros: u64,
    sessions: Vec<Session>,
}

/// Per-call fault probabilities of one schedule.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    yields: f64,
    delay: f64,
    fail_before: f64,
    fail_after: f64,
    hang: f64,
    drop_note: f64,
    delay_note: f64,
    /// A draw of a token on demand held up for 5–35 ms before it reaches the server: a holder paused (say, by a
    /// garbage collector) after deciding to draw, so the draw may arrive after the lock expired and was taken.
    pause_draw: f64,
    /// An acquire applied at once whose reply is held back 15–39 ms (within the call bound): past the validity of
    /// the short TTLs (20–40 ms) these schedules give most sessions, so the grant arrives too late to use and is
    /// given back (or, for a queued try, kept for the waiter's next try).
    late_reply: f64,
    /// After a late reply: each release of that token fails before it reaches the server, as a connection reset
    /// right after the late reply would, so the give-back is sent again in the background (10 ms, 20 ms … later; on
    /// a store that does not order commands, a give-back that found nothing is checked again a call bound later).
    reset_after_late: f64,
}

impl Faults {
    /// Whether a waiter may legitimately sleep its backoff while the lock is free.
    fn can_hide_wakeups(&self) -> bool {
        self.fail_before > 0.0
            || self.fail_after > 0.0
            || self.hang > 0.0
            || self.late_reply > 0.0
            || self.loses_notes()
    }

    /// Whether a listening waiter may legitimately sleep its safety poll while the lock is free.
    fn loses_notes(&self) -> bool {
        self.drop_note > 0.0 || self.delay_note > 0.0
    }
}

/// One generated schedule (what [`Explorer`] runs for a seed).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The seed it was generated from.
    pub seed: u64,
    instances: usize,
    processes: usize,
    ordered: Vec<bool>,
    fencing: bool,
    /// With fencing: tokens drawn on demand ([`Fencing::OnDemand`]) instead of with the grant.
    on_demand: bool,
    faults: Faults,
    actors: Vec<Actor>,
    /// A schedule of the read-write lock ([`RwLock`]) instead of the mutex, on one instance.
    rw: bool,
    /// A schedule of a semaphore of [`SEM_LIMIT`] permits ([`Semaphore`]) instead, on one instance.
    sem: bool,
    /// A mutex schedule whose waiters queue ([`LockOptions::with_fair_queue`]), on one instance.
    fair: bool,
    /// Every server refuses every subscription (as an ACL without the lock's channels would): no waiter hears a
    /// release, and each must know it (see `RetryPolicy::with_safety_poll`).
    deaf: bool,
    /// A mutex schedule on one primitive beside the lock: the multi-lock, the election or the job lock.
    other: Other,
    /// With late replies and resets ([`Faults::late_reply`]): its waiters retry on the library's default backoff
    /// (5–100 ms) instead of the explorer's slow one, so a waiter tries again while a give-back of its last try may
    /// still be resent.
    quick_retry: bool,
    /// The fencing counters' idle expiry, when the schedule shortens it from a week to a few ms: counters then expire
    /// on the servers' own clocks between holders, within holds and between a grant and its retry.
    fence_expiry: Option<Duration>,
}

fn chance(rng: &mut StdRng, p: f64) -> bool {
    rng.random_bool(p.clamp(0.0, 1.0))
}

fn cancel(rng: &mut StdRng, p: f64) -> Cancel {
    if !chance(rng, p) {
        return Cancel::Never;
    }
    if chance(rng, 0.6) {
        Cancel::AfterPolls(rng.random_range(1..=8))
    } else {
        Cancel::AfterMicros(rng.random_range(0..3_000))
    }
}

impl Schedule {
    /// The schedule for `seed`.
    pub fn generate(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        // Drawn from a stream of its own, so the mutex schedules of every seed stay what they were.
        let mut roles = StdRng::seed_from_u64(seed ^ 0x7277_6c6f_636b);
        // And fencing on demand from a third.
        let mut draws = StdRng::seed_from_u64(seed ^ 0x0066_656e_6365);
        let on_demand = chance(&mut draws, 0.5);
        // And the fair queue from a fourth.
        let mut queues = StdRng::seed_from_u64(seed ^ 0x0066_6169_7271);
        // And refused subscriptions from a fifth.
        let deaf = chance(&mut StdRng::seed_from_u64(seed ^ 0x0064_6561_6666), 0.1);
        let (rw, sem) = match roles.random_range(0..10) {
            0..=2 => (true, false),
            3..=4 => (false, true),
            _ => (false, false),
        };
        let instances = if chance(&mut rng, 0.2) { 3 } else { 1 };
        let fair = !rw && !sem && chance(&mut queues, 0.4);
        // A read-write lock, a semaphore and a fair queue are refused over Redlock.
        let instances = if rw || sem || fair { 1 } else { instances };
        let processes = rng.random_range(1..=3);
        let ordered = (0..processes).map(|_| chance(&mut rng, 0.5)).collect();
        let fencing = chance(&mut rng, 0.7);
        let on_demand = fencing && on_demand;
        let faults = match rng.random_range(0..10) {
            0..=3 => Faults { yields: 0.3, delay: 0.2, ..Faults::default() },
            4..=6 => Faults { yields: 0.3, delay: 0.2, fail_before: 0.08, fail_after: 0.08, ..Faults::default() },
            7..=8 => Faults { yields: 0.2, delay: 0.1, drop_note: 0.3, delay_note: 0.3, ..Faults::default() },
            _ => Faults {
                yields: 0.3,
                delay: 0.2,
                fail_before: 0.1,
                fail_after: 0.1,
                hang: 0.03,
                drop_note: 0.2,
                delay_note: 0.2,
                pause_draw: 0.0,
                late_reply: 0.0,
                reset_after_late: 0.0,
            },
        };
        let mut faults = faults;
        if on_demand && chance(&mut draws, 0.5) {
            faults.pause_draw = 0.4;
        }
        let expiring = chance(&mut rng, 0.25);
        let mut actors: Vec<Actor> = (0..rng.random_range(2..=4))
            .map(|_| {
                let process = rng.random_range(0..processes);
                let start_micros = rng.random_range(0..2_000);
                let sessions = (0..rng.random_range(1..=3))
                    .map(|_| {
                        let take = match rng.random_range(0..10) {
                            0..=2 => Take::Try,
                            3..=8 => Take::Wait { budget_ms: rng.random_range(0..=300) },
                            _ => Take::Renewing { budget_ms: rng.random_range(0..=300) },
                        };
                        let ttl = if expiring && chance(&mut rng, 0.5) {
                            Duration::from_millis(rng.random_range(30..=60))
                        } else {
                            LONG_TTL
                        };
                        let work = (0..rng.random_range(0..=2))
                            .map(|_| {
                                if chance(&mut rng, 0.3) {
                                    Work::Extend { ttl_ms: rng.random_range(30..=3_000) }
                                } else {
                                    // A short lock may be held past its TTL; a long one only briefly.
                                    let past_ttl = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX).saturating_mul(2);
                                    let cap = if ttl < LONG_TTL { past_ttl } else { 3_000 };
                                    Work::Sleep { micros: rng.random_range(0..=cap.max(1)) }
                                }
                            })
                            .collect();
                        let end = if chance(&mut rng, 0.7) {
                            End::Release { cancel: cancel(&mut rng, 0.2) }
                        } else {
                            End::Drop
                        };
                        let role = match (rw, sem, chance(&mut roles, 0.4)) {
                            (true, _, false) => Role::Read,
                            (true, _, true) => Role::Write { downgrade: chance(&mut roles, 0.3) },
                            (false, true, more) => Role::Permits(if more { 2 } else { 1 }),
                            (false, false, _) => Role::Lock,
                        };
                        let draw = (on_demand && chance(&mut draws, 0.8)).then(|| {
                            let at = if chance(&mut draws, 0.3) { DrawAt::AfterWork } else { DrawAt::BeforeWork };
                            (cancel(&mut draws, 0.2), at)
                        });
                        Session { take, ttl, cancel: cancel(&mut rng, 0.3), work, end, role, draw }
                    })
                    .collect();
                Actor { process, start_micros, sessions }
            })
            .collect();
        if fair {
            // A fair queue's release grants its head a lease of the waiter TTL, extended to the TTL at once: some
            // holders work past the lease, so a grantee whose extension fails (or whose validity were counted
            // wrongly) would hold past its key.
            for session in actors.iter_mut().flat_map(|a| a.sessions.iter_mut()).filter(|s| s.ttl >= LONG_TTL) {
                for step in &mut session.work {
                    if let Work::Sleep { micros } = step {
                        if chance(&mut queues, 0.25) {
                            *micros = queues.random_range(100_000..=250_000);
                        }
                    }
                }
            }
        }
        if deaf && faults.fail_before == 0.0 && faults.fail_after == 0.0 && faults.hang == 0.0 {
            // Budgets long enough to sleep a whole safety poll (1 s): a waiter that trusted it while hearing nothing
            // would sleep past the loose bound with the lock free. (Not with injected errors: a waiter whose tries
            // keep failing may rightly wait that long while the lock is free.)
            for session in actors.iter_mut().flat_map(|a| a.sessions.iter_mut()) {
                if let Take::Wait { budget_ms } | Take::Renewing { budget_ms } = &mut session.take {
                    *budget_ms = budget_ms.saturating_mul(5);
                }
            }
        }
        // The other primitives, from a sixth stream drawn last: every seed that does not pick one (the fixed seeds
        // of `tests/explore.rs` among them) keeps the schedule it had before they came.
        let mut others = StdRng::seed_from_u64(seed ^ 0x006f_7468_6572);
        let other = match (rw || sem || fair, others.random_range(0..10)) {
            (false, 0..=1) => Other::Multi,
            (false, 2) => Other::Election,
            (false, 3) => Other::Job,
            _ => Other::Nothing,
        };
        for session in actors.iter_mut().flat_map(|a| a.sessions.iter_mut()) {
            session.role = match other {
                Other::Nothing => continue,
                Other::Multi if chance(&mut others, 0.3) => continue,
                Other::Multi => Role::Both { other_first: chance(&mut others, 0.5) },
                Other::Election => Role::Lead,
                Other::Job => {
                    // A job's run is one try.
                    session.take = Take::Try;
                    Role::Tick(others.random_range(0..TICKS))
                }
            };
            // Tokens on demand are drawn through a lock's guard only.
            session.draw = None;
        }
        // Late replies and resets, from a seventh stream: a seed that does not draw them keeps its schedule.
        let mut lates = StdRng::seed_from_u64(seed ^ 0x006c_6174_6572);
        let late = chance(&mut lates, 0.25);
        if late {
            faults.late_reply = 0.3;
            faults.reset_after_late = 0.6;
            for session in actors.iter_mut().flat_map(|a| a.sessions.iter_mut()) {
                if chance(&mut lates, 0.6) {
                    session.ttl = Duration::from_millis(lates.random_range(20..=40));
                }
            }
        }
        let quick_retry = late && chance(&mut lates, 0.7);
        // Fencing counters that expire within the schedule, from an eighth stream (the same rule).
        let mut expiries = StdRng::seed_from_u64(seed ^ 0x0065_7870_6972);
        let fence_expiry = chance(&mut expiries, 0.2).then(|| Duration::from_millis(expiries.random_range(10..=40)));
        Schedule {
            seed,
            instances,
            processes,
            ordered,
            fencing,
            on_demand,
            faults,
            actors,
            rw,
            sem,
            fair,
            deaf,
            other,
            quick_retry,
            fence_expiry,
        }
    }

    /// The primitive the schedule exercises, named as in the metrics' `primitive` label (`lock`, `fair_lock`,
    /// `multi_lock`, `semaphore`, `election`, `job`, `rwlock`).
    pub fn primitive(&self) -> &'static str {
        match (self.rw, self.sem, self.fair, self.other) {
            (true, _, _, _) => "rwlock",
            (_, true, _, _) => "semaphore",
            (_, _, true, _) => "fair_lock",
            (_, _, _, Other::Multi) => "multi_lock",
            (_, _, _, Other::Election) => "election",
            (_, _, _, Other::Job) => "job",
            (_, _, _, Other::Nothing) => "lock",
        }
    }

    /// The fencing mode of every acquisition.
    fn fencing_mode(&self) -> Fencing {
        match (self.fencing, self.on_demand) {
            (false, _) => Fencing::Off,
            (true, false) => Fencing::OnAcquire,
            (true, true) => Fencing::OnDemand,
        }
    }

    fn expiring(&self) -> bool {
        self.actors.iter().flat_map(|a| &a.sessions).any(|s| s.ttl < LONG_TTL)
    }

    /// The free-while-waiting bound that applies to this schedule.
    fn wake_bound(&self) -> Duration {
        // Redlock give-backs of minority grants wake nobody, by design: waiters that blocked each other retry at
        // their backoff, as the algorithm asks.
        if self.faults.loses_notes() {
            LOST_NOTE_BOUND
        } else if self.instances > 1 || self.deaf || self.faults.can_hide_wakeups() || self.expiring() {
            LOOSE_BOUND
        } else {
            TIGHT_BOUND
        }
    }
}

/// What broke in one schedule.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Violation {
    /// The schedule's seed.
    pub seed: u64,
    /// What was wrong.
    pub what: String,
    /// The schedule.
    pub schedule: String,
    /// The events of the run that broke, in the order they happened: every store call each instance received (time
    /// from the start, client, operation, token, the fault injected, whether the server applied it, and how and when
    /// its caller's future ended: replied, failed, or dropped by a timeout or a cut). On a multi-threaded runtime
    /// the seed alone does not replay a run (which call a fault lands on depends on arrival order); this record is
    /// what a scripted-store test is written from.
    pub trace: Vec<String>,
}

/// How many of a violation's last events [`Violation`]'s `Display` shows.
const TRACE_SHOWN: usize = 400;

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {}: {}\nschedule: {}", self.seed, self.what, self.schedule)?;
        let skipped = self.trace.len().saturating_sub(TRACE_SHOWN);
        write!(f, "\nevents ({} calls{}):", self.trace.len(), if skipped > 0 { ", the last shown" } else { "" })?;
        for line in self.trace.iter().skip(skipped) {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

/// Every call the servers of `world` received, in the order they arrived, one line each (see [`Violation::trace`]).
fn trace(world: &World, origin: Instant) -> Vec<String> {
    let mut calls: Vec<(Instant, usize, String)> = Vec::new();
    for (instance, server) in world.servers.iter().enumerate() {
        for call in server.log() {
            calls.push((call.at, call.call.seq, format!("instance {instance}: {}", call.line(origin))));
        }
    }
    calls.sort_by_key(|(at, seq, _)| (*at, *seq));
    calls.into_iter().map(|(_, _, line)| line).collect()
}

/// Counts of what the schedules did (to show the explorer explored).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Locks acquired.
    pub acquired: usize,
    /// Operations cancelled at an await point.
    pub cancelled: usize,
    /// Errors returned (all explained).
    pub errors: usize,
    /// Store calls the servers received.
    pub calls: usize,
    /// Faults injected into them.
    pub faults: usize,
    /// Per primitive (named as in the metrics' `primitive` label): schedules run, and acquisitions in them.
    pub primitives: BTreeMap<&'static str, (u64, usize)>,
}

impl Summary {
    fn add(&mut self, other: &Summary) {
        self.schedules += other.schedules;
        self.acquired += other.acquired;
        self.cancelled += other.cancelled;
        self.errors += other.errors;
        self.calls += other.calls;
        self.faults += other.faults;
        for (primitive, (schedules, acquired)) in &other.primitives {
            let entry = self.primitives.entry(primitive).or_default();
            entry.0 += schedules;
            entry.1 += acquired;
        }
    }
}

/// Runs schedules; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Explorer {
    first_seed: u64,
    schedules: u64,
    concurrency: usize,
}

impl Explorer {
    /// `schedules` schedules with seeds `first_seed..`, `concurrency` of them at a time.
    pub fn new(first_seed: u64, schedules: u64, concurrency: usize) -> Self {
        Explorer { first_seed, schedules, concurrency: concurrency.max(1) }
    }

    /// Runs every schedule on the current runtime (a tokio runtime: actors are spawned to catch their panics);
    /// stops at the first violation.
    ///
    /// # Errors
    /// The first [`Violation`] found.
    ///
    /// # Cancel safety
    /// Dropping the future drops the schedules in progress (their background releases still run).
    pub async fn run(&self) -> Result<Summary, Violation> {
        let seeds = (0..self.schedules).map(|i| self.first_seed.wrapping_add(i));
        let mut results =
            stream::iter(seeds).map(|seed| run_schedule(Schedule::generate(seed))).buffer_unordered(self.concurrency);
        let mut summary = Summary::default();
        while let Some(result) = results.next().await {
            summary.add(&result?);
        }
        Ok(summary)
    }

    /// Runs the schedule of `seed` alone.
    ///
    /// # Errors
    /// Its [`Violation`].
    ///
    /// # Cancel safety
    /// As [`run`](Self::run).
    pub async fn replay(seed: u64) -> Result<Summary, Violation> {
        run_schedule(Schedule::generate(seed)).await
    }

    /// Runs the schedule of `seed` `times` times, `concurrency` at once (a failure that depends on timing shows more
    /// often than in one replay); stops at the first violation.
    ///
    /// # Errors
    /// The first [`Violation`] found.
    ///
    /// # Cancel safety
    /// As [`run`](Self::run).
    pub async fn replay_repeatedly(seed: u64, times: u64, concurrency: usize) -> Result<Summary, Violation> {
        let runs = stream::iter(0..times).map(|_| run_schedule(Schedule::generate(seed)));
        let mut results = runs.buffer_unordered(concurrency.max(1));
        let mut summary = Summary::default();
        while let Some(result) = results.next().await {
            summary.add(&result?);
        }
        Ok(summary)
    }
}

/// What one actor saw.
#[derive(Default)]
struct Seen {
    acquired: usize,
    cancelled: usize,
    errors: usize,
    /// Errors nothing in the schedule explains.
    unexplained: Vec<String>,
}

impl Seen {
    /// Counts an error, and keeps it when nothing in the schedule explains it.
    fn note(&mut self, what: &str, err: &LockError, world: &World) {
        self.errors += 1;
        if !explained(err, world) {
            self.unexplained.push(format!("{what}: {err:?}"));
        }
    }
}

/// Shared by the actors and the monitor of one schedule.
struct World {
    schedule: Schedule,
    servers: Vec<ScriptedServer>,
    /// Per process: its clients (one per server) and its lock.
    processes: Vec<(Vec<ScriptedStore>, Lock)>,
    keys: LockKeys,
    checker: Checker,
    /// Actors inside a waiting acquire right now.
    waiting: AtomicUsize,
    /// A read-write schedule: each process's read-write lock, its keys, and the holds its actors believed in.
    rw: Vec<RwLock>,
    rw_keys: LockKeys,
    rw_holds: Mutex<Vec<RwHold>>,
    /// A semaphore schedule: each process's semaphore, and per slot the holds its actors believed in.
    sems: Vec<Semaphore>,
    slots: Vec<Checker>,
    /// A multi-lock schedule: [`OTHER`]'s keys and the holds of it its actors believed in.
    other_keys: LockKeys,
    other_checker: Checker,
    /// A job schedule: each tick whose work started, and who started it.
    ticks: Mutex<Vec<(u64, String)>>,
    /// The exclusive holds the actors believe in right now, by id (see [`Belief`]).
    beliefs: Mutex<BTreeMap<usize, Belief>>,
    next_belief: AtomicUsize,
}

/// An exclusive hold an actor believes in (a lock's, a writer's): while its guard is neither lost nor past its
/// validity, and no extension of it is on its way (one may shorten it), a quorum of servers hold its key under its
/// token. A give-back or a resend that deleted it leaves a guard that believes it holds a lock anyone can take: the
/// monitor reports that at once, whether or not another actor happened to take the lock meanwhile.
struct Belief {
    keys: LockKeys,
    token: String,
    signal: LostSignal,
    changing: Arc<AtomicBool>,
}

/// A [`Belief`] registered for as long as this lives.
struct Believed<'a> {
    world: &'a World,
    id: usize,
    changing: Arc<AtomicBool>,
}

impl Believed<'_> {
    /// Set while an extension is on its way.
    fn changing(&self) -> &AtomicBool {
        &self.changing
    }
}

impl Drop for Believed<'_> {
    fn drop(&mut self) {
        self.world.beliefs.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

/// One read or write hold of a read-write schedule, as its actor believed it.
#[derive(Clone, Debug)]
struct RwHold {
    write: bool,
    /// A writer's fencing token, a reader's epoch.
    fence: Option<u64>,
    start: Instant,
    end: Instant,
    owner: String,
}

/// A waiter's TTL in a fair queue (a read-write lock's waiting writers, a fair mutex's waiters) in these schedules
/// (heartbeats every 50 ms).
const RW_WAITER_TTL: Duration = Duration::from_millis(150);

impl World {
    /// Registers the hold of `token` on `keys`, watched through `signal`, until the returned value is dropped.
    fn believe(&self, keys: &LockKeys, token: &lock_core::Token, signal: LostSignal) -> Believed<'_> {
        let id = self.next_belief.fetch_add(1, Ordering::SeqCst);
        let changing = Arc::new(AtomicBool::new(false));
        let belief =
            Belief { keys: keys.clone(), token: token.as_str().to_owned(), signal, changing: changing.clone() };
        self.beliefs.lock().unwrap_or_else(|p| p.into_inner()).insert(id, belief);
        Believed { world: self, id, changing }
    }

    /// A hold an actor believes in that a quorum of servers no longer keep under its token, if any (see
    /// [`Belief`]).
    fn broken_belief(&self) -> Option<String> {
        let quorum = self.processes.first().map_or(1, |(_, lock)| lock.quorum());
        let beliefs = self.beliefs.lock().unwrap_or_else(|p| p.into_inner());
        for belief in beliefs.values() {
            let trusted = || {
                !belief.signal.is_lost()
                    && !belief.changing.load(Ordering::SeqCst)
                    && Instant::now() < belief.signal.valid_until()
            };
            if !trusted() {
                continue;
            }
            let holders: Vec<Option<lock_core::Token>> =
                self.servers.iter().map(|server| server.memory().holder(&belief.keys)).collect();
            let kept = holders.iter().flatten().filter(|token| token.as_str() == belief.token).count();
            // Trusted again after the servers were read: a key read while its guard was still valid would have
            // outlived that validity, so a missing one was deleted.
            if kept < quorum && trusted() {
                let left = belief.signal.valid_until().saturating_duration_since(Instant::now());
                return Some(format!(
                    "a guard of {} believes it holds {} (valid for {left:?} more) while the servers hold {holders:?}",
                    &belief.token[..8.min(belief.token.len())],
                    belief.keys.lock()
                ));
            }
        }
        None
    }

    fn free(&self) -> bool {
        if self.schedule.sem {
            return self.servers.iter().all(|s| live_members(s.memory(), &self.sem_key("permits")) == 0);
        }
        if self.schedule.rw {
            return self.servers.iter().all(|s| {
                let memory = s.memory();
                memory.ttl_of(&self.rw_keys).is_none()
                    && live_members(memory, &format!("{}:readers", self.rw_keys.lock())) == 0
            });
        }
        self.servers.iter().all(|s| {
            s.memory().ttl_of(&self.keys).is_none()
                && (self.schedule.other != Other::Multi || s.memory().ttl_of(&self.other_keys).is_none())
        })
    }

    /// Whether every key still held is one the schedule excuses (see [`excused`]).
    fn settled(&self) -> bool {
        if self.schedule.sem {
            return self.servers.iter().all(|s| self.sem_left(s).is_empty());
        }
        if self.schedule.rw {
            return self.servers.iter().all(|s| self.rw_left(s).is_empty());
        }
        self.servers.iter().all(|s| {
            s.memory().holder(&self.keys).is_none_or(|token| excused(s, &token))
                && s.memory().holder(&self.other_keys).is_none_or(|token| excused(s, &token))
                && self.places_left(s).is_empty()
        })
    }

    /// A fair mutex schedule's places in the queue still on `server` that the schedule does not excuse.
    fn places_left(&self, server: &ScriptedServer) -> Vec<String> {
        if !self.schedule.fair {
            return Vec::new();
        }
        let memory = server.memory();
        let lock = self.keys.lock();
        let mut left: Vec<String> = Vec::new();
        for set in ["queue", "heartbeats"] {
            left.extend(members(memory, &format!("{lock}:{set}")));
        }
        left.retain(|member| !lock_core::Token::parse(member).is_some_and(|token| excused(server, &token)));
        left.extend(without_expiry(memory, lock, &["queue", "heartbeats"]));
        left
    }

    /// The key of the semaphore's `part` (`exp`, `slot`, `grant`, `limit`).
    fn sem_key(&self, part: &str) -> String {
        format!("{DEFAULT_PREFIX}sem:{{{RESOURCE}}}:{part}")
    }

    /// The semaphore's permits still on `server` (members, slots or grants) that the schedule does not excuse.
    fn sem_left(&self, server: &ScriptedServer) -> Vec<String> {
        let memory = server.memory();
        // A permit past its expiry holds nothing (as a read hold, see `rw_left`), its slot and grant entries
        // neither, until a script purges them (seed 1592595329, beside two CPU burners).
        let exp = self.sem_key("permits");
        let mut left = unexpired_members(memory, &exp);
        let expired: Vec<String> = members(memory, &exp).into_iter().filter(|m| !left.contains(m)).collect();
        for hash in ["slots", "grants"] {
            if let Some(lock_core::backend::Reply::Array(items)) = memory.command(&["HGETALL", &self.sem_key(hash)]) {
                // `slots` maps slot → token, `grants` token → grant: keep the tokens.
                let tokens = items.chunks(2).filter_map(|pair| pair.get(usize::from(hash == "slots"))?.as_text());
                left.extend(tokens.map(str::to_owned).filter(|token| !expired.contains(token)));
            }
        }
        left.retain(|member| !lock_core::Token::parse(member).is_some_and(|token| excused(server, &token)));
        left
    }

    /// The read-write lock's holders and waiting writers still on `server` that the schedule does not excuse.
    fn rw_left(&self, server: &ScriptedServer) -> Vec<String> {
        let memory = server.memory();
        let writer = self.rw_keys.lock();
        let mut left: Vec<String> = memory.holder(&self.rw_keys).map(|t| t.as_str().to_owned()).into_iter().collect();
        left.extend(members(memory, &format!("{writer}:queue")));
        // Scored by their expiry: one past it holds nothing (as a lock key past its TTL is gone), whether or not a
        // script has purged it yet. A short read hold whose release and resends all timed out on a starved runtime
        // stays a member until then (seed 1592597407, beside two CPU burners).
        for set in ["readers", "heartbeats"] {
            left.extend(unexpired_members(memory, &format!("{writer}:{set}")));
        }
        left.retain(|member| !lock_core::Token::parse(member).is_some_and(|token| excused(server, &token)));
        left.extend(without_expiry(memory, writer, &["readers", "queue", "heartbeats"]));
        left
    }
}

/// The keys `<base>:<part>` on `memory` that exist without a TTL: a place or hold whose give-back failed is excused
/// only because its key expires anyway.
fn without_expiry(memory: &lock_core::MemoryStore, base: &str, parts: &[&str]) -> Vec<String> {
    parts
        .iter()
        .map(|part| format!("{base}:{part}"))
        .filter(|key| matches!(memory.command(&["PTTL", key]), Some(lock_core::backend::Reply::Int(-1))))
        .map(|key| format!("{key} (no expiry)"))
        .collect()
}

/// The members of the sorted set `key` on `memory` scored after the server's clock (their expiry, in ms).
fn unexpired_members(memory: &lock_core::MemoryStore, key: &str) -> Vec<String> {
    let now = match memory.command(&["TIME"]) {
        Some(lock_core::backend::Reply::Array(parts)) => {
            let part = |i: usize| parts.get(i).and_then(|p| p.as_text()).and_then(|t| t.parse::<u64>().ok());
            part(0).zip(part(1)).map(|(secs, micros)| secs.saturating_mul(1_000).saturating_add(micros / 1_000))
        }
        _ => None,
    };
    let Some(now) = now else { return members(memory, key) };
    match memory.command(&["ZRANGEBYSCORE", key, &format!("({now}"), "+inf"]) {
        Some(lock_core::backend::Reply::Array(items)) => {
            items.iter().filter_map(|i| i.as_text().map(str::to_owned)).collect()
        }
        _ => Vec::new(),
    }
}

/// The members of the sorted set `key` on `memory`.
fn members(memory: &lock_core::MemoryStore, key: &str) -> Vec<String> {
    match memory.command(&["ZRANGE", key, "0", "-1"]) {
        Some(lock_core::backend::Reply::Array(items)) => {
            items.iter().filter_map(|i| i.as_text().map(str::to_owned)).collect()
        }
        _ => Vec::new(),
    }
}

/// How many members of the sorted set `key` on `memory` are scored past the server's clock now (live holds).
fn live_members(memory: &lock_core::MemoryStore, key: &str) -> usize {
    let now_ms = match memory.command(&["TIME"]) {
        Some(lock_core::backend::Reply::Array(t)) => {
            let secs = t.first().and_then(|v| v.as_text()?.parse::<u64>().ok()).unwrap_or(0);
            let micros = t.get(1).and_then(|v| v.as_text()?.parse::<u64>().ok()).unwrap_or(0);
            secs * 1_000 + micros / 1_000
        }
        _ => 0,
    };
    match memory.command(&["ZRANGEBYSCORE", key, &format!("({now_ms}"), "+inf"]) {
        Some(lock_core::backend::Reply::Array(items)) => items.len(),
        _ => 0,
    }
}

fn build(schedule: Schedule) -> World {
    let servers: Vec<ScriptedServer> = (0..schedule.instances).map(|_| ScriptedServer::new()).collect();
    for (i, server) in servers.iter().enumerate() {
        server.refuse_subscriptions(schedule.deaf);
        let faults = schedule.faults;
        let mut rng = StdRng::seed_from_u64(schedule.seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i as u64 + 1)));
        // Late replies and the resets after them draw from their own stream, so the other faults of a schedule
        // stay what they were.
        let mut lates = StdRng::seed_from_u64(schedule.seed.rotate_left(29) ^ i as u64);
        let mut late_tokens: BTreeSet<String> = BTreeSet::new();
        server.rule(move |call| {
            if faults.late_reply > 0.0 {
                if call.op == Op::Acquire && lates.random_bool(faults.late_reply) {
                    late_tokens.insert(call.token.as_str().to_owned());
                    return Some(Fault::DelayReply(Duration::from_micros(lates.random_range(15_000..39_000))));
                }
                if call.op == Op::Release
                    && late_tokens.contains(call.token.as_str())
                    && lates.random_bool(faults.reset_after_late)
                {
                    return Some(Fault::FailBefore(Injected::Unavailable));
                }
            }
            if call.op == Op::Fence && rng.random_bool(faults.pause_draw) {
                return Some(Fault::Delay(Duration::from_micros(rng.random_range(5_000..35_000))));
            }
            let roll: f64 = rng.random();
            let mut edge = faults.fail_before;
            if roll < edge {
                return Some(Fault::FailBefore(pick_error(&mut rng)));
            }
            edge += faults.fail_after;
            if roll < edge {
                return Some(Fault::FailAfter(pick_error(&mut rng)));
            }
            edge += faults.hang;
            if roll < edge {
                return Some(Fault::Hang);
            }
            edge += faults.delay;
            if roll < edge {
                return Some(Fault::Delay(Duration::from_micros(rng.random_range(0..2_000))));
            }
            edge += faults.yields;
            if roll < edge {
                return Some(Fault::Yield(rng.random_range(1..=4)));
            }
            None
        });
        let mut rng = StdRng::seed_from_u64(schedule.seed.rotate_left(17) ^ i as u64);
        server.notification_rule(move |_note| {
            let roll: f64 = rng.random();
            if roll < faults.drop_note {
                Some(Delivery::Drop)
            } else if roll < faults.drop_note + faults.delay_note {
                Some(Delivery::After(Duration::from_micros(rng.random_range(0..5_000))))
            } else {
                None
            }
        });
    }
    let processes: Vec<(Vec<ScriptedStore>, Lock)> = (0..schedule.processes)
        .map(|p| {
            let ordered = schedule.ordered.get(p).copied().unwrap_or(false);
            let clients: Vec<ScriptedStore> = servers.iter().map(|s| s.client().ordered(ordered)).collect();
            let mut lock = if clients.len() == 1 {
                Lock::new(clients[0].clone()).with_operation_timeout(CALL_TIMEOUT)
            } else {
                let stores = clients.iter().map(|c| Arc::new(c.clone()) as Arc<dyn LockStore>).collect();
                match Lock::redlock(stores).with_instance_timeout(CALL_TIMEOUT).build() {
                    Ok(lock) => lock,
                    Err(err) => panic!("a valid Redlock: {err}"),
                }
            };
            if let Some(expiry) = schedule.fence_expiry {
                lock = lock.with_fence_counter_expiry(Some(expiry));
            }
            (clients, lock)
        })
        .collect();
    let keys = match LockKeys::new(DEFAULT_PREFIX, RESOURCE) {
        Ok(keys) => keys,
        Err(err) => panic!("keys: {err}"),
    };
    let rw: Vec<RwLock> = if schedule.rw {
        processes
            .iter()
            .map(|(_, lock)| {
                match RwLock::new(lock.clone(), RESOURCE).and_then(|rw| rw.with_waiter_ttl(RW_WAITER_TTL)) {
                    Ok(rw) => rw,
                    Err(err) => panic!("a valid read-write lock: {err}"),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let rw_keys = match LockKeys::new(&format!("{DEFAULT_PREFIX}rw:"), RESOURCE) {
        Ok(keys) => keys,
        Err(err) => panic!("keys: {err}"),
    };
    let sems: Vec<Semaphore> = if schedule.sem {
        processes
            .iter()
            .map(|(_, lock)| match Semaphore::new(lock.clone(), RESOURCE, SEM_LIMIT) {
                Ok(sem) => sem,
                Err(err) => panic!("a valid semaphore: {err}"),
            })
            .collect()
    } else {
        Vec::new()
    };
    let other_keys = match LockKeys::new(DEFAULT_PREFIX, OTHER) {
        Ok(keys) => keys,
        Err(err) => panic!("keys: {err}"),
    };
    World {
        schedule,
        servers,
        processes,
        keys,
        checker: Checker::new(),
        waiting: AtomicUsize::new(0),
        rw,
        rw_keys,
        rw_holds: Mutex::new(Vec::new()),
        sems,
        slots: (0..SEM_LIMIT).map(|_| Checker::new()).collect(),
        other_keys,
        other_checker: Checker::new(),
        ticks: Mutex::new(Vec::new()),
        beliefs: Mutex::new(BTreeMap::new()),
        next_belief: AtomicUsize::new(0),
    }
}

fn pick_error(rng: &mut StdRng) -> Injected {
    match rng.random_range(0..4) {
        0 => Injected::Unavailable,
        1 => Injected::Timeout,
        2 => Injected::Backend,
        _ => Injected::Auth,
    }
}

/// Whether a key of `token` may stay on `server` until its TTL: a release of that token failed there before it
/// applied, and the engine leaves the key to its TTL then, as documented.
fn excused(server: &ScriptedServer, token: &lock_core::Token) -> bool {
    server
        .log()
        .iter()
        .any(|c| c.call.op == Op::Release && c.call.token == *token && matches!(c.fault, Some(Fault::FailBefore(_))))
}

/// Whether `err` is one this schedule can produce without a bug.
fn explained(err: &LockError, world: &World) -> bool {
    if is_injected(err) {
        return true;
    }
    match err {
        LockError::Contended { .. } | LockError::Lost { .. } => true,
        // A hung call times out at the engine's bound; a delayed grant can come too late.
        LockError::Timeout { .. } | LockError::ValidityExhausted { .. } => {
            let faults = &world.schedule.faults;
            faults.hang > 0.0 || faults.delay > 0.0 || faults.late_reply > 0.0
        }
        LockError::Quorum { .. } => world.schedule.instances > 1,
        _ => false,
    }
}

/// Runs `fut`, cut off at `cancel`; `None` when cut off.
async fn cut<F: std::future::Future>(fut: F, cancel: Cancel) -> Option<F::Output> {
    match cancel {
        Cancel::Never => Some(fut.await),
        Cancel::AfterPolls(n) => CancelAfter::new(fut, n).await,
        Cancel::AfterMicros(us) => match select(Box::pin(fut), Box::pin(sleep(Duration::from_micros(us)))).await {
            Either::Left((out, _)) => Some(out),
            Either::Right(_) => None,
        },
    }
}

/// Counts a waiting acquire while it runs (also when it is cut off).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn options(session: &Session, schedule: &Schedule) -> LockOptions {
    let retry = match schedule.quick_retry {
        true => RetryPolicy::default(),
        false => RetryPolicy::default().with_min_delay(MIN_DELAY).with_max_delay(MAX_DELAY),
    };
    let retry = retry.with_safety_poll(SAFETY_POLL);
    let opts = LockOptions::new(session.ttl).with_fencing_mode(schedule.fencing_mode()).with_retry(retry);
    match session.take {
        Take::Try => opts.with_wait(Duration::ZERO),
        Take::Wait { budget_ms } => opts.with_wait(Duration::from_millis(budget_ms)),
        Take::Renewing { budget_ms } => opts
            .with_wait(Duration::from_millis(budget_ms))
            .with_auto_renew(RenewPolicy::default().with_max_hold(session.ttl * 4)),
    }
}

async fn act(world: Arc<World>, actor: Actor) -> Seen {
    let mut seen = Seen::default();
    let lock = match world.processes.get(actor.process) {
        Some((_, lock)) => lock.clone(),
        None => return seen,
    };
    sleep(Duration::from_micros(actor.start_micros)).await;
    let note = |seen: &mut Seen, what: &str, err: &LockError| seen.note(what, err, &world);
    for (n, session) in actor.sessions.iter().enumerate() {
        let owner = format!("p{}a{}s{n}", actor.process, actor.start_micros);
        match session.role {
            Role::Lock => {}
            Role::Read | Role::Write { .. } => {
                act_rw(&world, actor.process, session, owner, &mut seen).await;
                continue;
            }
            Role::Both { other_first } => {
                act_multi(&world, &lock, session, other_first, &mut seen).await;
                continue;
            }
            Role::Lead => {
                act_lead(&world, &lock, session, owner, &mut seen).await;
                continue;
            }
            Role::Tick(tick) => {
                act_job(&world, &lock, session, tick, owner, &mut seen).await;
                continue;
            }
            Role::Permits(permits) => {
                act_sem(&world, actor.process, session, permits, owner, &mut seen).await;
                continue;
            }
        }
        let mut opts = options(session, &world.schedule);
        if world.schedule.fair {
            opts = opts.with_fair_queue(RW_WAITER_TTL);
        }
        let got: Option<Guard> = match session.take {
            Take::Try => match cut(lock.try_acquire(RESOURCE, &opts), session.cancel).await {
                None => {
                    seen.cancelled += 1;
                    None
                }
                Some(Ok(guard)) => guard,
                Some(Err(err)) => {
                    note(&mut seen, "try_acquire", &err);
                    None
                }
            },
            Take::Wait { .. } | Take::Renewing { .. } => {
                let waiting = Waiting::new(&world.waiting);
                let out = cut(lock.acquire(RESOURCE, &opts), session.cancel).await;
                drop(waiting);
                match out {
                    None => {
                        seen.cancelled += 1;
                        None
                    }
                    Some(Ok(guard)) => Some(guard),
                    Some(Err(err)) => {
                        note(&mut seen, "acquire", &err);
                        None
                    }
                }
            }
        };
        let Some(guard) = got else { continue };
        seen.acquired += 1;
        let start = Instant::now();
        draw(&guard, session, DrawAt::BeforeWork, &world, &mut seen).await;
        let believed = world.believe(&world.keys, guard.token(), guard.lost_signal());
        hold_for(&session.work, &world, &mut seen, Some(&believed), |ttl| guard.extend(ttl)).await;
        draw(&guard, session, DrawAt::AfterWork, &world, &mut seen).await;
        drop(believed);
        world.checker.record(Hold::as_drawn(&guard, start));
        match session.end {
            End::Drop => drop(guard),
            End::Release { cancel } => match cut(guard.release(), cancel).await {
                None => seen.cancelled += 1,
                Some(Ok(_)) => {}
                Some(Err(err)) => note(&mut seen, "release", &err),
            },
        }
    }
    seen
}

/// Draws a session's token on demand at `at`, if it draws then (cut off at its cancel point); a token it gets must
/// be the one the guard reports from then on.
async fn draw(guard: &Guard, session: &Session, at: DrawAt, world: &World, seen: &mut Seen) {
    let Some((cancel, _)) = session.draw.filter(|(_, when)| *when == at) else { return };
    match cut(guard.fence(), cancel).await {
        None => seen.cancelled += 1,
        Some(Ok(fence)) if guard.fence().await.ok() != Some(fence) => {
            seen.unexplained.push(format!("drew {fence}, the guard says {:?}", guard.fence().await.ok()));
        }
        Some(Ok(_)) => {}
        Some(Err(err)) => seen.note("fence", &err, world),
    }
}

/// One session of a semaphore schedule: take `permits` (try or wait, cut off at its cancel point), work, end; the
/// hold is recorded on each slot it believed it held.
async fn act_sem(world: &World, process: usize, session: &Session, permits: u32, owner: String, seen: &mut Seen) {
    let Some(sem) = world.sems.get(process) else { return };
    let note = |seen: &mut Seen, what: &str, err: &LockError| seen.note(what, err, world);
    let opts = options(session, &world.schedule);
    let waits = !matches!(session.take, Take::Try);
    let waiting = waits.then(|| Waiting::new(&world.waiting));
    let taken = if waits {
        cut(sem.acquire(permits, &opts), session.cancel).await.map(|r| r.map(Some))
    } else {
        cut(sem.try_acquire(permits, &opts), session.cancel).await
    };
    drop(waiting);
    let permit = match taken {
        None => {
            seen.cancelled += 1;
            return;
        }
        Some(Err(err)) => {
            note(seen, "semaphore acquire", &err);
            return;
        }
        Some(Ok(None)) => return,
        Some(Ok(Some(permit))) => permit,
    };
    seen.acquired += 1;
    let start = Instant::now();
    hold_for(&session.work, world, seen, None, |ttl| permit.extend(ttl)).await;
    let end = Instant::now().min(permit.valid_until());
    let fence = permit.fence().await.ok().map(|f| f.get());
    for slot in permit.slots() {
        match world.slots.get(*slot as usize) {
            Some(checker) => checker.record(Hold { owner: owner.clone(), fence, start, end }),
            None => seen.unexplained.push(format!("a permit holds slot {slot} of a semaphore of {SEM_LIMIT}")),
        }
    }
    if permit.slots().len() != permits as usize {
        seen.unexplained.push(format!("{} slots for {permits} permits", permit.slots().len()));
    }
    match session.end {
        End::Drop => drop(permit),
        End::Release { cancel } => match cut(permit.release(), cancel).await {
            None => seen.cancelled += 1,
            Some(Ok(_)) => {}
            Some(Err(err)) => note(seen, "release", &err),
        },
    }
}

/// One session of a multi-lock schedule: take [`RESOURCE`] and [`OTHER`] together (try or wait, cut off at its
/// cancel point), work, end; the hold is recorded on both names' checkers.
async fn act_multi(world: &World, lock: &Lock, session: &Session, other_first: bool, seen: &mut Seen) {
    let opts = options(session, &world.schedule);
    let names = if other_first { [OTHER, RESOURCE] } else { [RESOURCE, OTHER] };
    let waits = !matches!(session.take, Take::Try);
    let waiting = waits.then(|| Waiting::new(&world.waiting));
    let taken = if waits {
        cut(lock.acquire_all(&names, &opts), session.cancel).await.map(|r| r.map(Some))
    } else {
        cut(lock.try_acquire_all(&names, &opts), session.cancel).await
    };
    drop(waiting);
    let guard = match taken {
        None => {
            seen.cancelled += 1;
            return;
        }
        Some(Err(err)) => {
            seen.note(if waits { "acquire_all" } else { "try_acquire_all" }, &err, world);
            return;
        }
        Some(Ok(None)) => return,
        Some(Ok(Some(guard))) => guard,
    };
    seen.acquired += 1;
    let start = Instant::now();
    hold_for(&session.work, world, seen, None, |ttl| guard.extend(ttl)).await;
    let end = Instant::now().min(guard.valid_until());
    let owner = guard.token().to_string();
    for (name, checker) in [(RESOURCE, &world.checker), (OTHER, &world.other_checker)] {
        let fence = guard.fence_of(name).map(|f| f.get());
        checker.record(Hold { owner: owner.clone(), fence, start, end });
    }
    match session.end {
        End::Drop => drop(guard),
        End::Release { cancel } => match cut(guard.release(), cancel).await {
            None => seen.cancelled += 1,
            Some(Ok(_)) => {}
            Some(Err(err)) => seen.note("release", &err, world),
        },
    }
}

/// The election options of a candidacy whose lease is `lease`: a renew deadline of two thirds of it and a retry
/// period of a quarter (at least the minimum), as `ElectionOptions::validate` asks.
fn election_options(lease: Duration) -> ElectionOptions {
    let retry = (lease / 4).max(lock_core::election::MIN_RETRY_PERIOD);
    ElectionOptions::default().with_lease(lease).with_renew_deadline(lease * 2 / 3).with_retry_period(retry)
}

/// One session of an election schedule: campaign (once, or until elected within its budget; cut off at its cancel
/// point), lead through its work while the leadership renews itself, then resign or drop; the leadership is
/// recorded with its term as its token.
async fn act_lead(world: &World, lock: &Lock, session: &Session, id: String, seen: &mut Seen) {
    let election = match Election::new(lock.clone(), RESOURCE, election_options(session.ttl)) {
        Ok(election) => election,
        Err(err) => panic!("a valid election: {err}"),
    };
    let taken = match session.take {
        Take::Try => cut(election.try_campaign(&id, "v"), session.cancel).await,
        Take::Wait { budget_ms } | Take::Renewing { budget_ms } => {
            let waiting = Waiting::new(&world.waiting);
            // A campaign waits until elected: its budget ends it as a cancellation would.
            let campaign = Box::pin(cut(election.campaign(&id, "v"), session.cancel));
            let out = match select(campaign, Box::pin(sleep(Duration::from_millis(budget_ms)))).await {
                Either::Left((out, _)) => out.map(|r| r.map(Some)),
                Either::Right(_) => None,
            };
            drop(waiting);
            out
        }
    };
    let leadership = match taken {
        None => {
            seen.cancelled += 1;
            return;
        }
        Some(Err(err)) => {
            seen.note("campaign", &err, world);
            return;
        }
        Some(Ok(None)) => return,
        Some(Ok(Some(leadership))) => leadership,
    };
    seen.acquired += 1;
    let start = Instant::now();
    // The leadership renews itself; the session's own extensions have nothing to extend.
    sleep_through(&session.work).await;
    let end = Instant::now().min(leadership.valid_until());
    world.checker.record(Hold { owner: id, fence: Some(leadership.term().get()), start, end });
    match session.end {
        End::Drop => drop(leadership),
        End::Release { cancel } => match cut(leadership.resign(), cancel).await {
            None => seen.cancelled += 1,
            Some(Ok(_)) => {}
            Some(Err(err)) => seen.note("resign", &err, world),
        },
    }
}

/// Records a job run's hold when its work ends, returned or cut off (by the session, or by the run's lost lock).
struct RunRecord<'a> {
    checker: &'a Checker,
    owner: String,
    fence: Option<u64>,
    start: Instant,
    lost: LostSignal,
}

impl Drop for RunRecord<'_> {
    fn drop(&mut self) {
        let end = Instant::now().min(self.lost.valid_until());
        let hold = Hold { owner: std::mem::take(&mut self.owner), fence: self.fence, start: self.start, end };
        self.checker.record(hold);
    }
}

/// One session of a job schedule: run `tick` of the job (cut off at its cancel point); its work sleeps, and is
/// recorded as a hold and as a start of its tick.
async fn act_job(world: &World, lock: &Lock, session: &Session, tick: u64, owner: String, seen: &mut Seen) {
    let jobs = JobLock::new(lock.clone());
    let options = JobOptions::new(session.ttl).with_fencing(world.schedule.fencing).with_holder(owner.clone());
    let work = |ctx: JobContext| async move {
        world.ticks.lock().unwrap_or_else(|p| p.into_inner()).push((tick, owner.clone()));
        let _record = RunRecord {
            checker: &world.checker,
            owner,
            fence: ctx.fencing_token.map(|f| f.get()),
            start: Instant::now(),
            lost: ctx.lost.clone(),
        };
        sleep_through(&session.work).await;
    };
    match cut(jobs.run_tick(RESOURCE, tick, &options, work), session.cancel).await {
        None => seen.cancelled += 1,
        Some(Ok(JobOutcome::Ran { .. })) => seen.acquired += 1,
        Some(Ok(_)) => {}
        Some(Err(err)) => seen.note("run_tick", &err, world),
    }
}

/// A session's work for a primitive that renews itself or cannot be extended: its sleeps only.
async fn sleep_through(work: &[Work]) {
    for step in work {
        if let Work::Sleep { micros } = step {
            sleep(Duration::from_micros(*micros)).await;
        }
    }
}

/// The ticks of a job schedule whose work started more than once.
fn tick_violations(world: &World) -> Vec<String> {
    let ticks = world.ticks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    (0..TICKS)
        .filter_map(|tick| {
            let runs: Vec<&String> = ticks.iter().filter(|(t, _)| *t == tick).map(|(_, owner)| owner).collect();
            (runs.len() > 1).then(|| format!("tick {tick} ran {} times: {runs:?}", runs.len()))
        })
        .collect()
}

/// A read or write hold of a read-write schedule.
enum RwHeld {
    Read(ReadGuard),
    Write(WriteGuard),
}

impl RwHeld {
    fn fence(&self) -> Option<u64> {
        match self {
            RwHeld::Read(r) => r.epoch().map(|e| e.get()),
            RwHeld::Write(w) => w.drawn_fence().map(|f| f.get()),
        }
    }
    fn valid_until(&self) -> Instant {
        match self {
            RwHeld::Read(r) => r.valid_until(),
            RwHeld::Write(w) => w.valid_until(),
        }
    }
    async fn extend(&self, ttl: Duration) -> Result<Instant, LockError> {
        match self {
            RwHeld::Read(r) => r.extend(ttl).await,
            RwHeld::Write(w) => w.extend(ttl).await,
        }
    }
    async fn release(self) -> Result<lock_core::ReleaseOutcome, LockError> {
        match self {
            RwHeld::Read(r) => r.release().await,
            RwHeld::Write(w) => w.release().await,
        }
    }
}

/// One session of a read-write schedule: take (read or write, try or wait, cut off at its cancel point), work,
/// maybe downgrade, end; every hold it believed in is recorded.
async fn act_rw(world: &World, process: usize, session: &Session, owner: String, seen: &mut Seen) {
    let Some(rw) = world.rw.get(process) else { return };
    let note = |seen: &mut Seen, what: &str, err: &LockError| seen.note(what, err, world);
    let opts = options(session, &world.schedule);
    let write = matches!(session.role, Role::Write { .. });
    let waits = !matches!(session.take, Take::Try);
    let waiting = waits.then(|| Waiting::new(&world.waiting));
    let taken: Option<Result<Option<RwHeld>, LockError>> = match (write, waits) {
        (true, true) => cut(rw.write(&opts), session.cancel).await.map(|r| r.map(|w| Some(RwHeld::Write(w)))),
        (true, false) => cut(rw.try_write(&opts), session.cancel).await.map(|r| r.map(|w| w.map(RwHeld::Write))),
        (false, true) => cut(rw.read(&opts), session.cancel).await.map(|r| r.map(|g| Some(RwHeld::Read(g)))),
        (false, false) => cut(rw.try_read(&opts), session.cancel).await.map(|r| r.map(|g| g.map(RwHeld::Read))),
    };
    drop(waiting);
    let mut held = match taken {
        None => {
            seen.cancelled += 1;
            return;
        }
        Some(Err(err)) => {
            note(seen, if write { "write" } else { "read" }, &err);
            return;
        }
        Some(Ok(None)) => return,
        Some(Ok(Some(held))) => held,
    };
    seen.acquired += 1;
    let mut start = Instant::now();
    let believed = match &held {
        RwHeld::Write(w) => Some(world.believe(&world.rw_keys, w.token(), w.lost_signal())),
        RwHeld::Read(_) => None,
    };
    hold_for(&session.work, world, seen, believed.as_ref(), |ttl| held.extend(ttl)).await;
    drop(believed);
    let record = |held: &RwHeld, start: Instant, write: bool| {
        let hold = RwHold {
            write,
            fence: held.fence(),
            start,
            end: Instant::now().min(held.valid_until()),
            owner: owner.clone(),
        };
        world.rw_holds.lock().unwrap_or_else(|p| p.into_inner()).push(hold);
    };
    let downgrade = matches!(session.role, Role::Write { downgrade: true }) && matches!(held, RwHeld::Write(_));
    if downgrade {
        record(&held, start, true);
        let RwHeld::Write(w) = held else { return };
        match w.downgrade().await {
            Ok(r) => {
                held = RwHeld::Read(r);
                start = Instant::now();
            }
            Err(err) => {
                note(seen, "downgrade", &err);
                return;
            }
        }
        record(&held, start, false);
    } else {
        record(&held, start, write);
    }
    match session.end {
        End::Drop => drop(held),
        End::Release { cancel } => match cut(held.release(), cancel).await {
            None => seen.cancelled += 1,
            Some(Ok(_)) => {}
            Some(Err(err)) => note(seen, "release", &err),
        },
    }
}

/// What the holds of a read-write schedule broke: a writer beside anyone, writers' tokens going back, a reader
/// that started after a write ended with an older epoch.
fn rw_violations(world: &World) -> Vec<String> {
    let holds = world.rw_holds.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut problems = Vec::new();
    for w in holds.iter().filter(|h| h.write) {
        world.checker.record(Hold { owner: w.owner.clone(), fence: w.fence, start: w.start, end: w.end });
        for r in holds.iter().filter(|h| !h.write) {
            if r.start < w.end && w.start < r.end && r.owner != w.owner {
                problems.push(format!("writer {} held with reader {}", w.owner, r.owner));
            }
            if let (Some(epoch), Some(fence), true) = (r.fence, w.fence, w.end < r.start) {
                if epoch < fence {
                    problems
                        .push(format!("reader {} (epoch {epoch}) started after write {} ({fence})", r.owner, w.owner));
                }
            }
        }
    }
    problems
}

/// A session's work while it holds: sleeps, and extensions through `extend` (an error is noted in `seen`).
async fn hold_for<F, Fut>(work: &[Work], world: &World, seen: &mut Seen, belief: Option<&Believed<'_>>, mut extend: F)
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Result<Instant, LockError>>,
{
    for step in work {
        match step {
            Work::Sleep { micros } => sleep(Duration::from_micros(*micros)).await,
            Work::Extend { ttl_ms } => {
                let changing = belief.map(Believed::changing);
                changing.inspect(|c| c.store(true, Ordering::SeqCst));
                let extended = extend(Duration::from_millis(*ttl_ms)).await;
                changing.inspect(|c| c.store(false, Ordering::SeqCst));
                if let Err(err) = extended {
                    seen.note("extend", &err, world);
                }
            }
        }
    }
}

/// How often the monitor looks.
const TICK: Duration = Duration::from_millis(3);

/// Watches the schedule while it runs: free-while-waiting stretches and subscriptions that do not match waiters.
///
/// Stretches are measured on the monitor's own ticks, each counted for at most twice its period: when the machine
/// is so loaded that the monitor itself runs late, the waiters' tasks run late too, and that lag is not charged to
/// the lock (a woken waiter that has not been scheduled yet is not a waiter that was never woken).
async fn monitor(world: Arc<World>, done: Arc<AtomicBool>) -> Option<String> {
    let bound = world.schedule.wake_bound();
    let mut free_for: Option<Duration> = None;
    let mut mismatch_for: Option<Duration> = None;
    let mut last = Instant::now();
    while !done.load(Ordering::SeqCst) {
        let now = Instant::now();
        let tick = (now - last).min(TICK * 2);
        last = now;
        if world.waiting.load(Ordering::SeqCst) > 0 && world.free() {
            let stretch = free_for.map_or(Duration::ZERO, |d| d + tick);
            if stretch > bound {
                return Some(format!(
                    "a waiter slept {stretch:?} while the lock was free (bound {bound:?}); calls, ms since the first: {}",
                    call_story(&world, now.checked_sub(stretch))
                ));
            }
            free_for = Some(stretch);
        } else {
            free_for = None;
        }
        if let Some(what) = world.broken_belief() {
            return Some(what);
        }
        if let Some(what) = subscription_mismatch(&world) {
            let stretch = mismatch_for.map_or(Duration::ZERO, |d| d + tick);
            if stretch > Duration::from_millis(50) {
                return Some(what);
            }
            mismatch_for = Some(stretch);
        } else {
            mismatch_for = None;
        }
        sleep(TICK).await;
    }
    None
}

/// The calls the servers received, for a violation's report: when (ms after the first call), which client, what,
/// whose token, the fault; `free since` marks where the lock was last seen free with a waiter.
fn call_story(world: &World, free_since: Option<Instant>) -> String {
    let mut lines = Vec::new();
    for server in &world.servers {
        let log = server.log();
        let Some(first) = log.first().map(|c| c.at) else { continue };
        let mut marked = false;
        for c in &log {
            if let Some(since) = free_since.filter(|s| !marked && c.at >= *s) {
                lines.push(format!("[free since {:.1}]", since.saturating_duration_since(first).as_secs_f64() * 1e3));
                marked = true;
            }
            let token: String = c.call.token.as_str().chars().take(6).collect();
            lines.push(format!(
                "{:.1} c{} {:?} {token} {}{}",
                c.at.saturating_duration_since(first).as_secs_f64() * 1e3,
                c.call.client,
                c.call.op,
                c.fault.as_ref().map_or(String::new(), |f| format!("{f:?} ")),
                if c.applied { "applied" } else { "not applied" },
            ));
        }
    }
    lines.join("; ")
}

/// A channel a hub keeps subscribed (it has waiters, or lingers idle) but its server has not subscribed (or the
/// reverse), if any; and a hub with waiters on a channel it does not keep.
fn subscription_mismatch(world: &World) -> Option<String> {
    // A read-write lock and a semaphore announce on channels of their own.
    let sem_keys = LockKeys::new(&format!("{DEFAULT_PREFIX}sem:"), RESOURCE).ok();
    let channel = match (world.schedule.rw, world.schedule.sem, &sem_keys) {
        (true, _, _) => world.rw_keys.channel(),
        (_, true, Some(keys)) => keys.channel(),
        _ => world.keys.channel(),
    };
    for (process, (clients, _)) in world.processes.iter().enumerate() {
        for (instance, client) in clients.iter().enumerate() {
            let Some(hub) = client.hub() else { continue };
            let kept = hub.watched_channels().iter().any(|c| c == channel);
            let waiting = hub.waiters(channel) > 0;
            let subscribed =
                world.servers.get(instance).is_some_and(|s| s.subscriptions(client.id()).contains(channel));
            // Where every subscription is refused, the server subscribes nobody, whatever the hub keeps.
            if (kept && !world.schedule.deaf) != subscribed || (waiting && !kept) {
                return Some(format!(
                    "process {process}, instance {instance}: hub has waiters: {waiting}, keeps the channel: {kept}, \
                     server subscribed: {subscribed}"
                ));
            }
        }
    }
    None
}

async fn run_schedule(schedule: Schedule) -> Result<Summary, Violation> {
    let seed = schedule.seed;
    let description = format!("{schedule:?}");
    let started = Instant::now();
    let world = Arc::new(build(schedule));
    let fail = |what: String| Violation { seed, what, schedule: description.clone(), trace: trace(&world, started) };
    let done = Arc::new(AtomicBool::new(false));
    let monitor = tokio::spawn(monitor(world.clone(), done.clone()));
    let actors: Vec<_> =
        world.schedule.actors.clone().into_iter().map(|actor| tokio::spawn(act(world.clone(), actor))).collect();
    let mut summary = Summary { schedules: 1, ..Summary::default() };
    let mut problems = Vec::new();
    for actor in actors {
        match actor.await {
            Ok(seen) => {
                summary.acquired += seen.acquired;
                summary.cancelled += seen.cancelled;
                summary.errors += seen.errors;
                problems.extend(seen.unexplained.into_iter().map(|e| format!("unexplained error from {e}")));
            }
            Err(err) if err.is_panic() => problems.push(format!("an actor panicked: {err}")),
            Err(err) => problems.push(format!("an actor did not finish: {err}")),
        }
    }
    let finished = Instant::now();
    // Every guard is gone: background releases (drops, cancelled acquires and releases) must empty the servers of
    // every key whose release was not made to fail.
    while !world.settled() && finished.elapsed() < SETTLE {
        sleep(Duration::from_millis(2)).await;
    }
    done.store(true, Ordering::SeqCst);
    match monitor.await {
        Ok(Some(what)) => problems.push(what),
        Ok(None) => {}
        Err(err) => problems.push(format!("the monitor failed: {err}")),
    }
    for (instance, server) in world.servers.iter().enumerate() {
        let log = server.log();
        summary.calls += log.len();
        summary.faults += log.iter().filter(|c| c.fault.is_some()).count();
        for keys in [&world.keys, &world.other_keys] {
            if let Some(token) = server.memory().holder(keys) {
                if !excused(server, &token) {
                    problems.push(format!(
                        "instance {instance}: key {} of {token} left behind after every guard was gone",
                        keys.lock()
                    ));
                }
            }
        }
        let places = world.places_left(server);
        if !places.is_empty() {
            problems.push(format!("instance {instance}: places in the fair queue left behind: {places:?}"));
        }
        if world.schedule.sem {
            let left = world.sem_left(server);
            if !left.is_empty() {
                problems.push(format!("instance {instance}: permits left behind: {left:?}"));
            }
        }
        if world.schedule.rw {
            let left = world.rw_left(server);
            if !left.is_empty() {
                problems.push(format!("instance {instance}: read-write holds or places left behind: {left:?}"));
            }
        }
        if let Some(late) = log.iter().find(|c| c.call.op == Op::Extend && c.at > finished + Duration::from_millis(20))
        {
            problems.push(format!("instance {instance}: an extension after the actors finished: {late:?}"));
        }
        // A hub keeps a few idle channels subscribed (see `ReleaseHub`); beyond those, nothing may be left.
        let kept: BTreeSet<String> = world
            .processes
            .iter()
            .filter_map(|(clients, _)| clients.get(instance))
            .filter_map(|client| client.hub())
            .flat_map(|hub| hub.watched_channels())
            .collect();
        for client in 0..server.clients() {
            let left: BTreeSet<String> = server.subscriptions(client);
            if let Some(extra) = left.iter().find(|c| !kept.contains(*c)) {
                problems.push(format!("instance {instance}, client {client}: still subscribed to {extra:?}"));
            }
        }
    }
    problems.extend(rw_violations(&world));
    problems.extend(tick_violations(&world));
    let report = world.other_checker.report();
    if !report.overlaps.is_empty() {
        problems.push(format!("{OTHER}: overlapping holds: {:?}", report.overlaps));
    }
    if world.schedule.fencing && !report.fence_regressions.is_empty() {
        problems.push(format!("{OTHER}: fencing regressions: {:?}", report.fence_regressions));
    }
    for (slot, checker) in world.slots.iter().enumerate() {
        let report = checker.report();
        if !report.overlaps.is_empty() {
            problems.push(format!("slot {slot}: two permits at once: {:?}", report.overlaps));
        }
        if world.schedule.fencing && !report.fence_regressions.is_empty() {
            problems.push(format!("slot {slot}: tokens went back: {:?}", report.fence_regressions));
        }
    }
    let report = world.checker.report();
    if !report.overlaps.is_empty() {
        problems.push(format!("overlapping holds: {:?}", report.overlaps));
    }
    // An election's terms are its tokens, with fencing or without.
    let fenced = world.schedule.fencing || world.schedule.other == Other::Election;
    if fenced && !report.fence_regressions.is_empty() {
        problems.push(format!("fencing regressions: {:?}", report.fence_regressions));
    }
    summary.primitives.insert(world.schedule.primitive(), (1, summary.acquired));
    match problems.is_empty() {
        true => Ok(summary),
        false => Err(fail(problems.join("; "))),
    }
}

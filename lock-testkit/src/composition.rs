//! A composition explorer: seeded schedules that run several primitives and key layouts on **shared names**, in one
//! process and across processes, with one oracle over the whole run.
//!
//! Every other suite runs one primitive, one layout, one backend at a time; users run them together on one Redis,
//! and what breaks breaks where two meet: a newcomer that sleeps on a free lock beside a multi-lock waiter blocked by
//! another resource, beside a holder that stays registered, a semaphore newcomer for fewer permits than are free
//! beside a waiter for more, a read-write writer that sleeps past the expiry ahead. Each schedule draws 1 to 3
//! processes (clients of one [`ScriptedServer`], each with its own release hub) and 3 to 7 actors, each running a few
//! sessions one after another, each session one of:
//!
//! - a lock on `a` or `b`, plain or fair (the same key as every other lock-key primitive on the name);
//! - a multi-lock on `a` and `b` (either order);
//! - the key `lock:a` under two key layouts at once: `KeyLayout::plain()` with the name `lock:a` and
//!   `KeyLayout::python_redis_lock()` with the name `a` (two libraries' views of one key);
//! - a semaphore of 2 permits on `a`, taking 1 or 2;
//! - a read or a write hold of the read-write lock `a`.
//!
//! A session waits (or, one time in five, tries once), holds for a random time, then releases, or holds past its TTL
//! without renewing and drops its guard (a holder that stopped: nothing announces the expiry).
//!
//! **The oracle: nobody idle while what they wait for is free.** A monitor reads the server's keyspace every few
//! milliseconds and, for every actor waiting, whether the state lets it in now (its lock key absent; both multi-lock
//! keys absent; as many permits free as it asks for; no writer and no live reader for a writer; no writer and no live
//! waiting writer for a reader). A waiter whose resource stays free for longer than [`BOUND`] is a violation: the
//! waiters' safety poll is [`SAFETY_POLL`], far beyond it, so a waiter that sleeps its safety poll on a free resource
//! cannot pass, while a hand-off (milliseconds) or a wake-up at a holder's known expiry always does, also on a
//! starved 2-core runner (ticks of a late monitor are not charged, as in the [explorer](crate::explorer)). Waiters
//! under the plain layout hear nothing (its library announces nothing) and poll on their backoff, capped at 100 ms.
//!
//! A failing schedule is reported with its seed; [`Composition::replay`] runs that seed alone.
//! `lock-testkit/tests/compose.rs` runs them (`LOCK_COMPOSE_SCHEDULES`, `LOCK_COMPOSE_SEED`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use lock_core::backend::Reply;
use lock_core::{KeyLayout, Lock, LockError, LockOptions, MemoryStore, RetryPolicy, RwLock, Semaphore};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::runtime::sleep;
use crate::scripted::{ScriptedServer, ScriptedStore};

/// The longest a waiter may stay idle while what it waits for is free.
pub const BOUND: Duration = Duration::from_millis(700);

/// The longest TTL a session takes (python-redis-lock's whole second aside, whose holders' keys are their own).
const LONGEST_TTL: Duration = Duration::from_millis(600);

/// The bound for `what`: a fair queue's waiters are told of releases by its fair holders and the holders that free
/// the key for them; a plain acquirer beside them (a lock or multi-lock on the same name) that releases while
/// another process of plain waiters is lined up wakes that process only, and the fair head tries at the holder's
/// expiry, which it knows (WIRE.md §10: mixing fair and plain acquirers of one name keeps exclusion, not the
/// queue's promptness).
fn bound(what: What) -> Duration {
    match what {
        What::Lock { fair: true, .. } => BOUND + LONGEST_TTL,
        _ => BOUND,
    }
}

/// Every waiter's safety poll: what a waiter that trusts a wake-up nobody sends sleeps.
pub const SAFETY_POLL: Duration = Duration::from_secs(4);

/// How often the monitor reads the keyspace.
const TICK: Duration = Duration::from_millis(3);

/// What a session takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// A lock on the name, fair or not.
    Lock {
        /// `a` or `b`.
        name: &'static str,
        /// Queued in a fair queue.
        fair: bool,
    },
    /// A multi-lock on `a` and `b`.
    Multi {
        /// `b` first in the call.
        reversed: bool,
    },
    /// The key `lock:a` under the plain layout (name `lock:a`).
    Plain,
    /// The key `lock:a` under python-redis-lock's layout (name `a`).
    PythonRedisLock,
    /// Permits of the semaphore `a` (limit 2).
    Permits(u32),
    /// A read hold of the read-write lock `a`.
    Read,
    /// A write hold of the read-write lock `a`.
    Write,
}

/// How a session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Released after its hold.
    Release,
    /// Held past its TTL without renewing, then dropped.
    Expire,
}

/// One session of an actor.
#[derive(Clone, Copy, Debug)]
pub struct Session {
    /// What it takes.
    pub what: What,
    /// Waits for it (else one try).
    pub wait: bool,
    /// The lock's TTL.
    pub ttl: Duration,
    /// How long it holds before it ends.
    pub hold: Duration,
    /// How it ends.
    pub end: End,
    /// The pause before it starts.
    pub gap: Duration,
}

/// One actor: sessions one after another, in one process.
#[derive(Clone, Debug)]
pub struct Actor {
    /// Its process (a client of the server).
    pub process: usize,
    /// Its sessions.
    pub sessions: Vec<Session>,
}

/// One schedule.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Its seed.
    pub seed: u64,
    /// How many processes.
    pub processes: usize,
    /// The actors.
    pub actors: Vec<Actor>,
}

impl Plan {
    /// The schedule of `seed`.
    pub fn generate(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let processes = rng.random_range(1..=3);
        let actors = (0..rng.random_range(3..=7))
            .map(|_| Actor {
                process: rng.random_range(0..processes),
                sessions: (0..rng.random_range(1..=4)).map(|_| session(&mut rng)).collect(),
            })
            .collect();
        Plan { seed, processes, actors }
    }
}

fn session(rng: &mut StdRng) -> Session {
    let what = match rng.random_range(0..12) {
        0..=2 => Ok(What::Lock { name: if rng.random_bool(0.7) { "a" } else { "b" }, fair: false }),
        3 => Ok(What::Lock { name: "a", fair: true }),
        4 | 5 => Ok(What::Multi { reversed: rng.random_bool(0.5) }),
        6 => Ok(What::Plain),
        7 => Ok(What::PythonRedisLock),
        8 | 9 => Ok(What::Permits(rng.random_range(1..=2))),
        10 => Ok(What::Read),
        _ => Err(What::Write),
    };
    let what = what.unwrap_or_else(|write| write);
    let end = if rng.random_bool(0.3) { End::Expire } else { End::Release };
    Session {
        what,
        wait: rng.random_bool(0.8),
        // python-redis-lock keeps whole seconds: its holders take whole-second TTLs too.
        ttl: match what {
            What::PythonRedisLock | What::Plain => Duration::from_secs(1),
            _ => Duration::from_millis(rng.random_range(150..=600)),
        },
        hold: Duration::from_millis(rng.random_range(0..=60)),
        end,
        gap: Duration::from_millis(rng.random_range(0..=80)),
    }
}

/// What broke in one schedule.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Finding {
    /// The schedule's seed.
    pub seed: u64,
    /// What was wrong.
    pub what: String,
    /// The schedule.
    pub plan: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {}: {}\nschedule: {}", self.seed, self.what, self.plan)
    }
}

/// What the schedules did (to show that the explorer explored).
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Schedules run.
    pub schedules: u64,
    /// Acquisitions, per kind of session.
    pub acquired: BTreeMap<&'static str, usize>,
    /// Waits that ended without the lock (budget spent: none expected).
    pub gave_up: usize,
    /// The longest stretch any waiter was seen idle while its resource was free, and whose (seed, kind).
    pub longest_idle: Duration,
    /// The schedule and kind of session of that stretch.
    pub longest_idle_at: Option<(u64, &'static str)>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.schedules += other.schedules;
        for (kind, n) in &other.acquired {
            *self.acquired.entry(kind).or_default() += n;
        }
        self.gave_up += other.gave_up;
        if other.longest_idle > self.longest_idle {
            self.longest_idle = other.longest_idle;
            self.longest_idle_at = other.longest_idle_at;
        }
    }
}

/// Runs composition schedules; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Composition {
    first_seed: u64,
    schedules: u64,
    concurrency: usize,
}

impl Composition {
    /// `schedules` schedules with seeds `first_seed..`, `concurrency` of them at a time.
    pub fn new(first_seed: u64, schedules: u64, concurrency: usize) -> Self {
        Composition { first_seed, schedules, concurrency: concurrency.max(1) }
    }

    /// Runs every schedule on the current (tokio) runtime; stops at the first finding.
    ///
    /// # Errors
    /// The first [`Finding`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the schedules in progress.
    pub async fn run(&self) -> Result<Tally, Finding> {
        let seeds = (0..self.schedules).map(|i| self.first_seed.wrapping_add(i));
        let mut results =
            stream::iter(seeds).map(|seed| run_plan(Plan::generate(seed))).buffer_unordered(self.concurrency);
        let mut tally = Tally::default();
        while let Some(result) = results.next().await {
            tally.add(&result?);
        }
        Ok(tally)
    }

    /// Runs the schedule of `seed` alone.
    ///
    /// # Errors
    /// Its [`Finding`].
    ///
    /// # Cancel safety
    /// As [`run`](Self::run).
    pub async fn replay(seed: u64) -> Result<Tally, Finding> {
        run_plan(Plan::generate(seed)).await
    }
}

/// One process's view: its client and the primitives on it.
struct Process {
    native: Lock,
    plain: Lock,
    python: Lock,
    semaphore: Semaphore,
    rw: RwLock,
}

/// The shared state of one run.
struct World {
    server: ScriptedServer,
    processes: Vec<Process>,
    /// Who waits now, by actor.
    waiting: Mutex<BTreeMap<usize, What>>,
}

/// The server's clock in ms.
fn server_ms(memory: &MemoryStore) -> u64 {
    match memory.command(&["TIME"]) {
        Some(Reply::Array(t)) => {
            let part = |i: usize| t.get(i).and_then(|v| v.as_text()).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            part(0).saturating_mul(1_000).saturating_add(part(1) / 1_000)
        }
        _ => 0,
    }
}

/// The live members of the sorted set `key` (scored by expiry in server ms).
fn live_members(memory: &MemoryStore, key: &str) -> Vec<String> {
    let now = server_ms(memory);
    match memory.command(&["ZRANGEBYSCORE", key, &format!("({now}"), "+inf"]) {
        Some(Reply::Array(items)) => items.iter().filter_map(|i| i.as_text().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

fn live(memory: &MemoryStore, key: &str) -> usize {
    live_members(memory, key).len()
}

/// The semaphore slots held by live permits (a permit for two slots is one member of `:permits`).
fn used_slots(memory: &MemoryStore) -> usize {
    let live = live_members(memory, "wlp:sem:{a}:permits");
    match memory.command(&["HGETALL", "wlp:sem:{a}:slots"]) {
        Some(Reply::Array(items)) => items
            .chunks(2)
            .filter(|pair| pair.get(1).and_then(|t| t.as_text()).is_some_and(|t| live.iter().any(|l| l == t)))
            .count(),
        _ => 0,
    }
}

fn exists(memory: &MemoryStore, key: &str) -> bool {
    matches!(memory.command(&["EXISTS", key]), Some(Reply::Int(n)) if n > 0)
}

impl World {
    /// Whether the server's state lets a waiter for `what` in now.
    fn lets_in(&self, what: What) -> bool {
        let memory = self.server.memory();
        match what {
            What::Lock { name, .. } => !exists(memory, &format!("wlp:{{{name}}}")),
            What::Multi { .. } => !exists(memory, "wlp:{a}") && !exists(memory, "wlp:{b}"),
            What::Plain | What::PythonRedisLock => !exists(memory, "lock:a"),
            What::Permits(n) => used_slots(memory) + n as usize <= 2,
            What::Write => !exists(memory, "wlp:rw:{a}") && live(memory, "wlp:rw:{a}:readers") == 0,
            What::Read => !exists(memory, "wlp:rw:{a}") && live(memory, "wlp:rw:{a}:heartbeats") == 0,
        }
    }
}

fn kind(what: What) -> &'static str {
    match what {
        What::Lock { fair: false, .. } => "lock",
        What::Lock { fair: true, .. } => "fair lock",
        What::Multi { .. } => "multi-lock",
        What::Plain => "plain layout",
        What::PythonRedisLock => "python-redis-lock layout",
        What::Permits(_) => "semaphore",
        What::Read => "read",
        What::Write => "write",
    }
}

/// A waiter's options.
fn options(session: &Session) -> LockOptions {
    let retry = RetryPolicy::default()
        .with_min_delay(Duration::from_millis(5))
        .with_max_delay(Duration::from_millis(100))
        .with_safety_poll(SAFETY_POLL);
    let wait = if session.wait { Duration::from_secs(30) } else { Duration::ZERO };
    let options = LockOptions::new(session.ttl).with_wait(wait).with_retry(retry);
    match session.what {
        What::Lock { fair: true, .. } => options.with_fair_queue(Duration::from_secs(3)),
        _ => options,
    }
}

/// A hold of any kind, to end as its session says.
enum Held {
    Lock(lock_core::Guard),
    Multi(lock_core::MultiGuard),
    Permit(lock_core::Permit),
    Read(lock_core::ReadGuard),
    Write(lock_core::WriteGuard),
}

impl Held {
    async fn release(self) {
        // A release that found the hold gone answers so: nothing here depends on it.
        let _ = match self {
            Held::Lock(g) => g.release().await.map(drop),
            Held::Multi(g) => g.release().await.map(drop),
            Held::Permit(g) => g.release().await.map(drop),
            Held::Read(g) => g.release().await.map(drop),
            Held::Write(g) => g.release().await.map(drop),
        };
    }
}

async fn take(world: &World, process: usize, session: &Session) -> Result<Option<Held>, LockError> {
    let p = &world.processes[process];
    let options = options(session);
    let wait = session.wait;
    macro_rules! get {
        ($acquire:expr, $try:expr, $wrap:expr) => {
            if wait {
                $acquire.await.map(|g| Some($wrap(g)))
            } else {
                $try.await.map(|g| g.map($wrap))
            }
        };
    }
    match session.what {
        What::Lock { name, .. } => {
            get!(p.native.acquire(name, &options), p.native.try_acquire(name, &options), Held::Lock)
        }
        What::Multi { reversed } => {
            let names: &[&str] = if reversed { &["b", "a"] } else { &["a", "b"] };
            get!(p.native.acquire_all(names, &options), p.native.try_acquire_all(names, &options), Held::Multi)
        }
        What::Plain => get!(p.plain.acquire("lock:a", &options), p.plain.try_acquire("lock:a", &options), Held::Lock),
        What::PythonRedisLock => {
            get!(p.python.acquire("a", &options), p.python.try_acquire("a", &options), Held::Lock)
        }
        What::Permits(n) => {
            get!(p.semaphore.acquire(n, &options), p.semaphore.try_acquire(n, &options), Held::Permit)
        }
        What::Read => get!(p.rw.read(&options), p.rw.try_read(&options), Held::Read),
        What::Write => get!(p.rw.write(&options), p.rw.try_write(&options), Held::Write),
    }
}

/// One actor's sessions; what it acquired, and the waits it gave up.
async fn act(world: Arc<World>, id: usize, actor: Actor) -> Result<Tally, String> {
    let mut tally = Tally::default();
    for session in &actor.sessions {
        sleep(session.gap).await;
        if session.wait {
            lock_waiting(&world).insert(id, session.what);
        }
        let taken = take(&world, actor.process, session).await;
        lock_waiting(&world).remove(&id);
        let held = match taken {
            Ok(Some(held)) => held,
            Ok(None) => continue,
            Err(LockError::Contended { .. }) => {
                tally.gave_up += 1;
                continue;
            }
            Err(err) => return Err(format!("actor {id}: {} failed: {err:?}", kind(session.what))),
        };
        *tally.acquired.entry(kind(session.what)).or_default() += 1;
        match session.end {
            End::Release => {
                sleep(session.hold).await;
                held.release().await;
            }
            End::Expire => {
                // A holder that stopped: its key expires, and nothing announces it.
                sleep(session.ttl + Duration::from_millis(30)).await;
                drop(held);
            }
        }
    }
    Ok(tally)
}

fn lock_waiting(world: &World) -> std::sync::MutexGuard<'_, BTreeMap<usize, What>> {
    world.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Watches the run: a waiter idle while the state lets it in, for longer than [`BOUND`], is a finding.
async fn monitor(world: Arc<World>, done: Arc<AtomicBool>) -> (Option<String>, Duration, &'static str) {
    let mut idle: BTreeMap<usize, Duration> = BTreeMap::new();
    let mut longest = Duration::ZERO;
    let mut longest_kind = "";
    let mut last = Instant::now();
    while !done.load(Ordering::SeqCst) {
        let now = Instant::now();
        // A late monitor means late waiters too: a tick counts for at most twice its period.
        let tick = (now - last).min(TICK * 2);
        last = now;
        let waiting: Vec<(usize, What)> = lock_waiting(&world).iter().map(|(id, what)| (*id, *what)).collect();
        let mut still = BTreeMap::new();
        for (id, what) in waiting {
            if !world.lets_in(what) {
                continue;
            }
            let stretch = idle.get(&id).map_or(Duration::ZERO, |d| *d + tick);
            if stretch > longest {
                longest = stretch;
                longest_kind = kind(what);
            }
            if stretch > bound(what) {
                return (
                    Some(format!(
                        "actor {id} ({}) was idle {stretch:?} while it could get in (bound {:?}, safety poll \
                         {SAFETY_POLL:?})",
                        kind(what),
                        bound(what)
                    )),
                    longest,
                    longest_kind,
                );
            }
            still.insert(id, stretch);
        }
        idle = still;
        sleep(TICK).await;
    }
    (None, longest, longest_kind)
}

async fn run_plan(plan: Plan) -> Result<Tally, Finding> {
    let finding = |what: String| Finding { seed: plan.seed, what, plan: format!("{plan:?}") };
    let server = ScriptedServer::new();
    let clients: Vec<ScriptedStore> = (0..plan.processes).map(|_| server.client()).collect();
    let mut processes = Vec::new();
    for client in clients {
        let native = Lock::new(client);
        let process = Process {
            plain: native.clone().with_layout(KeyLayout::plain()),
            python: native.clone().with_layout(KeyLayout::python_redis_lock()),
            semaphore: Semaphore::new(native.clone(), "a", 2).map_err(|e| finding(format!("semaphore: {e}")))?,
            rw: RwLock::new(native.clone(), "a").map_err(|e| finding(format!("rwlock: {e}")))?,
            native,
        };
        processes.push(process);
    }
    let world = Arc::new(World { server, processes, waiting: Mutex::new(BTreeMap::new()) });
    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(monitor(world.clone(), done.clone()));
    let actors: Vec<_> = plan
        .actors
        .iter()
        .cloned()
        .enumerate()
        .map(|(id, actor)| tokio::spawn(act(world.clone(), id, actor)))
        .collect();
    let mut tally = Tally { schedules: 1, ..Tally::default() };
    let mut failed = None;
    for actor in actors {
        match actor.await {
            Ok(Ok(seen)) => tally.add(&Tally { schedules: 0, ..seen }),
            Ok(Err(what)) => failed = failed.or(Some(what)),
            Err(panicked) => failed = failed.or(Some(format!("an actor panicked: {panicked}"))),
        }
    }
    done.store(true, Ordering::SeqCst);
    let (idle, longest, longest_kind) =
        watcher.await.unwrap_or((Some("the monitor panicked".to_owned()), Duration::ZERO, ""));
    tally.longest_idle = longest;
    tally.longest_idle_at = Some((plan.seed, longest_kind));
    if let Some(what) = idle.or(failed) {
        return Err(finding(what));
    }
    if tally.gave_up > 0 {
        return Err(finding(format!("{} waits ran out of a 30 s budget", tally.gave_up)));
    }
    Ok(tally)
}

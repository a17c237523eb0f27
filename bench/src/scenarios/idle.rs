//! Idle while free (issue 54 §2): how long a waiter stays idle while what it waits for is free, per primitive, with
//! holders that release, holders that expire, and primitives mixed in one process.
//!
//! Each episode takes a fresh name. A holder takes it; a waiter starts waiting for it (wait budget 10 s, default
//! retry policy, so its safety poll is 1 s); then the holder frees it:
//!
//! - **release**: the holder, another process's store (its own connection and release subscriber), releases after
//!   the waiter has waited [`HOLD`]. The free instant is taken *before* the release is sent, so the figure includes
//!   the release's own round trip.
//! - **expire**: the holder takes it with [`TTL`] through a fault proxy that then drops every byte (a process that
//!   froze: no renewal, no release reaches the server). The free instant is the start of the holder's request plus
//!   the TTL, never later than the server's expiry, so the figure includes up to one request's latency.
//!
//! The idle time is the waiter's grant minus the free instant. Primitives: the lock, the fair lock, the multi-lock
//! (both names held), the semaphore (2 permits, the holder takes both, the waiter asks for 1), the read-write lock
//! (a writer holds; a writer waits, and in another row a reader), and, without the bar, the election (its
//! hand-over grace is part of its design) and the job lock (which does not wait: a replica's try right after a run
//! finished, and whether it ran).
//!
//! **mixed** runs the cases where two primitives meet in one process (one store, one release hub): a lock waiter
//! beside a multi-lock waiter blocked by another name; a newcomer beside a local holder whose key expired; a
//! semaphore newcomer for 1 of 2 free permits beside a local waiter for 3; a queued writer (with readers queued
//! behind it) behind a local writer that expires. The bar for every row but the election's and the job's: p99 ≤
//! 50 ms and max ≤ the safety poll.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lock_core::{
    Election, ElectionOptions, JobLock, JobOptions, Leadership, Lock, LockGuard, LockOptions, LockStore, RwLock,
    Semaphore,
};
use lock_testkit::FaultProxy;

use super::Ctx;
use crate::contender::Backend;
use crate::measure::Latency;
use crate::report::{Bar, Report, Row};
use crate::server::Server;

/// The scenario's name in `row` and `target` lines.
const SCENARIO: &str = "idle-while-free";
/// An expiring holder's TTL (an election's lease).
const TTL: Duration = Duration::from_millis(300);
/// How long a releasing holder keeps the name after its waiter started waiting.
const HOLD: Duration = Duration::from_millis(40);
/// A waiter's budget: far beyond every episode, so a waiter that sleeps its safety poll shows in the figures.
const WAIT: Duration = Duration::from_secs(10);
/// Episodes per row at `--scale 1`.
const EPISODES: f64 = 30.0;
/// The bar on the 99th percentile of every row but the election's and the job's.
const P99_BAR_MS: f64 = 50.0;

/// What one row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    Lock,
    Fair,
    Multi,
    Semaphore,
    RwWrite,
    RwRead,
    Election,
}

impl Prim {
    const ALL: [Prim; 7] =
        [Prim::Lock, Prim::Fair, Prim::Multi, Prim::Semaphore, Prim::RwWrite, Prim::RwRead, Prim::Election];

    fn label(self) -> &'static str {
        match self {
            Prim::Lock => "lock",
            Prim::Fair => "fair",
            Prim::Multi => "multi",
            Prim::Semaphore => "semaphore",
            Prim::RwWrite => "rwlock-writer",
            Prim::RwRead => "rwlock-reader",
            Prim::Election => "election",
        }
    }

    /// Whether the row is held to the bar.
    fn barred(self) -> bool {
        self != Prim::Election
    }
}

/// A hold of any primitive.
enum Held {
    Guard(Box<dyn LockGuard>),
    Leader(Box<Leadership>),
}

impl Held {
    async fn release(self) -> anyhow::Result<()> {
        match self {
            Held::Guard(guard) => guard.release().await.map(drop).context("release"),
            Held::Leader(leader) => leader.resign().await.map(drop).context("resign"),
        }
    }
}

fn election_options() -> ElectionOptions {
    ElectionOptions::default()
        .with_lease(TTL)
        .with_renew_deadline(TTL * 2 / 3)
        .with_retry_period(Duration::from_millis(100))
}

/// Takes `name` as `prim`'s holder (`holder`) or waiter, with `ttl` and `wait`.
async fn take(
    prim: Prim,
    lock: &Lock,
    name: &str,
    holder: bool,
    ttl: Duration,
    wait: Duration,
) -> anyhow::Result<Held> {
    let opts = LockOptions::new(ttl).with_wait(wait);
    let guard: Box<dyn LockGuard> = match prim {
        Prim::Lock => Box::new(lock.acquire(name, &opts).await?),
        Prim::Fair => Box::new(lock.acquire(name, &opts.with_fair_queue(Duration::from_secs(3))).await?),
        Prim::Multi => {
            let (a, b) = (format!("{name}/a"), format!("{name}/b"));
            Box::new(lock.acquire_all(&[&a, &b], &opts).await?)
        }
        Prim::Semaphore => {
            Box::new(Semaphore::new(lock.clone(), name, 2)?.acquire(if holder { 2 } else { 1 }, &opts).await?)
        }
        Prim::RwWrite => Box::new(RwLock::new(lock.clone(), name)?.write(&opts).await?),
        Prim::RwRead if holder => Box::new(RwLock::new(lock.clone(), name)?.write(&opts).await?),
        Prim::RwRead => Box::new(RwLock::new(lock.clone(), name)?.read(&opts).await?),
        Prim::Election => {
            let election = Election::new(lock.clone(), name, election_options())?;
            let id = if holder { "holder" } else { "waiter" };
            let leader = if wait.is_zero() {
                election.try_campaign(id, "").await?.context("the election was led")?
            } else {
                election.campaign(id, "").await?
            };
            return Ok(Held::Leader(Box::new(leader)));
        }
    };
    Ok(Held::Guard(guard))
}

/// One row's idle times.
struct Figures {
    idle: Latency,
    episodes: u64,
    /// Job rows: tries that found the job still held.
    skipped: u64,
}

impl Figures {
    fn new() -> anyhow::Result<Self> {
        Ok(Figures { idle: Latency::new()?, episodes: 0, skipped: 0 })
    }

    fn add(&mut self, idle: Duration) {
        self.idle.record(idle);
        self.episodes += 1;
    }

    fn report(&self, report: &mut Report, contender: &str, barred: bool) {
        let ms = |us: f64| us / 1_000.0;
        let mut row = Row::new(SCENARIO, contender)
            .field("episodes", self.episodes as f64)
            .field("p50_ms", ms(self.idle.quantile_us(0.5)))
            .field("p99_ms", ms(self.idle.quantile_us(0.99)))
            .field("max_ms", ms(self.idle.max_us()));
        if contender.starts_with("job") {
            row = row.field("skipped", self.skipped as f64);
        }
        report.row(row);
        if barred {
            let safety_poll = lock_core::RetryPolicy::default().safety_poll().as_secs_f64() * 1_000.0;
            report.target(SCENARIO, "p99_ms", contender, None, Bar::AtMost(P99_BAR_MS));
            report.target(SCENARIO, "max_ms", contender, None, Bar::AtMost(safety_poll));
        }
    }
}

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let server = &servers[0];
    let episodes = (EPISODES * ctx.settings.scale).ceil().max(3.0) as usize;
    let waiter: Arc<dyn LockStore> = Backend::RedisRs.store(&server.url()).await?;
    let other: Arc<dyn LockStore> = Backend::RedisRs.store(&server.url()).await?;
    for prim in Prim::ALL {
        for expire in [false, true] {
            let mut figures = Figures::new()?;
            for i in 0..episodes {
                let name = format!("idle-{}-{}-{i}", prim.label(), if expire { "expire" } else { "release" });
                figures.add(episode(prim, expire, &name, server, &other, &waiter).await?);
            }
            let end = if expire { "expire" } else { "release" };
            figures.report(&mut ctx.report, &format!("{}/{end}", prim.label()), prim.barred());
        }
    }
    let mut job = Figures::new()?;
    for i in 0..episodes {
        job_episode(&format!("idle-job-{i}"), &other, &waiter, &mut job).await?;
    }
    job.report(&mut ctx.report, "job/release", false);
    mixed(ctx, &servers[0], episodes).await
}

/// One holder and one waiter of `prim` on `name`: the waiter's idle time.
async fn episode(
    prim: Prim,
    expire: bool,
    name: &str,
    server: &Server,
    other: &Arc<dyn LockStore>,
    waiter: &Arc<dyn LockStore>,
) -> anyhow::Result<Duration> {
    // An expiring holder's connection goes through a proxy that then drops everything: a process that froze.
    let proxy = match expire {
        true => Some(FaultProxy::start(server.addr()).context("fault proxy")?),
        false => None,
    };
    let holder_store = match &proxy {
        Some(proxy) => Backend::RedisRs.store(&proxy.url()).await?,
        None => other.clone(),
    };
    let holder_lock = Lock::from_arc(holder_store);
    let ttl = if expire { TTL } else { Duration::from_secs(30) };
    if proxy.is_some() {
        // A new store's first acquisition checks the version key and loads the script: done before `t0`, so the
        // holder's timed request is one round trip.
        let warm = format!("{name}/warm-up");
        take(prim, &holder_lock, &warm, true, ttl, Duration::ZERO).await?.release().await?;
    }
    let t0 = Instant::now();
    let held = take(prim, &holder_lock, name, true, ttl, Duration::ZERO).await?;
    if let Some(proxy) = &proxy {
        proxy.blackhole(true);
    }
    let waiting = {
        let (lock, name) = (Lock::from_arc(waiter.clone()), name.to_owned());
        tokio::spawn(async move {
            let held = take(prim, &lock, &name, false, Duration::from_secs(30), WAIT).await;
            (Instant::now(), held)
        })
    };
    let free = if expire {
        t0 + TTL
    } else {
        tokio::time::sleep(HOLD).await;
        let free = Instant::now();
        held.release().await?;
        free
    };
    let (granted, got) = waiting.await.context("the waiter panicked")?;
    got?.release().await?;
    if let Some(proxy) = &proxy {
        // Healed before the holder's store goes: its background release finds the name gone and stops.
        proxy.blackhole(false);
    }
    Ok(granted.saturating_duration_since(free))
}

/// A replica's run finishes; another replica's try right after it: how long from the finish to its work's start.
async fn job_episode(
    name: &str,
    other: &Arc<dyn LockStore>,
    waiter: &Arc<dyn LockStore>,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    let opts = JobOptions::new(Duration::from_secs(30));
    JobLock::new(Lock::from_arc(other.clone())).run(name, &opts, |_| tokio::time::sleep(HOLD)).await?;
    let free = Instant::now();
    let outcome = JobLock::new(Lock::from_arc(waiter.clone())).run(name, &opts, |_| async { Instant::now() }).await?;
    match outcome {
        lock_core::JobOutcome::Ran { value, .. } => figures.add(value.saturating_duration_since(free)),
        _ => figures.skipped += 1,
    }
    Ok(())
}

/// The cases where two primitives meet in one process.
async fn mixed(ctx: &mut Ctx, server: &Server, episodes: usize) -> anyhow::Result<()> {
    let store: Arc<dyn LockStore> = Backend::RedisRs.store(&server.url()).await?;
    let lock = Lock::from_arc(store);
    let long = |wait: Duration| LockOptions::new(Duration::from_secs(30)).with_wait(wait);
    let waiting = long(WAIT);

    // A lock waiter on `a` beside a multi-lock waiter on `a` and `b`, blocked by `b`.
    let mut figures = Figures::new()?;
    for i in 0..episodes {
        let (a, b) = (format!("mixed-multi-{i}/a"), format!("mixed-multi-{i}/b"));
        let held_b = lock.acquire(&b, &long(Duration::ZERO)).await?;
        let held_a = lock.acquire(&a, &long(Duration::ZERO)).await?;
        let multi = {
            let (lock, a, b, opts) = (lock.clone(), a.clone(), b.clone(), waiting.clone());
            tokio::spawn(async move { lock.acquire_all(&[&a, &b], &opts).await })
        };
        let single = {
            let (lock, a, opts) = (lock.clone(), a.clone(), waiting.clone());
            tokio::spawn(async move { lock.acquire(&a, &opts).await.map(|g| (Instant::now(), g)) })
        };
        tokio::time::sleep(HOLD).await;
        let free = Instant::now();
        held_a.release().await?;
        let (granted, guard) = single.await.context("the waiter panicked")??;
        figures.add(granted.saturating_duration_since(free));
        guard.release().await?;
        held_b.release().await?;
        multi.await.context("the multi-lock waiter panicked")??.release().await?;
    }
    figures.report(&mut ctx.report, "mixed/lock-beside-multi", true);

    // A newcomer beside a local holder whose key expired (it stays registered on the channel until dropped).
    let mut figures = Figures::new()?;
    for i in 0..episodes {
        let name = format!("mixed-expired-{i}");
        let t0 = Instant::now();
        let expired = lock.acquire(&name, &LockOptions::new(TTL)).await?;
        tokio::time::sleep_until((t0 + TTL + Duration::from_millis(5)).into()).await;
        let free = Instant::now();
        let guard = lock.acquire(&name, &waiting).await?;
        figures.add(free.elapsed());
        guard.release().await?;
        drop(expired);
    }
    figures.report(&mut ctx.report, "mixed/newcomer-beside-expired-holder", true);

    // A semaphore newcomer for 1 permit, 2 of 3 free, beside a local waiter for 3.
    let mut figures = Figures::new()?;
    for i in 0..episodes {
        let semaphore = Semaphore::new(lock.clone(), &format!("mixed-sem-{i}"), 3)?;
        let one = semaphore.acquire(1, &long(Duration::ZERO)).await?;
        let three = {
            let (semaphore, opts) = (semaphore.clone(), waiting.clone());
            tokio::spawn(async move { semaphore.acquire(3, &opts).await })
        };
        tokio::time::sleep(HOLD).await;
        let free = Instant::now();
        let newcomer = semaphore.acquire(1, &waiting).await?;
        figures.add(free.elapsed());
        newcomer.release().await?;
        one.release().await?;
        three.await.context("the semaphore waiter panicked")??.release().await?;
    }
    figures.report(&mut ctx.report, "mixed/semaphore-newcomer-beside-larger-waiter", true);

    // A queued writer, readers queued behind it, behind a local writer that expires without renewing.
    let mut figures = Figures::new()?;
    for i in 0..episodes {
        let rw = RwLock::new(lock.clone(), &format!("mixed-rw-{i}"))?;
        let t0 = Instant::now();
        let first = rw.write(&LockOptions::new(TTL)).await?;
        let writer = {
            let (rw, opts) = (rw.clone(), waiting.clone());
            tokio::spawn(async move { rw.write(&opts).await.map(|g| (Instant::now(), g)) })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (rw, opts) = (rw.clone(), waiting.clone());
                tokio::spawn(async move { rw.read(&opts).await })
            })
            .collect();
        let (granted, guard) = writer.await.context("the writer panicked")??;
        figures.add(granted.saturating_duration_since(t0 + TTL));
        guard.release().await?;
        for reader in readers {
            reader.await.context("a reader panicked")??.release().await?;
        }
        drop(first);
    }
    figures.report(&mut ctx.report, "mixed/writer-behind-expiring-writer", true);
    Ok(())
}

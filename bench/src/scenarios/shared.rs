//! Scenarios 6 and 7 (issue 18): the semaphore and the read-write lock under contention, against a hand-written floor
//! on the same server.
//!
//! - `semaphore-4x16`: 16 tasks on one client take one permit of a semaphore of 4, hold it ~1 ms, give it back, and
//!   try again at once. The floor is the cheapest expiring semaphore: one script (`TIME`, purge the expired
//!   members, `ZCARD`, `ZADD`, `PEXPIRE`) polled every millisecond while full, and `ZREM` to release: no fencing, no
//!   numbered slots, no wake-ups, no renewal.
//! - `rwlock-9to1`: 16 tasks on one client read (9 in 10) or write, hold ~1 ms, give it back. The floor is the
//!   cheapest read-write lock with expiring readers: a read script (writer absent → purge, `ZADD`, `PEXPIRE`) and a
//!   write script (writer absent, no live reader → `SET PX`), both polled every millisecond, `ZREM` and
//!   compare-and-delete to release; no writer preference (so its writers can starve), no fencing, no epochs.
//!
//! Measured per contender: operations per second (and reads and writes per second), server commands per operation
//! (`INFO commandstats`, nested script calls included), and the wait p50 / p99 of an acquire.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lock_core::{Lock, LockOptions, LockStore, RwLock, Semaphore};
use redis::aio::MultiplexedConnection;
use redis::Script;

use super::{command_stats, order, reset_stats, Ctx, ROUNDS};
use crate::contender::{Backend, TTL};
use crate::measure::{Bound, Latency};
use crate::report::Row;
use crate::server::Server;

const TASKS: usize = 16;
const LIMIT: u32 = 4;
/// One write in this many operations.
const WRITE_EVERY: u64 = 10;
const HOLD: Duration = Duration::from_millis(1);
/// The floor's polling interval while it cannot get in.
const POLL: Duration = Duration::from_millis(1);

static FLOOR_SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0",
    )
});

static FLOOR_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1",
    )
});

static FLOOR_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) > 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1",
    )
});

static FLOOR_WRITE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0",
    )
});

/// Holds for [`HOLD`] on the blocking pool (tokio's 1 ms timer lasts 1–2 ms; see the hand-off scenario).
async fn hold() -> anyhow::Result<()> {
    #[allow(clippy::disallowed_methods)] // On a blocking-pool thread, not on the async runtime.
    tokio::task::spawn_blocking(|| std::thread::sleep(HOLD)).await.context("the hold thread panicked")
}

fn token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// One contender of these scenarios.
#[derive(Clone)]
enum Shared {
    Ours(Arc<dyn LockStore>),
    Floor(MultiplexedConnection),
}

impl Shared {
    async fn new(name: &str, url: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "redis-rs" => Shared::Ours(Backend::RedisRs.store(url).await?),
            "fred" => Shared::Ours(Backend::Fred.store(url).await?),
            _ => {
                let client = redis::Client::open(url).context("floor client")?;
                Shared::Floor(client.get_multiplexed_async_connection().await.context("floor connection")?)
            }
        })
    }
}

/// What one segment counted.
#[derive(Default)]
struct Totals {
    reads: u64,
    writes: u64,
    elapsed: Duration,
    commands: u64,
    wait: Option<Latency>,
}

impl Totals {
    fn add(&mut self, other: Totals) -> anyhow::Result<()> {
        self.reads += other.reads;
        self.writes += other.writes;
        self.elapsed += other.elapsed;
        self.commands += other.commands;
        match (&mut self.wait, other.wait) {
            (Some(w), Some(o)) => w.merge(&o)?,
            (slot @ None, o) => *slot = o,
            _ => {}
        }
        Ok(())
    }

    fn row(&self, scenario: &str, contender: &str) -> Row {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let ops = (self.reads + self.writes) as f64;
        let wait = self.wait.as_ref();
        let mut row = Row::new(scenario, contender).field("ops_per_s", ops / secs);
        if scenario.starts_with("rwlock") {
            row = row.field("reads_per_s", self.reads as f64 / secs).field("writes_per_s", self.writes as f64 / secs);
        }
        row.field("server_cmds_per_op", self.commands as f64 / ops.max(1.0))
            .field("wait_p50_us", wait.map_or(0.0, |w| w.quantile_us(0.5)))
            .field("wait_p99_us", wait.map_or(0.0, |w| w.quantile_us(0.99)))
    }
}

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let bound = Bound::new(1.0, 1_000_000, ctx.settings.scale);
    for scenario in ["semaphore-4x16", "rwlock-9to1"] {
        if !ctx.settings.wants(scenario.split('-').next().unwrap_or(scenario)) {
            continue;
        }
        let servers = ctx.servers(1)?;
        let url = servers[0].url();
        let mut names = vec!["redis-rs", "fred", "floor"];
        if let Some(keep) = &ctx.settings.contenders {
            names.retain(|n| keep.iter().any(|k| k == n));
        }
        let mut totals: Vec<Totals> = names.iter().map(|_| Totals::default()).collect();
        for round in 0..ROUNDS {
            for i in order(round, names.len()) {
                let contender = Shared::new(names[i], &url).await?;
                let name = format!("{scenario}:{i}:{round}");
                let seg = segment(scenario, &contender, &name, bound, &servers).await?;
                totals[i].add(seg)?;
            }
        }
        for (name, total) in names.iter().zip(&totals) {
            ctx.report.row(total.row(scenario, name));
        }
    }
    Ok(())
}

/// One measured segment: [`TASKS`] tasks on one client until the bound.
async fn segment(scenario: &str, c: &Shared, name: &str, bound: Bound, servers: &[Server]) -> anyhow::Result<Totals> {
    let rw = scenario.starts_with("rwlock");
    let opts = LockOptions::new(TTL).with_wait(Duration::from_secs(30));
    let (sem, rwlock) = match c {
        Shared::Ours(store) => {
            let lock = Lock::from_arc(store.clone());
            (Some(Semaphore::new(lock.clone(), name, LIMIT)?), Some(RwLock::new(lock, name)?))
        }
        Shared::Floor(_) => (None, None),
    };
    // Warm-up: one operation of each kind (scripts loaded, connections up).
    one(c, sem.as_ref(), rwlock.as_ref(), name, &opts, false).await?;
    if rw {
        one(c, sem.as_ref(), rwlock.as_ref(), name, &opts, true).await?;
    }
    reset_stats(servers)?;
    let (reads, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let deadline = started + bound.time;
    let tasks = (0..TASKS).map(|t| {
        let (c, sem, rwlock, name, opts) = (c.clone(), sem.clone(), rwlock.clone(), name.to_owned(), opts.clone());
        let (reads, writes) = (reads.clone(), writes.clone());
        tokio::spawn(async move {
            let mut wait = Latency::new()?;
            let mut i = t as u64;
            while Instant::now() < deadline
                && reads.load(Ordering::Relaxed) + writes.load(Ordering::Relaxed) < bound.count
            {
                let write = rw && i.is_multiple_of(WRITE_EVERY);
                i += 1;
                let waited = one(&c, sem.as_ref(), rwlock.as_ref(), &name, &opts, write).await?;
                wait.record(waited);
                if write {
                    writes.fetch_add(1, Ordering::Relaxed);
                } else {
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(wait)
        })
    });
    let mut merged = Latency::new()?;
    for task in futures_util::future::join_all(tasks).await {
        merged.merge(&task.context("a bench task panicked")??)?;
    }
    let elapsed = started.elapsed();
    let commands = command_stats(servers)?.executed();
    let (reads, writes) = (reads.load(Ordering::Relaxed), writes.load(Ordering::Relaxed));
    let (reads, writes) = if rw { (reads, writes) } else { (reads + writes, 0) };
    Ok(Totals { reads, writes, elapsed, commands, wait: Some(merged) })
}

/// One acquire, hold and release; returns how long the acquire took.
async fn one(
    c: &Shared,
    sem: Option<&Semaphore>,
    rwlock: Option<&RwLock>,
    name: &str,
    opts: &LockOptions,
    write: bool,
) -> anyhow::Result<Duration> {
    let asked = Instant::now();
    match (c, sem, rwlock) {
        (Shared::Ours(_), Some(sem), Some(rwlock)) => {
            if name.starts_with("semaphore") {
                let permit = sem.acquire(1, opts).await?;
                let waited = asked.elapsed();
                hold().await?;
                permit.release().await?;
                Ok(waited)
            } else if write {
                let w = rwlock.write(opts).await?;
                let waited = asked.elapsed();
                hold().await?;
                w.release().await?;
                Ok(waited)
            } else {
                let r = rwlock.read(opts).await?;
                let waited = asked.elapsed();
                hold().await?;
                r.release().await?;
                Ok(waited)
            }
        }
        (Shared::Floor(conn), _, _) => {
            let mut conn = conn.clone();
            let token = token();
            let ttl = TTL.as_millis().to_string();
            let (writer, readers) = (format!("{name}:w"), format!("{name}:r"));
            let sem_key = format!("{name}:sem");
            loop {
                let got: i64 = if name.starts_with("semaphore") {
                    FLOOR_SEM_ACQUIRE.key(&sem_key).arg(&token).arg(&ttl).arg(LIMIT).invoke_async(&mut conn).await?
                } else if write {
                    FLOOR_WRITE.key(&writer).key(&readers).arg(&token).arg(&ttl).invoke_async(&mut conn).await?
                } else {
                    FLOOR_READ.key(&writer).key(&readers).arg(&token).arg(&ttl).invoke_async(&mut conn).await?
                };
                if got == 1 {
                    break;
                }
                anyhow::ensure!(asked.elapsed() < Duration::from_secs(30), "the floor waited 30 s");
                tokio::time::sleep(POLL).await;
            }
            let waited = asked.elapsed();
            hold().await?;
            if name.starts_with("semaphore") {
                let _: i64 = redis::cmd("ZREM").arg(&sem_key).arg(&token).query_async(&mut conn).await?;
            } else if write {
                let _: i64 = FLOOR_WRITE_RELEASE.key(&writer).arg(&token).invoke_async(&mut conn).await?;
            } else {
                let _: i64 = redis::cmd("ZREM").arg(&readers).arg(&token).query_async(&mut conn).await?;
            }
            Ok(waited)
        }
        _ => anyhow::bail!("no primitive for this contender"),
    }
}

/// One uncontended cycle of each primitive, in the `primitives` scenario.
const PRIMITIVES: [&str; 8] =
    ["lock", "lock-nofence", "multi-2", "job", "election", "semaphore", "rwlock-read", "rwlock-write"];

/// Scenario 8 (issues 16 and 18): one task runs uncontended cycles of each primitive (take, give back) on one
/// server; per cycle, the server commands (`INFO commandstats`, nested script calls included) and the time.
pub(crate) async fn primitives(ctx: &mut Ctx) -> anyhow::Result<()> {
    let bound = Bound::new(0.5, 2_000, ctx.settings.scale);
    let servers = ctx.servers(1)?;
    let url = servers[0].url();
    for backend in ["redis-rs", "fred"] {
        if ctx.settings.contenders.as_ref().is_some_and(|keep| !keep.iter().any(|k| k == backend)) {
            continue;
        }
        let Shared::Ours(store) = Shared::new(backend, &url).await? else { continue };
        let lock = Lock::from_arc(store);
        for primitive in PRIMITIVES {
            let name = format!("primitives:{primitive}:{backend}");
            cycle(&lock, primitive, &name).await?;
            reset_stats(&servers)?;
            let started = Instant::now();
            let mut cycles = 0u64;
            while cycles < bound.count && started.elapsed() < bound.time {
                cycle(&lock, primitive, &name).await?;
                cycles += 1;
            }
            let elapsed = started.elapsed();
            let commands = command_stats(&servers)?.executed();
            let row = Row::new("primitives", &format!("{backend}-{primitive}"))
                .field("server_cmds_per_cycle", commands as f64 / cycles.max(1) as f64)
                .field("us_per_cycle", elapsed.as_secs_f64() * 1e6 / cycles.max(1) as f64);
            ctx.report.row(row);
        }
    }
    Ok(())
}

/// One take-and-give-back of `primitive` on `name`.
async fn cycle(lock: &Lock, primitive: &str, name: &str) -> anyhow::Result<()> {
    let opts = LockOptions::new(TTL);
    match primitive {
        "lock" | "lock-nofence" => {
            let opts = opts.with_fencing(primitive == "lock");
            lock.acquire(name, &opts).await?.release().await?;
        }
        "multi-2" => {
            let (a, b) = (format!("{name}:a"), format!("{name}:b"));
            lock.acquire_all(&[&a, &b], &opts).await?.release().await?;
        }
        "job" => {
            let jobs = lock_core::JobLock::new(lock.clone());
            let ran = jobs.run(name, &lock_core::JobOptions::new(TTL), |_| async {}).await?;
            anyhow::ensure!(matches!(ran, lock_core::JobOutcome::Ran { .. }), "the job was skipped");
        }
        "election" => {
            let election = lock_core::Election::new(lock.clone(), name, lock_core::ElectionOptions::default())?;
            election.campaign("bench", "value").await?.resign().await?;
        }
        "semaphore" => {
            Semaphore::new(lock.clone(), name, LIMIT)?.acquire(1, &opts).await?.release().await?;
        }
        "rwlock-read" => {
            RwLock::new(lock.clone(), name)?.read(&opts).await?.release().await?;
        }
        "rwlock-write" => {
            RwLock::new(lock.clone(), name)?.write(&opts).await?.release().await?;
        }
        other => anyhow::bail!("unknown primitive {other}"),
    }
    Ok(())
}

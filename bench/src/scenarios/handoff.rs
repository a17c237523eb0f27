//! Scenario 3: competitors on one key, each holding it ~1 ms per acquisition, then trying again at once.
//!
//! Measured per contender: acquisitions/s; the handoff gap (from the moment a holder starts its release to the
//! moment the next holder's acquire returns); each competitor's acquisitions (fairness: least / most served);
//! how often the releaser itself took the lock again (`retake_pct`) and how many acquisitions per second went to
//! another competitor than the last holder (`handoffs_per_s`); Redis commands per acquisition; and a
//! mutual-exclusion check (two holders at once would be counted as `overlaps`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{command_stats, order, reset_stats, Ctx, ROUNDS};
use crate::contender::{Backend, Competitor, Contender};
use crate::measure::{Bound, Latency};
use crate::report::Row;
use crate::server::{CommandStats, Server};

/// How long a holder keeps the lock.
const HOLD: Duration = Duration::from_millis(1);

/// The hold of the long-hold process scenario (`procs-hold`): long enough that a fair waiter's place is kept by
/// heartbeats while it waits (the fair contenders' heartbeat is a second), as with jobs that hold a lock for a while.
const LONG_HOLD: Duration = Duration::from_millis(250);

/// How a holder spends its hold.
#[derive(Clone, Copy, Debug)]
enum Holding {
    /// A thread sleep on the blocking pool: ~1.05 ms for 1 ms, and the runtime's worker free for the waiters
    /// meanwhile.
    Thread(Duration),
    /// tokio's `sleep`, as an application that awaits something while it holds: tokio's timer has millisecond
    /// ticks, so `sleep(1 ms)` lasts 1–2 ms, and the holder wakes on the runtime's timer tick beside the waiters
    /// (issue 58's harness holds this way).
    Timer(Duration),
}

/// Holds the lock as `holding` says.
async fn hold(holding: Holding) -> anyhow::Result<()> {
    match holding {
        Holding::Thread(time) => {
            #[allow(clippy::disallowed_methods)] // On a blocking-pool thread, not on the async runtime.
            tokio::task::spawn_blocking(move || std::thread::sleep(time)).await.context("the hold thread panicked")
        }
        Holding::Timer(time) => {
            tokio::time::sleep(time).await;
            Ok(())
        }
    }
}

/// rslock with retries ~1 ms apart: its delay is uniform in [0, delay), so 2 ms gives 0 or 1 ms.
const RSLOCK_FAST_RETRY: (u32, Duration) = (3, Duration::from_millis(2));

/// Scenario 3b (issue 19): K competitors that are separate clients, as separate processes are: each on its own OS
/// thread with its own single-threaded runtime and its own client (its own connections, pub/sub subscriber and
/// release hub), so nothing is shared in-process and every hand-off crosses the server. The server cannot tell
/// these from K processes; threads keep the benchmark one binary.
pub(crate) async fn run_processes(ctx: &mut Ctx) -> anyhow::Result<()> {
    let scale = ctx.settings.scale;
    for k in [2, 8, 32] {
        processes(ctx, &format!("procs-{k}"), k, HOLD, Bound::new(1.5, 1_000_000, scale)).await?;
    }
    Ok(())
}

/// Scenario 3c: eight process-like competitors holding the lock [`LONG_HOLD`] each. Where the cost of waiting
/// moves: a herd costs server commands per release only, a queue costs a heartbeat per waiting process every
/// second too (see the fair lock's `LockOptions::with_fair_queue`).
pub(crate) async fn run_long_holds(ctx: &mut Ctx) -> anyhow::Result<()> {
    let scale = ctx.settings.scale;
    processes(ctx, "procs-8-hold250", 8, LONG_HOLD, Bound::new(8.0, 1_000_000, scale)).await
}

/// The waiter curve (issue 38): 10, 100 and 1 000 waiters on one lock, spread over 1, 10 and 50 process-like
/// clients (each its own thread, runtime and client, its waiters tasks sharing that client), each holding the lock
/// 1 ms per acquisition and trying again at once. Measured per point: the commands the clients sent and the server
/// ran per acquisition, the wait's p50 and p99, and fairness (the share of waiters served at least once and Jain's
/// index). Draws `waiter-curve.svg`.
pub(crate) async fn run_waiter_curve(ctx: &mut Ctx) -> anyhow::Result<()> {
    let bound = Bound::new(3.0, 1_000_000, ctx.settings.scale);
    let servers = ctx.servers(1)?;
    let url = servers[0].url();
    let mut kinds = vec![("redis-rs", Kind::Core(Backend::RedisRs)), ("redis-rs-fair", Kind::Fair(Backend::RedisRs))];
    if let Some(names) = &ctx.settings.contenders {
        kinds.retain(|(n, _)| names.iter().any(|c| c == n));
    }
    let mut series = Vec::new();
    for (contender, kind) in kinds {
        let nested = kind.contender(contender, &url).await?.nested;
        for processes in WAITER_CURVE_PROCESSES {
            let mut points = Vec::new();
            for waiters in WAITER_CURVE_WAITERS.into_iter().filter(|w| *w >= processes) {
                let key = format!("waiter-curve:{contender}:{waiters}:{processes}");
                let per_process = waiters / processes;
                let seg =
                    process_segment(contender, kind, &url, &key, processes, per_process, HOLD, bound, &servers).await?;
                let t = Totals::from(seg);
                let name = format!("{contender}-{waiters}w-{processes}p");
                let acquisitions = t.acquisitions.max(1) as f64;
                ctx.report.row(
                    row("waiter-curve", &name, nested, waiters, &t)
                        .field("processes", processes as f64)
                        .field("wait_p50_ms", t.waits.quantile_us(0.50) / 1_000.0)
                        .field("served_pct", 100.0 * t.served)
                        .field("jain", t.jain),
                );
                points.push((
                    waiters as f64,
                    t.commands.executed() as f64 / acquisitions,
                    t.waits.quantile_us(0.50) / 1_000.0,
                    t.jain,
                ));
            }
            series.push((format!("{contender}, {processes} proc"), points));
        }
    }
    let panel = |title: &'static str, value: fn(&(f64, f64, f64, f64)) -> f64| crate::plot::Panel {
        title,
        series: series
            .iter()
            .map(|(label, points)| crate::plot::Series {
                label: label.clone(),
                points: points.iter().map(|p| (p.0, value(p))).collect(),
            })
            .collect(),
    };
    let ticks: Vec<f64> = WAITER_CURVE_WAITERS.iter().map(|&w| w as f64).collect();
    let svg = crate::plot::svg(
        "waiters",
        &ticks,
        &[
            panel("server commands per acquisition", |p| p.1),
            panel("wait p50, ms", |p| p.2),
            panel("fairness (Jain's index)", |p| p.3),
        ],
    );
    std::fs::write("waiter-curve.svg", svg).context("writing waiter-curve.svg")?;
    println!("info waiter-curve drawn in waiter-curve.svg");
    Ok(())
}

/// The waiter curve's sizes: waiters on the lock, and the process-like clients they are spread over.
const WAITER_CURVE_WAITERS: [usize; 3] = [10, 100, 1_000];
const WAITER_CURVE_PROCESSES: [usize; 3] = [1, 10, 50];

/// How each process-like competitor builds its own client.
#[derive(Clone, Copy)]
enum Kind {
    Core(Backend),
    Fair(Backend),
    Rslock,
}

impl Kind {
    async fn contender(self, name: &str, url: &str) -> anyhow::Result<Contender> {
        let urls = [url.to_owned()];
        match self {
            Kind::Core(backend) => Contender::core(name, backend, &urls, true).await,
            Kind::Fair(backend) => Contender::core_fair(name, backend, url).await,
            Kind::Rslock => Contender::rslock(name, &urls, None),
        }
    }
}

async fn processes(ctx: &mut Ctx, name: &str, k: usize, holding: Duration, bound: Bound) -> anyhow::Result<()> {
    let rounds = 3;
    let servers = ctx.servers(1)?;
    let url = servers[0].url();
    let mut kinds = vec![
        ("redis-rs", Kind::Core(Backend::RedisRs)),
        ("redis-rs-fair", Kind::Fair(Backend::RedisRs)),
        ("fred-fair", Kind::Fair(Backend::Fred)),
        ("rslock", Kind::Rslock),
    ];
    if let Some(names) = &ctx.settings.contenders {
        kinds.retain(|(n, _)| names.iter().any(|c| c == n));
    }
    let mut totals: Vec<Option<Totals>> = kinds.iter().map(|_| None).collect();
    for round in 0..rounds {
        for i in order(round, kinds.len()) {
            let (contender, kind) = kinds[i];
            let key = format!("{name}:{i}:{round}");
            let seg = process_segment(contender, kind, &url, &key, k, 1, holding, bound, &servers).await?;
            match &mut totals[i] {
                Some(total) => total.add(seg)?,
                slot @ None => *slot = Some(Totals::from(seg)),
            }
        }
    }
    for ((contender, kind), total) in kinds.iter().zip(totals) {
        let Some(t) = total else { continue };
        let nested = kind.contender(contender, &url).await?.nested;
        ctx.report.row(row(name, contender, nested, k, &t));
    }
    Ok(())
}

/// One segment of K process-like clients with `per_process` competitors each (tasks sharing the client): each
/// client connects and warms up on its own thread, the counters are reset once all are ready, and then all contend
/// until the bound.
#[allow(clippy::too_many_arguments)] // Two call sites; a struct would only rename them.
async fn process_segment(
    contender: &'static str,
    kind: Kind,
    url: &str,
    key: &str,
    k: usize,
    per_process: usize,
    holding: Duration,
    bound: Bound,
    servers: &[Server],
) -> anyhow::Result<Segment> {
    let ready = Arc::new(std::sync::Barrier::new(k + 1));
    let go = Arc::new(std::sync::Barrier::new(k + 1));
    let deadline_cell = Arc::new(std::sync::OnceLock::<Instant>::new());
    let shared = Arc::new(Shared {
        base: Instant::now(),
        holding: AtomicBool::new(false),
        released_at: AtomicU64::new(0),
        last_holder: AtomicUsize::new(usize::MAX),
    });
    let per_competitor_max = bound.count.div_ceil((k * per_process.max(1)) as u64);
    let mut threads = Vec::new();
    for process in 0..k {
        let (ready, go, deadline_cell, shared) = (ready.clone(), go.clone(), deadline_cell.clone(), shared.clone());
        let (url, key) = (url.to_owned(), key.to_owned());
        threads.push(std::thread::spawn(move || -> anyhow::Result<Vec<Tally>> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                let prepared = async {
                    let contender = kind.contender(contender, &url).await?;
                    let mut competitors = Vec::with_capacity(per_process);
                    for _ in 0..per_process.max(1) {
                        competitors.push(contender.competitor(&key, bound.time + Duration::from_secs(5)).await?);
                    }
                    // Warm-up: connections, scripts and the subscriber exist before the counters are reset.
                    let warm = format!("{key}:warm:{process}");
                    if let Some(competitor) = competitors.first_mut() {
                        let held = competitor.acquire(&warm).await?;
                        competitor.release(held).await?;
                    }
                    anyhow::Ok(competitors)
                };
                let prepared = prepared.await;
                // Always meet the others at both barriers, so one failed competitor cannot hang the segment.
                ready.wait();
                go.wait();
                let competitors = prepared?;
                let deadline = *deadline_cell.get().context("the segment never started")?;
                let tasks: Vec<_> = competitors
                    .into_iter()
                    .enumerate()
                    .map(|(i, competitor)| {
                        let me = process * per_process + i;
                        let (shared, key) = (shared.clone(), key.clone());
                        tokio::spawn(compete(
                            competitor,
                            me,
                            shared,
                            key,
                            deadline,
                            per_competitor_max,
                            Holding::Thread(holding),
                        ))
                    })
                    .collect();
                let mut tallies = Vec::with_capacity(tasks.len());
                for task in tasks {
                    tallies.push(task.await.context("a competitor panicked")??);
                }
                Ok(tallies)
            })
        }));
    }
    let (ready_wait, go_wait) = (ready.clone(), go.clone());
    tokio::task::spawn_blocking(move || ready_wait.wait()).await.context("ready barrier")?;
    reset_stats(servers)?;
    let started = Instant::now();
    let _ = deadline_cell.set(started + bound.time);
    tokio::task::spawn_blocking(move || go_wait.wait()).await.context("go barrier")?;
    let mut seg = Segment::new(bound.time)?;
    for thread in threads {
        let tallies = tokio::task::spawn_blocking(move || thread.join())
            .await
            .context("joining a competitor")?
            .map_err(|_| anyhow::anyhow!("a competitor thread panicked"))??;
        for tally in tallies {
            seg.absorb(tally)?;
        }
    }
    seg.commands = command_stats(servers)?;
    Ok(seg)
}

/// A report row of a contended scenario.
fn row(name: &str, contender: &str, nested: &[&str], competitors: usize, t: &Totals) -> Row {
    let acquisitions = t.acquisitions.max(1) as f64;
    if std::env::var_os("LOCK_BENCH_COMMANDS").is_some() {
        eprintln!("{name} {contender}: {}", t.commands.per(acquisitions));
    }
    Row::new(name, contender)
        .field("acq_per_s", t.acquisitions as f64 / t.elapsed.as_secs_f64())
        .field("handoffs_per_s", t.acquisitions.saturating_sub(t.retakes) as f64 / t.elapsed.as_secs_f64())
        .field("gap_p50_us", t.gaps.quantile_us(0.50))
        .field("gap_p99_us", t.gaps.quantile_us(0.99))
        .field("wait_p99_ms", t.waits.quantile_us(0.99) / 1_000.0)
        .field("fairness", t.fairness)
        .field("min_acq", t.fair_min as f64)
        .field("max_acq", t.fair_max as f64)
        .field("retake_pct", 100.0 * t.retakes as f64 / acquisitions)
        .field("cmds_per_acq", t.commands.sent(nested) as f64 / acquisitions)
        .field("server_cmds_per_acq", t.commands.executed() as f64 / acquisitions)
        .field("acquisitions", t.acquisitions as f64)
        .field("competitors", competitors as f64)
        .field("overlaps", t.overlaps as f64)
        .field("errors", t.errors as f64)
}

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let scale = ctx.settings.scale;
    scenario(ctx, "handoff-8", 8, ROUNDS, Bound::new(0.9, 1_000_000, scale), true).await?;
    scenario(ctx, "handoff-2", 2, ROUNDS, Bound::new(0.9, 1_000_000, scale), true).await?;
    // The load run: two rounds, and no 1 ms poller (200 of them would only measure a saturated server).
    scenario(ctx, "handoff-200", 200, 2, Bound::new(1.5, 1_000_000, scale), false).await?;
    timer_holds(ctx, Bound::new(0.9, 1_000_000, scale)).await
}

/// handoff-8 as issue 58's harness runs it: the default options (fencing on demand, a waiting acquire) and holds on
/// tokio's timer (see [`Holding::Timer`]), against rslock and the hand-written pub/sub waiter.
async fn timer_holds(ctx: &mut Ctx, bound: Bound) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let url = servers[0].url();
    let mut contenders = vec![
        Contender::core_default("redis-rs-default", Backend::RedisRs, &url).await?,
        Contender::core_default("fred-default", Backend::Fred, &url).await?,
        Contender::pubsub("pubsub-waiter", &url).await?,
        Contender::rslock("rslock", std::slice::from_ref(&url), None)?,
    ];
    ctx.settings.keep(&mut contenders);
    let holding = Holding::Timer(HOLD);
    rounds_of(ctx, "handoff-8-timer", &servers, &contenders, 8, ROUNDS, bound, holding).await
}

async fn scenario(
    ctx: &mut Ctx,
    name: &str,
    competitors: usize,
    rounds: usize,
    bound: Bound,
    fast_poller: bool,
) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let mut contenders = vec![
        Contender::core("redis-rs", Backend::RedisRs, &urls, true).await?,
        Contender::core("fred", Backend::Fred, &urls, true).await?,
        Contender::core_fair("redis-rs-fair", Backend::RedisRs, &urls[0]).await?,
        Contender::core_fair("fred-fair", Backend::Fred, &urls[0]).await?,
        Contender::pubsub("pubsub-waiter", &urls[0]).await?,
        Contender::rslock("rslock", &urls, None)?,
    ];
    if fast_poller {
        contenders.push(Contender::rslock("rslock-poll1ms", &urls, Some(RSLOCK_FAST_RETRY))?);
    }
    ctx.settings.keep(&mut contenders);
    rounds_of(ctx, name, &servers, &contenders, competitors, rounds, bound, Holding::Thread(HOLD)).await
}

/// Warms every contender up, then runs `rounds` interleaved rounds of `competitors` on one key and reports a row
/// per contender.
#[allow(clippy::too_many_arguments)] // Two call sites; a struct would only rename them.
async fn rounds_of(
    ctx: &mut Ctx,
    name: &str,
    servers: &[Server],
    contenders: &[Contender],
    competitors: usize,
    rounds: usize,
    bound: Bound,
    holding: Holding,
) -> anyhow::Result<()> {
    // Warm-up: a short uncontended segment each (connections, scripts, subscriber).
    for (i, contender) in contenders.iter().enumerate() {
        let warmup = Bound { time: Duration::from_millis(100), count: 50 };
        segment(contender, &format!("{name}:warm:{i}"), 2, warmup, servers, holding).await?;
    }
    let mut totals: Vec<Option<Totals>> = contenders.iter().map(|_| None).collect();
    for round in 0..rounds {
        for i in order(round, contenders.len()) {
            let tag = format!("{name}:{i}:{round}");
            let seg = segment(&contenders[i], &tag, competitors, bound, servers, holding).await?;
            match &mut totals[i] {
                Some(total) => total.add(seg)?,
                slot @ None => *slot = Some(Totals::from(seg)),
            }
        }
    }
    for (contender, total) in contenders.iter().zip(totals) {
        let Some(t) = total else { continue };
        ctx.report.row(row(name, &contender.name, contender.nested, competitors, &t));
    }
    Ok(())
}

/// What the competitors share: who holds the lock, who held it last, and when the last release started.
struct Shared {
    base: Instant,
    holding: AtomicBool,
    /// Nanoseconds after `base` at which the last holder started releasing (0: nobody yet).
    released_at: AtomicU64,
    last_holder: AtomicUsize,
}

impl Shared {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX).max(1)
    }
}

/// One competitor's account of a segment.
struct Tally {
    acquisitions: u64,
    gaps: Latency,
    waits: Latency,
    retakes: u64,
    overlaps: u64,
    errors: u64,
}

/// One segment of one contender.
struct Segment {
    per_competitor: Vec<u64>,
    elapsed: Duration,
    gaps: Latency,
    waits: Latency,
    retakes: u64,
    overlaps: u64,
    errors: u64,
    commands: CommandStats,
}

impl Segment {
    fn new(elapsed: Duration) -> anyhow::Result<Self> {
        Ok(Segment {
            per_competitor: Vec::new(),
            elapsed,
            gaps: Latency::new()?,
            waits: Latency::new()?,
            retakes: 0,
            overlaps: 0,
            errors: 0,
            commands: CommandStats::default(),
        })
    }

    /// Adds one competitor's account.
    fn absorb(&mut self, tally: Tally) -> anyhow::Result<()> {
        self.per_competitor.push(tally.acquisitions);
        self.gaps.merge(&tally.gaps)?;
        self.waits.merge(&tally.waits)?;
        self.retakes += tally.retakes;
        self.overlaps += tally.overlaps;
        self.errors += tally.errors;
        Ok(())
    }
}

/// All segments of one contender.
struct Totals {
    acquisitions: u64,
    elapsed: Duration,
    gaps: Latency,
    waits: Latency,
    retakes: u64,
    overlaps: u64,
    errors: u64,
    commands: CommandStats,
    /// The least-served / most-served ratio of the most unfair segment, and that segment's counts.
    fairness: f64,
    fair_min: u64,
    fair_max: u64,
    /// Of the most unfair segment: the share of competitors served at least once, and Jain's index of the
    /// acquisitions (1: all served alike; 1/n: one competitor got everything).
    served: f64,
    jain: f64,
}

/// Jain's fairness index of `counts`: (Σx)² / (n · Σx²).
fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        0.0
    } else {
        sum * sum / (counts.len() as f64 * squares)
    }
}

fn min_max(counts: &[u64]) -> (u64, u64) {
    (counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0))
}

impl From<Segment> for Totals {
    fn from(s: Segment) -> Self {
        let (min, max) = min_max(&s.per_competitor);
        Totals {
            acquisitions: s.per_competitor.iter().sum(),
            elapsed: s.elapsed,
            gaps: s.gaps,
            waits: s.waits,
            retakes: s.retakes,
            overlaps: s.overlaps,
            errors: s.errors,
            commands: s.commands,
            fairness: if max == 0 { 0.0 } else { min as f64 / max as f64 },
            fair_min: min,
            fair_max: max,
            served: s.per_competitor.iter().filter(|n| **n > 0).count() as f64 / s.per_competitor.len().max(1) as f64,
            jain: jain(&s.per_competitor),
        }
    }
}

impl Totals {
    fn add(&mut self, s: Segment) -> anyhow::Result<()> {
        let other = Totals::from(s);
        self.acquisitions += other.acquisitions;
        self.elapsed += other.elapsed;
        self.gaps.merge(&other.gaps)?;
        self.waits.merge(&other.waits)?;
        self.retakes += other.retakes;
        self.overlaps += other.overlaps;
        self.errors += other.errors;
        self.commands.add(&other.commands);
        if other.fairness < self.fairness {
            (self.fairness, self.fair_min, self.fair_max) = (other.fairness, other.fair_min, other.fair_max);
        }
        self.served = self.served.min(other.served);
        self.jain = self.jain.min(other.jain);
        Ok(())
    }
}

/// `competitors` tasks contend for `key` until the bound; the server's counters cover exactly this segment.
async fn segment(
    contender: &Contender,
    key: &str,
    competitors: usize,
    bound: Bound,
    servers: &[Server],
    holding: Holding,
) -> anyhow::Result<Segment> {
    // Waiters are set up (pub/sub connections subscribed) before the counters are reset and the clock starts.
    let mut prepared = Vec::with_capacity(competitors);
    for _ in 0..competitors {
        prepared.push(contender.competitor(key, bound.time + Duration::from_secs(5)).await?);
    }
    reset_stats(servers)?;
    let started = Instant::now();
    let deadline = started + bound.time;
    let shared = Arc::new(Shared {
        base: started,
        holding: AtomicBool::new(false),
        released_at: AtomicU64::new(0),
        last_holder: AtomicUsize::new(usize::MAX),
    });
    let per_competitor_max = bound.count.div_ceil(competitors as u64);
    let mut handles = Vec::new();
    for (me, competitor) in prepared.into_iter().enumerate() {
        let shared = shared.clone();
        let key = key.to_owned();
        handles.push(tokio::spawn(compete(competitor, me, shared, key, deadline, per_competitor_max, holding)));
    }
    let mut seg = Segment::new(bound.time)?;
    for handle in handles {
        let tally = handle.await.context("a competitor panicked")??;
        seg.absorb(tally)?;
    }
    seg.commands = command_stats(servers)?;
    Ok(seg)
}

/// One competitor: acquire (bounded by the segment's deadline), hold, release, repeat.
async fn compete(
    mut competitor: Competitor,
    me: usize,
    shared: Arc<Shared>,
    key: String,
    deadline: Instant,
    max: u64,
    holding: Holding,
) -> anyhow::Result<Tally> {
    let mut tally =
        Tally { acquisitions: 0, gaps: Latency::new()?, waits: Latency::new()?, retakes: 0, overlaps: 0, errors: 0 };
    while tally.acquisitions < max && Instant::now() < deadline {
        let asked = Instant::now();
        let held = match tokio::time::timeout_at(deadline.into(), competitor.acquire(&key)).await {
            Err(_deadline) => break,
            Ok(Err(_)) => {
                // Counted, not fatal: a lock that errors under contention is a finding of the benchmark.
                tally.errors += 1;
                tokio::time::sleep(HOLD).await;
                continue;
            }
            Ok(Ok(held)) => held,
        };
        let got = Instant::now();
        if shared.holding.swap(true, Ordering::SeqCst) {
            tally.overlaps += 1;
        }
        let released_at = shared.released_at.load(Ordering::SeqCst);
        if released_at != 0 {
            let release_started = shared.base + Duration::from_nanos(released_at);
            tally.gaps.record(got.saturating_duration_since(release_started));
        }
        if shared.last_holder.swap(me, Ordering::SeqCst) == me {
            tally.retakes += 1;
        }
        tally.waits.record(got - asked);
        tally.acquisitions += 1;
        hold(holding).await?;
        shared.holding.store(false, Ordering::SeqCst);
        shared.released_at.store(shared.nanos(Instant::now()), Ordering::SeqCst);
        if competitor.release(held).await.is_err() {
            tally.errors += 1;
        }
    }
    Ok(tally)
}

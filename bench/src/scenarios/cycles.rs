//! Scenarios 1 and 2 (and the loop of scenario 4): lock + release cycles on fresh keys, timed per cycle.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{command_stats, reset_stats, Ctx, ROUNDS};
use crate::alloc;
use crate::contender::{Backend, Contender};
use crate::cpu;
use crate::measure::{Bound, Latency};
use crate::report::Row;
use crate::server::{CommandStats, Server};

/// Cycles each contender runs before the measured slices (connections, script cache, pools).
const WARMUP_CYCLES: u64 = 300;

/// Slices per contender: each round runs one slice of every contender, so a ratio of two contenders is the median
/// of as many per-round ratios (issue 38: ratios that hold while the machine's speed drifts).
const SLICES: usize = 12;

/// The order of the contenders in `round`: rotated by one each round, so each runs at every position of a round as
/// often as the others (whoever runs first after a change of contender pays for it no more than the rest).
fn rotated(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (i + round) % n.max(1))
}

/// The contenders of scenarios 1 and 2 on one server.
async fn single_server_contenders(urls: &[String]) -> anyhow::Result<Vec<Contender>> {
    let url = urls.first().context("a server")?;
    Ok(vec![
        Contender::core("redis-rs", Backend::RedisRs, urls, true).await?,
        Contender::core("fred", Backend::Fred, urls, true).await?,
        Contender::floor("floor", urls).await?,
        Contender::rslock("rslock", urls, None)?,
        // Not targets: how much of the gap to the floor is fencing's own work. Our lock without fencing (acquire is
        // then SET NX PX), and the floor acquiring with our fenced script.
        Contender::core("redis-rs-nofence", Backend::RedisRs, urls, false).await?,
        // Not a target: the fence with the grant, its counter kept for ever (protocol 1.1's) instead of given its
        // idle expiry at every draw: the price of that `PEXPIRE` (issue 58, item 4).
        Contender::core_over(
            "redis-rs-kept",
            lock_core::Lock::from_arc(Backend::RedisRs.store(url).await?).with_fence_counter_expiry(None),
            true,
        ),
        Contender::core("fred-nofence", Backend::Fred, urls, false).await?,
        Contender::floor_fenced("floor-fenced", urls).await?,
        // Fencing on demand (issue 21): never asked for (acquire is SET NX PX), and asked for every cycle.
        Contender::core_on_demand("redis-rs-ondemand", Backend::RedisRs, url, false).await?,
        Contender::core_on_demand("fred-ondemand", Backend::Fred, url, false).await?,
        Contender::core_on_demand("redis-rs-ondemand-drawn", Backend::RedisRs, url, true).await?,
        // The default options with a wait (a waiting acquire, granted at its first try on a fresh key): what an
        // application writes.
        Contender::core_default("redis-rs-default", Backend::RedisRs, url).await?,
        Contender::core_default("fred-default", Backend::Fred, url).await?,
        // Not a target: the floor's commands sent by bare fred, how much of fred's gap is fred's own.
        Contender::floor_fred("floor-fred", url).await?,
        // Not targets: our backends' stores called without the lock (lock-core's engine) around them.
        Contender::store("redis-rs-store", Backend::RedisRs, url).await?,
        Contender::store("fred-store", Backend::Fred, url).await?,
    ])
}

/// Scenario 1: one task, one server.
pub(crate) async fn uncontended(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let mut contenders = single_server_contenders(&urls).await?;
    ctx.settings.keep(&mut contenders);
    let bound = Bound::new(0.6, 1_000_000, ctx.settings.scale);
    cycle_scenario(ctx, "uncontended", &servers, &contenders, 1, bound).await
}

/// Scenario 2: 16 tasks on distinct keys sharing one client.
pub(crate) async fn concurrent_distinct(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let mut contenders = single_server_contenders(&urls).await?;
    if ctx.settings.diagnostics {
        // How much of the gap is one connection per command instead of one shared, auto-pipelined connection.
        contenders.push(Contender::core("redis-rs-pool1", Backend::RedisRsPool(1), &urls, true).await?);
        contenders.push(Contender::core("fred-pool1", Backend::FredPool(1), &urls, true).await?);
        contenders.push(Contender::core("redis-rs-pool1-nofence", Backend::RedisRsPool(1), &urls, false).await?);
        // How much of rslock's lead over the floor is the floor's per-command response timeout (rslock sets none).
        contenders.push(Contender::floor_unbounded("floor-unbounded", &urls).await?);
    }
    ctx.settings.keep(&mut contenders);
    let bound = Bound::new(0.6, 2_000_000, ctx.settings.scale);
    cycle_scenario(ctx, "concurrent-distinct", &servers, &contenders, 16, bound).await
}

/// What one contender did over all rounds.
struct Totals {
    cycles: u64,
    elapsed: Duration,
    /// CPU time of this process (the client side) during the segments.
    client_cpu: Duration,
    /// CPU seconds of the servers during the segments (`INFO cpu`): the server's share of each cycle.
    server_cpu: f64,
    /// Heap allocations of this process during the segments (the benchmark's own per-cycle key and bookkeeping
    /// included, the same for every contender).
    allocations: u64,
    latency: Latency,
    commands: CommandStats,
    /// Cycles per second in each slice.
    slices: Vec<f64>,
}

/// Warms every contender up, runs [`SLICES`] interleaved rounds of `tasks` concurrent cycle loops, each slice a
/// [`SLICES`]th of `bound`, and reports one row per contender.
pub(crate) async fn cycle_scenario(
    ctx: &mut Ctx,
    scenario: &str,
    servers: &[Server],
    contenders: &[Contender],
    tasks: usize,
    bound: Bound,
) -> anyhow::Result<()> {
    for (i, contender) in contenders.iter().enumerate() {
        let warmup = Bound { time: Duration::from_secs(5), count: WARMUP_CYCLES };
        run_cycles(contender, tasks, &format!("{scenario}:warm:{i}"), warmup).await?;
    }
    let mut totals = Vec::new();
    for _ in contenders {
        totals.push(Totals {
            cycles: 0,
            elapsed: Duration::ZERO,
            client_cpu: Duration::ZERO,
            server_cpu: 0.0,
            allocations: 0,
            latency: Latency::new()?,
            commands: CommandStats::default(),
            slices: Vec::with_capacity(SLICES),
        });
    }
    // `ROUNDS` of `bound` per contender, as the other scenarios run, cut into the slices.
    let rounds = u32::try_from(ROUNDS).unwrap_or(u32::MAX);
    let slice = Bound {
        time: bound.time * rounds / u32::try_from(SLICES).unwrap_or(u32::MAX),
        count: (bound.count * u64::from(rounds)).div_ceil(SLICES as u64),
    };
    for round in 0..SLICES {
        for i in rotated(round, contenders.len()) {
            let (contender, total) = (&contenders[i], &mut totals[i]);
            reset_stats(servers)?;
            let tag = format!("{scenario}:{i}:{round}");
            let cpu_before = cpu::process_time().context("getrusage")?;
            let server_before = server_seconds(servers)?;
            let allocations_before = alloc::count();
            let (cycles, elapsed, latency) = run_cycles(contender, tasks, &tag, slice).await?;
            total.server_cpu += server_seconds(servers)? - server_before;
            total.slices.push(cycles as f64 / elapsed.as_secs_f64().max(1e-9));
            total.allocations += alloc::count().saturating_sub(allocations_before);
            total.client_cpu += cpu::process_time().context("getrusage")?.saturating_sub(cpu_before);
            total.commands.add(&command_stats(servers)?);
            total.cycles += cycles;
            total.elapsed += elapsed;
            total.latency.merge(&latency)?;
        }
    }
    for (contender, total) in contenders.iter().zip(&totals) {
        let cycles = total.cycles.max(1) as f64;
        let row = Row::new(scenario, &contender.name)
            .field("cycles_per_s", total.cycles as f64 / total.elapsed.as_secs_f64())
            .field("p50_us", total.latency.quantile_us(0.50))
            .field("p99_us", total.latency.quantile_us(0.99))
            .field("max_us", total.latency.max_us())
            .field("client_cpu_us_per_cycle", total.client_cpu.as_secs_f64() * 1e6 / cycles)
            .field("server_cpu_us_per_cycle", total.server_cpu * 1e6 / cycles)
            .field("allocs_per_cycle", total.allocations as f64 / cycles)
            .field("cycles", total.cycles as f64)
            .field("tasks", tasks as f64)
            .field("cmds_per_cycle", total.commands.sent(contender.nested) as f64 / cycles)
            .field("server_cmds_per_cycle", total.commands.executed() as f64 / cycles)
            .slices("cycles_per_s", total.slices.clone());
        ctx.report.row(row);
    }
    Ok(())
}

/// The servers' CPU seconds so far.
fn server_seconds(servers: &[Server]) -> anyhow::Result<f64> {
    servers.iter().map(Server::cpu_seconds).sum()
}

/// `tasks` concurrent loops of lock + release on fresh keys until the bound; returns the cycles, the wall time
/// and every cycle's latency.
async fn run_cycles(
    contender: &Contender,
    tasks: usize,
    tag: &str,
    bound: Bound,
) -> anyhow::Result<(u64, Duration, Latency)> {
    let started = Instant::now();
    let deadline = started + bound.time;
    let per_task = bound.count.div_ceil(tasks as u64);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let contender = contender.clone();
        let prefix = format!("{tag}:{t}");
        handles.push(tokio::spawn(async move {
            let mut latency = Latency::new()?;
            let mut i = 0u64;
            while i < per_task && Instant::now() < deadline {
                let key = format!("{prefix}:{i}");
                let t0 = Instant::now();
                let held = contender.lock(&key).await?;
                contender.unlock(held).await?;
                latency.record(t0.elapsed());
                i += 1;
            }
            anyhow::Ok((i, latency))
        }));
    }
    let mut cycles = 0;
    let mut latency = Latency::new()?;
    for handle in handles {
        let (n, l) = handle.await.context("a cycle task panicked")??;
        cycles += n;
        latency.merge(&l)?;
    }
    Ok((cycles, started.elapsed(), latency))
}

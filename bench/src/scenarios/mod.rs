//! The scenarios of issue 8, the interleaving of contenders in rounds, and the targets checked at the end.

mod backends;
mod cores_curve;
mod cycles;
mod engine;
mod fence_memory;
mod handoff;
mod idle;
mod multi_curve;
mod redlock;
mod renewal;
mod renewal_curve;
mod shared;

use std::time::Instant;

use anyhow::Context as _;

use crate::args::{Runtime, Settings};
use crate::report::{Bar, Report};
use crate::server::{CommandStats, Server};

pub(crate) use cycles::cycle_scenario;

/// Rounds of the interleaved scenarios. Each round runs every contender once; even rounds go A B C …, odd rounds
/// … C B A, so a drift of the machine over the run (another process starting, thermal or cache effects) falls on
/// all contenders alike instead of on whoever runs last.
pub(crate) const ROUNDS: usize = 5;

/// The order of contenders in `round`.
pub(crate) fn order(round: usize, n: usize) -> Vec<usize> {
    if round.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// What every scenario needs: the settings and the report.
pub(crate) struct Ctx {
    pub(crate) settings: Settings,
    pub(crate) report: Report,
}

impl Ctx {
    /// Starts `n` servers for a scenario (pinned as the settings say).
    pub(crate) fn servers(&self, n: usize) -> anyhow::Result<Vec<Server>> {
        (0..n).map(|_| Server::start(self.settings.server_cpu)).collect()
    }
}

/// `CONFIG RESETSTAT` on every server.
pub(crate) fn reset_stats(servers: &[Server]) -> anyhow::Result<()> {
    servers.iter().try_for_each(Server::reset_stats)
}

/// `INFO commandstats` summed over every server.
pub(crate) fn command_stats(servers: &[Server]) -> anyhow::Result<CommandStats> {
    let mut total = CommandStats::default();
    for server in servers {
        total.add(&server.command_stats()?);
    }
    Ok(total)
}

/// Runs every selected scenario group, then prints the targets.
///
/// On the current-thread runtime only the in-process scenarios run: the waiters of `procs`, `procs-hold` and the
/// waiter curve are other processes (each with its own runtime), and the cores curve builds its own runtimes.
pub(crate) async fn run_all(mut settings: Settings, workers: usize, runtime: Runtime) -> anyhow::Result<()> {
    let started = Instant::now();
    if runtime == Runtime::CurrentThread {
        const OUT_OF_PROCESS: [&str; 4] = ["procs", "procs-hold", "waiter-curve", "cores-curve"];
        let only = settings.only.take().unwrap_or_else(|| {
            super::args::GROUPS.iter().filter(|g| !NAMED_ONLY.contains(g)).map(|g| (*g).to_owned()).collect()
        });
        let kept: Vec<String> = only.into_iter().filter(|g| !OUT_OF_PROCESS.contains(&g.as_str())).collect();
        if kept.is_empty() {
            return Ok(());
        }
        settings.only = Some(kept);
    }
    print_machine(&settings, workers, runtime);
    let mut ctx = Ctx { settings, report: Report::with_suffix(runtime.suffix()) };
    if ctx.settings.wants("engine") {
        engine::run(&mut ctx).await.context("scenario engine")?;
    }
    if ctx.settings.wants("uncontended") {
        cycles::uncontended(&mut ctx).await.context("scenario uncontended")?;
    }
    if ctx.settings.wants("concurrent-distinct") {
        cycles::concurrent_distinct(&mut ctx).await.context("scenario concurrent-distinct")?;
    }
    if ctx.settings.wants("handoff") {
        handoff::run(&mut ctx).await.context("scenario contended-handoff")?;
    }
    if ctx.settings.wants("procs") {
        handoff::run_processes(&mut ctx).await.context("scenario procs")?;
    }
    if ctx.settings.wants("procs-hold") {
        handoff::run_long_holds(&mut ctx).await.context("scenario procs-hold")?;
    }
    if ctx.settings.wants("redlock") {
        redlock::run(&mut ctx).await.context("scenario redlock")?;
    }
    if ctx.settings.wants("renewal") {
        renewal::run(&mut ctx).await.context("scenario renewal")?;
    }
    // The cost curves run only when asked for by name (the renewal curve takes minutes: 100 000 guards).
    if ctx.settings.named("renewal-curve") {
        renewal_curve::run(&mut ctx).await.context("scenario renewal-curve")?;
    }
    if ctx.settings.named("waiter-curve") {
        handoff::run_waiter_curve(&mut ctx).await.context("scenario waiter-curve")?;
    }
    if ctx.settings.named("multi-curve") {
        multi_curve::run(&mut ctx).await.context("scenario multi-curve")?;
    }
    if ctx.settings.named("cores-curve") {
        cores_curve::run(&mut ctx).await.context("scenario cores-curve")?;
    }
    // etcd beside Redis runs only when named: it needs etcd installed (scripts/test.sh installs it).
    if ctx.settings.named("backends") {
        backends::run(&mut ctx).await.context("scenario backends")?;
    }
    if ctx.settings.named("fence-memory") && runtime == Runtime::MultiThread {
        fence_memory::run(&mut ctx).await.context("scenario fence-memory")?;
    }
    if ctx.settings.wants("idle") {
        idle::run(&mut ctx).await.context("scenario idle-while-free")?;
    }
    if ctx.settings.wants("primitives") {
        shared::primitives(&mut ctx).await.context("scenario primitives")?;
    }
    if ctx.settings.wants("semaphore") || ctx.settings.wants("rwlock") {
        shared::run(&mut ctx).await.context("scenarios semaphore and rwlock")?;
    }
    targets(&ctx.report);
    println!("info elapsed_s={:.1} loadavg_end={}", started.elapsed().as_secs_f64(), loadavg());
    Ok(())
}

/// The groups that run only when `--only` names them.
const NAMED_ONLY: [&str; 6] =
    ["renewal-curve", "waiter-curve", "multi-curve", "cores-curve", "backends", "fence-memory"];

fn print_machine(settings: &Settings, workers: usize, runtime: Runtime) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim()))
        .unwrap_or("unknown")
        .replace(' ', "_");
    let online = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let server_cpu = settings.server_cpu.map_or_else(|| "unpinned".to_owned(), |c| c.to_string());
    let workers = match runtime {
        Runtime::MultiThread => workers,
        Runtime::CurrentThread => 1,
    };
    println!(
        "info cpus_online={online} cpu_model={model} runtime={runtime:?} client_workers={workers} \
         server_cpu={server_cpu} scale={} loadavg_start={}",
        settings.scale,
        loadavg()
    );
}

/// The 1-minute load average: other processes competing for the two cores make every number noisier.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The bars of issue 8, each as a `target` line.
fn targets(report: &Report) {
    for backend in ["redis-rs", "fred"] {
        report.target("uncontended", "cycles_per_s", backend, Some("floor"), Bar::AtLeast(0.95));
        report.target("concurrent-distinct", "cycles_per_s", backend, Some("floor"), Bar::AtLeast(0.95));
        let redlock = format!("{backend}-redlock");
        report.target("redlock-5", "cycles_per_s", &redlock, Some("floor-fanout"), Bar::AtLeast(0.95));
        report.target("redlock-5", "cycles_per_s", &redlock, Some("rslock"), Bar::Above(1.0));
    }
    // Issue 21: fencing at the price of a plain SET, and a library that costs close to nothing around the commands.
    for backend in ["redis-rs", "fred"] {
        report.target("uncontended", "cycles_per_s", backend, Some("floor"), Bar::AtLeast(0.93));
        report.target("concurrent-distinct", "cycles_per_s", backend, Some("floor"), Bar::AtLeast(0.85));
        let nofence = format!("{backend}-nofence");
        report.target("uncontended", "cycles_per_s", &nofence, Some("floor"), Bar::AtLeast(0.97));
        report.target("concurrent-distinct", "cycles_per_s", &nofence, Some("floor"), Bar::AtLeast(0.95));
        report.target("uncontended", "client_cpu_us_per_cycle", backend, Some("floor"), Bar::AtMost(1.08));
        report.target("uncontended", "server_cmds_per_cycle", backend, None, Bar::AtMost(6.0));
        report.target("concurrent-distinct", "cycles_per_s", backend, Some("rslock"), Bar::AtLeast(0.85));
        report.ratio("uncontended", "allocs_per_cycle", backend, "floor");
        // Fencing on demand: tokens available, drawn only when asked (the bars, held against the same floor).
        let on_demand = format!("{backend}-ondemand");
        report.target("uncontended", "cycles_per_s", &on_demand, Some("floor"), Bar::AtLeast(0.93));
        report.target("concurrent-distinct", "cycles_per_s", &on_demand, Some("floor"), Bar::AtLeast(0.85));
        report.target("concurrent-distinct", "cycles_per_s", &on_demand, Some("rslock"), Bar::AtLeast(0.85));
        report.target("uncontended", "server_cmds_per_cycle", &on_demand, None, Bar::AtMost(6.0));
    }
    // The library around the commands, against the same client's bare commands (no bar): fred's own cost per
    // cycle differs from redis-rs's, which the floor (redis-rs) puts on the fred rows.
    for scenario in ["uncontended", "concurrent-distinct"] {
        for fred in ["fred-nofence", "fred-ondemand"] {
            report.ratio(scenario, "cycles_per_s", fred, "floor-fred");
            report.ratio(scenario, "client_cpu_us_per_cycle", fred, "floor-fred");
        }
        report.ratio(scenario, "cycles_per_s", "floor-fred", "floor");
        // The same gap split in two (no bar): the backend's store against its client's bare commands, and the
        // lock (lock-core's engine) against the store it calls.
        for (backend, floor) in [("redis-rs", "floor"), ("fred", "floor-fred")] {
            let store = format!("{backend}-store");
            for metric in ["cycles_per_s", "client_cpu_us_per_cycle"] {
                report.ratio(scenario, metric, &store, floor);
                report.ratio(scenario, metric, &format!("{backend}-nofence"), &store);
            }
        }
    }
    // What a holder that does ask for its token on demand pays, against one drawn with the grant.
    for scenario in ["uncontended", "concurrent-distinct"] {
        report.ratio(scenario, "cycles_per_s", "redis-rs-ondemand-drawn", "redis-rs");
        report.ratio(scenario, "cycles_per_s", "redis-rs-ondemand-drawn", "floor");
    }
    // Issue 58: the default lock (a waiting acquire with the default options) at rslock's speed on the redis-rs
    // backend, and at 0.95 of its own client's bare commands on fred, on every runtime.
    for scenario in ["uncontended", "concurrent-distinct"] {
        report.target(scenario, "cycles_per_s", "redis-rs-default", Some("rslock"), Bar::AtLeast(1.0));
        report.target(scenario, "cycles_per_s", "fred-default", Some("floor-fred"), Bar::AtLeast(0.95));
        report.ratio(scenario, "cycles_per_s", "redis-rs-default", "floor");
        report.ratio(scenario, "cycles_per_s", "redis-rs-default", "redis-rs-ondemand");
    }
    // Issue 58 (replacing issue 8's bars for this scenario): the hand-off of eight tasks in one process, with holds
    // on a thread and on tokio's timer, at least the throughput of every peer that does not spin, a wait p99 of at
    // most 50 ms, every task served within 0.95 of the most served, at most 10 server commands per acquisition.
    for (scenario, ours) in
        [("handoff-8", ["redis-rs", "fred"]), ("handoff-8-timer", ["redis-rs-default", "fred-default"])]
    {
        for backend in ours {
            for peer in ["rslock", "pubsub-waiter"] {
                report.target(scenario, "acq_per_s", backend, Some(peer), Bar::AtLeast(1.0));
            }
            report.target(scenario, "wait_p99_ms", backend, None, Bar::AtMost(50.0));
            report.target(scenario, "fairness", backend, None, Bar::AtLeast(0.95));
            report.target(scenario, "server_cmds_per_acq", backend, None, Bar::AtMost(10.0));
        }
    }
    // Issue 19: waiters in separate processes.
    for k in ["procs-2", "procs-8", "procs-32"] {
        report.target(k, "fairness", "redis-rs-fair", None, Bar::AtLeast(0.8));
        report.target(k, "cmds_per_acq", "redis-rs-fair", None, Bar::AtMost(4.0));
    }
    report.target("procs-8", "server_cmds_per_acq", "redis-rs", None, Bar::AtMost(12.0));
    // The fair hand-off across processes against the same lock's hand-off within one process.
    for fair in ["redis-rs-fair", "fred-fair"] {
        report.target_across("procs-8", "gap_p50_us", fair, "handoff-8", fair, Bar::AtMost(1.5));
    }
    report.ratio("procs-8", "gap_p50_us", "redis-rs-fair", "redis-rs");
    report.ratio("procs-32", "server_cmds_per_acq", "redis-rs-fair", "rslock");
    // Why the queue is an option and not the default (no bar): its cost against the herd's, with waiters in one
    // process and with long holds.
    for scenario in ["handoff-8", "handoff-200", "procs-32", "procs-8-hold250"] {
        report.ratio(scenario, "server_cmds_per_acq", "redis-rs-fair", "redis-rs");
    }
    report.ratio("handoff-8", "gap_p50_us", "redis-rs-fair", "redis-rs");
    // Issue 18: the semaphore and the read-write lock against a hand-written floor (no bar: the floor does less).
    for scenario in ["semaphore-4x16", "rwlock-9to1"] {
        for backend in ["redis-rs", "fred"] {
            report.ratio(scenario, "ops_per_s", backend, "floor");
            report.ratio(scenario, "server_cmds_per_op", backend, "floor");
        }
    }
    // For context (no bar): the peer against the floor, as issue 8 quotes it.
    report.ratio("uncontended", "cycles_per_s", "rslock", "floor");
    report.ratio("concurrent-distinct", "cycles_per_s", "rslock", "floor");
    // Fencing's share of the gap: the floor with our fenced acquire script against the plain floor, and our lock
    // against each floor of its own kind (fenced against fenced, unfenced against plain): the library's own cost.
    for scenario in ["uncontended", "concurrent-distinct"] {
        report.ratio(scenario, "cycles_per_s", "redis-rs-nofence", "floor");
        report.ratio(scenario, "cycles_per_s", "floor-fenced", "floor");
        report.ratio(scenario, "cycles_per_s", "redis-rs", "floor-fenced");
        report.ratio(scenario, "cycles_per_s", "fred", "floor-fenced");
    }
    for n in ["redlock-3", "redlock-5"] {
        report.ratio(n, "cycles_per_s", "redis-rs-redlock", "floor-fanout");
        report.ratio(n, "cycles_per_s", "redis-rs-redlock-nofence", "floor-fanout");
        report.ratio(n, "p50_us", "redis-rs-redlock", "redis-rs-single");
        report.ratio(n, "cycles_per_s", "rslock", "floor-fanout");
    }
}

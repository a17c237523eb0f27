//! The multi-lock cost curve (issue 38): 16 tasks taking multi-locks of 1, 8 and 64 fresh resources at once
//! ([`Lock::try_acquire_all`]) and releasing them, against the same resources taken as that many single locks at
//! once (what a caller without the multi-lock would write). Measured per size: cycles and resources per second, a
//! cycle's latency, the client's and the server's CPU per resource, and the commands the client sent and the
//! server ran per resource. A flat or falling cost per resource is linear; the scenario draws `multi-curve.svg`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::future::join_all;
use lock_core::{Lock, LockOptions, ReleaseOutcome};

use super::{command_stats, reset_stats, Ctx};
use crate::contender::{Backend, Contender};
use crate::cpu;
use crate::measure::Latency;
use crate::plot::{self, Panel, Series};
use crate::report::Row;
use crate::server::Server;

const SIZES: [usize; 3] = [1, 8, 64];
const TASKS: usize = 16;
/// Each point's measured time (a tenth with `--quick`).
const SEGMENT: Duration = Duration::from_secs(2);

/// How a cycle takes its resources.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One multi-lock over all of them.
    Multi,
    /// One single lock each, all at once.
    Singles,
}

/// One point of the curve.
struct Point {
    label: String,
    resources: usize,
    cpu_us_per_resource: f64,
    server_cpu_us_per_resource: f64,
    p50_us: f64,
}

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let urls = vec![servers[0].url()];
    let mut contenders = vec![
        Contender::core("redis-rs", Backend::RedisRs, &urls, true).await?,
        Contender::core("fred", Backend::Fred, &urls, true).await?,
    ];
    ctx.settings.keep(&mut contenders);
    let segment = SEGMENT.mul_f64(ctx.settings.scale);
    let mut points = Vec::new();
    for contender in &contenders {
        let (lock, options) = contender.core_lock()?;
        for (shape, suffix) in [(Shape::Multi, "multi"), (Shape::Singles, "singles")] {
            let label = format!("{}-{suffix}", contender.name);
            for k in SIZES {
                let point = measure(&lock, &options, contender.nested, shape, &label, k, segment, &servers).await?;
                ctx.report.row(point.0);
                points.push(point.1);
            }
        }
    }
    let svg = draw(&points);
    std::fs::write("multi-curve.svg", svg).context("writing multi-curve.svg")?;
    println!("info multi-curve drawn in multi-curve.svg");
    Ok(())
}

#[allow(clippy::too_many_arguments)] // One call site; a struct would only rename them.
async fn measure(
    lock: &Lock,
    options: &LockOptions,
    nested: &[&str],
    shape: Shape,
    label: &str,
    k: usize,
    segment: Duration,
    servers: &[Server],
) -> anyhow::Result<(Row, Point)> {
    // Warm-up: scripts loaded, connections open.
    cycle(lock, options, shape, &format!("multi-curve:{label}:{k}:warm"), k).await?;
    reset_stats(servers)?;
    let server_cpu = servers[0].cpu_seconds()?;
    let client_cpu = cpu::process_time().context("getrusage")?;
    let started = Instant::now();
    let deadline = started + segment;
    let tasks = (0..TASKS).map(|task| {
        let (lock, options, label) = (lock.clone(), options.clone(), label.to_owned());
        tokio::spawn(async move {
            let mut latency = Latency::new()?;
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                let at = Instant::now();
                cycle(&lock, &options, shape, &format!("multi-curve:{label}:{k}:{task}:{cycles}"), k).await?;
                latency.record(at.elapsed());
                cycles += 1;
            }
            anyhow::Ok((cycles, latency))
        })
    });
    let mut latency = Latency::new()?;
    let mut cycles = 0u64;
    for done in join_all(tasks).await {
        let (n, l) = done.context("a multi-lock task panicked")??;
        cycles += n;
        latency.merge(&l)?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let client_cpu = cpu::process_time().context("getrusage")?.saturating_sub(client_cpu).as_secs_f64();
    let server_cpu = servers[0].cpu_seconds()? - server_cpu;
    let commands = command_stats(servers)?;
    let resources = (cycles * k as u64).max(1) as f64;
    let cycles_f = cycles.max(1) as f64;
    let row = Row::new("multi-curve", &format!("{label}-{k}"))
        .field("resources", k as f64)
        .field("cycles_per_s", cycles as f64 / elapsed)
        .field("resources_per_s", resources / elapsed)
        .field("p50_us", latency.quantile_us(0.50))
        .field("p99_us", latency.quantile_us(0.99))
        .field("client_cpu_us_per_resource", client_cpu * 1e6 / resources)
        .field("server_cpu_us_per_resource", server_cpu * 1e6 / resources)
        .field("cmds_per_cycle", commands.sent(nested) as f64 / cycles_f)
        .field("server_cmds_per_resource", commands.executed() as f64 / resources);
    let point = Point {
        label: label.to_owned(),
        resources: k,
        cpu_us_per_resource: client_cpu * 1e6 / resources,
        server_cpu_us_per_resource: server_cpu * 1e6 / resources,
        p50_us: latency.quantile_us(0.50),
    };
    Ok((row, point))
}

/// Takes `k` fresh resources named after `base` as `shape` says, then releases them.
async fn cycle(lock: &Lock, options: &LockOptions, shape: Shape, base: &str, k: usize) -> anyhow::Result<()> {
    let names: Vec<String> = (0..k).map(|i| format!("{base}:{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    match shape {
        Shape::Multi => {
            let guard = lock.try_acquire_all(&refs, options).await?.context("a fresh multi-lock was held")?;
            if !guard.release().await?.all_released() {
                bail!("a multi-lock was gone at release");
            }
        }
        Shape::Singles => {
            let mut guards = Vec::with_capacity(k);
            for got in join_all(refs.iter().map(|r| lock.try_acquire(r, options))).await {
                guards.push(got?.context("a fresh lock was held")?);
            }
            for outcome in join_all(guards.into_iter().map(lock_core::Guard::release)).await {
                if outcome? != ReleaseOutcome::Released {
                    bail!("a lock was gone at release");
                }
            }
        }
    }
    Ok(())
}

/// Three panels, resources per cycle on a log axis: client CPU, server CPU and latency.
fn draw(points: &[Point]) -> String {
    let mut labels: Vec<&str> = points.iter().map(|p| p.label.as_str()).collect();
    labels.dedup();
    let panel = |title: &'static str, value: fn(&Point) -> f64| Panel {
        title,
        series: labels
            .iter()
            .map(|label| Series {
                label: (*label).to_owned(),
                points: points.iter().filter(|p| p.label == *label).map(|p| (p.resources as f64, value(p))).collect(),
            })
            .collect(),
    };
    let ticks: Vec<f64> = SIZES.iter().map(|&s| s as f64).collect();
    plot::svg(
        "resources per cycle",
        &ticks,
        &[
            panel("client CPU per resource, µs", |p| p.cpu_us_per_resource),
            panel("server CPU per resource, µs", |p| p.server_cpu_us_per_resource),
            panel("cycle latency p50, µs", |p| p.p50_us),
        ],
    )
}

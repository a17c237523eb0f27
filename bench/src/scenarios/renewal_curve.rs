//! The renewal cost curve (issue 38): one process holding 1 000, 10 000 and 100 000 auto-renewed guards. Measured
//! per size: the client's CPU share, the heap it holds per guard, the commands the server runs per second, and
//! whether any renewal came late (the least validity any guard had left at the end of the window) or was lost.
//!
//! TTL 30 s, so each guard is extended every 10 s (the default interval, TTL/3), and the window of 25 s sees two
//! rounds and ends between two (so the validity left then shows a late renewal: on time, every guard has at least
//! TTL − drift − one interval ≈ 19.7 s left; `late` counts the guards with a second less than that). A curve that grows as the number of guards does is linear: CPU per guard and bytes per guard stay flat.
//! The scenario also draws the curve, as `renewal-curve.svg` in the current directory (BENCHMARKS.md shows it).

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::future::join_all;
use lock_core::{Guard, ReleaseOutcome};

use super::{reset_stats, Ctx};
use crate::contender::{Backend, Contender};
use crate::plot::{self, Panel, Series};
use crate::report::Row;
use crate::{alloc, cpu};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
const TTL: Duration = Duration::from_secs(30);
const WINDOW: Duration = Duration::from_secs(25);
/// The renewal interval the default policy gives [`TTL`].
const INTERVAL: Duration = Duration::from_secs(10);
/// Guards acquired (and released) at once.
const BATCH: usize = 1_000;

/// One point of the curve.
struct Point {
    backend: String,
    guards: usize,
    client_cpu_pct: f64,
    bytes_per_guard: f64,
    redis_ops_per_s: f64,
    cpu_us_per_renewal: f64,
    min_valid_left_s: f64,
    late: usize,
    lost: usize,
}

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let server = &servers[0];
    let urls = vec![server.url()];
    let mut contenders = vec![
        Contender::core("redis-rs", Backend::RedisRs, &urls, true).await?,
        Contender::core("fred", Backend::Fred, &urls, true).await?,
    ];
    ctx.settings.keep(&mut contenders);
    let window = WINDOW.mul_f64(ctx.settings.scale);
    let mut points = Vec::new();
    for contender in &contenders {
        for size in SIZES {
            // `--quick` runs a tenth of each size too.
            let guards = ((size as f64) * ctx.settings.scale).round().max(1.0) as usize;
            server.flush()?;
            let point = measure(contender, guards, window, server).await?;
            let row = Row::new("renewal-curve", &format!("{}-{guards}", contender.name))
                .field("guards", guards as f64)
                .field("client_cpu_pct", point.client_cpu_pct)
                .field("bytes_per_guard", point.bytes_per_guard)
                .field("redis_ops_per_s", point.redis_ops_per_s)
                .field("cpu_us_per_renewal", point.cpu_us_per_renewal)
                .field("min_valid_left_s", point.min_valid_left_s)
                .field("late", point.late as f64)
                .field("lost", point.lost as f64);
            ctx.report.row(row);
            points.push(point);
        }
    }
    let svg = draw(&points);
    std::fs::write("renewal-curve.svg", svg).context("writing renewal-curve.svg")?;
    println!("info renewal-curve drawn in renewal-curve.svg");
    Ok(())
}

async fn measure(
    contender: &Contender,
    n: usize,
    window: Duration,
    server: &crate::server::Server,
) -> anyhow::Result<Point> {
    let (lock, options) = contender.renewing(TTL)?;
    let heap_before = alloc::live_bytes();
    let mut guards: Vec<Guard> = Vec::with_capacity(n);
    for start in (0..n).step_by(BATCH) {
        let keys: Vec<String> =
            (start..n.min(start + BATCH)).map(|i| format!("renewal-curve:{}:{i}", contender.name)).collect();
        for (key, got) in keys.iter().zip(join_all(keys.iter().map(|k| lock.try_acquire(k, &options))).await) {
            guards.push(got?.with_context(|| format!("{key} was held"))?);
        }
    }
    let bytes_per_guard = (alloc::live_bytes() - heap_before) as f64 / n as f64;
    reset_stats(std::slice::from_ref(server))?;
    let client_cpu = cpu::process_time().context("getrusage")?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    let client_cpu = cpu::process_time().context("getrusage")?.saturating_sub(client_cpu);
    let executed = server.info_number("stats", "total_commands_processed")?;
    let renewals = server.command_stats()?.sent(contender.nested);
    let now = Instant::now();
    let left: Vec<Duration> = guards.iter().map(|g| g.valid_until().saturating_duration_since(now)).collect();
    let min_valid_left = left.iter().min().copied().unwrap_or_default();
    let on_time = TTL.saturating_sub(lock_core::lease::drift(TTL)).saturating_sub(INTERVAL);
    let late = left.iter().filter(|l| **l + Duration::from_secs(1) < on_time).count();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let mut rest = guards;
    while !rest.is_empty() {
        let batch: Vec<Guard> = rest.drain(..rest.len().min(BATCH)).collect();
        for outcome in join_all(batch.into_iter().map(Guard::release)).await {
            if outcome? != ReleaseOutcome::Released && lost == 0 {
                bail!("{}: a renewed guard was gone at release", contender.name);
            }
        }
    }
    Ok(Point {
        backend: contender.name.clone(),
        guards: n,
        client_cpu_pct: 100.0 * client_cpu.as_secs_f64() / elapsed,
        bytes_per_guard,
        redis_ops_per_s: executed / elapsed,
        cpu_us_per_renewal: client_cpu.as_secs_f64() * 1e6 / (renewals.max(1) as f64),
        min_valid_left_s: min_valid_left.as_secs_f64(),
        late,
        lost,
    })
}

/// Three panels, guards on a log axis: the client's CPU share, its CPU per renewal, and its heap per guard.
fn draw(points: &[Point]) -> String {
    let panel = |title: &'static str, value: fn(&Point) -> f64| Panel {
        title,
        series: ["redis-rs", "fred"]
            .iter()
            .map(|backend| Series {
                label: (*backend).to_owned(),
                points: points.iter().filter(|p| p.backend == *backend).map(|p| (p.guards as f64, value(p))).collect(),
            })
            .collect(),
    };
    let ticks: Vec<f64> = SIZES.iter().map(|&s| s as f64).collect();
    plot::svg(
        "guards",
        &ticks,
        &[
            panel("client CPU, % of one core", |p| p.client_cpu_pct),
            panel("client CPU per renewal, µs", |p| p.cpu_us_per_renewal),
            panel("heap per guard, bytes", |p| p.bytes_per_guard),
        ],
    )
}

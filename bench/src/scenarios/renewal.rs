//! Scenario 5: 1 000 auto-renewed guards held for 10 s. Measured: the client's CPU share (user + system time of
//! this process over wall time; 100 % = one core busy), the server's CPU share (its own `INFO cpu`), and Redis
//! operations per second (`total_commands_processed`, which counts the commands run inside scripts too) next to
//! the commands per second the client sent.
//!
//! With a 3 s TTL and the default renewal interval (TTL/3), each guard is extended once a second, so 1 000 sent
//! commands per second is the expected rate. The floor does the same by hand: one task per lock, a
//! compare-and-`PEXPIRE` script every second. rslock has no background renewal (only `using`, which renews
//! around one closure), so it is not in this scenario.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::future::join_all;
use lock_core::ReleaseOutcome;

use super::{reset_stats, Ctx};
use crate::contender::{Backend, Contender};
use crate::cpu;
use crate::floor::{self, Floor};
use crate::report::Row;
use crate::server::Server;

const GUARDS: usize = 1_000;
const RENEW_TTL: Duration = Duration::from_secs(3);
const RENEW_EVERY: Duration = Duration::from_secs(1);
const WINDOW_SECS: f64 = 10.0;

/// What one window measured.
struct Window {
    elapsed: Duration,
    client_cpu: Duration,
    server_cpu_s: f64,
    executed: f64,
    sent: u64,
}

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let server = &servers[0];
    let urls = vec![server.url()];
    let window = Duration::from_secs_f64(WINDOW_SECS * ctx.settings.scale);
    let mut core = vec![
        Contender::core("redis-rs", Backend::RedisRs, &urls, true).await?,
        Contender::core("fred", Backend::Fred, &urls, true).await?,
    ];
    ctx.settings.keep(&mut core);
    for contender in &core {
        server.flush()?;
        let (w, lost) = core_window(contender, server, window).await?;
        report(ctx, &contender.name, &w, lost);
    }
    if ctx.settings.contenders.as_ref().is_some_and(|c| !c.iter().any(|n| n == "floor")) {
        return Ok(());
    }
    server.flush()?;
    let floor = Floor::connect(&urls, RENEW_TTL).await?;
    let (w, lost) = floor_window(&floor, server, window).await?;
    report(ctx, "floor", &w, lost);
    Ok(())
}

fn report(ctx: &mut Ctx, contender: &str, w: &Window, lost: usize) {
    let secs = w.elapsed.as_secs_f64();
    let row = Row::new("renewal", contender)
        .field("client_cpu_pct", 100.0 * w.client_cpu.as_secs_f64() / secs)
        .field("server_cpu_pct", 100.0 * w.server_cpu_s / secs)
        .field("redis_ops_per_s", w.executed / secs)
        .field("cmds_per_s", w.sent as f64 / secs)
        .field("guards", GUARDS as f64)
        .field("secs", secs)
        .field("lost", lost as f64);
    ctx.report.row(row);
}

/// Measures the window while whatever was set up keeps renewing.
async fn measure(server: &Server, window: Duration, nested: &[&str]) -> anyhow::Result<Window> {
    let server_cpu = server.cpu_seconds()?;
    reset_stats(std::slice::from_ref(server))?;
    let client_cpu = cpu::process_time().context("getrusage")?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed();
    let client_cpu = cpu::process_time().context("getrusage")?.saturating_sub(client_cpu);
    let stats = server.command_stats()?;
    let executed = server.info_number("stats", "total_commands_processed")?;
    let server_cpu_s = server.cpu_seconds()? - server_cpu;
    Ok(Window { elapsed, client_cpu, server_cpu_s, executed, sent: stats.sent(nested) })
}

async fn core_window(contender: &Contender, server: &Server, window: Duration) -> anyhow::Result<(Window, usize)> {
    let (lock, options) = contender.renewing(RENEW_TTL)?;
    let mut guards = Vec::with_capacity(GUARDS);
    for i in 0..GUARDS {
        let key = format!("renewal:{}:{i}", contender.name);
        guards.push(lock.try_acquire(&key, &options).await?.with_context(|| format!("{key} was held"))?);
    }
    let w = measure(server, window, contender.nested).await?;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    for outcome in join_all(guards.into_iter().map(|g| g.release())).await {
        if outcome? != ReleaseOutcome::Released && lost == 0 {
            bail!("{}: a renewed guard was gone at release", contender.name);
        }
    }
    Ok((w, lost))
}

async fn floor_window(floor: &Floor, server: &Server, window: Duration) -> anyhow::Result<(Window, usize)> {
    let stop = Instant::now() + window + Duration::from_secs(2);
    let mut tasks = Vec::with_capacity(GUARDS);
    for i in 0..GUARDS {
        let key = format!("renewal:floor:{i}");
        let held = floor.try_lock(&key).await?.with_context(|| format!("{key} was held"))?;
        let floor = floor.clone();
        // One task per lock, extending every second until `stop`: the hand-written equivalent of a watchdog.
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at((Instant::now() + RENEW_EVERY).into(), RENEW_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut lost = false;
            loop {
                let tick = ticks.tick().await;
                if tick.into_std() >= stop {
                    break;
                }
                lost |= !floor.extend(&held).await?;
            }
            floor.unlock(held).await?;
            anyhow::Ok(lost)
        }));
    }
    let w = measure(server, window, floor::NESTED).await?;
    let mut lost = 0;
    for task in tasks {
        if task.await.context("a renewal task panicked")?? {
            lost += 1;
        }
    }
    Ok((w, lost))
}

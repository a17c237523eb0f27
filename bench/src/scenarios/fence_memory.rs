//! The memory fencing counters cost a server (issue 58, item 4): one name locked once, a million times over (a lock
//! per customer), each with a fence, on a fresh server. Measured with counters kept for ever (protocol 1.1's, and
//! `with_fence_counter_expiry(None)`) and with counters that expire (the default, a week; here `--fence-expiry`,
//! 60 s by default, longer than locking the million takes, since a benchmark cannot wait a week): `used_memory` and
//! the keys left once every lock is
//! released, then, for the expiring counters, once they expired and the server reclaimed them (Redis's active
//! expiry, without any client reading them), and how long that took.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::future::try_join_all;
use lock_core::{Fencing, Lock, LockOptions};

use super::Ctx;
use crate::report::Row;
use crate::server::Server;

const NAMES: usize = 1_000_000;
/// Names locked at once (each a lock, its fence and its release).
const BATCH: usize = 1_000;
/// How long the server may take to reclaim the expired counters before the scenario gives up.
const RECLAIM_BOUND: Duration = Duration::from_secs(600);

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let server = &servers[0];
    // `--quick` locks a tenth.
    let names = ((NAMES as f64) * ctx.settings.scale).round().max(BATCH as f64) as usize;
    let expiry = ctx.settings.fence_expiry;
    for (contender, kept_for) in [("counters-kept", None), ("counters-expiring", Some(expiry))] {
        server.flush()?;
        let empty = used_memory(server)?;
        let store = lock_redis_rs::RedisStore::connect(&server.url()).await.context("redis-rs store")?;
        let lock = Lock::new(store).with_fence_counter_expiry(kept_for);
        let started = Instant::now();
        lock_each_once(&lock, names).await?;
        let locked_s = started.elapsed().as_secs_f64();
        let held = used_memory(server)? - empty;
        let keys = server.keys()?;
        let mut row = Row::new("fence-memory", contender)
            .field("names", names as f64)
            .field("lock_s", locked_s)
            .field("bytes_per_name", held / names as f64)
            .field("keys", keys as f64);
        if let Some(expiry) = kept_for {
            row = row.field("expiry_s", expiry.as_secs_f64());
            // Every counter is due `expiry` after its own draw: the last one `expiry` after the locking ended.
            let waiting = Instant::now();
            let mut keys_now = server.keys()?;
            // The version key stays: one key of the protocol's, not a counter.
            while keys_now > 1 {
                if waiting.elapsed() > expiry + RECLAIM_BOUND {
                    bail!("{keys_now} keys left {:?} after the last counter was due", waiting.elapsed() - expiry);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                keys_now = server.keys()?;
            }
            let reclaimed_s = waiting.elapsed().saturating_sub(expiry).as_secs_f64();
            let after = used_memory(server)? - empty;
            row = row
                .field("bytes_per_name_after_expiry", after / names as f64)
                .field("keys_after_expiry", keys_now as f64)
                .field("reclaimed_s_after_due", reclaimed_s);
        }
        ctx.report.row(row);
    }
    Ok(())
}

fn used_memory(server: &Server) -> anyhow::Result<f64> {
    server.info_number("memory", "used_memory")
}

/// Locks `customer-<i>` once for every `i` below `names`, draws its fence with the grant, and releases it.
async fn lock_each_once(lock: &Lock, names: usize) -> anyhow::Result<()> {
    let options = LockOptions::new(Duration::from_secs(30)).with_fencing_mode(Fencing::OnAcquire);
    for start in (0..names).step_by(BATCH) {
        let batch = (start..(start + BATCH).min(names)).map(|i| {
            let (lock, options) = (lock, &options);
            async move {
                let guard = lock.acquire(&format!("customer-{i}"), options).await?;
                guard.release().await.map(drop)
            }
        });
        try_join_all(batch).await.context("locking every name once")?;
    }
    Ok(())
}

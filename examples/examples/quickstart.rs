//! Quickstart: eight workers share one counter that lives "elsewhere" (a fenced store), and only ever touch it
//! while holding the distributed lock.
//!
//! ```text
//! cargo run -p examples --example quickstart
//! ```
//!
//! Backend choice: `REDIS_URL` set → that Redis server; otherwise a throwaway local `redis-server` if one is
//! installed; otherwise the in-memory backend. Built with `--features etcd`, `ETCD_ENDPOINTS` (comma-separated)
//! wins: the same code on etcd (`cargo run -p examples --features etcd --example quickstart`). The program says
//! which it used.
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{DistributedLock, FencingToken, LockOptions};

const WORKERS: usize = 8;
const INCREMENTS: usize = 25;

/// Stands in for the resource the lock protects (a database row, a file in object storage...). It refuses writes
/// carrying a fencing token older than one it has already seen: that is what makes a lease lock safe against a
/// holder that paused past its lease.
#[derive(Default)]
struct FencedCounter {
    value: Mutex<(u64, Option<FencingToken>)>,
    rejected: AtomicU64,
}

impl FencedCounter {
    fn read(&self) -> u64 {
        self.value.lock().map(|v| v.0).unwrap_or_default()
    }

    fn write(&self, new: u64, fence: Option<FencingToken>) -> bool {
        let Ok(mut v) = self.value.lock() else { return false };
        if fence.is_some() && fence < v.1 {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        *v = (new, fence.or(v.1));
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let backend = examples::Backend::choose();
    println!("quickstart: using {}", backend.description());
    let lock: Arc<dyn DistributedLock> = backend.distributed_lock().await?;

    let counter = Arc::new(FencedCounter::default());
    let options = LockOptions::new(Duration::from_secs(5)).with_wait(Duration::from_secs(10));
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (lock, counter, options) = (lock.clone(), counter.clone(), options.clone());
        workers.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for _ in 0..INCREMENTS {
                let guard = lock.acquire("quickstart:counter", &options).await?;
                // Read-modify-write with a pause in the middle: without the lock, workers would lose updates.
                // The fence is drawn on first use, while the lock is held: it exceeds every earlier holder's.
                let fence = guard.fence().await?;
                let current = counter.read();
                tokio::time::sleep(Duration::from_micros(200)).await;
                if !counter.write(current + 1, Some(fence)) {
                    eprintln!("worker {worker}: write rejected (stale fencing token)");
                }
                fences.push(fence);
                guard.release().await?;
            }
            Ok::<_, lock_core::LockError>((worker, fences))
        }));
    }
    for handle in workers {
        let (worker, fences) = handle.await??;
        let shown: Vec<String> = fences.iter().take(3).map(|f| f.to_string()).collect();
        println!("worker {worker}: {} increments, first fencing tokens {}", fences.len(), shown.join(", "));
    }
    let total = counter.read();
    println!(
        "final count: {total} (expected {}), stale writes rejected: {}",
        WORKERS * INCREMENTS,
        counter.rejected.load(Ordering::Relaxed)
    );
    if total != (WORKERS * INCREMENTS) as u64 {
        return Err("lost updates: the lock did not exclude".into());
    }
    Ok(())
}

//! Scenario `engine`: lock-core's engine alone. The same lock + release cycles as `uncontended`, through our `Lock`
//! and straight to the store, over a store that answers every call at once: no server, no network, nothing but the
//! library. What the engine (guard, validity clock, lost signal, spans, the try's bookkeeping) costs per cycle, in
//! nanoseconds of one task's time and in heap allocations, without the noise a network adds to those numbers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{AcquireReply, AcquireRequest, ExtendReply};
use lock_core::{Lock, LockError, LockKeys, LockStore, ReleaseOutcome, Result, Token};

use super::{order, Ctx, ROUNDS};
use crate::alloc;
use crate::contender::Contender;
use crate::report::Row;

/// A store that grants every acquire and confirms every release at once.
#[derive(Debug)]
struct Answering;

#[async_trait]
impl LockStore for Answering {
    async fn acquire(&self, _: AcquireRequest<'_>) -> Result<AcquireReply> {
        Ok(AcquireReply::Acquired { fence: None })
    }

    async fn release(&self, _: &LockKeys, _: &Token) -> Result<ReleaseOutcome> {
        Ok(ReleaseOutcome::Released)
    }

    async fn extend(&self, _: &LockKeys, _: &Token, _: Duration) -> Result<ExtendReply> {
        Err(LockError::Unsupported("extend".into()))
    }

    async fn raise_fence(&self, _: &LockKeys, _: &Token, _: u64) -> Result<bool> {
        Err(LockError::Unsupported("raise_fence".into()))
    }

    /// Every call returns at once, so the engine sets no timer of its own (as over our backends).
    fn call_bound(&self) -> Option<Duration> {
        Some(Duration::from_secs(1))
    }
}

/// Runs the scenario: `null-engine` (our `Lock`, fencing off) and `null-store` (the same calls straight to the
/// store), one task each, alternating over the rounds; each row is the median round.
pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let store: Arc<dyn LockStore> = Arc::new(Answering);
    let contenders = [
        Contender::core_over("null-engine", Lock::from_arc(store.clone()), false),
        Contender::over_store("null-store", store),
    ];
    let cycles = ((200_000.0 * ctx.settings.scale) as u64).max(1_000);
    let mut rounds: Vec<Vec<(f64, f64)>> = vec![Vec::new(); contenders.len()];
    for round in 0..ROUNDS {
        for i in order(round, contenders.len()) {
            rounds[i].push(measure(&contenders[i], cycles, round).await?);
        }
    }
    for (contender, mut measured) in contenders.iter().zip(rounds) {
        measured.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ns, allocs) = measured[measured.len() / 2];
        ctx.report.row(
            Row::new("engine", &contender.name)
                .field("ns_per_cycle", ns)
                .field("allocs_per_cycle", allocs)
                .field("cycles", cycles as f64),
        );
    }
    ctx.report.ratio("engine", "ns_per_cycle", "null-engine", "null-store");
    Ok(())
}

/// `cycles` lock + release cycles on distinct keys: nanoseconds and allocations per cycle.
async fn measure(contender: &Contender, cycles: u64, round: usize) -> anyhow::Result<(f64, f64)> {
    let keys: Vec<String> = (0..1024).map(|i| format!("engine:{round}:{i}")).collect();
    let allocs = alloc::count();
    let started = Instant::now();
    for i in 0..cycles {
        let key = &keys[(i % 1024) as usize];
        let held = contender.lock(key).await?;
        contender.unlock(held).await?;
    }
    let elapsed = started.elapsed();
    let n = cycles as f64;
    Ok((elapsed.as_nanos() as f64 / n, (alloc::count() - allocs) as f64 / n))
}

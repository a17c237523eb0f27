//! The peer: `rslock` from crates.io, used as its documentation shows.

use std::time::Duration;

use anyhow::Context as _;
use rslock::LockManager;

/// Commands that only ever run inside rslock's unlock script (see `CommandStats::sent`).
pub(crate) const NESTED: &[&str] = &["get", "del"];

/// A lock manager over `urls`; `retry` overrides rslock's default retry policy (3 tries, a random 0–200 ms
/// apart).
pub(crate) fn manager(urls: &[String], retry: Option<(u32, Duration)>) -> anyhow::Result<LockManager> {
    let clients = urls
        .iter()
        .map(|url| redis::Client::open(url.as_str()).with_context(|| format!("bad URL {url}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut manager = LockManager::from_clients(clients);
    if let Some((count, delay)) = retry {
        manager.set_retry(count, delay);
    }
    Ok(manager)
}

//! Latency histograms (HdrHistogram, nanoseconds, 3 significant digits) and the bounds of one measured segment.

use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;

/// Latencies in nanoseconds, from 1 ns to 60 s with 3 significant digits.
#[derive(Clone, Debug)]
pub(crate) struct Latency(Histogram<u64>);

impl Latency {
    pub(crate) fn new() -> anyhow::Result<Self> {
        Ok(Latency(Histogram::new_with_bounds(1, 60_000_000_000, 3).context("creating a histogram")?))
    }

    pub(crate) fn record(&mut self, d: Duration) {
        self.0.saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
    }

    pub(crate) fn merge(&mut self, other: &Latency) -> anyhow::Result<()> {
        self.0.add(&other.0).context("merging histograms")
    }

    /// The `q` quantile in microseconds (0 when empty).
    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64 / 1_000.0
    }

    /// The largest value in microseconds.
    pub(crate) fn max_us(&self) -> f64 {
        self.0.max() as f64 / 1_000.0
    }
}

/// How long, and how many operations at most, one contender runs in one round of a scenario.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    pub(crate) time: Duration,
    pub(crate) count: u64,
}

impl Bound {
    pub(crate) fn new(secs: f64, count: u64, scale: f64) -> Self {
        Bound { time: Duration::from_secs_f64(secs * scale), count }
    }
}

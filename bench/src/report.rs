//! The machine-readable output: `row`, `ratio` and `target` lines, and the rows kept to compute ratios from.
//!
//! Every line is `KIND key=value key=value …` with no spaces inside values, so `grep '^row'` and a split on
//! spaces and `=` read it.

use std::fmt::Write as _;

/// One scenario × contender result.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) contender: String,
    fields: Vec<(&'static str, f64)>,
    /// A metric's value in each slice of an interleaved run (slice `k` of every contender ran in the same round),
    /// from which a ratio is the median of the per-slice ratios.
    slices: Option<(&'static str, Vec<f64>)>,
}

impl Row {
    pub(crate) fn new(scenario: &str, contender: &str) -> Self {
        Row { scenario: scenario.to_owned(), contender: contender.to_owned(), fields: Vec::new(), slices: None }
    }

    /// Keeps `metric`'s value in each slice (see [`Row::slices`]).
    pub(crate) fn slices(mut self, metric: &'static str, values: Vec<f64>) -> Self {
        self.slices = Some((metric, values));
        self
    }

    pub(crate) fn field(mut self, name: &'static str, value: f64) -> Self {
        self.fields.push((name, value));
        self
    }

    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.fields.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// Formats a number: integers without decimals, others with up to three.
pub(crate) fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// How a ratio is held against its bar.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bar {
    AtLeast(f64),
    AtMost(f64),
    Above(f64),
}

impl Bar {
    fn passes(self, v: f64) -> bool {
        match self {
            Bar::AtLeast(b) => v >= b,
            Bar::AtMost(b) => v <= b,
            Bar::Above(b) => v > b,
        }
    }

    fn text(self) -> String {
        match self {
            Bar::AtLeast(b) => format!(">={}", number(b)),
            Bar::AtMost(b) => format!("<={}", number(b)),
            Bar::Above(b) => format!(">{}", number(b)),
        }
    }
}

/// All rows of a run so far.
#[derive(Debug, Default)]
pub(crate) struct Report {
    rows: Vec<Row>,
    /// Appended to every scenario's name: `@current-thread` for the rows measured on tokio's current-thread
    /// runtime, nothing on the multi-thread runtime (whose names the history has always used).
    suffix: &'static str,
}

impl Report {
    /// A report whose scenario names carry `suffix` (see [`Report::suffix`]).
    pub(crate) fn with_suffix(suffix: &'static str) -> Self {
        Report { rows: Vec::new(), suffix }
    }

    /// Prints the row and keeps it.
    pub(crate) fn row(&mut self, mut row: Row) {
        row.scenario.push_str(self.suffix);
        let mut line = format!("row scenario={} contender={}", row.scenario, row.contender);
        for (name, value) in &row.fields {
            let _ = write!(line, " {name}={}", number(*value));
        }
        println!("{line}");
        self.rows.push(row);
    }

    fn value(&self, scenario: &str, contender: &str, metric: &str) -> Option<f64> {
        self.row_of(scenario, contender).and_then(|r| r.get(metric))
    }

    /// The row of `scenario` (named without the suffix) and `contender`.
    fn row_of(&self, scenario: &str, contender: &str) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.contender == contender && r.scenario.strip_suffix(self.suffix).is_some_and(|name| name == scenario)
        })
    }

    /// `a`'s `metric` over `b`'s. Where both rows kept the metric per slice, the median of the per-slice ratios
    /// (each slice of `a` against the slice of `b` of the same round, so a machine whose speed drifts over the run
    /// moves both alike) with their spread; else the ratio of the totals.
    fn quotient(&self, scenario: &str, metric: &str, a: &str, b: &str) -> Option<Quotient> {
        let per_slice = |row: &Row| row.slices.as_ref().filter(|(m, _)| *m == metric).map(|(_, v)| v.clone());
        let (ra, rb) = (self.row_of(scenario, a)?, self.row_of(scenario, b)?);
        if let (Some(sa), Some(sb)) = (per_slice(ra), per_slice(rb)) {
            let ratios: Vec<f64> = sa.iter().zip(&sb).filter(|(_, b)| **b != 0.0).map(|(a, b)| a / b).collect();
            if !ratios.is_empty() {
                return Some(Quotient::of_slices(&ratios));
            }
        }
        let (va, vb) = (ra.get(metric)?, rb.get(metric)?);
        (vb != 0.0).then(|| Quotient { value: va / vb, spread: None })
    }

    /// `a`'s `metric` divided by `b`'s, printed as a `ratio` line (skipped when either row is missing).
    pub(crate) fn ratio(&self, scenario: &str, metric: &str, a: &str, b: &str) {
        if let Some(q) = self.quotient(scenario, metric, a, b) {
            let scenario = format!("{scenario}{}", self.suffix);
            println!("ratio scenario={scenario} metric={metric} a={a} b={b} value={:.3}{}", q.value, q.spread_text());
        }
    }

    /// `a`'s `metric` in `scenario` divided by `b`'s in `base` (another scenario of the same run), held against a
    /// bar and printed as a `target` line whose `b` is `base/b`.
    pub(crate) fn target_across(&self, scenario: &str, metric: &str, a: &str, base: &str, b: &str, bar: Bar) {
        let (Some(va), Some(vb)) = (self.value(scenario, a, metric), self.value(base, b, metric)) else {
            return;
        };
        if vb == 0.0 {
            return;
        }
        let value = va / vb;
        let pass = if bar.passes(value) { "yes" } else { "no" };
        let (scenario, base) = (format!("{scenario}{}", self.suffix), format!("{base}{}", self.suffix));
        println!(
            "target scenario={scenario} metric={metric} a={a} b={base}/{b} value={value:.3} bar={} pass={pass}",
            bar.text()
        );
    }

    /// A ratio (or, with `b = None`, `a`'s own value) held against an issue-8 bar, printed as a `target` line.
    pub(crate) fn target(&self, scenario: &str, metric: &str, a: &str, b: Option<&str>, bar: Bar) {
        let quotient = match b {
            Some(b) => self.quotient(scenario, metric, a, b),
            None => self.value(scenario, a, metric).map(|value| Quotient { value, spread: None }),
        };
        let Some(q) = quotient else {
            return;
        };
        let pass = if bar.passes(q.value) { "yes" } else { "no" };
        let scenario = format!("{scenario}{}", self.suffix);
        println!(
            "target scenario={scenario} metric={metric} a={a} b={} value={:.3}{} bar={} pass={pass}",
            b.unwrap_or("-"),
            q.value,
            q.spread_text(),
            bar.text()
        );
    }
}

/// A ratio, and (from per-slice ratios) the range the middle half of them spans and how many there were.
struct Quotient {
    value: f64,
    spread: Option<(f64, f64, usize)>,
}

impl Quotient {
    /// The median of `ratios`, with their interquartile range.
    fn of_slices(ratios: &[f64]) -> Self {
        let mut sorted = ratios.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let pos = q * (sorted.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        };
        Quotient { value: at(0.5), spread: Some((at(0.25), at(0.75), sorted.len())) }
    }

    /// ` q1=… q3=… slices=…` for a ratio of slices, else nothing.
    fn spread_text(&self) -> String {
        self.spread.map_or_else(String::new, |(q1, q3, n)| format!(" q1={q1:.3} q3={q3:.3} slices={n}"))
    }
}

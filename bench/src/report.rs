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
}

impl Row {
    pub(crate) fn new(scenario: &str, contender: &str) -> Self {
        Row { scenario: scenario.to_owned(), contender: contender.to_owned(), fields: Vec::new() }
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
}

impl Report {
    /// Prints the row and keeps it.
    pub(crate) fn row(&mut self, row: Row) {
        let mut line = format!("row scenario={} contender={}", row.scenario, row.contender);
        for (name, value) in &row.fields {
            let _ = write!(line, " {name}={}", number(*value));
        }
        println!("{line}");
        self.rows.push(row);
    }

    fn value(&self, scenario: &str, contender: &str, metric: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.scenario == scenario && r.contender == contender).and_then(|r| r.get(metric))
    }

    fn quotient(&self, scenario: &str, metric: &str, a: &str, b: &str) -> Option<f64> {
        let (va, vb) = (self.value(scenario, a, metric)?, self.value(scenario, b, metric)?);
        (vb != 0.0).then(|| va / vb)
    }

    /// `a`'s `metric` divided by `b`'s, printed as a `ratio` line (skipped when either row is missing).
    pub(crate) fn ratio(&self, scenario: &str, metric: &str, a: &str, b: &str) {
        if let Some(value) = self.quotient(scenario, metric, a, b) {
            println!("ratio scenario={scenario} metric={metric} a={a} b={b} value={value:.3}");
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
        println!(
            "target scenario={scenario} metric={metric} a={a} b={base}/{b} value={value:.3} bar={} pass={pass}",
            bar.text()
        );
    }

    /// A ratio (or, with `b = None`, `a`'s own value) held against an issue-8 bar, printed as a `target` line.
    pub(crate) fn target(&self, scenario: &str, metric: &str, a: &str, b: Option<&str>, bar: Bar) {
        let value = match b {
            Some(b) => self.quotient(scenario, metric, a, b),
            None => self.value(scenario, a, metric),
        };
        let Some(value) = value else {
            return;
        };
        let pass = if bar.passes(value) { "yes" } else { "no" };
        println!(
            "target scenario={scenario} metric={metric} a={a} b={} value={value:.3} bar={} pass={pass}",
            b.unwrap_or("-"),
            bar.text()
        );
    }
}

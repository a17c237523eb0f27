//! `lock-bench summarize FILE…`: the output of several runs as Markdown tables, each number as its median and
//! its min–max over the runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::report::number;

/// Values of one name across runs, in the order names first appeared.
#[derive(Default)]
struct Series {
    order: Vec<String>,
    values: BTreeMap<String, Vec<f64>>,
}

impl Series {
    fn push(&mut self, name: &str, value: f64) {
        if !self.values.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.values.entry(name.to_owned()).or_default().push(value);
    }
}

/// One scenario's rows: contenders and field names in order of appearance, and each contender's values.
type ScenarioRows = (Vec<String>, Vec<String>, BTreeMap<String, Series>);

fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace().skip(1).filter_map(|kv| kv.split_once('=')).collect()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// `median (min–max)`, or the value alone when all runs agree.
fn cell(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let med = number(median(values));
    if min == max {
        med
    } else {
        format!("{med} ({}–{})", number(min), number(max))
    }
}

pub(crate) fn run(files: &[PathBuf]) -> anyhow::Result<()> {
    let mut scenarios: Vec<String> = Vec::new();
    let mut rows: BTreeMap<String, ScenarioRows> = BTreeMap::new();
    let mut ratios = Series::default();
    let mut targets = Series::default();
    let mut passes: BTreeMap<String, (usize, usize, String)> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for line in text.lines() {
            let kv = fields(line);
            if line.starts_with("row ") {
                let (Some(s), Some(c)) = (kv.get("scenario"), kv.get("contender")) else { continue };
                if !scenarios.iter().any(|x| x == s) {
                    scenarios.push((*s).to_owned());
                }
                let (contenders, names, by_contender) = rows.entry((*s).to_owned()).or_default();
                if !contenders.iter().any(|x| x == c) {
                    contenders.push((*c).to_owned());
                }
                let series = by_contender.entry((*c).to_owned()).or_default();
                for kv in line.split_whitespace().skip(3) {
                    let Some((k, v)) = kv.split_once('=') else { continue };
                    let Ok(v) = v.parse::<f64>() else { continue };
                    if !names.iter().any(|x| x == k) {
                        names.push(k.to_owned());
                    }
                    series.push(k, v);
                }
            } else if line.starts_with("ratio ") || line.starts_with("target ") {
                let (Some(s), Some(m), Some(a), Some(b), Some(v)) =
                    (kv.get("scenario"), kv.get("metric"), kv.get("a"), kv.get("b"), kv.get("value"))
                else {
                    continue;
                };
                let Ok(v) = v.parse::<f64>() else { continue };
                let key = format!("| {s} | {m} | {a} | {b} |");
                if line.starts_with("ratio ") {
                    ratios.push(&key, v);
                } else {
                    let bar = kv.get("bar").copied().unwrap_or("?").to_owned();
                    let key = format!("{key} {bar} |");
                    targets.push(&key, v);
                    let entry = passes.entry(key).or_insert((0, 0, bar));
                    entry.1 += 1;
                    if kv.get("pass") == Some(&"yes") {
                        entry.0 += 1;
                    }
                }
            }
        }
    }
    println!("Median over {} runs; min–max in parentheses when the runs differ.\n", files.len());
    for scenario in &scenarios {
        let Some((contenders, names, by_contender)) = rows.get(scenario) else { continue };
        println!("### {scenario}\n");
        println!("| contender | {} |", names.join(" | "));
        println!("|---|{}", "---|".repeat(names.len()));
        for contender in contenders {
            let Some(series) = by_contender.get(contender) else { continue };
            let cells: Vec<String> =
                names.iter().map(|n| series.values.get(n).map_or_else(|| "–".to_owned(), |v| cell(v))).collect();
            println!("| {contender} | {} |", cells.join(" | "));
        }
        println!();
    }
    println!("### targets (issue 8)\n");
    println!("| scenario | metric | a | b | bar | a/b (or a) | runs passing |");
    println!("|---|---|---|---|---|---|---|");
    for key in &targets.order {
        let (Some(values), Some((ok, n, _))) = (targets.values.get(key), passes.get(key)) else { continue };
        println!("{key} {} | {ok}/{n} |", cell(values));
    }
    println!("\n### ratios\n");
    println!("| scenario | metric | a | b | a/b |");
    println!("|---|---|---|---|---|");
    for key in &ratios.order {
        if let Some(values) = ratios.values.get(key) {
            println!("{key} {} |", cell(values));
        }
    }
    Ok(())
}

//! Small SVG line charts for the cost curves: panels side by side, the x axis logarithmic, one line per series.
//! BENCHMARKS.md shows what the curve scenarios draw with it; a plotting crate would be much more than this needs.

use std::fmt::Write as _;

/// One line: its label and its points `(x, y)`, x > 0.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// One chart: a title over its lines.
pub(crate) struct Panel {
    pub(crate) title: &'static str,
    pub(crate) series: Vec<Series>,
}

const W: f64 = 360.0;
const H: f64 = 220.0;
const PAD: f64 = 48.0;
const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

/// The panels side by side, each with a y axis from 0 and the x axis `x_label` at `x_ticks` (log scale).
pub(crate) fn svg(x_label: &str, x_ticks: &[f64], panels: &[Panel]) -> String {
    let lo = x_ticks.iter().copied().fold(f64::INFINITY, f64::min).max(1e-9).log10();
    let hi = x_ticks.iter().copied().fold(0.0f64, f64::max).max(1e-9).log10();
    let span = if hi > lo { hi - lo } else { 1.0 };
    let x_of = |x: f64| PAD + (x.max(1e-9).log10() - lo) / span * (W - 2.0 * PAD);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{H}" font-family="sans-serif" font-size="11">"#,
        panels.len() as f64 * W
    );
    for (i, panel) in panels.iter().enumerate() {
        let left = i as f64 * W;
        let top =
            panel.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let y_of = |v: f64| H - PAD - v / top * (H - 2.0 * PAD);
        let _ = write!(
            svg,
            r##"<g transform="translate({left},0)"><text x="{PAD}" y="20" font-weight="bold">{title}</text><line x1="{PAD}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/><line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{b}" stroke="#333"/><text x="{PAD}" y="{t}" text-anchor="end" dx="-4">{top:.3}</text><text x="{PAD}" y="{b}" text-anchor="end" dx="-4">0</text>"##,
            title = panel.title,
            b = H - PAD,
            r = W - PAD,
            t = PAD + 4.0,
        );
        for &tick in x_ticks {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{tick}</text>"#,
                x_of(tick),
                H - PAD + 16.0
            );
        }
        let _ = write!(svg, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x_label}</text>"#, W / 2.0, H - 8.0);
        for (row, series) in panel.series.iter().enumerate() {
            if series.points.is_empty() {
                continue;
            }
            let color = COLORS[row % COLORS.len()];
            let line: Vec<String> =
                series.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), y_of(y))).collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/><text x="{:.1}" y="{:.1}" fill="{color}">{}</text>"#,
                line.join(" "),
                W - PAD - 90.0,
                PAD + 14.0 * row as f64,
                series.label
            );
        }
        svg.push_str("</g>");
    }
    svg.push_str("</svg>\n");
    svg
}

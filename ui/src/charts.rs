//! Small charts drawn on the server as SVG: bars (one or two overlaid series) and lines. No
//! script is needed to see them; each carries a text description for screen readers.

use maud::{Markup, PreEscaped, html};

const W: f64 = 400.0;
const H: f64 = 140.0;
// Room left of the plot for the y-axis label (e.g. "$0.0011").
const LEFT: f64 = 52.0;
const RIGHT: f64 = 396.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 118.0;

/// The x-axis: labels of the first and last buckets.
pub struct Axis<'a> {
    pub first: &'a str,
    pub last: &'a str,
}

fn frame(label: &str, axis: &Axis, max_label: &str, inner: Markup) -> Markup {
    html! {
        svg.chart viewBox={"0 0 " (W) " " (H)} role="img" aria-label=(label) {
            title { (label) }
            line.axis x1=(LEFT) y1=(BOTTOM) x2=(RIGHT) y2=(BOTTOM) {}
            line.axis x1=(LEFT) y1=(TOP) x2=(RIGHT) y2=(TOP) stroke-dasharray="2 3" {}
            text x=(LEFT - 3.0) y=(TOP + 4.0) text-anchor="end" { (max_label) }
            text x=(LEFT - 3.0) y=(BOTTOM) text-anchor="end" { "0" }
            text x=(LEFT) y=(H - 6.0) { (axis.first) }
            text x=(RIGHT) y=(H - 6.0) text-anchor="end" { (axis.last) }
            (inner)
        }
    }
}

fn max_of(values: impl Iterator<Item = f64>) -> f64 {
    values.filter(|v| v.is_finite()).fold(0.0, f64::max)
}

/// Bars of `series[0]`, with `series[1]` (a part of it, e.g. errors) drawn over them.
pub fn bars(label: &str, axis: &Axis, series: &[&[f64]], fmt: fn(f64) -> String) -> Markup {
    let n = series.first().map_or(0, |s| s.len()).max(1);
    let max = max_of(series.iter().flat_map(|s| s.iter().copied())).max(f64::MIN_POSITIVE);
    let step = (RIGHT - LEFT) / n as f64;
    let mut svg = String::new();
    for (k, s) in series.iter().enumerate().take(2) {
        for (i, v) in s.iter().enumerate() {
            if *v <= 0.0 || !v.is_finite() {
                continue;
            }
            let h = (v / max) * (BOTTOM - TOP);
            svg.push_str(&format!(
                r#"<rect class="s{k}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
                LEFT + i as f64 * step + step * 0.12,
                BOTTOM - h,
                step * 0.76,
                h,
                fmt(*v)
            ));
        }
    }
    frame(label, axis, &fmt(max), html! { (PreEscaped(svg)) })
}

/// Lines of up to two series; `None` leaves a gap.
pub fn lines(
    label: &str,
    axis: &Axis,
    series: &[&[Option<f64>]],
    fmt: fn(f64) -> String,
) -> Markup {
    let n = series.first().map_or(0, |s| s.len()).max(1);
    let max =
        max_of(series.iter().flat_map(|s| s.iter().flatten().copied())).max(f64::MIN_POSITIVE);
    let step = (RIGHT - LEFT) / n as f64;
    let mut svg = String::new();
    for (k, s) in series.iter().enumerate().take(2) {
        let mut d = String::new();
        let mut pen_down = false;
        for (i, v) in s.iter().enumerate() {
            match v {
                Some(v) if v.is_finite() => {
                    let x = LEFT + (i as f64 + 0.5) * step;
                    let y = BOTTOM - (v / max) * (BOTTOM - TOP);
                    d.push_str(&format!("{}{x:.1},{y:.1} ", if pen_down { "L" } else { "M" }));
                    pen_down = true;
                    svg.push_str(&format!(
                        r#"<circle class="l{k}" cx="{x:.1}" cy="{y:.1}" r="1.6"><title>{}</title></circle>"#,
                        fmt(*v)
                    ));
                }
                _ => pen_down = false,
            }
        }
        svg.push_str(&format!(r#"<path class="l{k}" d="{}"/>"#, d.trim_end()));
    }
    frame(label, axis, &fmt(max), html! { (PreEscaped(svg)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_draw_their_values() {
        let axis = Axis { first: "a", last: "b" };
        let svg = bars("calls", &axis, &[&[1.0, 0.0, 4.0], &[0.0, 0.0, 2.0]], |v| format!("{v}"))
            .into_string();
        assert_eq!(svg.matches("<rect").count(), 3, "zero bars are left out");
        assert!(svg.contains(r#"aria-label="calls""#) && svg.contains(">4<"));
        let svg =
            lines("p50", &axis, &[&[Some(1.0), None, Some(3.0)]], |v| format!("{v}")).into_string();
        assert_eq!(svg.matches('M').count(), 2, "a gap starts a new segment");
    }
}

//! Runs one embedded mode `--runs` times, against `--heddle-bin` and, with `--baseline-bin`,
//! against a second binary in the same invocation, interleaved (baseline, new, baseline, new, …)
//! so that both see the same machine at the same time. Each run starts its own server (or stack)
//! on a fresh data dir and prints its own detailed table; afterwards one summary table gives, per
//! figure, the median of the runs for each binary and the ratio new / baseline.

use std::collections::HashMap;
use std::path::Path;

use anyhow::bail;

use crate::Args;

/// One number a run measured, e.g. "write, batch 500: calls/s".
pub(crate) struct Figure {
    pub(crate) name: String,
    pub(crate) value: f64,
    /// Digits after the decimal point when printed.
    pub(crate) decimals: usize,
}

impl Figure {
    pub(crate) fn new(name: impl Into<String>, value: f64, decimals: usize) -> Figure {
        Figure { name: name.into(), value, decimals }
    }
}

/// What one run of a mode found: the problems (non-2xx answers, mismatches) and the figures.
#[derive(Default)]
pub(crate) struct Measured {
    pub(crate) problems: Vec<String>,
    pub(crate) figures: Vec<Figure>,
}

impl Measured {
    pub(crate) fn add(&mut self, name: impl Into<String>, value: Option<f64>, decimals: usize) {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            self.figures.push(Figure::new(name, v, decimals));
        }
    }
}

/// The modes that run through [`run`].
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    Calls,
    Otlp,
    Queries,
    Overload,
    IngestRole,
}

async fn once(mode: Mode, args: &Args, bin: &Path) -> anyhow::Result<Measured> {
    match mode {
        Mode::Calls => crate::calls::run(args, bin).await,
        Mode::Otlp => crate::otlp::run_embedded(args, bin).await,
        Mode::Queries => crate::queries::run(args, bin).await,
        Mode::Overload => crate::overload::run(args, bin).await,
        Mode::IngestRole => crate::ingest_role::run(args, bin).await,
    }
}

/// Runs `mode` `--runs` times per binary and prints the summary; returns every run's problems.
pub(crate) async fn run(args: &Args, mode: Mode) -> anyhow::Result<Vec<String>> {
    let runs = args.runs.unwrap_or(if args.baseline_bin.is_some() { 3 } else { 1 });
    if runs == 0 {
        bail!("--runs must be positive");
    }
    if args.url.is_some() && (args.baseline_bin.is_some() || runs > 1) {
        bail!("--baseline-bin and --runs > 1 start fresh servers; they do not take --url");
    }
    if args.project.is_some() && runs > 1 {
        bail!("--project names one project; with --runs > 1 every run needs a fresh one");
    }
    let mut bins: Vec<(&str, &Path)> = Vec::new();
    if let Some(b) = &args.baseline_bin {
        bins.push(("baseline", b));
    }
    bins.push(("new", &args.heddle_bin));
    let announce = runs > 1 || bins.len() > 1;
    // Per binary, the figures of each run (in the order the runs finished).
    let mut results: Vec<Vec<Measured>> = bins.iter().map(|_| Vec::new()).collect();
    let mut problems = Vec::new();
    for round in 1..=runs {
        for (i, (label, bin)) in bins.iter().enumerate() {
            if announce {
                eprintln!("\n=== run {round} of {runs}: {label} {} ===", bin.display());
                println!("\n### Run {round} of {runs}: {label}, `{}`\n", bin.display());
            }
            let m = once(mode, args, bin).await.unwrap_or_else(|e| Measured {
                problems: vec![format!("the run failed: {e:#}")],
                figures: Vec::new(),
            });
            let tag = if announce { format!("[{label}, run {round}] ") } else { String::new() };
            problems.extend(m.problems.iter().map(|p| format!("{tag}{p}")));
            results[i].push(m);
        }
    }
    if announce {
        println!();
        print_summary(&bins, &results, runs);
    }
    Ok(problems)
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

fn print_summary(bins: &[(&str, &Path)], results: &[Vec<Measured>], runs: usize) {
    // Figure names in the order they first appear, with their precision.
    let mut order: Vec<(&str, usize)> = Vec::new();
    let mut values: Vec<HashMap<&str, Vec<f64>>> = vec![HashMap::new(); bins.len()];
    for (i, per_bin) in results.iter().enumerate() {
        for m in per_bin {
            for f in &m.figures {
                if !order.iter().any(|(n, _)| *n == f.name) {
                    order.push((&f.name, f.decimals));
                }
                values[i].entry(&f.name).or_default().push(f.value);
            }
        }
    }
    let fmt = |v: Option<f64>, d: usize| v.map_or("–".to_owned(), |v| format!("{v:.d$}"));
    let list = |vs: Option<&Vec<f64>>, d: usize| {
        vs.map_or("–".to_owned(), |vs| {
            vs.iter().map(|v| format!("{v:.d$}")).collect::<Vec<_>>().join(", ")
        })
    };
    let baseline = bins.len() > 1;
    println!("## Summary: median of {runs} run(s) per binary");
    println!();
    for (label, bin) in bins {
        println!("- {label}: `{}`", bin.display());
    }
    println!();
    if baseline {
        println!(
            "| Figure | baseline median | new median | new / baseline | baseline runs | new runs |"
        );
        println!("|---|---:|---:|---:|---|---|");
    } else {
        println!("| Figure | median | runs |");
        println!("|---|---:|---|");
    }
    for (name, d) in order {
        let mut medians = Vec::new();
        for v in &values {
            medians.push(median(&mut v.get(name).cloned().unwrap_or_default()));
        }
        if baseline {
            let ratio = match (medians[0], medians[1]) {
                (Some(b), Some(n)) if b != 0.0 => format!("{:.2}×", n / b),
                _ => "–".into(),
            };
            println!(
                "| {name} | {} | {} | {ratio} | {} | {} |",
                fmt(medians[0], d),
                fmt(medians[1], d),
                list(values[0].get(name), d),
                list(values[1].get(name), d),
            );
        } else {
            println!("| {name} | {} | {} |", fmt(medians[0], d), list(values[0].get(name), d));
        }
    }
    if baseline {
        println!(
            "\nRuns were interleaved (baseline, new, baseline, new, …), each on a fresh server and \
             data dir. The ratio is new ÷ baseline of the medians: above 1 is better for rates, \
             worse for times, sizes, memory and error answers."
        );
    } else {
        println!("\nEach run on a fresh server and data dir, one after the other.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }
}

//! The markdown results table.

use std::time::Duration;

use crate::client::Outcome;
use crate::machine::CpuUse;
use crate::rounds::Measured;

pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) requests: usize,
    pub(crate) calls: Option<usize>,
    pub(crate) wall: Duration,
    pub(crate) bytes: u64,
    pub(crate) p50: Option<Duration>,
    pub(crate) p99: Option<Duration>,
    pub(crate) cpu: Option<CpuUse>,
}

impl Row {
    pub(crate) fn from_outcome(
        name: String,
        out: &Outcome,
        calls: Option<usize>,
        cpu: Option<CpuUse>,
    ) -> Row {
        Row {
            name,
            requests: out.ok_requests,
            calls: calls.map(|_| out.ok_calls),
            wall: out.wall,
            bytes: out.bytes_sent,
            p50: percentile(&out.latencies, 0.50),
            p99: percentile(&out.latencies, 0.99),
            cpu,
        }
    }
}

impl Row {
    /// The row's figures for the summary of several runs: rate, latencies, CPU efficiency.
    pub(crate) fn figures(&self, m: &mut Measured) {
        let secs = self.wall.as_secs_f64().max(1e-9);
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        let name = &self.name;
        match self.calls {
            Some(n) => {
                m.add(format!("{name}: calls/s"), Some(n as f64 / secs), 0);
                let per_cpu = self.cpu.as_ref().and_then(|c| c.server).filter(|&s| s > 0.0);
                m.add(format!("{name}: calls per server CPU-s"), per_cpu.map(|s| n as f64 / s), 0);
            }
            None if self.requests > 1 => {
                m.add(format!("{name}: requests/s"), Some(self.requests as f64 / secs), 0)
            }
            None => {}
        }
        m.add(format!("{name}: p50 ms"), ms(self.p50), 2);
        m.add(format!("{name}: p99 ms"), ms(self.p99), 2);
    }
}

/// Nearest-rank percentile of sorted samples.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub(crate) fn print_table(rows: &[Row], nproc: usize, with_cpu: bool) {
    let ms = |d: Option<Duration>| match d {
        Some(d) => format!("{:.2}", d.as_secs_f64() * 1e3),
        None => "–".into(),
    };
    let mut header = "| Phase | OK requests | Calls | Wall s | Calls/s | Calls/s per core | Req/s \
                      | p50 ms | p99 ms | MB/s |"
        .to_owned();
    let mut rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|".to_owned();
    if with_cpu {
        header.push_str(
            " Server CPU s | Calls per server CPU-s | Busiest server thread | Bench CPU s |",
        );
        rule.push_str("---:|---:|---|---:|");
    }
    println!("{header}\n{rule}");
    for r in rows {
        let secs = r.wall.as_secs_f64().max(1e-9);
        let (calls, rate, per_core) = match r.calls {
            Some(n) => {
                let rate = n as f64 / secs;
                (n.to_string(), format!("{rate:.0}"), format!("{:.0}", rate / nproc as f64))
            }
            None => ("–".into(), "–".into(), "–".into()),
        };
        let mb =
            if r.bytes > 0 { format!("{:.1}", r.bytes as f64 / 1e6 / secs) } else { "–".into() };
        // A request rate means nothing for a phase of one request.
        let req_rate =
            if r.requests > 1 { format!("{:.0}", r.requests as f64 / secs) } else { "–".into() };
        let mut line = format!(
            "| {} | {} | {calls} | {:.3} | {rate} | {per_core} | {req_rate} | {} | {} | {mb} |",
            r.name,
            r.requests,
            secs,
            ms(r.p50),
            ms(r.p99),
        );
        if with_cpu {
            match &r.cpu {
                Some(c) => {
                    let per_cpu = match (r.calls, c.server) {
                        (Some(n), Some(s)) if s > 0.0 => format!("{:.0}", n as f64 / s),
                        _ => "–".into(),
                    };
                    let opt = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
                    let busiest = match &c.busiest {
                        Some((name, share)) => format!("`{name}` {:.0}%", share * 100.0),
                        None => "–".into(),
                    };
                    line.push_str(&format!(
                        " {} | {per_cpu} | {busiest} | {} |",
                        opt(c.server),
                        opt(c.bench)
                    ));
                }
                None => line.push_str(" – | – | – | – |"),
            }
        }
        println!("{line}");
    }
}

/// Prints a process's WARN/ERROR log lines (`log_problems`) under `heading`, if it logged any.
pub(crate) fn print_log_problems(heading: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    println!("\n{heading} (WARN/ERROR lines, first {}):", lines.len());
    for line in lines {
        println!("    {line}");
    }
}

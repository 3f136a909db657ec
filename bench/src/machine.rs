//! The machine description, CPU accounting from `/proc`, and on-disk sizes.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

pub(crate) struct Machine {
    pub(crate) nproc: usize,
    cpu: String,
    mem_gib: Option<f64>,
    kernel: Option<String>,
}

impl Machine {
    pub(crate) fn detect() -> Machine {
        let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let cpu = field("model name")
            .or_else(|| field("Hardware"))
            .or_else(|| field("cpu model"))
            .unwrap_or_else(|| "unknown CPU".into());
        let mem_gib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            let kb: f64 = m
                .lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(kb / (1024.0 * 1024.0))
        });
        let kernel =
            std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_owned());
        Machine { nproc, cpu, mem_gib, kernel }
    }

    pub(crate) fn line(&self) -> String {
        let mut s = format!("Machine: nproc {}, CPU {}", self.nproc, self.cpu);
        if let Some(m) = self.mem_gib {
            s.push_str(&format!(", {m:.1} GiB RAM"));
        }
        if let Some(k) = &self.kernel {
            s.push_str(&format!(", Linux {k}"));
        }
        s
    }
}

/// CPU seconds used by the server (when the bench started it), by its busiest thread, and by the
/// bench itself, from `/proc/<pid>/stat` and `/proc/<pid>/task/*/stat`.
pub(crate) struct CpuMeter {
    pid: Option<u32>,
    started: Instant,
    server0: Option<f64>,
    threads0: HashMap<String, f64>,
    bench0: Option<f64>,
    written0: Option<u64>,
}

#[derive(Clone)]
pub(crate) struct CpuUse {
    pub(crate) server: Option<f64>,
    pub(crate) bench: Option<f64>,
    /// The server thread that used the most CPU in the phase: name and share of the wall time.
    pub(crate) busiest: Option<(String, f64)>,
    /// Bytes the server wrote to its files in the phase ([`written_bytes`]).
    pub(crate) written: Option<u64>,
}

impl CpuMeter {
    pub(crate) fn start(pid: Option<u32>) -> CpuMeter {
        CpuMeter {
            pid,
            started: Instant::now(),
            server0: pid.and_then(|p| cpu_secs(&format!("/proc/{p}/stat")).map(|(_, s)| s)),
            threads0: pid.map(thread_cpu).unwrap_or_default(),
            bench0: cpu_secs("/proc/self/stat").map(|(_, s)| s),
            written0: pid.and_then(written_bytes),
        }
    }

    pub(crate) fn stop(self) -> Option<CpuUse> {
        let pid = self.pid?;
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        let busiest = thread_cpu(pid)
            .into_iter()
            .map(|(key, s)| {
                let before = self.threads0.get(&key).copied().unwrap_or(0.0);
                let name = key.split_once(' ').map_or(key.as_str(), |(_, n)| n).to_owned();
                (name, (s - before) / wall)
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        Some(CpuUse {
            server: diff(self.server0, cpu_secs(&format!("/proc/{pid}/stat")).map(|(_, s)| s)),
            bench: diff(self.bench0, cpu_secs("/proc/self/stat").map(|(_, s)| s)),
            busiest,
            written: written_bytes(pid).zip(self.written0).map(|(b, a)| b.saturating_sub(a)),
        })
    }
}

/// Bytes the process has caused to be written to storage (`write_bytes` in `/proc/<pid>/io`),
/// counted as it writes them into the page cache: for SQLite, its WAL frames and what
/// checkpoints copy into the database file. Their ratio to the data stored is the write
/// amplification that random index keys cause (docs/benchmarks.md, "Bucketed trace and parent
/// indexes").
fn written_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines().find_map(|l| l.strip_prefix("write_bytes:"))?.trim().parse().ok()
}

/// utime + stime of a whole process (all its threads), in seconds.
pub(crate) fn process_cpu(pid: u32) -> Option<f64> {
    cpu_secs(&format!("/proc/{pid}/stat")).map(|(_, s)| s)
}

/// Waits until the process has used next to no CPU for half a second (work the server does after
/// answering: building the substring index, checkpointing), at most `limit`. Returns the wait
/// and the CPU seconds the process used in it.
pub(crate) fn settle(pid: u32, limit: std::time::Duration) -> Option<(f64, f64)> {
    let started = Instant::now();
    let first = process_cpu(pid)?;
    let mut last = first;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = process_cpu(pid)?;
        if now - last < 0.02 || started.elapsed() >= limit {
            return Some((started.elapsed().as_secs_f64(), now - first));
        }
        last = now;
    }
}

/// The 1-minute load average, a hint of what else ran on the machine.
pub(crate) fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// CPU seconds per thread of `pid`, keyed by "<tid> <name>".
fn thread_cpu(pid: u32) -> HashMap<String, f64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return HashMap::new() };
    tasks
        .flatten()
        .filter_map(|t| {
            let (name, secs) = cpu_secs(&t.path().join("stat").to_string_lossy())?;
            Some((format!("{} {name}", t.file_name().to_string_lossy()), secs))
        })
        .collect()
}

/// The command name and utime + stime in seconds of one `/proc/.../stat` file.
fn cpu_secs(stat_path: &str) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    // Fields after the parenthesised command name start at field 3 (state); utime and stime are
    // fields 14 and 15.
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((name, (utime + stime) / clock_ticks()))
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

pub(crate) fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

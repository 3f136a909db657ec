//! `--distributed`: the write path through Kafka. The bench starts a tansu broker, a ClickHouse
//! (the chdb-backed adapter, or a real server with --clickhouse-url) and `heddle serve --kafka
//! --clickhouse` (see `stack.rs`), then measures, for the same workload as the embedded bench:
//!
//! 1. calls/s acknowledged by ingest (a 200 means every record of the request is in Kafka);
//! 2. calls/s visible in ClickHouse: from the first send until `calls/query_stats` counts every
//!    acknowledged call (polled every --poll-ms);
//! 3. visibility lag: for one probe call per request (at most --lag-samples), the time from the
//!    request's answer to the end of the first `calls/stream_query` (filtered by call ids, polled
//!    every --poll-ms from a background task) that returns it; and the server's own
//!    `heddle_visibility_lag_seconds` histogram (record produce time → batch stored) from
//!    `/metrics`, as the difference of two scrapes around the phase;
//! 4. exactness: the project streamed back holds every written id exactly once, and the Kafka
//!    records ingest produced were all stored (none dead-lettered).
//!
//! Phases: `GET /health`; batched writes at full speed; a paced phase (one request of one trace
//! every --paced-interval-ms) for the lag at low load; the batch-1 baseline. With --sweep-records
//! and/or --sweep-wait-ms, a fresh deployment per consumer setting runs the batched and paced
//! phases and one summary row is printed per setting.

use crate::report::print_log_problems;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::Args;
use crate::client::{AckSink, Api, Job, Outcome, send_all};
use crate::machine::{Machine, loadavg, process_cpu};
use crate::report::percentile;
use crate::stack::{PARTITIONS, Stack, StackConfig, TOPIC};
use crate::verify::verify_stream;
use crate::workload::{Written, generate};
use crate::{pct, senders, split_project};

pub(crate) async fn run(args: &Args) -> anyhow::Result<Vec<String>> {
    if args.url.is_some() {
        bail!("--distributed starts its own deployment; it does not take --url");
    }
    if args.calls() == 0 || args.batch == 0 || args.concurrency == 0 || args.poll_ms == 0 {
        bail!("--calls, --batch, --concurrency and --poll-ms must be positive");
    }
    let project = match &args.project {
        Some(p) => p.clone(),
        None => format!("bench/run-{}", &Uuid::new_v4().simple().to_string()[..8]),
    };
    split_project(&project)?;
    let machine = Machine::detect();
    let load0 = loadavg();
    let mut problems = Vec::new();
    if args.sweep_records.is_empty() && args.sweep_wait_ms.is_empty() {
        full(args, &project, &machine, &mut problems).await?;
    } else {
        sweep(args, &project, &machine, &mut problems).await?;
    }
    println!(
        "\nLoad average (1 min) at start / end: {} / {} on {} CPUs.",
        opt(load0, 2),
        opt(loadavg(), 2),
        machine.nproc
    );
    Ok(problems)
}

/// One deployment and an API client for it.
pub(crate) struct Deployment {
    pub(crate) stack: Stack,
    pub(crate) api: Api,
    pub(crate) client: reqwest::Client,
    pub(crate) key: String,
    pub(crate) version: String,
}

pub(crate) async fn deploy(
    args: &Args,
    batch_records: Option<u64>,
    batch_wait_ms: Option<u64>,
) -> anyhow::Result<Deployment> {
    let key = args.api_key.clone().unwrap_or_else(|| format!("bench-{}", Uuid::new_v4().simple()));
    let tansu = crate::stack::tansu_path(args.tansu.as_deref());
    let cfg = StackConfig {
        heddle_bin: &args.heddle_bin,
        tansu_bin: &tansu,
        python: &args.python,
        adapter: &args.clickhouse_adapter,
        clickhouse_url: args.clickhouse_url.as_deref(),
        clickhouse_database: args.clickhouse_database.as_deref(),
        key: &key,
        batch_records,
        batch_wait_ms,
        keep: args.keep_data,
    };
    eprintln!(
        "starting tansu, {}, heddle serve --kafka (batch-records {}, batch-wait-ms {}) ...",
        if args.clickhouse_url.is_some() {
            "ClickHouse at --clickhouse-url"
        } else {
            "the chdb adapter"
        },
        batch_records.map_or("default".into(), |n| n.to_string()),
        batch_wait_ms.map_or("default".into(), |n| n.to_string()),
    );
    let stack = tokio::task::block_in_place(|| Stack::start(&cfg))?;
    eprintln!(
        "  heddle {} (pid {}), tansu {} (pid {}), ClickHouse {}{}",
        stack.url,
        stack.heddle_pid(),
        stack.brokers,
        stack.tansu_pid(),
        stack.clickhouse_url,
        stack.clickhouse_pid().map_or(String::new(), |p| format!(" (pid {p})")),
    );
    let client =
        crate::client::http_client(args.concurrency.max(1) * 2 + 4, Duration::from_secs(600))?;
    let api = Api { client: client.clone(), base: stack.url.clone(), key: key.clone() };
    let version = api.version().await.unwrap_or_else(|e| format!("unknown ({e:#})"));
    Ok(Deployment { stack, api, client, key, version })
}

/// CPU seconds of the deployment's processes and of the bench at one moment.
#[derive(Clone, Copy)]
pub(crate) struct CpuSnap {
    pub(crate) heddle: Option<f64>,
    pub(crate) tansu: Option<f64>,
    pub(crate) clickhouse: Option<f64>,
    pub(crate) bench: Option<f64>,
}

impl CpuSnap {
    pub(crate) fn take(stack: &Stack) -> CpuSnap {
        CpuSnap {
            heddle: process_cpu(stack.heddle_pid()),
            tansu: process_cpu(stack.tansu_pid()),
            clickhouse: stack.clickhouse_pid().and_then(process_cpu),
            bench: process_cpu(std::process::id()),
        }
    }

    /// CPU used between `self` and `later`.
    pub(crate) fn until(&self, later: &CpuSnap) -> CpuSnap {
        let d = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        CpuSnap {
            heddle: d(self.heddle, later.heddle),
            tansu: d(self.tansu, later.tansu),
            clickhouse: d(self.clickhouse, later.clickhouse),
            bench: d(self.bench, later.bench),
        }
    }

    /// heddle + tansu + ClickHouse; `None` when ClickHouse's CPU is not measurable (a real
    /// server elsewhere).
    pub(crate) fn stack_total(&self) -> Option<f64> {
        Some(self.heddle? + self.tansu? + self.clickhouse?)
    }
}

/// The server's visibility-lag histogram (cumulative buckets) and the pipeline counters.
#[derive(Clone, Default)]
pub(crate) struct Scrape {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
    pub(crate) produced: f64,
    stored: f64,
    dead_lettered: f64,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut s = Scrape::default();
        let num = |v: &str| v.trim().parse::<f64>().unwrap_or(0.0);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("heddle_visibility_lag_seconds_bucket{le=\"")
                && let Some((le, v)) = rest.split_once("\"}")
            {
                let le = if le == "+Inf" { f64::INFINITY } else { num(le) };
                s.buckets.push((le, num(v)));
            } else if let Some(v) = line.strip_prefix("heddle_visibility_lag_seconds_sum ") {
                s.sum = num(v);
            } else if let Some(v) = line.strip_prefix("heddle_visibility_lag_seconds_count ") {
                s.count = num(v);
            } else if let Some(v) =
                line.strip_prefix("heddle_produced_records_total{outcome=\"acked\"} ")
            {
                s.produced = num(v);
            } else if let Some(v) =
                line.strip_prefix("heddle_consumed_records_total{outcome=\"stored\"} ")
            {
                s.stored = num(v);
            } else if let Some(v) =
                line.strip_prefix("heddle_consumed_records_total{outcome=\"dead_lettered\"} ")
            {
                s.dead_lettered = num(v);
            }
        }
        s.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        s
    }

    /// What happened between `before` and `self`.
    pub(crate) fn since(&self, before: &Scrape) -> Scrape {
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, n)| {
                let b = before.buckets.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, n)| *n);
                (le, n - b)
            })
            .collect();
        Scrape {
            buckets,
            sum: self.sum - before.sum,
            count: self.count - before.count,
            produced: self.produced - before.produced,
            stored: self.stored - before.stored,
            dead_lettered: self.dead_lettered - before.dead_lettered,
        }
    }

    /// Quantile `q` of the lag histogram in seconds, interpolated linearly inside the bucket as
    /// Prometheus' `histogram_quantile` does (so only as fine as the bucket bounds).
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, cum) in &self.buckets {
            if cum >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let width = cum - below;
                let frac = if width > 0.0 { (rank - below) / width } else { 1.0 };
                return Some(lower + (le - lower) * frac);
            }
            (lower, below) = (le, cum);
        }
        Some(lower)
    }

    fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }
}

/// Probe lags measured by the bench.
#[derive(Default)]
pub(crate) struct Lag {
    /// Ack → first poll answer containing the call, sorted.
    pub(crate) lags: Vec<Duration>,
    /// Probes still invisible at the deadline.
    unseen: usize,
    /// Round trips of the polls, sorted.
    rtts: Vec<Duration>,
    errors: Vec<String>,
}

/// How the requests of a phase are sent.
enum Pace {
    /// As fast as possible from this many senders.
    Concurrent(usize),
    /// One request at a time, started this far apart.
    Every(Duration),
}

/// One phase: sent, watched until visible, scraped.
pub(crate) struct Watched {
    pub(crate) out: Outcome,
    /// First send → `query_stats` counted every acknowledged call.
    pub(crate) visible: Option<Duration>,
    pub(crate) last_count: u64,
    pub(crate) lag: Lag,
    pub(crate) server: Scrape,
    pub(crate) cpu_ack: CpuSnap,
    pub(crate) cpu_visible: CpuSnap,
}

impl Watched {
    pub(crate) fn visible_rate(&self) -> Option<f64> {
        self.visible.map(|v| self.out.ok_calls as f64 / v.as_secs_f64().max(1e-9))
    }

    pub(crate) fn ack_rate(&self) -> f64 {
        self.out.ok_calls as f64 / self.out.wall.as_secs_f64().max(1e-9)
    }

    /// Records the phase's problems.
    pub(crate) fn check(&self, phase: &str, problems: &mut Vec<String>) {
        self.out.check(phase, problems);
        if self.visible.is_none() {
            problems.push(format!(
                "{phase}: calls/query_stats still counted {} of {} acknowledged calls at the \
                 deadline (--visible-timeout-s)",
                self.last_count, self.out.ok_calls
            ));
        } else if self.last_count != self.out.ok_calls as u64 {
            problems.push(format!(
                "{phase}: calls/query_stats counts {}, but {} calls were acknowledged",
                self.last_count, self.out.ok_calls
            ));
        }
        if self.lag.unseen > 0 {
            problems.push(format!(
                "{phase}: {} probe call(s) never became readable through calls/stream_query",
                self.lag.unseen
            ));
        }
        for e in self.lag.errors.iter().take(5) {
            problems.push(format!("{phase}: a visibility poll failed: {e}"));
        }
        if self.server.dead_lettered > 0.0 {
            problems.push(format!(
                "{phase}: the consumer dead-lettered {} record(s)",
                self.server.dead_lettered
            ));
        }
        if self.server.stored != self.server.produced {
            problems.push(format!(
                "{phase}: ingest produced {} Kafka records but the consumer stored {}",
                self.server.produced, self.server.stored
            ));
        }
    }
}

/// Keeps the probe id on at most `max` jobs, evenly spread.
fn thin_probes(jobs: &mut [Job], max: usize) {
    let n = jobs.len();
    for (i, job) in jobs.iter_mut().enumerate() {
        if !keeps_probe(i, n, max) {
            job.probe = None;
        }
    }
}

/// Whether request `i` of `n` keeps its probe when at most `max` are kept, evenly spread.
pub(crate) fn keeps_probe(i: usize, n: usize, max: usize) -> bool {
    max > 0 && i.is_multiple_of(n.div_ceil(max).max(1))
}

async fn write_watched(
    d: &Deployment,
    args: &Args,
    project: &str,
    mut jobs: Vec<Job>,
    pace: Pace,
) -> Watched {
    let (entity, name) = split_project(project).expect("checked project");
    let url = format!("{}/v2/{}/{}/calls/complete", d.stack.url, pct(entity), pct(name));
    thin_probes(&mut jobs, args.lag_samples);
    let expected: usize = jobs.iter().map(|j| j.calls).sum();
    let (client, key) = (&d.client, d.key.as_str());
    watch_phase(d, args, project, expected, |acks| async move {
        match pace {
            Pace::Concurrent(n) => send_all(client, &url, Some(key), jobs, n, Some(&acks)).await,
            Pace::Every(gap) => send_paced(client, &url, key, jobs, gap, &acks).await,
        }
    })
    .await
}

/// Runs `send` (which must report every acknowledged probe to the sink it is given) while
/// watching `project` until `calls/query_stats` counts every acknowledged call (`expected` at
/// most), measuring probe lags, the server's lag histogram and CPU use.
pub(crate) async fn watch_phase<F, Fut>(
    d: &Deployment,
    args: &Args,
    project: &str,
    expected: usize,
    send: F,
) -> Watched
where
    F: FnOnce(AckSink) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let poll = Duration::from_millis(args.poll_ms);
    let before = scrape(&d.api).await;

    let (ack_tx, ack_rx) = mpsc::unbounded_channel();
    let (target_tx, target_rx) = watch::channel(expected as u64);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.visible_timeout_s);
    let cpu0 = CpuSnap::take(&d.stack);
    let lag_task =
        tokio::spawn(lag_poller(d.api.clone(), project.to_owned(), ack_rx, poll, deadline));
    let count_task = tokio::spawn(count_poller(
        d.api.clone(),
        project.to_owned(),
        target_rx,
        start,
        poll,
        deadline,
    ));
    let out = send(ack_tx).await;
    let cpu1 = CpuSnap::take(&d.stack);
    let _ = target_tx.send(out.ok_calls as u64);
    let (visible, last_count) = count_task.await.unwrap_or((None, 0));
    let cpu2 = CpuSnap::take(&d.stack);
    let lag = lag_task.await.unwrap_or_default();
    drop(target_tx);

    // The consumer observes the histogram just after its insert: wait until it caught up.
    let settle = Instant::now() + Duration::from_secs(10);
    let server = loop {
        let server = scrape(&d.api).await.since(&before);
        if server.stored + server.dead_lettered >= server.produced || Instant::now() > settle {
            break server;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Watched {
        out,
        visible,
        last_count,
        lag,
        server,
        cpu_ack: cpu0.until(&cpu1),
        cpu_visible: cpu0.until(&cpu2),
    }
}

pub(crate) async fn scrape(api: &Api) -> Scrape {
    match api.metrics().await {
        Ok(text) => Scrape::parse(&text),
        Err(e) => {
            eprintln!("  warning: {e:#}");
            Scrape::default()
        }
    }
}

async fn send_paced(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    jobs: Vec<Job>,
    gap: Duration,
    acks: &AckSink,
) -> Outcome {
    let start = Instant::now();
    let mut total = Outcome::default();
    for (i, job) in jobs.into_iter().enumerate() {
        tokio::time::sleep_until((start + gap * i as u32).into()).await;
        total.absorb(send_all(client, url, Some(key), vec![job], 1, Some(acks)).await);
    }
    total.wall = start.elapsed();
    total.latencies.sort_unstable();
    total
}

/// Polls `calls/query_stats` until it counts the target (which the sender lowers to the number
/// of acknowledged calls once it is done); answers when that poll's answer arrived, after
/// `start`, and the last count.
async fn count_poller(
    api: Api,
    project: String,
    target: watch::Receiver<u64>,
    start: Instant,
    poll: Duration,
    deadline: Instant,
) -> (Option<Duration>, u64) {
    let mut last = 0;
    loop {
        let t = Instant::now();
        match api.count(&project).await {
            Ok(n) => {
                last = n;
                if n >= *target.borrow() {
                    return (Some(start.elapsed()), n);
                }
            }
            Err(e) => eprintln!("  warning: {e:#}"),
        }
        if t > deadline {
            return (None, last);
        }
        tokio::time::sleep_until((t + poll).into()).await;
    }
}

/// Takes acknowledged probe ids as they come and polls `calls/stream_query` for the ones not yet
/// seen; a probe's lag is its ack → the arrival of the first answer that contains it.
async fn lag_poller(
    api: Api,
    project: String,
    mut acks: mpsc::UnboundedReceiver<(String, Instant)>,
    poll: Duration,
    deadline: Instant,
) -> Lag {
    let mut lag = Lag::default();
    let mut pending: HashMap<String, Instant> = HashMap::new();
    let mut closed = false;
    loop {
        let t = Instant::now();
        loop {
            match acks.try_recv() {
                Ok((id, at)) => {
                    pending.insert(id, at);
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed && pending.is_empty() {
            break;
        }
        if t > deadline {
            lag.unseen = pending.len();
            break;
        }
        if !pending.is_empty() {
            let ids: Vec<&str> = pending.keys().take(1000).map(String::as_str).collect();
            match api.present(&project, &ids).await {
                Ok(found) => {
                    let now = Instant::now();
                    lag.rtts.push(now - t);
                    for id in found {
                        if let Some(at) = pending.remove(&id) {
                            lag.lags.push(now.saturating_duration_since(at));
                        }
                    }
                }
                Err(e) => {
                    if lag.errors.len() < 20 {
                        lag.errors.push(format!("{e:#}"));
                    }
                }
            }
        }
        tokio::time::sleep_until((t + poll).into()).await;
    }
    lag.lags.sort_unstable();
    lag.rtts.sort_unstable();
    lag
}

/// Streams `project` back and checks it against what was written.
pub(crate) async fn exactly_once(
    api: &Api,
    project: &str,
    written: &Written,
    problems: &mut Vec<String>,
) -> Option<crate::client::StreamRead> {
    let before = problems.len();
    match api.stream_all(project).await {
        Ok(read) => {
            verify_stream(
                &read,
                project,
                &written.ids,
                &written.sample,
                written.sample_check,
                problems,
            );
            for p in &mut problems[before..] {
                *p = format!("{project}: {p}");
            }
            Some(read)
        }
        Err(e) => {
            problems.push(format!("{project}: calls/stream_query failed: {e:#}"));
            None
        }
    }
}

fn paced_jobs(args: &Args, project: &str) -> Written {
    let per_trace = args.children + 1;
    generate(project, args.paced_requests * per_trace, per_trace, args.children, 3)
}

async fn full(
    args: &Args,
    project: &str,
    machine: &Machine,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (entity, name) = split_project(project)?;
    let paced_project = format!("{entity}/{name}-paced");
    let baseline_project = format!("{entity}/{name}-batch1");
    let d = deploy(args, args.batch_records, args.batch_wait_ms).await?;
    let nproc = machine.nproc as f64;
    let mut rows: Vec<String> = Vec::new();
    let mut lag_rows: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    // 1. HTTP overhead ceiling.
    if args.health_requests > 0 {
        eprintln!("GET /health x {} ...", args.health_requests);
        let jobs =
            (0..args.health_requests).map(|_| Job { body: None, calls: 0, probe: None }).collect();
        let c0 = CpuSnap::take(&d.stack);
        let out = send_all(
            &d.client,
            &format!("{}/health", d.stack.url),
            None,
            jobs,
            args.concurrency,
            None,
        )
        .await;
        let cpu = c0.until(&CpuSnap::take(&d.stack));
        out.check("GET /health", problems);
        let secs = out.wall.as_secs_f64().max(1e-9);
        rows.push(row(
            &format!("`GET /health`, {}", senders(args.concurrency)),
            out.ok_requests,
            None,
            secs,
            nproc,
            (pctl(&out.latencies, 0.5), pctl(&out.latencies, 0.99)),
            None,
            &cpu,
        ));
        notes.push(format!("`GET /health`: {:.0} requests/s.", out.ok_requests as f64 / secs));
    }

    // 2. Batched writes at full speed.
    eprintln!("generating {} calls in batches of {} ...", args.calls(), args.batch);
    let mut written = generate(project, args.calls(), args.batch, args.children, 1);
    let item_bytes = written.item_bytes / args.calls();
    let jobs = std::mem::take(&mut written.jobs);
    eprintln!("writing with {} senders, watching visibility ...", args.concurrency);
    let w = write_watched(&d, args, project, jobs, Pace::Concurrent(args.concurrency)).await;
    w.check("batched writes", problems);
    push_phase_rows(
        &mut rows,
        &mut lag_rows,
        &format!("write, batch {}, {}", args.batch, senders(args.concurrency)),
        "batched, full speed",
        &w,
        nproc,
    );
    let records_per_request = w.server.produced / w.out.ok_requests.max(1) as f64;

    // 3. Read-back and exactness.
    eprintln!("streaming the project back ...");
    let c0 = CpuSnap::take(&d.stack);
    let read = exactly_once(&d.api, project, &written, problems).await;
    let cpu = c0.until(&CpuSnap::take(&d.stack));
    if let Some(read) = &read {
        let secs = read.wall.as_secs_f64().max(1e-9);
        rows.push(row(
            "read, `calls/stream_query` (1 stream)",
            1,
            Some(read.lines),
            secs,
            nproc,
            (Some(read.ttfb), None),
            Some(read.body.len() as f64 / 1e6 / secs),
            &cpu,
        ));
    }
    let t = Instant::now();
    match d.api.count(project).await {
        Ok(n) => {
            if n != args.calls() as u64 {
                problems.push(format!("calls/query_stats counts {n}, {} were sent", args.calls()));
            }
            let e = t.elapsed();
            rows.push(format!(
                "| `calls/query_stats` (count = {n}) | 1 | – | {:.3} | – | – | {} | – | – | – | – | – | – | – |",
                e.as_secs_f64(),
                ms(Some(e))
            ));
        }
        Err(e) => problems.push(format!("calls/query_stats failed: {e:#}")),
    }

    // 4. Paced: the lag at low load.
    let mut paced_written = None;
    if args.paced_requests > 0 {
        let mut paced = paced_jobs(args, &paced_project);
        eprintln!(
            "paced: {} requests of one trace ({} calls), one every {} ms ...",
            args.paced_requests,
            args.children + 1,
            args.paced_interval_ms
        );
        let jobs = std::mem::take(&mut paced.jobs);
        let gap = Duration::from_millis(args.paced_interval_ms);
        let w = write_watched(&d, args, &paced_project, jobs, Pace::Every(gap)).await;
        w.check("paced writes", problems);
        push_phase_rows(
            &mut rows,
            &mut lag_rows,
            &format!(
                "paced, 1 request of {} calls every {} ms",
                args.children + 1,
                args.paced_interval_ms
            ),
            &format!("paced, 1 request / {} ms", args.paced_interval_ms),
            &w,
            nproc,
        );
        paced_written = Some(paced);
    }

    // 5. One call per request.
    let mut base_written = None;
    if args.baseline_calls > 0 {
        let mut base = generate(&baseline_project, args.baseline_calls, 1, args.children, 2);
        eprintln!("writing {} calls one per request ...", args.baseline_calls);
        let jobs = std::mem::take(&mut base.jobs);
        let w =
            write_watched(&d, args, &baseline_project, jobs, Pace::Concurrent(args.concurrency))
                .await;
        w.check("batch-1 writes", problems);
        push_phase_rows(
            &mut rows,
            &mut lag_rows,
            &format!("write, batch 1, {} (baseline)", senders(args.concurrency)),
            "batch 1, full speed",
            &w,
            nproc,
        );
        base_written = Some(base);
    }
    for (p, wr) in [(&paced_project, &paced_written), (&baseline_project, &base_written)] {
        if let Some(wr) = wr {
            exactly_once(&d.api, p, wr, problems).await;
        }
    }

    // Report.
    let adapter = d.stack.uses_adapter();
    println!("{}", machine.line());
    println!(
        "Deployment (started by the bench): heddle {} `serve --kafka --clickhouse` at {}; {} \
         at {} (topic `{TOPIC}`, {PARTITIONS} partitions, SQLite storage); ClickHouse {} at {}{}. \
         Consumer: --batch-records {}, --batch-wait-ms {}.",
        d.version,
        d.stack.url,
        d.stack.tansu_version,
        d.stack.brokers,
        d.stack.clickhouse_version,
        d.stack.clickhouse_url,
        if adapter {
            " (chdb behind the Python HTTP adapter `tests/support/clickhouse_http.py`)"
        } else {
            ""
        },
        args.batch_records.map_or("500 (default)".into(), |n| n.to_string()),
        args.batch_wait_ms.map_or("250 (default)".into(), |n| n.to_string()),
    );
    println!(
        "Project `{project}`; {} calls/trace (1 root + {} children), ~{item_bytes} B of JSON \
         per call; {records_per_request:.2} Kafka records per batched request.",
        args.children + 1,
        args.children,
    );
    println!("Command: `{}`", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    println!(
        "| Phase | OK requests | Calls | Wall s | Calls/s | Calls/s per core | p50 ms | p99 ms | \
         MB/s | heddle CPU s | tansu CPU s | ClickHouse CPU s | bench CPU s | Calls per stack CPU-s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!("{r}");
    }
    println!();
    println!(
        "| Load | Probes seen | bench lag p50 ms | p99 ms | max ms | poll round trip p50 ms | \
         server records | server lag p50 ms | p99 ms | mean ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &lag_rows {
        println!("{r}");
    }
    if let Some(read) = &read {
        println!(
            "\nExactness: `calls/stream_query` returned {} rows for {} calls written{}.",
            read.lines,
            args.calls(),
            if problems.iter().any(|p| p.contains("stream_query")) {
                " — see the problems below"
            } else {
                ", each written id exactly once (no duplicates, none missing, none unknown), \
                 the sample call unchanged; the paced and batch-1 projects likewise"
            }
        );
    }
    print_notes(args, machine, adapter);
    for n in &notes {
        println!("{n}");
    }
    print_log_problems("Log problems", &d.stack.log_problems());
    Ok(())
}

fn print_notes(args: &Args, machine: &Machine, adapter: bool) {
    println!(
        "\nAck rows: a request counts when heddle answered 200, i.e. every Kafka record of it was \
         acknowledged (acks=all). Visible rows: same calls, wall time from the first send until \
         `calls/query_stats` (polled every {} ms) counted all of them. Per core = calls/s ÷ nproc \
         ({}); the bench, heddle, tansu{} share those CPUs. CPU columns: user + system time \
         from /proc of each process over the row's wall time; calls per stack CPU-s counts \
         heddle + tansu + ClickHouse.",
        args.poll_ms,
        machine.nproc,
        if adapter { " and the ClickHouse adapter" } else { "" },
    );
    println!(
        "Lag: \"bench\" is, for one probe call per request (at most {}), the time from the \
         request's 200 to the arrival of the first `calls/stream_query` answer (filtered by call \
         ids, polled every {} ms in a background task) that contains it — an upper bound, \
         coarse by up to one poll interval plus a poll round trip. \"server\" is the \
         `heddle_visibility_lag_seconds` histogram (per Kafka record: produce timestamp → its \
         batch stored) from `/metrics`, scraped before and after the phase; its quantiles are \
         interpolated inside buckets 50/100/250/500 ms/1/2.5/5 s…, its mean is exact.",
        args.lag_samples, args.poll_ms,
    );
    if adapter {
        println!(
            "ClickHouse here is chdb behind a Python HTTP adapter that runs one query at a time \
             (inserted rows go through a temp file and INSERT … FROM INFILE; the bench's own \
             polls queue behind the same lock): much slower than a real ClickHouse server, so \
             the visible and lag numbers are bounded by the adapter, not by heddle. Use \
             --clickhouse-url for a real server."
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn row(
    name: &str,
    requests: usize,
    calls: Option<usize>,
    secs: f64,
    nproc: f64,
    (p50, p99): (Option<Duration>, Option<Duration>),
    mb_s: Option<f64>,
    cpu: &CpuSnap,
) -> String {
    let (calls_s, rate, per_core, per_cpu) = match calls {
        Some(n) => {
            let rate = n as f64 / secs;
            let per_cpu = cpu.stack_total().filter(|&c| c > 0.0).map(|c| n as f64 / c);
            (n.to_string(), format!("{rate:.0}"), format!("{:.0}", rate / nproc), opt(per_cpu, 0))
        }
        None => ("–".into(), "–".into(), "–".into(), "–".into()),
    };
    format!(
        "| {name} | {requests} | {calls_s} | {secs:.3} | {rate} | {per_core} | {} | {} | {} | {} | \
         {} | {} | {} | {per_cpu} |",
        ms(p50),
        ms(p99),
        opt(mb_s, 1),
        opt(cpu.heddle, 2),
        opt(cpu.tansu, 2),
        opt(cpu.clickhouse, 2),
        opt(cpu.bench, 2),
    )
}

fn push_phase_rows(
    rows: &mut Vec<String>,
    lag_rows: &mut Vec<String>,
    name: &str,
    load: &str,
    w: &Watched,
    nproc: f64,
) {
    let secs = w.out.wall.as_secs_f64().max(1e-9);
    let mb = w.out.bytes_sent as f64 / 1e6 / secs;
    let lat = (pctl(&w.out.latencies, 0.5), pctl(&w.out.latencies, 0.99));
    rows.push(row(
        &format!("{name}: **acknowledged**"),
        w.out.ok_requests,
        Some(w.out.ok_calls),
        secs,
        nproc,
        lat,
        Some(mb),
        &w.cpu_ack,
    ));
    match w.visible {
        Some(v) => rows.push(row(
            &format!("↳ **visible** (first send → `query_stats` = {})", w.last_count),
            w.out.ok_requests,
            Some(w.out.ok_calls),
            v.as_secs_f64().max(1e-9),
            nproc,
            (None, None),
            None,
            &w.cpu_visible,
        )),
        None => {
            rows.push(format!("| ↳ visible: not within the deadline ({} counted) |", w.last_count))
        }
    }
    lag_rows.push(lag_row(load, w));
}

pub(crate) fn lag_row(load: &str, w: &Watched) -> String {
    let l = &w.lag.lags;
    let s = &w.server;
    let sec = |v: Option<f64>| v.map_or("–".into(), |v| format!("{:.0}", v * 1e3));
    format!(
        "| {load} | {}{} | {} | {} | {} | {} | {:.0} | {} | {} | {} |",
        l.len(),
        if w.lag.unseen > 0 { format!(" ({} unseen)", w.lag.unseen) } else { String::new() },
        ms0(pctl(l, 0.5)),
        ms0(pctl(l, 0.99)),
        ms0(l.last().copied()),
        ms0(pctl(&w.lag.rtts, 0.5)),
        s.count,
        sec(s.quantile(0.5)),
        sec(s.quantile(0.99)),
        sec(s.mean()),
    )
}

/// One fresh deployment per consumer setting; batched and paced phases; one row each.
async fn sweep(
    args: &Args,
    project: &str,
    machine: &Machine,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let list = |v: &[u64]| -> Vec<Option<u64>> {
        if v.is_empty() { vec![None] } else { v.iter().copied().map(Some).collect() }
    };
    let (entity, name) = split_project(project)?;
    let paced_project = format!("{entity}/{name}-paced");
    let nproc = machine.nproc as f64;
    let mut rows = Vec::new();
    let mut versions = String::new();
    let mut adapter = true;
    for records in list(&args.sweep_records) {
        for wait in list(&args.sweep_wait_ms) {
            let label = format!(
                "{} | {}",
                records.map_or("500 (default)".into(), |n| n.to_string()),
                wait.map_or("250 (default)".into(), |n| n.to_string())
            );
            let d = match deploy(args, records, wait).await {
                Ok(d) => d,
                Err(e) => {
                    problems.push(format!("setting {label}: deployment failed: {e:#}"));
                    continue;
                }
            };
            adapter = d.stack.uses_adapter();
            versions = format!(
                "heddle {}, {}, ClickHouse {}{}",
                d.version,
                d.stack.tansu_version,
                d.stack.clickhouse_version,
                if adapter { " (chdb behind the Python HTTP adapter)" } else { "" }
            );
            let mut local = Vec::new();
            let mut written = generate(project, args.calls(), args.batch, args.children, 1);
            let jobs = std::mem::take(&mut written.jobs);
            eprintln!("  batched: {} calls, batch {} ...", args.calls(), args.batch);
            let w =
                write_watched(&d, args, project, jobs, Pace::Concurrent(args.concurrency)).await;
            w.check("batched writes", &mut local);
            exactly_once(&d.api, project, &written, &mut local).await;
            let paced = if args.paced_requests > 0 {
                eprintln!("  paced: {} requests ...", args.paced_requests);
                let mut pw = paced_jobs(args, &paced_project);
                let jobs = std::mem::take(&mut pw.jobs);
                let gap = Duration::from_millis(args.paced_interval_ms);
                let p = write_watched(&d, args, &paced_project, jobs, Pace::Every(gap)).await;
                p.check("paced writes", &mut local);
                Some(p)
            } else {
                None
            };
            let vis = w.visible_rate();
            let drain = w.visible.map(|v| v.saturating_sub(w.out.wall));
            let l = &w.lag.lags;
            let (pl, ps) = match &paced {
                Some(p) => (
                    format!("{} / {}", ms0(pctl(&p.lag.lags, 0.5)), ms0(pctl(&p.lag.lags, 0.99))),
                    format!("{} / {}", sec0(p.server.quantile(0.5)), sec0(p.server.quantile(0.99))),
                ),
                None => ("–".into(), "–".into()),
            };
            rows.push(format!(
                "| {label} | {:.0} | {:.0} | {} | {} | {} | {} / {} | {} / {} | {pl} | {ps} | {} | {} | {} |",
                w.server.produced,
                w.ack_rate(),
                opt(vis, 0),
                opt(vis.map(|v| v / nproc), 0),
                opt(drain.map(|d| d.as_secs_f64()), 2),
                ms0(pctl(l, 0.5)),
                ms0(pctl(l, 0.99)),
                sec0(w.server.quantile(0.5)),
                sec0(w.server.quantile(0.99)),
                opt(w.cpu_visible.heddle, 2),
                opt(w.cpu_visible.clickhouse, 2),
                if local.is_empty() { "ok".to_owned() } else { format!("{} problem(s)", local.len()) },
            ));
            for p in local {
                problems.push(format!("setting {label}: {p}"));
            }
            for line in d.stack.log_problems().into_iter().take(3) {
                problems.push(format!("setting {label}: log: {line}"));
            }
            drop(d);
        }
    }
    println!("{}", machine.line());
    println!("Deployment per setting (fresh, started by the bench): {versions}.");
    println!(
        "Workload per setting: {} calls in requests of {} from {}, then {} paced requests of \
         one trace, one every {} ms.",
        args.calls(),
        args.batch,
        senders(args.concurrency),
        args.paced_requests,
        args.paced_interval_ms
    );
    println!("Command: `{}`", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    println!(
        "| batch-records | batch-wait-ms | Kafka records | ack calls/s | visible calls/s | visible per core | \
         drain after last ack s | lag p50 / p99 ms (bench) | lag p50 / p99 ms (server) | paced \
         lag p50 / p99 ms (bench) | paced lag p50 / p99 ms (server) | heddle CPU s | ClickHouse \
         CPU s | checks |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!("{r}");
    }
    print_notes(args, machine, adapter);
    Ok(())
}

pub(crate) fn pctl(sorted: &[Duration], p: f64) -> Option<Duration> {
    percentile(sorted, p)
}

pub(crate) fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.2}", d.as_secs_f64() * 1e3))
}

pub(crate) fn ms0(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
}

fn sec0(s: Option<f64>) -> String {
    s.map_or("–".into(), |s| format!("{:.0}", s * 1e3))
}

pub(crate) fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x\n\
        heddle_consumed_records_total{outcome=\"stored\"} 10\n\
        heddle_produced_records_total{outcome=\"acked\"} 10\n\
        heddle_visibility_lag_seconds_bucket{le=\"0.1\"} 0\n\
        heddle_visibility_lag_seconds_bucket{le=\"0.25\"} 4\n\
        heddle_visibility_lag_seconds_bucket{le=\"0.5\"} 10\n\
        heddle_visibility_lag_seconds_bucket{le=\"+Inf\"} 10\n\
        heddle_visibility_lag_seconds_sum 3\n\
        heddle_visibility_lag_seconds_count 10\n";

    #[test]
    fn histogram_quantiles_interpolate_inside_buckets() {
        let s = Scrape::parse(TEXT);
        assert_eq!((s.count, s.stored, s.produced), (10.0, 10.0, 10.0));
        // rank 5 lies in (0.25, 0.5], one sixth of the way into its 6 observations.
        let p50 = s.quantile(0.5).unwrap();
        assert!((p50 - (0.25 + 0.25 / 6.0)).abs() < 1e-9, "{p50}");
        assert!((s.quantile(0.99).unwrap() - (0.25 + 0.25 * 5.9 / 6.0)).abs() < 1e-9);
        assert_eq!(s.mean(), Some(0.3));
        let none = s.since(&s);
        assert_eq!(none.quantile(0.5), None);
    }

    #[test]
    fn probes_are_thinned_evenly() {
        let mut jobs: Vec<Job> =
            (0..10).map(|i| Job { body: None, calls: 1, probe: Some(i.to_string()) }).collect();
        thin_probes(&mut jobs, 3);
        let kept: Vec<_> = jobs.iter().filter_map(|j| j.probe.clone()).collect();
        assert_eq!(kept, ["0", "4", "8"]);
    }
}

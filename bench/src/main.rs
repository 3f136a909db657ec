//! `heddle-bench`: call write and read throughput of a heddle server, measured over HTTP the way
//! the weave SDK talks to it.
//!
//! Phases, all against one server (its own, started from `--heddle-bin` on a temporary data dir,
//! unless `--url` names a running one):
//!
//! 1. `GET /health` at `--concurrency` (the HTTP round-trip ceiling; `--health-requests 0` skips).
//! 2. Batched writes: `--calls` complete calls (traces of one root and `--children` children, every
//!    CompleteCall key present as the SDK sends them) in `POST /v2/{entity}/{project}/calls/complete`
//!    bodies of `--batch` items, from `--concurrency` concurrent senders. Bodies are generated and
//!    serialised before the clock starts.
//! 3. Read-back: `POST /calls/stream_query` with `limit: null` streams every call of the project as
//!    JSONL; the lines are counted while streaming and afterwards checked one by one (count, ids,
//!    project, one sample row's content); `POST /calls/query_stats` must report the same count.
//! 4. Baseline: `--baseline-calls` calls sent one per request into a second project, same senders.
//!
//! Prints a markdown table on stdout (progress goes to stderr). Any non-2xx answer, transport
//! error or count mismatch is reported verbatim and makes the command exit non-zero; nothing is
//! retried.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, TimeDelta, Utc};
use clap::Parser;
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

#[derive(Parser, Debug)]
#[command(
    name = "heddle-bench",
    version,
    about = "Measure heddle's call write and read throughput over HTTP"
)]
struct Args {
    /// Base URL of a running heddle (e.g. http://127.0.0.1:6345). Without it the bench starts its
    /// own server from --heddle-bin on a temporary data dir and stops it at the end.
    #[arg(long)]
    url: Option<String>,
    /// API key sent as `Authorization: Bearer KEY`. Required with --url; random otherwise.
    #[arg(long, env = "HEDDLE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The heddle binary to start when --url is absent.
    #[arg(long, default_value = "target/release/heddle")]
    heddle_bin: PathBuf,
    /// Calls written in the batched phase (and read back).
    #[arg(long, default_value_t = 100_000)]
    calls: usize,
    /// Calls per `calls/complete` request in the batched phase.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Concurrent senders (one keep-alive connection each).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Calls sent one per request for the batch-size-1 baseline (0 skips it).
    #[arg(long, default_value_t = 5_000)]
    baseline_calls: usize,
    /// `GET /health` requests for the HTTP-overhead baseline (0 skips it).
    #[arg(long, default_value_t = 20_000)]
    health_requests: usize,
    /// Children per trace; every trace is one root plus this many children.
    #[arg(long, default_value_t = 4)]
    children: usize,
    /// Project ("entity/project") to write into; it must hold no calls yet. The baseline writes
    /// into "<project>-batch1". Default: bench/run-<random>.
    #[arg(long)]
    project: Option<String>,
    /// Keep the spawned server's temporary directory (data and server.log) instead of deleting it.
    #[arg(long)]
    keep_data: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let problems = run(args).await?;
    if !problems.is_empty() {
        eprintln!("\nFAILED: the server misbehaved or the run is incomplete:");
        for p in &problems {
            eprintln!("  - {p}");
        }
        bail!("{} problem(s), see above", problems.len());
    }
    Ok(())
}

async fn run(args: Args) -> anyhow::Result<Vec<String>> {
    if args.calls == 0 || args.batch == 0 || args.concurrency == 0 {
        bail!("--calls, --batch and --concurrency must be positive");
    }
    let project = match &args.project {
        Some(p) => p.clone(),
        None => format!("bench/run-{}", &Uuid::new_v4().simple().to_string()[..8]),
    };
    let (entity, name) = split_project(&project)?;
    let baseline_project = format!("{entity}/{name}-batch1");
    let machine = Machine::detect();

    let (server, base_url, key) = match &args.url {
        Some(url) => {
            let key = args.api_key.clone().context("--url needs --api-key (or HEDDLE_API_KEY)")?;
            (None, url.trim_end_matches('/').to_owned(), key)
        }
        None => {
            let key = args
                .api_key
                .clone()
                .unwrap_or_else(|| format!("bench-{}", Uuid::new_v4().simple()));
            let (server, url) = Server::start(&args.heddle_bin, &key, args.keep_data)?;
            eprintln!("started {} at {url} (pid {})", args.heddle_bin.display(), server.pid());
            (Some(server), url, key)
        }
    };
    let server_pid = server.as_ref().map(Server::pid);
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(args.concurrency.max(1) * 2)
        .timeout(Duration::from_secs(600))
        .build()?;
    let api = Api { client: client.clone(), base: base_url.clone(), key: key.clone() };
    let version = api.version().await.unwrap_or_else(|e| format!("unknown ({e:#})"));

    let mut problems = Vec::new();
    let mut rows = Vec::new();

    // Refuse a project that already holds calls: the read-back check would be meaningless.
    for p in [&project, &baseline_project] {
        let n = api.count(p).await.with_context(|| format!("query_stats on {p} before writing"))?;
        if n != 0 {
            bail!("project {p} already holds {n} calls; pick a fresh --project");
        }
    }

    // 1. HTTP overhead ceiling.
    if args.health_requests > 0 {
        eprintln!("GET /health x {} ...", args.health_requests);
        let jobs = (0..args.health_requests).map(|_| Job { body: None, calls: 0 }).collect();
        let cpu = CpuMeter::start(server_pid);
        let out =
            send_all(&client, &format!("{base_url}/health"), None, jobs, args.concurrency).await;
        let cpu = cpu.stop();
        out.check("GET /health", &mut problems);
        rows.push(Row::from_outcome(
            format!("`GET /health`, {}", senders(args.concurrency)),
            &out,
            None,
            cpu,
        ));
    }

    // 2. Batched writes.
    let complete_url = format!("{base_url}/v2/{}/{}/calls/complete", pct(entity), pct(name));
    eprintln!("generating {} calls in batches of {} ...", args.calls, args.batch);
    let written = generate(&project, args.calls, args.batch, args.children, 1);
    eprintln!(
        "  {} requests, {:.1} MB of JSON; per call: inputs {} B, output {} B, whole item {} B",
        written.jobs.len(),
        written.body_bytes as f64 / 1e6,
        written.inputs_bytes / args.calls,
        written.output_bytes / args.calls,
        written.item_bytes / args.calls,
    );
    let item_bytes = written.item_bytes / args.calls;
    let ids = written.ids;
    let sample = written.sample;
    eprintln!("writing with {} senders ...", args.concurrency);
    let cpu = CpuMeter::start(server_pid);
    let out = send_all(&client, &complete_url, Some(&key), written.jobs, args.concurrency).await;
    let cpu = cpu.stop();
    out.check("batched calls/complete", &mut problems);
    rows.push(Row::from_outcome(
        format!("write, batch {}, {}", args.batch, senders(args.concurrency)),
        &out,
        Some(args.calls),
        cpu,
    ));
    let store_bytes = server.as_ref().map(|s| dir_size(&s.data_dir()));

    // 3. Read-back.
    eprintln!("streaming the project back ...");
    let cpu = CpuMeter::start(server_pid);
    let read = api.stream_all(&project).await;
    let cpu = cpu.stop();
    match read {
        Ok(read) => {
            verify_stream(&read, &project, &ids, &sample, &mut problems);
            rows.push(Row {
                name: "read, `calls/stream_query` (1 stream)".into(),
                requests: 1,
                calls: Some(read.lines),
                wall: read.wall,
                bytes: read.body.len() as u64,
                p50: Some(read.ttfb),
                p99: None,
                cpu,
            });
        }
        Err(e) => problems.push(format!("calls/stream_query failed: {e:#}")),
    }
    let t = Instant::now();
    match api.count(&project).await {
        Ok(n) => {
            if n != args.calls as u64 {
                problems.push(format!(
                    "calls/query_stats count is {n}, but {} calls were sent",
                    args.calls
                ));
            }
            rows.push(Row {
                name: format!("`calls/query_stats` (count = {n})"),
                requests: 1,
                calls: None,
                wall: t.elapsed(),
                bytes: 0,
                p50: Some(t.elapsed()),
                p99: None,
                cpu: None,
            });
        }
        Err(e) => problems.push(format!("calls/query_stats failed: {e:#}")),
    }

    // 4. One call per request.
    if args.baseline_calls > 0 {
        let (be, bn) = split_project(&baseline_project)?;
        let url = format!("{base_url}/v2/{}/{}/calls/complete", pct(be), pct(bn));
        let base = generate(&baseline_project, args.baseline_calls, 1, args.children, 2);
        eprintln!("writing {} calls one per request ...", args.baseline_calls);
        let cpu = CpuMeter::start(server_pid);
        let out = send_all(&client, &url, Some(&key), base.jobs, args.concurrency).await;
        let cpu = cpu.stop();
        out.check("batch-1 calls/complete", &mut problems);
        rows.push(Row::from_outcome(
            format!("write, batch 1, {} (baseline)", senders(args.concurrency)),
            &out,
            Some(args.baseline_calls),
            cpu,
        ));
        match api.count(&baseline_project).await {
            Ok(n) if n == args.baseline_calls as u64 => {}
            Ok(n) => problems.push(format!(
                "calls/query_stats on {baseline_project} counts {n}, but {} were sent",
                args.baseline_calls
            )),
            Err(e) => problems.push(format!("calls/query_stats on {baseline_project}: {e:#}")),
        }
    }

    // Report.
    println!("{}", machine.line());
    println!(
        "Server: heddle {version} at {base_url}{}. Project `{project}`; {} calls/trace \
         (1 root + {} children), ~{item_bytes} B of JSON per call.",
        if server.is_some() { " (started by the bench, fresh data dir)" } else { "" },
        args.children + 1,
        args.children,
    );
    println!("Command: `{}`", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    print_table(&rows, machine.nproc, server_pid.is_some());
    if let Some(bytes) = store_bytes {
        println!(
            "\nStore size after the batched write: {:.1} MB ({} B per call, SQLite db + WAL).",
            bytes as f64 / 1e6,
            bytes / args.calls as u64
        );
    }
    println!(
        "\nThe bench runs on the same machine as the server and shares its {} CPUs; \
         per-core = calls/s ÷ nproc. p50 of the read row is the time to the first byte.",
        machine.nproc
    );
    if server.is_some() {
        println!(
            "CPU columns come from /proc: server CPU s is user + system time of the whole server \
             process during the phase; the busiest thread's share is its CPU time ÷ the phase's \
             wall time (100% = one core saturated by that thread)."
        );
    }
    if let Some(server) = &server {
        let log = server.log_problems();
        if !log.is_empty() {
            println!("\nServer log (WARN/ERROR lines, first {}):", log.len());
            for line in &log {
                println!("    {line}");
            }
        }
    }
    drop(server);
    Ok(problems)
}

fn senders(n: usize) -> String {
    if n == 1 { "1 sender".into() } else { format!("{n} senders") }
}

fn split_project(p: &str) -> anyhow::Result<(&str, &str)> {
    match p.split_once('/') {
        Some((e, n)) if !e.is_empty() && !n.is_empty() && !n.contains('/') => Ok((e, n)),
        _ => bail!("project must be \"entity/project\" (exactly one '/'), got {p:?}"),
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
fn pct(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ----------------------------------------------------------------------------------------------
// HTTP

struct Api {
    client: reqwest::Client,
    base: String,
    key: String,
}

struct StreamRead {
    wall: Duration,
    ttfb: Duration,
    lines: usize,
    content_type: String,
    body: Vec<u8>,
}

impl Api {
    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<reqwest::Response> {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("POST {path} answered HTTP {status}: {}", clip(&text));
        }
        Ok(resp)
    }

    async fn version(&self) -> anyhow::Result<String> {
        let resp = self.client.get(format!("{}/version", self.base)).bearer_auth(&self.key);
        let v: Value = resp.send().await?.error_for_status()?.json().await?;
        Ok(v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
    }

    async fn count(&self, project: &str) -> anyhow::Result<u64> {
        let body = json!({"project_id": project, "filter": null, "query": null, "limit": null});
        let v: Value = self.post("/calls/query_stats", &body).await?.json().await?;
        let count = &v["count"];
        count
            .as_u64()
            .or_else(|| count.to_string().parse().ok())
            .with_context(|| format!("calls/query_stats answered without a count: {v}"))
    }

    async fn stream_all(&self, project: &str) -> anyhow::Result<StreamRead> {
        let body = json!({"project_id": project, "limit": null});
        let t = Instant::now();
        let resp = self
            .client
            .post(format!("{}/calls/stream_query", self.base))
            .bearer_auth(&self.key)
            .header(ACCEPT, "application/jsonl")
            .json(&body)
            .send()
            .await
            .context("POST /calls/stream_query")?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            bail!("POST /calls/stream_query answered HTTP {status}: {}", clip(&text));
        }
        let content_type =
            resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let mut ttfb = None;
        let mut body = Vec::with_capacity(64 << 20);
        let mut newlines = 0;
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.context("reading the calls/stream_query body")?;
            ttfb.get_or_insert_with(|| t.elapsed());
            newlines += chunk.iter().filter(|&&b| b == b'\n').count();
            body.extend_from_slice(&chunk);
        }
        let wall = t.elapsed();
        let lines = newlines + usize::from(!body.is_empty() && body.last() != Some(&b'\n'));
        Ok(StreamRead { wall, ttfb: ttfb.unwrap_or(wall), lines, content_type, body })
    }
}

fn clip(s: &str) -> String {
    const MAX: usize = 500;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

struct Job {
    /// POST body; `None` sends a GET without auth.
    body: Option<Vec<u8>>,
    calls: usize,
}

#[derive(Default)]
struct Outcome {
    wall: Duration,
    latencies: Vec<Duration>,
    ok_requests: usize,
    ok_calls: usize,
    bytes_sent: u64,
    failures: Vec<String>,
}

impl Outcome {
    fn check(&self, phase: &str, problems: &mut Vec<String>) {
        if self.failures.is_empty() {
            return;
        }
        let mut distinct: Vec<(&String, usize)> = Vec::new();
        for f in &self.failures {
            match distinct.iter_mut().find(|(d, _)| *d == f) {
                Some((_, n)) => *n += 1,
                None => distinct.push((f, 1)),
            }
        }
        for (f, n) in distinct.iter().take(10) {
            problems.push(format!("{phase}: {n} request(s) failed with {f}"));
        }
        if distinct.len() > 10 {
            problems.push(format!("{phase}: {} more distinct failures", distinct.len() - 10));
        }
    }
}

/// Sends every job to `url` from `concurrency` tasks pulling from one queue; no retries.
async fn send_all(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    jobs: Vec<Job>,
    concurrency: usize,
) -> Outcome {
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let queue = queue.clone();
            let client = client.clone();
            let url = url.to_owned();
            let key = key.map(str::to_owned);
            tokio::spawn(async move {
                let mut out = Outcome::default();
                loop {
                    let next = queue.lock().expect("job queue").next();
                    let Some(job) = next else { break };
                    let t = Instant::now();
                    let req = match job.body {
                        Some(body) => {
                            out.bytes_sent += body.len() as u64;
                            let req = client
                                .post(&url)
                                .header(CONTENT_TYPE, "application/json")
                                .header(ACCEPT, "application/json")
                                .body(body);
                            match &key {
                                Some(k) => req.bearer_auth(k),
                                None => req,
                            }
                        }
                        None => client.get(&url),
                    };
                    let res = async {
                        let resp = req.send().await?;
                        let status = resp.status();
                        let body = resp.bytes().await?;
                        Ok::<_, reqwest::Error>((status, body))
                    }
                    .await;
                    let elapsed = t.elapsed();
                    match res {
                        Ok((status, _)) if status.is_success() => {
                            out.latencies.push(elapsed);
                            out.ok_requests += 1;
                            out.ok_calls += job.calls;
                        }
                        Ok((status, body)) => out.failures.push(format!(
                            "HTTP {status}: {}",
                            clip(&String::from_utf8_lossy(&body))
                        )),
                        Err(e) => out.failures.push(format!("transport error: {e}")),
                    }
                }
                out
            })
        })
        .collect();
    let mut total = Outcome::default();
    for task in tasks {
        match task.await {
            Ok(out) => {
                total.latencies.extend(out.latencies);
                total.ok_requests += out.ok_requests;
                total.ok_calls += out.ok_calls;
                total.bytes_sent += out.bytes_sent;
                total.failures.extend(out.failures);
            }
            Err(e) => total.failures.push(format!("sender task died: {e}")),
        }
    }
    total.wall = start.elapsed();
    total.latencies.sort_unstable();
    total
}

// ----------------------------------------------------------------------------------------------
// Read-back verification

#[derive(Deserialize)]
struct CallRow {
    id: String,
    project_id: String,
    #[serde(default)]
    trace_id: Value,
    #[serde(default)]
    parent_id: Value,
    #[serde(default)]
    op_name: Value,
    #[serde(default)]
    inputs: Value,
    #[serde(default)]
    output: Value,
    #[serde(default)]
    attributes: Value,
    #[serde(default)]
    summary: Value,
    #[serde(default)]
    ended_at: Value,
}

fn verify_stream(
    read: &StreamRead,
    project: &str,
    written: &HashSet<String>,
    sample: &Value,
    problems: &mut Vec<String>,
) {
    let mut say = |p: String| problems.push(format!("calls/stream_query: {p}"));
    if read.lines != written.len() {
        say(format!("streamed {} lines, but {} calls were sent", read.lines, written.len()));
    }
    if !read.content_type.starts_with("application/jsonl") {
        say(format!("Content-Type is {:?}, expected application/jsonl", read.content_type));
    }
    let body = read.body.strip_suffix(b"\n").unwrap_or(&read.body);
    if body.is_empty() {
        return;
    }
    let mut seen = HashSet::with_capacity(written.len());
    let (mut blank, mut bad_json, mut foreign, mut unknown, mut dupes, mut running) =
        (0, 0, 0, 0, 0, 0);
    let mut first_bad = None;
    for line in body.split(|&b| b == b'\n') {
        if line.is_empty() || line == b"\r" {
            blank += 1;
            continue;
        }
        let row: CallRow = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                bad_json += 1;
                first_bad.get_or_insert_with(|| {
                    format!("{e}: {}", clip(&String::from_utf8_lossy(line)))
                });
                continue;
            }
        };
        if row.project_id != project {
            foreign += 1;
        }
        if row.ended_at.is_null() {
            running += 1;
        }
        if !written.contains(&row.id) {
            unknown += 1;
        }
        if sample["id"].as_str() == Some(row.id.as_str()) {
            compare_sample(sample, &row, &mut say);
        }
        if !seen.insert(row.id) {
            dupes += 1;
        }
    }
    let missing = written.len() - written.iter().filter(|id| seen.contains(*id)).count();
    for (n, what) in [
        (blank, "blank lines (the SDK's parser raises on them)"),
        (bad_json, "lines that are not a Call JSON object"),
        (foreign, "rows whose project_id is not the queried project"),
        (unknown, "rows with an id that was never written"),
        (dupes, "duplicate rows"),
        (missing, "written calls missing from the stream"),
        (running, "rows without ended_at (written as complete calls)"),
    ] {
        if n > 0 {
            say(format!("{n} {what}"));
        }
    }
    if let Some(b) = first_bad {
        say(format!("first unparsable line: {b}"));
    }
    if !seen.contains(sample["id"].as_str().unwrap_or_default()) {
        say("the sample call was not in the stream".into());
    }
}

fn compare_sample(sample: &Value, row: &CallRow, say: &mut impl FnMut(String)) {
    for (field, got) in [
        ("trace_id", &row.trace_id),
        ("parent_id", &row.parent_id),
        ("op_name", &row.op_name),
        ("inputs", &row.inputs),
        ("output", &row.output),
        ("attributes", &row.attributes),
    ] {
        if &sample[field] != got {
            say(format!(
                "call {}: {field} came back as {} but was written as {}",
                row.id,
                clip(&got.to_string()),
                clip(&sample[field].to_string())
            ));
        }
    }
    if sample["summary"]["usage"] != row.summary["usage"] {
        say(format!(
            "call {}: summary.usage came back as {} but was written as {}",
            row.id, row.summary["usage"], sample["summary"]["usage"]
        ));
    }
}

// ----------------------------------------------------------------------------------------------
// Report

struct Row {
    name: String,
    requests: usize,
    calls: Option<usize>,
    wall: Duration,
    bytes: u64,
    p50: Option<Duration>,
    p99: Option<Duration>,
    cpu: Option<CpuUse>,
}

impl Row {
    fn from_outcome(name: String, out: &Outcome, calls: Option<usize>, cpu: Option<CpuUse>) -> Row {
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

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn print_table(rows: &[Row], nproc: usize, with_cpu: bool) {
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

struct Machine {
    nproc: usize,
    cpu: String,
    mem_gib: Option<f64>,
    kernel: Option<String>,
}

impl Machine {
    fn detect() -> Machine {
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

    fn line(&self) -> String {
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
struct CpuMeter {
    pid: Option<u32>,
    started: Instant,
    server0: Option<f64>,
    threads0: HashMap<String, f64>,
    bench0: Option<f64>,
}

#[derive(Clone)]
struct CpuUse {
    server: Option<f64>,
    bench: Option<f64>,
    /// The server thread that used the most CPU in the phase: name and share of the wall time.
    busiest: Option<(String, f64)>,
}

impl CpuMeter {
    fn start(pid: Option<u32>) -> CpuMeter {
        CpuMeter {
            pid,
            started: Instant::now(),
            server0: pid.and_then(|p| cpu_secs(&format!("/proc/{p}/stat")).map(|(_, s)| s)),
            threads0: pid.map(thread_cpu).unwrap_or_default(),
            bench0: cpu_secs("/proc/self/stat").map(|(_, s)| s),
        }
    }

    fn stop(self) -> Option<CpuUse> {
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
        })
    }
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

fn dir_size(dir: &Path) -> u64 {
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

// ----------------------------------------------------------------------------------------------
// The server the bench starts itself

struct Server {
    child: Child,
    dir: PathBuf,
    keep: bool,
}

impl Server {
    fn start(bin: &Path, key: &str, keep: bool) -> anyhow::Result<(Server, String)> {
        if !bin.exists() {
            bail!(
                "{} not found: build it with `cargo build --release`, pass --heddle-bin, or \
                 point --url at a running server",
                bin.display()
            );
        }
        let dir = std::env::temp_dir().join(format!("heddle-bench-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = File::create(dir.join("server.log"))?;
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"))
            .arg("--api-key")
            .arg(key)
            .env("RUST_LOG", "info,tower_http=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let server = Server { child, dir, keep };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Keeps draining stdout so the server never blocks on a full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("heddle listening on ") {
                    let url = rest.split_whitespace().next().unwrap_or_default().to_owned();
                    let _ = tx.send(url);
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => Ok((server, url)),
            Err(_) => {
                let log =
                    std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default();
                bail!(
                    "{} did not print its address within 30 s; its log:\n{}",
                    bin.display(),
                    clip(&log)
                )
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// WARN and ERROR lines of the server's log (at most 20).
    fn log_problems(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .take(20)
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.keep {
            eprintln!("kept the server's data and log in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Workload generation

struct Written {
    jobs: Vec<Job>,
    ids: HashSet<String>,
    /// The first call generated, kept to compare with what comes back.
    sample: Value,
    body_bytes: usize,
    item_bytes: usize,
    inputs_bytes: usize,
    output_bytes: usize,
}

/// `n` complete calls for `project` in request bodies of `batch` items. Traces are one root
/// (`predict`) and `children` children; as with the SDK, children complete (and are sent) before
/// their root.
fn generate(project: &str, n: usize, batch: usize, children: usize, seed: u64) -> Written {
    let mut g = Gen::new(project, seed);
    let mut out = Written {
        jobs: Vec::with_capacity(n.div_ceil(batch)),
        ids: HashSet::with_capacity(n),
        sample: Value::Null,
        body_bytes: 0,
        item_bytes: 0,
        inputs_bytes: 0,
        output_bytes: 0,
    };
    let per_trace = children + 1;
    // Traces start 20 ms apart, ending about a minute ago.
    let mut t0 = Utc::now() - TimeDelta::milliseconds(20 * n.div_ceil(per_trace) as i64 + 60_000);
    let mut pending: Vec<Value> = Vec::with_capacity(batch);
    let mut made = 0;
    while made < n {
        let size = per_trace.min(n - made);
        for call in g.trace(t0, size - 1) {
            out.item_bytes += call.to_string().len();
            out.inputs_bytes += call["inputs"].to_string().len();
            out.output_bytes += call["output"].to_string().len();
            out.ids.insert(call["id"].as_str().unwrap_or_default().to_owned());
            if out.sample.is_null() {
                out.sample = call.clone();
            }
            pending.push(call);
            if pending.len() == batch {
                out.push_batch(&mut pending);
            }
        }
        made += size;
        t0 += TimeDelta::milliseconds(20);
    }
    if !pending.is_empty() {
        out.push_batch(&mut pending);
    }
    out
}

impl Written {
    fn push_batch(&mut self, pending: &mut Vec<Value>) {
        let calls = pending.len();
        let body = serde_json::to_vec(&json!({ "batch": std::mem::take(pending) }))
            .expect("serialising a batch");
        self.body_bytes += body.len();
        self.jobs.push(Job { body: Some(body), calls });
    }
}

const WORDS: &[&str] = &[
    "the",
    "customer",
    "asked",
    "about",
    "refund",
    "policy",
    "for",
    "orders",
    "shipped",
    "outside",
    "the",
    "european",
    "union",
    "and",
    "whether",
    "import",
    "duties",
    "are",
    "included",
    "in",
    "final",
    "price",
    "shown",
    "at",
    "checkout",
    "our",
    "support",
    "agent",
    "should",
    "cite",
    "relevant",
    "section",
    "of",
    "terms",
    "service",
    "summarise",
    "options",
    "clearly",
    "a",
    "return",
    "label",
    "can",
    "be",
    "requested",
    "within",
    "thirty",
    "days",
    "delivery",
    "items",
    "must",
    "unused",
    "original",
    "packaging",
    "exchanges",
    "processed",
    "faster",
    "than",
    "refunds",
    "which",
    "take",
    "five",
    "to",
    "ten",
    "business",
    "depending",
    "on",
    "bank",
    "payment",
    "method",
    "gift",
    "cards",
    "store",
    "credit",
    "not",
    "eligible",
    "cash",
];

const CHILD_OPS: &[&str] =
    &["retrieve", "openai.chat.completions.create", "rerank", "format_answer"];

/// Deterministic workload text and numbers (splitmix64), so runs are comparable.
struct Gen {
    state: u64,
    project: String,
    digests: Vec<String>,
    model_ref: String,
    attributes: Value,
}

impl Gen {
    fn new(project: &str, seed: u64) -> Gen {
        let mut g = Gen {
            state: 0x9E37_79B9_7F4A_7C15 ^ seed,
            project: project.to_owned(),
            digests: Vec::new(),
            model_ref: String::new(),
            attributes: json!({"weave": {
                "client_version": "0.54.0",
                "source": "python-sdk",
                "sys_version": "3.12.3 (main, Nov  6 2025, 13:44:16) [GCC 13.3.0]",
                "os_name": "Linux",
                "os_version": "#1 SMP PREEMPT_DYNAMIC",
                "os_release": "6.8.0-51-generic",
            }}),
        };
        g.digests = (0..=CHILD_OPS.len()).map(|_| g.digest()).collect();
        g.model_ref = format!("weave:///{project}/object/SupportRAGModel:{}", g.digest());
        g
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A 43-character digest in the SDK's alphabet.
    fn digest(&mut self) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789XY";
        (0..43).map(|_| ALPHABET[self.below(64) as usize] as char).collect()
    }

    /// Words until at least `len` characters.
    fn text(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len + 16);
        while s.len() < len {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
        }
        s
    }

    fn op_name(&self, op: usize) -> String {
        let name = if op == 0 { "predict" } else { CHILD_OPS[(op - 1) % CHILD_OPS.len()] };
        let digest = &self.digests[if op == 0 { 0 } else { 1 + (op - 1) % CHILD_OPS.len() }];
        format!("weave:///{}/op/{name}:{digest}", self.project)
    }

    fn usage(&mut self) -> (u64, u64) {
        (120 + self.below(900), 40 + self.below(300))
    }

    /// One trace: `children` child calls, then the root.
    fn trace(&mut self, t0: DateTime<Utc>, children: usize) -> Vec<Value> {
        let trace_id = Uuid::now_v7().to_string();
        let root_id = Uuid::now_v7().to_string();
        let question = format!("{}?", self.text(110));
        let mut calls = Vec::with_capacity(children + 1);
        let mut t = t0 + TimeDelta::microseconds(300 + self.below(400) as i64);
        let (mut prompt_sum, mut completion_sum) = (0, 0);
        for i in 0..children {
            let dur = TimeDelta::microseconds(800 + self.below(2_500) as i64);
            let (prompt, completion) = self.usage();
            prompt_sum += prompt;
            completion_sum += completion;
            let (inputs, output) = self.child_io(i, &question, prompt, completion);
            let summary = json!({"usage": {"gpt-4o": {
                "requests": 1,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }}});
            let id = Uuid::now_v7().to_string();
            calls.push(self.call(
                &id,
                &trace_id,
                Some(&root_id),
                1 + i,
                (t, t + dur),
                inputs,
                output,
                summary,
            ));
            t += dur + TimeDelta::microseconds(50 + self.below(200) as i64);
        }
        let inputs = json!({
            "self": self.model_ref,
            "question": question,
            "context": {"customer_tier": "gold", "locale": "en-GB", "channel": "chat",
                        "history": self.text(170)},
        });
        let output = json!({
            "answer": self.text(330),
            "sources": ["terms-of-service#refunds", "faq/shipping-eu"],
            "confidence": 0.87,
        });
        let summary = json!({
            "usage": {"gpt-4o": {
                "requests": children,
                "prompt_tokens": prompt_sum,
                "completion_tokens": completion_sum,
                "total_tokens": prompt_sum + completion_sum,
            }},
            "status_counts": {"success": children + 1, "error": 0},
        });
        let end = t + TimeDelta::microseconds(100 + self.below(300) as i64);
        calls.push(self.call(&root_id, &trace_id, None, 0, (t0, end), inputs, output, summary));
        calls
    }

    fn child_io(
        &mut self,
        i: usize,
        question: &str,
        prompt: u64,
        completion: u64,
    ) -> (Value, Value) {
        match i % CHILD_OPS.len() {
            0 => (
                json!({"query": question, "k": 4, "index": "support-kb-v3",
                       "filters": {"lang": "en", "region": "eu"}, "note": self.text(200)}),
                json!({"documents": [
                    {"id": format!("doc-{}", self.below(100_000)), "score": 0.91, "text": self.text(130)},
                    {"id": format!("doc-{}", self.below(100_000)), "score": 0.84, "text": self.text(130)},
                    {"id": format!("doc-{}", self.below(100_000)), "score": 0.77, "text": self.text(100)},
                ]}),
            ),
            1 => (
                json!({"model": "gpt-4o", "temperature": 0.2, "max_tokens": 512, "messages": [
                    {"role": "system", "content": self.text(160)},
                    {"role": "user", "content": format!("{question} {}", self.text(100))},
                ]}),
                json!({
                    "id": format!("chatcmpl-{}", &Uuid::new_v4().simple().to_string()[..24]),
                    "object": "chat.completion", "model": "gpt-4o-2024-08-06",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": self.text(270)}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion},
                }),
            ),
            2 => (
                json!({"query": question, "candidates": [self.text(150), self.text(150)],
                       "top_n": 2}),
                json!({"ranked": [{"index": 1, "relevance": 0.93, "text": self.text(190)},
                                  {"index": 0, "relevance": 0.71, "text": self.text(190)}]}),
            ),
            _ => (
                json!({"draft": self.text(330), "style": "concise", "citations": true,
                       "max_chars": 1200}),
                json!({"text": self.text(400), "citations": ["[1] terms-of-service#refunds"]}),
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        id: &str,
        trace_id: &str,
        parent_id: Option<&str>,
        op: usize,
        (started, ended): (DateTime<Utc>, DateTime<Utc>),
        inputs: Value,
        output: Value,
        summary: Value,
    ) -> Value {
        json!({
            "project_id": self.project,
            "id": id,
            "trace_id": trace_id,
            "op_name": self.op_name(op),
            "started_at": rfc3339_micros(started),
            "ended_at": rfc3339_micros(ended),
            "display_name": null,
            "parent_id": parent_id,
            "thread_id": null,
            "turn_id": null,
            "attributes": self.attributes,
            "inputs": inputs,
            "output": output,
            "summary": summary,
            "otel_dump": null,
            "exception": null,
            "wb_user_id": null,
            "wb_run_id": null,
            "wb_run_step": null,
            "wb_run_step_end": null,
        })
    }
}

fn rfc3339_micros(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

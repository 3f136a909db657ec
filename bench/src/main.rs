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
//! With `--distributed` the bench instead starts tansu, ClickHouse (chdb behind the test adapter,
//! or a real server with --clickhouse-url) and `heddle serve --kafka --clickhouse`, and measures
//! acknowledged and visible calls/s, visibility lag and exactness (see `distributed.rs`); with
//! --sweep-records / --sweep-wait-ms it compares consumer batch limits.
//!
//! With `--otlp` (embedded or `--distributed`) it measures OpenTelemetry trace ingest instead:
//! LLM-agent spans over OTLP/HTTP protobuf (plain and gzip) and OTLP/gRPC against the same calls
//! through calls/complete (see `otlp.rs`).
//!
//! Prints a markdown table on stdout (progress goes to stderr). Any non-2xx answer, transport
//! error or count mismatch is reported verbatim and makes the command exit non-zero; nothing is
//! retried.

mod client;
mod distributed;
mod hostile;
mod machine;
mod otlp;
mod report;
mod server;
mod stack;
mod verify;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use uuid::Uuid;

use crate::client::{Api, Job, send_all};
use crate::machine::{CpuMeter, Machine, dir_size};
use crate::report::{Row, print_table};
use crate::server::Server;
use crate::verify::{SampleCheck, verify_stream};
use crate::workload::generate;

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

    /// Distributed mode: start tansu, ClickHouse and `heddle serve --kafka --clickhouse`, and
    /// measure acknowledged and visible calls/s, visibility lag and exactness.
    #[arg(long, help_heading = "Distributed mode")]
    distributed: bool,
    /// The tansu binary [default: ~/.cache/heddle-test/tansu-0.6.0/bin/tansu, where
    /// `tests/run.sh` installs it].
    #[arg(long, env = "HEDDLE_TANSU", help_heading = "Distributed mode")]
    tansu: Option<PathBuf>,
    /// A Python with chdb, for the ClickHouse adapter.
    #[arg(
        long,
        env = "HEDDLE_TEST_PYTHON",
        default_value = "python3",
        help_heading = "Distributed mode"
    )]
    python: PathBuf,
    /// The ClickHouse HTTP adapter script (chdb behind ClickHouse's HTTP interface).
    #[arg(
        long,
        default_value = "tests/support/clickhouse_http.py",
        help_heading = "Distributed mode"
    )]
    clickhouse_adapter: PathBuf,
    /// Use this real ClickHouse (HTTP URL) instead of the adapter; heddle gets a fresh database
    /// on it, dropped at the end. Credentials from HEDDLE_CLICKHOUSE_USER / _PASSWORD.
    #[arg(long, help_heading = "Distributed mode")]
    clickhouse_url: Option<String>,
    /// With --clickhouse-url: use this database as it is (not dropped at the end) instead of a
    /// fresh one.
    #[arg(long, requires = "clickhouse_url", help_heading = "Distributed mode")]
    clickhouse_database: Option<String>,
    /// Passed to `heddle serve --batch-records` (the server's default when absent).
    #[arg(long, help_heading = "Distributed mode")]
    batch_records: Option<u64>,
    /// Passed to `heddle serve --batch-wait-ms` (the server's default when absent).
    #[arg(long, help_heading = "Distributed mode")]
    batch_wait_ms: Option<u64>,
    /// Sweep: one fresh deployment per --batch-records value (comma-separated), crossed with
    /// --sweep-wait-ms; runs the batched and paced phases and prints one row per setting.
    #[arg(long, value_delimiter = ',', help_heading = "Distributed mode")]
    sweep_records: Vec<u64>,
    /// Sweep: --batch-wait-ms values (comma-separated).
    #[arg(long, value_delimiter = ',', help_heading = "Distributed mode")]
    sweep_wait_ms: Vec<u64>,
    /// Requests of one trace sent one at a time in the paced (low-load) phase (0 skips it).
    #[arg(long, default_value_t = 40, help_heading = "Distributed mode")]
    paced_requests: usize,
    /// Gap between the starts of two paced requests.
    #[arg(long, default_value_t = 100, help_heading = "Distributed mode")]
    paced_interval_ms: u64,
    /// How often the visibility pollers ask (`calls/query_stats` and `calls/stream_query`).
    #[arg(long, default_value_t = 50, help_heading = "Distributed mode")]
    poll_ms: u64,
    /// Probe calls (one per request, evenly spread) whose visibility lag is measured per phase.
    #[arg(long, default_value_t = 200, help_heading = "Distributed mode")]
    lag_samples: usize,
    /// Give up waiting for acknowledged calls to become visible after this long per phase.
    #[arg(long, default_value_t = 300, help_heading = "Distributed mode")]
    visible_timeout_s: u64,

    /// OTLP ingest benchmark instead of the calls phases: LLM-agent traces through each of
    /// --otlp-transports (and the same calls through calls/complete), in embedded mode or with
    /// --distributed.
    #[arg(long, help_heading = "OTLP ingest")]
    otlp: bool,
    /// Spans sent per transport [default: 40960; 20480 with --distributed].
    #[arg(long, help_heading = "OTLP ingest")]
    otlp_spans: Option<usize>,
    /// Spans per export request (an OpenTelemetry BatchSpanProcessor's default batch is 512).
    #[arg(long, default_value_t = 512, help_heading = "OTLP ingest")]
    otlp_batch: usize,
    /// `chat` spans under each `invoke_agent` root span.
    #[arg(long, default_value_t = 4, help_heading = "OTLP ingest")]
    otlp_children: usize,
    /// Transports, in order (comma-separated): calls (the calls/complete baseline), calls-dump
    /// (the same calls with the otel_dump heddle keeps for a span), http (OTLP/HTTP protobuf),
    /// http-gzip, grpc, grpc-gzip.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "calls,http,http-gzip,grpc",
        help_heading = "OTLP ingest"
    )]
    otlp_transports: Vec<String>,
    /// With --url: the server's OTLP/gRPC address (e.g. http://127.0.0.1:4317).
    #[arg(long, help_heading = "OTLP ingest")]
    otlp_grpc_url: Option<String>,

    /// Hostile load instead: attacks that once crashed or ballooned the server, with
    /// --concurrency senders each, while a well-behaved client writes; reports peak memory and
    /// the client's latencies (see `hostile.rs`).
    #[arg(long, help_heading = "Hostile load")]
    hostile: bool,
    /// How long the attacks run.
    #[arg(long, default_value_t = 20, help_heading = "Hostile load")]
    hostile_secs: u64,
    /// Only the attacks whose names contain one of these (comma-separated); all by default.
    #[arg(long, value_delimiter = ',', help_heading = "Hostile load")]
    hostile_attack: Vec<String>,
    /// A second binary run through the same attacks (e.g. the previous commit's build).
    #[arg(long, help_heading = "Hostile load")]
    compare_bin: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let problems = match (args.otlp, args.distributed) {
        _ if args.hostile => hostile::run(&args).await?,
        (true, false) => otlp::run_embedded(&args).await?,
        (true, true) => otlp::run_distributed(&args).await?,
        (false, true) => distributed::run(&args).await?,
        (false, false) => run(args).await?,
    };
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
        let jobs =
            (0..args.health_requests).map(|_| Job { body: None, calls: 0, probe: None }).collect();
        let cpu = CpuMeter::start(server_pid);
        let out =
            send_all(&client, &format!("{base_url}/health"), None, jobs, args.concurrency, None)
                .await;
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
    let out =
        send_all(&client, &complete_url, Some(&key), written.jobs, args.concurrency, None).await;
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
            verify_stream(&read, &project, &ids, &sample, SampleCheck::Exact, &mut problems);
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
        let out = send_all(&client, &url, Some(&key), base.jobs, args.concurrency, None).await;
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

pub(crate) fn senders(n: usize) -> String {
    if n == 1 { "1 sender".into() } else { format!("{n} senders") }
}

pub(crate) fn split_project(p: &str) -> anyhow::Result<(&str, &str)> {
    match p.split_once('/') {
        Some((e, n)) if !e.is_empty() && !n.is_empty() && !n.contains('/') => Ok((e, n)),
        _ => bail!("project must be \"entity/project\" (exactly one '/'), got {p:?}"),
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
pub(crate) fn pct(s: &str) -> String {
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

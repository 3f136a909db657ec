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
//! Other modes: `--queries` times the UI's and the SDK's reads over a large project
//! (`queries.rs`), `--overload` the server's memory and answers at twice its sustainable OTLP rate
//! (`overload.rs`), `--ingest-role` the ingest role alone producing to Kafka (`ingest_role.rs`),
//! `--hostile` memory under attack (`hostile.rs`). With `--baseline-bin` the embedded modes and
//! `--ingest-role` also run a second binary in the same invocation, interleaved for `--runs`
//! rounds, and end with the median of each figure per binary and their ratio (`rounds.rs`).
//!
//! Prints a markdown table on stdout (progress goes to stderr). Any non-2xx answer, transport
//! error or count mismatch is reported verbatim and makes the command exit non-zero; nothing is
//! retried.

mod calls;
mod client;
mod distributed;
mod hostile;
mod ingest_role;
mod machine;
mod otlp;
mod overload;
mod queries;
mod report;
mod rounds;
mod server;
mod stack;
mod verify;
mod workload;

use std::path::PathBuf;

use anyhow::bail;
use clap::Parser;

use crate::rounds::Mode;

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
    /// Calls written in the batched phase (and read back) [default: 100000; 1000000 with
    /// --queries, where they seed the queried project].
    #[arg(long)]
    calls: Option<usize>,
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

    /// A second heddle binary (e.g. the previous commit's build) measured in the same run: the
    /// embedded modes (calls phases, --otlp, --queries, --overload) and --ingest-role run
    /// against both, interleaved (baseline, new, ...) for --runs rounds, and the summary shows
    /// each figure's median per binary and the ratio new / baseline. --hostile runs its attacks
    /// once against each. --distributed runs only --heddle-bin.
    #[arg(long, alias = "compare-bin", help_heading = "Comparing builds")]
    baseline_bin: Option<PathBuf>,
    /// Rounds per binary, each on a fresh server and data dir; with more than one run (or with
    /// --baseline-bin) a summary of the medians follows the per-run tables [default: 3 with
    /// --baseline-bin, else 1].
    #[arg(long, help_heading = "Comparing builds")]
    runs: Option<usize>,

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

    /// Query benchmark instead: seed a fresh project with --calls calls [default 1000000 in this
    /// mode] through calls/complete, then time `calls/stream_query` (first 100 rows, newest
    /// first) and `calls/query_stats` for the filters the UI and the SDK use (see `queries.rs`).
    #[arg(long, help_heading = "Queries")]
    queries: bool,
    /// Timed repetitions of each query (after one untimed warm-up).
    #[arg(long, default_value_t = 20, help_heading = "Queries")]
    query_reps: usize,

    /// Overload instead: find the server's OTLP/HTTP span throughput (or take --overload-rate),
    /// then send at twice that rate, open-loop, and report its memory (RSS every 100 ms) and
    /// answers (see `overload.rs`). With --ingest-role: against `heddle ingest` and tansu.
    #[arg(long, help_heading = "Overload")]
    overload: bool,
    /// How long the overload lasts.
    #[arg(long, default_value_t = 20, help_heading = "Overload")]
    overload_secs: u64,
    /// The sustainable rate in spans/s (the overload sends twice this); measured when absent.
    #[arg(long, help_heading = "Overload")]
    overload_rate: Option<f64>,
    /// Requests in flight at most during the overload; a request due while all are busy is
    /// skipped (and counted), so the schedule never bunches up.
    #[arg(long, default_value_t = 64, help_heading = "Overload")]
    overload_senders: usize,

    /// The ingest role alone: start tansu and `heddle ingest --kafka` (no consumer), send the
    /// OTLP workload over OTLP/HTTP protobuf and report acknowledged spans/s and spans per
    /// ingest CPU-second (see `ingest_role.rs`). With --overload: overload that role instead.
    #[arg(long, help_heading = "Ingest role")]
    ingest_role: bool,
}

impl Args {
    /// --calls, or its default for the mode.
    fn calls(&self) -> usize {
        self.calls.unwrap_or(if self.queries { 1_000_000 } else { 100_000 })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let modes =
        [args.hostile, args.queries, args.overload, args.otlp].into_iter().filter(|&m| m).count();
    if modes > 1 {
        bail!("--hostile, --queries, --overload and --otlp are separate modes: pick one");
    }
    if args.ingest_role && (args.hostile || args.queries || args.otlp) {
        bail!("--ingest-role runs alone or with --overload");
    }
    if args.distributed && (args.hostile || args.queries || args.overload || args.ingest_role) {
        bail!("--distributed goes with the calls phases or --otlp only");
    }
    let problems = match (args.otlp, args.distributed) {
        _ if args.hostile => hostile::run(&args).await?,
        _ if args.queries => rounds::run(&args, Mode::Queries).await?,
        _ if args.overload => rounds::run(&args, Mode::Overload).await?,
        _ if args.ingest_role => rounds::run(&args, Mode::IngestRole).await?,
        (true, false) => rounds::run(&args, Mode::Otlp).await?,
        (true, true) => otlp::run_distributed(&args).await?,
        (false, true) => distributed::run(&args).await?,
        (false, false) => rounds::run(&args, Mode::Calls).await?,
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

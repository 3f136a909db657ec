//! `--queries`: the reads the UI and the SDK make, timed over a large project.
//!
//! A fresh project is seeded with `--calls` calls (1,000,000 by default in this mode) through
//! `calls/complete` in bodies of `--batch`, generated while sending (the workload of
//! `workload.rs`: traces of a root and `--children` children over five ops, plus one call in 50
//! failed with an `exception`, and a rare word planted in the root's `inputs.question` of one
//! trace in `1000 / calls per trace`, about 0.1% of the calls). Then, for each filter below,
//! `POST /calls/stream_query` (the first 100 rows, newest first, as the UI asks) and
//! `POST /calls/query_stats` (the count the SDK asks before every `get_calls()`) are each timed
//! `--query-reps` times after one untimed warm-up. Every answer is checked: the number of rows
//! and the count against what was generated, every row against the filter, and the order.

use crate::report::print_log_problems;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::DateTime;
use reqwest::header::ACCEPT;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Args;
use crate::client::{Api, Post, clip, send_from};
use crate::machine::{CpuMeter, Machine, dir_size, loadavg, settle};
use crate::report::percentile;
use crate::rounds::Measured;
use crate::server::Server;
use crate::workload::{Batches, Facts, Shape, job};
use crate::{pct, senders, split_project};

/// The planted word: letters that the generated text never puts together.
const NEEDLE: &str = "zqxvortex";
/// Rows asked of `stream_query`, as the UI's first page.
const PAGE: usize = 100;

/// One filter, its expected count and what every returned row must satisfy.
struct Case {
    name: &'static str,
    filter: Value,
    query: Value,
    expected: u64,
    row_ok: Box<dyn Fn(&Value) -> bool>,
}

/// Timings of one query kind for one case.
#[derive(Default)]
struct Timed {
    samples: Vec<Duration>,
    /// Rows (stream_query) or the count (query_stats) of the last answer.
    got: Option<u64>,
}

impl Timed {
    fn ms(&self, p: f64) -> Option<f64> {
        percentile(&self.samples, p).map(|d| d.as_secs_f64() * 1e3)
    }
}

fn iso(us: i64) -> String {
    DateTime::from_timestamp_micros(us)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn started_us(row: &Value) -> Option<i64> {
    DateTime::parse_from_rfc3339(row["started_at"].as_str()?).ok().map(|t| t.timestamp_micros())
}

fn field_expr(field: &str) -> Value {
    json!({"$getField": field})
}

fn cases(facts: &Facts, child_op: &str) -> Vec<Case> {
    let mut cases = vec![
        Case {
            name: "none (newest calls)",
            filter: Value::Null,
            query: Value::Null,
            expected: facts.calls as u64,
            row_ok: Box::new(|_| true),
        },
        Case {
            name: "roots (`trace_roots_only`)",
            filter: json!({"trace_roots_only": true}),
            query: Value::Null,
            expected: facts.traces as u64,
            row_ok: Box::new(|r| r["parent_id"].is_null()),
        },
        {
            let op = child_op.to_owned();
            Case {
                name: "one op (`op_names`)",
                filter: json!({"op_names": [child_op]}),
                query: Value::Null,
                expected: facts.ops.get(child_op).copied().unwrap_or(0) as u64,
                row_ok: Box::new(move |r| r["op_name"] == op.as_str()),
            }
        },
        Case {
            name: "status error (`summary.weave.status`)",
            filter: Value::Null,
            query: json!({"$expr": {"$eq": [field_expr("summary.weave.status"),
                                            {"$literal": "error"}]}}),
            expected: facts.failed as u64,
            row_ok: Box::new(|r| !r["exception"].is_null()),
        },
    ];
    // A time range of about 1% of the calls from the middle of the project.
    let mut starts = facts.starts_us.clone();
    starts.sort_unstable();
    if let Some(&first) = starts.get(starts.len() * 49 / 100) {
        let lo = first - 1;
        let hi = starts.get(starts.len() * 49 / 100 + (starts.len() / 100).max(1)).copied();
        let hi = hi.unwrap_or(i64::MAX / 2);
        let expected = starts.iter().filter(|&&s| s > lo && s < hi).count() as u64;
        cases.push(Case {
            name: "time range (~1%, `started_at` $gt/$lt)",
            filter: Value::Null,
            query: json!({"$expr": {"$and": [
                {"$gt": [field_expr("started_at"), {"$literal": iso(lo)}]},
                {"$lt": [field_expr("started_at"), {"$literal": iso(hi)}]},
            ]}}),
            expected,
            row_ok: Box::new(move |r| started_us(r).is_some_and(|s| s > lo && s < hi)),
        });
    }
    if let Some((trace, size)) = &facts.sample_trace {
        let id = trace.clone();
        cases.push(Case {
            name: "one trace (`trace_ids`)",
            filter: json!({"trace_ids": [trace]}),
            query: Value::Null,
            expected: *size as u64,
            row_ok: Box::new(move |r| r["trace_id"] == id.as_str()),
        });
    }
    if let Some(call) = &facts.sample_call {
        let id = call.clone();
        cases.push(Case {
            name: "one call (`call_ids`)",
            filter: json!({"call_ids": [call]}),
            query: Value::Null,
            expected: 1,
            row_ok: Box::new(move |r| r["id"] == id.as_str()),
        });
    }
    cases.push(Case {
        name: "substring (`$contains` on `inputs.question`)",
        filter: Value::Null,
        query: json!({"$expr": {"$contains": {"input": field_expr("inputs.question"),
                                              "substr": {"$literal": NEEDLE}}}}),
        expected: facts.planted as u64,
        row_ok: Box::new(|r| r["inputs"]["question"].as_str().is_some_and(|q| q.contains(NEEDLE))),
    });
    cases
}

/// POSTs `body` to `path` and reads the whole answer; the time covers both.
async fn timed(api: &Api, path: &str, body: &Value) -> anyhow::Result<(Duration, Vec<u8>)> {
    let t = Instant::now();
    let resp = api
        .client
        .post(format!("{}{path}", api.base))
        .bearer_auth(&api.key)
        .header(ACCEPT, if path.ends_with("stream_query") { "application/jsonl" } else { "*/*" })
        .json(body)
        .send()
        .await
        .with_context(|| format!("POST {path}"))?;
    let status = resp.status();
    let bytes = resp.bytes().await.with_context(|| format!("reading the {path} answer"))?;
    let elapsed = t.elapsed();
    if !status.is_success() {
        bail!("POST {path} answered HTTP {status}: {}", clip(&String::from_utf8_lossy(&bytes)));
    }
    Ok((elapsed, bytes.to_vec()))
}

/// Checks a stream_query page: its size, each row against the case, newest first.
fn check_page(case: &Case, body: &[u8]) -> Result<u64, String> {
    let mut rows = Vec::new();
    for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let row: Value = serde_json::from_slice(line).map_err(|e| {
            format!("a line is not JSON ({e}): {}", clip(&String::from_utf8_lossy(line)))
        })?;
        rows.push(row);
    }
    let want = case.expected.min(PAGE as u64);
    if rows.len() as u64 != want {
        return Err(format!("{} rows, expected {want}", rows.len()));
    }
    if let Some(bad) = rows.iter().find(|r| !(case.row_ok)(r)) {
        return Err(format!("a row does not match the filter: {}", clip(&bad.to_string())));
    }
    let starts: Vec<Option<i64>> = rows.iter().map(started_us).collect();
    if starts.iter().any(Option::is_none) || starts.windows(2).any(|w| w[0] < w[1]) {
        return Err("rows are not in descending started_at order".into());
    }
    Ok(rows.len() as u64)
}

fn check_count(case: &Case, body: &[u8]) -> Result<u64, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("answer is not JSON: {e}"))?;
    let n = v["count"].as_u64().ok_or_else(|| format!("no count in {}", clip(&v.to_string())))?;
    if n != case.expected {
        return Err(format!("count {n}, expected {}", case.expected));
    }
    Ok(n)
}

/// One warm-up, then `reps` timed requests; stops at the first failure.
async fn time_case(
    api: &Api,
    path: &str,
    body: &Value,
    reps: usize,
    check: impl Fn(&[u8]) -> Result<u64, String>,
    problems: &mut Vec<String>,
    what: &str,
) -> Timed {
    let mut out = Timed::default();
    for rep in 0..=reps {
        let answer = timed(api, path, body).await.map_err(|e| format!("{e:#}"));
        match answer.and_then(|(d, body)| check(&body).map(|n| (d, n))) {
            Ok((d, n)) => {
                out.got = Some(n);
                if rep > 0 {
                    out.samples.push(d);
                }
            }
            Err(e) => {
                problems.push(format!("{what}: {e}"));
                break;
            }
        }
    }
    out.samples.sort_unstable();
    out
}

pub(crate) async fn run(args: &Args, bin: &Path) -> anyhow::Result<Measured> {
    let n = args.calls();
    if n == 0 || args.batch == 0 || args.concurrency == 0 || args.query_reps == 0 {
        bail!("--calls, --batch, --concurrency and --query-reps must be positive");
    }
    let project = match &args.project {
        Some(p) => p.clone(),
        None => format!("bench/queries-{}", &Uuid::new_v4().simple().to_string()[..8]),
    };
    let (entity, name) = split_project(&project)?;
    let machine = Machine::detect();
    let load0 = loadavg();
    let (server, base, key) = Server::start_or_connect(args, bin)?;
    let pid = server.as_ref().map(Server::pid);
    let client = crate::client::http_client(args.concurrency * 2, Duration::from_secs(600))?;
    let api = Api { client: client.clone(), base: base.clone(), key: key.clone() };
    let version = api.version().await.unwrap_or_else(|e| format!("unknown ({e:#})"));
    let before = api.count(&project).await.context("query_stats before seeding")?;
    if before != 0 {
        bail!("project {project} already holds {before} calls; pick a fresh --project");
    }
    let mut problems = Vec::new();

    // Seeding: bodies are generated by a blocking task while the senders send.
    let per_trace = args.children + 1;
    let shape =
        Shape { fail_every: 50, needle: Some((NEEDLE.to_owned(), (1000 / per_trace).max(1))) };
    let batches = Batches::new(&project, n, args.batch, args.children, 1, shape);
    let child_op = batches.op_ref(1);
    let (tx, rx) = tokio::sync::mpsc::channel(args.concurrency * 2);
    let generator = tokio::task::spawn_blocking(move || {
        let mut batches = batches;
        for calls in &mut batches {
            if tx.blocking_send(job(calls)).is_err() {
                break;
            }
        }
        batches.facts()
    });
    eprintln!(
        "seeding {project} with {n} calls, batches of {}, {} ...",
        args.batch,
        senders(args.concurrency)
    );
    let url = format!("{base}/v2/{}/{}/calls/complete", pct(entity), pct(name));
    let cpu = CpuMeter::start(pid);
    let out = send_from(&client, &url, Some(&key), &Post::json(), rx, args.concurrency, None).await;
    let cpu = cpu.stop();
    let facts = generator.await.context("the workload generator")?;
    out.check("seeding calls/complete", &mut problems);
    let seed_secs = out.wall.as_secs_f64().max(1e-9);
    let seed_rate = out.ok_calls as f64 / seed_secs;
    let seed_cpu = cpu.as_ref().and_then(|c| c.server);
    match api.count(&project).await {
        Ok(c) if c == n as u64 => {}
        Ok(c) => problems.push(format!("query_stats counts {c} after seeding, {n} were sent")),
        Err(e) => problems.push(format!("query_stats after seeding: {e:#}")),
    }

    // What the server still does once every write is answered (the substring index, the WAL
    // checkpoint) is waited for, so the queries measure a project at rest.
    let settled = match pid {
        Some(p) => tokio::task::spawn_blocking(move || settle(p, Duration::from_secs(300))).await?,
        None => None,
    };
    let store = server.as_ref().map(|s| dir_size(&s.data_dir()));
    if let Some((secs, cpu)) = settled {
        eprintln!("settled {secs:.1} s after seeding (server CPU {cpu:.1} s)");
    }

    // The queries.
    let mut results = Vec::new();
    for case in cases(&facts, &child_op) {
        eprintln!("  {} (expect {}) ...", case.name, case.expected);
        let mut stream_body = json!({"project_id": project, "filter": case.filter,
                                     "query": case.query, "limit": PAGE,
                                     "sort_by": [{"field": "started_at", "direction": "desc"}]});
        let stats_body = json!({"project_id": project, "filter": case.filter,
                                "query": case.query});
        if case.query.is_null() {
            stream_body.as_object_mut().map(|o| o.remove("query"));
        }
        let reps = args.query_reps;
        let what = format!("{}: calls/stream_query", case.name);
        let page = |b: &[u8]| check_page(&case, b);
        let stream =
            time_case(&api, "/calls/stream_query", &stream_body, reps, page, &mut problems, &what)
                .await;
        let what = format!("{}: calls/query_stats", case.name);
        let count = |b: &[u8]| check_count(&case, b);
        let stats =
            time_case(&api, "/calls/query_stats", &stats_body, reps, count, &mut problems, &what)
                .await;
        results.push((case, stream, stats));
    }

    // Report.
    println!("{}", machine.line());
    println!(
        "Server: heddle {version} at {base}{}. Project `{project}`: {n} calls in {} traces \
         (1 root + {} children over {} ops), {} failed (`exception`), `{NEEDLE}` in {} roots' \
         `inputs.question`.",
        if server.is_some() { " (started by the bench, fresh data dir)" } else { "" },
        facts.traces,
        args.children,
        facts.ops.len(),
        facts.failed,
        facts.planted,
    );
    println!("Command: `{}`", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    print!(
        "Seeding: {} calls in {seed_secs:.1} s = **{seed_rate:.0} calls/s** (batch {}, {})",
        out.ok_calls,
        args.batch,
        senders(args.concurrency)
    );
    if let Some(s) = seed_cpu.filter(|&s| s > 0.0) {
        print!("; server CPU {s:.1} s = {:.0} calls per server CPU-s", out.ok_calls as f64 / s);
    }
    if let Some(b) = store {
        print!(
            "; store {:.1} MB = **{:.0} B per call** (SQLite db + WAL)",
            b as f64 / 1e6,
            b as f64 / n as f64
        );
    }
    println!(".");
    if let Some((secs, cpu)) = settled {
        println!(
            "At rest {secs:.1} s after the last answer, the server using {cpu:.1} s of CPU in \
             that time (the substring index, checkpoints)."
        );
    }
    println!();
    println!(
        "| Filter | Expected | `stream_query` rows | **p50 ms** | p99 ms | `query_stats` count | \
         **p50 ms** | p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
    let g = |v: Option<u64>| v.map_or("–".into(), |v| v.to_string());
    for (case, stream, stats) in &results {
        println!(
            "| {} | {} | {} | **{}** | {} | {} | **{}** | {} |",
            case.name,
            case.expected,
            g(stream.got),
            f(stream.ms(0.5)),
            f(stream.ms(0.99)),
            g(stats.got),
            f(stats.ms(0.5)),
            f(stats.ms(0.99)),
        );
    }
    println!(
        "\n`stream_query`: the first {PAGE} rows newest first (`sort_by` started_at desc), timed \
         to the last byte; `query_stats`: the count. Each {} times after one warm-up, one at a \
         time; p99 of {} samples is their maximum when fewer than 100. Every answer was checked \
         (rows match the filter, newest first, counts as generated).",
        args.query_reps, args.query_reps
    );
    println!(
        "Load average (1 min) at start / end: {} / {}.",
        load0.map_or("–".into(), |l| format!("{l:.2}")),
        loadavg().map_or("–".into(), |l| format!("{l:.2}"))
    );
    if let Some(server) = &server {
        print_log_problems("Server log", &server.log_problems());
    }

    let mut m = Measured { problems, figures: Vec::new() };
    m.add("seed: calls/s", Some(seed_rate), 0);
    m.add("seed: calls per server CPU-s", seed_cpu.filter(|&s| s > 0.0).map(|s| n as f64 / s), 0);
    m.add("store: B per call", store.map(|b| b as f64 / n as f64), 0);
    m.add("settle: s after seeding", settled.map(|s| s.0), 1);
    m.add("settle: server CPU-s", settled.map(|s| s.1), 1);
    for (case, stream, stats) in &results {
        m.add(format!("{}: `stream_query` p50 ms", case.name), stream.ms(0.5), 2);
        m.add(format!("{}: `stream_query` p99 ms", case.name), stream.ms(0.99), 2);
        m.add(format!("{}: `query_stats` p50 ms", case.name), stats.ms(0.5), 2);
        m.add(format!("{}: `query_stats` p99 ms", case.name), stats.ms(0.99), 2);
    }
    Ok(m)
}

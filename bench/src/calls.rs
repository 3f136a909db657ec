//! The calls phases (the default mode): `GET /health`, batched `calls/complete` writes, the
//! read-back through `calls/stream_query` and `calls/query_stats`, and the batch-1 baseline
//! (see the crate docs in `main.rs`).

use crate::report::print_log_problems;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use uuid::Uuid;

use crate::Args;
use crate::client::{Api, Job, send_all};
use crate::machine::{CpuMeter, Machine, dir_size};
use crate::report::{Row, print_table};
use crate::rounds::Measured;
use crate::server::Server;
use crate::verify::{SampleCheck, verify_stream};
use crate::workload::generate;
use crate::{pct, senders, split_project};

pub(crate) async fn run(args: &Args, bin: &Path) -> anyhow::Result<Measured> {
    if args.calls() == 0 || args.batch == 0 || args.concurrency == 0 {
        bail!("--calls, --batch and --concurrency must be positive");
    }
    let project = match &args.project {
        Some(p) => p.clone(),
        None => format!("bench/run-{}", &Uuid::new_v4().simple().to_string()[..8]),
    };
    let (entity, name) = split_project(&project)?;
    let baseline_project = format!("{entity}/{name}-batch1");
    let machine = Machine::detect();

    let (server, base_url, key) = Server::start_or_connect(args, bin)?;
    let server_pid = server.as_ref().map(Server::pid);
    let client = crate::client::http_client(args.concurrency.max(1) * 2, Duration::from_secs(600))?;
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
    eprintln!("generating {} calls in batches of {} ...", args.calls(), args.batch);
    let written = generate(&project, args.calls(), args.batch, args.children, 1);
    eprintln!(
        "  {} requests, {:.1} MB of JSON; per call: inputs {} B, output {} B, whole item {} B",
        written.jobs.len(),
        written.body_bytes as f64 / 1e6,
        written.inputs_bytes / args.calls(),
        written.output_bytes / args.calls(),
        written.item_bytes / args.calls(),
    );
    let item_bytes = written.item_bytes / args.calls();
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
        Some(args.calls()),
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
            if n != args.calls() as u64 {
                problems.push(format!(
                    "calls/query_stats count is {n}, but {} calls were sent",
                    args.calls()
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
            bytes / args.calls() as u64
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
        print_log_problems("Server log", &server.log_problems());
    }
    drop(server);
    let mut m = Measured { problems, figures: Vec::new() };
    for r in &rows {
        r.figures(&mut m);
    }
    m.add("store: B per call", store_bytes.map(|b| b as f64 / args.calls() as f64), 0);
    Ok(m)
}

//! `--ingest-role`: the ingest role alone (decode → map → encode → produce to Kafka). The
//! bench starts a tansu broker and `heddle ingest --kafka` with no consumer (see `stack.rs`),
//! sends the `--otlp` workload over OTLP/HTTP protobuf from `--concurrency` senders, and reports
//! the acknowledged spans/s (an answer means every Kafka record of the request was acknowledged,
//! acks=all) and the spans per CPU-second of the ingest process, from `/proc`. The Kafka records
//! produced come from the role's `/metrics`. Nothing is read back: without a consumer nothing
//! becomes visible; `--otlp --distributed` measures the whole path.

use crate::report::print_log_problems;
use std::path::Path;
use std::time::Duration;

use uuid::Uuid;

use crate::Args;
use crate::client::{Api, send_posts};
use crate::distributed::scrape;
use crate::machine::{CpuMeter, Machine, loadavg, process_cpu};
use crate::otlp::{http_post, http_workload};
use crate::report::percentile;
use crate::rounds::Measured;
use crate::senders;
use crate::stack::{IngestStack, tansu_path};

pub(crate) async fn run(args: &Args, bin: &Path) -> anyhow::Result<Measured> {
    if args.url.is_some() {
        anyhow::bail!(
            "--ingest-role starts its own ingest role and broker; it does not take --url"
        );
    }
    let machine = Machine::detect();
    let load0 = loadavg();
    let key = args.api_key.clone().unwrap_or_else(|| format!("bench-{}", Uuid::new_v4().simple()));
    let tansu = tansu_path(args.tansu.as_deref());
    let stack =
        tokio::task::block_in_place(|| IngestStack::start(bin, &tansu, &key, args.keep_data))?;
    eprintln!(
        "started tansu at {} (pid {}) and {} ingest at {} (pid {})",
        stack.brokers,
        stack.tansu_pid(),
        bin.display(),
        stack.url,
        stack.heddle_pid()
    );
    let project = match &args.project {
        Some(p) => p.clone(),
        None => format!("bench/ingest-{}", &Uuid::new_v4().simple().to_string()[..8]),
    };
    crate::split_project(&project)?;
    let (jobs, spans, wire) = http_workload(args, &project);
    let client = crate::client::http_client(args.concurrency * 2, Duration::from_secs(600))?;
    let api = Api { client: client.clone(), base: stack.url.clone(), key: key.clone() };
    // The ingest role serves no /version.
    let version = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("version unknown ({e})"));
    let before = scrape(&api).await;
    let (heddle_pid, tansu_pid) = (stack.heddle_pid(), stack.tansu_pid());
    let tansu0 = process_cpu(tansu_pid);
    eprintln!("sending {spans} spans with {} ...", senders(args.concurrency));
    let cpu = CpuMeter::start(Some(heddle_pid));
    let url = format!("{}/otel/v1/traces", stack.url);
    let post = http_post(&project);
    let out = send_posts(&client, &url, Some(&key), &post, jobs, args.concurrency, None).await;
    let cpu = cpu.stop();
    let tansu_cpu = match (tansu0, process_cpu(tansu_pid)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let produced = scrape(&api).await.since(&before).produced;
    let mut problems = Vec::new();
    out.check("OTLP/HTTP into the ingest role", &mut problems);
    if out.ok_calls != spans {
        problems.push(format!("{} of {spans} spans acknowledged", out.ok_calls));
    }

    let secs = out.wall.as_secs_f64().max(1e-9);
    let rate = out.ok_calls as f64 / secs;
    let heddle_cpu = cpu.as_ref().and_then(|c| c.server).filter(|&s| s > 0.0);
    let per_cpu = heddle_cpu.map(|s| out.ok_calls as f64 / s);
    let ms = |p| percentile(&out.latencies, p).map(|d| d.as_secs_f64() * 1e3);
    let opt = |v: Option<f64>, d: usize| v.map_or("–".into(), |v| format!("{v:.d$}"));
    println!("{}", machine.line());
    println!(
        "Target: `{} ingest --kafka {}` ({version}), {}, no consumer; started by the bench. \
         Project `{project}`. Command: `{}`",
        bin.display(),
        stack.brokers,
        stack.tansu_version,
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!(
        "Workload: {spans} spans of the `--otlp` workload (1 `invoke_agent` root + {} `chat` spans \
         per trace), {} per OTLP/HTTP protobuf request, {} B per span on the wire, from {}.\n",
        args.otlp_children,
        args.otlp_batch,
        wire / spans.max(1) as u64,
        senders(args.concurrency)
    );
    println!(
        "| OK requests | Spans | Wall s | **Spans/s acked** | per core | p50 ms | p99 ms | Kafka \
         records | ingest CPU s | **Spans per ingest CPU-s** | Busiest ingest thread | tansu CPU s \
         | bench CPU s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    println!(
        "| {} | {} | {secs:.3} | **{rate:.0}** | {:.0} | {} | {} | {produced:.0} | {} | **{}** | {} \
         | {} | {} |",
        out.ok_requests,
        out.ok_calls,
        rate / machine.nproc as f64,
        opt(ms(0.5), 1),
        opt(ms(0.99), 1),
        opt(heddle_cpu, 2),
        opt(per_cpu, 0),
        cpu.as_ref()
            .and_then(|c| c.busiest.as_ref())
            .map_or("–".into(), |(n, s)| format!("`{n}` {:.0}%", s * 100.0)),
        opt(tansu_cpu, 2),
        opt(cpu.as_ref().and_then(|c| c.bench), 2),
    );
    println!(
        "\nAcked: the role answered 2xx without rejected spans once every Kafka record of the \
         request was acknowledged (acks=all). CPU from /proc over the sending; the bench, the role \
         and tansu share the machine's {} CPUs. Load average (1 min) at start / end: {} / {}.",
        machine.nproc,
        opt(load0, 2),
        opt(loadavg(), 2),
    );
    print_log_problems("heddle log", &stack.log_problems());
    drop(stack);

    let mut m = Measured { problems, figures: Vec::new() };
    m.add("ingest role: spans/s acked", Some(rate), 0);
    m.add("ingest role: spans per ingest CPU-s", per_cpu, 0);
    m.add("ingest role: p50 ms", ms(0.5), 1);
    m.add("ingest role: p99 ms", ms(0.99), 1);
    m.add("ingest role: tansu CPU s", tansu_cpu, 2);
    Ok(m)
}

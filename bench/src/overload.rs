//! `--overload`: the server's memory and answers when spans arrive faster than it can take them.
//!
//! 1. Calibration: the `--otlp` workload over OTLP/HTTP protobuf from `--concurrency` closed-loop
//!    senders for a few seconds gives the sustainable rate (or `--overload-rate` names it).
//! 2. Overload: for `--overload-secs`, export requests of `--otlp-batch` spans are started on a
//!    fixed schedule at twice that rate, whatever the answers (open loop). At most
//!    `--overload-senders` requests are in flight; a request due while all are busy is not sent
//!    and is counted as skipped, so the schedule never bunches up.
//! 3. The server's resident memory (`VmRSS` in `/proc/<pid>/status`) is sampled every 100 ms.
//!
//! Reported: RSS before, peak and after the last answer (MB), the answers by class (2xx, 503,
//! 429, anything else), whether every 503 and 429 carried `Retry-After`, and the spans accepted
//! per second. Anything but 2xx/503/429 (including transport errors) is a problem. Embedded, the
//! accepted spans must all be counted by `calls/query_stats` afterwards. With `--ingest-role` the
//! target is `heddle ingest --kafka` with a tansu broker (see `stack.rs`).
//!
//! Requests are made from a pool of encoded export requests whose trace and span ids end in a
//! marker; each request overwrites the markers with its own sequence number, so every span sent
//! is new without encoding anything during the run.

use crate::report::print_log_problems;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use uuid::Uuid;

use crate::Args;
use crate::client::{Api, clip};
use crate::machine::{Machine, loadavg};
use crate::otlp::{export_requests, rejected_spans};
use crate::rounds::Measured;
use crate::server::Server;
use crate::stack::{IngestStack, tansu_path};

/// Four bytes no generated id or text holds (the text is ASCII), overwritten per request.
const MARKER: [u8; 4] = [0xDE, 0xAD, 0xBE, 0xEF];
/// Distinct export requests in the pool.
const POOL: usize = 16;
/// How long the calibration runs when --overload-rate is absent.
const CALIBRATE: Duration = Duration::from_secs(5);
/// RSS sampling period.
const SAMPLE: Duration = Duration::from_millis(100);

/// An encoded export request and where its ids' markers are.
struct Template {
    body: Vec<u8>,
    slots: Vec<usize>,
    spans: u64,
}

impl Template {
    fn new(mut req: ExportTraceServiceRequest) -> Template {
        let mut ids = 0;
        let mut spans = 0;
        for rs in &mut req.resource_spans {
            for ss in &mut rs.scope_spans {
                for sp in &mut ss.spans {
                    spans += 1;
                    for id in [&mut sp.trace_id, &mut sp.span_id, &mut sp.parent_span_id] {
                        if id.len() >= 8 {
                            let n = id.len();
                            id[n - 4..].copy_from_slice(&MARKER);
                            ids += 1;
                        }
                    }
                }
            }
        }
        let body = req.encode_to_vec();
        let slots: Vec<usize> =
            body.windows(4).enumerate().filter(|(_, w)| *w == MARKER).map(|(i, _)| i).collect();
        assert_eq!(slots.len(), ids, "the id marker occurs outside the ids");
        Template { body, slots, spans }
    }

    /// The request with sequence number `seq` in every id.
    fn body(&self, seq: u32) -> Vec<u8> {
        let mut body = self.body.clone();
        for &at in &self.slots {
            body[at..at + 4].copy_from_slice(&seq.to_be_bytes());
        }
        body
    }
}

/// What the target is: an embedded server or the ingest role with its broker.
enum Target {
    Embedded(Server),
    Ingest(IngestStack),
}

impl Target {
    fn pid(&self) -> u32 {
        match self {
            Target::Embedded(s) => s.pid(),
            Target::Ingest(s) => s.heddle_pid(),
        }
    }

    fn log_problems(&self) -> Vec<String> {
        match self {
            Target::Embedded(s) => s.log_problems(),
            Target::Ingest(s) => s.log_problems(),
        }
    }
}

fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The answers of the overload phase.
#[derive(Default)]
struct Tally {
    ok: u64,
    accepted_spans: u64,
    status_503: u64,
    status_429: u64,
    /// 503/429 answers without a `Retry-After` header.
    no_retry_after: u64,
    other: u64,
    /// The first few other answers, verbatim.
    other_samples: Vec<String>,
    skipped: u64,
    latencies: Vec<Duration>,
}

struct Sender {
    client: reqwest::Client,
    url: String,
    key: String,
    project: String,
    templates: Arc<Vec<Template>>,
    seq: AtomicU64,
}

impl Sender {
    /// Sends the next request; returns its answer class, accepted spans and the 503's retry hint.
    async fn send(&self, tally: &Mutex<Tally>) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let t = &self.templates[seq as usize % self.templates.len()];
        let started = Instant::now();
        let res = self
            .client
            .post(&self.url)
            .bearer_auth(&self.key)
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header("project_id", &self.project)
            .body(t.body(seq as u32))
            .send()
            .await;
        let answer = match res {
            Ok(r) => {
                let status = r.status();
                let retry_after = r.headers().contains_key(RETRY_AFTER);
                let body = r.bytes().await.map(|b| b.to_vec());
                Ok((status, retry_after, body))
            }
            Err(e) => Err(e),
        };
        let elapsed = started.elapsed();
        let mut tally = tally.lock().expect("tally");
        let other = |tally: &mut Tally, what: String| {
            tally.other += 1;
            if tally.other_samples.len() < 5 {
                tally.other_samples.push(what);
            }
        };
        match answer {
            Ok((status, _, Ok(body))) if status.is_success() => {
                tally.ok += 1;
                tally.accepted_spans += t.spans.saturating_sub(rejected_spans(&body));
                tally.latencies.push(elapsed);
            }
            Ok((status, retry_after, Ok(_))) if status == 503 || status == 429 => {
                if status == 503 {
                    tally.status_503 += 1;
                } else {
                    tally.status_429 += 1;
                }
                tally.no_retry_after += u64::from(!retry_after);
            }
            Ok((status, _, Ok(body))) => other(
                &mut tally,
                format!("HTTP {status}: {}", clip(&String::from_utf8_lossy(&body))),
            ),
            Ok((status, _, Err(e))) => other(&mut tally, format!("HTTP {status}, body cut: {e}")),
            Err(e) => other(&mut tally, format!("transport error: {e}")),
        }
    }
}

/// Closed-loop sending from `senders` tasks for `CALIBRATE`; returns accepted spans/s.
async fn calibrate(sender: &Arc<Sender>, senders: usize) -> (f64, Tally) {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..senders)
        .map(|_| {
            let (sender, tally) = (sender.clone(), tally.clone());
            tokio::spawn(async move {
                while start.elapsed() < CALIBRATE {
                    sender.send(&tally).await;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let secs = start.elapsed().as_secs_f64();
    let tally = Arc::try_unwrap(tally).ok().expect("senders are done").into_inner().expect("tally");
    (tally.accepted_spans as f64 / secs, tally)
}

pub(crate) async fn run(args: &Args, bin: &Path) -> anyhow::Result<Measured> {
    if args.overload_secs == 0 || args.overload_senders == 0 || args.otlp_batch == 0 {
        bail!("--overload-secs, --overload-senders and --otlp-batch must be positive");
    }
    if args.url.is_some() {
        bail!(
            "--overload samples the server's memory, so it starts its own; it does not take --url"
        );
    }
    let machine = Machine::detect();
    let load0 = loadavg();
    let key = args.api_key.clone().unwrap_or_else(|| format!("bench-{}", Uuid::new_v4().simple()));
    let (target, base) = if args.ingest_role {
        let tansu = tansu_path(args.tansu.as_deref());
        let stack =
            tokio::task::block_in_place(|| IngestStack::start(bin, &tansu, &key, args.keep_data))?;
        eprintln!(
            "started tansu at {} and {} ingest at {}",
            stack.brokers,
            bin.display(),
            stack.url
        );
        let url = stack.url.clone();
        (Target::Ingest(stack), url)
    } else {
        let (server, url) = Server::start(bin, &key, args.keep_data)?;
        eprintln!("started {} at {url} (pid {})", bin.display(), server.pid());
        (Target::Embedded(server), url)
    };
    let pid = target.pid();
    let project = match &args.project {
        Some(p) => p.clone(),
        None => format!("bench/overload-{}", &Uuid::new_v4().simple().to_string()[..8]),
    };
    crate::split_project(&project)?;
    eprintln!("building {POOL} export requests of {} spans ...", args.otlp_batch);
    let reqs =
        export_requests(&project, POOL * args.otlp_batch, args.otlp_batch, args.otlp_children);
    let templates: Vec<Template> = reqs.into_iter().map(Template::new).collect();
    let client = crate::client::http_client(
        args.overload_senders + args.concurrency,
        Duration::from_secs(120),
    )?;
    let sender = Arc::new(Sender {
        client: client.clone(),
        url: format!("{base}/otel/v1/traces"),
        key: key.clone(),
        project: project.clone(),
        templates: Arc::new(templates),
        seq: AtomicU64::new(1),
    });
    let mut problems = Vec::new();

    // 1. The sustainable rate.
    let calibrated = match args.overload_rate {
        Some(r) => r,
        None => {
            eprintln!(
                "calibrating: {} closed-loop senders for {CALIBRATE:?} ...",
                args.concurrency
            );
            let (rate, tally) = calibrate(&sender, args.concurrency.max(1)).await;
            for s in &tally.other_samples {
                problems.push(format!("calibration: {s}"));
            }
            eprintln!(
                "  {rate:.0} spans/s accepted ({} ok, {} 503, {} 429, {} other)",
                tally.ok, tally.status_503, tally.status_429, tally.other
            );
            rate
        }
    };
    if calibrated.is_nan() || calibrated <= 0.0 {
        bail!("no sustainable rate to double (calibration accepted nothing); pass --overload-rate");
    }
    let embedded_before = if matches!(target, Target::Embedded(_)) {
        let api = Api { client: client.clone(), base: base.clone(), key: key.clone() };
        Some((api.count(&project).await.context("query_stats after calibration")?, api))
    } else {
        None
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 2. Overload, with 3. the sampler.
    let offered = 2.0 * calibrated;
    let spans_per_request = args.otlp_batch as f64;
    let interval = Duration::from_secs_f64(spans_per_request / offered);
    eprintln!(
        "overload: {offered:.0} spans/s = one request of {} spans every {:.1} ms for {} s, at most \
         {} in flight ...",
        args.otlp_batch,
        interval.as_secs_f64() * 1e3,
        args.overload_secs,
        args.overload_senders
    );
    let rss_before = rss_kib(pid, "VmRSS:").unwrap_or(0);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid, "VmRSS:").unwrap_or(0));
                samples += 1;
                tokio::time::sleep(SAMPLE).await;
            }
            (peak, samples)
        })
    };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let permits = Arc::new(tokio::sync::Semaphore::new(args.overload_senders));
    let mut ticker = tokio::time::interval(interval);
    let start = Instant::now();
    let until = start + Duration::from_secs(args.overload_secs);
    let mut sent = 0u64;
    while Instant::now() < until {
        ticker.tick().await;
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                sent += 1;
                let (sender, tally) = (sender.clone(), tally.clone());
                tokio::spawn(async move {
                    sender.send(&tally).await;
                    drop(permit);
                });
            }
            Err(_) => tally.lock().expect("tally").skipped += 1,
        }
    }
    // Wait for the requests in flight.
    let _all = permits.acquire_many(args.overload_senders as u32).await;
    let wall = start.elapsed();
    let rss_final = rss_kib(pid, "VmRSS:").unwrap_or(0);
    stop.store(true, Ordering::Relaxed);
    let (rss_peak, samples) = sampler.await.context("the RSS sampler")?;
    let rss_peak = rss_peak.max(rss_final);
    let hwm = rss_kib(pid, "VmHWM:").unwrap_or(0);
    let mut tally =
        Arc::try_unwrap(tally).ok().expect("senders are done").into_inner().expect("tally");
    tally.latencies.sort_unstable();
    let accepted_rate = tally.accepted_spans as f64 / wall.as_secs_f64();

    for s in &tally.other_samples {
        problems.push(format!("overload: an answer other than 2xx/503/429: {s}"));
    }
    if tally.other > tally.other_samples.len() as u64 {
        problems.push(format!("overload: {} answers other than 2xx/503/429 in all", tally.other));
    }
    if tally.no_retry_after > 0 {
        problems.push(format!(
            "overload: {} of the 503/429 answers carried no Retry-After",
            tally.no_retry_after
        ));
    }
    let healthy =
        client.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success());
    if !healthy {
        problems.push("the server was not healthy after the overload".into());
    }
    let mut visible = None;
    if let Some((before, api)) = &embedded_before {
        match api.count(&project).await {
            Ok(n) => {
                let accepted = n.saturating_sub(*before);
                visible = Some(accepted);
                if accepted != tally.accepted_spans {
                    problems.push(format!(
                        "query_stats counts {accepted} calls from the overload, but {} spans were \
                         accepted",
                        tally.accepted_spans
                    ));
                }
            }
            Err(e) => problems.push(format!("query_stats after the overload: {e:#}")),
        }
    }

    // Report.
    let mb = |kib: u64| kib as f64 / 1024.0;
    println!("{}", machine.line());
    println!(
        "Target: {} (started by the bench, fresh data dir), pid {pid}. Command: `{}`",
        match &target {
            Target::Embedded(_) => format!("`{} serve` (embedded SQLite) at {base}", bin.display()),
            Target::Ingest(s) => format!(
                "`{} ingest --kafka {}` at {base}, no consumer ({})",
                bin.display(),
                s.brokers,
                s.tansu_version
            ),
        },
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!();
    println!("| measure | value |\n|---|---:|");
    let ms = |p| {
        crate::report::percentile(&tally.latencies, p)
            .map_or("–".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
    };
    let rows: Vec<(String, String)> = vec![
        (
            "sustainable rate (spans/s)".into(),
            match args.overload_rate {
                Some(r) => format!("{r:.0} (--overload-rate)"),
                None => format!(
                    "{calibrated:.0} (measured, {} senders, {CALIBRATE:?})",
                    args.concurrency
                ),
            },
        ),
        ("offered (spans/s), open loop".into(), format!("{offered:.0}")),
        (
            "requests due / sent / skipped (all senders busy)".into(),
            format!("{} / {sent} / {}", sent + tally.skipped, tally.skipped),
        ),
        (
            "answers 2xx / 503 / 429 / other".into(),
            format!("{} / {} / {} / {}", tally.ok, tally.status_503, tally.status_429, tally.other),
        ),
        ("every 503/429 carried Retry-After".into(), (tally.no_retry_after == 0).to_string()),
        ("2xx latency p50 / p99 ms".into(), format!("{} / {}", ms(0.5), ms(0.99))),
        ("**accepted spans/s**".into(), format!("**{accepted_rate:.0}**")),
        ("RSS before (MB)".into(), format!("{:.0}", mb(rss_before))),
        ("**peak RSS (MB)**, sampled every 100 ms".into(), format!("**{:.0}**", mb(rss_peak))),
        ("RSS after the last answer (MB)".into(), format!("{:.0}", mb(rss_final))),
        ("kernel high-water mark VmHWM (MB)".into(), format!("{:.0}", mb(hwm))),
        ("healthy afterwards".into(), healthy.to_string()),
    ];
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    if let Some(n) = visible {
        println!(
            "| calls counted by `query_stats` = spans accepted | {} |",
            n == tally.accepted_spans
        );
    }
    println!(
        "\n{} s of overload ({:.1} s until the last answer), {samples} RSS samples. Load average (1 \
         min) at start / end: {} / {}.",
        args.overload_secs,
        wall.as_secs_f64(),
        load0.map_or("–".into(), |l| format!("{l:.2}")),
        loadavg().map_or("–".into(), |l| format!("{l:.2}")),
    );
    print_log_problems("Server log", &target.log_problems());
    drop(target);

    let mut m = Measured { problems, figures: Vec::new() };
    m.add("sustainable spans/s (calibration)", Some(calibrated), 0);
    m.add("accepted spans/s under 2× overload", Some(accepted_rate), 0);
    m.add("peak RSS MB", Some(mb(rss_peak)), 0);
    m.add("RSS after the last answer MB", Some(mb(rss_final)), 0);
    m.add("answers 2xx", Some(tally.ok as f64), 0);
    m.add("answers 503", Some(tally.status_503 as f64), 0);
    m.add("answers 429", Some(tally.status_429 as f64), 0);
    m.add("answers other", Some(tally.other as f64), 0);
    m.add("requests skipped (senders busy)", Some(tally.skipped as f64), 0);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sequence_number_makes_new_ids_and_keeps_parents() {
        let reqs = export_requests("e/p", 20, 10, 4);
        let t = Template::new(reqs.into_iter().next().unwrap());
        assert_eq!(t.spans, 10);
        let decode = |seq| {
            let req = ExportTraceServiceRequest::decode(t.body(seq).as_slice()).unwrap();
            req.resource_spans[0].scope_spans[0].spans.clone()
        };
        let (a, b) = (decode(7), decode(8));
        for sp in &a {
            assert_eq!(&sp.span_id[4..], &7u32.to_be_bytes());
            assert_eq!(&sp.trace_id[12..], &7u32.to_be_bytes());
        }
        // Children point at their root, under the same rewrite.
        let root = a.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
        let children = a.iter().filter(|s| s.parent_span_id == root.span_id).count();
        assert_eq!(children, 4);
        let ids = |v: &[opentelemetry_proto::tonic::trace::v1::Span]| {
            v.iter().map(|s| s.span_id.clone()).collect::<std::collections::HashSet<_>>()
        };
        assert_eq!(ids(&a).len(), 10);
        assert!(ids(&a).is_disjoint(&ids(&b)));
        // Everything but the ids is as generated.
        assert_eq!(a[0].attributes, b[0].attributes);
    }
}

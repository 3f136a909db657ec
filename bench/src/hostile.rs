//! `--hostile`: the server's memory and responsiveness while clients attack it.
//!
//! For `--hostile-secs`, `--concurrency` senders per attack repeat requests that once crashed or
//! ballooned heddle (bodies that decode into many times their size, gzip bombs, OTLP bodies of
//! empty spans, of a span with a million attributes and of dotted-key bombs, OTLP/JSON of one
//! long array, refs and expansion that copy one large value many times), while one well-behaved client writes a small call and
//! reads `/health` every 50 ms. The server's resident memory is sampled every 20 ms. Reported: the peak (and the kernel's
//! high-water mark), the answers per attack, and the well-behaved client's latencies and
//! failures. With `--baseline-bin` the same run is repeated against a second binary (e.g. the
//! previous commit's build), so the two columns come from one invocation on one machine.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Args;
use crate::machine::Machine;
use crate::server::Server;

/// One attack: a request repeated by `--concurrency` senders.
struct Attack {
    name: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: bytes::Bytes,
}

/// What one run measured.
#[derive(Default)]
struct Run {
    baseline_kib: u64,
    peak_kib: u64,
    hwm_kib: u64,
    answers: BTreeMap<&'static str, BTreeMap<String, usize>>,
    probe_ms: Vec<f64>,
    probe_failures: usize,
    alive: bool,
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).expect("in memory");
    gz.finish().expect("in memory")
}

/// A length-delimited protobuf field.
fn wrap(tag: u8, inner: Vec<u8>) -> Vec<u8> {
    let mut out = vec![tag];
    prost::encoding::encode_varint(inner.len() as u64, &mut out);
    out.extend(inner);
    out
}

fn attacks(project: &str, refs: &[String]) -> Vec<Attack> {
    let json = || vec![("content-type", "application/json".to_owned())];
    let otlp = vec![
        ("content-type", "application/x-protobuf".to_owned()),
        ("project_id", project.to_owned()),
    ];
    // 16 MiB of empty arrays in a call's inputs: ~15x its size once parsed.
    let arrays = format!(
        r#"{{"batch": [{{"mode": "start", "req": {{"start": {{"project_id": "{project}", "op_name": "o", "started_at": "2026-01-01T00:00:00Z", "inputs": {{"a": [{}]}}}}}}}}]}}"#,
        vec!["[]"; 3_000_000].join(",")
    );
    // 3M numbers, then a string that values refuse (a lone surrogate): refused without
    // building the numbers first.
    let refused = format!(
        r#"{{"batch": [{{"mode": "start", "req": {{"start": {{"project_id": "{project}", "op_name": "o", "started_at": "2026-01-01T00:00:00Z", "inputs": {{"a": [{},"\ud800"]}}}}}}}}]}}"#,
        vec!["1"; 3_000_000].join(",")
    );
    // 1 GiB of zeros behind 1 MiB of gzip: inflating stops at the body limit.
    let zeros = gzip(&vec![b' '; 1 << 30]);
    // The same bomb with a trailer that states 100 bytes: refused only once inflated to the limit.
    let mut forged = zeros.clone();
    let at = forged.len() - 4;
    forged[at..].copy_from_slice(&100u32.to_le_bytes());
    let mut empty_spans = Vec::with_capacity(4 << 20);
    for _ in 0..(2 << 20) {
        empty_spans.extend_from_slice(&[0x12, 0x00]);
    }
    // One span of attributes `a` without a value (field 9: five bytes each, ~50 decoded), just
    // within the request's bound on values: accepted whole, it once took ~400 MiB to convert.
    let attributes = [0x4a, 0x03, 0x0a, 0x01, b'a'].repeat(999_990);
    let key_bomb = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![9; 8],
                    name: "s".into(),
                    start_time_unix_nano: 1_763_700_000_000_000_000,
                    attributes: vec![KeyValue {
                        key: vec!["a"; 10_000].join("."),
                        value: Some(AnyValue { value: Some(any_value::Value::IntValue(1)) }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut gz_headers = json();
    gz_headers.push(("content-encoding", "gzip".to_owned()));
    vec![
        Attack {
            name: "9 MiB of empty JSON arrays (3M values)",
            path: "/call/upsert_batch".into(),
            headers: json(),
            body: arrays.into(),
        },
        Attack {
            name: "6 MiB of numbers ending in a lone surrogate (3M values)",
            path: "/call/upsert_batch".into(),
            headers: json(),
            body: refused.into(),
        },
        Attack {
            name: "gzip bomb (1 GiB of spaces)",
            path: "/call/upsert_batch".into(),
            headers: gz_headers.clone(),
            body: zeros.into(),
        },
        Attack {
            name: "gzip bomb, its trailer stating 100 bytes",
            path: "/call/upsert_batch".into(),
            headers: gz_headers,
            body: forged.into(),
        },
        Attack {
            name: "OTLP: 2M empty spans (4 MiB)",
            path: "/otel/v1/traces".into(),
            headers: otlp.clone(),
            body: wrap(0x0a, wrap(0x12, empty_spans)).into(),
        },
        Attack {
            name: "OTLP: a span of 1M attributes (5 MiB)",
            path: "/otel/v1/traces".into(),
            headers: otlp.clone(),
            body: wrap(0x0a, wrap(0x12, wrap(0x12, attributes))).into(),
        },
        Attack {
            name: "OTLP/JSON: one array of 3M numbers (6 MiB)",
            path: "/otel/v1/traces".into(),
            headers: vec![
                ("content-type", "application/json".to_owned()),
                ("project_id", project.to_owned()),
            ],
            // An unknown field, which OTLP/JSON would otherwise drop once parsed.
            body: format!(r#"{{"resourceSpans":[],"x":[{}0]}}"#, "0,".repeat(3_000_000))
                .into_bytes()
                .into(),
        },
        Attack {
            name: "OTLP: 10,000-segment attribute key",
            path: "/otel/v1/traces".into(),
            headers: otlp,
            body: key_bomb.encode_to_vec().into(),
        },
        Attack {
            name: "1,000 refs to one 1 MiB object",
            path: "/refs/read_batch".into(),
            headers: json(),
            body: serde_json::to_vec(&json!({"refs": vec![refs[0].clone(); 1000]}))
                .expect("JSON")
                .into(),
        },
        Attack {
            name: "expand one 1 MiB object into 300 calls",
            path: "/calls/stream_query".into(),
            headers: json(),
            body: serde_json::to_vec(
                &json!({"project_id": project, "expand_columns": ["inputs.m"]}),
            )
            .expect("JSON")
            .into(),
        },
    ]
}

async fn seed(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    project: &str,
) -> anyhow::Result<Vec<String>> {
    let val = json!({"pad": "y".repeat(1 << 20)});
    let res: Value = client
        .post(format!("{base}/obj/create"))
        .bearer_auth(key)
        .json(&json!({"obj": {"project_id": project, "object_id": "big", "val": val}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let digest = res["digest"].as_str().context("obj/create digest")?;
    let r = format!("weave:///{project}/object/big:{digest}");
    let calls: Vec<Value> = (0..300)
        .map(|i| {
            json!({"project_id": project, "id": format!("seed-{i}"), "trace_id": format!("t-{i}"),
                   "op_name": "o", "started_at": "2026-01-01T00:00:00Z",
                   "ended_at": "2026-01-01T00:00:01Z", "inputs": {"m": r}})
        })
        .collect();
    client
        .post(format!("{base}/v2/{project}/calls/complete"))
        .bearer_auth(key)
        .json(&json!({ "batch": calls }))
        .send()
        .await?
        .error_for_status()?;
    Ok(vec![r])
}

async fn run_one(bin: &Path, args: &Args) -> anyhow::Result<Run> {
    let key = format!("bench-{}", Uuid::new_v4().simple());
    let (server, base) = Server::start(bin, &key, args.keep_data)?;
    let pid = server.pid();
    eprintln!("hostile: started {} at {base} (pid {pid})", bin.display());
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(120)).build()?;
    let project = format!("bench/hostile-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let refs = seed(&client, &base, &key, &project).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut run = Run { baseline_kib: status_kib(pid, "VmRSS:").unwrap_or(0), ..Run::default() };

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(status_kib(pid, "VmRSS:").unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        })
    };
    let probe = {
        let (stop, client, base, key, project) =
            (stop.clone(), client.clone(), base.clone(), key.clone(), project.clone());
        tokio::spawn(async move {
            let (mut ms, mut failures) = (Vec::new(), 0);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let call = json!({"batch": [{"project_id": project, "id": format!("probe-{i}"),
                    "trace_id": format!("probe-{i}"), "op_name": "probe",
                    "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z"}]});
                let health = client.get(format!("{base}/health")).send().await;
                let write = client
                    .post(format!("{base}/v2/{project}/calls/complete"))
                    .bearer_auth(&key)
                    .json(&call)
                    .send()
                    .await;
                let ok = |r: &Result<reqwest::Response, reqwest::Error>| {
                    r.as_ref().is_ok_and(|r| r.status().is_success())
                };
                if ok(&health) && ok(&write) {
                    ms.push(t.elapsed().as_secs_f64() * 1000.0);
                } else {
                    failures += 1;
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (ms, failures)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(args.hostile_secs);
    let mut senders = Vec::new();
    let chosen = attacks(&project, &refs).into_iter().filter(|a| {
        args.hostile_attack.is_empty()
            || args.hostile_attack.iter().any(|f| a.name.contains(f.as_str()))
    });
    for attack in chosen {
        let attack = Arc::new(attack);
        for _ in 0..args.concurrency.max(1) {
            let (attack, client, base, key) =
                (attack.clone(), client.clone(), base.clone(), key.clone());
            senders.push(tokio::spawn(async move {
                let mut answers: BTreeMap<String, usize> = BTreeMap::new();
                while Instant::now() < deadline {
                    let mut req = client.post(format!("{base}{}", attack.path)).bearer_auth(&key);
                    for (k, v) in &attack.headers {
                        req = req.header(*k, v);
                    }
                    let answer = match req.body(attack.body.clone()).send().await {
                        // Drain the body: a streamed answer is part of the load.
                        Ok(r) => {
                            let status = r.status().as_u16().to_string();
                            match r.bytes().await {
                                Ok(_) => status,
                                Err(_) => format!("{status} (body cut)"),
                            }
                        }
                        Err(e) if e.is_connect() => "connection refused".into(),
                        Err(_) => "transport error".into(),
                    };
                    *answers.entry(answer).or_default() += 1;
                }
                (attack.name, answers)
            }));
        }
    }
    for s in senders {
        let (name, answers) = s.await?;
        let entry = run.answers.entry(name).or_default();
        for (k, n) in answers {
            *entry.entry(k).or_default() += n;
        }
    }
    stop.store(true, Ordering::Relaxed);
    run.peak_kib = sampler.await?;
    (run.probe_ms, run.probe_failures) = probe.await?;
    run.hwm_kib = status_kib(pid, "VmHWM:").unwrap_or(0);
    run.alive =
        client.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success());
    drop(server);
    Ok(run)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub(crate) async fn run(args: &Args) -> anyhow::Result<Vec<String>> {
    let machine = Machine::detect();
    let mut bins = vec![args.heddle_bin.clone()];
    bins.extend(args.baseline_bin.clone());
    let mut runs = Vec::new();
    for bin in &bins {
        runs.push(run_one(bin, args).await?);
    }
    println!("{}\n", machine.line());
    println!(
        "Hostile load: {} s, {} senders per attack, one well-behaved client (a call and /health \
         every 50 ms).\n",
        args.hostile_secs, args.concurrency
    );
    let header: Vec<String> = bins.iter().map(|b| format!("`{}`", b.display())).collect();
    println!("| measure | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(bins.len()));
    let row = |name: &str, f: &dyn Fn(&Run) -> String| {
        let cells: Vec<String> = runs.iter().map(f).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    let mib = |kib: u64| format!("{:.0} MiB", kib as f64 / 1024.0);
    row("RSS before", &|r| mib(r.baseline_kib));
    row("peak RSS (sampled / kernel high-water mark)", &|r| {
        format!("{} / {}", mib(r.peak_kib), mib(r.hwm_kib))
    });
    row("healthy afterwards", &|r| r.alive.to_string());
    row("well-behaved client: ok / failed", &|r| {
        format!("{} / {}", r.probe_ms.len(), r.probe_failures)
    });
    row("well-behaved client: p50 / p99 ms", &|r| {
        let mut ms = r.probe_ms.clone();
        ms.sort_by(f64::total_cmp);
        format!("{:.1} / {:.1}", percentile(&ms, 0.5), percentile(&ms, 0.99))
    });
    let names: Vec<&'static str> = runs[0].answers.keys().copied().collect();
    for name in names {
        row(name, &|r| {
            r.answers
                .get(name)
                .map(|a| a.iter().map(|(k, n)| format!("{n}× {k}")).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        });
    }
    let mut problems = Vec::new();
    if !runs[0].alive {
        problems.push(format!("{} was not healthy after the attacks", bins[0].display()));
    }
    if runs[0].probe_failures > 0 {
        problems.push(format!(
            "the well-behaved client failed {} times against {}",
            runs[0].probe_failures,
            bins[0].display()
        ));
    }
    Ok(problems)
}

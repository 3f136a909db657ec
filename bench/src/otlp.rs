//! `--otlp`: OpenTelemetry trace ingest. The same LLM-agent traces — a root `invoke_agent` span
//! and `--otlp-children` `chat` spans with OpenTelemetry GenAI attributes, 0.5–2 KB each of
//! `gen_ai.input.messages` and `gen_ai.output.messages` — are sent, each transport into its own
//! project, as:
//!
//! * `http`: `POST /otel/v1/traces`, OTLP/protobuf (`application/x-protobuf`);
//! * `http-gzip`: the same bodies gzip-compressed (`Content-Encoding: gzip`);
//! * `grpc` / `grpc-gzip`: OTLP/gRPC `TraceService/Export`, uncompressed / gzip;
//! * `calls`: the baseline, the calls those spans stand for sent through
//!   `POST /v2/{entity}/{project}/calls/complete` as the weave SDK would (same ids, times,
//!   inputs, outputs, attributes and usage; no `otel_dump`).
//!
//! Spans go out the way an OpenTelemetry BatchSpanProcessor exports them: in the order they end
//! (children before their root), `--otlp-batch` (512) per export request, from `--concurrency`
//! senders on their own connections. HTTP bodies are encoded (and compressed) before the clock
//! starts; gRPC requests are built before it and encoded by tonic while sending.
//!
//! Embedded mode: the server answers after the spans are committed, so acknowledged spans are
//! visible spans; `calls/query_stats` is checked right after the last answer. Distributed mode
//! (with --distributed) measures acknowledged and visible spans/s, lag and exactness as the
//! distributed calls bench does. Every phase streams its project back and checks that each span
//! became exactly one call and that a sample call carries what its span said.

use crate::report::print_log_problems;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::Args;
use crate::client::{AckSink, Api, Job, Outcome, Post, clip, send_posts};
use crate::distributed::{
    Watched, deploy, exactly_once, keeps_probe, lag_row, ms, opt, pctl, watch_phase,
};
use crate::machine::{CpuMeter, CpuUse, Machine, dir_size, loadavg};
use crate::report::percentile;
use crate::rounds::Measured;
use crate::server::Server;
use crate::stack::{PARTITIONS, TOPIC};
use crate::verify::{SampleCheck, verify_stream};
use crate::workload::Written;
use crate::{pct, senders, split_project};

/// One way of sending the spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Calls,
    CallsDump,
    Http,
    HttpGzip,
    Grpc,
    GrpcGzip,
}

impl Transport {
    pub(crate) fn parse(s: &str) -> anyhow::Result<Transport> {
        Ok(match s.trim() {
            "calls" => Transport::Calls,
            "calls-dump" => Transport::CallsDump,
            "http" => Transport::Http,
            "http-gzip" => Transport::HttpGzip,
            "grpc" => Transport::Grpc,
            "grpc-gzip" => Transport::GrpcGzip,
            other => {
                bail!(
                    "unknown transport {other:?}: use calls, calls-dump, http, http-gzip, grpc \
                     or grpc-gzip"
                )
            }
        })
    }

    fn slug(self) -> &'static str {
        match self {
            Transport::Calls => "calls",
            Transport::CallsDump => "calls-dump",
            Transport::Http => "http",
            Transport::HttpGzip => "http-gzip",
            Transport::Grpc => "grpc",
            Transport::GrpcGzip => "grpc-gzip",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Transport::Calls => "baseline: `calls/complete` JSON",
            Transport::CallsDump => "`calls/complete` JSON + `otel_dump`",
            Transport::Http => "OTLP/HTTP protobuf",
            Transport::HttpGzip => "OTLP/HTTP protobuf + gzip",
            Transport::Grpc => "OTLP/gRPC",
            Transport::GrpcGzip => "OTLP/gRPC + gzip",
        }
    }

    fn is_grpc(self) -> bool {
        matches!(self, Transport::Grpc | Transport::GrpcGzip)
    }

    fn is_calls(self) -> bool {
        matches!(self, Transport::Calls | Transport::CallsDump)
    }
}

// ---------------------------------------------------------------------------------------------
// Workload: LLM-agent traces as logical spans, rendered as OTLP spans or as complete calls.
// ---------------------------------------------------------------------------------------------

/// splitmix64: deterministic, so every transport sends the same content.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }
}

/// Made-up words with a Zipf-like frequency, so message text compresses about like prose
/// (whole OTLP/protobuf bodies gzip about 2.4×) instead of like a repeated sentence.
struct Text {
    words: Vec<String>,
}

impl Text {
    fn new(rng: &mut Rng) -> Text {
        const ONSETS: &[&str] = &[
            "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
            "z", "ch", "sh", "th", "st", "tr", "pr", "br", "cl", "gr", "pl", "sp", "qu",
        ];
        const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "y"];
        const CODAS: &[&str] = &["", "", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "ck"];
        let mut seen = HashSet::new();
        let mut words = Vec::with_capacity(6000);
        while words.len() < 6000 {
            let syllables = 1 + (rng.below(6) / 2) as usize + usize::from(rng.below(5) == 0);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(ONSETS[rng.below(ONSETS.len() as u64) as usize]);
                w.push_str(VOWELS[rng.below(VOWELS.len() as u64) as usize]);
            }
            w.push_str(CODAS[rng.below(CODAS.len() as u64) as usize]);
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        // Short words first: they get the frequent ranks, as in natural language.
        words.sort_by_key(String::len);
        Text { words }
    }

    /// Sentences of words until at least `len` bytes, with now and then a number or an id.
    fn prose(&self, rng: &mut Rng, len: usize) -> String {
        let mut s = String::with_capacity(len + 24);
        let mut sentence = 0;
        while s.len() < len {
            if !s.is_empty() {
                s.push(' ');
            }
            let r = rng.below(100);
            if r < 3 {
                s.push_str(&(rng.below(100_000)).to_string());
            } else if r < 4 {
                s.push_str(&format!("#{:08x}", rng.next() as u32));
            } else {
                let rank = (rng.unit().powf(2.6) * self.words.len() as f64) as usize;
                let w = &self.words[rank.min(self.words.len() - 1)];
                if sentence == 0 {
                    let mut c = w.chars();
                    if let Some(f) = c.next() {
                        s.extend(f.to_uppercase());
                        s.push_str(c.as_str());
                    }
                } else {
                    s.push_str(w);
                }
            }
            sentence += 1;
            if sentence > 6 && rng.below(9) == 0 {
                s.push(if rng.below(6) == 0 { '?' } else { '.' });
                sentence = 0;
            } else if rng.below(14) == 0 {
                s.push(',');
            }
        }
        s.push('.');
        s
    }
}

/// What one span says; rendered as an OTLP span or as the call the weave SDK would send.
struct LSpan {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    start_ns: u64,
    end_ns: u64,
    detail: Detail,
    /// `gen_ai.input.messages` / `gen_ai.output.messages`, JSON text.
    input: String,
    output: String,
}

enum Detail {
    Agent { conversation: String },
    Chat { response_id: String, input_tokens: i64, output_tokens: i64, temperature: f64 },
}

const AGENT: &str = "support_agent";
const AGENT_ID: &str = "asst_5j66UpCpwteGg4YSxUnt7lPY";
const REQUEST_MODEL: &str = "gpt-4o";
const RESPONSE_MODEL: &str = "gpt-4o-2024-08-06";
const MAX_TOKENS: i64 = 1024;
const SCOPE_NAME: &str = "opentelemetry.instrumentation.openai_v2";
const SCOPE_VERSION: &str = "2.1b0";

/// Messages JSON of `target` bytes (about): `parts` as the GenAI semantic conventions put them.
fn messages(text: &Text, rng: &mut Rng, roles: &[&str], target: usize, output: bool) -> String {
    let overhead = roles.len() * 60 + if output { 25 } else { 0 };
    let room = target.saturating_sub(overhead).max(40);
    let msgs: Vec<Value> = roles
        .iter()
        .enumerate()
        .map(|(i, role)| {
            // The last message gets the larger share.
            let share =
                if i + 1 == roles.len() { room - room / 3 * (roles.len() - 1) } else { room / 3 };
            let mut m = json!({"role": role, "parts": [{"type": "text",
                                                          "content": text.prose(rng, share)}]});
            if output {
                m["finish_reason"] = json!("stop");
            }
            m
        })
        .collect();
    serde_json::to_string(&msgs).expect("serialising messages")
}

fn id_bytes<const N: usize>(rng: &mut Rng) -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(8) {
        let v = rng.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    if out.iter().all(|b| *b == 0) {
        out[0] = 1;
    }
    out
}

/// Logical spans in export order, `batch` per request.
struct SpanGen {
    rng: Rng,
    text: Text,
    children: usize,
    /// Start of the next trace, in ns since the epoch.
    t_ns: u64,
}

impl SpanGen {
    fn new(seed: u64, children: usize, traces: usize) -> SpanGen {
        let mut rng = Rng(0xA076_1D64_78BD_642F ^ seed);
        let text = Text::new(&mut rng);
        let now =
            SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        // Traces start 20 ms apart and end about a minute ago.
        let t_ns = now - (traces as u64 * 20 + 60_000) * 1_000_000;
        SpanGen { rng, text, children, t_ns }
    }

    /// One trace: its chat spans, then the root (the order in which they end).
    fn trace(&mut self) -> Vec<LSpan> {
        let rng = &mut self.rng;
        let trace_id = id_bytes::<16>(rng);
        let root_id = id_bytes::<8>(rng);
        let t0 = self.t_ns;
        self.t_ns += 20_000_000;
        let mut t = t0 + 1_000_000 + rng.below(2_000_000);
        let mut spans = Vec::with_capacity(self.children + 1);
        for _ in 0..self.children {
            let dur = 300_000_000 + rng.below(2_500_000_000);
            let target_in = rng.between(512, 2048);
            let target_out = rng.between(512, 2048);
            let input = messages(&self.text, rng, &["system", "user"], target_in, false);
            let output = messages(&self.text, rng, &["assistant"], target_out, true);
            spans.push(LSpan {
                trace_id,
                span_id: id_bytes::<8>(rng),
                parent: Some(root_id),
                start_ns: t,
                end_ns: t + dur,
                detail: Detail::Chat {
                    response_id: format!("chatcmpl-{:016x}{:08x}", rng.next(), rng.next() as u32),
                    input_tokens: (input.len() / 4) as i64 + rng.below(40) as i64,
                    output_tokens: (output.len() / 4) as i64 + rng.below(40) as i64,
                    temperature: [0.0, 0.2, 0.7][rng.below(3) as usize],
                },
                input,
                output,
            });
            t += dur + 5_000_000 + rng.below(50_000_000);
        }
        let target_in = rng.between(512, 2048);
        let target_out = rng.between(512, 2048);
        let input = messages(&self.text, rng, &["user"], target_in, false);
        let output = messages(&self.text, rng, &["assistant"], target_out, true);
        spans.push(LSpan {
            trace_id,
            span_id: root_id,
            parent: None,
            start_ns: t0,
            end_ns: t + 2_000_000,
            detail: Detail::Agent { conversation: format!("conv_{:016x}", rng.next()) },
            input,
            output,
        });
        spans
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

fn s(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

impl LSpan {
    fn hex_id(&self) -> String {
        hex(&self.span_id)
    }

    fn otlp(&self) -> Span {
        let mut attributes = Vec::with_capacity(16);
        let (name, kind) = match &self.detail {
            Detail::Agent { conversation } => {
                attributes.extend([
                    s("gen_ai.operation.name", "invoke_agent"),
                    s("gen_ai.provider.name", "openai"),
                    s("gen_ai.agent.name", AGENT),
                    s("gen_ai.agent.id", AGENT_ID),
                    s("gen_ai.conversation.id", conversation),
                ]);
                (format!("invoke_agent {AGENT}"), SpanKind::Internal)
            }
            Detail::Chat { response_id, input_tokens, output_tokens, temperature } => {
                attributes.extend([
                    s("gen_ai.operation.name", "chat"),
                    s("gen_ai.system", "openai"),
                    s("gen_ai.provider.name", "openai"),
                    s("gen_ai.request.model", REQUEST_MODEL),
                    kv("gen_ai.request.temperature", any_value::Value::DoubleValue(*temperature)),
                    i("gen_ai.request.max_tokens", MAX_TOKENS),
                    s("gen_ai.response.model", RESPONSE_MODEL),
                    s("gen_ai.response.id", response_id),
                    kv(
                        "gen_ai.response.finish_reasons",
                        any_value::Value::ArrayValue(ArrayValue {
                            values: vec![AnyValue {
                                value: Some(any_value::Value::StringValue("stop".into())),
                            }],
                        }),
                    ),
                    i("gen_ai.usage.input_tokens", *input_tokens),
                    i("gen_ai.usage.output_tokens", *output_tokens),
                    s("server.address", "api.openai.com"),
                    i("server.port", 443),
                ]);
                (format!("chat {REQUEST_MODEL}"), SpanKind::Client)
            }
        };
        attributes.push(s("gen_ai.input.messages", &self.input));
        attributes.push(s("gen_ai.output.messages", &self.output));
        Span {
            trace_id: self.trace_id.to_vec(),
            span_id: self.span_id.to_vec(),
            parent_span_id: self.parent.map(|p| p.to_vec()).unwrap_or_default(),
            // Sampled; the parent (if any) is local, not remote.
            flags: 0x101,
            name,
            kind: kind as i32,
            start_time_unix_nano: self.start_ns,
            end_time_unix_nano: self.end_ns,
            attributes,
            ..Default::default()
        }
    }

    /// The call as the weave SDK would send it for this span (and, minus `otel_dump` and the
    /// op ref, what heddle makes of the span).
    ///
    /// With `dump`, the call also carries the `otel_dump` heddle keeps for a span (the span with
    /// its attributes nested and parsed, resource and scope), to tell that cost from the rest.
    fn call(&self, project: &str, op_digests: &[String; 2], dump: bool) -> Value {
        let input: Value = serde_json::from_str(&self.input).expect("generated JSON");
        let output: Value = serde_json::from_str(&self.output).expect("generated JSON");
        let id = self.hex_id();
        let (op, digest, attributes, summary, thread_id, turn_id) = match &self.detail {
            Detail::Agent { conversation } => (
                format!("invoke_agent_{AGENT}"),
                &op_digests[0],
                json!({"provider": "openai", "operation_name": "invoke_agent",
                       "agent_name": AGENT, "agent_id": AGENT_ID}),
                json!({}),
                Some(conversation.clone()),
                Some(id.clone()),
            ),
            Detail::Chat { response_id, input_tokens, output_tokens, temperature } => (
                format!("chat_{REQUEST_MODEL}"),
                &op_digests[1],
                json!({
                    "server": {"address": "api.openai.com", "port": 443},
                    "system": "openai",
                    "model": RESPONSE_MODEL,
                    "provider": "openai",
                    "model_parameters": {"model": REQUEST_MODEL, "temperature": temperature,
                                         "max_tokens": MAX_TOKENS},
                    "operation_name": "chat",
                    "response_id": response_id,
                    "finish_reasons": ["stop"],
                }),
                json!({"usage": {RESPONSE_MODEL: {
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                    "requests": 1,
                }}}),
                None,
                None,
            ),
        };
        json!({
            "project_id": project,
            "id": id,
            "trace_id": hex(&self.trace_id),
            "op_name": format!("weave:///{project}/op/{op}:{digest}"),
            "started_at": rfc3339(self.start_ns),
            "ended_at": rfc3339(self.end_ns),
            "display_name": null,
            "parent_id": self.parent.map(|p| hex(&p)),
            "thread_id": thread_id,
            "turn_id": turn_id,
            "attributes": attributes,
            "inputs": {"gen_ai.input.messages": input},
            "output": {"gen_ai.output.messages": output},
            "summary": summary,
            "otel_dump": if dump { self.dump() } else { Value::Null },
            "exception": null,
            "wb_user_id": null,
            "wb_run_id": null,
            "wb_run_step": null,
            "wb_run_step_end": null,
        })
    }
}

impl LSpan {
    /// The span as heddle dumps it into `otel_dump` (`proto/src/otlp/span.rs`).
    fn dump(&self) -> Value {
        let span = self.otlp();
        let mut attributes = Map::new();
        for kv in &span.attributes {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) if s.starts_with('[') => {
                    serde_json::from_str(s).expect("generated JSON")
                }
                Some(any_value::Value::StringValue(s)) => json!(s),
                Some(any_value::Value::IntValue(i)) => json!(i),
                Some(any_value::Value::DoubleValue(d)) => json!(d),
                Some(any_value::Value::ArrayValue(_)) => json!(["stop"]),
                _ => Value::Null,
            };
            nest_into(&mut attributes, &kv.key, v);
        }
        let mut resource_attributes = Map::new();
        for kv in &resource(0).attributes {
            if let Some(any_value::Value::StringValue(s)) =
                kv.value.as_ref().and_then(|v| v.value.as_ref())
            {
                nest_into(&mut resource_attributes, &kv.key, json!(s));
            }
        }
        json!({
            "name": span.name,
            "context": {"trace_id": hex(&self.trace_id), "span_id": hex(&self.span_id),
                        "trace_state": ""},
            "kind": if self.parent.is_some() { "CLIENT" } else { "INTERNAL" },
            "parent_id": self.parent.map(|p| hex(&p)),
            "start_time": rfc3339(self.start_ns),
            "end_time": rfc3339(self.end_ns),
            "status": {"code": "UNSET", "message": ""},
            "attributes": attributes,
            "events": [],
            "links": [],
            "resource": {"attributes": resource_attributes, "dropped_attributes_count": 0},
            "scope": {"name": SCOPE_NAME, "version": SCOPE_VERSION},
        })
    }
}

/// Sets the dotted `key` in `root` as nested objects.
fn nest_into(root: &mut Map<String, Value>, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            root.insert(key.to_owned(), value);
        }
        Some((head, rest)) => {
            let slot = root.entry(head.to_owned()).or_insert_with(|| json!({}));
            if let Value::Object(m) = slot {
                nest_into(m, rest, value);
            }
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn rfc3339(ns: u64) -> String {
    let t =
        chrono::DateTime::from_timestamp((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as u32)
            .unwrap_or_default();
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn resource(sender: usize) -> Resource {
    Resource {
        attributes: vec![
            s("service.name", "support-agent"),
            s("service.version", "2.14.0"),
            s("service.instance.id", &format!("support-agent-{sender}")),
            s("deployment.environment.name", "bench"),
            s("telemetry.sdk.language", "python"),
            s("telemetry.sdk.name", "opentelemetry"),
            s("telemetry.sdk.version", "1.38.0"),
            s("host.name", &format!("worker-{sender}")),
            s("process.runtime.name", "cpython"),
            s("process.runtime.version", "3.12.3"),
        ],
        ..Default::default()
    }
}

/// One OTLP/gRPC export request, built ahead.
pub(crate) struct GrpcJob {
    req: ExportTraceServiceRequest,
    spans: usize,
    probe: Option<String>,
}

/// A transport's workload, ready to send.
struct Built {
    http: Vec<Job>,
    grpc: Vec<GrpcJob>,
    spans: usize,
    requests: usize,
    ids: HashSet<String>,
    /// The first span's call: as sent (`calls`), or what it must hold when read back (OTLP).
    sample: Value,
    /// Bytes on the wire (HTTP bodies, or gRPC messages as encoded/compressed).
    wire_bytes: u64,
    /// OTLP/protobuf bytes of all spans, uncompressed.
    protobuf_bytes: u64,
    /// `gen_ai.input.messages` + `gen_ai.output.messages` bytes.
    message_bytes: u64,
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).expect("gzip into memory");
    enc.finish().expect("gzip into memory")
}

/// `spans` spans (whole traces of 1 + `children`, the last one cut short) in requests of `batch`.
fn build(
    transport: Transport,
    project: &str,
    spans: usize,
    batch: usize,
    children: usize,
    concurrency: usize,
) -> Built {
    let per_trace = children + 1;
    let mut g = SpanGen::new(1, children, spans.div_ceil(per_trace));
    let mut op_rng = Rng(7);
    let op_digests = [digest(&mut op_rng), digest(&mut op_rng)];
    let mut out = Built {
        http: Vec::new(),
        grpc: Vec::new(),
        spans,
        requests: 0,
        ids: HashSet::with_capacity(spans),
        sample: Value::Null,
        wire_bytes: 0,
        protobuf_bytes: 0,
        message_bytes: 0,
    };
    let mut pending: Vec<LSpan> = Vec::with_capacity(batch);
    let mut made = 0;
    let flush = |pending: &mut Vec<LSpan>, out: &mut Built| {
        let n = pending.len();
        let index = out.requests;
        out.requests += 1;
        let probe = Some(pending[n / 2].hex_id());
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource(index % concurrency.max(1))),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.into(),
                        version: SCOPE_VERSION.into(),
                        ..Default::default()
                    }),
                    spans: pending.iter().map(LSpan::otlp).collect(),
                    schema_url: "https://opentelemetry.io/schemas/1.28.0".into(),
                }],
                schema_url: "https://opentelemetry.io/schemas/1.28.0".into(),
            }],
        };
        out.protobuf_bytes += req.encoded_len() as u64;
        match transport {
            Transport::Calls | Transport::CallsDump => {
                let dump = transport == Transport::CallsDump;
                let calls: Vec<Value> =
                    pending.iter().map(|sp| sp.call(project, &op_digests, dump)).collect();
                let body = serde_json::to_vec(&json!({ "batch": calls })).expect("serialising");
                out.wire_bytes += body.len() as u64;
                out.http.push(Job { body: Some(body), calls: n, probe });
            }
            Transport::Http | Transport::HttpGzip => {
                let mut body = req.encode_to_vec();
                if transport == Transport::HttpGzip {
                    body = gzip(&body);
                }
                out.wire_bytes += body.len() as u64;
                out.http.push(Job { body: Some(body), calls: n, probe });
            }
            Transport::Grpc | Transport::GrpcGzip => {
                // 5 bytes of gRPC framing per message; tonic compresses with flate2's default
                // level too, so this is the size it sends.
                let len = if transport == Transport::GrpcGzip {
                    gzip(&req.encode_to_vec()).len()
                } else {
                    req.encoded_len()
                };
                out.wire_bytes += len as u64 + 5;
                out.grpc.push(GrpcJob { req, spans: n, probe });
            }
        }
        pending.clear();
    };
    while made < spans {
        let mut trace = g.trace();
        trace.drain(..per_trace - per_trace.min(spans - made));
        made += trace.len();
        for sp in trace {
            out.message_bytes += (sp.input.len() + sp.output.len()) as u64;
            out.ids.insert(sp.hex_id());
            if out.sample.is_null() {
                let call = sp.call(project, &op_digests, transport == Transport::CallsDump);
                out.sample = if transport.is_calls() { call } else { expected(call) };
            }
            pending.push(sp);
            if pending.len() == batch {
                flush(&mut pending, &mut out);
            }
        }
    }
    if !pending.is_empty() {
        flush(&mut pending, &mut out);
    }
    out
}

/// The OTLP/HTTP protobuf workload of `--otlp` for other modes: its requests, spans and bytes.
pub(crate) fn http_workload(args: &Args, project: &str) -> (Vec<Job>, usize, u64) {
    let built = prepare(args, Transport::Http, project);
    (built.http, built.spans, built.wire_bytes)
}

/// `spans` spans of the `--otlp` workload as export requests of `batch` spans, not yet encoded.
pub(crate) fn export_requests(
    project: &str,
    spans: usize,
    batch: usize,
    children: usize,
) -> Vec<ExportTraceServiceRequest> {
    build(Transport::Grpc, project, spans, batch, children, 1)
        .grpc
        .into_iter()
        .map(|j| j.req)
        .collect()
}

/// How OTLP/HTTP protobuf requests into `project` are sent and their answers judged.
pub(crate) fn http_post(project: &str) -> Post {
    Post {
        content_type: "application/x-protobuf",
        accept: "application/x-protobuf",
        headers: vec![("project_id", project.to_owned())],
        check: Some(check_protobuf_answer),
    }
}

/// Spans an OTLP/HTTP answer body says were rejected (0 when it is not an export response).
pub(crate) fn rejected_spans(body: &[u8]) -> u64 {
    ExportTraceServiceResponse::decode(body)
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_spans.max(0) as u64)
}

/// What a span's call must hold when read back: the call the SDK would send, without the
/// members heddle derives differently from a span (op ref, times, otel_dump) and without nulls.
fn expected(call: Value) -> Value {
    let mut m = Map::new();
    for k in [
        "id",
        "trace_id",
        "parent_id",
        "thread_id",
        "turn_id",
        "inputs",
        "output",
        "attributes",
        "summary",
    ] {
        if !call[k].is_null() {
            m.insert(k.to_owned(), call[k].clone());
        }
    }
    Value::Object(m)
}

fn digest(rng: &mut Rng) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789XY";
    (0..43).map(|_| ALPHABET[rng.below(64) as usize] as char).collect()
}

// ---------------------------------------------------------------------------------------------
// Sending.
// ---------------------------------------------------------------------------------------------

/// Fails an OTLP/HTTP answer that rejected spans (`partial_success.rejected_spans > 0`).
fn check_protobuf_answer(body: &[u8]) -> Result<(), String> {
    let res = ExportTraceServiceResponse::decode(body)
        .map_err(|e| format!("the answer is not an ExportTraceServiceResponse: {e}"))?;
    rejected(&res)
}

fn rejected(res: &ExportTraceServiceResponse) -> Result<(), String> {
    match &res.partial_success {
        Some(p) if p.rejected_spans > 0 => Err(format!(
            "partial success: {} span(s) rejected: {}",
            p.rejected_spans,
            clip(&p.error_message)
        )),
        _ => Ok(()),
    }
}

struct Target<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    grpc: Option<&'a str>,
    key: &'a str,
}

async fn send(
    t: &Target<'_>,
    transport: Transport,
    project: &str,
    built: Built,
    concurrency: usize,
    acks: Option<&AckSink>,
) -> Outcome {
    match transport {
        Transport::Calls | Transport::CallsDump => {
            let (e, n) = split_project(project).expect("checked project");
            let url = format!("{}/v2/{}/{}/calls/complete", t.base, pct(e), pct(n));
            send_posts(t.client, &url, Some(t.key), &Post::json(), built.http, concurrency, acks)
                .await
        }
        Transport::Http | Transport::HttpGzip => {
            let mut headers = vec![("project_id", project.to_owned())];
            if transport == Transport::HttpGzip {
                headers.push(("content-encoding", "gzip".to_owned()));
            }
            let post = Post {
                content_type: "application/x-protobuf",
                accept: "application/x-protobuf",
                headers,
                check: Some(check_protobuf_answer),
            };
            let url = format!("{}/otel/v1/traces", t.base);
            send_posts(t.client, &url, Some(t.key), &post, built.http, concurrency, acks).await
        }
        Transport::Grpc | Transport::GrpcGzip => match t.grpc {
            Some(url) => {
                let gzip = transport == Transport::GrpcGzip;
                send_grpc(url, t.key, project, built.grpc, concurrency, gzip, acks).await
            }
            None => Outcome::failed("the server announced no OTLP/gRPC address".into()),
        },
    }
}

/// Sends every export request over OTLP/gRPC from `concurrency` clients, each on its own
/// connection (opened before the clock starts), pulling from one queue; no retries.
async fn send_grpc(
    url: &str,
    key: &str,
    project: &str,
    jobs: Vec<GrpcJob>,
    concurrency: usize,
    gzip: bool,
    acks: Option<&AckSink>,
) -> Outcome {
    let mut clients = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let channel = async {
            tonic::transport::Endpoint::from_shared(url.to_owned())?
                .tcp_nodelay(true)
                .connect()
                .await
        };
        match channel.await {
            Ok(ch) => {
                let mut c = TraceServiceClient::new(ch)
                    .max_encoding_message_size(usize::MAX)
                    .max_decoding_message_size(64 << 20);
                if gzip {
                    c = c.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                clients.push(c);
            }
            Err(e) => return Outcome::failed(format!("connecting to OTLP/gRPC at {url}: {e}")),
        }
    }
    let auth: tonic::metadata::AsciiMetadataValue = match format!("Bearer {key}").parse() {
        Ok(v) => v,
        Err(e) => return Outcome::failed(format!("the API key is not valid gRPC metadata: {e}")),
    };
    let project: tonic::metadata::AsciiMetadataValue =
        project.parse().expect("a project id is valid metadata");
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let queue = queue.clone();
            let acks = acks.cloned();
            let (auth, project) = (auth.clone(), project.clone());
            tokio::spawn(async move {
                let mut out = Outcome::default();
                loop {
                    let next = queue.lock().expect("job queue").next();
                    let Some(job) = next else { break };
                    out.bytes_sent += job.req.encoded_len() as u64;
                    let mut req = tonic::Request::new(job.req);
                    req.metadata_mut().insert("authorization", auth.clone());
                    req.metadata_mut().insert("project_id", project.clone());
                    let t = Instant::now();
                    let res = client.export(req).await;
                    let elapsed = t.elapsed();
                    let res = match res {
                        Ok(resp) => rejected(resp.get_ref()).map_err(|e| format!("OK but {e}")),
                        Err(status) => {
                            Err(format!("gRPC {:?}: {}", status.code(), clip(status.message())))
                        }
                    };
                    if out.record(res, elapsed, job.spans)
                        && let (Some(acks), Some(probe)) = (&acks, job.probe)
                    {
                        let _ = acks.send((probe, t + elapsed));
                    }
                }
                out
            })
        })
        .collect();
    Outcome::join(tasks, start).await
}

// ---------------------------------------------------------------------------------------------
// The runs.
// ---------------------------------------------------------------------------------------------

/// Spans per transport: --otlp-spans, or a default that keeps a run at 1–3 minutes.
fn spans(args: &Args) -> usize {
    args.otlp_spans.unwrap_or(if args.distributed { 20_480 } else { 40_960 })
}

struct Plan {
    transports: Vec<Transport>,
    entity: String,
    name: String,
}

impl Plan {
    fn new(args: &Args) -> anyhow::Result<Plan> {
        if spans(args) == 0 || args.otlp_batch == 0 || args.concurrency == 0 {
            bail!("--otlp-spans, --otlp-batch and --concurrency must be positive");
        }
        let transports = args
            .otlp_transports
            .iter()
            .map(|t| Transport::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        if transports.is_empty() {
            bail!("--otlp-transports is empty");
        }
        let project = match &args.project {
            Some(p) => p.clone(),
            None => format!("bench/otlp-{}", &Uuid::new_v4().simple().to_string()[..8]),
        };
        let (e, n) = split_project(&project)?;
        Ok(Plan { transports, entity: e.to_owned(), name: n.to_owned() })
    }

    fn project(&self, t: Transport) -> String {
        format!("{}/{}-{}", self.entity, self.name, t.slug())
    }
}

/// Generates a transport's workload (before any clock starts) and says what it is.
fn prepare(args: &Args, t: Transport, project: &str) -> Built {
    eprintln!(
        "{}: generating {} spans in requests of {} ...",
        t.label(),
        spans(args),
        args.otlp_batch
    );
    let built =
        build(t, project, spans(args), args.otlp_batch, args.otlp_children, args.concurrency);
    eprintln!(
        "  {} requests, {:.1} MB on the wire ({} B per span; OTLP/protobuf {} B per span)",
        built.requests,
        built.wire_bytes as f64 / 1e6,
        built.wire_bytes / built.spans as u64,
        built.protobuf_bytes / built.spans as u64,
    );
    built
}

/// Sizes of a workload, for the report.
#[derive(Clone, Copy)]
struct Sizes {
    spans: u64,
    message_bytes: u64,
    protobuf_bytes: u64,
}

impl Built {
    fn sizes(&self) -> Sizes {
        Sizes {
            spans: self.spans as u64,
            message_bytes: self.message_bytes,
            protobuf_bytes: self.protobuf_bytes,
        }
    }
}

fn describe_workload(args: &Args, first: Option<Sizes>) {
    let per_trace = args.otlp_children + 1;
    print!(
        "Workload per transport: {} spans = traces of 1 `invoke_agent` root + {} `chat` spans \
         (OpenTelemetry GenAI attributes), exported children first, {} spans per request, from {}",
        spans(args),
        per_trace - 1,
        args.otlp_batch,
        senders(args.concurrency),
    );
    if let Some(b) = first {
        print!(
            "; `gen_ai.input.messages` + `gen_ai.output.messages` {} B per span (each 0.5–2 KB); \
             OTLP/protobuf {} B per span",
            b.message_bytes / b.spans.max(1),
            b.protobuf_bytes / b.spans.max(1),
        );
    }
    println!(".");
}

/// Embedded mode (SQLite): the answer comes after the commit, so acked = visible.
pub(crate) async fn run_embedded(args: &Args, bin: &Path) -> anyhow::Result<Measured> {
    let plan = Plan::new(args)?;
    let machine = Machine::detect();
    let load0 = loadavg();
    let (server, base, key) = Server::start_or_connect(args, bin)?;
    let grpc = match &server {
        Some(server) => server.grpc_url.clone(),
        None => args.otlp_grpc_url.clone(),
    };
    if grpc.is_none() && plan.transports.iter().any(|t| t.is_grpc()) {
        bail!(
            "no OTLP/gRPC address for the grpc transports: the server announced none (or pass \
             --otlp-grpc-url with --url)"
        );
    }
    let pid = server.as_ref().map(Server::pid);
    let client = crate::client::http_client(args.concurrency * 2, Duration::from_secs(600))?;
    let api = Api { client: client.clone(), base: base.clone(), key: key.clone() };
    let version = api.version().await.unwrap_or_else(|e| format!("unknown ({e:#})"));
    let target = Target { client: &client, base: &base, grpc: grpc.as_deref(), key: &key };
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    let mut first = None;
    for &t in &plan.transports {
        let project = plan.project(t);
        let n = api.count(&project).await.with_context(|| format!("query_stats on {project}"))?;
        if n != 0 {
            bail!("project {project} already holds {n} calls; pick a fresh --project");
        }
        let mut built = prepare(args, t, &project);
        first.get_or_insert(built.sizes());
        let (ids, sample) = (std::mem::take(&mut built.ids), built.sample.clone());
        let (wire, spans) = (built.wire_bytes, built.spans);
        let store0 = server.as_ref().map(|s| dir_size(&s.data_dir()));
        eprintln!("  sending with {} ...", senders(args.concurrency));
        let cpu = CpuMeter::start(pid);
        let out = send(&target, t, &project, built, args.concurrency, None).await;
        let cpu = cpu.stop();
        let store1 = server.as_ref().map(|s| dir_size(&s.data_dir()));
        let phase = t.label();
        out.check(phase, &mut problems);
        let counted = match api.count(&project).await {
            Ok(n) => {
                if n != out.ok_calls as u64 {
                    problems.push(format!(
                        "{phase}: calls/query_stats counts {n} right after the last answer, but \
                         {} spans were acknowledged",
                        out.ok_calls
                    ));
                }
                Some(n)
            }
            Err(e) => {
                problems.push(format!("{phase}: calls/query_stats failed: {e:#}"));
                None
            }
        };
        eprintln!("  streaming {project} back ...");
        let check = if t.is_calls() { SampleCheck::Exact } else { SampleCheck::Subset };
        let before = problems.len();
        match api.stream_all(&project).await {
            Ok(read) => verify_stream(&read, &project, &ids, &sample, check, &mut problems),
            Err(e) => problems.push(format!("calls/stream_query failed: {e:#}")),
        }
        for p in &mut problems[before..] {
            *p = format!("{phase}: {p}");
        }
        let store = match (store0, store1) {
            (Some(a), Some(b)) if spans > 0 => Some(b.saturating_sub(a) / spans as u64),
            _ => None,
        };
        rows.push(EmbeddedRow { t, out, counted, wire, spans, cpu, store });
    }

    println!("{}", machine.line());
    println!(
        "Server: heddle {version} at {base}{}; OTLP/gRPC at {}. Projects `{}/{}-<transport>`.",
        if server.is_some() { " (started by the bench, fresh data dir)" } else { "" },
        grpc.as_deref().unwrap_or("–"),
        plan.entity,
        plan.name,
    );
    describe_workload(args, first);
    println!("Command: `{}`", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    println!(
        "| Transport | OK requests | Spans | Wall s | **Spans/s acked** | Spans/s per core | \
         Visible at ack (`query_stats`) | p50 ms | p99 ms | Wire B/span | Wire MB/s | Server CPU s \
         | Spans per server CPU-s | Busiest server thread | Bench CPU s | Store B/span \
         | Written B/span |"
    );
    println!(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
    );
    for r in &rows {
        println!("{}", r.line(machine.nproc as f64));
    }
    println!(
        "\nAcked = the server answered 2xx (OTLP: without rejected spans) after committing the \
         calls; \"visible at ack\" is `calls/query_stats` asked right after the last answer. \
         Per core = spans/s ÷ nproc ({}); the bench shares those CPUs (its CPU time is in the \
         bench column). p50/p99 are per request ({} spans). Wire bytes are the request bodies \
         (gRPC: messages as encoded, plus framing). Store B/span is the growth of the data \
         directory (SQLite db + WAL) over the phase; written B/span is what the server wrote to \
         its files meanwhile (`write_bytes` of /proc/<pid>/io: WAL frames and checkpoints). \
         Every phase streamed its project back: one call per span, each id once, the sample \
         call as sent.",
        machine.nproc, args.otlp_batch,
    );
    println!("Load average (1 min) at start / end: {} / {}.", opt(load0, 2), opt(loadavg(), 2));
    if let Some(server) = &server {
        print_log_problems("Server log", &server.log_problems());
    }
    let mut m = Measured { problems, figures: Vec::new() };
    for r in &rows {
        r.figures(&mut m);
    }
    Ok(m)
}

struct EmbeddedRow {
    t: Transport,
    out: Outcome,
    counted: Option<u64>,
    wire: u64,
    spans: usize,
    cpu: Option<CpuUse>,
    store: Option<u64>,
}

impl EmbeddedRow {
    fn figures(&self, m: &mut Measured) {
        let label = self.t.label();
        let secs = self.out.wall.as_secs_f64().max(1e-9);
        let ms = |p| percentile(&self.out.latencies, p).map(|d| d.as_secs_f64() * 1e3);
        let server = self.cpu.as_ref().and_then(|c| c.server).filter(|&s| s > 0.0);
        m.add(format!("{label}: spans/s acked"), Some(self.out.ok_calls as f64 / secs), 0);
        m.add(format!("{label}: p50 ms"), ms(0.5), 1);
        m.add(format!("{label}: p99 ms"), ms(0.99), 1);
        m.add(
            format!("{label}: spans per server CPU-s"),
            server.map(|s| self.out.ok_calls as f64 / s),
            0,
        );
        m.add(format!("{label}: store B/span"), self.store.map(|b| b as f64), 0);
        m.add(format!("{label}: written B/span"), self.written_per_span().map(|b| b as f64), 0);
    }

    fn written_per_span(&self) -> Option<u64> {
        let written = self.cpu.as_ref()?.written?;
        Some(written / self.spans.max(1) as u64)
    }

    fn line(&self, nproc: f64) -> String {
        let secs = self.out.wall.as_secs_f64().max(1e-9);
        let rate = self.out.ok_calls as f64 / secs;
        let lat = |p| percentile(&self.out.latencies, p);
        let c = self.cpu.as_ref();
        let server = c.and_then(|c| c.server);
        format!(
            "| {} | {} | {} | {secs:.3} | **{rate:.0}** | {:.0} | {} | {} | {} | {} | {:.1} | {} | \
             {} | {} | {} | {} | {} |",
            self.t.label(),
            self.out.ok_requests,
            self.out.ok_calls,
            rate / nproc,
            self.counted.map_or("–".into(), |n| n.to_string()),
            ms(lat(0.5)),
            ms(lat(0.99)),
            self.wire / self.spans.max(1) as u64,
            self.wire as f64 / 1e6 / secs,
            opt(server, 2),
            opt(server.filter(|&s| s > 0.0).map(|s| self.out.ok_calls as f64 / s), 0),
            c.and_then(|c| c.busiest.as_ref())
                .map_or("–".into(), |(n, share)| format!("`{n}` {:.0}%", share * 100.0)),
            opt(c.and_then(|c| c.bench), 2),
            self.store.map_or("–".into(), |b| b.to_string()),
            self.written_per_span().map_or("–".into(), |b| b.to_string()),
        )
    }
}

/// Distributed mode: each transport through ingest → Kafka → consumer → ClickHouse.
pub(crate) async fn run_distributed(args: &Args) -> anyhow::Result<Vec<String>> {
    if args.url.is_some() {
        bail!("--distributed starts its own deployment; it does not take --url");
    }
    if args.poll_ms == 0 {
        bail!("--poll-ms must be positive");
    }
    let plan = Plan::new(args)?;
    let machine = Machine::detect();
    let load0 = loadavg();
    let d = deploy(args, args.batch_records, args.batch_wait_ms).await?;
    eprintln!(
        "  heddle OTLP/gRPC at {}",
        d.stack.grpc_url.as_deref().unwrap_or("(none announced)")
    );
    let target = Target {
        client: &d.client,
        base: &d.stack.url,
        grpc: d.stack.grpc_url.as_deref(),
        key: &d.key,
    };
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    let mut lag_rows = Vec::new();
    let mut first = None;
    for &t in &plan.transports {
        let project = plan.project(t);
        let mut built = prepare(args, t, &project);
        first.get_or_insert(built.sizes());
        let n = built.requests;
        for (i, job) in built.http.iter_mut().enumerate() {
            if !keeps_probe(i, n, args.lag_samples) {
                job.probe = None;
            }
        }
        for (i, job) in built.grpc.iter_mut().enumerate() {
            if !keeps_probe(i, n, args.lag_samples) {
                job.probe = None;
            }
        }
        let written = Written {
            jobs: Vec::new(),
            ids: std::mem::take(&mut built.ids),
            sample: built.sample.clone(),
            sample_check: if t.is_calls() { SampleCheck::Exact } else { SampleCheck::Subset },
            body_bytes: 0,
            item_bytes: 0,
            inputs_bytes: 0,
            output_bytes: 0,
        };
        let (wire, spans) = (built.wire_bytes, built.spans);
        eprintln!("  sending with {}, watching visibility ...", senders(args.concurrency));
        let target = &target;
        let project_ref = project.as_str();
        let w = watch_phase(&d, args, &project, spans, |acks| async move {
            send(target, t, project_ref, built, args.concurrency, Some(&acks)).await
        })
        .await;
        w.check(t.label(), &mut problems);
        eprintln!("  streaming {project} back ...");
        exactly_once(&d.api, &project, &written, &mut problems).await;
        lag_rows.push(lag_row(t.label(), &w));
        rows.push(DistRow { t, w, wire, spans });
    }

    let adapter = d.stack.uses_adapter();
    println!("{}", machine.line());
    println!(
        "Deployment (started by the bench): heddle {} `serve --kafka --clickhouse` at {} \
         (OTLP/gRPC at {}); {} at {} (topic `{TOPIC}`, {PARTITIONS} partitions, SQLite storage); \
         ClickHouse {} at {}{}. Consumer: --batch-records {}, --batch-wait-ms {}. Projects \
         `{}/{}-<transport>`.",
        d.version,
        d.stack.url,
        d.stack.grpc_url.as_deref().unwrap_or("–"),
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
        plan.entity,
        plan.name,
    );
    describe_workload(args, first);
    println!("Command: `{}`", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    println!(
        "| Transport | OK requests | Spans | Ack wall s | **Spans/s acked** | Acked per core | \
         p50 ms | p99 ms | Visible s | **Spans/s visible** | Visible per core | Wire B/span | \
         Kafka records | heddle CPU s | tansu CPU s | ClickHouse CPU s | bench CPU s | Spans per \
         heddle CPU-s | Spans per stack CPU-s |"
    );
    println!(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &rows {
        println!("{}", r.line(machine.nproc as f64));
    }
    println!();
    println!(
        "| Transport | Probes seen | bench lag p50 ms | p99 ms | max ms | poll round trip p50 ms | \
         server records | server lag p50 ms | p99 ms | mean ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &lag_rows {
        println!("{r}");
    }
    println!(
        "\nAcked: the server answered 2xx (OTLP: without rejected spans), i.e. every Kafka record \
         of the request was acknowledged (acks=all). Visible: the same spans over the time from \
         the first send until `calls/query_stats` (polled every {} ms) counted all of them. Per \
         core = spans/s ÷ nproc ({}); the bench, heddle, tansu{} share those CPUs. CPU columns: \
         /proc user + system seconds from the first send until all were visible; stack = heddle \
         + tansu + ClickHouse. Lag as in the calls bench: \"bench\" is a probe span's request \
         answer → the first `calls/stream_query` poll that returns it; \"server\" is \
         `heddle_visibility_lag_seconds` per Kafka record. Every phase streamed its project \
         back: one call per span, each id once, the sample call as sent.",
        args.poll_ms,
        machine.nproc,
        if adapter { " and the ClickHouse adapter" } else { "" },
    );
    if adapter {
        println!(
            "ClickHouse here is chdb behind a Python HTTP adapter that runs one query at a time: \
             visible rates and lags are bounded by it, not by heddle."
        );
    }
    println!("Load average (1 min) at start / end: {} / {}.", opt(load0, 2), opt(loadavg(), 2));
    print_log_problems("Log problems", &d.stack.log_problems());
    Ok(problems)
}

struct DistRow {
    t: Transport,
    w: Watched,
    wire: u64,
    spans: usize,
}

impl DistRow {
    fn line(&self, nproc: f64) -> String {
        let w = &self.w;
        let secs = w.out.wall.as_secs_f64().max(1e-9);
        let ack = w.ack_rate();
        let vis = w.visible_rate();
        let cpu = &w.cpu_visible;
        let n = w.out.ok_calls as f64;
        let per = |c: Option<f64>| opt(c.filter(|&c| c > 0.0).map(|c| n / c), 0);
        format!(
            "| {} | {} | {} | {secs:.3} | **{ack:.0}** | {:.0} | {} | {} | {} | **{}** | {} | {} | \
             {:.0} | {} | {} | {} | {} | {} | {} |",
            self.t.label(),
            w.out.ok_requests,
            w.out.ok_calls,
            ack / nproc,
            ms(pctl(&w.out.latencies, 0.5)),
            ms(pctl(&w.out.latencies, 0.99)),
            w.visible.map_or("–".into(), |v| format!("{:.3}", v.as_secs_f64())),
            opt(vis, 0),
            opt(vis.map(|v| v / nproc), 0),
            self.wire / self.spans.max(1) as u64,
            w.server.produced,
            opt(cpu.heddle, 2),
            opt(cpu.tansu, 2),
            opt(cpu.clickhouse, 2),
            opt(cpu.bench, 2),
            per(cpu.heddle),
            per(cpu.stack_total()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_calls_agree() {
        let b = build(Transport::Http, "e/p", 23, 10, 4, 2);
        assert_eq!((b.requests, b.ids.len(), b.http.len()), (3, 23, 3));
        assert_eq!(b.http.iter().map(|j| j.calls).sum::<usize>(), 23);
        // The first span is a chat span whose call carries the parsed messages and usage.
        assert!(b.sample["parent_id"].is_string());
        let msgs = &b.sample["inputs"]["gen_ai.input.messages"];
        assert_eq!(msgs[0]["role"], "system");
        let usage = &b.sample["summary"]["usage"][RESPONSE_MODEL];
        assert_eq!(
            usage["total_tokens"].as_i64(),
            Some(
                usage["input_tokens"].as_i64().unwrap() + usage["output_tokens"].as_i64().unwrap()
            )
        );
        // Messages are 0.5–2 KB each.
        let per_span = b.message_bytes / 23;
        assert!((1000..=4200).contains(&per_span), "{per_span}");
        let req = ExportTraceServiceRequest::decode(b.http[0].body.as_deref().unwrap()).unwrap();
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 10);
        // Children end (and are exported) before their root.
        assert!(spans[3].parent_span_id.len() == 8 && spans[4].parent_span_id.is_empty());
        assert_eq!(spans[0].parent_span_id, spans[4].span_id);
        assert!(spans.iter().all(|s| s.end_time_unix_nano > s.start_time_unix_nano));
    }

    #[test]
    fn text_compresses_like_prose() {
        let mut rng = Rng(3);
        let text = Text::new(&mut rng);
        let body: String = (0..200).map(|_| text.prose(&mut rng, 1200)).collect();
        let ratio = body.len() as f64 / gzip(body.as_bytes()).len() as f64;
        assert!((2.0..4.0).contains(&ratio), "gzip ratio {ratio:.2}");
    }
}

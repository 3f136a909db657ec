//! Time of OTLP/protobuf decoding and of span → call conversion, per span, for LLM-sized spans
//! shaped like `heddle-bench --otlp`'s (an agent root and four chat spans per trace, messages of
//! ~0.5–2 KB): into call parts (`convert`, the store's path), and into a Kafka record (`record`,
//! the ingest role's path: each call written straight into the record's bytes). `cargo bench -p heddle-proto --bench otlp_convert`; the whole-server figures are
//! `heddle-bench`'s (docs/benchmarks.md).

use std::hint::black_box;
use std::time::Instant;

use heddle_proto::ProjectId;
use heddle_proto::lazy_part::LazyPart;
use heddle_proto::otlp::{convert, convert_each, decode_protobuf};
use heddle_proto::record::append_lazy;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SPANS: usize = 512;
const ROUNDS: usize = 40;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(value) }), ..Default::default() }
}

fn s(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

/// Prose of about `len` bytes, varied by `seed`.
fn prose(seed: usize, len: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "order",
        "shipped",
        "refund",
        "customer",
        "asked",
        "why",
        "\"quoted\"",
        "line\n",
        "invoice",
        "delivery",
        "tracking",
        "number",
        "please",
        "résumé",
        "thanks",
    ];
    let mut out = String::with_capacity(len + 16);
    let mut n = seed;
    while out.len() < len {
        n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.push_str(WORDS[(n >> 33) % WORDS.len()]);
        out.push(' ');
    }
    out
}

fn messages(seed: usize, roles: &[&str], len: usize, output: bool) -> String {
    let msgs: Vec<serde_json::Value> = roles
        .iter()
        .enumerate()
        .map(|(n, role)| {
            let mut m = serde_json::json!({"role": role, "parts": [{"type": "text",
                "content": prose(seed + n, len / roles.len())}]});
            if output {
                m["finish_reason"] = "stop".into();
            }
            m
        })
        .collect();
    serde_json::to_string(&msgs).unwrap()
}

fn span(n: usize) -> Span {
    let trace = n / 5;
    let root = n.is_multiple_of(5);
    let mut attributes = if root {
        vec![
            s("gen_ai.operation.name", "invoke_agent"),
            s("gen_ai.provider.name", "openai"),
            s("gen_ai.agent.name", "support"),
            s("gen_ai.agent.id", "asst_5j66UpCpwteGg4YSxUnt7lPY"),
            s("gen_ai.conversation.id", &format!("conv-{trace}")),
        ]
    } else {
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.system", "openai"),
            s("gen_ai.provider.name", "openai"),
            s("gen_ai.request.model", "gpt-4o"),
            kv("gen_ai.request.temperature", any_value::Value::DoubleValue(0.7)),
            i("gen_ai.request.max_tokens", 1024),
            s("gen_ai.response.model", "gpt-4o-2024-08-06"),
            s("gen_ai.response.id", &format!("chatcmpl-{n}")),
            kv(
                "gen_ai.response.finish_reasons",
                any_value::Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(any_value::Value::StringValue("stop".into())),
                    }],
                }),
            ),
            i("gen_ai.usage.input_tokens", 300 + n as i64 % 40),
            i("gen_ai.usage.output_tokens", 120 + n as i64 % 30),
            s("server.address", "api.openai.com"),
            i("server.port", 443),
        ]
    };
    attributes.push(s("gen_ai.input.messages", &messages(n, &["system", "user"], 1400, false)));
    attributes.push(s("gen_ai.output.messages", &messages(n + 7, &["assistant"], 700, true)));
    let id = |x: usize, len: usize| {
        let mut b = (x as u64 + 1).to_be_bytes().repeat(len / 8);
        b[0] = 0xab;
        b
    };
    Span {
        trace_id: id(trace, 16),
        span_id: id(n, 8),
        parent_span_id: if root { Vec::new() } else { id(trace * 5, 8) },
        flags: 0x101,
        name: if root { "invoke_agent support".into() } else { "chat gpt-4o".into() },
        kind: if root { 1 } else { 3 },
        start_time_unix_nano: 1_764_000_000_000_000_000 + n as u64 * 1_000_000,
        end_time_unix_nano: 1_764_000_000_000_000_000 + n as u64 * 1_000_000 + 800_000_000,
        attributes,
        ..Default::default()
    }
}

fn request() -> ExportTraceServiceRequest {
    let resource = Resource {
        attributes: vec![
            s("service.name", "support-agent"),
            s("service.version", "2.14.0"),
            s("service.instance.id", "support-agent-0"),
            s("deployment.environment.name", "bench"),
            s("telemetry.sdk.language", "python"),
            s("telemetry.sdk.name", "opentelemetry"),
            s("telemetry.sdk.version", "1.38.0"),
            s("host.name", "worker-0"),
            s("process.runtime.name", "cpython"),
            s("process.runtime.version", "3.12.3"),
        ],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "opentelemetry.instrumentation.openai_v2".into(),
                    version: "2.1b0".into(),
                    ..Default::default()
                }),
                spans: (0..SPANS).map(span).collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn per_span(label: &str, mut f: impl FnMut()) {
    f();
    let t = Instant::now();
    for _ in 0..ROUNDS {
        f();
    }
    let per = t.elapsed().as_secs_f64() / (ROUNDS * SPANS) as f64;
    println!(
        "{label:<10} {:>7.2} µs per span  ({:>7.0} spans/s on one core)",
        per * 1e6,
        1.0 / per
    );
}

fn main() {
    let body = request().encode_to_vec();
    let project = ProjectId::from_parts("bench", "otlp").unwrap();
    println!("{} spans, {} B per span of OTLP/protobuf", SPANS, body.len() / SPANS);
    per_span("decode", || {
        black_box(decode_protobuf(black_box(&body)).unwrap());
    });
    let req = decode_protobuf(&body).unwrap();
    per_span("convert", || {
        let out = convert(black_box(&req), Some(&project), Some("user")).unwrap();
        assert_eq!(out.parts.len(), SPANS);
        black_box(out);
    });
    let mut record = Vec::new();
    per_span("record", || {
        record.clear();
        let mut each = |part: LazyPart| append_lazy(&mut record, &part).map(|_| ());
        let out = convert_each(black_box(&req), Some(&project), Some("user"), &mut each).unwrap();
        assert_eq!(out.rejected, 0);
        black_box(&record);
    });
    println!("{} B per span of Kafka record", record.len() / SPANS);
}

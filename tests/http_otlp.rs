//! OTLP trace ingest over HTTP (protobuf, JSON, gzip) and gRPC (docs/api/otel.md): spans written
//! through every transport read back as calls; bad spans are rejected alone (partial success);
//! bad bodies, projects and keys get clear errors and store nothing.

mod common;

use std::io::Write;

use common::{Api, Server, uid};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, status};
use prost::Message;
use serde_json::{Value, json};

const P: &str = "otel-ent/traces";
const T0: u64 = 1_763_700_000_000_000_000;
const PROTOBUF: &str = "application/x-protobuf";

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

fn s(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

fn random_bytes(n: usize) -> Vec<u8> {
    uuid::Uuid::new_v4().as_bytes()[..n].to_vec()
}

/// A trace: a root agent span and a child LLM span with GenAI attributes.
struct Trace {
    trace_id: Vec<u8>,
    root: Span,
    llm: Span,
}

impl Trace {
    fn new() -> Trace {
        let trace_id = random_bytes(16);
        let root_id = random_bytes(8);
        let root = Span {
            trace_id: trace_id.clone(),
            span_id: root_id.clone(),
            name: "agent run".into(),
            kind: 1,
            start_time_unix_nano: T0,
            end_time_unix_nano: T0 + 3_000_000_000,
            attributes: vec![s("input.value", r#"{"question": "2+2?"}"#), s("output.value", "4")],
            ..Default::default()
        };
        let llm = Span {
            trace_id: trace_id.clone(),
            span_id: random_bytes(8),
            parent_span_id: root_id,
            name: "chat gpt-4o".into(),
            kind: 3,
            start_time_unix_nano: T0 + 500_000_000,
            end_time_unix_nano: T0 + 2_250_000_000,
            attributes: vec![
                s("gen_ai.system", "openai"),
                s("gen_ai.request.model", "gpt-4o"),
                i("gen_ai.usage.input_tokens", 21),
                i("gen_ai.usage.output_tokens", 3),
                s("gen_ai.input.messages", r#"[{"role": "user", "content": "2+2?"}]"#),
                s("gen_ai.output.messages", r#"[{"role": "assistant", "content": "4"}]"#),
                s("http.route", "/v1/chat"),
            ],
            ..Default::default()
        };
        Trace { trace_id, root, llm }
    }

    fn hex(&self) -> String {
        hex(&self.trace_id)
    }

    fn spans(&self) -> Vec<Span> {
        vec![self.root.clone(), self.llm.clone()]
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn request(spans: Vec<Span>, resource: Vec<KeyValue>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource { attributes: resource, ..Default::default() }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "heddle-tests".into(),
                    version: "1".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

async fn calls_of(api: &Api, trace: &str) -> Vec<Value> {
    let q = json!({"project_id": P, "filter": {"trace_ids": [trace]},
                   "sort_by": [{"field": "started_at", "direction": "asc"}]});
    api.stream(&q).await
}

/// Asserts the calls of `trace` are exactly its two spans, mapped.
async fn assert_trace_stored(api: &Api, trace: &Trace) {
    let calls = calls_of(api, &trace.hex()).await;
    assert_eq!(calls.len(), 2, "{calls:#?}");
    let (root, llm) = (&calls[0], &calls[1]);
    assert_eq!(root["id"], hex(&trace.root.span_id));
    assert_eq!(root["parent_id"], Value::Null);
    assert_eq!(root["inputs"], json!({"input.value": {"question": "2+2?"}}));
    assert_eq!(root["output"], json!({"output.value": "4"}));
    assert_eq!(root["summary"]["weave"]["latency_ms"], 3000);
    assert!(root["op_name"].as_str().unwrap().starts_with(&format!("weave:///{P}/op/agent_run:")));

    assert_eq!(llm["id"], hex(&trace.llm.span_id));
    assert_eq!(llm["parent_id"], root["id"]);
    assert_eq!(llm["trace_id"], trace.hex());
    assert_eq!(llm["started_at"], "2025-11-21T04:40:00.500000Z");
    assert_eq!(llm["ended_at"], "2025-11-21T04:40:02.250000Z");
    assert_eq!(llm["inputs"]["gen_ai.input.messages"][0]["content"], "2+2?");
    assert_eq!(llm["output"]["gen_ai.output.messages"][0]["content"], "4");
    assert_eq!(
        llm["summary"]["usage"]["gpt-4o"],
        json!({"input_tokens": 21, "output_tokens": 3, "total_tokens": 24, "requests": 1})
    );
    assert_eq!(llm["summary"]["weave"]["status"], "success");
    assert_eq!(llm["attributes"]["model"], "gpt-4o");
    assert_eq!(llm["attributes"]["system"], "openai");
    assert_eq!(llm["attributes"]["http"]["route"], "/v1/chat");
    assert_eq!(llm["otel_dump"]["name"], "chat gpt-4o");
    assert_eq!(llm["otel_dump"]["scope"]["name"], "heddle-tests");
    assert_eq!(llm["wb_user_id"], "admin");
}

#[tokio::test]
async fn protobuf_json_and_gzip_bodies_become_calls() {
    let server = Server::start();
    let api = server.admin();
    let project = [("project_id", P)];

    // OTLP/protobuf → a protobuf answer without partial success.
    let plain = Trace::new();
    let body = request(plain.spans(), vec![]).encode_to_vec();
    let r =
        api.post_headers("/otel/v1/traces", &[("content-type", PROTOBUF), project[0]], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.content_type, PROTOBUF);
    let res = ExportTraceServiceResponse::decode(&r.body[..]).unwrap();
    assert_eq!(res.partial_success, None);
    assert_trace_stored(&api, &plain).await;

    // gzip-compressed protobuf.
    let zipped = Trace::new();
    let body = gzip(&request(zipped.spans(), vec![]).encode_to_vec());
    let headers = [("content-type", PROTOBUF), ("content-encoding", "gzip"), project[0]];
    assert_eq!(api.post_headers("/otel/v1/traces", &headers, body).await.status, 200);
    assert_trace_stored(&api, &zipped).await;

    // OTLP/JSON on the SDK's alias path, gzip too → a JSON answer.
    let json_trace = Trace::new();
    let body = serde_json::to_vec(&request(json_trace.spans(), vec![])).unwrap();
    let headers = [("content-type", "application/json"), ("content-encoding", "gzip"), project[0]];
    let r = api.post_headers("/agents/otel/v1/traces", &headers, gzip(&body)).await;
    assert_eq!(r.ok(), json!({}));
    assert_trace_stored(&api, &json_trace).await;

    // The span name's placeholder op exists and its ref filters the calls.
    let op = calls_of(&api, &plain.hex()).await[1]["op_name"].as_str().unwrap().to_owned();
    let digest = op.rsplit(':').next().unwrap();
    let obj = api
        .post("/obj/read", &json!({"project_id": P, "object_id": "chat_gpt-4o", "digest": digest}))
        .await
        .ok();
    assert_eq!(obj["obj"]["kind"], "op");
    let by_op = api
        .stream(&json!({"project_id": P, "filter": {"op_names": [op]}, "columns": ["id"]}))
        .await;
    assert_eq!(by_op.len(), 3, "one LLM span per trace");
}

#[tokio::test]
async fn one_bad_span_is_rejected_and_the_rest_stored() {
    let server = Server::start();
    let api = server.admin();
    let trace = Trace::new();
    let mut bad_id = trace.llm.clone();
    bad_id.span_id = vec![1, 2, 3];
    let mut no_trace = trace.llm.clone();
    no_trace.trace_id = vec![];
    let mut failed = trace.llm.clone();
    failed.span_id = random_bytes(8);
    failed.status = Some(Status { code: status::StatusCode::Error as i32, message: "boom".into() });
    let spans = vec![bad_id, trace.root.clone(), no_trace, trace.llm.clone(), failed.clone()];
    let body = request(spans, vec![]).encode_to_vec();
    let r = api
        .post_headers("/otel/v1/traces", &[("content-type", PROTOBUF), ("project_id", P)], body)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let partial = ExportTraceServiceResponse::decode(&r.body[..]).unwrap().partial_success.unwrap();
    assert_eq!(partial.rejected_spans, 2);
    assert!(partial.error_message.contains("span_id must be 8 bytes, got 3"), "{partial:?}");
    assert!(partial.error_message.contains("trace_id must be 16 bytes, got 0"), "{partial:?}");

    let calls = calls_of(&api, &trace.hex()).await;
    assert_eq!(calls.len(), 3, "{calls:#?}");
    let error = calls.iter().find(|c| c["id"] == hex(&failed.span_id)).unwrap();
    assert_eq!(error["exception"], "boom");
    assert_eq!(error["summary"]["weave"]["status"], "error");
}

#[tokio::test]
async fn bad_bodies_get_clear_errors_and_store_nothing() {
    let server = Server::start_with(&["--max-body-bytes", "1000000"]);
    let api = server.admin();
    let trace = Trace::new();
    let good = request(trace.spans(), vec![]).encode_to_vec();
    let post = |headers: Vec<(&'static str, &'static str)>, body: Vec<u8>| {
        let api = api.clone();
        async move { api.post_headers("/otel/v1/traces", &headers, body).await }
    };
    let proto = vec![("content-type", PROTOBUF), ("project_id", P)];
    let json_ct = vec![("content-type", "application/json"), ("project_id", P)];
    let gz = vec![("content-type", PROTOBUF), ("content-encoding", "gzip"), ("project_id", P)];

    let reason = post(proto.clone(), b"\xff\xff\xff\xff".to_vec()).await.err(400);
    assert!(reason.contains("invalid OTLP protobuf body"), "{reason}");
    let reason = post(json_ct.clone(), b"{\"resourceSpans\": 7}".to_vec()).await.err(400);
    assert!(reason.contains("invalid OTLP/JSON body"), "{reason}");
    post(json_ct, b"{not json".to_vec()).await.err(400);
    let reason =
        post(vec![("content-type", "text/plain"), ("project_id", P)], good.clone()).await.err(415);
    assert!(reason.contains("application/x-protobuf"), "{reason}");
    let reason = post(gz.clone(), b"not gzip at all".to_vec()).await.err(400);
    assert!(reason.contains("gzip"), "{reason}");
    // A gzip bomb: 50 MB of zeroes in ~50 KB, against a 1 MB limit.
    let reason = post(gz, gzip(&vec![0u8; 50_000_000])).await.err(413);
    assert!(reason.contains("decompressed"), "{reason}");
    post(proto.clone(), vec![0u8; 2_000_000]).await.err(413);
    let reason = post(vec![("content-type", PROTOBUF)], good.clone()).await.err(400);
    assert!(reason.contains("no project"), "{reason}");
    post(vec![("content-type", PROTOBUF), ("project_id", "no-slash")], good.clone()).await.err(400);
    assert!(calls_of(&api, &trace.hex()).await.is_empty());

    // Still healthy: the same spans, well formed, are stored.
    assert_eq!(post(proto, good).await.status, 200);
    assert_eq!(calls_of(&api, &trace.hex()).await.len(), 2);
}

#[tokio::test]
async fn keys_and_projects_are_enforced() {
    let server = Server::start();
    let admin = server.admin();
    let trace = Trace::new();
    let routed = vec![s("wandb.entity", "otel-ent"), s("wandb.project", "traces")];
    let body = request(trace.spans(), routed.clone()).encode_to_vec();
    let ct = ("content-type", PROTOBUF);

    server.client(None).post_headers("/otel/v1/traces", &[ct], body.clone()).await.err(401);
    server
        .client(Some("wrong"))
        .post_headers("/otel/v1/traces", &[ct], body.clone())
        .await
        .err(401);
    let other = server.create_entity_key("someone-else");
    let reason = server
        .client(Some(&other))
        .post_headers("/otel/v1/traces", &[ct], body.clone())
        .await
        .err(403);
    assert!(reason.contains("otel-ent/traces"), "{reason}");
    let header_project = [ct, ("project_id", P)];
    server
        .client(Some(&other))
        .post_headers("/otel/v1/traces", &header_project, body.clone())
        .await
        .err(403);
    assert!(calls_of(&admin, &trace.hex()).await.is_empty());

    // The entity's own key, sent as `wandb-api-key`, routed by resource attributes.
    let own = server.create_entity_key("otel-ent");
    let r = server
        .client(None)
        .post_headers("/otel/v1/traces", &[ct, ("wandb-api-key", &own)], body)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let calls = calls_of(&admin, &trace.hex()).await;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["wb_user_id"], "otel-ent");
}

async fn grpc_client(server: &Server) -> TraceServiceClient<tonic::transport::Channel> {
    TraceServiceClient::connect(server.grpc_url.clone())
        .await
        .expect("connecting to OTLP/gRPC")
        .send_compressed(tonic::codec::CompressionEncoding::Gzip)
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
}

fn grpc_request(
    body: ExportTraceServiceRequest,
    metadata: &[(&'static str, &str)],
) -> tonic::Request<ExportTraceServiceRequest> {
    let mut req = tonic::Request::new(body);
    for (k, v) in metadata {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    req
}

#[tokio::test]
async fn grpc_export_stores_calls_and_reports_errors() {
    let server = Server::start_with(&["--otlp-grpc-max-message-bytes", "200000"]);
    let api = server.admin();
    let mut client = grpc_client(&server).await;
    let auth = common::basic(&server.admin_key);

    let trace = Trace::new();
    let mut bad = trace.llm.clone();
    bad.span_id = vec![9];
    let mut spans = trace.spans();
    spans.push(bad);
    let meta = [("authorization", auth.as_str()), ("project_id", P)];
    let res = client.export(grpc_request(request(spans, vec![]), &meta)).await.unwrap();
    let partial = res.into_inner().partial_success.expect("one span rejected");
    assert_eq!(partial.rejected_spans, 1);
    server.wait_visible().await;
    assert_trace_stored(&api, &trace).await;

    // Routed by resource attributes, key in `wandb-api-key`.
    let routed = Trace::new();
    let resource = vec![s("wandb.entity", "otel-ent"), s("wandb.project", "traces")];
    let key_meta = [("wandb-api-key", server.admin_key.as_str())];
    client.export(grpc_request(request(routed.spans(), resource), &key_meta)).await.unwrap();
    server.wait_visible().await;
    assert_trace_stored(&api, &routed).await;

    // No key; no project; a message over the size limit (tonic answers that one itself).
    let oversized = Span { attributes: vec![s("big", &"x".repeat(300_000))], ..Trace::new().llm };
    let no_key = [("project_id", P)];
    let no_project = [("authorization", auth.as_str())];
    let failures = [
        (&no_key[..], Trace::new().spans(), tonic::Code::Unauthenticated),
        (&no_project[..], Trace::new().spans(), tonic::Code::InvalidArgument),
        (&meta[..], vec![oversized], tonic::Code::ResourceExhausted),
    ];
    for (metadata, spans, code) in failures {
        let status =
            client.export(grpc_request(request(spans, vec![]), metadata)).await.unwrap_err();
        assert_eq!(status.code(), code, "{status:?}");
        assert!(!status.message().is_empty());
    }
    let count = api.count(&json!({"project_id": P})).await;
    assert_eq!(count, 4, "only the two good traces are stored");
}

#[tokio::test]
async fn threads_turns_and_display_names_come_from_wandb_attributes() {
    let server = Server::start();
    let api = server.admin();
    let thread = uid();
    let trace = Trace::new();
    let mut turn = trace.root.clone();
    turn.attributes.extend([
        s("wandb.thread_id", &thread),
        kv("wandb.is_turn", any_value::Value::BoolValue(true)),
        s("wandb.display_name", "First turn"),
    ]);
    let mut inner = trace.llm.clone();
    inner.attributes.push(s("wandb.thread_id", &thread));
    let body = request(vec![turn, inner], vec![]).encode_to_vec();
    let headers = [("content-type", PROTOBUF), ("project_id", P)];
    assert_eq!(api.post_headers("/otel/v1/traces", &headers, body).await.status, 200);
    let calls = calls_of(&api, &trace.hex()).await;
    assert_eq!(calls[0]["thread_id"], thread);
    assert_eq!(calls[0]["turn_id"], calls[0]["id"]);
    assert_eq!(calls[0]["display_name"], "First turn");
    assert_eq!(calls[1]["thread_id"], thread);
    assert_eq!(calls[1]["turn_id"], Value::Null);
}

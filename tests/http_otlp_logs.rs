//! OTLP log ingest (docs/api/otel.md, docs/otlp.md "Log records"): GenAI message events sent as
//! log records are merged into their span's call — whether they arrive before the span, after
//! it, or spread over several requests and transports; records without a span stay readable
//! through `/otel/logs/query`; bad bodies, bounds, keys and projects get clear errors and store
//! nothing.

mod common;

use std::io::Write;

use common::{Api, Server};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, KeyValueList, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{Value, json};

const P: &str = "logs-ent/chat";
const T0: u64 = 1_763_700_000_000_000_000;
const PROTOBUF: &str = "application/x-protobuf";

fn any(v: any_value::Value) -> AnyValue {
    AnyValue { value: Some(v) }
}

fn text(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(any(v)), ..Default::default() }
}

fn kvlist(items: Vec<KeyValue>) -> any_value::Value {
    any_value::Value::KvlistValue(KeyValueList { values: items })
}

fn random_bytes(n: usize) -> Vec<u8> {
    uuid::Uuid::new_v4().as_bytes()[..n].to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// An LLM span and the message events the OpenAI instrumentation logs for it.
struct Chat {
    trace_id: Vec<u8>,
    span: Span,
}

impl Chat {
    fn new() -> Chat {
        let trace_id = random_bytes(16);
        let span = Span {
            trace_id: trace_id.clone(),
            span_id: random_bytes(8),
            name: "chat gpt-4o".into(),
            kind: 3,
            start_time_unix_nano: T0,
            end_time_unix_nano: T0 + 1_000_000_000,
            attributes: vec![
                kv("gen_ai.system", text("openai")),
                kv("gen_ai.request.model", text("gpt-4o")),
            ],
            ..Default::default()
        };
        Chat { trace_id, span }
    }

    fn id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn event(&self, name: &str, at: u64, body: any_value::Value) -> LogRecord {
        LogRecord {
            time_unix_nano: T0 + at,
            observed_time_unix_nano: T0 + at,
            severity_number: 9,
            trace_id: self.trace_id.clone(),
            span_id: self.span.span_id.clone(),
            flags: 1,
            event_name: name.into(),
            body: Some(any(body)),
            attributes: vec![kv("gen_ai.system", text("openai"))],
            ..Default::default()
        }
    }

    /// The system and user messages (inputs) and the choice (output), in time order.
    fn messages(&self) -> Vec<LogRecord> {
        vec![
            self.event("gen_ai.system.message", 1, kvlist(vec![kv("content", text("Be brief."))])),
            self.event("gen_ai.user.message", 2, kvlist(vec![kv("content", text("2+2?"))])),
        ]
    }

    fn choice(&self) -> LogRecord {
        let message = kvlist(vec![kv("role", text("assistant")), kv("content", text("4"))]);
        self.event(
            "gen_ai.choice",
            900_000_000,
            kvlist(vec![
                kv("index", any_value::Value::IntValue(0)),
                kv("finish_reason", text("stop")),
                kv("message", message),
            ]),
        )
    }
}

fn want_inputs() -> Value {
    json!({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
    ]})
}

fn want_output() -> Value {
    json!({"choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}
    ]})
}

fn logs_request(records: Vec<LogRecord>, resource: Vec<KeyValue>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource { attributes: resource, ..Default::default() }),
            scope_logs: vec![ScopeLogs { log_records: records, ..Default::default() }],
            ..Default::default()
        }],
    }
}

fn spans_request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    }
}

async fn send_logs(api: &Api, records: Vec<LogRecord>) -> ExportLogsServiceResponse {
    let body = logs_request(records, vec![]).encode_to_vec();
    let r = api
        .post_headers("/otel/v1/logs", &[("content-type", PROTOBUF), ("project_id", P)], body)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.content_type, PROTOBUF);
    ExportLogsServiceResponse::decode(&r.body[..]).unwrap()
}

async fn send_span(api: &Api, chat: &Chat) {
    let body = spans_request(vec![chat.span.clone()]).encode_to_vec();
    let r = api
        .post_headers("/otel/v1/traces", &[("content-type", PROTOBUF), ("project_id", P)], body)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

async fn read(api: &Api, chat: &Chat) -> Value {
    api.read_call(P, &chat.id()).await
}

async fn query_logs(api: &Api, q: Value) -> Vec<Value> {
    let mut body = json!({"project_id": P});
    body.as_object_mut().unwrap().extend(q.as_object().unwrap().clone());
    let r = api.post("/otel/logs/query", &body).await.ok();
    r["logs"].as_array().unwrap().clone()
}

#[tokio::test]
async fn records_merge_into_their_call_in_any_order() {
    let server = Server::start();
    let api = server.admin();

    // Logs first (inputs and output in one request), the span afterwards.
    let early = Chat::new();
    let mut records = early.messages();
    records.push(early.choice());
    records.reverse(); // the arrival order within a request does not matter either
    assert_eq!(send_logs(&api, records).await.partial_success, None);
    send_span(&api, &early).await;
    let call = read(&api, &early).await;
    assert_eq!(call["inputs"], want_inputs());
    assert_eq!(call["output"], want_output());
    assert_eq!(call["attributes"]["model"], "gpt-4o");

    // The span first; then the output as OTLP/JSON (gzip), then the inputs as protobuf.
    let late = Chat::new();
    send_span(&api, &late).await;
    let before = read(&api, &late).await;
    assert_eq!((before["inputs"].clone(), before["output"].clone()), (json!({}), Value::Null));
    let body = gzip(&serde_json::to_vec(&logs_request(vec![late.choice()], vec![])).unwrap());
    let headers =
        [("content-type", "application/json"), ("content-encoding", "gzip"), ("project_id", P)];
    assert_eq!(api.post_headers("/otel/v1/logs", &headers, body).await.ok(), json!({}));
    assert_eq!(read(&api, &late).await["output"], want_output());
    send_logs(&api, late.messages()).await;
    // A client retry: the same records again change nothing.
    send_logs(&api, late.messages()).await;

    // Every reader sees the merged call: /call/read, /calls/stream_query, a projection.
    let call = read(&api, &late).await;
    assert_eq!((call["inputs"].clone(), call["output"].clone()), (want_inputs(), want_output()));
    let rows =
        api.stream(&json!({"project_id": P, "filter": {"trace_ids": [hex(&late.trace_id)]}})).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["inputs"].clone(), rows[0]["output"].clone()),
        (want_inputs(), want_output())
    );
    let rows = api
        .stream(&json!({"project_id": P, "filter": {"call_ids": [late.id()]},
                        "columns": ["id", "inputs"]}))
        .await;
    assert_eq!(rows[0]["inputs"], want_inputs());
    assert_eq!(api.count(&json!({"project_id": P})).await, 2, "log records are no calls");

    // The records themselves, as stored, once each.
    let stored = query_logs(&api, json!({"span_id": late.id()})).await;
    let names: Vec<&str> = stored.iter().map(|l| l["event_name"].as_str().unwrap()).collect();
    assert_eq!(names, ["gen_ai.system.message", "gen_ai.user.message", "gen_ai.choice"]);
    assert_eq!(stored[1]["body"], json!({"content": "2+2?"}));
    assert_eq!(stored[1]["attributes"], json!({"gen_ai.system": "openai"}));
    assert_eq!(stored[1]["trace_id"], hex(&late.trace_id));
    assert_eq!(stored[1]["time_unix_nano"], T0 + 2);
    assert_eq!(stored[1]["severity_number"], 9);
    assert_eq!(stored[1]["flags"], 1);
}

#[tokio::test]
async fn the_spans_own_inputs_win() {
    let server = Server::start();
    let api = server.admin();
    let chat = Chat::new();
    let mut span = chat.span.clone();
    span.attributes.push(kv("input", text(r#"{"messages": "from the span"}"#)));
    let chat = Chat { span, ..chat };
    send_logs(&api, chat.messages()).await;
    send_span(&api, &chat).await;
    assert_eq!(read(&api, &chat).await["inputs"], json!({"messages": "from the span"}));
    // The output, which the span did not set, still comes from the records.
    send_logs(&api, vec![chat.choice()]).await;
    let call = read(&api, &chat).await;
    assert_eq!(call["inputs"], json!({"messages": "from the span"}));
    assert_eq!(call["output"], want_output());
}

#[tokio::test]
async fn records_without_a_span_stay_readable() {
    let server = Server::start();
    let api = server.admin();
    let mut plain = LogRecord {
        time_unix_nano: T0,
        severity_text: "WARN".into(),
        severity_number: 13,
        body: Some(any(text("disk almost full"))),
        ..Default::default()
    };
    plain.attributes.push(kv("host", text("a")));
    let orphan = Chat::new(); // its span never arrives
    let mut records = orphan.messages();
    records.push(plain);
    let resource = vec![kv("wandb.entity", text("logs-ent")), kv("wandb.project", text("chat"))];
    let body = logs_request(records, resource).encode_to_vec();
    let r = api.post_headers("/otel/v1/logs", &[("content-type", PROTOBUF)], body).await;
    assert_eq!(r.status, 200, "{}", r.text());

    let all = query_logs(&api, json!({})).await;
    assert_eq!(all.len(), 3, "{all:#?}");
    let no_span = query_logs(&api, json!({"span_id": ""})).await;
    assert_eq!(no_span.len(), 1);
    assert_eq!(no_span[0]["body"], "disk almost full");
    assert_eq!(no_span[0]["severity_text"], "WARN");
    assert_eq!(
        (no_span[0]["trace_id"].clone(), no_span[0]["span_id"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(no_span[0]["resource"]["attributes"]["wandb"]["project"], "chat");
    let by_trace = query_logs(&api, json!({"trace_id": hex(&orphan.trace_id)})).await;
    assert_eq!(by_trace.len(), 2);
    assert_eq!(by_trace[0]["event_name"], "gen_ai.system.message");
    let paged = query_logs(&api, json!({"limit": 1, "offset": 1})).await;
    assert_eq!(paged, all[1..2]);
    // No call appears for records alone.
    assert_eq!(api.count(&json!({"project_id": P})).await, 0);
}

#[tokio::test]
async fn bad_bodies_and_bounds_get_clear_errors() {
    let server = Server::start_with(&["--max-body-bytes", "2000000"]);
    let api = server.admin();
    let chat = Chat::new();
    let post = |headers: Vec<(&'static str, &'static str)>, body: Vec<u8>| {
        let api = api.clone();
        async move { api.post_headers("/otel/v1/logs", &headers, body).await }
    };
    let proto = vec![("content-type", PROTOBUF), ("project_id", P)];
    let json_ct = vec![("content-type", "application/json"), ("project_id", P)];
    let gz = vec![("content-type", PROTOBUF), ("content-encoding", "gzip"), ("project_id", P)];
    let good = logs_request(chat.messages(), vec![]).encode_to_vec();

    let reason = post(proto.clone(), b"\xff\xff\xff\xff".to_vec()).await.err(400);
    assert!(reason.contains("invalid OTLP protobuf body"), "{reason}");
    let reason = post(json_ct.clone(), b"{\"resourceLogs\": 7}".to_vec()).await.err(400);
    assert!(reason.contains("invalid OTLP/JSON body"), "{reason}");
    post(json_ct, b"[1, 2]".to_vec()).await.err(400);
    post(vec![("content-type", "text/plain"), ("project_id", P)], good.clone()).await.err(415);
    post(gz.clone(), b"not gzip".to_vec()).await.err(400);
    let reason = post(gz, gzip(&vec![0u8; 50_000_000])).await.err(413);
    assert!(reason.contains("decompressed"), "{reason}");
    post(proto.clone(), vec![0u8; 3_000_000]).await.err(413);
    let reason = post(vec![("content-type", PROTOBUF)], good.clone()).await.err(400);
    assert!(reason.contains("no project"), "{reason}");
    // 50,001 empty records: two bytes each on the wire, refused before decoding.
    let many = logs_request(vec![LogRecord::default(); 50_001], vec![]).encode_to_vec();
    let reason = post(proto.clone(), many).await.err(400);
    assert!(reason.contains("more than 50000 log records"), "{reason}");
    assert!(query_logs(&api, json!({})).await.is_empty(), "nothing stored");

    // Bad records are rejected alone (partial success); the good one is stored.
    let mut short_span = chat.event("gen_ai.user.message", 5, text("x"));
    short_span.span_id = vec![1, 2, 3];
    let huge = chat.event("gen_ai.user.message", 6, text(&"x".repeat(600 * 1024)));
    let mut long_key = chat.event("gen_ai.user.message", 7, text("x"));
    long_key.attributes.push(kv(&"k".repeat(2000), text("v")));
    let records = vec![short_span, chat.messages().remove(1), huge, long_key];
    let partial = send_logs(&api, records).await.partial_success.expect("rejections");
    assert_eq!(partial.rejected_log_records, 3);
    assert!(partial.error_message.contains("span_id must be 8 bytes, got 3"), "{partial:?}");
    assert!(partial.error_message.contains("more than the limit of 524288"), "{partial:?}");
    assert_eq!(query_logs(&api, json!({})).await.len(), 1);

    // The read endpoint's bounds.
    let q = |body: Value| {
        let api = api.clone();
        async move { api.post("/otel/logs/query", &body).await }
    };
    let reason = q(json!({"project_id": P, "limit": 1001})).await.err(400);
    assert!(reason.contains("at most 1000"), "{reason}");
    q(json!({"project_id": P, "trace_id": "nothex"})).await.err(400);
    q(json!({"project_id": P, "span_id": "'; DROP TABLE otel_logs; --"})).await.err(400);
    q(json!({"project_id": P, "bogus": 1})).await.err(400);
}

#[tokio::test]
async fn keys_and_projects_are_enforced() {
    let server = Server::start();
    let admin = server.admin();
    let chat = Chat::new();
    let routed = vec![kv("wandb.entity", text("logs-ent")), kv("wandb.project", text("chat"))];
    let body = logs_request(chat.messages(), routed).encode_to_vec();
    let ct = ("content-type", PROTOBUF);

    server.client(None).post_headers("/otel/v1/logs", &[ct], body.clone()).await.err(401);
    server.client(Some("wrong")).post_headers("/otel/v1/logs", &[ct], body.clone()).await.err(401);
    let other = server.create_entity_key("someone-else");
    let intruder = server.client(Some(&other));
    let reason = intruder.post_headers("/otel/v1/logs", &[ct], body.clone()).await.err(403);
    assert!(reason.contains("logs-ent/chat"), "{reason}");
    intruder.post_headers("/otel/v1/logs", &[ct, ("project_id", P)], body.clone()).await.err(403);
    assert!(query_logs(&admin, json!({})).await.is_empty(), "nothing stored");

    // The entity's own key writes, and reads its records; the other entity reads nothing.
    let own = server.create_entity_key("logs-ent");
    let r = server.client(Some(&own)).post_headers("/otel/v1/logs", &[ct], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mine = query_logs(&server.client(Some(&own)), json!({})).await;
    assert_eq!(mine.len(), 2);
    assert_eq!(mine[0]["project_id"], P);
    intruder.post("/otel/logs/query", &json!({"project_id": P})).await.err(403);
    server.client(None).post("/otel/logs/query", &json!({"project_id": P})).await.err(401);
    // Records of another project with the same span ids do not reach this project's call.
    let foreign = logs_request(vec![chat.choice()], vec![]).encode_to_vec();
    let other_project = [ct, ("project_id", "someone-else/chat")];
    assert_eq!(intruder.post_headers("/otel/v1/logs", &other_project, foreign).await.status, 200);
    send_span(&admin, &chat).await;
    let call = read(&admin, &chat).await;
    assert_eq!((call["inputs"].clone(), call["output"].clone()), (want_inputs(), Value::Null));
}

#[tokio::test]
async fn grpc_logs_service_exports_records() {
    let server = Server::start();
    let api = server.admin();
    let mut client = LogsServiceClient::connect(server.grpc_url.clone())
        .await
        .expect("connecting to OTLP/gRPC")
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let auth = common::basic(&server.admin_key);
    let chat = Chat::new();
    let mut bad = chat.choice();
    bad.trace_id = vec![1];
    let mut records = chat.messages();
    records.extend([chat.choice(), bad]);
    let mut req = tonic::Request::new(logs_request(records, vec![]));
    req.metadata_mut().insert("authorization", auth.parse().unwrap());
    req.metadata_mut().insert("project_id", P.parse().unwrap());
    let partial = client.export(req).await.unwrap().into_inner().partial_success.unwrap();
    assert_eq!(partial.rejected_log_records, 1);
    server.wait_visible().await;
    send_span(&api, &chat).await;
    let call = read(&api, &chat).await;
    assert_eq!((call["inputs"].clone(), call["output"].clone()), (want_inputs(), want_output()));

    let mut no_key = tonic::Request::new(logs_request(chat.messages(), vec![]));
    no_key.metadata_mut().insert("project_id", P.parse().unwrap());
    assert_eq!(client.export(no_key).await.unwrap_err().code(), tonic::Code::Unauthenticated);
}

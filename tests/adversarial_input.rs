//! Hostile input: each request here once crashed, stalled or ballooned the server, or reached
//! the database unchecked. Every one must now get a clear 4xx (or, for one bad OTLP span, a
//! partial success), store everything else, and leave the server healthy and small. The bounds
//! are documented in docs/limits.md and live in `heddle_proto::limits`.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{Api, Server, complete, uid};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{Value, json};

const T0: u64 = 1_763_700_000_000_000_000;

/// The server answers `/health` and is not much bigger than `before_kib` (`slack_mib` more).
#[track_caller]
fn assert_small(server: &Server, before_kib: u64, slack_mib: u64) {
    let after = server.memory_kib("VmRSS");
    assert!(
        after < before_kib + slack_mib * 1024,
        "RSS grew from {before_kib} KiB to {after} KiB (allowed {slack_mib} MiB)"
    );
}

async fn healthy(api: &Api) {
    let t = Instant::now();
    api.get("/health").await.ok();
    assert!(t.elapsed() < Duration::from_secs(5), "/health took {:?}", t.elapsed());
}

fn span(id: u8, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: vec![7; 16],
        span_id: vec![id; 8],
        name: "s".into(),
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 1_000,
        attributes,
        ..Default::default()
    }
}

fn attr(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(any_value::Value::IntValue(v)) }),
        ..Default::default()
    }
}

fn export(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    }
}

/// A 20 KB attribute key of dots once overflowed the stack when nested into JSON; at ~3,000
/// segments it was stored and made every filter on `attributes.*` answer 500. Now the span is
/// rejected alone, over every transport, and the project stays queryable.
#[tokio::test]
async fn a_dotted_key_bomb_rejects_only_its_span() {
    let server = Server::start();
    let api = server.admin();
    let before = server.memory_kib("VmRSS");
    let project = format!("adv/otlp-{}", uid());
    let bomb = vec!["a"; 10_000].join(".");
    let many = vec!["b"; 3_000].join(".");
    let spans = vec![
        span(1, vec![attr(&bomb, 1)]),
        span(2, vec![attr(&many, 1)]),
        span(3, vec![attr("ok", 1)]),
    ];
    let header = [("project_id", project.as_str()), ("content-type", "application/x-protobuf")];

    let res =
        api.post_headers("/otel/v1/traces", &header, export(spans.clone()).encode_to_vec()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let answer =
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(
            &res.body[..],
        )
        .unwrap();
    assert_eq!(answer.partial_success.unwrap().rejected_spans, 2);

    let mut client = TraceServiceClient::connect(server.grpc_url.clone()).await.unwrap();
    let mut req = tonic::Request::new(export(spans));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {}", server.admin_key).parse().unwrap());
    req.metadata_mut().insert("project_id", project.parse().unwrap());
    let answer = client.export(req).await.unwrap().into_inner();
    assert_eq!(answer.partial_success.unwrap().rejected_spans, 2);
    server.wait_visible().await;

    // The good span is stored, and filters and sorts through attributes work.
    let q = json!({"project_id": project, "sort_by": [{"field": "attributes.ok", "direction": "desc"}],
                   "query": {"$expr": {"$eq": [{"$getField": "attributes.ok"}, {"$literal": "1"}]}}});
    let rows = api.stream(&q).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], hex(&[3; 8]));
    healthy(&api).await;
    assert_small(&server, before, 200);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Two bytes of protobuf decode into a ~300-byte span: a body of a million empty spans is
/// counted on the wire and refused before anything is decoded, gzip or not.
#[tokio::test]
async fn empty_span_bombs_are_refused_before_decoding() {
    let server = Server::start();
    let api = server.admin();
    let before = server.memory_kib("VmRSS");
    let mut scope = Vec::new();
    for _ in 0..1_000_000 {
        scope.extend_from_slice(&[0x12, 0x00]);
    }
    let body = wrap(0x0a, wrap(0x12, scope));
    let header = [("project_id", "adv/bomb"), ("content-type", "application/x-protobuf")];
    let reason = api.post_headers("/otel/v1/traces", &header, body.clone()).await.err(400);
    assert!(reason.contains("spans"), "{reason}");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&body).unwrap();
    let zipped = gz.finish().unwrap();
    assert!(zipped.len() < 20_000);
    let header = [
        ("project_id", "adv/bomb"),
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "gzip"),
    ];
    api.post_headers("/otel/v1/traces", &header, zipped).await.err(400);
    // The same as OTLP/JSON: a million empty objects.
    let spans = vec!["{}"; 1_000_000].join(",");
    let json_body = format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{spans}]}}]}}]}}"#);
    let header = [("project_id", "adv/bomb"), ("content-type", "application/json")];
    api.post_headers("/otel/v1/traces", &header, json_body.into_bytes()).await.err(400);
    // And over gRPC, authenticated, gzip or not: tonic hands over the bytes, heddle counts them
    // before decoding, as for OTLP/HTTP.
    for gzip in [false, true] {
        let status = grpc_raw(&server, body.clone(), gzip).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("spans"), "{status:?}");
    }
    healthy(&api).await;
    assert_small(&server, before, 300);
}

/// One span of a million attributes fits the request's bound on values, and its list grew by
/// doubling into ~400 MiB held resident under attack. One message's lists are bounded (10,000
/// items together), counted on the wire before anything is decoded.
#[tokio::test]
async fn a_span_of_a_million_attributes_is_refused_before_decoding() {
    let server = Server::start();
    let api = server.admin();
    let before = server.memory_kib("VmRSS");
    // Attributes `a` without a value (field 9 of a span), five bytes each.
    let attributes = [0x4a, 0x03, 0x0a, 0x01, b'a'].repeat(1_000_000);
    let body = wrap(0x0a, wrap(0x12, wrap(0x12, attributes)));
    let header = [("project_id", "adv/attrs"), ("content-type", "application/x-protobuf")];
    for _ in 0..8 {
        let reason = api.post_headers("/otel/v1/traces", &header, body.clone()).await.err(400);
        assert!(reason.contains("one Span of the request holds more than 10000"), "{reason}");
    }
    let status = grpc_raw(&server, body, false).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    healthy(&api).await;
    assert_small(&server, before, 100);
}

/// Twelve million numbers in one array of an OTLP/JSON body (24 MB): parsed, they were a vector
/// grown by doubling to ~400 MB, and the process held 1.6 GB afterwards. No OTLP list is longer
/// than a request's spans may be, so the text is refused before it is parsed; and an OTLP/JSON
/// body is charged by its values, as every JSON body is.
#[tokio::test]
async fn an_otlp_json_body_of_one_long_array_is_refused_before_parsing() {
    let server = Server::start();
    let api = server.admin();
    let before = server.memory_kib("VmRSS");
    let zeros = |n: usize| format!(r#"{{"resourceSpans":[],"x":[{}0]}}"#, "0,".repeat(n - 1));
    let header = [("project_id", "adv/json"), ("content-type", "application/json")];
    // Past the values any JSON body may hold, refused as it is charged.
    for _ in 0..3 {
        let body = zeros(12_000_000).into_bytes();
        let reason = api.post_headers("/otel/v1/traces", &header, body).await.err(400);
        assert!(reason.contains("more than 4000000 JSON values"), "{reason}");
    }
    // Within them, refused for the one list.
    for path in ["/otel/v1/traces", "/otel/v1/logs"] {
        let reason = api.post_headers(path, &header, zeros(3_000_000).into_bytes()).await.err(400);
        assert!(reason.contains("more than 50000 items"), "{reason}");
    }
    healthy(&api).await;
    assert_small(&server, before, 150);
}

/// Sends `body` as the (already encoded) message of an OTLP/gRPC export; returns its status.
async fn grpc_raw(server: &Server, body: Vec<u8>, gzip: bool) -> tonic::Status {
    let mut client = TraceServiceClient::connect(server.grpc_url.clone())
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20);
    if gzip {
        client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
    }
    // Decoded here only to be re-encoded: the client needs a message; 1M empty spans decode
    // in the test process, never in the server's.
    let message = ExportTraceServiceRequest::decode(&body[..]).unwrap();
    let mut req = tonic::Request::new(message);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {}", server.admin_key).parse().unwrap());
    req.metadata_mut().insert("project_id", "adv/bomb".parse().unwrap());
    client.export(req).await.unwrap_err()
}

/// A length-delimited protobuf field.
fn wrap(tag: u8, inner: Vec<u8>) -> Vec<u8> {
    let mut out = vec![tag];
    prost::encoding::encode_varint(inner.len() as u64, &mut out);
    out.extend(inner);
    out
}

async fn create_obj(api: &Api, project: &str, object_id: &str, val: Value) -> String {
    let body = json!({"obj": {"project_id": project, "object_id": object_id, "val": val}});
    let digest = api.post("/obj/create", &body).await.ok()["digest"].as_str().unwrap().to_owned();
    format!("weave:///{project}/object/{object_id}:{digest}")
}

/// An object whose value refers to itself (`:latest`), expanded through many nested columns,
/// once built calls tens of thousands of levels deep. Columns and result depth are bounded.
#[tokio::test]
async fn self_referencing_expansion_is_bounded() {
    let server = Server::start();
    let api = server.admin();
    let project = format!("adv/expand-{}", uid());
    let latest = format!("weave:///{project}/object/loop:latest");
    // The object refers to itself at its top and holds 100 levels of nesting beside: each
    // expansion of `.r` nests the call one level deeper than the 101 levels it brings.
    let deep = (0..100).fold(json!(1), |v, _| json!([v]));
    create_obj(&api, &project, "loop", json!({"r": latest, "deep": deep})).await;
    api.complete_calls(&project, vec![complete(&project, "c1", json!({"inputs": {"x": latest}}))])
        .await;
    server.wait_visible().await;

    let cols = |n: usize| -> Vec<String> {
        (0..n).map(|k| format!("inputs.x{}", ".r".repeat(k))).collect()
    };
    let q = |cols: Vec<String>| json!({"project_id": project, "expand_columns": cols});
    // 23 expansions fit in the 124 levels a member may have (1 + 22 + 101)...
    let rows = api.stream(&q(cols(23))).await;
    assert_eq!(rows.len(), 1);
    let mut v = &rows[0]["inputs"]["x"];
    for _ in 0..22 {
        v = &v["r"];
    }
    assert_eq!(v["deep"].to_string().matches('[').count(), 100);
    assert_eq!(v["r"], latest);
    // ... a 24th would not.
    let res = api.post("/calls/stream_query", &q(cols(24))).await;
    assert!(res.err(400).contains("deeper than"));
    // Too many columns, and too long a column, are refused up front.
    let many: Vec<String> = (0..65).map(|i| format!("inputs.x{i}")).collect();
    api.post("/calls/stream_query", &q(many)).await.err(400);
    let long = format!("inputs.{}", vec!["x"; 100].join("."));
    api.post("/calls/stream_query", &q(vec![long])).await.err(400);
    healthy(&api).await;
}

/// A thousand refs to one 100 KB object once held a thousand parsed copies; the values are now
/// shared and the answer is bounded in bytes (413 past it). The answer is the distinct values'
/// texts, each made once and sent for every slot that names it: neither the refused answer
/// (100 MB) nor the one sent (33 MB) is ever built, so the peak barely moves.
#[tokio::test]
async fn refs_read_batch_shares_values_and_bounds_the_answer() {
    let server = Server::start();
    let api = server.admin();
    let project = format!("adv/refs-{}", uid());
    let big: Vec<Value> = (0..1000).map(|i| json!({"i": i, "pad": "x".repeat(90)})).collect();
    let r = create_obj(&api, &project, "big", json!({"rows": big})).await;
    let peak_before = server.memory_kib("VmHWM");
    let refs = |n: usize| json!({"refs": vec![r.clone(); n]});
    let res = api.post("/refs/read_batch", &refs(1000)).await;
    assert!(res.err(413).contains("fewer refs"));
    let vals = api.post("/refs/read_batch", &refs(300)).await.ok();
    let vals = vals["vals"].as_array().unwrap();
    assert_eq!(vals.len(), 300);
    assert!(vals.iter().all(|v| v["rows"][999]["i"] == 999));
    healthy(&api).await;
    let peak = server.memory_kib("VmHWM");
    assert!(peak < peak_before + 24 * 1024, "peak RSS grew from {peak_before} KiB to {peak} KiB");
}

/// One 1 MB object expanded into 150 calls: the copies are made and sent a slice at a time,
/// so the server never holds the whole 150 MB answer.
#[tokio::test]
async fn expanding_one_large_value_into_many_rows_streams_in_slices() {
    let server = Server::start();
    let api = server.admin();
    let project = format!("adv/fanout-{}", uid());
    let r = create_obj(&api, &project, "big", json!({"pad": "y".repeat(1 << 20)})).await;
    let calls: Vec<Value> = (0..150)
        .map(|i| complete(&project, &format!("c{i:03}"), json!({"inputs": {"m": r}})))
        .collect();
    api.complete_calls(&project, calls).await;
    server.wait_visible().await;
    let before = server.memory_kib("VmRSS");
    let rows = api.stream(&json!({"project_id": project, "expand_columns": ["inputs.m"]})).await;
    assert_eq!(rows.len(), 150);
    assert!(rows.iter().all(|c| c["inputs"]["m"]["pad"].as_str().map(str::len) == Some(1 << 20)));
    assert_small(&server, before, 200);
}

/// `/table/update` with index-0 inserts was quadratic on the async workers and froze `/health`
/// for seconds; it is now O(n log n), off the workers, and bounded in edits and rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_updates_are_fast_bounded_and_never_block_health() {
    let server = Server::start();
    let api = server.admin();
    let project = format!("adv/table-{}", uid());
    let base = api
        .post("/table/create", &json!({"table": {"project_id": project, "rows": [{"i": -1}]}}))
        .await
        .ok()["digest"]
        .clone();
    let updates: Vec<Value> =
        (0..100_000).map(|i| json!({"insert": {"index": 0, "row": {"i": i}}})).collect();
    let body = json!({"project_id": project, "base_digest": base, "updates": updates});
    let slow = {
        let (api, body) = (api.clone(), body.clone());
        tokio::spawn(async move { api.post("/table/update", &body).await })
    };
    for _ in 0..5 {
        healthy(&api).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let digest = slow.await.unwrap().ok()["digest"].clone();
    let page = api
        .post(
            "/table/query",
            &json!({"project_id": project, "digest": digest, "limit": 2, "offset": 0}),
        )
        .await
        .ok();
    let first: Vec<i64> =
        page["rows"].as_array().unwrap().iter().map(|r| r["val"]["i"].as_i64().unwrap()).collect();
    assert_eq!(first, [99_999, 99_998]);
    let stats = api
        .post("/table/query_stats", &json!({"project_id": project, "digest": digest}))
        .await
        .ok();
    assert_eq!(stats["count"], 100_001);

    let mut too_many = body;
    too_many["updates"].as_array_mut().unwrap().push(json!({"append": {"row": {}}}));
    assert!(api.post("/table/update", &too_many).await.err(400).contains("at most 100000"));
}

/// Queries that once reached the database and came back as 500s carrying its messages.
#[tokio::test]
async fn query_bounds_answer_400_before_the_database() {
    let server = Server::start();
    let api = server.admin();
    let p = "adv/query";
    let get = |f: &str| json!({"$getField": f});
    let q = |expr: Value| json!({"project_id": p, "query": {"$expr": expr}});
    let cases = [
        ("NUL in a path", q(json!({"$eq": [get("inputs.a\u{0}b"), {"$literal": 1}]}))),
        ("control character", q(json!({"$eq": [get("attributes.\u{1b}x"), {"$literal": 1}]}))),
        (
            "3000 $and terms",
            q(json!({"$and": (0..3000)
                .map(|i| json!({"$eq": [get("inputs.a"), {"$literal": i}]}))
                .collect::<Vec<_>>()})),
        ),
        (
            "deep nesting",
            q((0..40)
                .fold(json!({"$eq": [get("id"), {"$literal": "x"}]}), |e, _| json!({"$not": [e]}))),
        ),
        (
            "sort_by of 1000 entries",
            json!({"project_id": p, "sort_by": (0..1000)
                .map(|i| json!({"field": format!("inputs.k{i}")}))
                .collect::<Vec<_>>()}),
        ),
        ("NUL in sort_by", json!({"project_id": p, "sort_by": [{"field": "inputs.\u{0}"}]})),
        (
            "20000 call ids",
            json!({"project_id": p, "filter": {"call_ids": (0..20_000).map(|i| format!("c{i}")).collect::<Vec<_>>()}}),
        ),
        ("a 1 MB literal", q(json!({"$eq": [get("inputs.a"), {"$literal": "z".repeat(1 << 20)}]}))),
    ];
    for (what, body) in cases {
        for path in ["/calls/stream_query", "/calls/query_stats"] {
            let res = api.post(path, &body).await;
            let reason = res.err(400);
            assert!(!reason.contains("SELECT") && !reason.contains("SQL"), "{what}: {reason}");
        }
    }
    for path in ["/objs/query", "/feedback/query", "/cost/query"] {
        let body = json!({"project_id": p, "sort_by": (0..100).map(|i| json!({"field": format!("k{i}")})).collect::<Vec<_>>()});
        api.post(path, &body).await.err(400);
    }
    healthy(&api).await;
}

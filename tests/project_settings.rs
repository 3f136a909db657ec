//! Project settings over HTTP (docs/api/project-settings.md), in every store mode: the routes
//! round-trip and bound their input; under `pii-v1` every write path stores redacted values and
//! the raw ones are in no table (SQLite file, ClickHouse tables) and no Kafka record; ingest
//! sampling keeps or drops whole traces (calls and OTLP spans) and counts what it drops; the
//! retention purge deletes
//! expired calls and keeps younger ones.

mod common;

use std::time::Duration;

use common::{Api, Server, StoreMode, complete, ended, started, uid};
use heddle_domain::sampling::keeps_trace;
use heddle_proto::time::Micros;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use serde_json::{Value, json};

const P: &str = "settings-ent/proj";

async fn set_policy(api: &Api, project: &str, policy: &str) {
    let body = json!({"project_id": project, "policy": policy});
    let res = api.post("/project/sensitive_data_settings/update", &body).await.ok();
    assert_eq!(res, json!({"policy": policy}));
}

#[tokio::test]
async fn settings_round_trip_and_are_bounded() {
    let server = Server::start();
    let api = server.admin();
    // Defaults of a project never configured.
    let ttl = api.post("/project/ttl_settings/read", &json!({"project_id": P})).await.ok();
    assert_eq!(ttl, json!({"retention_days": null}));
    let policy = api.get(&format!("/project/sensitive_data_settings?project_id={P}")).await.ok();
    assert_eq!(policy, json!({"policy": "off"}));
    let read_sampling = json!({"project_id": P});
    let sampling = api.post("/project/ingest_sampling_settings/read", &read_sampling).await.ok();
    assert_eq!(sampling, json!({"sample_rate": 1.0, "dry_run": false}));

    // Updates, read back; each setting is kept apart from the others.
    let upd = json!({"project_id": P, "retention_days": 30, "wb_user_id": "someone"});
    assert_eq!(api.post("/project/ttl_settings/update", &upd).await.ok()["retention_days"], 30);
    set_policy(&api, P, "pii-v1").await;
    let upd = json!({"project_id": P, "sample_rate": 0.25});
    let res = api.post("/project/ingest_sampling_settings/update", &upd).await.ok();
    assert_eq!(res, json!({"sample_rate": 0.25, "dry_run": false}));
    let upd = json!({"project_id": P, "dry_run": true});
    let res = api.post("/project/ingest_sampling_settings/update", &upd).await.ok();
    assert_eq!(res, json!({"sample_rate": 0.25, "dry_run": true}));
    let ttl = api.post("/project/ttl_settings/read", &json!({"project_id": P})).await.ok();
    assert_eq!(ttl, json!({"retention_days": 30}));
    let policy = api.get(&format!("/project/sensitive_data_settings?project_id={P}")).await.ok();
    assert_eq!(policy, json!({"policy": "pii-v1"}));
    let sampling = api.post("/project/ingest_sampling_settings/read", &read_sampling).await.ok();
    assert_eq!(sampling, json!({"sample_rate": 0.25, "dry_run": true}));
    // null disables the TTL again.
    let off = json!({"project_id": P, "retention_days": null});
    assert_eq!(
        api.post("/project/ttl_settings/update", &off).await.ok()["retention_days"],
        Value::Null
    );
    let ttl = api.post("/project/ttl_settings/read", &json!({"project_id": P})).await.ok();
    assert_eq!(ttl, json!({"retention_days": null}));

    // Bounds: clear 400s, nothing changes.
    for (path, body) in [
        ("/project/ttl_settings/update", json!({"project_id": P, "retention_days": 0})),
        ("/project/ttl_settings/update", json!({"project_id": P, "retention_days": -3})),
        ("/project/ttl_settings/update", json!({"project_id": P, "retention_days": 36501})),
        ("/project/ttl_settings/update", json!({"project_id": P, "retention_days": "7"})),
        ("/project/sensitive_data_settings/update", json!({"project_id": P, "policy": "on"})),
        ("/project/ingest_sampling_settings/update", json!({"project_id": P, "sample_rate": 1.5})),
        ("/project/ingest_sampling_settings/update", json!({"project_id": P, "sample_rate": -1})),
        ("/project/ttl_settings/read", json!({"project_id": "no-slash"})),
    ] {
        api.post(path, &body).await.err(400);
    }
    api.get("/project/sensitive_data_settings").await.err(400);
    api.get("/project/sensitive_data_settings?project_id=bad").await.err(400);
    let sampling = api.post("/project/ingest_sampling_settings/read", &read_sampling).await.ok();
    assert_eq!(sampling, json!({"sample_rate": 0.25, "dry_run": true}));

    // Keys see only their own entity; no key, no answer.
    let bob = server.client(Some(&server.create_entity_key("bob")));
    bob.post("/project/ttl_settings/read", &json!({"project_id": P})).await.err(403);
    bob.post("/project/ttl_settings/update", &json!({"project_id": P, "retention_days": 1}))
        .await
        .err(403);
    bob.get(&format!("/project/sensitive_data_settings?project_id={P}")).await.err(403);
    let own = json!({"project_id": "bob/p", "retention_days": 3});
    assert_eq!(bob.post("/project/ttl_settings/update", &own).await.ok()["retention_days"], 3);
    let anon = api.client_without_auth();
    anon.post("/project/ttl_settings/read", &json!({"project_id": P})).await.err(401);
    let ttl = api.post("/project/ttl_settings/read", &json!({"project_id": P})).await.ok();
    assert_eq!(ttl, json!({"retention_days": null}), "bob's update did not land");
}

// ---------------------------------------------------------------------------------------------
// Redaction

/// Sensitive values, unique to one test run, and where they must not appear.
struct Secrets {
    email: String,
    api_key: String,
    card: &'static str,
    ssn: &'static str,
    phone: &'static str,
}

impl Secrets {
    fn new() -> Secrets {
        let id = uid().replace('-', "");
        Secrets {
            email: format!("jane.{}@example.com", &id[..12]),
            api_key: format!("sk-live-{id}"),
            card: "4111 1111 1111 1111",
            ssn: "219-09-9999",
            phone: "(415) 555-0132",
        }
    }

    fn all(&self) -> Vec<&str> {
        vec![&self.email, &self.api_key, self.card, self.ssn, self.phone]
    }

    /// A text holding every kind of personal data.
    fn text(&self) -> String {
        format!("mail {} card {} ssn {} phone {}", self.email, self.card, self.ssn, self.phone)
    }

    const REDACTED_TEXT: &str =
        "mail <EMAIL_ADDRESS> card <CREDIT_CARD> ssn <US_SSN> phone <PHONE_NUMBER>";

    /// Asserts that no secret is in `haystack` (`what` names it in the failure).
    fn assert_absent(&self, haystack: &[u8], what: &str) {
        for s in self.all() {
            let found = haystack.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(!found, "{s:?} found in {what}");
        }
    }
}

fn kv(key: &str, v: &str) -> KeyValue {
    let value = Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) });
    KeyValue { key: key.into(), value, ..Default::default() }
}

fn otlp_request(trace_id: &[u8], span_id: &[u8], secrets: &Secrets) -> ExportTraceServiceRequest {
    let span = Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id.to_vec(),
        name: "llm call".into(),
        kind: 3,
        start_time_unix_nano: 1_772_366_400_000_000_000,
        end_time_unix_nano: 1_772_366_401_000_000_000,
        attributes: vec![
            kv("input.value", &secrets.text()),
            kv("output.value", &format!("reach me at {}", secrets.email)),
            kv("api_key", &secrets.api_key),
            kv("http.request.header.authorization", &secrets.api_key),
            kv("note", &format!("card {}", secrets.card)),
        ],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans { spans: vec![span], ..Default::default() }],
            ..Default::default()
        }],
    }
}

/// `v` as text, for "no raw value anywhere in this row".
fn all_text(v: &Value) -> String {
    v.to_string()
}

#[tokio::test]
async fn pii_policy_redacts_every_write_path_before_storage() {
    let server = Server::start();
    let api = server.admin();
    let secrets = Secrets::new();
    set_policy(&api, P, "pii-v1").await;
    let entity_project: Vec<&str> = P.split('/').collect();

    // call/start + call/end
    let inputs = json!({"prompt": secrets.text(), "api_key": secrets.api_key,
                        "nested": [{"Authorization": {"token": secrets.api_key}}], "n": 42});
    let start = started(
        P,
        "c1",
        json!({"inputs": inputs, "display_name": secrets.email,
                                        "attributes": {"auth_headers": {"x": secrets.api_key}}}),
    );
    api.post("/call/start", &json!({"start": start})).await.ok();
    let end = ended(
        P,
        "c1",
        json!({"output": {"answer": secrets.text()},
                                    "exception": format!("failed for {}", secrets.email),
                                    "summary": {"who": secrets.phone}}),
    );
    api.post("/call/end", &json!({"end": end})).await.ok();
    // calls/complete and upsert_batch
    let c2 = complete(P, "c2", json!({"inputs": {"q": secrets.text()}, "output": secrets.text()}));
    api.complete_calls(P, vec![c2]).await;
    let c3 = started(P, "c3", json!({"inputs": {"API_KEY": secrets.api_key, "s": secrets.ssn}}));
    let batch = json!({"batch": [{"mode": "start", "req": {"start": c3}}]});
    api.post("/call/upsert_batch", &batch).await.ok();
    // v2 start
    let c4 = started(P, "c4", json!({"inputs": {"x": secrets.text()}}));
    let path = format!("/v2/{}/{}/call/start", entity_project[0], entity_project[1]);
    api.post(&path, &json!({"start": c4})).await.ok();
    // /call/update renames
    let rename = json!({"project_id": P, "call_id": "c2", "display_name": secrets.email,
                        "wb_user_id": null});
    api.post("/call/update", &rename).await.ok();
    // OTLP over HTTP (protobuf) and gRPC
    use prost::Message;
    let (http_trace, grpc_trace) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let body = otlp_request(http_trace.as_bytes(), &[1; 8], &secrets).encode_to_vec();
    let headers = [("content-type", "application/x-protobuf"), ("project_id", P)];
    assert_eq!(api.post_headers("/otel/v1/traces", &headers, body).await.status, 200);
    let mut grpc = TraceServiceClient::connect(server.grpc_url.clone()).await.unwrap();
    let mut req = tonic::Request::new(otlp_request(grpc_trace.as_bytes(), &[2; 8], &secrets));
    let auth = common::basic(&server.admin_key);
    req.metadata_mut().insert("authorization", auth.parse().unwrap());
    req.metadata_mut().insert("project_id", P.parse().unwrap());
    grpc.export(req).await.unwrap();
    // An OTLP log record (OTLP/JSON) with message content for the HTTP span.
    let record = json!({"timeUnixNano": "1772366400500000000",
        "traceId": http_trace.simple().to_string(), "spanId": "0101010101010101",
        "eventName": "gen_ai.user.message",
        "body": {"kvlistValue": {"values": [
            {"key": "content", "value": {"stringValue": secrets.text()}}]}},
        "attributes": [{"key": "user.email", "value": {"stringValue": secrets.email}}]});
    let logs = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]});
    let headers = [("content-type", "application/json"), ("project_id", P)];
    let body = serde_json::to_vec(&logs).unwrap();
    assert_eq!(api.post_headers("/otel/v1/logs", &headers, body).await.status, 200);
    server.wait_visible().await;
    // Feedback
    let fb = json!({"project_id": P, "weave_ref": format!("weave:///{P}/call/c1"),
                    "feedback_type": "note",
                    "payload": {"note": secrets.text(), "api_key": secrets.api_key}});
    api.post("/feedback/create", &fb).await.ok();

    // Read back: redacted, the rest intact.
    let c1 = api.read_call(P, "c1").await;
    assert_eq!(c1["inputs"]["prompt"], Secrets::REDACTED_TEXT);
    assert_eq!(c1["inputs"]["api_key"], "REDACTED");
    assert_eq!(c1["inputs"]["nested"][0]["Authorization"], "REDACTED");
    assert_eq!(c1["inputs"]["n"], 42);
    assert_eq!(c1["attributes"]["auth_headers"], "REDACTED");
    assert_eq!(c1["display_name"], "<EMAIL_ADDRESS>");
    assert_eq!(c1["output"]["answer"], Secrets::REDACTED_TEXT);
    assert_eq!(c1["exception"], "failed for <EMAIL_ADDRESS>");
    assert_eq!(c1["summary"]["who"], "<PHONE_NUMBER>");
    let c2 = api.read_call(P, "c2").await;
    assert_eq!(
        (&c2["inputs"]["q"], &c2["output"]),
        (&json!(Secrets::REDACTED_TEXT), &json!(Secrets::REDACTED_TEXT))
    );
    assert_eq!(c2["display_name"], "<EMAIL_ADDRESS>");
    let c3 = api.read_call(P, "c3").await;
    assert_eq!(c3["inputs"], json!({"API_KEY": "REDACTED", "s": "<US_SSN>"}));
    assert_eq!(api.read_call(P, "c4").await["inputs"]["x"], Secrets::REDACTED_TEXT);
    for trace in [http_trace, grpc_trace] {
        let q = json!({"project_id": P, "filter": {"trace_ids": [trace.simple().to_string()]}});
        let spans = api.stream(&q).await;
        assert_eq!(spans.len(), 1, "{spans:?}");
        let text = all_text(&spans[0]);
        assert!(text.contains("<EMAIL_ADDRESS>") && text.contains("REDACTED"), "{text}");
        secrets.assert_absent(text.as_bytes(), "an OTLP span read back");
    }
    let q = json!({"project_id": P, "filter": {"trace_ids": [http_trace.simple().to_string()]}});
    let messages = &api.stream(&q).await[0]["inputs"]["messages"];
    assert_eq!(messages, &json!([{"role": "user", "content": Secrets::REDACTED_TEXT}]));
    let fb = api.post("/feedback/query", &json!({"project_id": P})).await.ok();
    let row = &fb["result"][0];
    assert_eq!(row["payload"], json!({"note": Secrets::REDACTED_TEXT, "api_key": "REDACTED"}));
    let all = api.stream(&json!({"project_id": P})).await;
    assert_eq!(all.len(), 6);
    secrets.assert_absent(all_text(&json!(all)).as_bytes(), "the calls read back");

    // A project without the policy keeps values verbatim.
    let plain = "settings-ent/plain";
    let kept = format!("plain.{}@example.com", &uid()[..8]);
    api.complete_calls(plain, vec![complete(plain, "raw", json!({"inputs": {"q": kept}}))]).await;
    assert_eq!(api.read_call(plain, "raw").await["inputs"]["q"], json!(kept));

    assert_raw_values_absent(&server, &secrets, &kept).await;
}

/// Asserts that no secret is in the store's raw bytes, nor in any Kafka record; and, to show
/// that the search reads the stored data, that `stored` (a value stored verbatim) is found in
/// the store and in Kafka.
async fn assert_raw_values_absent(server: &Server, secrets: &Secrets, stored: &str) {
    let contains = |bytes: &[u8], s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
    let mut store: Vec<(String, Vec<u8>)> = Vec::new();
    match server.store_mode() {
        StoreMode::Sqlite => {
            for entry in std::fs::read_dir(server.data_dir()).unwrap() {
                let path = entry.unwrap().path();
                store.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
        StoreMode::ClickHouse | StoreMode::Distributed => {
            let (url, db) = server.clickhouse().expect("a ClickHouse");
            let http = reqwest::Client::new();
            let query = |sql: String| {
                let http = http.clone();
                async move {
                    let r = http.post(format!("{url}/?database={db}")).body(sql).send().await;
                    let r = r.unwrap();
                    assert!(r.status().is_success(), "ClickHouse query failed");
                    r.bytes().await.unwrap().to_vec()
                }
            };
            let sql = "SELECT name FROM system.tables WHERE database = currentDatabase()";
            let tables = String::from_utf8(query(sql.to_owned()).await).unwrap();
            assert!(tables.contains("call_parts") && tables.contains("feedback"), "{tables}");
            for table in tables.lines() {
                let rows = query(format!("SELECT * FROM `{table}` FORMAT TabSeparated")).await;
                store.push((format!("ClickHouse table {table}"), rows));
            }
        }
    }
    for (what, bytes) in &store {
        secrets.assert_absent(bytes, what);
    }
    assert!(store.iter().any(|(_, b)| contains(b, stored)), "the raw search finds nothing");

    let Some(brokers) = server.kafka_brokers() else { return };
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::Message;
    let reader: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("raw-reader-{}", uid()))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    reader.subscribe(&[common::kafka::TOPIC]).unwrap();
    let (mut records, mut found) = (0, false);
    // Every record is in the topic already (the writes were acknowledged): read until it stays
    // quiet.
    while let Ok(m) = tokio::time::timeout(Duration::from_secs(5), reader.recv()).await {
        let payload = m.unwrap().payload().unwrap_or_default().to_vec();
        secrets.assert_absent(&payload, "a Kafka record");
        found |= contains(&payload, stored);
        records += 1;
    }
    assert!(
        records > 0 && found,
        "{records} Kafka records read; the verbatim value in one: {found}"
    );
}

// ---------------------------------------------------------------------------------------------
// Sampling

/// The `heddle_ingest_sampled_out_calls_total{mode=...}` counter, 0 when absent.
async fn sampled_out(api: &Api, mode: &str) -> f64 {
    let text = api.get("/metrics").await.text();
    let name = format!("heddle_ingest_sampled_out_calls_total{{mode=\"{mode}\"}}");
    text.lines()
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

#[tokio::test]
async fn sampling_keeps_or_drops_whole_traces() {
    let server = Server::start();
    let api = server.admin();
    let rate = 0.5;
    let upd = json!({"project_id": P, "sample_rate": rate});
    api.post("/project/ingest_sampling_settings/update", &upd).await.ok();

    // 40 traces of three calls; the root's start, its children, and its end arrive in separate
    // requests through different endpoints.
    let traces: Vec<String> = (0..40).map(|_| uid()).collect();
    for tr in &traces {
        let root = started(P, &format!("{tr}-root"), json!({"trace_id": tr}));
        api.post("/call/start", &json!({"start": root})).await.ok();
    }
    let children: Vec<Value> = traces
        .iter()
        .flat_map(|tr| {
            (0..2).map(move |i| {
                complete(
                    P,
                    &format!("{tr}-child{i}"),
                    json!({"trace_id": tr, "parent_id": format!("{tr}-root")}),
                )
            })
        })
        .collect();
    api.complete_calls(P, children).await;
    let ends: Vec<Value> = traces
        .iter()
        .map(|tr| json!({"mode": "end", "req": {"end": ended(P, &format!("{tr}-root"), json!({"trace_id": tr}))}}))
        .collect();
    let res = api.post("/call/upsert_batch", &json!({"batch": ends})).await.ok();
    assert_eq!(res["res"].as_array().unwrap().len(), 40, "dropped items are acknowledged too");

    let calls = api.stream(&json!({"project_id": P})).await;
    let mut kept = 0;
    for tr in &traces {
        let of_trace: Vec<&Value> = calls.iter().filter(|c| c["trace_id"] == json!(tr)).collect();
        if keeps_trace(tr, rate) {
            kept += 1;
            assert_eq!(of_trace.len(), 3, "trace {tr} is kept whole");
            let root = of_trace.iter().find(|c| c["id"] == json!(format!("{tr}-root"))).unwrap();
            assert!(root["ended_at"].is_string(), "the root's end arrived too");
        } else {
            assert!(of_trace.is_empty(), "trace {tr} is dropped whole: {of_trace:?}");
        }
    }
    assert!((8..=32).contains(&kept), "kept {kept} of 40 at rate {rate}");
    assert_eq!(calls.len(), kept * 3);
    // Each dropped call counts once (at its start).
    assert_eq!(sampled_out(&api, "dropped").await, ((40 - kept) * 3) as f64);

    // OTLP spans of the header's project are sampled by the same rule, over HTTP and gRPC: 20
    // traces of two spans in one request each.
    let before = sampled_out(&api, "dropped").await;
    let otlp_traces: Vec<uuid::Uuid> = (0..20).map(|_| uuid::Uuid::new_v4()).collect();
    let export = |traces: &[uuid::Uuid]| {
        let spans = traces.iter().flat_map(|t| {
            // Span ids unique across traces: a call is its project's and its id's.
            let id = move |i: u8| [&t.as_bytes()[..7], &[i]].concat();
            (1..=2u8).map(move |i| Span {
                trace_id: t.as_bytes().to_vec(),
                span_id: id(i),
                parent_span_id: if i == 2 { id(1) } else { Vec::new() },
                name: "sampled".into(),
                start_time_unix_nano: 1_772_366_400_000_000_000,
                end_time_unix_nano: 1_772_366_401_000_000_000,
                ..Default::default()
            })
        });
        let scope_spans = vec![ScopeSpans { spans: spans.collect(), ..Default::default() }];
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans { scope_spans, ..Default::default() }],
        }
    };
    use prost::Message;
    let headers = [("content-type", "application/x-protobuf"), ("project_id", P)];
    let body = export(&otlp_traces[..10]).encode_to_vec();
    assert_eq!(api.post_headers("/otel/v1/traces", &headers, body).await.status, 200);
    let mut grpc = TraceServiceClient::connect(server.grpc_url.clone()).await.unwrap();
    let mut req = tonic::Request::new(export(&otlp_traces[10..]));
    req.metadata_mut().insert("authorization", common::basic(&server.admin_key).parse().unwrap());
    req.metadata_mut().insert("project_id", P.parse().unwrap());
    grpc.export(req).await.unwrap();
    server.wait_visible().await;
    let ids: Vec<String> = otlp_traces.iter().map(|t| t.simple().to_string()).collect();
    let q = json!({"project_id": P, "filter": {"trace_ids": ids}});
    let spans = api.stream(&q).await;
    let otlp_kept: Vec<&String> = ids.iter().filter(|t| keeps_trace(t, rate)).collect();
    assert!((2..=18).contains(&otlp_kept.len()), "kept {} of 20", otlp_kept.len());
    let mut stored: Vec<&str> = spans.iter().map(|c| c["trace_id"].as_str().unwrap()).collect();
    stored.sort();
    let mut expected: Vec<&str> = otlp_kept.iter().flat_map(|t| [t.as_str(), t.as_str()]).collect();
    expected.sort();
    assert_eq!(stored, expected, "the kept traces whole, the others not at all");
    let dropped_spans = (20 - otlp_kept.len()) * 2;
    assert_eq!(sampled_out(&api, "dropped").await, before + dropped_spans as f64);

    // A dry run keeps everything and counts what it would have dropped.
    let upd = json!({"project_id": P, "dry_run": true});
    api.post("/project/ingest_sampling_settings/update", &upd).await.ok();
    let dropped: Vec<String> = traces.iter().filter(|t| !keeps_trace(t, rate)).cloned().collect();
    let batch: Vec<Value> = dropped
        .iter()
        .map(|tr| complete(P, &format!("{tr}-late"), json!({"trace_id": tr})))
        .collect();
    api.complete_calls(P, batch).await;
    let stored = kept * 3 + otlp_kept.len() * 2;
    assert_eq!(api.count(&json!({"project_id": P})).await as usize, stored + dropped.len());
    assert_eq!(sampled_out(&api, "dry_run").await, dropped.len() as f64);

    // Rate 0 drops everything, acknowledged.
    let upd = json!({"project_id": P, "sample_rate": 0.0, "dry_run": false});
    api.post("/project/ingest_sampling_settings/update", &upd).await.ok();
    api.complete_calls(P, vec![complete(P, "gone", json!({"trace_id": uid()}))]).await;
    assert_eq!(api.read_call(P, "gone").await, Value::Null);
}

// ---------------------------------------------------------------------------------------------
// Retention

#[tokio::test]
async fn the_retention_purge_deletes_expired_calls_and_keeps_younger_ones() {
    // The purge runs every second; calls "three days old" are placed in the past rather than
    // waiting for days (the store-level tests in tests/retention.rs control "now" itself).
    let server = Server::start_with(&["--retention-interval-secs", "1"]);
    let api = server.admin();
    let now = Micros::now();
    let day = 86_400_000_000;
    let old = Micros(now.0 - 3 * day).to_rfc3339();
    let young = Micros(now.0 - 3_600_000_000).to_rfc3339();
    let calls = vec![
        complete(P, "old", json!({"started_at": old, "ended_at": old})),
        complete(P, "young", json!({"started_at": young, "ended_at": young})),
    ];
    api.complete_calls(P, calls).await;
    let other = "settings-ent/forever";
    api.complete_calls(
        other,
        vec![complete(other, "old", json!({"started_at": old, "ended_at": old}))],
    )
    .await;
    let young_call = api.read_call(P, "young").await;
    assert_eq!(young_call["expire_at"], Value::Null, "no retention yet");

    let upd = json!({"project_id": P, "retention_days": 1});
    api.post("/project/ttl_settings/update", &upd).await.ok();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while api.read_call(P, "old").await != Value::Null {
        let log = server.log();
        assert!(std::time::Instant::now() < deadline, "the old call was not purged; log:\n{log}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let young_call = api.read_call(P, "young").await;
    assert_eq!(young_call["id"], "young");
    assert_eq!(young_call["expire_at"], Micros(now.0 - 3_600_000_000 + day).to_rfc3339());
    let streamed = api.stream(&json!({"project_id": P})).await;
    assert_eq!(streamed.len(), 1);
    assert_eq!(streamed[0]["expire_at"], young_call["expire_at"]);
    assert_eq!(api.read_call(other, "old").await["id"], "old", "another project keeps its data");
}

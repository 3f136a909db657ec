//! Usage, statistics and the smaller routes over HTTP (docs/api/usage.md,
//! docs/api/feedback.md#feedback-statistics, docs/api/service.md, docs/api/unsupported.md):
//! `/trace/usage` and `/calls/usage` count a wrapper span's usage and its provider span's once;
//! `/calls/stats` buckets; the model-provider routes answer 501 after authentication;
//! `display_name` sent with `call/end` becomes the call's name. Every write is read back.

mod common;

use common::{Server, complete, ended, started, uid};
use serde_json::{Value, json};

const P: &str = "ent/usage";

fn usage(p: i64, c: i64) -> Value {
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c, "requests": 1})
}

/// A root, a Vercel-like wrapper and its provider child (both carrying the same usage), and a
/// second provider call of another model directly under the root.
fn tree(trace: &str) -> Vec<Value> {
    let call = |id: &str, parent: Option<&str>, summary: Value| {
        complete(
            P,
            &format!("{trace}-{id}"),
            json!({"trace_id": trace, "parent_id": parent.map(|p| format!("{trace}-{p}")),
                   "op_name": id, "summary": summary}),
        )
    };
    vec![
        call("root", None, json!({})),
        call("wrap", Some("root"), json!({"usage": {"gpt-4o": usage(100, 20)}})),
        call("gen", Some("wrap"), json!({"usage": {"gpt-4o": usage(100, 20)}})),
        call("other", Some("root"), json!({"usage": {"claude-3-5-sonnet-20241022": usage(7, 3)}})),
    ]
}

#[tokio::test]
async fn trace_and_calls_usage_count_each_token_once() {
    let server = Server::start();
    let api = server.admin();
    let trace = uid();
    api.complete_calls(P, tree(&trace)).await;
    let id = |s: &str| format!("{trace}-{s}");

    let r = api
        .post(
            "/trace/usage",
            &json!({"project_id": P, "filter": {"trace_ids": [trace]}, "include_costs": true}),
        )
        .await
        .ok();
    let cu = &r["call_usage"];
    assert_eq!(cu.as_object().unwrap().len(), 4, "{r}");
    let root = &cu[id("root")];
    assert_eq!(root["gpt-4o"]["prompt_tokens"], json!(100), "{r}");
    assert_eq!(root["gpt-4o"]["completion_tokens"], json!(20));
    assert_eq!(root["gpt-4o"]["total_tokens"], json!(120));
    assert_eq!(root["gpt-4o"]["requests"], json!(1));
    assert_eq!(root["claude-3-5-sonnet-20241022"]["total_tokens"], json!(10));
    assert_eq!(cu[id("wrap")]["gpt-4o"]["total_tokens"], json!(120));
    assert_eq!(cu[id("gen")]["gpt-4o"]["total_tokens"], json!(120));
    // Built-in gpt-4o price: $2.5 / $10 per million tokens.
    let cost = root["gpt-4o"]["prompt_tokens_total_cost"].as_f64().unwrap();
    assert!((cost - 100.0 * 2.5e-6).abs() < 1e-12, "{cost}");
    let cost = root["gpt-4o"]["completion_tokens_total_cost"].as_f64().unwrap();
    assert!((cost - 20.0 * 1e-5).abs() < 1e-12, "{cost}");
    assert_eq!(r["unfinished_call_ids"], json!([]));

    let r = api
        .post(
            "/calls/usage",
            &json!({"project_id": P, "call_ids": [id("root"), id("wrap"), "nope"]}),
        )
        .await
        .ok();
    assert_eq!(r["call_usage"][id("root")]["gpt-4o"]["prompt_tokens"], json!(100), "{r}");
    assert!(r["call_usage"][id("root")]["gpt-4o"].get("prompt_tokens_total_cost").is_none());
    assert_eq!(r["call_usage"][id("wrap")]["gpt-4o"]["prompt_tokens"], json!(100));
    assert_eq!(r["call_usage"]["nope"], json!({}));

    // A running call is reported as unfinished.
    let running = format!("{trace}-running");
    api.call_start(started(P, &running, json!({"trace_id": trace, "parent_id": id("root")}))).await;
    let r =
        api.post("/calls/usage", &json!({"project_id": P, "call_ids": [id("root")]})).await.ok();
    assert_eq!(r["unfinished_call_ids"], json!([running]));
}

#[tokio::test]
async fn usage_bounds_and_tenancy() {
    let server = Server::start();
    let api = server.admin();
    for limit in [0, 100_001] {
        let body = json!({"project_id": P, "limit": limit});
        let reason = api.post("/trace/usage", &body).await.err(400);
        assert!(reason.contains("limit"), "{reason}");
    }
    let trace = uid();
    api.complete_calls(P, tree(&trace)).await;
    let reason = api
        .post(
            "/trace/usage",
            &json!({"project_id": P, "filter": {"trace_ids": [trace]}, "limit": 2}),
        )
        .await
        .err(400);
    assert!(reason.contains("more than 2 calls"), "{reason}");
    let other = server.client(Some(&server.create_entity_key("someone")));
    other.post("/trace/usage", &json!({"project_id": P})).await.err(403);
    other.post("/calls/usage", &json!({"project_id": P, "call_ids": []})).await.err(403);
}

#[tokio::test]
async fn call_stats_buckets_counts_latency_and_usage() {
    let server = Server::start();
    let api = server.admin();
    let project = format!("ent/stats{}", &uid()[..8]);
    let at = |s: f64, id: &str, ms: f64, err: bool, summary: Value| {
        complete(
            &project,
            id,
            json!({"started_at": t(s), "ended_at": t(s + ms / 1000.0),
                   "exception": if err { json!("boom") } else { Value::Null }, "summary": summary}),
        )
    };
    // Two calls in the first hour bucket, one in the second.
    api.complete_calls(
        &project,
        vec![
            at(10.0, "a", 100.0, false, json!({"usage": {"m": usage(5, 5)}})),
            at(20.0, "b", 300.0, true, json!({"usage": {"m": usage(1, 1)}})),
            at(3700.0, "c", 200.0, false, json!({})),
            at(7300.0, "outside", 1.0, false, json!({})),
        ],
    )
    .await;
    let r = api
        .post(
            "/calls/stats",
            &json!({"project_id": project, "start": t(0.0), "end": t(7200.0), "granularity": 3600,
                "call_metrics": [
                    {"metric": "call_count", "aggregations": ["sum"]},
                    {"metric": "error_count", "aggregations": ["sum"]},
                    {"metric": "latency_ms", "aggregations": ["avg", "max"], "percentiles": [50]}],
                "usage_metrics": [{"metric": "total_tokens", "aggregations": ["sum"]}]}),
        )
        .await
        .ok();
    assert_eq!(r["granularity"], json!(3600));
    assert_eq!(
        r["call_buckets"],
        json!([
            {"timestamp": t(0.0), "sum_call_count": 2, "sum_error_count": 1,
             "avg_latency_ms": 200.0, "max_latency_ms": 300, "p50_latency_ms": 200.0},
            {"timestamp": t(3600.0), "sum_call_count": 1, "sum_error_count": 0,
             "avg_latency_ms": 200.0, "max_latency_ms": 200, "p50_latency_ms": 200.0},
        ]),
        "{r}"
    );
    assert_eq!(
        r["usage_buckets"],
        json!([{"timestamp": t(0.0), "model": "m", "sum_total_tokens": 12}]),
        "{r}"
    );
    for (body, needle) in [
        (json!({"project_id": project, "start": t(10.0), "end": t(0.0)}), "after start"),
        (json!({"project_id": project, "start": t(0.0), "timezone": "Mars/Olympus"}), "timezone"),
        (json!({"project_id": project, "start": t(0.0), "granularity": -5}), "granularity"),
        (
            json!({"project_id": project, "start": t(0.0), "call_metrics": [{"metric": "nope"}]}),
            "unknown metric",
        ),
        (
            json!({"project_id": project, "start": t(0.0),
                   "call_metrics": [{"metric": "latency_ms", "percentiles": [120]}]}),
            "percentile",
        ),
    ] {
        let reason = api.post("/calls/stats", &body).await.err(400);
        assert!(reason.contains(needle), "{body}: {reason}");
    }
}

#[tokio::test]
async fn feedback_stats_and_payload_schema() {
    let server = Server::start();
    let api = server.admin();
    let project = format!("ent/fb{}", &uid()[..8]);
    let start = "2020-01-01T00:00:00Z";
    for (score, ok) in [(0.5, true), (1.0, false), (0.0, true)] {
        api.post(
            "/feedback/create",
            &json!({"project_id": project, "weave_ref": format!("weave:///{project}/call/x"),
                    "feedback_type": "wandb.runnable.judge",
                    "payload": {"output": {"score": score, "ok": ok, "label": "x"}}}),
        )
        .await
        .ok();
    }
    let r = api
        .post(
            "/feedback/stats",
            &json!({"project_id": project, "start": start, "granularity": 86400,
                "feedback_type": "wandb.runnable.judge",
                "metrics": [{"json_path": "output.score", "value_type": "numeric",
                             "aggregations": ["avg", "min", "max", "count"]},
                            {"json_path": "output.ok", "value_type": "boolean"}]}),
        )
        .await
        .ok();
    let w = &r["window_stats"];
    assert_eq!(w["output_score"]["avg"], json!(0.5), "{r}");
    assert_eq!(w["output_score"]["min"], json!(0.0));
    assert_eq!(w["output_score"]["max"], json!(1.0));
    assert_eq!(w["output_score"]["count"], json!(3));
    assert_eq!(w["output_ok"]["count_true"], json!(2));
    assert_eq!(w["output_ok"]["count_false"], json!(1));
    let total: u64 =
        r["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 3);

    let r = api
        .post("/feedback/payload_schema", &json!({"project_id": project, "start": start}))
        .await
        .ok();
    assert_eq!(
        r["paths"],
        json!([{"json_path": "output.label", "value_type": "categorical"},
               {"json_path": "output.ok", "value_type": "boolean"},
               {"json_path": "output.score", "value_type": "numeric"}]),
        "{r}"
    );

    let after_ms = 0;
    let before_ms = 4_102_444_800_000_i64; // 2100-01-01
    let r = api
        .post(
            "/feedback/aggregate",
            &json!({"project_id": project, "after_ms": after_ms, "before_ms": before_ms,
                    "group_by": ["scorer_id"]}),
        )
        .await
        .ok();
    let b = &r["buckets"][0];
    assert_eq!(b["total_count"], json!(3), "{r}");
    assert_eq!(b["rating_counts"]["score"], json!(3));
    assert_eq!(b["rating_sums"]["score"], json!(1.5));
    assert_eq!(b["tag_counts"]["ok"], json!(2));
    assert_eq!(b["group"]["scorer_id"], json!("wandb.runnable.judge"));
}

/// `secs` (< 1 day) after 2026-01-01T00:00:00Z, as RFC 3339.
fn t(secs: f64) -> String {
    let us = (secs * 1e6).round() as i64;
    let (h, m, s, frac) =
        (us / 3_600_000_000, us / 60_000_000 % 60, us / 1_000_000 % 60, us % 1_000_000);
    format!("2026-01-01T{h:02}:{m:02}:{s:02}.{frac:06}Z")
}

#[tokio::test]
async fn model_provider_routes_answer_501_after_auth() {
    let server = Server::start();
    for path in [
        "/completions/create",
        "/completions/create_stream",
        "/image/create",
        "/evaluations/evaluate_model",
        "/evaluations/rescore",
        "/evaluations/status",
        "/calls/score",
    ] {
        let anon = server.admin().client_without_auth();
        anon.post(path, &json!({"project_id": P})).await.err(401);
        let reason = server.admin().post(path, &json!({"project_id": P})).await.err(501);
        assert!(reason.contains(path), "{path}: {reason}");
    }
}

#[tokio::test]
async fn display_name_sent_with_call_end_names_the_call() {
    let server = Server::start();
    let api = server.admin();
    // Start then end, end then start (order tolerance), upsert_batch, and a rename after.
    let (a, b, c) = (uid(), uid(), uid());
    api.call_start(started(P, &a, json!({"display_name": "from start"}))).await;
    api.call_end(ended(P, &a, json!({"display_name": "from end"}))).await;
    api.call_end(ended(P, &b, json!({"display_name": "end first"}))).await;
    api.call_start(started(P, &b, json!({"display_name": "start later"}))).await;
    api.post(
        "/call/upsert_batch",
        &json!({"batch": [
            {"mode": "start", "req": {"start": started(P, &c, json!({}))}},
            {"mode": "end", "req": {"end": ended(P, &c, json!({"display_name": "batched"}))}}]}),
    )
    .await
    .ok();
    assert_eq!(api.read_call(P, &a).await["display_name"], json!("from end"));
    assert_eq!(api.read_call(P, &a).await["summary"]["weave"]["trace_name"], json!("from end"));
    assert_eq!(api.read_call(P, &b).await["display_name"], json!("end first"));
    assert_eq!(api.read_call(P, &c).await["display_name"], json!("batched"));
    // An explicit rename outranks the end's name.
    api.post("/call/update", &json!({"project_id": P, "call_id": a, "display_name": "renamed"}))
        .await
        .ok();
    assert_eq!(api.read_call(P, &a).await["display_name"], json!("renamed"));
    // An end without a name keeps the start's.
    let d = uid();
    api.call_start(started(P, &d, json!({"display_name": "kept"}))).await;
    api.call_end(ended(P, &d, json!({}))).await;
    assert_eq!(api.read_call(P, &d).await["display_name"], json!("kept"));
}

#[tokio::test]
async fn projects_info_and_resolve_url() {
    let server = Server::start();
    let key = server.create_entity_key("ent");
    let api = server.client(Some(&key));
    let r = api
        .post("/service/projects_info", &json!({"project_ids": ["ent/a", "other/b", "bad"]}))
        .await
        .ok();
    assert_eq!(r, json!([{"external_project_id": "ent/a", "internal_project_id": "ent/a"}]));
    let r = api.post("/files/resolve_url", &json!({"project_id": "ent/a", "uris": []})).await.ok();
    assert_eq!(r["download_urls"], json!([]));
    let reason = api
        .post("/files/resolve_url", &json!({"project_id": "ent/a", "uris": ["gs://b/x"]}))
        .await
        .err(400);
    assert!(reason.contains("/file/content"), "{reason}");
    api.post("/files/resolve_url", &json!({"project_id": "other/a", "uris": []})).await.err(403);
}

#[tokio::test]
async fn project_stats_counts_each_kind_of_content() {
    const Q: &str = "ent/sizes";
    let server = Server::start();
    let key = server.create_entity_key("ent");
    let api = server.client(Some(&key));
    let stats = |flags: Value| {
        let mut body = json!({"project_id": Q});
        body.as_object_mut().unwrap().extend(flags.as_object().cloned().unwrap_or_default());
        body
    };
    let zero = json!({"trace_storage_size_bytes": 0, "objects_storage_size_bytes": 0,
                      "tables_storage_size_bytes": 0, "files_storage_size_bytes": 0});
    assert_eq!(api.post("/project/stats", &stats(json!({}))).await.ok(), zero);

    // About 2,000 bytes of each kind (the multi-byte `é` counts two).
    let text = "é".repeat(1000);
    let id = uid();
    api.complete_calls(Q, vec![complete(Q, &id, json!({"inputs": {"q": text}}))]).await;
    let obj = json!({"obj": {"project_id": Q, "object_id": "o", "val": {"v": text}}});
    api.post("/obj/create", &obj).await.ok();
    let rows: Vec<Value> = (0..4).map(|i| json!({"i": i, "v": "x".repeat(500)})).collect();
    api.post("/table/create", &json!({"table": {"project_id": Q, "rows": rows}})).await.ok();
    api.file_create(Q, "f.bin", &[7u8; 2000], None).await.ok();
    server.wait_visible().await;

    let all = api.post("/project/stats", &stats(json!({}))).await.ok();
    let size = |k: &str| all[k].as_u64().unwrap_or_else(|| panic!("{k} in {all}"));
    assert!((2000..3000).contains(&size("trace_storage_size_bytes")), "{all}");
    assert!((2000..2100).contains(&size("objects_storage_size_bytes")), "{all}");
    assert!((2000..2200).contains(&size("tables_storage_size_bytes")), "{all}");
    assert_eq!(size("files_storage_size_bytes"), 2000, "{all}");

    // A size not asked for reads 0; the others are unchanged.
    let some = api
        .post(
            "/project/stats",
            &stats(
                json!({"include_trace_storage_size": false, "include_file_storage_size": false}),
            ),
        )
        .await
        .ok();
    assert_eq!(some["trace_storage_size_bytes"], 0);
    assert_eq!(some["files_storage_size_bytes"], 0);
    assert_eq!(some["objects_storage_size_bytes"], all["objects_storage_size_bytes"]);

    // Deleted calls store nothing any more.
    api.post("/calls/delete", &json!({"project_id": Q, "call_ids": [id]})).await.ok();
    server.wait_visible().await;
    let after = api.post("/project/stats", &stats(json!({}))).await.ok();
    assert_eq!(after["trace_storage_size_bytes"], 0, "{after}");
    assert_eq!(after["tables_storage_size_bytes"], all["tables_storage_size_bytes"]);

    api.post("/project/stats", &json!({"project_id": "other/p"})).await.err(403);
}

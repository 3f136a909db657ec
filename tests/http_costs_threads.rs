//! Costs and threads over HTTP (docs/api/calls.md#call-object, docs/api/costs.md,
//! docs/api/threads.md): prices created, queried, purged and applied to calls'
//! `summary.weave.costs`; threads aggregated from turn calls with filters, sorting and paging;
//! tenancy and the 4xx answers for bad input. Every write is read back.

mod common;

use common::{Api, Server, complete, t};
use serde_json::{Value, json};

const P: &str = "ent/costs";

async fn create_costs(api: &Api, project: &str, costs: Value) -> Vec<(String, String)> {
    let r = api.post("/cost/create", &json!({"project_id": project, "costs": costs})).await.ok();
    serde_json::from_value(r["ids"].clone()).unwrap_or_else(|e| panic!("ids {r}: {e}"))
}

async fn query_costs(api: &Api, body: Value) -> Vec<Value> {
    let r = api.post("/cost/query", &body).await.ok();
    r["results"].as_array().unwrap_or_else(|| panic!("no results: {r}")).clone()
}

fn all() -> Value {
    json!({"$expr": {"$eq": [{"$literal": "1"}, {"$literal": "1"}]}})
}

fn by_llm(ids: &[&str]) -> Value {
    let lits: Vec<Value> = ids.iter().map(|i| json!({"$literal": i})).collect();
    json!({"$expr": {"$in": [{"$getField": "llm_id"}, lits]}})
}

#[tokio::test]
async fn costs_create_query_purge() {
    let server = Server::start();
    let api = server.admin();
    let ids = create_costs(
        &api,
        P,
        json!({
            "model-a": {"prompt_token_cost": 0.01, "completion_token_cost": 0.02,
                        "effective_date": "2024-01-01T00:00:00Z", "provider_id": "acme",
                        "cache_read_input_token_cost": 0.001},
            "model-b": {"prompt_token_cost": 1.0, "completion_token_cost": 2.0,
                        "prompt_token_cost_unit": null, "effective_date": null},
        }),
    )
    .await;
    assert_eq!(ids.len(), 2);
    let a_id = ids.iter().find(|(l, _)| l == "model-a").unwrap().1.clone();
    let b_id = ids.iter().find(|(l, _)| l == "model-b").unwrap().1.clone();
    assert_ne!(a_id, b_id);

    // Read back, as the SDK queries (match-all, and $in llm_id).
    let rows =
        query_costs(&api, json!({"project_id": P, "query": all(), "limit": 100, "offset": 0}))
            .await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let a = query_costs(&api, json!({"project_id": P, "query": by_llm(&["model-a"])})).await;
    assert_eq!(a.len(), 1);
    let a = &a[0];
    assert_eq!(a["id"], json!(a_id));
    assert_eq!(a["provider_id"], json!("acme"));
    assert_eq!(a["prompt_token_cost"], json!(0.01));
    assert_eq!(a["completion_token_cost"], json!(0.02));
    assert_eq!(a["cache_read_input_token_cost"], json!(0.001));
    assert_eq!(a["cache_creation_input_token_cost"], json!(0.0));
    assert_eq!(a["prompt_token_cost_unit"], json!("USD"));
    assert_eq!(a["effective_date"], json!("2024-01-01T00:00:00.000000Z"));
    assert_eq!(a["pricing_level"], json!("project"));
    let b = query_costs(&api, json!({"project_id": P, "query": by_llm(&["model-b"])})).await;
    assert_eq!(b[0]["provider_id"], json!("default"));
    assert_eq!(b[0]["prompt_token_cost_unit"], json!("USD"));
    assert!(b[0]["effective_date"].as_str().unwrap() > "2025", "defaults to now: {}", b[0]);

    // Cost id lookup, fields, sorting, paging.
    let one = json!({"$expr": {"$eq": [{"$getField": "id"}, {"$literal": b_id}]}});
    let got =
        query_costs(&api, json!({"project_id": P, "query": one, "fields": ["id", "llm_id"]})).await;
    assert_eq!(got, [json!({"id": b_id, "llm_id": "model-b"})]);
    let sorted = query_costs(
        &api,
        json!({"project_id": P, "sort_by": [{"field": "prompt_token_cost", "direction": "desc"}],
               "limit": 1, "offset": 1}),
    )
    .await;
    assert_eq!(sorted.len(), 1);
    assert_eq!(sorted[0]["llm_id"], json!("model-a"));

    // Another project sees nothing, and cannot purge this project's prices.
    let other = "ent/other";
    assert!(query_costs(&api, json!({"project_id": other, "query": all()})).await.is_empty());
    let purge_a = json!({"$expr": {"$in": [{"$getField": "id"}, [{"$literal": a_id}]]}});
    api.post("/cost/purge", &json!({"project_id": other, "query": purge_a.clone()})).await.ok();
    assert_eq!(query_costs(&api, json!({"project_id": P})).await.len(), 2);

    // Purge by $in, then by $or of $eq; purging again or an unknown id is a no-op.
    assert_eq!(
        api.post("/cost/purge", &json!({"project_id": P, "query": purge_a.clone()})).await.ok(),
        json!({})
    );
    let left = query_costs(&api, json!({"project_id": P, "query": all()})).await;
    assert_eq!(left.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(), [json!(b_id)]);
    api.post("/cost/purge", &json!({"project_id": P, "query": purge_a.clone()})).await.ok();
    let purge_b = json!({"$expr": {"$or": [
        {"$eq": [{"$getField": "id"}, {"$literal": b_id}]},
        {"$eq": [{"$getField": "id"}, {"$literal": "no-such-id"}]}]}});
    api.post("/cost/purge", &json!({"project_id": P, "query": purge_b.clone()})).await.ok();
    assert!(query_costs(&api, json!({"project_id": P, "query": all()})).await.is_empty());

    // Bad input: 400 with a reason; a foreign entity's key: 403.
    for (path, body) in [
        ("/cost/create", json!({"project_id": P, "costs": {"m": {"prompt_token_cost": 1}}})),
        (
            "/cost/create",
            json!({"project_id": P, "costs": {"m": {"prompt_token_cost": 1,
                   "completion_token_cost": 1, "effective_date": "yesterday"}}}),
        ),
        (
            "/cost/create",
            json!({"project_id": P, "costs": {"m": {"prompt_token_cost": -1,
                   "completion_token_cost": 1}}}),
        ),
        ("/cost/create", json!({"project_id": "no-slash", "costs": {}})),
        ("/cost/query", json!({"project_id": P, "sort_by": [{"field": "nope"}]})),
        ("/cost/query", json!({"project_id": P, "fields": ["nope"]})),
        (
            "/cost/query",
            json!({"project_id": P, "query": {"$expr": {"$eq": [{"$getField": "bogus"},
                   {"$literal": "x"}]}}}),
        ),
        (
            "/cost/purge",
            json!({"project_id": P, "query": {"$expr": {"$eq": [{"$getField": "llm_id"},
                   {"$literal": "model-a"}]}}}),
        ),
        ("/cost/purge", json!({"project_id": P, "query": all()})),
    ] {
        api.post(path, &body).await.err(400);
    }
    let key = server.create_entity_key("someone-else");
    let stranger = server.client(Some(&key));
    stranger.post("/cost/query", &json!({"project_id": P})).await.err(403);
    stranger
        .post(
            "/cost/create",
            &json!({"project_id": P, "costs": {"m": {"prompt_token_cost": 1,
              "completion_token_cost": 1}}}),
        )
        .await
        .err(403);
    stranger
        .post("/cost/purge", &json!({"project_id": P, "query": purge_b.clone()}))
        .await
        .err(403);
}

fn usage_call(id: &str, started: &str, usage: Value) -> Value {
    complete(
        P,
        id,
        json!({"started_at": started, "ended_at": started, "summary": {"usage": usage}}),
    )
}

#[tokio::test]
async fn include_costs_derives_summary_costs() {
    let server = Server::start();
    let api = server.admin();
    create_costs(
        &api,
        P,
        json!({"my-model": {"prompt_token_cost": 0.5, "completion_token_cost": 1.0,
                            "effective_date": "2026-01-01T00:00:00Z",
                            "cache_read_input_token_cost": 0.05,
                            "cache_creation_input_token_cost": 0.625}}),
    )
    .await;
    create_costs(
        &api,
        P,
        json!({"my-model": {"prompt_token_cost": 5.0, "completion_token_cost": 10.0,
                            "effective_date": "2026-03-01T12:00:30Z"}}),
    )
    .await;
    api.complete_calls(
        P,
        vec![
            // Project price of 2026-01-01 (the newer one starts after this call).
            usage_call(
                "c-old",
                &t(0.0),
                json!({"my-model": {"prompt_tokens": 10, "completion_tokens": 4, "requests": 1,
                                    "total_tokens": 14}}),
            ),
            // The newer project price; Anthropic-style keys with cache tokens.
            usage_call(
                "c-new",
                &t(60.0),
                json!({"my-model": {"input_tokens": 10, "output_tokens": 4,
                                    "cache_read_input_tokens": 100,
                                    "cache_creation_input_tokens": 8}}),
            ),
            // The built-in price table, and a model nobody prices.
            usage_call(
                "c-default",
                &t(1.0),
                json!({"gpt-4o-mini": {"prompt_tokens": 1000000, "completion_tokens": 1000000},
                       "unpriced-model": {"prompt_tokens": 5}}),
            ),
            complete(P, "c-plain", json!({"started_at": t(2.0)})),
        ],
    )
    .await;

    let rows = api.stream(&json!({"project_id": P, "include_costs": true})).await;
    let by_id = |id: &str| rows.iter().find(|r| r["id"] == json!(id)).unwrap().clone();
    let approx = |v: &Value, want: f64| {
        let got = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
        assert!((got - want).abs() < 1e-9 * want.abs().max(1.0), "{got} != {want}");
    };
    let old = &by_id("c-old")["summary"]["weave"]["costs"]["my-model"];
    approx(&old["prompt_tokens_total_cost"], 5.0);
    approx(&old["completion_tokens_total_cost"], 4.0);
    assert_eq!(old["prompt_tokens"], json!(10));
    assert_eq!(old["completion_tokens"], json!(4));
    assert_eq!(old["requests"], json!(1));
    assert_eq!(old["total_tokens"], json!(14));
    assert_eq!(old["effective_date"], json!("2026-01-01T00:00:00.000000Z"));
    assert_eq!(old["pricing_level"], json!("project"));
    assert_eq!(old["pricing_level_id"], json!(P));
    assert_eq!(old["prompt_token_cost_unit"], json!("USD"));
    let new = &by_id("c-new")["summary"]["weave"]["costs"]["my-model"];
    // 10 × 5 + 100 × 0 (the newer price has no cache-read price) + 8 × 0.
    approx(&new["prompt_tokens_total_cost"], 50.0);
    approx(&new["completion_tokens_total_cost"], 40.0);
    assert_eq!(new["cache_read_input_tokens"], json!(100));
    let default = &by_id("c-default")["summary"]["weave"]["costs"];
    assert!(default.get("unpriced-model").is_none(), "{default}");
    let mini = &default["gpt-4o-mini"];
    assert_eq!(mini["pricing_level"], json!("default"));
    assert_eq!(mini["provider_id"], json!("openai"));
    approx(&mini["prompt_tokens_total_cost"], 0.15);
    approx(&mini["completion_tokens_total_cost"], 0.6);
    assert!(by_id("c-plain")["summary"]["weave"].get("costs").is_none());
    // The user's usage is kept, and nothing is derived without include_costs.
    assert_eq!(by_id("c-old")["summary"]["usage"]["my-model"]["prompt_tokens"], json!(10));
    let plain = api.stream(&json!({"project_id": P, "call_ids": null})).await;
    assert!(plain.iter().all(|r| r["summary"]["weave"].get("costs").is_none()));

    // Purging the older price: the call before the newer one has no project price any more.
    let old_price = query_costs(
        &api,
        json!({"project_id": P, "sort_by": [{"field": "effective_date", "direction": "asc"}]}),
    )
    .await;
    let old_id = old_price[0]["id"].clone();
    let purge = json!({"$expr": {"$eq": [{"$getField": "id"}, {"$literal": old_id}]}});
    api.post("/cost/purge", &json!({"project_id": P, "query": purge})).await.ok();
    let rows = api
        .stream(&json!({"project_id": P, "include_costs": true,
                        "filter": {"call_ids": ["c-old", "c-new"]}}))
        .await;
    let old = rows.iter().find(|r| r["id"] == json!("c-old")).unwrap();
    assert!(old["summary"]["weave"].get("costs").is_none(), "{old}");
    let new = rows.iter().find(|r| r["id"] == json!("c-new")).unwrap();
    approx(&new["summary"]["weave"]["costs"]["my-model"]["prompt_tokens_total_cost"], 50.0);
}

/// A turn call of `thread` started at `t(start)` lasting `ms`.
fn turn(project: &str, thread: &str, id: &str, start: f64, ms: u32) -> Value {
    complete(
        project,
        id,
        json!({"thread_id": thread, "turn_id": id, "started_at": t(start),
               "ended_at": t(start + f64::from(ms) / 1000.0)}),
    )
}

async fn threads(api: &Api, body: Value) -> Vec<Value> {
    api.post("/threads/stream_query", &body).await.jsonl()
}

fn thread_ids(rows: &[Value]) -> Vec<&str> {
    rows.iter().map(|r| r["thread_id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn threads_aggregate_turn_calls() {
    let server = Server::start();
    let api = server.admin();
    const TP: &str = "ent/threads";
    api.complete_calls(
        TP,
        vec![
            turn(TP, "th-a", "a1", 10.0, 100),
            turn(TP, "th-a", "a2", 20.0, 300),
            turn(TP, "th-a", "a3", 30.0, 200),
            // A child of a turn (turn_id points at its turn): not a turn itself.
            complete(
                TP,
                "a1-child",
                json!({"thread_id": "th-a", "turn_id": "a1", "parent_id": "a1",
                       "started_at": t(10.01), "ended_at": t(50.0)}),
            ),
            turn(TP, "th-b", "b1", 5.0, 1000),
            // No thread: ignored; an empty thread id: ignored.
            complete(TP, "loner", json!({"turn_id": "loner", "started_at": t(1.0)})),
            turn(TP, "", "empty", 1.0, 10),
            turn(TP, "th-del", "d1", 2.0, 10),
        ],
    )
    .await;
    api.call_start(merge_turn(TP, "th-c", "c1", 40.0)).await;
    // Another project's thread of the same name is never counted here.
    api.complete_calls("ent/elsewhere", vec![turn("ent/elsewhere", "th-a", "x1", 0.0, 5)]).await;
    api.post("/calls/delete", &json!({"project_id": TP, "call_ids": ["d1"]})).await.ok();
    server.wait_visible().await;

    let rows = threads(&api, json!({"project_id": TP})).await;
    // Default order: last_updated desc (a running turn counts by its start).
    assert_eq!(thread_ids(&rows), ["th-c", "th-a", "th-b"], "{rows:?}");
    let a = &rows[1];
    assert_eq!(a["turn_count"], json!(3));
    assert_eq!(a["start_time"], json!(t(10.0)));
    assert_eq!(a["last_updated"], json!(t(30.2)));
    assert_eq!(a["first_turn_id"], json!("a1"));
    assert_eq!(a["last_turn_id"], json!("a3"));
    assert_eq!(a["p50_turn_duration_ms"], json!(200.0));
    let p99 = a["p99_turn_duration_ms"].as_f64().unwrap();
    assert!((p99 - 298.0).abs() < 1e-6, "{p99}");
    let c = &rows[0];
    assert_eq!(c["turn_count"], json!(1));
    assert_eq!(c["p50_turn_duration_ms"], Value::Null);
    assert_eq!(c["last_turn_id"], json!("c1"));
    assert_eq!(rows[2]["p99_turn_duration_ms"], json!(1000.0));

    // Sorting (NULL percentiles last both ways), paging, filters.
    let sort = |field: &str, dir: &str| json!([{"field": field, "direction": dir}]);
    let q = |extra: Value| {
        let mut body = json!({"project_id": TP});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (q(json!({"sort_by": sort("thread_id", "asc")})), vec!["th-a", "th-b", "th-c"]),
        (q(json!({"sort_by": sort("turn_count", "desc")})), vec!["th-a", "th-b", "th-c"]),
        (q(json!({"sort_by": sort("start_time", "asc")})), vec!["th-b", "th-a", "th-c"]),
        (q(json!({"sort_by": sort("last_updated", "asc")})), vec!["th-b", "th-a", "th-c"]),
        (q(json!({"sort_by": sort("p50_turn_duration_ms", "desc")})), vec!["th-b", "th-a", "th-c"]),
        (q(json!({"sort_by": sort("p99_turn_duration_ms", "asc")})), vec!["th-a", "th-b", "th-c"]),
        (q(json!({"sort_by": sort("thread_id", "asc"), "limit": 1, "offset": 1})), vec!["th-b"]),
        (q(json!({"sort_by": sort("thread_id", "asc"), "offset": 2})), vec!["th-c"]),
        (q(json!({"filter": {"thread_ids": ["th-b", "nope"]}})), vec!["th-b"]),
        (q(json!({"filter": {"thread_ids": []}})), vec![]),
        (
            q(json!({"filter": {"after_datetime": t(6.0)}, "sort_by": sort("thread_id", "asc")})),
            vec!["th-a", "th-c"],
        ),
        (
            q(json!({"filter": {"before_datetime": t(31.0), "after_datetime": null},
                     "sort_by": sort("thread_id", "asc")})),
            vec!["th-a", "th-b"],
        ),
    ];
    for (body, want) in cases {
        assert_eq!(thread_ids(&threads(&api, body.clone()).await), want, "{body}");
    }

    // The JSONL content type follows the client's Accept header.
    let r = api
        .post_headers(
            "/threads/stream_query",
            &[("accept", "application/x-ndjson"), ("content-type", "application/json")],
            json!({"project_id": TP}).to_string(),
        )
        .await;
    assert_eq!(r.content_type, "application/x-ndjson");

    // Bad input: 400; a foreign key: 403.
    for body in [
        q(json!({"sort_by": sort("op_name", "asc")})),
        q(json!({"sort_by": [{"field": "turn_count", "direction": "sideways"}]})),
        q(json!({"filter": {"after_datetime": "not a date"}})),
        q(json!({"limit": -1})),
        json!({"project_id": "no-slash"}),
    ] {
        api.post("/threads/stream_query", &body).await.err(400);
    }
    let key = server.create_entity_key("someone-else");
    server
        .client(Some(&key))
        .post("/threads/stream_query", &json!({"project_id": TP}))
        .await
        .err(403);
}

/// A started (still running) turn call.
fn merge_turn(project: &str, thread: &str, id: &str, start: f64) -> Value {
    common::started(
        project,
        id,
        json!({"thread_id": thread, "turn_id": id, "started_at": t(start)}),
    )
}

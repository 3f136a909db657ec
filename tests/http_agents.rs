//! The agents API over HTTP (docs/api/agents.md): bounds and bad input answer 400 with a reason
//! (never a 500), keys see only their own entity's agents, and only GenAI spans are agent
//! spans. The SDK-driven semantics are in tests/python/test_sdk_agents.py.

mod common;

use common::{Api, Server};
use serde_json::{Value, json};

const P: &str = "ent/agents";

/// One `invoke_agent` span of `agent` as OTLP/JSON, with a plain span beside it.
fn spans(agent: &str, trace: &str) -> Vec<u8> {
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": trace, "spanId": "00000000000000a1", "name": format!("invoke_agent {agent}"),
         "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225601000000000",
         "attributes": [attr("gen_ai.operation.name", "invoke_agent"),
                        attr("gen_ai.agent.name", agent),
                        attr("gen_ai.conversation.id", "c1")]},
        {"traceId": trace, "spanId": "00000000000000a2", "name": "plain",
         "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225601000000000",
         "attributes": [attr("k", "v")]}
    ]}]}]})
    .to_string()
    .into_bytes()
}

async fn seed(server: &Server, api: &Api, project: &str, agent: &str, trace: &str) {
    let headers = [("content-type", "application/json"), ("project_id", project)];
    assert_eq!(
        api.post_headers("/otel/v1/traces", &headers, spans(agent, trace)).await.status,
        200
    );
    server.wait_visible().await;
}

fn names(r: &Value) -> Vec<String> {
    r["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent_name"].as_str().unwrap().into())
        .collect()
}

const ROUTES: &[(&str, &str)] = &[
    ("/agents/query", "{}"),
    ("/agents/agent-versions/query", r#"{"agent_name": "a"}"#),
    ("/agents/spans/query", "{}"),
    (
        "/agents/spans/stats",
        r#"{"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z",
        "metrics": [{"alias": "n", "value": {"key": "input_tokens"}, "value_type": "number"}]}"#,
    ),
    ("/agents/spans/custom-attrs/schema", "{}"),
    ("/agents/search", "{}"),
    ("/agents/traces/chat", r#"{"trace_id": "t"}"#),
    ("/agents/conversations/chat", r#"{"conversation_id": "c1"}"#),
    ("/agents/conversations/spans", r#"{"conversation_ids": ["c1"]}"#),
];

fn body(project: &str, extra: &str) -> Value {
    let mut b: Value = serde_json::from_str(extra).unwrap();
    b["project_id"] = project.into();
    b
}

#[tokio::test]
async fn keys_see_only_their_own_agents() {
    let server = Server::start();
    let admin = server.admin();
    seed(&server, &admin, P, "mine", "0000000000000000000000000000000a").await;
    let key = server.create_entity_key("someone-else");
    let stranger = server.client(Some(&key));
    let theirs = "someone-else/agents";
    seed(&server, &stranger, theirs, "theirs", "0000000000000000000000000000000b").await;

    let r = admin.post("/agents/query", &json!({"project_id": P})).await.ok();
    assert_eq!((names(&r), r["total_count"].clone()), (vec!["mine".to_owned()], json!(1)));
    let r = stranger.post("/agents/query", &json!({"project_id": theirs})).await.ok();
    assert_eq!(names(&r), vec!["theirs".to_owned()]);
    // The plain span is no agent span.
    let r = admin.post("/agents/spans/query", &json!({"project_id": P})).await.ok();
    assert_eq!(r["total_count"], 1, "{r}");
    assert_eq!(r["spans"][0]["span_id"], "00000000000000a1");

    for (path, extra) in ROUTES {
        admin.post(path, &body(P, extra)).await.ok();
        let reason = stranger.post(path, &body(P, extra)).await.err(403);
        assert!(!reason.is_empty(), "{path}");
    }
    for (path, extra) in ROUTES {
        server.client(None).post(path, &body(P, extra)).await.err(401);
    }
}

#[tokio::test]
async fn bad_input_is_a_400_with_a_reason() {
    let server = Server::start();
    let api = server.admin();
    seed(&server, &api, P, "a", "0000000000000000000000000000000c").await;
    let long = "x".repeat(1025);
    let ids: Vec<String> = (0..101).map(|i| i.to_string()).collect();
    let eq = |field: &str, lit: Value| json!({"$expr": {"$eq": [{"$getField": field}, {"$literal": lit}]}});
    let cases = [
        ("/agents/query", json!({"limit": 10_001})),
        ("/agents/query", json!({"offset": -1})),
        ("/agents/query", json!({"sort_by": [{"field": "nope"}]})),
        ("/agents/query", json!({"sort_by": [{"field": "span_count", "direction": "up"}]})),
        ("/agents/query", json!({"filters": {"agent_name": long}})),
        ("/agents/agent-versions/query", json!({"agent_name": long})),
        ("/agents/spans/query", json!({"query": eq("nope", json!("x"))})),
        // Typed: a token count compares with numbers only.
        ("/agents/spans/query", json!({"query": eq("input_tokens", json!("x"))})),
        ("/agents/spans/query", json!({"group_by": [{"key": "nope"}]})),
        ("/agents/spans/query", json!({"group_by": [{"key": "agent_name", "alias": "no spaces"}]})),
        ("/agents/spans/query", json!({"measures": [{"alias": "n", "aggregation": "count"}]})),
        (
            "/agents/spans/query",
            json!({"group_by": [{"key": "agent_name"}],
            "measures": [{"alias": "n", "aggregation": "sum",
                          "value": {"key": "agent_name"}}]}),
        ),
        (
            "/agents/spans/query",
            json!({"group_by": [{"key": "agent_name"}],
            "include_details": true}),
        ),
        ("/agents/spans/query", json!({"signal_filters": {"tags": ["x"]}})),
        (
            "/agents/spans/query",
            json!({"insight_filters": [{"field": "intent_category",
            "values": ["x"]}]}),
        ),
        (
            "/agents/spans/query",
            json!({"group_by": (0..33).map(|_| json!({"key": "agent_name"}))
            .collect::<Vec<_>>()}),
        ),
        (
            "/agents/spans/stats",
            json!({"start": "2026-01-01T00:00:00Z",
            "end": "2026-03-01T00:00:00Z", "metrics": [{"alias": "n",
            "value": {"key": "input_tokens"}, "value_type": "number"}]}),
        ),
        (
            "/agents/spans/stats",
            json!({"start": "2026-01-01T00:00:00Z",
            "end": "2026-01-02T00:00:00Z", "metrics": []}),
        ),
        (
            "/agents/spans/stats",
            json!({"start": "2026-01-01T00:00:00Z",
            "end": "2026-01-02T00:00:00Z", "granularity": 1, "metrics": [{"alias": "n",
            "value": {"key": "input_tokens"}, "value_type": "number"}]}),
        ),
        (
            "/agents/spans/stats",
            json!({"start": "2026-01-01T00:00:00Z", "timezone": "Europe/Paris",
            "end": "2026-01-02T00:00:00Z", "metrics": [{"alias": "n",
            "value": {"key": "input_tokens"}, "value_type": "number"}]}),
        ),
        (
            "/agents/spans/stats",
            json!({"start": "2026-01-01T00:00:00Z",
            "end": "2026-01-02T00:00:00Z", "metrics": [{"alias": "n",
            "value": {"key": "agent_name"}, "value_type": "string", "aggregations": ["sum"]}]}),
        ),
        ("/agents/spans/stats", json!({"start": "not a time", "metrics": []})),
        ("/agents/spans/custom-attrs/schema", json!({"limit": 2001})),
        ("/agents/spans/custom-attrs/schema", json!({"limit": 0})),
        ("/agents/search", json!({"query": long})),
        ("/agents/search", json!({"limit": 1001})),
        ("/agents/search", json!({"roles": ["robot"]})),
        ("/agents/traces/chat", json!({"trace_id": ""})),
        ("/agents/conversations/chat", json!({"conversation_id": "c1", "limit": 51})),
        ("/agents/conversations/spans", json!({"conversation_ids": ids})),
    ];
    for (path, mut b) in cases {
        b["project_id"] = P.into();
        let r = api.post(path, &b).await;
        assert!(
            r.status == 400 || r.status == 422,
            "{path} {b}: expected a 4xx, got {} {}",
            r.status,
            r.text()
        );
        let reason = r.json()["reason"].as_str().unwrap_or_default().to_owned();
        assert!(!reason.is_empty(), "{path} {b}: {}", r.text());
    }
}

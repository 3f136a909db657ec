//! Service endpoints, authentication and entity scoping, GraphQL, and robustness against bad
//! requests (docs/api/README.md#transport-and-encoding, docs/api/README.md#authentication,
//! docs/api/README.md#errors-and-status-codes, docs/api/service.md, docs/api/service.md#graphql).

mod common;

use base64::Engine;
use common::{Api, Server, basic, complete, started};
use serde_json::{Value, json};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn health_needs_no_auth() {
    let server = Server::start();
    for api in [server.client(None), server.client(Some("wrong-key")), server.admin()] {
        let r = api.get("/health").await;
        assert_eq!(r.ok(), json!({"status": "ok"}));
        assert!(r.content_type.starts_with("application/json"), "{}", r.content_type);
    }
}

#[tokio::test]
async fn service_info_endpoints() {
    let server = Server::start();
    let api = server.admin();
    let version = api.get("/version").await.ok();
    assert!(version.is_string() || version.is_object(), "{version}");

    let info = api.get("/server_info").await.ok();
    let min = info["min_required_weave_python_version"].as_str().expect("min version string");
    let parts: Vec<u64> = min.split('.').map(|p| p.parse().expect("numeric PEP 440")).collect();
    assert!(parts.as_slice() <= [0, 54, 0].as_slice(), "{min} would disable weave 0.54.0");
    let tsv = info["trace_server_version"].as_str().expect("trace_server_version string");
    assert!(!tsv.is_empty() && tsv.chars().next().unwrap().is_ascii_digit(), "{tsv}");

    let geo = api.get("/geolocate").await.ok();
    assert_eq!(geo["ip"], "127.0.0.1", "{geo}");

    let anon = server.client(None);
    for path in ["/version", "/geolocate"] {
        anon.get(path).await.err(401);
    }
    // The Weave server answers /server_info without a key (docs/api/service.md#server-info); heddle
    // requires one everywhere but /health. Either way the answer must be well-formed.
    let r = anon.get("/server_info").await;
    if r.status == 200 {
        assert!(r.json()["min_required_weave_python_version"].is_string());
    } else {
        r.err(401);
    }
}

/// Requests covering every authenticated surface: (name, method+path, body).
fn surfaces(project: &str) -> Vec<(&'static str, &'static str, String, Value)> {
    let call = complete(project, "auth-call", json!({}));
    vec![
        ("version", "GET", "/version".into(), Value::Null),
        ("geolocate", "GET", "/geolocate".into(), Value::Null),
        ("stream_query", "POST", "/calls/stream_query".into(), json!({"project_id": project})),
        ("query_stats", "POST", "/calls/query_stats".into(), json!({"project_id": project})),
        ("call/read", "POST", "/call/read".into(), json!({"project_id": project, "id": "x"})),
        (
            "calls/complete",
            "POST",
            format!("/v2/{project}/calls/complete"),
            json!({"batch": [call]}),
        ),
        (
            "call/start",
            "POST",
            "/call/start".into(),
            json!({"start": started(project, "auth-start", json!({}))}),
        ),
        (
            "call/end",
            "POST",
            "/call/end".into(),
            json!({"end": {"project_id": project, "id": "auth-start",
                           "ended_at": "2026-03-01T12:00:01Z", "summary": {}}}),
        ),
        (
            "upsert_batch",
            "POST",
            "/call/upsert_batch".into(),
            json!({"batch": [{"mode": "start", "req": {"start": started(project, "auth-up", json!({}))}}]}),
        ),
        (
            "v2 call/start",
            "POST",
            format!("/v2/{project}/call/start"),
            json!({"start": started(project, "auth-v2", json!({}))}),
        ),
        (
            "call/update",
            "POST",
            "/call/update".into(),
            json!({"project_id": project, "call_id": "auth-call", "display_name": "n"}),
        ),
        (
            "calls/delete",
            "POST",
            "/calls/delete".into(),
            json!({"project_id": project, "call_ids": ["nothing"]}),
        ),
        (
            "obj/create",
            "POST",
            "/obj/create".into(),
            json!({"obj": {"project_id": project, "object_id": "o", "val": {"a": 1}}}),
        ),
        (
            "obj/read",
            "POST",
            "/obj/read".into(),
            json!({"project_id": project, "object_id": "o", "digest": "latest"}),
        ),
        (
            "file/content",
            "POST",
            "/file/content".into(),
            json!({"project_id": project, "digest": "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"}),
        ),
        (
            "graphql",
            "POST",
            "/graphql".into(),
            json!({"query": "query DefaultEntity { viewer { username } }", "variables": {}}),
        ),
    ]
}

async fn hit(api: &Api, method: &str, path: &str, body: &Value) -> common::Resp {
    if method == "GET" { api.get(path).await } else { api.post(path, body).await }
}

#[tokio::test]
async fn missing_or_bad_credentials_are_401() {
    let server = Server::start();
    let admin_key = server.admin_key.clone();
    let bad_headers = [
        None,
        Some(basic("wrong-key")),
        Some(format!("Bearer {admin_key}x")),
        Some("Basic !!!not-base64!!!".to_owned()),
        Some(format!("Basic {}", b64(&admin_key))), // no "api:" pair
        Some(format!("Basic {}", b64("api:"))),     // empty password
        Some("Bearer ".to_owned()),
        Some("Bearer".to_owned()),
        Some(format!("Digest {admin_key}")),
        Some(admin_key.clone()), // no scheme
        Some(format!("Basic {}", b64(&format!("api:{admin_key}"))).replace("Basic", "Basic  x")),
    ];
    for header in &bad_headers {
        let api = match header {
            None => server.client(None),
            Some(h) => server.client_with_auth(h),
        };
        for (name, method, path, body) in surfaces("ent/p") {
            let r = hit(&api, method, &path, &body).await;
            assert_eq!(r.status, 401, "{name} with {header:?}: {}", r.text());
            r.err(401);
        }
        let r = api.file_create("ent/p", "a.txt", b"hello", None).await;
        r.err(401);
    }
    // Nothing was written by the rejected requests.
    let admin = server.admin();
    assert_eq!(admin.count(&json!({"project_id": "ent/p"})).await, 0);
    let body = json!({"project_id": "ent/p", "object_id": "o", "digest": "latest"});
    admin.post("/obj/read", &body).await.err(404);
}

#[tokio::test]
async fn basic_and_bearer_both_work() {
    let server = Server::start();
    let key = server.admin_key.clone();
    let alice = server.create_entity_key("alice");
    for (name, header) in [
        ("basic admin", basic(&key)),
        ("bearer admin", format!("Bearer {key}")),
        ("lowercase scheme", format!("basic {}", b64(&format!("api:{key}")))),
        ("basic alice", basic(&alice)),
        ("bearer alice", format!("Bearer {alice}")),
    ] {
        let api = server.client_with_auth(&header);
        let project = if name.contains("alice") { "alice/p" } else { "ent/p" };
        let id = format!("c-{}", name.replace(' ', "-"));
        api.complete_calls(project, vec![complete(project, &id, json!({}))]).await;
        assert_eq!(api.read_call(project, &id).await["id"], json!(id), "{name}");
        assert!(api.get("/version").await.status == 200, "{name}");
    }
}

#[tokio::test]
async fn entity_keys_are_scoped_to_their_entity() {
    let server = Server::start();
    let alice_key = server.create_entity_key("alice");
    let alice = server.client(Some(&alice_key));
    let admin = server.admin();

    // Own entity: every surface works.
    alice.file_create("alice/proj", "obj.py", b"hello", None).await.ok();
    for (name, method, path, body) in surfaces("alice/proj") {
        let r = hit(&alice, method, &path, &body).await;
        assert!(
            r.status == 200 || (name == "obj/read" && r.status == 404),
            "{name}: {} {}",
            r.status,
            r.text()
        );
    }
    let d = alice.file_create("alice/proj", "obj.py", b"hello", None).await.ok();
    let digest = d["digest"].as_str().unwrap();
    let r =
        alice.post("/file/content", &json!({"project_id": "alice/proj", "digest": digest})).await;
    assert_eq!(r.body, b"hello");
    let call = alice.read_call("alice/proj", "auth-call").await;
    assert_eq!(call["display_name"], "n");
    let user = call["wb_user_id"].as_str().expect("wb_user_id filled").to_owned();
    assert_eq!(alice.read_call("alice/proj", "auth-start").await["wb_user_id"], json!(user));
    // The admin sees alice's data too.
    assert_eq!(admin.count(&json!({"project_id": "alice/proj"})).await, 4);

    // Other entity: 403 with a reason everywhere a project is named, nothing written.
    for (name, method, path, body) in surfaces("bob/proj") {
        if method == "GET" || name == "graphql" {
            continue;
        }
        let r = hit(&alice, method, &path, &body).await;
        assert_eq!(r.status, 403, "{name}: {}", r.text());
        r.err(403);
    }
    alice.file_create("bob/proj", "obj.py", b"bob", None).await.err(403);
    assert_eq!(admin.count(&json!({"project_id": "bob/proj"})).await, 0);
    let body = json!({"project_id": "bob/proj", "object_id": "o", "digest": "latest"});
    admin.post("/obj/read", &body).await.err(404);
    let bob_digest = "gbY32PzSxtpjWeaWMROhFw3nleS3JbhNHgtMYZ7FjOk"; // bytes_digest("bob")
    let body = json!({"project_id": "bob/proj", "digest": bob_digest});
    admin.post("/file/content", &body).await.err(404);

    // A batch that mixes projects is refused as a whole.
    let batch = json!({"batch": [
        {"mode": "start", "req": {"start": started("alice/proj", "mixed-a", json!({}))}},
        {"mode": "start", "req": {"start": started("bob/proj", "mixed-b", json!({}))}},
    ]});
    alice.post("/call/upsert_batch", &batch).await.err(403);
    let ids = json!({"project_id": "alice/proj", "filter": {"call_ids": ["mixed-a"]}});
    assert_eq!(admin.count(&ids).await, 0);
    // The v2 path names bob even though the items say alice: refused.
    let body = json!({"batch": [complete("alice/proj", "v2-mixed", json!({}))]});
    let r = alice.post("/v2/bob/proj/calls/complete", &body).await;
    assert!(r.status == 403 || r.status == 400, "{}", r.text());
    r.err(r.status);
    // Entity names are exact: "alic" and "alice2" are other entities.
    for project in ["alic/proj", "alice2/proj", "ALICE/proj"] {
        alice.post("/calls/stream_query", &json!({"project_id": project})).await.err(403);
    }
}

const PROJECT_QUERY: &str = "query Project($name: String!, $entityName: String!) {\n  \
    project(name: $name, entityName: $entityName) {\n    id\n    name\n    entity { id name }\n  }\n}";
const UPSERT_MUTATION: &str = "mutation UpsertModel($description: String, $entityName: String, \
    $id: String, $name: String, $framework: String, $access: String, $views: JSONString) {\n  \
    upsertModel(input: {description: $description, entityName: $entityName, id: $id, name: \
    $name, framework: $framework, access: $access, views: $views}) {\n    project { id name }\n    \
    model { id name entityName description }\n    inserted\n  }\n}";
const DEFAULT_ENTITY_QUERY: &str = "query DefaultEntity {\n  viewer {\n    username\n    defaultEntity {\n      name\n    }\n  }\n}";

async fn gql(api: &Api, query: &str, variables: Value) -> Value {
    let r = api.post("/graphql", &json!({"query": query, "variables": variables})).await;
    assert_eq!(r.status, 200, "GraphQL answers 200: {}", r.text());
    r.json()
}

#[tokio::test]
async fn graphql_operations_for_weave_init() {
    let server = Server::start();
    let admin = server.admin();
    let alice = server.client(Some(&server.create_entity_key("alice")));

    for (who, api, entity) in [("admin", &admin, "ent"), ("alice", &alice, "alice")] {
        let v = gql(api, PROJECT_QUERY, json!({"entityName": entity, "name": "my-proj"})).await;
        assert_eq!(v["data"]["project"]["name"], "my-proj", "{who}: {v}");
        assert!(v.get("errors").is_none_or(Value::is_null), "{who}: {v}");

        let vars = json!({"name": "new-proj", "entity": entity, "entityName": entity,
                          "description": null});
        let v = gql(api, UPSERT_MUTATION, vars).await;
        let model = &v["data"]["upsertModel"]["model"];
        assert_eq!(model["name"], "new-proj", "{who}: {v}");
        assert!(model.as_object().is_some_and(|m| m.contains_key("description")), "{who}: {v}");
        assert_eq!(model["description"], Value::Null, "{who}: {v}");

        let v = gql(api, DEFAULT_ENTITY_QUERY, Value::Null).await;
        let viewer = &v["data"]["viewer"];
        assert!(viewer["username"].as_str().is_some_and(|u| !u.is_empty()), "{who}: {v}");
        let default = viewer["defaultEntity"]["name"].as_str().expect("defaultEntity.name");
        assert!(!default.is_empty(), "{who}: {v}");
        if who == "alice" {
            assert_eq!(default, "alice", "an entity key's default entity is its entity");
        }
    }

    // operationName given explicitly selects the operation too.
    let body = json!({"query": PROJECT_QUERY, "operationName": "Project",
                      "variables": {"entityName": "alice", "name": "x"}});
    assert_eq!(alice.post("/graphql", &body).await.ok()["data"]["project"]["name"], "x");

    // Another entity: a GraphQL PERMISSION_ERROR, not a crash or an HTTP error.
    for (query, vars) in [
        (PROJECT_QUERY, json!({"entityName": "bob", "name": "p"})),
        (UPSERT_MUTATION, json!({"name": "p", "entity": "bob", "entityName": "bob"})),
    ] {
        let v = gql(&alice, query, vars).await;
        let errors = v["errors"].as_array().unwrap_or_else(|| panic!("no errors: {v}"));
        assert!(!errors.is_empty(), "{v}");
        assert_eq!(errors[0]["extensions"]["code"], "PERMISSION_ERROR", "{v}");
        assert!(errors[0]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(v["data"].is_null() || v["data"]["project"].is_null(), "{v}");
    }

    // Unknown or unnamed operations: GraphQL errors with status 200.
    for query in [
        "query SomethingElse { foo { bar } }",
        "{ viewer { id } }",
        "mutation DeleteEverything { x }",
        "",
    ] {
        let v = gql(&admin, query, json!({})).await;
        let errors = v["errors"].as_array().unwrap_or_else(|| panic!("{query:?}: {v}"));
        assert!(!errors.is_empty() && errors[0]["message"].is_string(), "{query:?}: {v}");
    }
    admin.post("/graphql", &json!({"variables": {}})).await.ok();
    admin.post_raw("/graphql", "{not json").await.err(400);
    server.client(None).post("/graphql", &json!({"query": PROJECT_QUERY})).await.err(401);
}

#[tokio::test]
async fn body_limit_answers_413() {
    let server = Server::start_with(&["--max-body-bytes", "1024"]);
    let api = server.admin();
    let big = "x".repeat(2000);
    let small = complete("ent/p", "small", json!({}));
    // Under the limit works.
    api.complete_calls("ent/p", vec![small]).await;

    let cases = [
        (
            "calls/complete",
            "/v2/ent/p/calls/complete".to_owned(),
            json!({"batch": [complete("ent/p", "big", json!({"inputs": {"x": big}}))]}),
        ),
        (
            "call/start",
            "/call/start".to_owned(),
            json!({"start": started("ent/p", "big2", json!({"inputs": {"x": big}}))}),
        ),
        (
            "obj/create",
            "/obj/create".to_owned(),
            json!({"obj": {"project_id": "ent/p", "object_id": "o", "val": big}}),
        ),
        (
            "stream_query",
            "/calls/stream_query".to_owned(),
            json!({"project_id": "ent/p", "filter": {"call_ids": [big]}}),
        ),
    ];
    for (name, path, body) in cases {
        let r = api.post(&path, &body).await;
        assert_eq!(r.status, 413, "{name}: {}", r.text());
        r.err(413);
    }
    let r = api.file_create("ent/p", "big.bin", big.as_bytes(), None).await;
    assert_eq!(r.status, 413, "file/create: {}", r.text());
    r.err(413);

    // A chunked body without Content-Length is limited too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
        Ok(br#"{"project_id": "ent/p", "filter": {"call_ids": [""#.to_vec()),
        Ok(big.as_bytes().to_vec()),
        Ok(br#""]}}"#.to_vec()),
    ];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let req = api
        .http
        .post(format!("{}/calls/stream_query", api.url))
        .header("authorization", api.auth.clone().unwrap())
        .header("content-type", "application/json")
        .body(body);
    let r = api.send(req).await;
    assert_eq!(r.status, 413, "chunked: {}", r.text());
    r.err(413);

    // Nothing big was stored; the server still serves.
    assert_eq!(api.get("/health").await.ok()["status"], "ok");
    let rows = api.stream(&json!({"project_id": "ent/p"})).await;
    assert_eq!(common::ids(&rows), ["small"]);
}

#[tokio::test]
async fn bad_requests_leave_the_server_healthy() {
    let server = Server::start();
    let api = server.admin();
    // Malformed JSON → 400 with a reason, on every JSON endpoint.
    let json_paths = [
        "/calls/stream_query",
        "/calls/query_stats",
        "/call/read",
        "/call/start",
        "/call/end",
        "/call/upsert_batch",
        "/call/update",
        "/calls/delete",
        "/v2/ent/p/calls/complete",
        "/v2/ent/p/call/start",
        "/v2/ent/p/call/end",
        "/obj/create",
        "/obj/read",
        "/file/content",
        "/graphql",
    ];
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut deep_query = json!({"$eq": [{"$literal": 1}, {"$literal": 1}]});
    for _ in 0..100 {
        deep_query = json!({ "$not": [deep_query] });
    }
    // (body, malformed JSON: 400 only; else well-formed but of the wrong shape: 400 or 422)
    let bodies: Vec<(Vec<u8>, bool)> = vec![
        (b"{".to_vec(), true),
        (b"".to_vec(), true),
        (b"{\"a\": 1,}".to_vec(), true),
        (vec![0xff, 0xfe, 0x00, 0x7b], true),
        (b"{\"project_id\": \"ent/p\"} trailing".to_vec(), true),
        (b"null".to_vec(), false),
        (b"[]".to_vec(), false),
        (b"\"str\"".to_vec(), false),
        (deep_array.into_bytes(), false),
    ];
    let mut failures = Vec::new();
    for path in json_paths {
        for (body, malformed) in &bodies {
            let r = api.post_raw(path, body.clone()).await;
            let reason = serde_json::from_slice::<Value>(&r.body)
                .ok()
                .and_then(|v| v["reason"].as_str().map(str::to_owned));
            let status_ok = r.status == 400 || (!malformed && r.status == 422);
            if !status_ok || reason.is_none() {
                let shown = String::from_utf8_lossy(&body[..body.len().min(20)]).into_owned();
                failures.push(format!("{path} {shown:?}: {} {}", r.status, r.text()));
            }
        }
    }
    // Query nesting beyond the parser's limit is a 400, not a stack overflow.
    let body = json!({"project_id": "ent/p", "query": {"$expr": deep_query}});
    let r = api.post("/calls/stream_query", &body).await;
    if r.status != 400 {
        failures.push(format!("deep query: {} {}", r.status, r.text()));
    }
    // Unknown endpoints: 404 with a JSON reason; wrong methods: a JSON error too. (`GET /` is
    // the web UI's project list, docs/ui.md.)
    for (method, path) in
        [("GET", "/nope"), ("POST", "/calls/nope"), ("POST", "/v2/ent/p/nope"), ("GET", "/a/b/c/d")]
    {
        let r = hit(&api, method, path, &json!({})).await;
        if r.status != 404
            || serde_json::from_slice::<Value>(&r.body)
                .ok()
                .and_then(|v| v["reason"].as_str().map(|_| ()))
                .is_none()
        {
            failures.push(format!("{method} {path}: {} {}", r.status, r.text()));
        }
    }
    let r = api.get("/calls/stream_query").await;
    if r.status != 405 || !r.content_type.starts_with("application/json") {
        failures.push(format!("GET stream_query: {} {}", r.status, r.text()));
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));

    // Still healthy: health, then a write and its read-back.
    assert_eq!(api.get("/health").await.ok(), json!({"status": "ok"}));
    api.complete_calls("ent/p", vec![complete("ent/p", "after", json!({"inputs": {"ok": true}}))])
        .await;
    assert_eq!(api.read_call("ent/p", "after").await["inputs"], json!({"ok": true}));
}

#[tokio::test]
async fn concurrent_writes_and_reads() {
    let server = Server::start();
    let api = std::sync::Arc::new(server.admin());
    let mut tasks = Vec::new();
    for i in 0..40 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("cc{i:02}");
            api.complete_calls("ent/p", vec![complete("ent/p", &id, json!({"inputs": {"i": i}}))])
                .await;
            let call = api.read_call("ent/p", &id).await;
            assert_eq!(call["inputs"]["i"], i);
            api.stream(&json!({"project_id": "ent/p", "limit": 5})).await.len()
        }));
    }
    for t in tasks {
        assert!(t.await.expect("task") <= 5);
    }
    assert_eq!(api.count(&json!({"project_id": "ent/p"})).await, 40);
}

/// A body far over the limit gets a 413 the client can read (the SDK splits a batch only when it
/// sees one, docs/api/README.md#errors-and-status-codes), repeatedly on one connection pool, and
/// the server stays healthy.
#[tokio::test]
async fn oversized_body_gets_a_readable_413_not_a_reset() {
    let server = Server::start_with(&["--max-body-bytes", "1024"]);
    let api = server.admin();
    let huge = "x".repeat(4 * 1024 * 1024);
    for _ in 0..3 {
        let body = json!({"batch": [complete("ent/p", "huge", json!({"inputs": {"x": huge}}))]});
        let r = api.post("/v2/ent/p/calls/complete", &body).await;
        assert_eq!(r.status, 413, "{}", r.text());
        assert!(r.err(413).contains("limit"));
    }
    assert_eq!(api.get("/health").await.ok()["status"], "ok");
}

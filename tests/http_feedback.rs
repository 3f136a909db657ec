//! Feedback over HTTP (docs/api/feedback.md, docs/api/feedback.md#batch-create-feedback,
//! docs/api/calls.md#call-object, docs/api/query.md): create, batch create with client ids, query
//! (filters, projection, sorting, paging, total_count), purge (ids only), replace,
//! `include_feedback` on calls, and `feedback.[<type>]...` fields in call queries. Every write is
//! read back; bad input gets its 4xx.

mod common;

use common::{Api, Server, complete, ids, uid};
use serde_json::{Value, json};

const P: &str = "ent/fb";

fn call_ref(project: &str, id: &str) -> String {
    format!("weave:///{project}/call/{id}")
}

fn item(project: &str, target: &str, ty: &str, payload: Value, over: Value) -> Value {
    common::merge(
        json!({"project_id": project, "weave_ref": target, "feedback_type": ty,
               "payload": payload, "id": null, "creator": null, "annotation_ref": null,
               "runnable_ref": null, "call_ref": null, "trigger_ref": null, "queue_id": null,
               "scorer_tags": [], "scorer_tag_reasons": {}, "scorer_tag_confidences": {},
               "scorer_ratings": {}, "scorer_rating_reasons": {}, "scorer_rating_confidences": {},
               "span_agent_name": "", "span_agent_version": "", "span_conversation_id": "",
               "span_trace_id": "", "scorer_trace_id": "", "span_status_code": "UNSET",
               "wb_user_id": null}),
        over,
    )
}

async fn query(api: &Api, body: Value) -> Value {
    api.post("/feedback/query", &common::merge(json!({"project_id": P}), body)).await.ok()
}

async fn by_ref(api: &Api, target: &str) -> Vec<Value> {
    let q = json!({"query": {"$expr": {"$eq": [{"$getField": "weave_ref"}, {"$literal": target}]}},
                   "sort_by": [{"field": "created_at", "direction": "asc"}], "fields": null});
    query(api, q).await["result"].as_array().unwrap().clone()
}

fn eq(field: &str, v: Value) -> Value {
    json!({"$eq": [{"$getField": field}, {"$literal": v}]})
}

#[tokio::test]
async fn create_batch_query_and_read_back() {
    let server = Server::start();
    let api = server.admin();
    let call = uid();
    let target = call_ref(P, &call);

    // /feedback/create: server id, created_at with an offset, the user, the payload.
    let r = api
        .post(
            "/feedback/create",
            &item(P, &target, "wandb.note.1", json!({"note": "hi"}), json!({})),
        )
        .await
        .ok();
    let note_id = r["id"].as_str().unwrap().to_owned();
    assert_eq!(note_id.len(), 36, "{r}");
    assert_eq!(r["payload"], json!({"note": "hi"}));
    assert_eq!(r["wb_user_id"], json!("admin"));
    assert!(r["created_at"].as_str().unwrap().ends_with('Z'), "{r}");

    // /feedback/batch/create keeps client ids; resending it changes nothing.
    let (a, b) = (uid(), uid());
    let batch = json!({"batch": [
        item(P, &target, "wandb.reaction.1", json!({"emoji": "👍"}), json!({"id": a, "creator": "me"})),
        item(P, &target, "custom", json!({"score": 0.5, "nested": {"k": [1, 2.0]}}),
             json!({"id": b, "scorer_tags": ["t"], "runnable_ref": "weave:///ent/fb/op/s:d"})),
    ]});
    let res = api.post("/feedback/batch/create", &batch).await.ok();
    let res = res["res"].as_array().unwrap().clone();
    assert_eq!(ids(&res), [a.clone(), b.clone()]);
    assert_eq!(res[0]["payload"], json!({"emoji": "👍"}));
    let again = api.post("/feedback/batch/create", &batch).await.ok();
    assert_eq!(again["res"][0]["created_at"], res[0]["created_at"], "a resend is a no-op");

    // Listing by ref (what call.feedback does): all three, oldest first, full rows.
    let rows = by_ref(&api, &target).await;
    assert_eq!(ids(&rows), [note_id.clone(), a.clone(), b.clone()]);
    let custom = &rows[2];
    for key in [
        "id",
        "project_id",
        "weave_ref",
        "feedback_type",
        "payload",
        "created_at",
        "wb_user_id",
        "creator",
        "annotation_ref",
        "runnable_ref",
        "call_ref",
        "trigger_ref",
        "queue_id",
        "scorer_tags",
        "scorer_ratings",
        "span_status_code",
    ] {
        assert!(custom.as_object().unwrap().contains_key(key), "{key} missing: {custom}");
    }
    assert_eq!(custom["project_id"], json!(P));
    assert_eq!(custom["payload"], json!({"score": 0.5, "nested": {"k": [1, 2.0]}}));
    assert_eq!(custom["scorer_tags"], json!(["t"]));
    assert_eq!(custom["runnable_ref"], json!("weave:///ent/fb/op/s:d"));
    assert_eq!(rows[1]["creator"], json!("me"));
    assert_eq!(rows[1]["span_status_code"], json!("UNSET"));

    // Payload paths (string semantics), $and with feedback_type, $in on id.
    let q = |e: Value| json!({"query": {"$expr": e}});
    let r = query(
        &api,
        q(json!({"$and": [eq("feedback_type", json!("wandb.reaction.1")),
                                          eq("payload.emoji", json!("👍"))]})),
    )
    .await;
    assert_eq!(ids(r["result"].as_array().unwrap()), [a.as_str()]);
    let r = query(&api, q(eq("payload.nested.k.1", json!("2.0")))).await;
    assert_eq!(ids(r["result"].as_array().unwrap()), [b.as_str()]);
    let gt = json!({"$gt": [{"$convert": {"input": {"$getField": "payload.score"}, "to": "double"}},
                            {"$literal": 0.25}]});
    assert_eq!(ids(query(&api, q(gt)).await["result"].as_array().unwrap()), [b.as_str()]);
    let r = query(
        &api,
        q(json!({"$in": [{"$getField": "id"}, [{"$literal": a}, {"$literal": note_id}]]})),
    )
    .await;
    assert_eq!(r["total_count"], json!(2));

    // Projection, including payload paths.
    let r = query(
        &api,
        json!({"fields": ["id", "payload.nested.k.0", "feedback_type"],
                               "query": {"$expr": eq("id", json!(b))}}),
    )
    .await;
    assert_eq!(r["result"], json!([{"id": b, "payload.nested.k.0": 1, "feedback_type": "custom"}]));

    // Sorting, paging, total_count (the count without paging).
    let r = query(
        &api,
        json!({"sort_by": [{"field": "feedback_type", "direction": "desc"}],
                               "limit": 2, "offset": 1}),
    )
    .await;
    // wandb.reaction.1 > wandb.note.1 > custom
    assert_eq!(ids(r["result"].as_array().unwrap()), [note_id.clone(), b.clone()]);
    assert_eq!(r["total_count"], json!(3));
    let r = query(&api, json!({"sort_by": [{"field": "payload.emoji", "direction": "asc"}]})).await;
    assert_eq!(r["result"][0]["id"], json!(a), "present values first");

    // Another project sees none of it.
    let other = api.post("/feedback/query", &json!({"project_id": "ent/other"})).await.ok();
    assert_eq!(other, json!({"result": [], "total_count": 0}));
}

#[tokio::test]
async fn purge_and_replace() {
    let server = Server::start();
    let api = server.admin();
    let target = call_ref(P, &uid());
    let mk = |id: &str| item(P, &target, "custom", json!({"v": id}), json!({"id": id}));
    let (a, b, c, d) = (uid(), uid(), uid(), uid());
    api.post("/feedback/batch/create", &json!({"batch": [mk(&a), mk(&b), mk(&c), mk(&d)]}))
        .await
        .ok();

    let purge = |e: Value| json!({"project_id": P, "query": {"$expr": e}});
    api.post("/feedback/purge", &purge(eq("id", json!(a)))).await.ok();
    api.post("/feedback/purge", &purge(json!({"$or": [eq("id", json!(b))]}))).await.ok();
    api.post("/feedback/purge", &purge(json!({"$in": [{"$getField": "id"}, [{"$literal": c}]]})))
        .await
        .ok();
    assert_eq!(ids(&by_ref(&api, &target).await), [d.as_str()]);

    // Anything but ids is refused, and deletes nothing.
    for bad in [
        eq("weave_ref", json!(target)),
        json!({"$eq": [{"$literal": "1"}, {"$literal": "1"}]}),
        json!({"$and": [eq("id", json!(d))]}),
        json!({"$or": [eq("id", json!(d)), eq("feedback_type", json!("custom"))]}),
    ] {
        api.post("/feedback/purge", &purge(bad)).await.err(400);
    }
    assert_eq!(ids(&by_ref(&api, &target).await), [d.as_str()]);

    // Replace: the old row goes, the new one (new id) comes.
    let body = common::merge(
        item(P, &target, "custom", json!({"v": "new"}), json!({})),
        json!({"feedback_id": d}),
    );
    let r = api.post("/feedback/replace", &body).await.ok();
    let new_id = r["id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, d);
    assert_eq!(r["payload"], json!({"v": "new"}));
    let rows = by_ref(&api, &target).await;
    assert_eq!(ids(&rows), [new_id]);
    assert_eq!(rows[0]["payload"], json!({"v": "new"}));
}

#[tokio::test]
async fn bad_input_and_tenancy() {
    let server = Server::start();
    let api = server.admin();
    let target = call_ref(P, &uid());

    // Targets must be in the request's project.
    let wrong = item(P, &call_ref("ent/elsewhere", "c"), "custom", json!({}), json!({}));
    assert!(api.post("/feedback/create", &wrong).await.err(400).contains("not in project"));
    api.post("/feedback/batch/create", &json!({"batch": [wrong.clone()]})).await.err(422);
    let bad_ref = item(P, "not-a-ref", "custom", json!({}), json!({}));
    api.post("/feedback/create", &bad_ref).await.err(400);
    api.post("/feedback/create", &item(P, &target, "", json!({}), json!({}))).await.err(400);

    // Payloads over 1 MiB: 413.
    let big = item(P, &target, "custom", json!({"x": "a".repeat(1 << 20)}), json!({}));
    assert!(api.post("/feedback/create", &big).await.err(413).contains("payload"));
    api.post("/feedback/batch/create", &json!({"batch": [big]})).await.err(413);

    // Queries: unknown fields in sort, query or projection; bad paging.
    for body in [
        json!({"sort_by": [{"field": "nope", "direction": "asc"}]}),
        json!({"sort_by": [{"field": "payload", "direction": "asc"}]}),
        json!({"query": {"$expr": eq("bogus", json!("x"))}}),
        json!({"query": {"$expr": {"$eq": [{"$getField": "payload.x"}, {"$literal": 1}]}}}),
        json!({"fields": ["id", "bogus"]}),
        json!({"limit": -1}),
    ] {
        let body = common::merge(json!({"project_id": P}), body);
        api.post("/feedback/query", &body).await.err(400);
    }
    assert_eq!(by_ref(&api, &target).await, Vec::<Value>::new(), "nothing was stored");

    // Auth: a key for another entity is refused everywhere; no key is 401.
    let alice = server.client(Some(&server.create_entity_key("alice")));
    let ok_item = item(P, &target, "custom", json!({}), json!({}));
    let purge = json!({"project_id": P, "query": {"$expr": eq("id", json!("x"))}});
    for (path, body) in [
        ("/feedback/create", ok_item.clone()),
        ("/feedback/batch/create", json!({"batch": [ok_item.clone()]})),
        ("/feedback/query", json!({"project_id": P})),
        ("/feedback/purge", purge.clone()),
        ("/feedback/replace", common::merge(ok_item.clone(), json!({"feedback_id": "x"}))),
    ] {
        alice.post(path, &body).await.err(403);
        server.client(None).post(path, &body).await.err(401);
    }
    // Alice's own project works, and she only sees her own feedback.
    let mine = call_ref("alice/p", "c");
    let r = alice
        .post("/feedback/create", &item("alice/p", &mine, "custom", json!({"a": 1}), json!({})))
        .await
        .ok();
    assert_eq!(r["wb_user_id"], json!("alice"));
    let q = alice.post("/feedback/query", &json!({"project_id": "alice/p"})).await.ok();
    assert_eq!(q["total_count"], json!(1));
}

/// Three calls; runnable (scorer) feedback on two, a reaction on one.
async fn scored_calls(api: &Api, project: &str) -> [String; 3] {
    let c = [uid(), uid(), uid()];
    let batch = c.iter().map(|id| complete(project, id, json!({}))).collect();
    api.complete_calls(project, batch).await;
    let scorer = format!("weave:///{project}/op/my_scorer:abc");
    let runnable = |id: &str, output: Value| {
        item(
            project,
            &call_ref(project, id),
            "wandb.runnable.my_scorer",
            json!({"output": output}),
            json!({"id": uid(), "runnable_ref": scorer, "call_ref": call_ref(project, &uid())}),
        )
    };
    let batch = json!({"batch": [
        runnable(&c[0], json!({"score": 0.9, "ok": true})),
        runnable(&c[1], json!({"score": 0.2, "ok": false})),
        item(project, &call_ref(project, &c[2]), "wandb.reaction.1", json!({"emoji": "👎"}),
             json!({"id": uid()})),
    ]});
    api.post("/feedback/batch/create", &batch).await.ok();
    c
}

#[tokio::test]
async fn include_feedback_on_calls() {
    let server = Server::start();
    let api = server.admin();
    let project = "ent/fbcalls";
    let c = scored_calls(&api, project).await;
    let extra = item(
        project,
        &call_ref(project, &c[0]),
        "wandb.note.1",
        json!({"note": "n"}),
        json!({"id": uid()}),
    );
    api.post("/feedback/create", &extra).await.ok();

    let rows = api
        .stream(&json!({"project_id": project, "include_feedback": true,
                        "sort_by": [{"field": "id", "direction": "asc"}]}))
        .await;
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let id = row["id"].as_str().unwrap();
        let fb = row["summary"]["weave"]["feedback"].as_array().unwrap_or_else(|| panic!("{row}"));
        assert_eq!(row["summary"]["weave"]["status"], json!("success"), "derived keys kept");
        let types: Vec<&str> = fb.iter().map(|f| f["feedback_type"].as_str().unwrap()).collect();
        let want: &[&str] = if id == c[0] {
            &["wandb.runnable.my_scorer", "wandb.note.1"]
        } else if id == c[1] {
            &["wandb.runnable.my_scorer"]
        } else {
            &["wandb.reaction.1"]
        };
        assert_eq!(types, want, "{row}");
        for f in fb {
            assert_eq!(f["weave_ref"], json!(call_ref(project, id)));
            assert!(f["created_at"].is_string() && f["id"].is_string(), "{f}");
        }
    }
    assert_eq!(
        rows.iter().find(|r| r["id"] == json!(c[1])).unwrap()["summary"]["weave"]["feedback"][0]["payload"],
        json!({"output": {"score": 0.2, "ok": false}})
    );

    // Without the flag there is no feedback key.
    let plain = api.stream(&json!({"project_id": project})).await;
    assert!(plain.iter().all(|r| r["summary"]["weave"].get("feedback").is_none()));
}

#[tokio::test]
async fn feedback_fields_in_call_queries() {
    let server = Server::start();
    let api = server.admin();
    let project = "ent/fbq";
    let c = scored_calls(&api, project).await;
    let run = |path: &str| format!("feedback.[wandb.runnable.my_scorer].{path}");
    let get = |f: &str| json!({"$getField": f});
    let find = |e: Value, sort: Value| find_calls(&api, project, e, sort);
    let by_id = json!([{"field": "id", "direction": "asc"}]);
    let mut scored = vec![c[0].clone(), c[1].clone()];
    scored.sort();

    // get_calls(scored_by="my_scorer"): output exists.
    let exists = json!({"$not": [{"$eq": [get(&run("payload.output")), {"$literal": ""}]}]});
    assert_eq!(find(json!({"$and": [exists]}), by_id.clone()).await, scored);
    // A leaf of the output.
    let leaf = json!({"$not": [{"$eq": [get(&run("payload.output.score")), {"$literal": ""}]}]});
    assert_eq!(find(leaf, by_id.clone()).await, scored);
    // get_calls(scored_by=<scorer ref>): runnable_ref equality.
    let uri = format!("weave:///{project}/op/my_scorer:abc");
    assert_eq!(
        find(json!({"$eq": [get(&run("runnable_ref")), {"$literal": uri}]}), by_id.clone()).await,
        scored
    );
    // Numeric comparison through $convert, booleans as strings, any type with `*`.
    let gt = json!({"$gt": [{"$convert": {"input": get(&run("payload.output.score")), "to": "double"}},
                            {"$literal": 0.5}]});
    assert_eq!(find(gt, by_id.clone()).await, [c[0].clone()]);
    assert_eq!(
        find(
            json!({"$eq": [get(&run("payload.output.ok")), {"$literal": "false"}]}),
            by_id.clone()
        )
        .await,
        [c[1].clone()]
    );
    assert_eq!(
        find(
            json!({"$eq": [get("feedback.[*].payload.emoji"), {"$literal": "👎"}]}),
            by_id.clone()
        )
        .await,
        [c[2].clone()]
    );
    // No feedback of the type reads as '' (and as null).
    assert_eq!(
        find(json!({"$eq": [get(&run("payload.output")), {"$literal": null}]}), by_id.clone())
            .await,
        [c[2].clone()]
    );
    // Sorting by a feedback value.
    let sort = json!([{"field": run("payload.output.score"), "direction": "desc"}]);
    assert_eq!(find(exists_any(), sort).await[..2], [c[0].clone(), c[1].clone()]);
    // Bad feedback fields are 400.
    for bad in ["feedback.[x]", "feedback.[x].payload", "feedback.[x].creator", "feedback.nope"] {
        let body = json!({"project_id": project, "query": {"$expr": {"$eq": [get(bad), {"$literal": ""}]}}});
        api.post("/calls/stream_query", &body).await.err(400);
    }
}

/// The ids `/calls/stream_query` returns for a query, checked against `/calls/query_stats`.
async fn find_calls(api: &Api, project: &str, e: Value, sort: Value) -> Vec<String> {
    let body = json!({"project_id": project, "query": {"$expr": e}, "sort_by": sort});
    let rows = api.stream(&body).await;
    let count = api.count(&json!({"project_id": project, "query": body["query"]})).await;
    assert_eq!(count as usize, rows.len(), "query_stats agrees with stream_query");
    ids(&rows)
}

fn exists_any() -> Value {
    json!({"$eq": [{"$literal": "1"}, {"$literal": "1"}]})
}

//! Annotation queues over HTTP (docs/api/annotation-queues.md): create, read, list (JSONL),
//! update, delete; adding calls (duplicates, unknown calls), listing items with filters, sort,
//! paging and positions; an annotator's progress and its transitions; stats; the bounds (each a
//! 400 with its reason) and tenancy. Every write is read back.

mod common;

use common::{Api, Server, complete, uid};
use serde_json::{Value, json};

const P: &str = "ent/aq";

async fn create_queue(api: &Api, project: &str, name: &str) -> String {
    let body = json!({"project_id": project, "name": name, "scorer_refs": [], "wb_user_id": null});
    api.post("/annotation_queues", &body).await.ok()["id"].as_str().unwrap().to_owned()
}

async fn calls(api: &Api, project: &str, ops: &[&str]) -> Vec<String> {
    let ids: Vec<String> = ops.iter().map(|_| uid()).collect();
    let batch = ids
        .iter()
        .zip(ops)
        .enumerate()
        .map(|(i, (id, op))| {
            complete(project, id, json!({"op_name": op, "started_at": common::t(i as f64)}))
        })
        .collect();
    api.complete_calls(project, batch).await;
    ids
}

async fn items(api: &Api, queue: &str, body: Value) -> Vec<Value> {
    let body = common::merge(json!({"project_id": P}), body);
    let r = api.post(&format!("/annotation_queues/{queue}/items/query"), &body).await.ok();
    r["items"].as_array().unwrap().clone()
}

fn field(rows: &[Value], f: &str) -> Vec<Value> {
    rows.iter().map(|r| r[f].clone()).collect()
}

async fn progress(api: &Api, queue: &str, item: &str, state: &str) -> common::Resp {
    let body = json!({"project_id": P, "annotation_state": state});
    api.post(&format!("/annotation_queues/{queue}/items/{item}/progress"), &body).await
}

#[tokio::test]
async fn queues_read_back_update_and_delete() {
    let server = Server::start();
    let api = server.admin();
    let scorer = format!("weave:///{P}/object/Rubric:abc");
    let body = json!({"project_id": P, "name": "First", "description": "d",
                      "scorer_refs": [scorer]});
    let a = api.post("/annotation_queues", &body).await.ok()["id"].as_str().unwrap().to_owned();
    let b = create_queue(&api, P, "second ONE").await;

    let q = api.get(&format!("/annotation_queues/{a}?project_id={P}")).await.ok()["queue"].clone();
    assert_eq!(
        (&q["id"], &q["name"], &q["description"], &q["scorer_refs"], &q["created_by"]),
        (&json!(a), &json!("First"), &json!("d"), &json!([scorer]), &json!("admin"))
    );
    assert!(q["deleted_at"].is_null() && q["created_at"] == q["updated_at"], "{q}");

    let list = |body: Value| {
        let api = api.clone();
        async move {
            let body = common::merge(json!({"project_id": P}), body);
            let rows = api.post("/annotation_queues/query", &body).await.jsonl();
            rows.iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }
    };
    assert_eq!(list(json!({})).await, [b.clone(), a.clone()], "newest first");
    assert_eq!(
        list(json!({"name": "one"})).await,
        std::slice::from_ref(&b),
        "case-insensitive substring"
    );
    assert_eq!(list(json!({"name": "%"})).await, Vec::<String>::new(), "no wildcards");
    let by_name = json!({"sort_by": [{"field": "name", "direction": "asc"}], "limit": 1});
    assert_eq!(list(by_name).await, std::slice::from_ref(&a));
    assert_eq!(list(json!({"offset": 1})).await, std::slice::from_ref(&a));

    let upd = json!({"project_id": P, "name": "Renamed", "description": null, "scorer_refs": []});
    let u = api.put(&format!("/annotation_queues/{a}"), &upd).await.ok()["queue"].clone();
    assert_eq!(
        (&u["name"], &u["description"], &u["scorer_refs"]),
        (&json!("Renamed"), &json!("d"), &json!([]))
    );
    let again =
        api.get(&format!("/annotation_queues/{a}?project_id={P}")).await.ok()["queue"].clone();
    assert_eq!(again, u);

    let del =
        api.delete(&format!("/annotation_queues/{b}?project_id={P}")).await.ok()["queue"].clone();
    assert!(del["deleted_at"].is_string(), "{del}");
    api.get(&format!("/annotation_queues/{b}?project_id={P}")).await.err(404);
    api.delete(&format!("/annotation_queues/{b}?project_id={P}")).await.err(404);
    api.put(&format!("/annotation_queues/{b}"), &upd).await.err(404);
    assert_eq!(list(json!({})).await, [a]);
}

#[tokio::test]
async fn items_progress_and_stats() {
    let server = Server::start();
    let api = server.admin();
    let ids = calls(&api, P, &["op_a", "op_b", "op_a"]).await;
    let q = create_queue(&api, P, "items").await;
    let add = |call_ids: Value, fields: Value| {
        let api = api.clone();
        let q = q.clone();
        async move {
            let body = json!({"project_id": P, "call_ids": call_ids, "display_fields": fields});
            api.post(&format!("/annotation_queues/{q}/items"), &body).await.ok()
        }
    };
    let r = add(json!([ids[2], ids[0], ids[0], "missing"]), json!(["inputs.x"])).await;
    assert_eq!((r["added_count"].clone(), r["duplicates"].clone()), (json!(2), json!(1)));
    let r = add(json!([ids[0], ids[1]]), json!([])).await;
    assert_eq!((r["added_count"].clone(), r["duplicates"].clone()), (json!(1), json!(1)));

    let all = items(&api, &q, json!({})).await;
    assert_eq!(field(&all, "call_id"), json!([ids[2], ids[0], ids[1]]).as_array().unwrap().clone());
    assert_eq!(field(&all, "annotation_state"), vec![json!("unstarted"); 3]);
    assert_eq!(all[0]["display_fields"], json!(["inputs.x"]));
    assert_eq!(all[2]["display_fields"], json!([]));
    assert_eq!(
        (&all[1]["call_op_name"], &all[1]["call_trace_id"]),
        (&json!("op_a"), &json!(format!("trace-{}", ids[0])))
    );
    assert!(all.iter().all(|i| i["position_in_queue"].is_null() && i["added_by"] == "admin"));

    let cases: Vec<(Value, Vec<&String>)> = vec![
        (json!({"filter": {"call_op_name": "op_a"}}), vec![&ids[2], &ids[0]]),
        (json!({"filter": {"call_id": ids[1]}}), vec![&ids[1]]),
        (json!({"filter": {"id": all[0]["id"]}}), vec![&ids[2]]),
        (json!({"filter": {"added_by": "nobody"}}), vec![]),
        (
            json!({"sort_by": [{"field": "call_started_at", "direction": "asc"}]}),
            vec![&ids[0], &ids[1], &ids[2]],
        ),
        (
            json!({"sort_by": [{"field": "call_op_name", "direction": "desc"}], "limit": 1}),
            vec![&ids[1]],
        ),
        (json!({"offset": 2}), vec![&ids[1]]),
    ];
    for (body, want) in cases {
        let got = items(&api, &q, body.clone()).await;
        let want: Vec<Value> = want.into_iter().map(|s| json!(s)).collect();
        assert_eq!(field(&got, "call_id"), want, "{body}");
    }

    // Progress: the key's user; transitions as documented; the item comes back with its state.
    let item = all[1]["id"].as_str().unwrap().to_owned();
    let r = progress(&api, &q, &item, "in_progress").await.ok();
    assert_eq!(
        (&r["item"]["annotation_state"], &r["item"]["annotator_user_id"]),
        (&json!("in_progress"), &json!("admin"))
    );
    for bad in ["in_progress", "unstarted", "done"] {
        let msg = progress(&api, &q, &item, bad).await.err(400);
        assert!(msg.contains("annotation") || msg.contains("state"), "{bad}: {msg}");
    }
    progress(&api, &q, &item, "completed").await.ok();
    progress(&api, &q, &item, "skipped").await.err(400);
    progress(&api, &q, "no-such-item", "completed").await.err(404);
    progress(&api, &uid(), &item, "completed").await.err(404);
    // Another annotator works on the same item independently; the newest change is the item's.
    let bob = server.client(Some(&server.create_entity_key("ent")));
    let r = progress(&bob, &q, &item, "in_progress").await.ok();
    assert_eq!(
        (&r["item"]["annotation_state"], &r["item"]["annotator_user_id"]),
        (&json!("in_progress"), &json!("ent"))
    );
    progress(&api, &q, all[2]["id"].as_str().unwrap(), "skipped").await.ok();

    let todo = items(
        &api,
        &q,
        json!({"filter": {"annotation_states": ["unstarted", "skipped"]},
                                       "include_position": true}),
    )
    .await;
    assert_eq!(field(&todo, "call_id"), vec![json!(ids[2]), json!(ids[1])]);
    assert_eq!(field(&todo, "position_in_queue"), vec![json!(1), json!(3)]);

    let other = create_queue(&api, P, "empty").await;
    let body = json!({"project_id": P, "queue_ids": [q, other, "unknown"]});
    let stats = api.post("/annotation_queues/stats", &body).await.ok()["stats"].clone();
    assert_eq!(
        stats,
        json!([
            {"queue_id": q, "total_items": 3, "completed_items": 2},
            {"queue_id": other, "total_items": 0, "completed_items": 0},
            {"queue_id": "unknown", "total_items": 0, "completed_items": 0},
        ])
    );
}

#[tokio::test]
async fn bounds_and_bad_input_are_400s() {
    let server = Server::start();
    let api = server.admin();
    let q = create_queue(&api, P, "b").await;
    let long = "x".repeat(257);
    let creates = [
        (json!({"project_id": P, "name": "", "scorer_refs": []}), "queue name"),
        (json!({"project_id": P, "name": long, "scorer_refs": []}), "queue name"),
        (json!({"project_id": P, "name": "n", "scorer_refs": ["nope"]}), "ref"),
        (
            json!({"project_id": P, "name": "n", "scorer_refs": [format!("weave:///{P}/call/x")]}),
            "not an object",
        ),
        (
            json!({"project_id": P, "name": "n", "scorer_refs": vec![format!("weave:///{P}/object/s:d"); 101]}),
            "at most 100",
        ),
        (
            json!({"project_id": P, "name": "n", "description": "d".repeat(10_001), "scorer_refs": []}),
            "description",
        ),
        (json!({"project_id": P, "name": "n"}), "scorer_refs"),
    ];
    for (body, reason) in creates {
        let msg = api.post("/annotation_queues", &body).await.err(400);
        assert!(msg.contains(reason), "{msg}");
    }
    let adds = [
        (
            json!({"project_id": P, "call_ids": vec!["c"; 1001], "display_fields": []}),
            "at most 1000",
        ),
        (json!({"project_id": P, "call_ids": [""], "display_fields": []}), "call_ids"),
        (
            json!({"project_id": P, "call_ids": ["c"], "display_fields": vec!["f"; 101]}),
            "at most 100",
        ),
        (
            json!({"project_id": P, "call_ids": ["c"], "display_fields": ["f".repeat(1025)]}),
            "display_fields",
        ),
    ];
    for (body, reason) in adds {
        let msg = api.post(&format!("/annotation_queues/{q}/items"), &body).await.err(400);
        assert!(msg.contains(reason), "{msg}");
    }
    let sort = json!({"project_id": P, "sort_by": [{"field": "scorer_refs", "direction": "asc"}]});
    api.post("/annotation_queues/query", &sort).await.err(400);
    api.post(&format!("/annotation_queues/{q}/items/query"), &sort).await.err(400);
    api.post(
        &format!("/annotation_queues/{q}/items/query"),
        &json!({"project_id": P, "limit": -1}),
    )
    .await
    .err(400);
    let stats = json!({"project_id": P, "queue_ids": vec!["q"; 1001]});
    api.post("/annotation_queues/stats", &stats).await.err(400);
    api.get(&format!("/annotation_queues/{q}")).await.err(400);
    api.get(&format!("/annotation_queues/{}?project_id={P}", "q".repeat(129))).await.err(400);
    let add = json!({"project_id": P, "call_ids": ["c"], "display_fields": []});
    api.post(&format!("/annotation_queues/{}/items", uid()), &add).await.err(404);
}

#[tokio::test]
async fn keys_see_only_their_entity() {
    let server = Server::start();
    let admin = server.admin();
    let ids = calls(&admin, P, &["op"]).await;
    let q = create_queue(&admin, P, "private").await;
    let add = json!({"project_id": P, "call_ids": ids, "display_fields": []});
    admin.post(&format!("/annotation_queues/{q}/items"), &add).await.ok();
    let item = items(&admin, &q, json!({})).await[0]["id"].as_str().unwrap().to_owned();

    let alice = server.client(Some(&server.create_entity_key("alice")));
    let cases: Vec<common::Resp> = vec![
        alice
            .post("/annotation_queues", &json!({"project_id": P, "name": "x", "scorer_refs": []}))
            .await,
        alice.get(&format!("/annotation_queues/{q}?project_id={P}")).await,
        alice.post("/annotation_queues/query", &json!({"project_id": P})).await,
        alice.put(&format!("/annotation_queues/{q}"), &json!({"project_id": P, "name": "x"})).await,
        alice.delete(&format!("/annotation_queues/{q}?project_id={P}")).await,
        alice.post(&format!("/annotation_queues/{q}/items"), &add).await,
        alice.post(&format!("/annotation_queues/{q}/items/query"), &json!({"project_id": P})).await,
        alice.post("/annotation_queues/stats", &json!({"project_id": P, "queue_ids": [q]})).await,
        progress(&alice, &q, &item, "completed").await,
    ];
    for r in cases {
        r.err(403);
    }
    // Alice's own project does not see the queue either (queues belong to their project).
    alice.get(&format!("/annotation_queues/{q}?project_id=alice/p")).await.err(404);
    let own = alice
        .post(&format!("/annotation_queues/{q}/items/query"), &json!({"project_id": "alice/p"}))
        .await
        .ok();
    assert_eq!(own["items"], json!([]));
    // Nothing changed for the admin.
    let mine = items(&admin, &q, json!({})).await;
    assert_eq!((mine.len(), mine[0]["annotation_state"].clone()), (1, json!("unstarted")));
    let q_back = admin.get(&format!("/annotation_queues/{q}?project_id={P}")).await.ok();
    assert_eq!(q_back["queue"]["name"], json!("private"));
}
